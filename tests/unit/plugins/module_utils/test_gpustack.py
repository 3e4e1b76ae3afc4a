"""Tests of module_utils/gpustack.py: GpuStackClient against a real HTTP server on 127.0.0.1 (retries, backoff, auth,
errors, pagination, cluster lookup, key probing, backend versions), and its pure helpers (field_diff, the diff dicts,
route target reweighing). The env and cache-directory helpers are tested with gpustack_model
(tests/unit/plugins/modules/test_gpustack_model_env.py), the backend version names in test_backend_version_name.py."""

from __future__ import annotations

import base64
import socket
from urllib.parse import parse_qs, urlparse

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import gpustack, urls_session
from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import (
    GpuStackClient,
    GpuStackError,
    field_diff,
)
from support.local_http import JsonStub, gpustack_page


class Scripted(JsonStub):
    """A local server answering from a queue of (status, body) per request; `seen` keeps what it got."""

    def __init__(self):
        self.queue = []
        self.default = (200, {})
        super().__init__(self.answer)

    def answer(self, request):
        status, payload = self.queue.pop(0) if self.queue else self.default
        return status, payload(request.target) if callable(payload) else payload


@pytest.fixture(name="server")
def server_fixture():
    srv = Scripted()
    yield srv
    srv.close()


def client_for(url, **kw):
    sleeps = []
    kw.setdefault("api_key", "k-123")
    client = GpuStackClient(url, sleep=sleeps.append, **kw)
    return client, sleeps


def test_get_retries_5xx_with_exponential_backoff(server):
    server.queue = [(503, {"message": "warming up"}), (502, b"bad gateway"), (200, {"ok": True})]
    client, sleeps = client_for(server.url, retries=3)
    assert client.get("/v2/workers") == {"ok": True}
    assert len(server.seen) == 3
    assert sleeps == [1.0, 2.0]


def test_persistent_5xx_quotes_server_message_and_status(server):
    server.default = (500, {"code": 500, "reason": "InternalServerError", "message": "Failed to update model: boom"})
    client, sleeps = client_for(server.url, retries=2)
    with pytest.raises(GpuStackError) as info:
        client.put("/v2/models/3", {"name": "m"})
    assert info.value.status == 500
    assert info.value.server_message == "Failed to update model: boom"
    assert "HTTP 500: Failed to update model: boom" in str(info.value)
    assert len(server.seen) == 3 and sleeps == [1.0, 2.0]


def test_post_is_not_repeated_after_5xx(server):
    server.default = (500, {"message": "partial failure"})
    client, sleeps = client_for(server.url, retries=3)
    with pytest.raises(GpuStackError):
        client.post("/v2/models", {"name": "m"})
    assert [s.method for s in server.seen] == ["POST"]
    assert sleeps == []


def test_wrong_credentials_name_the_cause(server):
    server.default = (401, {"code": 401, "reason": "Unauthorized", "message": "Invalid authentication credentials"})
    client = client_for(server.url, api_key=None, username="admin", password="wrong")[0]
    with pytest.raises(GpuStackError) as info:
        client.get("/v2/users/me")
    msg = str(info.value)
    assert info.value.status == 401
    assert "Invalid authentication credentials" in msg and "username 'admin' / password" in msg
    expected = "Basic " + base64.b64encode(b"admin:wrong").decode()
    assert server.seen[0].headers.get("Authorization") == expected


def test_bearer_key_is_sent(server):
    client = client_for(server.url, api_key="gpustack_abc")[0]
    client.get("/v2/clusters")
    assert server.seen[0].headers.get("Authorization") == "Bearer gpustack_abc"


def test_one_tls_context_serves_every_call_and_each_call_authenticates(server, monkeypatch):
    # open_url loaded the CA store for every call (~40 ms of CPU each, http:// too); the client now builds one
    # context. Every call still carries its own credentials: nothing rides on a cookie from an earlier call.
    made = []
    real_make_context = urls_session.make_context
    monkeypatch.setattr(urls_session, "make_context", lambda **kw: made.append(kw) or real_make_context(**kw))
    client = client_for(server.url, api_key=None, username="admin", password="pw", validate_certs=False)[0]
    for dummy in range(3):
        client.get("/v2/workers")
    assert made == [{"validate_certs": False}]
    expected = "Basic " + base64.b64encode(b"admin:pw").decode()
    assert [s.headers.get("Authorization") for s in server.seen] == [expected] * 3


def test_fastapi_validation_detail_is_quoted(server):
    server.default = (422, {"detail": [{"loc": ["body", "replicas"], "msg": "Input should be >= 0"}]})
    client = client_for(server.url)[0]
    with pytest.raises(GpuStackError) as info:
        client.post("/v2/models", {"replicas": -1})
    assert "body.replicas: Input should be >= 0" in str(info.value)


def test_unreachable_server_is_retried_then_named():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client, sleeps = client_for("http://127.0.0.1:%d/" % port, retries=2, timeout=2)
    with pytest.raises(GpuStackError) as info:
        client.post("/v2/clusters", {"name": "c"})  # refused -> safe to retry even a POST
    msg = str(info.value)
    assert "cannot reach GPUStack at http://127.0.0.1:%d" % port in msg
    assert "after 3 attempt(s)" in msg and "refused" in msg.lower()
    assert sleeps == [1.0, 2.0]


