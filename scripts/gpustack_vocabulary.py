# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Derive, from an installed GPUStack's own sources, the rules the collection checks before installing it.

    .venv/bin/python scripts/gpustack_vocabulary.py --write .cache/gpustack/venv-2.2.3/lib/python3.11/site-packages \
        "/tmp/up230/site=the gpustack 2.3.0 and gpustack-runtime 0.2.6 wheels, unpacked"   # pip download --no-deps
    .venv/bin/python scripts/gpustack_vocabulary.py --show  <site-packages>      # print what it reads, as JSON

What is read (with Python's ast: nothing of GPUStack is imported or run):
  - gpustack-runtime's enumerated worker settings: every `choice(getenv("NAME"), options=[...], default=...)` in
    gpustack_runtime/envs.py. The runtime's choice() returns the DEFAULT for a value outside the options, silently
    (a `cdi` for `CDI` is ignored), so the collection refuses such a value in pairserve_gpustack_worker_env.
  - GPUStack's password rule: each `if not re.search(PATTERN, value): raise ValueError(MESSAGE)` of
    gpustack/schemas/users.py `_validate_password` (what its API and UI apply whenever a password is set).
  - the pattern a route name must match (gpustack/schemas/model_routes.py `name_pattern`).

The table (plugins/module_utils/gpustack_vocabulary_table.py) is keyed by the GPUStack version the site-packages hold
(gpustack/__init__.py); tests/integration/gpustack/test_gpustack_vocabulary_live.py compares it with the sources of
the GPUStack venv the integration tier builds for the lab's pin, and GPUStack's own password check with the table's.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "plugins" / "module_utils" / "gpustack_vocabulary_table.py"


def _literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def runtime_env_choices(envs_py):
    """{NAME: {"options": [...], "default": str}} of every choice(getenv("NAME"), options=..., default=...)."""
    found = {}
    for node in ast.walk(ast.parse(Path(envs_py).read_text())):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "choice"):
            continue
        getenv = node.args[0] if node.args else None
        if not (isinstance(getenv, ast.Call) and getattr(getenv.func, "id", None) == "getenv" and getenv.args):
            continue
        name = _literal(getenv.args[0])
        keywords = dict((k.arg, _literal(k.value)) for k in node.keywords)
        if isinstance(name, str) and isinstance(keywords.get("options"), list):
            found[name] = {"options": [str(o) for o in keywords["options"]], "default": str(keywords.get("default", ""))}
    return found


def password_rules(users_py):
    """[[regex, message], ...] of `_validate_password`: each re.search pattern the password must match."""
    tree = ast.parse(Path(users_py).read_text())
    function = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_validate_password"),
                    None)
    if function is None:
        raise SystemExit("gpustack_vocabulary: no _validate_password in %s: read the release's rule again" % users_py)
    rules = []
    for node in ast.walk(function):
        if not isinstance(node, ast.If):
            continue
        test = node.test
        if not (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Call)
                and getattr(test.operand.func, "attr", None) == "search"):
            continue
        raises = [n for n in node.body if isinstance(n, ast.Raise)]
        message = _literal(raises[0].exc.args[0]) if raises and getattr(raises[0].exc, "args", None) else None
        rules.append([_literal(test.operand.args[0]), message])
    if not rules:
        raise SystemExit("gpustack_vocabulary: _validate_password in %s has no re.search rule any more" % users_py)
    return rules


def module_string(path, name):
    """The string a module-level ``name = '...'`` assigns in ``path``."""
    for node in ast.parse(Path(path).read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]:
            value = _literal(node.value)
            if isinstance(value, str):
                return value
    raise SystemExit("gpustack_vocabulary: no %s = '...' in %s: read the release's rule again" % (name, path))


def read(site_packages):
    site = Path(site_packages)
    version = None
    for line in (site / "gpustack" / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            version = _literal(ast.parse(line).body[0].value).lstrip("v")
    return version, {
        "runtime_env_choices": runtime_env_choices(site / "gpustack_runtime" / "envs.py"),
        "password_rules": password_rules(site / "gpustack" / "schemas" / "users.py"),
        # the pattern every route target's route_name must match (schemas/model_routes.py): a route GPUStack cannot
        # point a target at fails only when the route role runs, after the install
        "route_name_pattern": module_string(site / "gpustack" / "schemas" / "model_routes.py", "name_pattern"),
    }


def render_table(tables, sources):
    out = [
        "# -*- coding: utf-8 -*-",
        "# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)",
        '"""GENERATED by scripts/gpustack_vocabulary.py from each GPUStack release\'s own sources: do not edit.',
        "",
        "VOCABULARY[version] = {\"runtime_env_choices\": {NAME: {\"options\", \"default\"}}, \"password_rules\": [[regex, message]]}.",
        "Read through module_utils/gpustack_vocabulary.py. Sources:",
    ]
    for version in sorted(sources):
        out.append("  %s: %s" % (version, sources[version]))
    out += ['"""', "", "from __future__ import annotations", "", "VOCABULARY = " + _py(tables, 0)]
    return "\n".join(out) + "\n"


def _py(value, depth):
    """Python source of a JSON-like value, one key a line (stable, reviewable diffs)."""
    pad = "    " * (depth + 1)
    if isinstance(value, dict):
        items = ["%s%s: %s," % (pad, json.dumps(k), _py(value[k], depth + 1)) for k in sorted(value)]
        return "{\n" + "\n".join(items) + "\n" + "    " * depth + "}"
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        return "[\n" + "\n".join("%s%s," % (pad, json.dumps(v)) for v in value) + "\n" + "    " * depth + "]"
    return json.dumps(value)


def main(argv=None):
    cli = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    cli.add_argument("site_packages", nargs="+", metavar="SITE[=SOURCE]",
                     help="site-packages of a GPUStack venv (gpustack and gpustack_runtime), or the two wheels unpacked "
                          "in one directory; SOURCE says where it came from in the table")
    cli.add_argument("--write", action="store_true", help="write %s" % TABLE.name)
    args = cli.parse_args(argv)
    tables, sources = {}, {}
    for spec in args.site_packages:
        site, note = (spec.split("=", 1) + [""])[:2]
        version, table = read(site)
        tables[version] = table
        where = Path(site).resolve()
        sources[version] = note or (str(where.relative_to(REPO)) if where.is_relative_to(REPO) else str(where))
    if args.write:
        TABLE.write_text(render_table(tables, sources))
        print("gpustack_vocabulary: wrote %s (%s)" % (TABLE.relative_to(REPO), ", ".join(sorted(tables))), file=sys.stderr)
    else:
        print(json.dumps(tables, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
