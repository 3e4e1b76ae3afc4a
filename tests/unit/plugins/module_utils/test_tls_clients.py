"""ca_path on every HTTP client, against a real HTTPS server on 127.0.0.1 whose certificate a private CA (made here
with `cryptography`) signed: trusted with ca_path = that CA; refused, with the URL and what to set, without ca_path
and with another CA; a ca_path that is not a CA file fails naming it, before any request. GpuStackClient and
_openai_client.Client directly, then gpustack_info and route_downtime through Ansible."""

from __future__ import annotations

import ssl
import threading
from http.server import ThreadingHTTPServer

import pytest
from cryptography.hazmat.primitives import serialization

from ansible_collections.pairserve.llm.plugins.module_utils._openai_client import Client
from ansible_collections.pairserve.llm.plugins.module_utils._openai_failures import classify, is_permanent
from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import GpuStackClient, GpuStackError
from ansible_collections.pairserve.llm.plugins.module_utils.urls_session import CaPathError
from lab import tls
from support.ansible_runner import run_module
from support.local_http import QuietHandler, send_json

KEY = "sk-test-tls"
WORKERS = [{"id": 1, "name": "node-a", "state": "ready"}]

# -- a private CA and a server certificate ---------------------------------------------------------------------------


def _pem(cert):
    return cert.public_bytes(serialization.Encoding.PEM)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("pki")
    ca_cert, ca_key = tls.make_ca("pairserve test CA")
    # A leaf for 127.0.0.1 only (no DNS name: https://localhost is the hostname-mismatch case).
    cert, key = tls.make_server(ca_cert, ca_key, dns=[], ips=["127.0.0.1"])
    other = tls.make_ca("some other CA")[0]
    paths = {"ca": root / "ca.pem", "other_ca": root / "other-ca.pem", "cert": root / "server.pem",
             "key": root / "server-key.pem", "not_pem": root / "not-a-cert.pem", "missing": root / "missing.pem"}
    paths["ca"].write_bytes(_pem(ca_cert))
    paths["other_ca"].write_bytes(_pem(other))
    paths["cert"].write_bytes(_pem(cert))
    paths["key"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    paths["not_pem"].write_text("not a certificate\n")
    return {name: str(path) for name, path in paths.items()}


# -- the HTTPS server ------------------------------------------------------------------------------------------------

class Handler(QuietHandler):
    def _send(self, payload, status=200):
        send_json(self, status, payload)

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.headers.get("Authorization") != "Bearer " + KEY:
            self._send({"message": "Invalid authentication credentials"}, 401)
        elif self.path.startswith("/v2/workers"):
            self._send({"items": WORKERS, "pagination": {"totalPage": 1}})
        elif self.path.startswith("/v2/"):
            self._send({"items": [], "pagination": {"totalPage": 1}})
        elif self.path == "/v1/models":
            self._send({"object": "list", "data": [{"id": "qwen", "object": "model"}]})
        else:
            self._send({"message": "not found"}, 404)

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/v1/chat/completions" and self.headers.get("Authorization") == "Bearer " + KEY:
            self._send({"choices": [{"message": {"role": "assistant", "content": "OK"}}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 1}})
        else:
            self._send({"message": "not found"}, 404)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client refusing the certificate aborts its handshake: expected here, no traceback


@pytest.fixture(scope="module")
def https(pki):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki["cert"], pki["key"])
    httpd = Server(("127.0.0.1", 0), Handler)
    # The handshake runs in the handler's thread (first read), so a client that refuses the certificate never
    # holds up the accept loop.
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield "https://127.0.0.1:%d" % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()
    thread.join(10)


def _refused_for_the_ca(message, url, ca_path=None):
    assert url in message, message
    assert "could not be verified" in message, message
    assert "set ca_path to the PEM file of the CA that signed the server's certificate" in message, message
    if ca_path:
        assert "the CA in ca_path %s did not sign it" % ca_path in message, message
    else:
        assert "no CA of the system trust store signed it" in message, message


# -- GpuStackClient --------------------------------------------------------------------------------------------------

def test_gpustack_client_trusts_the_server_with_its_ca(https, pki):
    client = GpuStackClient(https + "/v2", api_key=KEY, ca_path=pki["ca"], retries=0)
    assert client.list("/v2/workers") == WORKERS
    assert client.validate_certs is True


@pytest.mark.parametrize("ca", [None, "other_ca"])
def test_gpustack_client_without_the_ca_fails_at_once_naming_the_url_and_ca_path(https, pki, ca):
    sleeps = []
    ca_path = pki[ca] if ca else None
    client = GpuStackClient(https, api_key=KEY, ca_path=ca_path, retries=3, sleep=sleeps.append)
    with pytest.raises(GpuStackError) as info:
        client.get("/v2/users/me")
    _refused_for_the_ca(str(info.value), https + "/v2/users/me", ca_path)
    assert str(info.value).startswith("GPUStack GET %s/v2/users/me failed: the server's TLS certificate" % https)
    assert info.value.url == https + "/v2/users/me" and info.value.status is None
    assert sleeps == [] and client.calls == []  # not retried: waiting does not change a certificate