def test_list_follows_pagination(server):
    items = [{"id": i, "name": "w%d" % i} for i in range(250)]

    def page(path):
        query = parse_qs(urlparse(path).query)
        number, per = int(query["page"][0]), int(query["perPage"][0])
        chunk = items[(number - 1) * per:number * per]
        return {"items": chunk, "pagination": {"page": number, "perPage": per, "total": 250, "totalPage": 3}}

    server.default = (200, page)
    client = client_for(server.url)[0]
    got = client.list("/v2/workers", {"cluster_id": 1})
    assert [i["id"] for i in got] == list(range(250))
    assert len(server.seen) == 3
    assert "cluster_id=1" in server.seen[0].target
    assert client.find("/v2/workers", "w249")["id"] == 249


def test_api_url_forms():
    assert GpuStackClient("http://h:30080/v2/", api_key="k").base_url == "http://h:30080"
    with pytest.raises(GpuStackError, match="not an http"):
        GpuStackClient("h:30080", api_key="k")


def test_field_diff_only_managed_keys():
    existing = {"name": "m", "replicas": 1, "env": {"A": "1"}, "ready_replicas": 0,
                "gpu_selector": {"gpu_ids": ["w:cuda:0"], "gpus_per_replica": None}}
    desired = {"name": "m", "replicas": 1, "env": {"A": "1"}, "gpu_selector": {"gpu_ids": ["w:cuda:0"]},
               "description": None}
    assert field_diff(desired, existing, subset_keys=("gpu_selector",)) == ([], {}, {})
    changed, before, after = field_diff(dict(desired, env={"A": "2"}), existing, subset_keys=("gpu_selector",))
    assert changed == ["env"] and before == {"env": {"A": "1"}} and after == {"env": {"A": "2"}}
    changed, before, after = field_diff(desired, None)
    assert changed == ["env", "gpu_selector", "name", "replicas"] and before["name"] is None and after["name"] == "m"


def test_an_empty_api_url_is_refused_and_an_https_url_keeps_its_scheme():
    with pytest.raises(GpuStackError, match="^api_url is empty"):
        GpuStackClient("", api_key="k")
    assert GpuStackClient("https://gpustack.lan/v2", api_key="k").base_url == "https://gpustack.lan"


@pytest.mark.parametrize("status,body,says,server_message", [
    (404, b"no such model\n", "HTTP 404: no such model (not found)", "no such model"),
    (403, {"message": "forbidden"}, "HTTP 403: forbidden (the credentials are valid but not allowed to do this "
                                    "(an inference-only API key?))", "forbidden"),
    (409, {"error": {"message": "name taken"}}, "HTTP 409: name taken", "name taken"),
    (400, {"detail": "bad cluster"}, "HTTP 400: bad cluster", "bad cluster"),
    (400, b"", "HTTP 400: (empty body)", None),
    (400, {"unexpected": 1}, 'HTTP 400: {"unexpected": 1}', '{"unexpected": 1}'),
])
def test_an_error_body_of_any_shape_is_quoted_with_the_hint_of_its_status(server, status, body, says, server_message):
    server.default = (status, body)
    client = client_for(server.url, retries=0)[0]
    with pytest.raises(GpuStackError) as info:
        client.get("/v2/models/9")
    assert str(info.value) == "GPUStack GET %s/v2/models/9 failed: %s" % (server.url, says)
    assert info.value.to_result() == {"status": status, "server_message": server_message}


def test_an_empty_answer_is_none_and_a_body_that_is_not_json_is_an_error(server):
    client = client_for(server.url)[0]
    server.queue = [(200, b""), (200, b"<html>proxy</html>")]
    assert client.delete("/v2/models/3") is None
    with pytest.raises(GpuStackError, match=r"GET .*/v2/models with a body that is not JSON: b'<html>proxy</html>'"):
        client.get("/v2/models")
    assert client.calls == [("DELETE", "/v2/models/3"), ("GET", "/v2/models")]


def test_a_list_stops_at_an_empty_page_and_takes_a_bare_list_as_it_is(server):
    client = client_for(server.url)[0]
    server.queue = [(200, {"items": [], "pagination": {"totalPage": 5}}), (200, [{"id": 1}])]
    assert client.list("/v2/workers") == []
    assert client.list("/v2/gpus") == [{"id": 1}]
    assert len(server.seen) == 2


def test_a_cluster_is_resolved_by_id_without_a_request_and_by_name_among_the_live_ones(server):
    server.default = (200, gpustack_page([{"id": 4, "name": "prod"}, {"id": 9, "name": "lab", "deleted_at": "2026-01-02"},
                                          {"id": 2, "name": "lab"}]))
    client = client_for(server.url)[0]
    assert (client.resolve_cluster_id(None), client.resolve_cluster_id(7), client.resolve_cluster_id("12")) == (None, 7, 12)
    assert server.seen == []
    assert client.resolve_cluster_id("prod") == 4 and client.resolve_cluster_id("lab") == 2


