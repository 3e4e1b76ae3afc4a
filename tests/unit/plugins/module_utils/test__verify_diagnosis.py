"""The message a person reads when llm_verify fails: where GPUStack reaches each instance, the node that cannot serve
first, then the failed checks and each instance's log (the same through Ansible: modules/test_llm_verify_nodes.py)."""

from __future__ import annotations

from ansible_collections.pairserve.llm.plugins.module_utils._openai_failures import TOKENIZER_FIX
from ansible_collections.pairserve.llm.plugins.module_utils._verify_diagnosis import (diagnosis, node_lines, probes,
                                                                                      reach_urls, with_reach)


def test_diagnosis_names_target_check_class_and_instance_log():
    results = [{"check": "images", "ok": False, "status": 400, "class": "tokenizer_truncation", "permanent": True,
                "message": TOKENIZER_FIX}]
    instances = [{"name": "qwen-node-a-1", "worker_name": "node-a", "state": "running", "log_tail": "INFO one\nERROR two"}]
    text = diagnosis("qwen", results, instances)
    assert "[qwen] check images failed (HTTP 400, permanent: tokenizer_truncation)" in text
    assert "instance qwen-node-a-1 on node-a: state running" in text and "    ERROR two" in text


def test_reach_urls_follow_gpustacks_own_rule():
    workers = [{"id": 7, "name": "node-b", "ip": "10.0.0.2", "advertise_address": None, "port": 10170}]
    inst = {"worker_id": 7, "worker_ip": "10.0.0.2", "port": 40100}
    assert reach_urls(inst, workers) == {"worker": "http://10.0.0.2:10170/healthz",
                                         "replica": "http://10.0.0.2:40100/health"}
    workers[0]["advertise_address"] = "node-b.lan"
    assert reach_urls(inst, workers)["worker"] == "http://node-b.lan:10170/healthz"
    assert reach_urls({"worker_id": 8}, workers) == {"worker": None, "replica": None}


def test_the_node_whose_worker_does_not_answer_leads_the_diagnosis():
    down = {"url": "http://10.0.0.2:10170/healthz", "ok": False, "error": "unreachable: [Errno 111] Connection refused"}
    up = {"url": "http://10.0.0.1:10150/healthz", "ok": True, "error": "HTTP 200"}
    instances = [{"name": "qwen-node-a-1", "worker_name": "node-a", "state": "running", "reach": {"worker": up}},
                 {"name": "qwen-node-b-1", "worker_name": "node-b", "state": "running", "reach": {"worker": down}}]
    results = [{"check": "text", "ok": False, "status": 503, "class": "unavailable", "permanent": False,
                "message": "HTTP 503: a target has no running instance or its backend is unreachable"}]
    lines = diagnosis("qwen", results, instances).splitlines()
    assert lines[0].startswith("[node-b] the worker at http://10.0.0.2:10170 does not answer (unreachable: "), lines
    assert "GPUStack still lists it as running" in lines[0] and "node-a" not in lines[0]
    assert lines[1].startswith("[qwen] check text failed (HTTP 503"), lines
    assert "instance qwen-node-a-1 on node-a: state running" in lines
    assert "instance qwen-node-b-1 on node-b: state unreachable (GPUStack lists it as running; its worker does not " \
           "answer)" in lines


WORKERS = [{"id": 1, "name": "node-a", "ip": "10.0.0.1", "port": 10150},
           {"id": 2, "name": "node-b", "ip": "10.0.0.2", "port": 10170}]
INSTANCES = [{"name": "qwen-node-a-x", "worker_id": 1, "worker_name": "node-a", "worker_ip": "10.0.0.1", "port": 40000,
              "state": "running"},
             {"name": "qwen-node-b-y", "worker_id": 2, "worker_name": "node-b", "worker_ip": "10.0.0.2", "port": 40100,
              "state": "running"},
             {"name": "qwen-node-c-z", "worker_id": 3, "worker_name": "node-c", "state": "pending"}]


def test_probes_list_each_instances_worker_and_replica_once_and_leave_out_what_is_not_known():
    assert probes(INSTANCES, WORKERS) == [
        {"instance": "qwen-node-a-x", "node": "node-a", "kind": "worker", "url": "http://10.0.0.1:10150/healthz"},
        {"instance": "qwen-node-a-x", "node": "node-a", "kind": "replica", "url": "http://10.0.0.1:40000/health"},
        {"instance": "qwen-node-b-y", "node": "node-b", "kind": "worker", "url": "http://10.0.0.2:10170/healthz"},
        {"instance": "qwen-node-b-y", "node": "node-b", "kind": "replica", "url": "http://10.0.0.2:40100/health"}]


def test_the_answers_to_the_probes_name_the_node_first_and_say_gpustack_still_lists_it_running():
    answers = {"http://10.0.0.1:10150/healthz": (200, None), "http://10.0.0.1:40000/health": (200, None),
               "http://10.0.0.2:10170/healthz": (None, "Connection refused"),
               "http://10.0.0.2:40100/health": (None, "Connection refused")}
    lines = node_lines(with_reach(INSTANCES, WORKERS, answers))
    assert len(lines) == 1, lines
    assert lines[0].startswith("[node-b] the worker at http://10.0.0.2:10170 does not answer (Connection refused): "
                               "GPUStack reaches instance qwen-node-b-y only through it"), lines
    assert "GPUStack still lists it as running" in lines[0]
    # the worker answers, its replica does not
    answers["http://10.0.0.2:10170/healthz"] = (200, None)
    answers["http://10.0.0.2:40100/health"] = (503, None)
    assert node_lines(with_reach(INSTANCES, WORKERS, answers)) == [
        "[node-b] instance qwen-node-b-y does not answer at http://10.0.0.2:40100/health (HTTP 503); GPUStack still "
        "lists it as running."]
    # every address answered, or none was asked: nothing to say
    answers["http://10.0.0.2:40100/health"] = (200, None)
    assert node_lines(with_reach(INSTANCES, WORKERS, answers)) == []
    assert node_lines(with_reach(INSTANCES, WORKERS, {})) == []
