#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module pairserve.llm.listening_ports: the node's listening TCP ports and the processes holding them."""

from __future__ import annotations

DOCUMENTATION = r"""
module: listening_ports
short_description: List a node's listening TCP ports with the process that holds each
version_added: 0.1.0
description:
  - Reads C(/proc/net/tcp), C(/proc/net/tcp6) and each process's open files under C(/proc), so it needs neither
    C(ss) nor C(lsof) on the node. Run it as root to see every process.
  - The preflight role uses it before anything is installed - a port the collection will bind (GPUStack's API,
    the HTTPS front, the worker and its metrics) held by another program is refused naming that program.
  - A socket whose holder this node does not show (another PID namespace) is listed with C(pid) and C(process) null.
author:
  - pairserve.llm maintainers (@pairserve)
extends_documentation_fragment:
  - pairserve.llm.attributes
  - pairserve.llm.attributes.INFO_MODULE
options:
  ports:
    description: Only these ports (all listening ports when empty).
    type: list
    elements: int
    default: []
  proc:
    description: Where the proc file system is mounted (another mount of it, e.g. the host's seen from a container).
    type: path
    default: /proc
"""

EXAMPLES = r"""
- name: Who holds the GPUStack API port
  pairserve.llm.listening_ports:
    ports: [30080]
  register: held
"""

RETURN = r"""
sockets:
  description: Listening TCP sockets, each with C(port), C(address), C(pid) and C(process) (its C(comm) name).
  returned: always
  type: list
  elements: dict
  sample:
    - {port: 30080, address: 0.0.0.0, pid: 1234, process: gpustack}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.pairserve.llm.plugins.module_utils.node_ports import listening


def main():
    module = AnsibleModule(
        argument_spec={
            "ports": {"type": "list", "elements": "int", "default": []},
            "proc": {"type": "path", "default": "/proc"},
        },
        supports_check_mode=True,
    )
    wanted = set(module.params["ports"])
    sockets = [s for s in listening(module.params["proc"]) if not wanted or s["port"] in wanted]
    # Read-only, in check mode too.
    module.exit_json(changed=False, sockets=sockets)


if __name__ == "__main__":
    main()
