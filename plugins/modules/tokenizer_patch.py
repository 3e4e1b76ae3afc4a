#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Remove the persisted tokenizer truncation from a model snapshot, without touching the cache's blobs."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tokenizer_patch
short_description: Remove the persisted 2048-token truncation from a cached tokenizer, safely
version_added: 0.1.0
description:
  - Sets the top-level C(truncation) of C(tokenizer.json) to C(null) and removes C(max_length),
    C(truncation) (unless C(false)), C(truncation_side), C(truncation_strategy) and C(stride) from
    C(tokenizer_config.json).
  - Why - the multimodal processor of transformers copies these into every call. With the checkpoint's
    C(max_length 2048) (its 4-bit calibration length) an image request whose placeholders expand past 2048 tokens
    fails with a permanent HTTP 400, while text requests stay healthy.
  - Surgical - only the top-level truncation members change; a vocabulary token spelled C(truncation) and every
    other byte of the file stay as they are. Diff mode shows the changed lines with three lines of context.
  - Safe for the huggingface_hub cache - a snapshot entry is a symlink into C(blobs/) that other snapshots share.
    The file is never written in place; the patched text goes to a temporary file beside it and an atomic rename
    replaces the directory entry. The blob stays pristine and is the backup.
  - Idempotent, and re-applied when a new download brought the original link back.
  - After a crash - a run killed at any point leaves each entry whole (the original link or the fully patched
    file), at worst with its hidden temp file (C(.<file>.pairserve-XXXXXXXX.tmp), C(.<file>.pairserve-restore))
    beside it or in the backup directory. The next run removes those (RV(debris_removed), a change) and
    finishes the patch. A temp file is only removed while no live run writes in that directory (a lock on the
    directory, which the kernel releases when its holder dies).
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
    description: The model directory, usually C(snapshots/<sha>) of the huggingface_hub cache.
    type: path
    required: true
  state:
    description:
      - C(patched) removes the truncation settings.
      - C(restored) puts the original entries back (the symlink into C(blobs/), or the saved copy of a file that
        was a regular file).
    type: str
    choices: [patched, restored]
    default: patched
  files:
    description: Which of the two files to handle. Files that do not exist are skipped.
    type: list
    elements: str
    choices: [tokenizer.json, tokenizer_config.json]
    default: [tokenizer.json, tokenizer_config.json]
  backup_dir:
    description:
      - Where the record of the original entries (and a copy of a file that was not a symlink) is kept.
      - Default - C(pairserve/tokenizer-patch/<sha>) in the repository's cache folder for a snapshot, else
        C(.pairserve-tokenizer-patch) inside O(path).
    type: path
notes:
  - Restart the replica afterwards; the processor is built at start-up. The checkpoint role's handler does it.
seealso:
  - module: pairserve.llm.hf_snapshot
"""

EXAMPLES = r"""
- name: Remove the 2048-token truncation from the pinned snapshot
  pairserve.llm.tokenizer_patch:
    path: "{{ snapshot.snapshot_path }}"
  vars:
    ansible_python_interpreter: "{{ pairserve_node_python }}"

- name: Undo it
  pairserve.llm.tokenizer_patch:
    path: "{{ snapshot.snapshot_path }}"
    state: restored
"""

RETURN = r"""
path:
  description: The model directory.
  returned: always
  type: str
files:
  description: Per file, what was found and done.
  returned: always
  type: dict
  sample:
    tokenizer.json:
      action: patched
      entry_before: symlink
      link_target: ../../blobs/9c1f0e
      changes:
        truncation: {direction: Right, max_length: 2048, strategy: LongestFirst, stride: 0}
    tokenizer_config.json:
      action: unchanged
      entry_before: file
backup_dir:
  description: Where the record of the original entries lives.
  returned: always
  type: str
debris_removed:
  description: Temp files of a killed run that this run removed (in check mode, would remove).
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.pairserve.llm.plugins.module_utils import tokenizer as tok


