# -*- coding: utf-8 -*-
# Copyright: (c) 2026, pairserve
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPUStack server's TLS material, checked on the Ansible controller before anything changes.

nginx on the server serves ``pairserve_gpustack_tls_cert`` (the leaf first, then its intermediates) with
``pairserve_gpustack_tls_key``; the workers and clients trust ``pairserve_gpustack_tls_ca_file``. Each mistake
below would otherwise show up only once nginx refuses to start or a worker refuses the handshake. The checks read
PEM text only; no text this module returns ever quotes the key.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import ipaddress
import re

try:
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID
except ImportError as exc:  # pragma: no cover - the sanity import test's bare environment
    CRYPTOGRAPHY_IMPORT_ERROR = exc
else:
    CRYPTOGRAPHY_IMPORT_ERROR = None

try:  # cryptography >= 42
    from cryptography.x509 import verification
except ImportError:  # pragma: no cover - older cryptography: the signatures are checked one issuer at a time only
    verification = None

CERT_VAR = "pairserve_gpustack_tls_cert"
KEY_VAR = "pairserve_gpustack_tls_key"
CA_VAR = "pairserve_gpustack_tls_ca_file"
PEM_CERT = re.compile(br"-----BEGIN CERTIFICATE-----\r?\n.*?-----END CERTIFICATE-----", re.S)
# The extended key usages a certificate most often has instead of serverAuth, by OID.
EKU_NAMES = {"1.3.6.1.5.5.7.3.1": "serverAuth", "1.3.6.1.5.5.7.3.2": "clientAuth",
             "1.3.6.1.5.5.7.3.3": "codeSigning", "1.3.6.1.5.5.7.3.4": "emailProtection",
             "1.3.6.1.5.5.7.3.8": "timeStamping", "1.3.6.1.5.5.7.3.9": "OCSPSigning",
             "2.5.29.37.0": "anyExtendedKeyUsage"}
ENCRYPTED = ("is encrypted with a passphrase: nginx would ask for the passphrase at every start; decrypt it "
             "(openssl pkey -in KEY -out KEY.plain) and keep the unencrypted key in the vault")


class TLSError(RuntimeError):
    """The check cannot run on this controller (cryptography is missing)."""


def _text(value):
    """PEM bytes, or None for an empty value."""
    if value is None:
        return None
    if not isinstance(value, bytes):
        value = str(value).encode("utf-8")
    return value if value.strip() else None


def _utc(when):
    if when.tzinfo is None:
        return when.replace(tzinfo=datetime.timezone.utc)
    return when.astimezone(datetime.timezone.utc)


def _validity(cert):
    """(not before, not after) as aware UTC datetimes (``*_utc`` exist from cryptography 42)."""
    before = getattr(cert, "not_valid_before_utc", None) or _utc(cert.not_valid_before)
    after = getattr(cert, "not_valid_after_utc", None) or _utc(cert.not_valid_after)
    return before, after


def _date(when):
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def _subject(cert):
    return cert.subject.rfc4514_string() or "(empty)"


def _fingerprint(cert):
    return ":".join("%02X" % byte for byte in bytearray(cert.fingerprint(hashes.SHA256())))


def _spki(public_key):
    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _certs(pem):
    """The certificates of a PEM text in order, or a problem (a string)."""
    blocks = PEM_CERT.findall(pem)
    if not blocks:
        return "holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
    certs = []
    for number, block in enumerate(blocks, 1):
        try:
            certs.append(x509.load_pem_x509_certificate(block))
        except ValueError:
            return "certificate %d of %d is not a valid PEM certificate" % (number, len(blocks))
    return certs


def _key(pem):
    """The private key, or a problem (a string); never a word of the key in it."""
    if b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in pem or b"Proc-Type: 4,ENCRYPTED" in pem:
        return ENCRYPTED
    try:
        return serialization.load_pem_private_key(pem, password=None)
    except TypeError:
        return ENCRYPTED
    except (ValueError, UnsupportedAlgorithm):
        return "is not a PEM private key (-----BEGIN PRIVATE KEY-----) that cryptography can read"


def _extension(cert, kind):
    try:
        return cert.extensions.get_extension_for_class(kind).value
    except x509.ExtensionNotFound:
        return None