def test_an_unknown_cluster_name_is_refused_listing_the_existing_ones(server):
    server.default = (200, gpustack_page([{"id": 4, "name": "prod"}, {"id": 2, "name": "lab"}]))
    client = client_for(server.url)[0]
    with pytest.raises(GpuStackError, match=r"^cluster 'staging' does not exist in GPUStack \(existing: lab, prod\); "
                                            r"create it with pairserve.llm.gpustack_cluster first$"):
        client.resolve_cluster_id("staging")
    server.default = (200, gpustack_page([]))
    with pytest.raises(GpuStackError, match=r"\(existing: none\)"):
        client.resolve_cluster_id("staging")


@pytest.mark.parametrize("status,live", [(200, True), (403, True), (401, False)])
def test_a_key_is_live_when_gpustack_answers_200_or_403_and_dead_on_401(server, status, live):
    server.default = (status, {"message": "whatever"})
    client = client_for(server.url, api_key="admin-key", retries=0)[0]
    assert gpustack.value_authenticates(client, "probed-key") is live
    assert [(s.path, s.headers.get("Authorization")) for s in server.seen] == [("/v2/users/me", "Bearer probed-key")]


def test_probing_a_key_on_a_failing_server_raises_instead_of_guessing(server):
    server.default = (500, {"message": "database down"})
    client = client_for(server.url, retries=0)[0]
    with pytest.raises(GpuStackError) as info:
        gpustack.value_authenticates(client, "probed-key")
    assert info.value.status == 500


def test_user_defined_backend_versions_are_replaced_and_every_other_field_is_sent_back(server):
    custom = {"image_name": "mirror/runner@sha256:" + "a" * 64, "custom_framework": "cuda"}
    row = {"id": 3, "backend_name": "vLLM", "default_version": "0.25.1", "enabled": True, "description": None,
           "created_at": "2026-01-01T00:00:00", "version_configs": {
               "0.25.1": {"built_in_frameworks": ["cuda"], "image_name": "gpustack/runner:cuda12.9-vllm0.25.1"},
               "0.25.1-aaaaaaaaaaaa-custom": custom}}
    assert gpustack.backend_versions(row) == {"0.25.1-aaaaaaaaaaaa-custom": custom}
    assert gpustack.backend_versions(None) == {} and gpustack.backend_versions({"version_configs": None}) == {}
    client = client_for(server.url)[0]
    gpustack.put_backend_versions(client, row, {})
    gpustack.backend_row(client, "my backend/x")
    put, get = server.seen
    assert (put.method, put.path) == ("PUT", "/v2/inference-backends/3")
    assert put.json() == {"backend_name": "vLLM", "default_version": "0.25.1", "enabled": True, "description": None,
                          "version_configs": {}}
    assert (get.method, get.target) == ("GET", "/v2/inference-backends/backend_name/my%20backend%2Fx")


def test_reweighing_keeps_every_target_id_and_parks_a_drained_one_as_the_fallback():
    names = {1: "qwen-node-a", 2: "qwen-node-b"}
    current = [{"id": 50, "model_id": 1, "weight": 58, "fallback_status_codes": None, "route_id": 5,
                "provider_model_name": None},
               {"id": 51, "model_id": 2, "weight": 42, "overridden_model_name": "qwen"}]
    drained = gpustack.reweighed_route_targets(current, names, {"qwen-node-b": 0})
    assert drained == [{"id": 50, "model_id": 1, "weight": 58, "fallback_status_codes": None},
                       {"id": 51, "model_id": 2, "weight": 0, "fallback_status_codes": ["5xx"],
                        "overridden_model_name": "qwen"}]
    parked = [current[0], dict(current[1], weight=0, fallback_status_codes=["5xx"])]
    restored = gpustack.reweighed_route_targets(parked, names, {"qwen-node-b": 42})
    assert [(t["id"], t["weight"], t["fallback_status_codes"]) for t in restored] == [(50, 58, None), (51, 42, None)]
    with pytest.raises(ValueError, match="the route has no target for qwen-node-c"):
        gpustack.reweighed_route_targets(current, names, {"qwen-node-c": 10})


def test_the_diff_dicts_name_the_object_and_its_state():
    assert gpustack.present_diff("model qwen", ["replicas"], {"replicas": 1}, {"replicas": 2}, True) == {
        "before": {"replicas": 1}, "after": {"replicas": 2},
        "before_header": "model qwen (existing)", "after_header": "model qwen (desired)"}
    assert gpustack.present_diff("model qwen", ["replicas"], {"replicas": None}, {"replicas": 2}, False) == {
        "before": {}, "after": {"replicas": 2}, "before_header": "model qwen (absent)", "after_header": "model qwen (desired)"}
    assert gpustack.absent_diff("route qwen", None) == {"before": {}, "after": {}, "before_header": "route qwen",
                                                        "after_header": "route qwen (absent)"}
    assert gpustack.absent_diff("route qwen", {"id": 5})["before"] == {"id": 5}
