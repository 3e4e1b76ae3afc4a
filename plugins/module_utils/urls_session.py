# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One ansible ``urls.Request`` per API client, with one TLS context for the client's life.

``open_url`` builds a new TLS context for every request, and loading the system CA store costs ~40 ms of CPU each
time, ``http://`` URLs included: the bench counted it in every TTFT, and every GPUStack call paid it. Callers pass a
fresh ``http.cookiejar.CookieJar()`` to each ``open()``, so no cookie carries over between calls, as with open_url.

``ca_path`` (a PEM bundle) verifies a server whose certificate a private CA signed, with ``validate_certs`` left
true. The file is read when the context is built, so a wrong path fails there (``CaPathError``), before any request.
"""

from __future__ import annotations

import ssl

from ansible.module_utils.urls import Request, make_context

# OpenSSL's verify codes (X509_V_ERR_*) that say the certificate is not for the host in the URL, and that it is
# outside its validity period: no CA file fixes these.
_NAME_MISMATCH = (62, 63, 64)  # HOSTNAME_MISMATCH, EMAIL_MISMATCH, IP_ADDRESS_MISMATCH
_EXPIRED, _NOT_YET_VALID = 10, 9


class CaPathError(ValueError):
    """ca_path is not a readable PEM file of CA certificates; the message names the path and what is wrong."""

    def __init__(self, message, ca_path):
        super().__init__(message)
        self.ca_path = ca_path


def _ca_path_error(ca_path, err):
    fix = "give the PEM file of the CA that signed the server's certificate"
    if isinstance(err, FileNotFoundError):
        what = "does not exist"
    elif isinstance(err, IsADirectoryError):
        what = "is a directory, not a file"
    elif isinstance(err, PermissionError):
        what = "cannot be read (permission denied)"
    elif isinstance(err, ssl.SSLError):
        what = "holds no PEM certificate OpenSSL can load (%s)" % (getattr(err, "reason", None) or err)
    else:
        what = "cannot be read (%s)" % err
    return CaPathError("ca_path %s %s: %s" % (ca_path, what, fix), ca_path)


def reusable_request(validate_certs=True, ca_path=None):
    """A Request whose TLS context is built once, here, and reused by every ``open()``.

    With ``ca_path`` the context trusts only the CAs of that file (make_context's rule); without it, the system
    trust store. Raises CaPathError when ``ca_path`` is not a readable PEM file of certificates."""
    kwargs = {"validate_certs": validate_certs}
    if ca_path:
        kwargs["cafile"] = ca_path
    try:
        context = make_context(**kwargs)
    except OSError as err:  # ssl.SSLError is an OSError too
        if not ca_path:
            raise
        raise _ca_path_error(ca_path, err) from err
    return Request(validate_certs=validate_certs, ca_path=ca_path, context=context)


def cert_verify_error(err):
    """The ssl.SSLCertVerificationError behind ``err`` (itself, or the reason of urllib's URLError), else None."""
    for candidate in (err, getattr(err, "reason", None), getattr(err, "__cause__", None)):
        if isinstance(candidate, ssl.SSLCertVerificationError):
            return candidate
    return None


def cert_verify_message(err, ca_path=None, url=None):
    """Why the server (of ``url``, when given) was not trusted and what to set, from the ssl.SSLCertVerificationError
    ``err``."""
    code = getattr(err, "verify_code", None)
    reason = (getattr(err, "verify_message", None) or str(err)).rstrip(".")
    head = "the %s could not be verified (%s)" % (
        "TLS certificate of %s" % url if url else "server's TLS certificate", reason)
    if code in _NAME_MISMATCH:
        return ("%s: it was not issued for the host in the URL; use the name or address the certificate carries in "
                "its subjectAltName, or reissue it with this one" % head)
    if code in (_EXPIRED, _NOT_YET_VALID):
        return ("%s: the certificate is outside its validity period; renew it on the server (or check the clock of "
                "this host)" % head)
    if ca_path:
        return ("%s: the CA in ca_path %s did not sign it; set ca_path to the PEM file of the CA that signed the "
                "server's certificate" % (head, ca_path))
    return ("%s: no CA of the system trust store signed it; set ca_path to the PEM file of the CA that signed the "
            "server's certificate" % head)
