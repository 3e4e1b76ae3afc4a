# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters pairserve.llm.gpustack_url and pairserve.llm.gpustack_server (documented beside this file): the one rule
for the GPUStack server's URL, and for which host the server is with its ports as every other role reads them."""

from __future__ import annotations

import ipaddress

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.plugin_utils import role_defaults as _role_defaults

GROUP = "gpustack_server"


def gpustack_url(address, api_port=None, tls_port=None, tls=False):
    """``https://<address>:<tls_port>`` when the server has a certificate, else ``http://<address>:<api_port>``; a port
    not given is the gpustack_server role's default (its defaults file, the one owner)."""
    if api_port is None:
        api_port = _server_defaults()["pairserve_gpustack_api_port"]
    if tls_port is None:
        tls_port = _server_defaults()["pairserve_gpustack_tls_port"]
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


def _server_defaults():
    """The gpustack_server role's defaults: the one owner of the ports' defaults, for a host whose inventory does
    not set them (role defaults are not in hostvars)."""
    return _role_defaults.role_defaults("gpustack_server")


def _port(value, name, host):
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = 0
    if not 0 < port < 65536:
        raise AnsibleFilterError("pairserve.llm.gpustack_server: %s of %s is %r, not a TCP port" % (name, host, value))
    return port


def gpustack_server(groups, hostvars, host=None):
    """The GPUStack server of this inventory: {host, api_port, tls_port, local_url}. ``host`` is the one given (a
    role's own setting, e.g. the worker role's pairserve_gpustack_server_host), else the first host of group
    gpustack_server ("" when the group has none: the validation play names that mistake before anything runs);
    the ports are that host's inventory values, else the gpustack_server role's defaults; ``local_url`` is GPUStack's
    own API on the server itself (``http://127.0.0.1:<api_port>``), where the day-2 plays send their API calls by
    delegate_to."""
    hosts = list((groups or {}).get(GROUP) or [])
    host = host or (hosts[0] if hosts else "")
    found = {}
    if host:
        try:
            found = hostvars[host]
        except (KeyError, TypeError):
            found = {}
    defaults = _server_defaults()
    ports = {}
    for key, name in (("api_port", "pairserve_gpustack_api_port"), ("tls_port", "pairserve_gpustack_tls_port")):
        value = found[name] if name in found else defaults[name]
        ports[key] = _port(value, name, host or "the GPUStack server")
    return {"host": host, "api_port": ports["api_port"], "tls_port": ports["tls_port"],
            "local_url": "http://127.0.0.1:%d" % ports["api_port"]}


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm server URL filters."""

    def filters(self):
        return {"gpustack_url": gpustack_url, "gpustack_server": gpustack_server}
