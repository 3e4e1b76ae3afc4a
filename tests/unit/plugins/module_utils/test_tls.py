"""The GPUStack server's TLS material (module_utils/tls.py, filter pairserve.llm.tls_problems): CAs, intermediates
and leaves made here with cryptography (RSA 2048 and EC P-256), each check passing on the right material and
failing, naming its variable, on the wrong one; no problem ever quotes the key.
"""

from __future__ import annotations

import datetime
import ipaddress

import pytest
from ansible.errors import AnsibleFilterError
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ansible_collections.pairserve.llm.plugins.filter.tls_problems import FilterModule
from ansible_collections.pairserve.llm.plugins.module_utils import tls

UTC = datetime.timezone.utc
NOW = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DAY = datetime.timedelta(days=1)
SERVER_IP = "192.0.2.10"
SERVER_NAME = "gpustack.example.com"


def new_key(kind):
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def make_cert(cn, key, issuer=None, issuer_key=None, ca=False, sans=(SERVER_IP, SERVER_NAME),
              eku=(ExtendedKeyUsageOID.SERVER_AUTH,), not_before=NOW - 30 * DAY, not_after=NOW + 365 * DAY,
              issuer_ca_ok=True):
    """A certificate for key, signed by issuer_key (self-signed without an issuer), shaped like a real CA's."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    builder = (x509.CertificateBuilder().subject_name(name)
               .issuer_name(issuer.subject if issuer is not None else name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(not_before).not_valid_after(not_after)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                   (issuer_key or key).public_key()), critical=False))
    if ca or not issuer_ca_ok:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True)
    if sans:
        entries = []
        for san in sans:
            if isinstance(san, x509.GeneralName):
                entries.append(san)
                continue
            try:
                entries.append(x509.IPAddress(ipaddress.ip_address(san)))
            except ValueError:
                entries.append(x509.DNSName(san))
        builder = builder.add_extension(x509.SubjectAlternativeName(entries), critical=False)
    if eku and not ca:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(eku)), critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256())


def pem(*items):
    out = b""
    for item in items:
        if isinstance(item, x509.Certificate):
            out += item.public_bytes(serialization.Encoding.PEM)
        else:
            out += item.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())
    return out.decode()


class Pki:
    """A root CA, an intermediate it signed, and leaf keys."""

    def __init__(self, kind, leaf_kind):
        self.root_key, self.inter_key = new_key(kind), new_key(kind)
        self.root = make_cert("Pairserve Test Root", self.root_key, ca=True)
        self.inter = make_cert("Pairserve Test Intermediate", self.inter_key, self.root, self.root_key, ca=True)
        self.key = new_key(leaf_kind)
        self.leaf = make_cert("gpustack", self.key, self.root, self.root_key)
        self.other_key = new_key(leaf_kind)

    def leaf_by(self, **kwargs):
        return make_cert("gpustack", self.key, self.root, self.root_key, **kwargs)


@pytest.fixture(scope="module", params=[("rsa", "rsa"), ("ec", "ec"), ("rsa", "ec"), ("ec", "rsa")],
                ids=["rsa-ca-rsa-leaf", "ec-ca-ec-leaf", "rsa-ca-ec-leaf", "ec-ca-rsa-leaf"])
def pki(request):
    return Pki(*request.param)


@pytest.fixture(scope="module")
def other_ca():
    key = new_key("ec")
    return make_cert("Someone Else's Root", key, ca=True)


def check(cert, key, ca=None, names=(SERVER_IP, SERVER_NAME), now=NOW, **kwargs):
    return tls.problems(cert, key, ca, names, now=now, **kwargs)


def only(result, variable, *words):
    """The one problem of result, which names variable and says each of words."""
    assert len(result["problems"]) == 1, result["problems"]
    problem = result["problems"][0]
    assert problem["variable"] == variable
    for word in words:
        assert word in problem["problem"]
    return problem["problem"]


def test_right_material_passes_and_reports_the_leaf(pki):
    result = check(pem(pki.leaf), pem(pki.key), pem(pki.root))
    assert result["problems"] == [] and result["warnings"] == []
    assert result["subject"] == "CN=gpustack"
    assert result["not_after"] == (NOW + 365 * DAY).isoformat()
    assert result["sans"] == ["DNS:%s" % SERVER_NAME, "IP:%s" % SERVER_IP]


def test_no_tls_configured_has_no_problems():
    for empty in (None, "", "  \n"):
        assert tls.problems(empty, empty) == {"problems": [], "warnings": [], "subject": None, "not_after": None,
                                              "sans": []}


def test_cert_without_key_and_key_without_cert(pki):
    assert only(check(pem(pki.leaf), ""), tls.KEY_VAR, "both or neither", tls.CERT_VAR)
    assert only(check(None, pem(pki.key)), tls.CERT_VAR, "both or neither", tls.KEY_VAR)


def test_mismatched_key_names_the_certificate(pki):
    problem = only(check(pem(pki.leaf), pem(pki.other_key), pem(pki.root)), tls.KEY_VAR,
                   "does not belong to the certificate", "CN=gpustack")
    fingerprint = pki.leaf.fingerprint(hashes.SHA256()).hex().upper()
    assert ":".join(fingerprint[i:i + 2] for i in range(0, len(fingerprint), 2)) in problem


@pytest.mark.parametrize("fmt", [serialization.PrivateFormat.PKCS8, serialization.PrivateFormat.TraditionalOpenSSL])
def test_encrypted_key_is_refused(pki, fmt):
    encrypted = pki.key.private_bytes(serialization.Encoding.PEM, fmt,
                                      serialization.BestAvailableEncryption(b"secret")).decode()
    only(check(pem(pki.leaf), encrypted), tls.KEY_VAR, "passphrase", "nginx", "vault")


@pytest.mark.parametrize("text", ["not a key", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"])
def test_key_text_not_a_key(pki, text):
    only(check(pem(pki.leaf), text), tls.KEY_VAR, "is not a PEM private key")


def test_certificate_given_as_key_is_not_a_key(pki):
    only(check(pem(pki.leaf), pem(pki.leaf)), tls.KEY_VAR, "is not a PEM private key")


@pytest.mark.parametrize("text", ["hello", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"])
def test_cert_text_not_a_cert(pki, text):
    result = check(text, pem(pki.key))
    only(result, tls.CERT_VAR, "certificate")
    assert result["subject"] is None and result["not_after"] is None


def test_key_in_the_certificate_file(pki):
    only(check(pem(pki.leaf, pki.key), pem(pki.key)), tls.CERT_VAR, "private key", tls.KEY_VAR)


def test_expired_and_not_yet_valid(pki):
    expired = pki.leaf_by(not_before=NOW - 400 * DAY, not_after=NOW - 2 * DAY)
    only(check(pem(expired), pem(pki.key)), tls.CERT_VAR, "expired on 2026-02-27 12:00:00 UTC")
    early = pki.leaf_by(not_before=NOW + DAY)
    only(check(pem(early), pem(pki.key)), tls.CERT_VAR, "is not valid before 2026-03-02 12:00:00 UTC")


def test_expiring_soon_is_a_warning_only(pki):
    soon = pki.leaf_by(not_after=NOW + 10 * DAY)
    result = check(pem(soon), pem(pki.key), pem(pki.root))
    assert result["problems"] == []
    assert result["warnings"] == ["%s: the certificate expires on 2026-03-11 12:00:00 UTC, in 10 days" % tls.CERT_VAR]
    assert check(pem(soon), pem(pki.key), warn_days=5)["warnings"] == []


def test_naive_now_is_utc(pki):
    assert check(pem(pki.leaf), pem(pki.key), now=NOW.replace(tzinfo=None))["problems"] == []
    assert check(pem(pki.leaf), pem(pki.key), now=NOW.replace(tzinfo=None) + 400 * DAY)["problems"]


def test_missing_san_ip_lists_the_sans(pki):
    problem = only(check(pem(pki.leaf), pem(pki.key), names=["192.0.2.99"]), tls.CERT_VAR, "does not cover 192.0.2.99")
    assert "DNS:%s, IP:%s" % (SERVER_NAME, SERVER_IP) in problem
    assert check(pem(pki.leaf), pem(pki.key), names=["192.0.2.10"])["problems"] == []


def test_no_common_name_fallback(pki):
    cn_only = make_cert(SERVER_NAME, pki.key, pki.root, pki.root_key, sans=())
    only(check(pem(cn_only), pem(pki.key), names=[SERVER_NAME]), tls.CERT_VAR, "does not cover", "none")


def test_an_ip_is_not_covered_by_a_dns_entry_of_the_same_text(pki):
    dns_ip = pki.leaf_by(sans=(x509.DNSName(SERVER_IP),))
    only(check(pem(dns_ip), pem(pki.key), names=[SERVER_IP]), tls.CERT_VAR, "does not cover %s" % SERVER_IP,
         "DNS:%s" % SERVER_IP)


@pytest.mark.parametrize("name,covered", [
    ("gpu.example.com", True), ("GPU.Example.COM.", True), ("a.b.example.com", False), ("example.com", False),
    ("gpu.example.org", False),
])
def test_wildcard_dns(pki, name, covered):
    wild = pki.leaf_by(sans=("*.example.com",))
    result = check(pem(wild), pem(pki.key), pem(pki.root), names=[name])
    if covered:
        assert result["problems"] == []
    else:
        only(result, tls.CERT_VAR, "does not cover %s" % name, "DNS:*.example.com")


def test_ca_that_did_not_sign_it(pki, other_ca):
    only(check(pem(pki.leaf), pem(pki.key), pem(other_ca)), tls.CA_VAR,
         "is not signed by the CA in %s" % tls.CA_VAR, "issuer CN=Pairserve Test Root",
         "CA subject CN=Someone Else's Root")


def test_one_of_several_cas_signed_it(pki, other_ca):
    assert check(pem(pki.leaf), pem(pki.key), pem(other_ca, pki.root))["problems"] == []


def test_ca_file_not_a_certificate(pki):
    only(check(pem(pki.leaf), pem(pki.key), "not a CA"), tls.CA_VAR, "no PEM certificate")


def test_chain_through_an_intermediate(pki):
    leaf = make_cert("gpustack", pki.key, pki.inter, pki.inter_key)
    assert check(pem(leaf, pki.inter), pem(pki.key), pem(pki.root))["problems"] == []
    # Without the intermediate nothing leads to the root.
    only(check(pem(leaf), pem(pki.key), pem(pki.root)), tls.CA_VAR, "not signed by the CA",
         "issuer CN=Pairserve Test Intermediate", "CA subject CN=Pairserve Test Root")
    # With the root in the chain as well (a common habit), still fine.
    assert check(pem(leaf, pki.inter, pki.root), pem(pki.key), pem(pki.root))["problems"] == []


def test_intermediate_that_is_not_a_ca_fails_path_validation(pki):
    if tls.verification is None:
        pytest.skip("cryptography < 42 has no path validation")
    fake_key = new_key("ec")
    fake = make_cert("Not A CA", fake_key, pki.root, pki.root_key, eku=(), sans=(), issuer_ca_ok=False)
    leaf = make_cert("gpustack", pki.key, fake, fake_key)
    only(check(pem(leaf, fake), pem(pki.key), pem(pki.root)), tls.CA_VAR, "does not verify as a TLS server",
         "for %s" % SERVER_IP)


def test_signatures_alone_without_path_validation(pki, other_ca, monkeypatch):
    monkeypatch.setattr(tls, "verification", None)
    leaf = make_cert("gpustack", pki.key, pki.inter, pki.inter_key)
    assert check(pem(leaf, pki.inter), pem(pki.key), pem(pki.root))["problems"] == []
    only(check(pem(leaf, pki.inter), pem(pki.key), pem(other_ca)), tls.CA_VAR, "not signed by the CA")


def test_a_ca_certificate_as_the_leaf(pki):
    ca_leaf = make_cert("gpustack", pki.key, pki.root, pki.root_key, ca=True)
    only(check(pem(ca_leaf), pem(pki.key), pem(pki.root)), tls.CERT_VAR, "is a CA certificate")


def test_extended_key_usage(pki):
    client = pki.leaf_by(eku=(ExtendedKeyUsageOID.CLIENT_AUTH,))
    only(check(pem(client), pem(pki.key), pem(pki.root)), tls.CERT_VAR, "(clientAuth)", "serverAuth")
    both = pki.leaf_by(eku=(ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH))
    assert check(pem(both), pem(pki.key), pem(pki.root))["problems"] == []
    assert check(pem(pki.leaf_by(eku=())), pem(pki.key), pem(pki.root))["problems"] == []


def test_no_problem_quotes_the_key(pki, other_ca):
    key_pem = pem(pki.key)
    body = [line for key in (pki.key, pki.other_key) for line in pem(key).splitlines() if not line.startswith("-----")]
    expired = pki.leaf_by(not_after=NOW - DAY, eku=(ExtendedKeyUsageOID.CLIENT_AUTH,))
    texts = []
    for cert, key, ca in [(pem(pki.leaf), pem(pki.other_key), pem(other_ca)), (pem(expired), key_pem, pem(pki.root)),
                          (key_pem, key_pem, key_pem), (pem(pki.leaf, pki.key), key_pem, None),
                          (pem(pki.leaf), key_pem[:-40], None), (pem(pki.leaf), key_pem + key_pem, None),
                          ("", key_pem, None)]:
        result = FilterModule().filters()["tls_problems"](cert, key, ca, ["192.0.2.99"], "server-1")
        assert result["problems"]
        texts += [repr(problem) for problem in result["problems"]] + result["warnings"] + [repr(result)]
    for text in texts:
        assert key_pem.strip() not in text and pem(pki.other_key).strip() not in text
        assert not any(line in text for line in body)


def test_filter_adds_host_and_text(pki):
    tls_problems = FilterModule().filters()["tls_problems"]
    result = tls_problems(pem(pki.leaf), pem(pki.other_key), pem(pki.root), [SERVER_IP], host="server-1")
    problem = result["problems"][0]
    assert problem["host"] == "server-1" and problem["variable"] == tls.KEY_VAR
    assert problem["text"] == "server-1: %s: %s" % (tls.KEY_VAR, problem["problem"])
    assert tls_problems(pem(pki.leaf), pem(pki.key), pem(pki.root), SERVER_IP)["problems"] == []
    assert tls_problems(None, None) == {"problems": [], "warnings": [], "subject": None, "not_after": None,
                                        "sans": []}
    assert tls_problems("", "", "", None, "server-1")["problems"] == []
    no_host = tls_problems(pem(pki.leaf), "")["problems"][0]
    assert no_host["host"] is None and no_host["text"] == "%s: %s" % (tls.KEY_VAR, no_host["problem"])


def test_filter_prefixes_warnings_with_the_host(pki):
    soon = make_cert("gpustack", pki.key, pki.root, pki.root_key,
                     not_after=datetime.datetime.now(UTC) + 3 * DAY, not_before=datetime.datetime.now(UTC) - DAY)
    result = FilterModule().filters()["tls_problems"](pem(soon), pem(pki.key), pem(pki.root), [SERVER_IP], "server-1")
    assert result["problems"] == []
    assert len(result["warnings"]) == 1 and result["warnings"][0].startswith("server-1: %s: " % tls.CERT_VAR)


@pytest.mark.parametrize("args", [({"a": 1}, ""), ("", 7), ("", "", ["ca"]), ("", "", None, 5), ("", "", None, [1]),
                                  ("", "", None, None, 3)])
def test_filter_refuses_wrong_types(args):
    with pytest.raises(AnsibleFilterError, match="pairserve.llm.tls_problems"):
        FilterModule().filters()["tls_problems"](*args)


def test_filter_says_when_cryptography_is_missing(monkeypatch):
    monkeypatch.setattr(tls, "CRYPTOGRAPHY_IMPORT_ERROR", ImportError("No module named 'cryptography'"))
    with pytest.raises(AnsibleFilterError, match="needs the Python package cryptography"):
        FilterModule().filters()["tls_problems"]("x", "y")


def test_expired_intermediate(pki):
    inter = make_cert("Old Intermediate", pki.inter_key, pki.root, pki.root_key, ca=True, not_after=NOW - DAY)
    leaf = make_cert("gpustack", pki.key, inter, pki.inter_key)
    only(check(pem(leaf, inter), pem(pki.key), pem(pki.root)), tls.CERT_VAR,
         "intermediate 1 (CN=Old Intermediate) expired on")


def test_path_validation_runs_for_the_leafs_own_name_without_names(pki):
    if tls.verification is None:
        pytest.skip("cryptography < 42 has no path validation")
    fake_key = new_key("ec")
    fake = make_cert("Not A CA", fake_key, pki.root, pki.root_key, eku=(), sans=(), issuer_ca_ok=False)
    leaf = make_cert("gpustack", pki.key, fake, fake_key, sans=("*.example.com",))
    only(check(pem(leaf, fake), pem(pki.key), pem(pki.root), names=()), tls.CA_VAR, "does not verify",
         "for wildcard.example.com")
    assert check(pem(pki.leaf_by(sans=("*.example.com",))), pem(pki.key), pem(pki.root), names=())["problems"] == []


# -- the CA as a file on the controller (the filter reads pairserve_gpustack_tls_ca_file itself) ---------------------

def _valid_today(pki):
    """The pki's leaf, valid around the real clock (the filter checks against it)."""
    today = datetime.datetime.now(UTC)
    return pem(pki.leaf_by(not_before=today - DAY, not_after=today + 365 * DAY))


