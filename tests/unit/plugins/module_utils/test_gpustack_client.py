"""GpuStackClient against a real HTTP server on 127.0.0.1: retries, backoff, auth, errors, pagination."""

from __future__ import annotations

import base64
import socket
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / ".cache" / "collections"))

from ansible_collections.pairserve.llm.plugins.module_utils import urls_session  # noqa: E402
from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import (  # noqa: E402
    GpuStackClient,
    GpuStackError,
    field_diff,
)
from support.local_http import JsonStub  # noqa: E402


class Scripted(JsonStub):
    """A local server answering from a queue of (status, body) per request; `seen` keeps what it got."""

    def __init__(self):
        self.queue = []
        self.default = (200, {})
        super().__init__(self.answer)

    def answer(self, request):
        status, payload = self.queue.pop(0) if self.queue else self.default
        return status, payload(request.target) if callable(payload) else payload


@pytest.fixture
def server():
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
