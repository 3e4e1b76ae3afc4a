# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.tls_expiry (documented beside this file); the reading is module_utils/tls.py's."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import tls


def tls_expiry(cert_pem, ca_pem=None, warn_days=30):
    for variable, value in (("certificate", cert_pem), ("ca_pem", ca_pem)):
        if value is not None and not isinstance(value, (str, bytes)):
            raise AnsibleFilterError("pairserve.llm.tls_expiry: %s: expected PEM text, got %s"
                                     % (variable, type(value).__name__))
    try:
        warn_days = int(warn_days)
    except (TypeError, ValueError) as err:
        raise AnsibleFilterError("pairserve.llm.tls_expiry: warn_days: expected a number of days, got %r"
                                 % (warn_days,)) from err
    try:
        return tls.expiry(cert_pem, ca_pem, warn_days=warn_days)
    except tls.TLSError as err:
        raise AnsibleFilterError("pairserve.llm.tls_expiry: %s" % err) from err


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm certificate expiry filter."""

    def filters(self):
        return {"tls_expiry": tls_expiry}