def _patch_one(module, directory, name, record, backup_dir):
    path = os.path.join(directory, name)
    kind = tok.entry_kind(path)
    info = {"entry_before": kind, "action": "unchanged"}
    if kind == "absent":
        info["action"] = "absent"
        return info, None, False
    if kind != "file" and kind != "symlink":
        module.fail_json(msg="%s is neither a regular file nor a symlink; remove it and rerun hf_snapshot." % path)
    if kind == "symlink":
        info["link_target"] = os.readlink(path)
        if not os.path.exists(path):
            module.fail_json(msg="%s is a dangling symlink (%s): its blob is gone. Rerun hf_snapshot to download it "
                                 "again." % (path, info["link_target"]))
    with open(path, "rb") as handle:
        raw = handle.read()
    try:
        new, edits, diff = tok.patch_text(name, raw.decode("utf-8"))
    except (UnicodeDecodeError, tok.PatchError) as exc:
        module.fail_json(msg="%s cannot be patched safely: %s. It was left unchanged." % (path, exc))
    if new is None:
        return info, None, False
    changes = {}
    for edit in edits:
        if "key" in edit:
            changes[edit["key"]] = edit["before"]
        changes.update(edit.get("removed", {}))
    info.update(action="patched", changes=changes)
    if not module.check_mode:
        if kind == "symlink":
            record[name] = {"link": info["link_target"]}
        else:
            # A regular file has no pristine blob behind it: keep a copy to restore from.
            copy = os.path.join(backup_dir, name + ".orig")
            tok.atomic_write(copy, raw)
            record[name] = {"copy": copy}
        tok.write_record(backup_dir, record)
        tok.replace_entry(path, new.encode("utf-8"))
    return info, diff, True


def _restore_one(module, directory, name, record):
    path = os.path.join(directory, name)
    kind = tok.entry_kind(path)
    info = {"entry_before": kind, "action": "unchanged"}
    saved = record.get(name)
    if saved is None:
        if kind == "file" and os.path.basename(os.path.dirname(os.path.abspath(directory))) == "snapshots":
            with open(path, "rb") as handle:
                text = handle.read().decode("utf-8", "replace")
            try:
                still_original = tok.patch_text(name, text)[0] is not None
            except tok.PatchError:
                still_original = False
            if not still_original:
                module.fail_json(msg="%s is a patched regular file but there is no record of its original entry. "
                                     "Delete it and rerun hf_snapshot: it links the pristine blob again." % path)
        return info, None, False
    if "link" in saved:
        if kind == "symlink" and os.readlink(path) == saved["link"]:
            return info, None, False
        target = os.path.join(directory, saved["link"])
        if not os.path.exists(target):
            module.fail_json(msg="Cannot restore %s: its original blob %s is gone. Rerun hf_snapshot to download "
                                 "it again." % (path, target))
        info.update(action="restored", link_target=saved["link"])
        diff = {"before": "%s: patched regular file\n" % name, "after": "%s -> %s\n" % (name, saved["link"])}
        if not module.check_mode:
            tok.restore_link(path, saved["link"])
        return info, diff, True
    with open(saved["copy"], "rb") as handle:
        original = handle.read()
    current = None
    if kind == "file":
        with open(path, "rb") as handle:
            current = handle.read()
    if current == original:
        return info, None, False
    info["action"] = "restored"
    diff = {"before": (current or b"").decode("utf-8", "replace"), "after": original.decode("utf-8", "replace"),
            "before_header": name, "after_header": name}
    if not module.check_mode:
        tok.replace_entry(path, original)
    return info, diff, True


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            state=dict(type="str", choices=["patched", "restored"], default="patched"),
            files=dict(type="list", elements="str", choices=[tok.TOKENIZER_JSON, tok.TOKENIZER_CONFIG_JSON],
                       default=[tok.TOKENIZER_JSON, tok.TOKENIZER_CONFIG_JSON]),
            backup_dir=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    directory = os.path.abspath(module.params["path"])
    if not os.path.isdir(directory):
        module.fail_json(msg="path %s is not a directory; point it at the model snapshot (hf_snapshot returns "
                             "snapshot_path)." % directory)
    names = list(dict.fromkeys(module.params["files"]))
    if all(tok.entry_kind(os.path.join(directory, n)) == "absent" for n in names):
        module.fail_json(msg="path %s has none of %s: is it the model snapshot directory?"
                             % (directory, ", ".join(names)))
    backup_dir = module.params["backup_dir"] or tok.default_backup_dir(directory)
    # a run killed mid-write left its temp file; the entry itself is either the old one or the new one
    debris = tok.sweep_debris(directory, backup_dir, module.check_mode)
    record = tok.read_record(backup_dir)
    files, diffs, changed = {}, [], bool(debris)
    for name in names:
        if module.params["state"] == "patched":
            info, diff, file_changed = _patch_one(module, directory, name, record, backup_dir)
        else:
            info, diff, file_changed = _restore_one(module, directory, name, record)
        files[name] = info
        changed = changed or file_changed
        if diff:
            diffs.append(diff)
    result = dict(changed=changed, path=directory, files=files, backup_dir=backup_dir, debris_removed=debris)
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
