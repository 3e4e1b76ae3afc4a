# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.gpustack_url (documented beside this file): the one rule for the GPUStack server's URL."""

from __future__ import annotations

import ipaddress

from ansible.errors import AnsibleFilterError


def gpustack_url(address, api_port=30080, tls_port=30443, tls=False):
    """``https://<address>:<tls_port>`` when the server has a certificate, else ``http://<address>:<api_port>``."""
    if not isinstance(address, str) or not address.strip() or any(c in address for c in "/@ ?#"):
        raise AnsibleFilterError("pairserve.llm.gpustack_url: %r is not a host name or IP address "
                                 "(pairserve_gpustack_server_address)" % (address,))
    host = address.strip().strip("[]")
    try:
        if ipaddress.ip_address(host).version == 6:
            host = "[%s]" % host
    except ValueError:
        pass  # a name
    port = tls_port if tls else api_port
    try:
        port = int(port)
    except (TypeError, ValueError):
        port = 0
    if not 0 < port < 65536:
        raise AnsibleFilterError("pairserve.llm.gpustack_url: %s is %r, not a TCP port"
                                 % ("pairserve_gpustack_tls_port" if tls else "pairserve_gpustack_api_port",
                                    tls_port if tls else api_port))
    return "%s://%s:%d" % ("https" if tls else "http", host, port)


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm server URL filter."""

    def filters(self):
        return {"gpustack_url": gpustack_url}