def _sans(cert):
    """(DNS names, IP addresses) of the subjectAltName."""
    san = _extension(cert, x509.SubjectAlternativeName)
    if san is None:
        return [], []
    return san.get_values_for_type(x509.DNSName), san.get_values_for_type(x509.IPAddress)


def _ip(name):
    try:
        return ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return None


def _covers(name, dns, ips):
    """Whether the SANs cover a name: an IP only by an IP entry, a DNS name exactly or by a ``*.`` wildcard that
    stands for exactly one label (a.b.example.com is not covered by *.example.com)."""
    address = _ip(name)
    if address is not None:
        return address in ips
    name = name.lower().rstrip(".")
    label, _dot, rest = name.partition(".")
    for pattern in dns:
        pattern = pattern.lower().rstrip(".")
        if pattern == name or (pattern.startswith("*.") and label and rest and rest == pattern[2:]):
            return True
    return False


def _signed_by(cert, issuer):
    """Whether issuer's key made cert's signature (and issuer is named as cert's issuer)."""
    if cert.issuer != issuer.subject:
        return False
    key, algorithm = issuer.public_key(), cert.signature_hash_algorithm
    try:
        if isinstance(key, rsa.RSAPublicKey):
            pad = getattr(cert, "signature_algorithm_parameters", None)  # PKCS1v15 or PSS (cryptography >= 41)
            if not isinstance(pad, padding.AsymmetricPadding):
                pad = padding.PKCS1v15()
            key.verify(cert.signature, cert.tbs_certificate_bytes, pad, algorithm)
        elif isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(algorithm))
        elif isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(cert.signature, cert.tbs_certificate_bytes)
        else:
            return False
    except (InvalidSignature, UnsupportedAlgorithm, TypeError, ValueError):
        return False
    return True


def _walk(chain, cas):
    """(the CA that signed the chain, the last certificate reached): leaf, then an intermediate that signed it, and
    so on, until one of the CAs signed the current one."""
    cert, pool = chain[0], list(chain[1:])
    while True:
        for ca in cas:
            if _signed_by(cert, ca):
                return ca, cert
        parent = next((other for other in pool if _signed_by(cert, other)), None)
        if parent is None:
            return None, cert
        pool.remove(parent)
        cert = parent


def _add(out, variable, problem):
    out["problems"].append({"variable": variable, "problem": problem})


def _server_verify(chain, cas, name, now):
    """cryptography's own path validation of a TLS server certificate for name; None or why it failed."""
    address = _ip(name)
    if address is not None:
        subject = verification.IPAddress(address)
    else:
        subject = verification.DNSName(name.lower().rstrip("."))
    try:
        verifier = verification.PolicyBuilder().store(verification.Store(cas)).time(now).build_server_verifier(subject)
        verifier.verify(chain[0], chain[1:])
    except (verification.VerificationError, ValueError, TypeError) as err:
        return str(err) or type(err).__name__
    return None


def _check_cert(out, chain, names, now, warn_days):
    """The leaf's own checks (each certificate's validity, the names, server use); whether the chain passed them."""
    ok = True
    for index, cert in enumerate(chain):
        what = "the certificate" if index == 0 else "intermediate %d (%s)" % (index, _subject(cert))
        before, after = _validity(cert)
        if after <= now:
            ok = False
            _add(out, CERT_VAR, "%s expired on %s" % (what, _date(after)))
        elif before > now:
            ok = False
            _add(out, CERT_VAR, "%s is not valid before %s" % (what, _date(before)))
        elif after - now <= datetime.timedelta(days=warn_days):
            out["warnings"].append("%s: %s expires on %s, in %d days"
                                   % (CERT_VAR, what, _date(after), (after - now).days))
    leaf = chain[0]
    dns, ips = _sans(leaf)
    out["sans"] = ["DNS:%s" % name for name in dns] + ["IP:%s" % address for address in ips]
    for name in names:
        if not _covers(name, dns, ips):
            _add(out, CERT_VAR, "the certificate's subjectAltName does not cover %s (it has: %s; the common name does "
                                "not count, clients ignore it)" % (name, ", ".join(out["sans"]) or "none"))
    constraints = _extension(leaf, x509.BasicConstraints)
    if constraints is not None and constraints.ca:
        ok = False
        _add(out, CERT_VAR, "the certificate (subject %s) is a CA certificate (basicConstraints CA:TRUE), not a "
                            "server's: put the server's own certificate first" % _subject(leaf))
    usage = _extension(leaf, x509.ExtendedKeyUsage)
    if usage is not None and ExtendedKeyUsageOID.SERVER_AUTH not in usage:
        ok = False
        usages = ", ".join(EKU_NAMES.get(oid.dotted_string, oid.dotted_string) for oid in usage)
        _add(out, CERT_VAR, "the certificate's extendedKeyUsage (%s) does not include serverAuth: clients refuse it "
                            "from a TLS server" % usages)
    return ok


