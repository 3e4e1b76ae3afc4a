# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A role's defaults as its ``defaults/main.yml`` has them: the one way a play, a filter or another role reads a
default it does not own (role defaults are not in ``hostvars``, and a second copy of a value drifts); and which
role owns a variable's default (``owner_default``, for lookup pairserve.llm.setting).

Controller side only (filters): the collection ships its roles beside its plugins. Values are returned as written:
a default that is a Jinja expression stays a string, and the callers that need literal values select them.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"
_NAME = re.compile(r"^[a-z_][a-z0-9_]*\Z")


class RoleDefaultsError(ValueError):
    """A role that does not exist, or a defaults file that is not a mapping."""


@functools.lru_cache(maxsize=None)
def _read(role: str) -> dict:
    path = ROLES / role / "defaults" / "main.yml"
    try:
        with open(path, "r", encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except FileNotFoundError as exc:
        known = sorted(p.name for p in ROLES.iterdir() if (p / "defaults" / "main.yml").is_file())
        raise RoleDefaultsError("role %r has no defaults file (%s); roles with defaults: %s"
                                % (role, path, ", ".join(known))) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RoleDefaultsError("%s is not a mapping of variables (%s)" % (path, type(data).__name__))
    return data


def role_defaults(role: str, names=None) -> dict:
    """The defaults of ROLE (a short name, ``gpustack_worker``, or ``pairserve.llm.gpustack_worker``), a copy.

    NAMES, when given, keeps only those variables; a name the role does not define is an error (a renamed default
    must not turn into a silent empty value where it is read).
    """
    if not isinstance(role, str):
        raise RoleDefaultsError("a role name is a string, got %s" % type(role).__name__)
    short = role[len("pairserve.llm."):] if role.startswith("pairserve.llm.") else role
    if not _NAME.match(short):
        raise RoleDefaultsError("%r is not a role of this collection" % role)
    data = _read(short)
    if names is None:
        return dict(data)
    if isinstance(names, str):
        names = [names]
    missing = [n for n in names if n not in data]
    if missing:
        raise RoleDefaultsError("role %s has no default %s" % (short, ", ".join(sorted(missing))))
    return {n: data[n] for n in names}


def roles_with_defaults() -> list:
    """The collection's roles that have a defaults file, by name."""
    return list(_owners()[0])


@functools.lru_cache(maxsize=None)
def _owners():
    """(roles with defaults, {variable: ((role, default), ...)}): every role's defaults read once, for all lookups
    of a run (a play asks for dozens of settings)."""
    roles = tuple(sorted(p.name for p in ROLES.iterdir() if (p / "defaults" / "main.yml").is_file()))
    index = {}
    for role in roles:
        for name, value in _read(role).items():
            index.setdefault(name, []).append((role, value))
    return roles, {name: tuple(found) for name, found in index.items()}


def clear_cache() -> None:
    """Forget what was read (tests that point ROLES elsewhere)."""
    _read.cache_clear()
    _owners.cache_clear()


def owner_default(name: str):
    """(roles, value): the roles whose defaults define variable NAME and its default there. A variable several roles
    define (a role that uses it throughout keeps its own copy) must have the same default in each; a default that
    differs between them, or no role defining it, is an error naming them."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise RoleDefaultsError("%r is not a variable name" % (name,))
    found = _owners()[1].get(name)
    if not found:
        raise RoleDefaultsError("no role of this collection has a default for %s: set it in the inventory" % name)
    values = set(repr(value) for _role, value in found)
    if len(values) > 1:
        raise RoleDefaultsError("the roles that define %s disagree on its default: %s" % (
            name, ", ".join("%s %r" % (role, value) for role, value in found)))
    return [role for role, _value in found], found[0][1]
