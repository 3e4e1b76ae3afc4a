"""Days left on the served HTTPS certificate and its CA (module_utils/tls.py expiry, filter tls_expiry): whole days
rounded down, a warning under warn_days, a problem once expired, the CA bundle's every certificate, clear errors."""

from __future__ import annotations

import datetime

import pytest
from ansible.errors import AnsibleFilterError
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ansible_collections.pairserve.llm.plugins.filter.tls_expiry import FilterModule
from ansible_collections.pairserve.llm.plugins.module_utils import tls

UTC = datetime.timezone.utc
NOW = datetime.datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
DAY = datetime.timedelta(days=1)


def cert_pem(cn, not_after, ca=False):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(NOW - 400 * DAY).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def test_days_left_on_the_certificate_and_each_ca_of_a_bundle():
    leaf = cert_pem("node-a", NOW + 90 * DAY + datetime.timedelta(hours=5))
    bundle = cert_pem("old CA", NOW + 10 * DAY, ca=True) + cert_pem("new CA", NOW + 3650 * DAY, ca=True)
    out = tls.expiry(leaf, bundle, now=NOW, warn_days=30)
    assert [(c["what"], c["subject"], c["days_left"]) for c in out["certificates"]] == [
        ("certificate", "CN=node-a", 90), ("CA", "CN=old CA", 10), ("CA", "CN=new CA", 3650)]
    assert out["lines"][0] == "HTTPS certificate CN=node-a: 90 day(s) left, until 2027-03-06 17:00:00 UTC"
    assert len(out["warnings"]) == 1 and out["warnings"][0].startswith("HTTPS CA CN=old CA: 10 day(s) left")
    assert "fewer than 30 days" in out["warnings"][0]
    assert out["problems"] == []


def test_the_threshold_is_the_callers():
    leaf = cert_pem("node-a", NOW + 45 * DAY)
    assert tls.expiry(leaf, None, now=NOW, warn_days=30)["warnings"] == []
    assert len(tls.expiry(leaf, None, now=NOW, warn_days=60)["warnings"]) == 1


def test_an_expired_certificate_is_a_problem_not_a_warning():
    out = tls.expiry(cert_pem("node-a", NOW - 2 * DAY), None, now=NOW)
    assert out["certificates"][0]["days_left"] == -2
    assert out["warnings"] == []
    assert len(out["problems"]) == 1 and "EXPIRED" in out["problems"][0]


def test_text_without_a_certificate_is_a_problem():
    out = tls.expiry("not a certificate", None, now=NOW)
    assert out["certificates"] == [] and "holds no PEM certificate" in out["problems"][0]
    assert tls.expiry("", None, now=NOW)["problems"] == ["the HTTPS certificate: no PEM text to read"]


def test_the_filter_checks_its_inputs():
    expiry = FilterModule().filters()["tls_expiry"]
    leaf = cert_pem("node-a", datetime.datetime.now(UTC) + 400 * DAY)
    assert expiry(leaf, "", 30)["certificates"][0]["days_left"] >= 399
    with pytest.raises(AnsibleFilterError, match="warn_days"):
        expiry(leaf, None, "soon")
    with pytest.raises(AnsibleFilterError, match="expected PEM text"):
        expiry({"not": "pem"})
