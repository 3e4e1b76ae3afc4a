# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.tls_problems (documented beside this file); the checks are module_utils/tls.py's."""

from __future__ import annotations

import os

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import tls


def _pem(value, variable):
    if value is not None and not isinstance(value, (str, bytes)):
        raise AnsibleFilterError("pairserve.llm.tls_problems: %s: expected PEM text, got %s"
                                 % (variable, type(value).__name__))
    return value


def _read_ca_file(path):
    """(PEM text, None) of the CA file on the controller, or (None, the problem with the path)."""
    if not isinstance(path, str):
        raise AnsibleFilterError("pairserve.llm.tls_problems: ca_file: expected a path, got %s" % type(path).__name__)
    if not os.path.isabs(path):
        return None, ("%r is not an absolute path: name the CA certificate on the Ansible controller by its full "
                      "path, e.g. \"{{ inventory_dir }}/files/ca.crt\"" % path)
    try:
        with open(path, "rb") as handle:
            return handle.read(1 << 20).decode("utf-8", "replace"), None
    except OSError as err:
        return None, "%s cannot be read on the Ansible controller (%s)" % (path, err.strerror or err)


def tls_problems(cert_pem, key_pem, ca_pem=None, names=None, host=None, ca_file=None, warn_days=30):
    cert_pem, key_pem = _pem(cert_pem, tls.CERT_VAR), _pem(key_pem, tls.KEY_VAR)
    ca_pem = _pem(ca_pem, tls.CA_VAR)
    ca_file_problem = None
    if ca_pem is None and ca_file:
        ca_pem, ca_file_problem = _read_ca_file(ca_file)
    if isinstance(names, str):
        names = [names]
    if names is not None and (not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names)):
        raise AnsibleFilterError("pairserve.llm.tls_problems: names: expected a list of addresses and DNS names, "
                                 "got %r" % (names,))
    if host is not None and not isinstance(host, str):
        raise AnsibleFilterError("pairserve.llm.tls_problems: host: expected a host name, got %s"
                                 % type(host).__name__)
    try:
        warn_days = int(warn_days)
    except (TypeError, ValueError) as err:
        raise AnsibleFilterError("pairserve.llm.tls_problems: warn_days: expected a number of days, got %r"
                                 % (warn_days,)) from err
    try:
        out = tls.problems(cert_pem, key_pem, ca_pem, names or (), warn_days=warn_days)
    except tls.TLSError as err:
        raise AnsibleFilterError("pairserve.llm.tls_problems: %s" % err) from err
    if ca_file_problem and (cert_pem or key_pem):
        out["problems"].append({"variable": tls.CA_VAR, "problem": ca_file_problem})
    prefix = "%s: " % host if host else ""
    for problem in out["problems"]:
        problem["host"] = host
        problem["text"] = "%s%s: %s" % (prefix, problem["variable"], problem["problem"])
    out["warnings"] = [prefix + warning for warning in out["warnings"]]
    return out


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm TLS material filter."""

    def filters(self):
        return {"tls_problems": tls_problems}
