# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The tokenizer truncation fix, as text surgery that leaves the HF cache's blobs alone.

Why: the checkpoint's tokenizer.json keeps `truncation.max_length: 2048` (its 4-bit calibration length) and
tokenizer_config.json carries `max_length` / `truncation: true`. The multimodal processor of transformers copies
those into every call, so once image placeholders expand past 2048 tokens vLLM answers a permanent HTTP 400
while text requests stay healthy (the seed's ten-frame camera failure). The fix: top-level `truncation: null`
in tokenizer.json, and no truncation keys in tokenizer_config.json.

How: only the top-level members are touched (a vocabulary token spelled "truncation" lives deeper and is never
matched); everything else stays byte for byte. The file is never written in place: a snapshot entry is a symlink
into blobs/ shared by every snapshot with the same content (or, in an export, a hardlink to it), so the patched
text goes to a temp file beside it and os.replace swaps the directory entry. The blob stays the pristine backup.
A run killed mid-write leaves only that temp file (never a half-written tokenizer file); the next run removes it.
"""

from __future__ import annotations

import json
import os
import re
import stat

from ansible_collections.pairserve.llm.plugins.module_utils.hub import atomic_write, sweep_temp_files, writing_in

TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG_JSON = "tokenizer_config.json"
# tokenizer_config.json keys the processor merges into every call (the seed's 2048 hid here too).
CONFIG_KEYS = ("max_length", "truncation", "truncation_side", "truncation_strategy", "stride")

_TOKEN_RE = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\],:]')


class PatchError(Exception):
    """A file that cannot be patched safely; the message says which and why."""


def top_level_members(text: str) -> dict:
    """Spans of the top-level members of a JSON object, without building the (possibly 20 MB) document.

    Returns {"open": index after '{', "members": [{key, key_start, value_start, value_end, sep}]} where
    value_end is the end of the value text and sep the index of the ',' or '}' that follows it.
    """
    start = len(text) - len(text.lstrip())
    if not text[start:start + 1] == "{":
        raise PatchError("not a JSON object")
    members = []
    depth = 0
    pending_key = None
    current = None
    for match in _TOKEN_RE.finditer(text, start):
        tok = match.group()
        if tok in "{[":
            depth += 1
            continue
        if tok in "}]" or tok == ",":
            if depth == 1 and current is not None:
                current["value_end"] = len(text[:match.start()].rstrip())
                current["sep"] = match.start()
                members.append(current)
                current = None
            if tok in "}]":
                depth -= 1
                if depth == 0:
                    return {"open": start + 1, "members": members, "close": match.start()}
            continue
        if depth != 1:
            continue
        if tok == ":":
            if pending_key is not None:
                key, key_start = pending_key
                value_start = match.end() + (len(text) - match.end() - len(text[match.end():].lstrip()))
                current = {"key": key, "key_start": key_start, "value_start": value_start}
                pending_key = None
            continue
        if current is None:
            pending_key = (json.loads(tok), match.start())
    raise PatchError("unterminated JSON object")


def _value_text(text: str, member: dict) -> str:
    return text[member["value_start"]:member["value_end"]]


def plan_tokenizer_json(text: str) -> list:
    """Edits for tokenizer.json: the top-level truncation set to null."""
    for member in top_level_members(text)["members"]:
        if member["key"] == "truncation" and _value_text(text, member) != "null":
            return [{"start": member["value_start"], "end": member["value_end"], "new": "null",
                     "key": "truncation", "before": json.loads(_value_text(text, member))}]
    return []


def plan_tokenizer_config(text: str) -> list:
    """Edits for tokenizer_config.json: the truncation keys removed (a `truncation: false` is harmless and kept)."""
    parsed = top_level_members(text)
    members = parsed["members"]
    doomed = [i for i, m in enumerate(members)
              if m["key"] in CONFIG_KEYS and not (m["key"] == "truncation" and _value_text(text, m) == "false")]
    if not doomed:
        return []
    # The doomed members at the very end take the comma before them with them; the others take their own.
    tail_start = len(members)
    while tail_start > 0 and (tail_start - 1) in doomed:
        tail_start -= 1
    edits = []
    for i in doomed:
        if i >= tail_start:
            continue
        prev_sep = members[i - 1]["sep"] + 1 if i > 0 else parsed["open"]
        edits.append({"start": prev_sep, "end": members[i]["sep"] + 1})
    if tail_start < len(members):
        start = members[tail_start - 1]["value_end"] if tail_start > 0 else parsed["open"]
        edits.append({"start": start, "end": members[-1]["value_end"]})
    for edit in edits:
        edit["new"] = ""
    removed = {members[i]["key"]: json.loads(_value_text(text, members[i])) for i in doomed}
    edits.sort(key=lambda e: e["start"])
    edits[0]["removed"] = removed
    return edits


def apply_edits(text: str, edits: list) -> str:
    out = text
    for edit in sorted(edits, key=lambda e: e["start"], reverse=True):
        out = out[:edit["start"]] + edit["new"] + out[edit["end"]:]
    return out


def excerpt(text: str, start: int, end: int, context: int = 3) -> tuple:
    """The lines holding text[start:end] plus `context` lines around them, and the 1-based first line number."""
    lo = start
    for _step in range(context + 1):
        lo = text.rfind("\n", 0, lo)
        if lo < 0:
            break
    lo = 0 if lo < 0 else lo + 1
    hi = end
    for _step in range(context + 1):
        nxt = text.find("\n", hi)
        if nxt < 0:
            hi = len(text)
            break
        hi = nxt + 1
    return text[lo:hi], text.count("\n", 0, lo) + 1


def patch_text(name: str, text: str) -> tuple:
    """(new text, edits, diff dict) for one file; new text is None when nothing needs changing."""
    edits = plan_tokenizer_json(text) if name == TOKENIZER_JSON else plan_tokenizer_config(text)
    if not edits:
        return None, [], None
    new = apply_edits(text, edits)
    try:
        parsed = json.loads(new)
    except ValueError as exc:  # the surgery must never produce broken JSON; refuse instead of writing it
        raise PatchError("%s: the patched text does not parse (%s); file left unchanged" % (name, exc))
    if name == TOKENIZER_JSON and parsed.get("truncation") is not None:
        raise PatchError("%s: truncation is still set after patching; file left unchanged" % name)
    if name == TOKENIZER_CONFIG_JSON and any(k in parsed and not (k == "truncation" and parsed[k] is False)
                                             for k in CONFIG_KEYS):
        raise PatchError("%s: truncation keys remain after patching; file left unchanged" % name)
    start = min(e["start"] for e in edits)
    end_before = max(e["end"] for e in edits)
    end_after = end_before + len(new) - len(text)
    before_part, line = excerpt(text, start, end_before)
    after_part, _line = excerpt(new, start, max(end_after, start))
    diff = {"before": before_part, "after": after_part,
            "before_header": "%s (from line %d)" % (name, line), "after_header": "%s (from line %d)" % (name, line)}
    return new, edits, diff


def entry_kind(path: str) -> str:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    if stat.S_ISLNK(st.st_mode):
        return "symlink"
    if stat.S_ISREG(st.st_mode):
        return "file"
    return "other"


def replace_entry(path: str, data: bytes) -> None:
    """Swap the directory entry for a new regular file; the old symlink / hardlink target is never opened for write."""
    atomic_write(path, data, mode=0o644)


def restore_link(path: str, target: str) -> None:
    """Atomically put a symlink back in place of the patched file."""
    directory = os.path.dirname(path)
    tmp = os.path.join(directory, ".%s.pairserve-restore" % os.path.basename(path))
    with writing_in(directory):  # a run killed here leaves the temp link to the next run's sweep_debris
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(target, tmp)
        os.replace(tmp, path)


def sweep_debris(directory: str, backup_dir: str, check_mode: bool) -> list:
    """Temp files a run killed mid-write left beside the tokenizer files and in the backup directory.

    Only names this module writes are touched (`.<file>.pairserve-XXXXXXXX.tmp`, `.<file>.pairserve-restore`),
    and only while no live run writes there (hub.sweep_temp_files). Returns the removed paths.
    """
    names = (TOKENIZER_JSON, TOKENIZER_CONFIG_JSON)
    removed = sweep_temp_files(directory, targets=set(names), check_mode=check_mode)
    removed += sweep_temp_files(backup_dir, targets={"record.json"} | set(n + ".orig" for n in names),
                                check_mode=check_mode)
    return removed


def default_backup_dir(directory: str) -> str:
    """For an HF cache snapshot: <repo>/pairserve/tokenizer-patch/<sha> (beside, not inside, the snapshot)."""
    directory = os.path.abspath(directory)
    parent = os.path.dirname(directory)
    if os.path.basename(parent) == "snapshots":
        return os.path.join(os.path.dirname(parent), "pairserve", "tokenizer-patch", os.path.basename(directory))
    return os.path.join(directory, ".pairserve-tokenizer-patch")


def read_record(backup_dir: str) -> dict:
    try:
        with open(os.path.join(backup_dir, "record.json"), encoding="utf-8") as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def write_record(backup_dir: str, record: dict) -> None:
    atomic_write(os.path.join(backup_dir, "record.json"), json.dumps(record, indent=1, sort_keys=True).encode())
