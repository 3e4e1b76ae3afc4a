"""The lab's version pins, read from their one owner (kubespray's download.yml pattern): every version and digest
that means "the pinned one" in the tests, the lab and the scripts comes from here, never from a literal.

    from lab import pins

    pins.GPUSTACK             # pairserve_gpustack_version of lab/inventory/group_vars/all/pins.yml (what the lab,
                              # the molecule nodes and the integration tier's GPUStack server install)
    pins.VLLM                 # pairserve_vllm_version of the same file (the lab's replicas, the rendered arguments)
    pins.RUNNER_IMAGE         # its pairserve_runner_image, the vLLM version filled in (127.0.0.1:5000/lab/vllm-cpu:...)
    pins.PREVIOUS, pins.NEXT  # the upgrade scenario's pins (lab/inventory/upgrade/previous.yml, next.yml) as dicts
    pins.SERVE_VLLM           # the vLLM the integration tier serves on CPU: the upgrade's next pin (see below)
    pins.lab(), pins.upgrade("next"), pins.example(), pins.read(path)   # the whole files, parsed once

Shell scripts read the same files through this module's command line (scripts/build_caches.sh's `pin`):

    python lab/pins.py lab/inventory/group_vars/all/pins.yml pairserve_vllm_version   # prints 0.25.1

A pin that names another one (`{{ pairserve_vllm_version }}`) is returned as written: the caller templates it.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
LAB_PINS = REPO / "lab" / "inventory" / "group_vars" / "all" / "pins.yml"
UPGRADE_DIR = REPO / "lab" / "inventory" / "upgrade"
EXAMPLE_PINS = REPO / "inventory" / "example" / "group_vars" / "all" / "pins.yml"


class PinError(KeyError):
    """A pins file without the variable asked for."""


@functools.lru_cache(maxsize=None)
def _load(path: str) -> dict:
    return read_fresh(path)


def read(path) -> dict:
    """One pins file (a group_vars YAML mapping), parsed once per process; a copy, so callers cannot change it."""
    return dict(_load(str(Path(path).resolve())))


def read_fresh(path) -> dict:
    """A file written while this process runs (the lab's runner_digest.yml): parsed again at every call."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict):
        raise PinError("%s is not a mapping of pins" % path)
    return data


def pin(path, name: str) -> str:
    """One variable of a pins file, as a string; a PinError naming the file when it is not there or empty."""
    value = read(path).get(name)
    if value is None or value == "":
        raise PinError("%s has no %s" % (path, name))
    return str(value)


def lab() -> dict:
    """lab/inventory/group_vars/all/pins.yml: the default lab's pins (make lab, CI)."""
    return read(LAB_PINS)


def upgrade(step: str) -> dict:
    """The upgrade scenario's pins: step "previous" or "next" (lab/inventory/upgrade/<step>.yml)."""
    if step not in ("previous", "next"):
        raise ValueError("upgrade pins are 'previous' or 'next', not %r" % (step,))
    return read(UPGRADE_DIR / ("%s.yml" % step))


def example() -> dict:
    """inventory/example/group_vars/all/pins.yml: the production pins the product docs name."""
    return read(EXAMPLE_PINS)


def resolved(pins: dict, name: str) -> str:
    """A pin with the other pins it names (`{{ pairserve_vllm_version }}`) filled in from the same file; anything
    else templated is refused (this is no Jinja)."""
    value = str(pins[name])
    for other, other_value in pins.items():
        value = value.replace("{{ %s }}" % other, str(other_value))
    if "{{" in value:
        raise PinError("%s = %r names something other than a pin of its file" % (name, value))
    return value


GPUSTACK = pin(LAB_PINS, "pairserve_gpustack_version")
VLLM = pin(LAB_PINS, "pairserve_vllm_version")
# The lab's runner image as the registry on 127.0.0.1 tags it, without the digest (known once pushed).
RUNNER_IMAGE = resolved(lab(), "pairserve_runner_image")
PREVIOUS = upgrade("previous")
NEXT = upgrade("next")
# The integration tier serves its tiny models with the CPU build of the upgrade scenario's next vLLM: that release
# runs over the suite's torch 2.13.0 (scripts/build_vllm_cpu.sh `serve`), the lab's pinned one needs its own torch
# and a 6 GB venv (scripts/build_vllm_cpu_serve.sh). `make caches` builds it; `python -m lab scenario upgrade` makes
# the next pins' replica image from the same venv.
SERVE_VLLM = pin(UPGRADE_DIR / "next.yml", "pairserve_vllm_version")


def main(argv) -> int:
    if len(argv) != 3:
        print("usage: %s <pins file> <variable>" % argv[0], file=sys.stderr)
        return 2
    try:
        print(pin(argv[1], argv[2]))
    except (OSError, PinError, yaml.YAMLError) as exc:
        print("pins: %s" % (exc.args[0] if isinstance(exc, PinError) else exc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
