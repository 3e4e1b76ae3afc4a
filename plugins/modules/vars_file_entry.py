#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Set one top-level key of a YAML vars file, keeping every other byte of the file."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vars_file_entry
short_description: Set one top-level variable of a YAML vars file, keeping the rest of the file byte for byte
version_added: 0.1.0
description:
  - Sets the top-level key O(key) of the YAML vars file O(path) (an inventory C(group_vars) or C(host_vars) file)
    to O(value), on the host that runs it (the bench delegates it to the Ansible controller).
  - Surgical - only the key's block (from its line to the line its value ends on) is replaced by C(key:) and the
    value in block style; an absent key is appended. Comments, blank lines and every other key stay as they were,
    byte for byte.
  - Refuses, naming the reason and leaving the file alone - the key given more than once, a key that is not a plain
    key at the start of its line, an anchor defined in the key's block (another key may use it), a top level
    written as a flow mapping, several YAML documents, a file vault-encrypted as a whole, a file that is not
    YAML. Inline C(!vault) values of other keys are fine.
  - Verified before writing - the new text must parse (a safe YAML load) into exactly O(value) for O(key) and the
    same value for every other key.
  - Atomic - the new text goes to a temporary file beside the file and a rename replaces it; the file's mode and
    owner are kept, and a symlink keeps pointing at the file it points at.
  - Changes nothing when O(key) already holds O(value) (however it is written). Diff mode shows the whole file
    before and after.
author:
  - pairserve.llm maintainers (@pairserve)
extends_documentation_fragment:
  - pairserve.llm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
options:
  path:
    description: The YAML vars file. A relative path is relative to the working directory of the module.
    type: path
    required: true
  key:
    description: The top-level key (the variable name).
    type: str
    required: true
  value:
    description: The value to set (any YAML value - a mapping, a list, a string, a number).
    type: raw
    required: true
  create:
    description:
      - Create the file when it does not exist (its directory must exist). It gets a C(---) line and the key, mode
        0644 less the umask.
      - V(false) fails when the file is absent.
    type: bool
    default: true
notes:
  - Needs PyYAML on the host that runs it (ansible-core's own dependency on the controller).
seealso:
  - module: pairserve.llm.gpustack_route
"""

EXAMPLES = r"""
- name: Keep the measured route weights in the inventory
  pairserve.llm.vars_file_entry:
    path: "{{ inventory_dir }}/group_vars/all/route_weights.yml"
    key: pairserve_route_weights
    value: {node-a: 58, node-b: 42}
  delegate_to: localhost
"""

RETURN = r"""
path:
  description: The file written (the target of a symlink).
  returned: always
  type: str
key:
  description: The key.
  returned: always
  type: str
action:
  description: C(replaced), C(appended), C(created) or C(unchanged).
  returned: always
  type: str
  sample: replaced
previous:
  description: The key's value before (null when it was absent).
  returned: always
  type: raw
  sample: {node-a: 50, node-b: 50}
previous_present:
  description: Whether the key was in the file before.
  returned: always
  type: bool
"""

import os
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.pairserve.llm.plugins.module_utils import _files, vars_file


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            key=dict(type="str", required=True, no_log=False),
            value=dict(type="raw", required=True),
            create=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    if not vars_file.HAS_YAML:
        module.fail_json(msg=missing_required_lib("PyYAML"), exception=str(vars_file.YAML_IMPORT_ERROR))
    key, value = module.params["key"], module.params["value"]
    path = os.path.realpath(os.path.abspath(module.params["path"]))
    result = dict(changed=False, path=path, key=key, action="unchanged", previous=None, previous_present=False)
    if os.path.isdir(path):
        module.fail_json(msg="%s is a directory: name a .yml file in it." % path, **result)
    exists = os.path.exists(path)
    if exists and not os.path.isfile(path):
        module.fail_json(msg="%s is not a regular file." % path, **result)
    if not exists:
        if not module.params["create"]:
            module.fail_json(msg="%s does not exist (create is false)." % path, **result)
        if not os.path.isdir(os.path.dirname(path)):
            module.fail_json(msg="%s cannot be created: its directory %s does not exist." % (path, os.path.dirname(path)),
                             **result)
    text = ""
    if exists:
        try:
            with open(path, "rb") as handle:
                text = handle.read().decode("utf-8")
        except UnicodeDecodeError as err:
            module.fail_json(msg="%s is not UTF-8 text (%s); it was left unchanged." % (path, err), **result)
    try:
        new, action, previous, present = vars_file.set_key(text, key, value)
    except vars_file.VarsFileError as err:
        module.fail_json(msg="Cannot set %s in %s safely: %s. The file was left unchanged." % (key, path, err),
                         **result)
    if not exists:
        action = "created"
    result.update(action=action, previous=previous, previous_present=present, changed=action != "unchanged")
    if result["changed"]:
        result["diff"] = {"before": text, "after": new, "before_header": path if exists else "%s (absent)" % path,
                          "after_header": path}
        if not module.check_mode:
            try:
                _files.atomic_write(path, new, like=os.stat(path) if exists else None)
            except OSError as err:
                module.fail_json(msg="Cannot write %s: %s. The file was left unchanged." % (path, err),
                                 exception=traceback.format_exc(), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