def test_filter_reads_the_ca_file_by_its_absolute_path(tmp_path, pki, other_ca):
    ca_file = tmp_path / "ca.crt"
    ca_file.write_text(pem(pki.root))
    tls_problems = FilterModule().filters()["tls_problems"]
    out = tls_problems(_valid_today(pki), pem(pki.key), None, [SERVER_IP], "node-a", str(ca_file))
    assert out["problems"] == [], out["problems"]
    # the file is what is checked: another CA in it is refused
    ca_file.write_text(pem(other_ca))
    out = tls_problems(_valid_today(pki), pem(pki.key), None, [SERVER_IP], "node-a", str(ca_file))
    assert [p["variable"] for p in out["problems"]] == [tls.CA_VAR], out["problems"]


def test_filter_names_a_missing_or_relative_ca_file(tmp_path, pki):
    tls_problems = FilterModule().filters()["tls_problems"]
    leaf, key = _valid_today(pki), pem(pki.key)
    missing = tls_problems(leaf, key, None, [], "node-a", str(tmp_path / "nope.crt"))
    assert [(p["variable"], "cannot be read" in p["problem"]) for p in missing["problems"]] == [
        ("pairserve_gpustack_tls_ca_file", True)], missing
    relative = tls_problems(leaf, key, None, [], "node-a", "files/ca.crt")
    assert relative["problems"][0]["text"].startswith("node-a: pairserve_gpustack_tls_ca_file: 'files/ca.crt' is not")
    # without a certificate and key TLS is off: the CA file is not looked at
    assert tls_problems("", "", None, [], "node-a", "files/ca.crt")["problems"] == []