def _check_ca(out, chain, cas, names, now, chain_ok):
    ca, reached = _walk(chain, cas)
    if ca is None:
        _add(out, CA_VAR, "the certificate is not signed by the CA in %s (issuer %s, CA subject %s)"
             % (CA_VAR, reached.issuer.rfc4514_string(), "; ".join(_subject(c) for c in cas)))
        return
    dns, ips = _sans(chain[0])
    # The name to validate for: one the workers use if the leaf covers it, else the leaf's own first name (a name
    # it does not cover is reported already).
    covered = [name for name in names if _covers(name, dns, ips)]
    covered += [re.sub(r"^\*\.", "wildcard.", name) for name in dns] + [str(address) for address in ips]
    if verification is None or not chain_ok or not covered:
        return  # the chain's own problems are reported already: path validation would only repeat them
    why = _server_verify(chain, cas, covered[0], now)
    if why is not None:
        # RFC 5280's profile as strict clients apply it (Python 3.13's default context sets VERIFY_X509_STRICT, which
        # refuses, for example, a leaf without an authorityKeyIdentifier): the verify play's Python may be one.
        _add(out, CA_VAR, "the certificate is signed through the CA in %s (CA subject %s) but does not verify as a "
                          "TLS server certificate for %s under RFC 5280's rules, which strict clients apply (Python "
                          "3.13 and later by default): %s" % (CA_VAR, _subject(ca), covered[0], why))


def problems(cert_pem, key_pem, ca_pem=None, names=(), now=None, warn_days=30):
    """Check the server's TLS material.

    cert_pem: the certificate nginx serves, PEM text: the leaf first, then its intermediates.
    key_pem: its private key, PEM text, without a passphrase.
    ca_pem: the CA certificate(s) the workers trust, PEM text; None or empty: the chain is not checked.
    names: the addresses and DNS names clients reach the server by (the server address the workers use); each
    must be in the leaf's subjectAltName, and the chain is validated as a TLS server's for the first of them.
    now: the time to check validity at (default: the current time; a naive datetime is UTC).
    warn_days: a certificate that expires within this many days is a warning, not a problem.

    Returns a dict:
      problems: a list of {"variable", "problem"}, variable one of CERT_VAR, KEY_VAR, CA_VAR;
      warnings: a list of strings, "<variable>: <warning>" (certificates that expire within warn_days);
      subject: the leaf's subject (RFC 4514); None without a readable certificate;
      not_after: the leaf's expiry (ISO 8601, UTC); None without a readable certificate;
      sans: the leaf's subjectAltName entries, "DNS:<name>" and "IP:<address>".
    An empty cert and key (TLS not configured) have no problems. No text quotes the key.
    Raises TLSError when the cryptography package is missing.
    """
    if CRYPTOGRAPHY_IMPORT_ERROR is not None:
        raise TLSError("checking the TLS material needs the Python package cryptography on the Ansible controller "
                       "(pip install cryptography): %s" % CRYPTOGRAPHY_IMPORT_ERROR)
    now = _utc(now or datetime.datetime.now(datetime.timezone.utc))
    names = [str(name).strip() for name in (names or ()) if name is not None and str(name).strip()]
    out = {"problems": [], "warnings": [], "subject": None, "not_after": None, "sans": []}
    cert_pem, key_pem, ca_pem = _text(cert_pem), _text(key_pem), _text(ca_pem)
    if cert_pem is None and key_pem is None:
        return out
    if cert_pem is None:
        _add(out, CERT_VAR, "is empty while %s is set: set both or neither" % KEY_VAR)
    if key_pem is None:
        _add(out, KEY_VAR, "is empty while %s is set: set both or neither" % CERT_VAR)
    chain = _certs(cert_pem) if cert_pem is not None else None
    if isinstance(chain, str):
        _add(out, CERT_VAR, chain)
        chain = None
    elif chain is not None and b"PRIVATE KEY-----" in cert_pem:
        _add(out, CERT_VAR, "holds a private key besides the certificates: nginx sends this file to every client; "
                            "keep the key in %s only" % KEY_VAR)
    key = _key(key_pem) if key_pem is not None else None
    if isinstance(key, str):
        _add(out, KEY_VAR, key)
        key = None
    cas = _certs(ca_pem) if ca_pem is not None else None
    if isinstance(cas, str):
        _add(out, CA_VAR, cas)
        cas = None
    if chain is None:
        return out
    leaf = chain[0]
    out["subject"], out["not_after"] = _subject(leaf), _validity(leaf)[1].isoformat()
    if key is not None:
        try:
            matches = _spki(key.public_key()) == _spki(leaf.public_key())
        except (UnsupportedAlgorithm, ValueError):
            matches = False
        if not matches:
            _add(out, KEY_VAR, "the key does not belong to the certificate (certificate subject %s, SHA-256 "
                               "fingerprint %s)" % (_subject(leaf), _fingerprint(leaf)))
    chain_ok = _check_cert(out, chain, names, now, warn_days)
    if cas is not None:
        _check_ca(out, chain, cas, names, now, chain_ok)
    return out


