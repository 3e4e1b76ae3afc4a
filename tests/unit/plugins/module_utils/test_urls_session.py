"""plugins/module_utils/urls_session.py against real HTTPS servers on 127.0.0.1 whose certificates a private CA (made
here with `cryptography`, lab/tls.py) signed: one TLS context built once and used by every open(), a ca_path that
trusts only its CA, validation off, the ssl error found behind urllib's URLError, the sentence for each verify failure
(unknown CA with and without ca_path, a certificate for another address, expired, not yet valid), and a ca_path that
is no CA file, refused when the context is built.

GpuStackClient and the OpenAI client over the same kind of server are in test_tls_clients.py.
"""

from __future__ import annotations

import contextlib
import datetime
import http.cookiejar
import ipaddress
import ssl
import threading
from http.server import ThreadingHTTPServer
from urllib.error import URLError

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ansible_collections.pairserve.llm.plugins.module_utils import urls_session
from lab import tls
from support.local_http import QuietHandler, send_json

FIX = "set ca_path to the PEM file of the CA that signed the server's certificate"


class Handler(QuietHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        send_json(self, 200, {"path": self.path})


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # pylint: disable=unused-argument
        pass  # a client refusing the certificate aborts its handshake: expected here


def _pem(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _leaf(ca_cert, ca_key, days_from_now: tuple) -> tuple:
    """A 127.0.0.1 certificate valid between the two day offsets (negative: in the past)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test")]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now + datetime.timedelta(days=days_from_now[0]))
            .not_valid_after(now + datetime.timedelta(days=days_from_now[1]))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


@pytest.fixture(scope="module", name="pki")
def pki_fixture(tmp_path_factory):
    root = tmp_path_factory.mktemp("pki")
    ca_cert, ca_key = tls.make_ca("pairserve urls_session CA")
    leaves = {"good": tls.make_server(ca_cert, ca_key, dns=[], ips=["127.0.0.1"]),
              "named": tls.make_server(ca_cert, ca_key, dns=["localhost"], ips=[]),
              "expired": _leaf(ca_cert, ca_key, (-10, -1)), "future": _leaf(ca_cert, ca_key, (1, 10))}
    paths = {"ca": root / "ca.pem", "other_ca": root / "other.pem", "not_pem": root / "junk.pem"}
    paths["ca"].write_bytes(_pem(ca_cert))
    paths["other_ca"].write_bytes(_pem(tls.make_ca("another CA")[0]))
    paths["not_pem"].write_text("not a certificate\n")
    for name, (cert, key) in leaves.items():
        paths[name] = root / (name + ".pem")
        paths[name + "_key"] = root / (name + "-key.pem")
        paths[name].write_bytes(_pem(cert))
        paths[name + "_key"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                           serialization.NoEncryption()))
    return {name: str(path) for name, path in paths.items()}


@contextlib.contextmanager
def https(pki, leaf):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki[leaf], pki[leaf + "_key"])
    httpd = Server(("127.0.0.1", 0), Handler)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield "https://127.0.0.1:%d" % httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


def get(request, url):
    with request.open("GET", url, cookies=http.cookiejar.CookieJar()) as response:
        return response.status, response.read()


def refusal(request, url):
    with pytest.raises(URLError) as info:
        get(request, url)
    found = urls_session.cert_verify_error(info.value)
    assert isinstance(found, ssl.SSLCertVerificationError), info.value
    return found


def test_one_context_trusting_only_ca_path_serves_every_open(pki):
    request = urls_session.reusable_request(ca_path=pki["ca"])
    context = request.context
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname is True
    assert [dict(item[0] for item in ca["subject"])["commonName"] for ca in context.get_ca_certs()] == [
        "pairserve urls_session CA"]
    with https(pki, "good") as url:
        assert get(request, url + "/one") == (200, b'{"path": "/one"}')
        assert get(request, url + "/two") == (200, b'{"path": "/two"}')
    assert request.context is context and request.ca_path == pki["ca"] and request.validate_certs is True


def test_validation_off_checks_no_certificate(pki):
    request = urls_session.reusable_request(validate_certs=False)
    assert request.context.verify_mode == ssl.CERT_NONE and request.validate_certs is False
    with https(pki, "expired") as url:
        assert get(request, url + "/x") == (200, b'{"path": "/x"}')


@pytest.mark.parametrize("ca", ["other_ca", None])
def test_a_server_no_ca_of_the_context_signed_says_what_to_set(pki, ca):
    ca_path = pki[ca] if ca else None
    with https(pki, "good") as url:
        found = refusal(urls_session.reusable_request(ca_path=ca_path), url + "/v2")
    head = "the TLS certificate of %s/v2 could not be verified (unable to get local issuer certificate): " % url
    why = ("the CA in ca_path %s did not sign it; " % ca_path) if ca else "no CA of the system trust store signed it; "
    assert urls_session.cert_verify_message(found, ca_path, url + "/v2") == head + why + FIX


@pytest.mark.parametrize("leaf, code, advice", [
    ("named", 64, "it was not issued for the host in the URL; use the name or address the certificate carries in its "
                  "subjectAltName, or reissue it with this one"),
    ("expired", 10, "the certificate is outside its validity period; renew it on the server (or check the clock of "
                    "this host)"),
    ("future", 9, "the certificate is outside its validity period"),
])
def test_no_ca_file_fixes_a_wrong_address_or_validity_and_the_sentence_says_so(pki, leaf, code, advice):
    with https(pki, leaf) as url:
        found = refusal(urls_session.reusable_request(ca_path=pki["ca"]), url)
    assert found.verify_code == code
    message = urls_session.cert_verify_message(found, pki["ca"])
    assert message.startswith("the server's TLS certificate could not be verified (") and advice in message
    assert "did not sign it" not in message and "set ca_path" not in message  # the CA is not blamed


@pytest.mark.parametrize("bad, what", [
    ("missing", "does not exist"),
    ("directory", "is a directory, not a file"),
    ("not_pem", "holds no PEM certificate OpenSSL can load ("),
])
def test_a_ca_path_that_is_no_ca_file_fails_when_the_context_is_built(pki, tmp_path, bad, what):
    ca_path = {"missing": str(tmp_path / "missing.pem"), "directory": str(tmp_path)}.get(bad) or pki[bad]
    with pytest.raises(urls_session.CaPathError) as info:
        urls_session.reusable_request(ca_path=ca_path)
    assert str(info.value).startswith("ca_path %s %s" % (ca_path, what))
    assert str(info.value).endswith(": give the PEM file of the CA that signed the server's certificate")
    assert info.value.ca_path == ca_path and isinstance(info.value, ValueError)


def test_cert_verify_error_looks_through_reason_and_cause_only():
    verify = ssl.SSLCertVerificationError(1, "certificate verify failed")
    assert urls_session.cert_verify_error(verify) is verify
    assert urls_session.cert_verify_error(URLError(verify)) is verify
    try:
        raise ConnectionError("wrapped") from verify
    except ConnectionError as err:
        assert urls_session.cert_verify_error(err) is verify
    assert urls_session.cert_verify_error(URLError(ConnectionRefusedError(111, "refused"))) is None
    assert urls_session.cert_verify_error(ValueError("x")) is None
