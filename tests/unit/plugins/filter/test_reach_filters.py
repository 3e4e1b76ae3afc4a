"""The reach filters (plugins/filter/reach.py) run through Ansible as roles/verify/tasks/reach.yml calls them: the
addresses to ask for each instance, then, from uri's results over them, the nodes that did not answer, node first."""

from __future__ import annotations

from support.ansible_runner import run_local_play

WORKERS = [{"id": 1, "name": "node-a", "ip": "10.0.0.1", "port": 10150},
           {"id": 2, "name": "node-b", "ip": "10.0.0.2", "advertise_address": "node-b.lan", "port": 10170}]
INSTANCES = [{"name": "qwen-node-a-x", "worker_id": 1, "worker_name": "node-a", "worker_ip": "10.0.0.1", "port": 40000,
              "state": "running"},
             {"name": "qwen-node-b-y", "worker_id": 2, "worker_name": "node-b", "worker_ip": "10.0.0.2", "port": 40100,
              "state": "running"}]
REFUSED = "Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111] Connection refused>"


def test_the_reach_filters_name_the_node_whose_worker_did_not_answer(tmp_path):
    # uri's results over a loop of replica_reach_urls' entries: item is the entry, status -1 when nothing answered.
    results = [
        {"item": {"url": "http://10.0.0.1:10150/healthz"}, "status": 200, "msg": "OK"},
        {"item": {"url": "http://10.0.0.1:40000/health"}, "status": 200, "msg": "OK"},
        {"item": {"url": "http://node-b.lan:10170/healthz"}, "status": -1, "msg": REFUSED},
        {"item": {"url": "http://10.0.0.2:40100/health"}, "status": -1, "msg": REFUSED},
    ]
    facts = run_local_play(tmp_path, "Reach filters", [
        {"name": "Urls", "ansible.builtin.set_fact": {
            "urls": "{{ instances | pairserve.llm.replica_reach_urls(workers) }}"}},
        {"name": "Problems", "ansible.builtin.set_fact": {
            "problems": "{{ instances | pairserve.llm.replica_reach_problems(workers, results) }}"}},
        {"name": "Nothing", "ansible.builtin.set_fact": {
            "nothing": "{{ instances | pairserve.llm.replica_reach_problems(workers, results[:2]) }}"}},
        {"name": "Refused", "ansible.builtin.set_fact": {
            "bad": "{{ {'not': 'a list'} | pairserve.llm.replica_reach_urls(workers) }}"}, "ignore_errors": True},
    ], {"instances": INSTANCES, "workers": WORKERS, "results": results}).by_task
    urls = facts["Urls"]["ansible_facts"]["urls"]
    assert [u["url"] for u in urls] == ["http://10.0.0.1:10150/healthz", "http://10.0.0.1:40000/health",
                                        "http://node-b.lan:10170/healthz", "http://10.0.0.2:40100/health"]
    assert [(u["node"], u["kind"]) for u in urls][2:] == [("node-b", "worker"), ("node-b", "replica")]
    problems = facts["Problems"]["ansible_facts"]["problems"]
    assert len(problems) == 1 and problems[0].startswith(
        "[node-b] the worker at http://node-b.lan:10170 does not answer (%s)" % REFUSED), problems
    assert facts["Nothing"]["ansible_facts"]["nothing"] == []
    assert facts["Refused"]["_status"] == "failed"
    assert "expected GPUStack's instance records and worker records" in facts["Refused"]["msg"]
