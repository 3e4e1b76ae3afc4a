# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lookup pairserve.llm.controller_wheel: the controller's wheel, built on the Ansible controller."""

from __future__ import annotations

DOCUMENTATION = r"""
name: controller_wheel
short_description: The controller package's wheel, built on the Ansible controller
version_added: 0.1.0
author: pairserve.llm maintainers (@pairserve)
description:
  - Builds the wheel of the controller (docs/controller.md) from the collection's own files, the package
    C(pairserve_controller) and the collection's module_utils it imports (read from its imports), and keeps it in a
    directory on the Ansible controller. The controller role copies it to the node and installs it into the
    controller's venv with pip.
  - The wheel is reproducible, so a copy to a node is idempotent; its version is the collection's with the sources'
    digest as a local label (C(0.1.0+g<12 hex>)), so changed sources are a new version and unchanged ones are not
    installed again.
  - The wheel is written on the Ansible controller in check mode too (a cache of the controller's, nothing on a node).
options:
  dir:
    description:
      - Where the wheels are kept on the Ansible controller; when not given, C($XDG_CACHE_HOME/pairserve.llm/wheels)
        (C(~/.cache/pairserve.llm/wheels)).
    type: path
"""

EXAMPLES = r"""
- name: Build the controller's wheel
  ansible.builtin.set_fact:
    controller_wheel: "{{ lookup('pairserve.llm.controller_wheel') }}"

- name: Copy it to the node
  ansible.builtin.copy:
    src: "{{ controller_wheel.path }}"
    dest: "/opt/pairserve/controller/wheels/{{ controller_wheel.file }}"
    mode: "0644"
"""

RETURN = r"""
_raw:
  description: One dict, the wheel.
  type: list
  elements: dict
  contains:
    path:
      description: The wheel on the Ansible controller.
      type: str
    file:
      description: Its file name.
      type: str
    name:
      description: The distribution's name (C(pairserve-controller)).
      type: str
    version:
      description: Its version, the collection's with the sources' digest.
      type: str
    sha256:
      description: The wheel's sha256.
      type: str
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.pairserve.llm.plugins.plugin_utils import controller_wheel


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if terms:
            raise AnsibleLookupError("pairserve.llm.controller_wheel: takes no terms (got %r)" % (terms,))
        self.set_options(var_options=variables, direct=kwargs)
        where = self.get_option("dir")
        try:
            return [controller_wheel.write(where or None)]
        except (controller_wheel.WheelError, OSError) as exc:
            raise AnsibleLookupError("pairserve.llm.controller_wheel: %s" % exc) from exc