def test_a_certificate_for_another_host_says_so_rather_than_blaming_the_ca(https, pki):
    url = https.replace("127.0.0.1", "localhost")  # the certificate names 127.0.0.1 only
    client = GpuStackClient(url, api_key=KEY, ca_path=pki["ca"], retries=0)
    with pytest.raises(GpuStackError) as info:
        client.get("/v2/workers")
    msg = str(info.value)
    assert url + "/v2/workers" in msg and "could not be verified" in msg, msg
    assert "not issued for the host in the URL" in msg and "subjectAltName" in msg, msg


@pytest.mark.parametrize("bad, why", [("missing", "does not exist"), ("not_pem", "holds no PEM certificate")])
def test_gpustack_client_refuses_a_ca_path_that_is_no_ca_file_before_any_request(pki, bad, why):
    with pytest.raises(GpuStackError) as info:
        GpuStackClient("https://127.0.0.1:9", api_key=KEY, ca_path=pki[bad])
    msg = str(info.value)
    assert "ca_path %s %s" % (pki[bad], why) in msg, msg
    assert "give the PEM file of the CA that signed the server's certificate" in msg, msg


def test_a_directory_is_no_ca_path(tmp_path):
    with pytest.raises(GpuStackError, match="ca_path %s is a directory" % tmp_path):
        GpuStackClient("https://127.0.0.1:9", api_key=KEY, ca_path=str(tmp_path))


# -- _openai_client.Client -------------------------------------------------------------------------------------------

def test_openai_client_trusts_the_server_with_its_ca(https, pki):
    client = Client(https + "/v1", KEY, timeout=10, ca_path=pki["ca"], tokenize_url="")
    resp = client.request(client.base_url + "/v1/models")
    assert resp.ok and resp.body["data"][0]["id"] == "qwen", resp.summary()
    chat = client.chat({"model": "qwen", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    assert chat.ok, chat.summary()


@pytest.mark.parametrize("ca", [None, "other_ca"])
def test_openai_client_without_the_ca_is_a_permanent_tls_failure_naming_url_and_ca_path(https, pki, ca):
    ca_path = pki[ca] if ca else None
    client = Client(https, KEY, timeout=10, ca_path=ca_path)
    resp = client.request(https + "/v1/models")
    assert resp.status is None and resp.error.startswith("tls: "), resp.summary()
    _refused_for_the_ca(resp.error, https + "/v1/models", ca_path)
    cls, why = classify(resp, "qwen")
    assert cls == "tls" and is_permanent(cls)
    _refused_for_the_ca(why, https + "/v1/models", ca_path)


@pytest.mark.parametrize("bad, why", [("missing", "does not exist"), ("not_pem", "holds no PEM certificate")])
def test_openai_client_refuses_a_ca_path_that_is_no_ca_file(pki, bad, why):
    with pytest.raises(CaPathError) as info:
        Client("https://127.0.0.1:9", KEY, ca_path=pki[bad])
    assert isinstance(info.value, ValueError) and info.value.ca_path == pki[bad]
    assert str(info.value).startswith("ca_path %s %s" % (pki[bad], why)), str(info.value)


# -- modules through Ansible -----------------------------------------------------------------------------------------

def test_gpustack_info_with_ca_path_reads_the_https_server(https, pki):
    res = run_module("gpustack_info", {"api_url": https, "api_key": KEY, "ca_path": pki["ca"],
                                       "gather": ["workers"]}, timeout=120)
    assert res.rc == 0 and res["workers"] == WORKERS, res.stdout[-2000:]


def test_gpustack_info_without_the_ca_and_with_a_missing_ca_path_say_what_to_set(https, pki):
    res = run_module("gpustack_info", {"api_url": https, "api_key": KEY, "gather": ["workers"], "retries": 0},
                     timeout=120)
    assert res.failed, res.stdout[-2000:]
    _refused_for_the_ca(res["msg"], https + "/v2/workers", None)
    res = run_module("gpustack_info", {"api_url": https, "api_key": KEY, "ca_path": pki["missing"],
                                       "gather": ["workers"]}, timeout=120)
    assert res.failed and "ca_path %s does not exist" % pki["missing"] in res["msg"], res.stdout[-2000:]


def test_route_downtime_with_ca_path_measures_and_with_another_ca_fails_at_once(https, pki):
    base = {"base_url": https, "api_key": KEY, "model": "qwen", "interval": 0.2, "request_timeout": 2,
            "max_seconds": 1}
    res = run_module("route_downtime", dict(base, ca_path=pki["ca"]), timeout=120)
    assert res.rc == 0 and res["windows"] == [] and res["requests"] >= 2, res.stdout[-2000:]
    res = run_module("route_downtime", dict(base, ca_path=pki["other_ca"], max_seconds=600), timeout=120)
    assert res.failed, res.stdout[-2000:]
    assert "route_downtime cannot measure %s" % https in res["msg"], res["msg"]
    _refused_for_the_ca(res["msg"], https + "/v1/chat/completions", pki["other_ca"])