def expiry(cert_pem, ca_pem=None, now=None, warn_days=30):
    """Days left on the certificate a server serves and on the CA(s) its clients trust (the status play).

    cert_pem: the certificate file the server serves, PEM text (the leaf first).
    ca_pem: the CA certificate(s) the workers trust, PEM text; None or empty: not reported.
    now: the time to count from (default: the current time; a naive datetime is UTC).
    warn_days: a certificate with fewer days left than this is a warning; an expired one is a problem.

    Returns a dict:
      certificates: one {"what", "subject", "not_after" (ISO 8601 UTC), "days_left"} per certificate, the leaf
        first (what: "certificate"), then each CA (what: "CA");
      lines: one line of text per certificate;
      warnings: a line per certificate with fewer than warn_days days left;
      problems: a line per certificate that has expired, or text that holds no certificate.
    days_left counts whole days, rounded down (negative once expired).
    Raises TLSError when the cryptography package is missing.
    """
    if CRYPTOGRAPHY_IMPORT_ERROR is not None:
        raise TLSError("reading the certificates needs the Python package cryptography on the Ansible controller "
                       "(pip install cryptography): %s" % CRYPTOGRAPHY_IMPORT_ERROR)
    now = _utc(now or datetime.datetime.now(datetime.timezone.utc))
    out = {"certificates": [], "lines": [], "warnings": [], "problems": []}
    parts = [("certificate", _text(cert_pem))]
    if _text(ca_pem) is not None:
        parts.append(("CA", _text(ca_pem)))
    for what, pem in parts:
        if pem is None:
            out["problems"].append("the HTTPS %s: no PEM text to read" % what)
            continue
        certs = _certs(pem)
        if isinstance(certs, str):
            out["problems"].append("the HTTPS %s %s" % (what, certs))
            continue
        for cert in certs if what == "CA" else certs[:1]:
            after = _validity(cert)[1]
            days = int((after - now).total_seconds() // 86400)
            row = {"what": what, "subject": _subject(cert), "not_after": after.isoformat(), "days_left": days}
            out["certificates"].append(row)
            line = "HTTPS %s %s: %s, until %s" % (what, row["subject"], "%d day(s) left" % days if days >= 0
                                                  else "EXPIRED", _date(after))
            out["lines"].append(line)
            if after <= now:
                out["problems"].append(line)
            elif days < warn_days:
                out["warnings"].append("%s (fewer than %d days: rotate it, docs/how-to/rotate-credentials.md)"
                                       % (line, warn_days))
    return out
