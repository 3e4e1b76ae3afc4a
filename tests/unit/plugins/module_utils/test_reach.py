"""Where GPUStack 2.2.3 reaches a replica (module_utils/reach.py): its worker's /healthz, the replica's /health, and
what the uri probes of those addresses answered."""

from __future__ import annotations

from ansible_collections.pairserve.llm.plugins.module_utils import reach

WORKER = {"id": 2, "name": "node-b", "ip": "10.0.0.2", "advertise_address": None, "port": 10170}
INSTANCE = {"name": "qwen-node-b-y", "worker_id": 2, "worker_ip": "10.0.0.2", "port": 40100}


def test_the_worker_is_asked_at_its_advertised_address_else_its_ip():
    assert reach.worker_health_url(WORKER) == "http://10.0.0.2:10170/healthz"
    assert reach.worker_health_url(dict(WORKER, advertise_address="node-b.lan")) == "http://node-b.lan:10170/healthz"
    assert reach.worker_health_url(dict(WORKER, port=None)) is None
    assert reach.worker_health_url({}) is None and reach.worker_health_url(None) is None


def test_the_replica_is_asked_on_its_worker_at_its_port():
    assert reach.replica_health_url(INSTANCE) == "http://10.0.0.2:40100/health"
    assert reach.replica_health_url(dict(INSTANCE, port=None)) is None


def test_an_instance_runs_on_the_worker_of_its_worker_id():
    assert reach.worker_of(INSTANCE, [dict(WORKER, id=1, name="node-a"), WORKER])["name"] == "node-b"
    assert reach.worker_of(dict(INSTANCE, worker_id=9), [WORKER]) == {}


def test_answers_read_the_uri_results_by_the_address_asked():
    probes = [
        {"item": "http://10.0.0.1:10150/healthz", "status": 200, "msg": "OK (unknown bytes)"},
        {"item": {"url": "http://10.0.0.2:10170/healthz", "node": "node-b"}, "status": -1,
         "msg": "Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111] Connection refused>"},
        {"url": "http://10.0.0.2:40100/health", "status": 503, "msg": "Status code was 503 and not [200]"},
        {"item": "http://10.0.0.3:1/healthz", "skipped": True},
        "not a result",
    ]
    assert reach.answers(probes) == {
        "http://10.0.0.1:10150/healthz": (200, None),
        "http://10.0.0.2:10170/healthz": (None, probes[1]["msg"]),
        "http://10.0.0.2:40100/health": (503, "Status code was 503 and not [200]"),
    }
    assert reach.answers(None) == {}
