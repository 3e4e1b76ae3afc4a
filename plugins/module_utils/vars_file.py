# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Set one top-level key of a YAML vars file, leaving every other byte of the file as it was.

Used by the module pairserve.llm.vars_file_entry (the bench writes its measured route weights into the inventory
with it). The rules:

- the file must be one YAML document whose top level is a block mapping (or empty, or comments only);
- the key's block (from its line to the line its value ends on) is replaced by the new ``key: value`` block; when
  the key is absent, that block is appended; comments before the key and everything after its value stay;
- refused, naming the reason: a key given more than once, a key that is not a plain scalar at column 0, an anchor
  defined in the key's block (another key may refer to it), a flow mapping at the top level, a vault-encrypted
  file, several documents;
- the new text is parsed again before anything is written: it must hold exactly the new value for the key and
  the same value for every other key (``VarsFileError`` otherwise).

Values tagged ``!vault`` or ``!unsafe`` (Ansible's tags) are read as opaque tagged values, so a vars file with
inline vault values can be handled; they are compared by their text.
"""

from __future__ import annotations

try:
    import yaml

    HAS_YAML = True
    YAML_IMPORT_ERROR = None
except ImportError as _err:  # pragma: no cover - PyYAML comes with ansible-core
    yaml = None
    HAS_YAML = False
    YAML_IMPORT_ERROR = _err

ANSIBLE_TAGS = ("!vault", "!unsafe", "!vault-encrypted")


class VarsFileError(Exception):
    """The file cannot be changed safely; the message says why."""


class Tagged(object):  # pylint: disable=too-few-public-methods
    """A value with one of Ansible's tags (``!vault``), kept opaque and compared by tag and text."""

    def __init__(self, tag, value):
        self.tag = tag
        self.value = value

    def __eq__(self, other):
        return isinstance(other, Tagged) and (self.tag, self.value) == (other.tag, other.value)

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash((self.tag, str(self.value)))

    def __repr__(self):
        return "%s %r" % (self.tag, self.value)


if HAS_YAML:
    class _Loader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
        """SafeLoader that reads Ansible's tags as opaque values."""

    def _tagged(loader, node):
        return Tagged(node.tag, loader.construct_scalar(node) if isinstance(node, yaml.ScalarNode)
                      else loader.construct_object(node, deep=True))

    for _tag in ANSIBLE_TAGS:
        _Loader.add_constructor(_tag, _tagged)


def _require_yaml():
    if not HAS_YAML:
        raise VarsFileError("PyYAML is needed to edit YAML vars files (%s)" % YAML_IMPORT_ERROR)


def load(text):
    """The file's top-level mapping ({} for an empty file); VarsFileError when it is not one."""
    _require_yaml()
    if text.lstrip().startswith("$ANSIBLE_VAULT"):
        raise VarsFileError("the file is vault-encrypted as a whole: decrypt it, or give a plain file for this key")
    try:
        data = yaml.load(text, Loader=_Loader)  # nosec - _Loader is a SafeLoader
    except yaml.YAMLError as err:
        raise VarsFileError("it is not valid YAML (%s)" % " ".join(str(err).split())) from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise VarsFileError("its top level is a %s, not a mapping of variables" % type(data).__name__)
    return data


def same(a, b):
    """Equal values of equal types (True is not 1, 1.0 is not 1), recursively."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return type(a) is type(b) and a == b
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return type(a) is type(b) and a == b


def _content_end(node):
    """The mark right after the last character of the node's content (a block collection's own end mark lies at
    the next token, past any comment that follows it)."""
    if isinstance(node, yaml.MappingNode) and not node.flow_style and node.value:
        return _content_end(node.value[-1][1])
    if isinstance(node, yaml.SequenceNode) and not node.flow_style and node.value:
        return _content_end(node.value[-1])
    return node.end_mark


def _anchors(text, start, end):
    """Anchors defined between two character offsets of ``text``."""
    found = []
    for event in yaml.parse(text, Loader=_Loader):
        anchor = getattr(event, "anchor", None)
        if anchor and not isinstance(event, yaml.AliasEvent) and start <= event.start_mark.index < end:
            found.append(anchor)
    return found


def render_entry(key, value):
    """``key: value`` as a block, the way the file gets it (block style, keys in the given order)."""
    _require_yaml()
    return yaml.safe_dump({key: value}, default_flow_style=False, sort_keys=False, allow_unicode=True, width=1000)


def set_key(text, key, value):
    """(new text, action, previous value or None, whether the key was there) for ``text`` with ``key`` set to
    ``value``. action: replaced, appended or unchanged (then new text is ``text``). Raises VarsFileError."""
    _require_yaml()
    before = load(text)
    present = key in before
    try:
        root = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as err:
        raise VarsFileError("it is not valid YAML (%s)" % " ".join(str(err).split())) from err
    if root is not None and not isinstance(root, yaml.MappingNode):
        raise VarsFileError("its top level is not a mapping of variables")
    matches = [(k, v) for k, v in (root.value if root is not None else [])
               if isinstance(k, yaml.ScalarNode) and k.value == key]
    if len(matches) > 1:
        raise VarsFileError("key %s is given %d times (lines %s): YAML keeps only the last one; leave one"
                            % (key, len(matches), ", ".join(str(node.start_mark.line + 1) for node, _value in matches)))
    if present and same(before[key], value):
        return text, "unchanged", before[key], True
    if root is not None and root.flow_style:
        raise VarsFileError("its top level is a flow mapping ({...}); write it as one variable per line first")
    entry = render_entry(key, value)
    if not matches:
        if present:
            raise VarsFileError("key %s comes from a merge (<<) or a non-plain key, not a line of its own; set it "
                                "by hand" % key)
        if key == "<<":
            raise VarsFileError("<< is YAML's merge key, not a variable")
        if not text.strip():
            new = "---\n" + entry
        else:
            new = text + ("" if text.endswith("\n") else "\n") + entry
        action = "appended"
    else:
        knode, vnode = matches[0]
        if knode.start_mark.column != 0 or knode.style not in (None, "", "'", '"'):
            raise VarsFileError("key %s is not a plain key at the start of its line (line %d)"
                                % (key, knode.start_mark.line + 1))
        if knode.start_mark.line != knode.end_mark.line:
            raise VarsFileError("key %s spans several lines (line %d)" % (key, knode.start_mark.line + 1))
        lines = text.splitlines(True)
        first = knode.start_mark.line
        end = _content_end(vnode)
        last = end.line if end.column > 0 else end.line - 1
        last = max(last, first)
        start_offset = sum(len(line) for line in lines[:first])
        end_offset = sum(len(line) for line in lines[:last + 1])
        anchors = _anchors(text, start_offset, end_offset)
        if anchors:
            raise VarsFileError("key %s defines the anchor(s) %s (lines %d-%d), which other keys may use; move them "
                                "out of it first" % (key, ", ".join("&" + a for a in anchors), first + 1, last + 1))
        tail = "".join(lines[last + 1:])
        new = "".join(lines[:first]) + entry + tail
        action = "replaced"
    verify(before, new, key, value)
    return new, action, before.get(key), present


def verify(before, new_text, key, value):
    """The new text must hold exactly ``value`` for ``key`` and what ``before`` held for every other key."""
    try:
        after = load(new_text)
    except VarsFileError as err:
        raise VarsFileError("the edited file would not parse (%s); nothing was written" % err) from err
    if key not in after or not same(after[key], value):
        raise VarsFileError("the edited file would read %s as %r instead of %r; nothing was written"
                            % (key, after.get(key), value))
    others_before = dict((k, v) for k, v in before.items() if k != key)
    others_after = dict((k, v) for k, v in after.items() if k != key)
    if set(others_before) != set(others_after) or any(not same(others_before[k], others_after[k])
                                                      for k in others_before):
        changed = sorted(str(k) for k in set(others_before) ^ set(others_after)) + sorted(
            str(k) for k in set(others_before) & set(others_after) if not same(others_before[k], others_after[k]))
        raise VarsFileError("the edit would change other keys too (%s); nothing was written" % ", ".join(changed))
