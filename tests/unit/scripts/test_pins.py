"""The pins have one owner each (docs/architecture.md, "One owner per fact"): the inventories' pins.yml files.

lab/pins.py reads them for the tests, the lab and the scripts' Python, and for the shell scripts through its command
line (`python lab/pins.py FILE VARIABLE`). The product's one literal default (module_utils/vllm_args.py
DEFAULT_VERSION, and the option defaults the plugins' documentation must spell out) is held to the example
inventory's pin here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.pairserve.llm.plugins.filter import vllm_args as vllm_args_filter
from ansible_collections.pairserve.llm.plugins.filter import vllm_profile_check
from ansible_collections.pairserve.llm.plugins.module_utils import vllm_args as va
from lab import pins

REPO = Path(__file__).resolve().parents[3]

VERSIONS = ("pairserve_gpustack_version", "pairserve_vllm_version")


def test_the_reader_gives_the_files_values():
    lab = yaml.safe_load(pins.LAB_PINS.read_text())
    assert (pins.GPUSTACK, pins.VLLM) == (lab["pairserve_gpustack_version"], lab["pairserve_vllm_version"])
    nxt = yaml.safe_load((pins.UPGRADE_DIR / "next.yml").read_text())
    assert pins.NEXT == nxt and pins.SERVE_VLLM == nxt["pairserve_vllm_version"]
    assert pins.PREVIOUS == yaml.safe_load((pins.UPGRADE_DIR / "previous.yml").read_text())


def test_the_reader_refuses_what_is_not_there(tmp_path):
    with pytest.raises(pins.PinError, match="has no pairserve_nothing"):
        pins.pin(pins.LAB_PINS, "pairserve_nothing")
    with pytest.raises(ValueError):
        pins.upgrade("latest")
    bad = tmp_path / "pins.yml"
    bad.write_text("- a list\n")
    with pytest.raises(pins.PinError, match="not a mapping"):
        pins.read(bad)


def test_lab_pins_the_products_versions_and_the_upgrade_starts_there():
    # The lab runs the collection's production versions (its CPU stand-ins aside); the upgrade scenario's previous
    # pins are those versions, its next pins another GPUStack and vLLM.
    example = pins.example()
    for name in VERSIONS:
        assert pins.lab()[name] == example[name] == pins.PREVIOUS[name], name
        assert pins.NEXT[name] != pins.PREVIOUS[name], name


def test_product_defaults_are_the_example_pins():
    pinned = pins.example()["pairserve_vllm_version"]
    assert va.DEFAULT_VERSION == pinned
    assert va.DEFAULT_VERSION in va.SUPPORTED_VERSIONS
    # ansible-doc needs a literal default in the option documentation: it must say what the code does.
    for plugin in (vllm_args_filter, vllm_profile_check):
        doc = yaml.safe_load(plugin.DOCUMENTATION)
        assert str(doc["options"]["version"]["default"]) == va.DEFAULT_VERSION, plugin.__name__


@pytest.mark.parametrize("pins_file,name", [
    ("lab/inventory/group_vars/all/pins.yml", "pairserve_vllm_version"),
    ("lab/inventory/group_vars/all/pins.yml", "pairserve_runner_image"),
    ("lab/inventory/upgrade/next.yml", "pairserve_gpustack_version"),
])
def test_the_command_line_reader_is_the_same_reader(pins_file, name):
    """What the shell scripts call (scripts/build_caches.sh: `python lab/pins.py FILE VARIABLE`)."""
    out = subprocess.run([sys.executable, "lab/pins.py", pins_file, name],
                         cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == pins.read(REPO / pins_file)[name]


def test_the_command_line_reader_fails_loudly():
    out = subprocess.run([sys.executable, "lab/pins.py", "lab/inventory/group_vars/all/pins.yml", "pairserve_nothing"],
                         cwd=REPO, capture_output=True, text=True, check=False)
    assert out.returncode != 0 and "has no pairserve_nothing" in out.stderr
