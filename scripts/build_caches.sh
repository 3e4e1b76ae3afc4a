#!/usr/bin/env bash
# Builds every expensive thing the suite and the lab share, once per machine (each step keeps a stamp
# and is a no-op afterwards), and prints what each phase cost:
#   - the wheelhouse of the lab's pinned GPUStack (PostgreSQL test server venv, molecule nodes and lab nodes install
#     from it), the integration tier's GPUStack venv made from it, and the wheels of the controller's venv (the lab's
#     sleep/wake and queue-weights scenarios)
#   - the CPU venv of the vLLM the integration tier serves (lab/pins.py SERVE_VLLM: serves the tiny model) and the
#     parser venv of the lab's pinned vLLM (argv checks)
#   - the serving venv of the lab's pinned vLLM (for 0.25.1 its own torch 2.11 and torchvision: the image check's
#     server, the lab's replicas)
# Every version comes from the pins files (lab/inventory/group_vars/all/pins.yml, lab/inventory/upgrade/next.yml)
# through lab/pins.py.
#   - the tiny Qwen3 model overfit on the verification prompts, its untrained twin, the tiny Qwen2.5-VL model
#   - the node image (Debian 12 + systemd) molecule and the lab run
#   - the lab's replica image: the serving venv of the lab's pinned vLLM on the node image (lab/images.py)
# and last, identical files of the vLLM venvs hardlinked (scripts/dedupe_cache.py): the suite's disk is a budget too.
set -euo pipefail
cd "$(dirname "$0")/.."
phase() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "caches: $name: $((SECONDS - start)) s"
}
# `scripts/build_caches.sh gpustack` builds only what the control plane needs (molecule, the GPUStack sessions of
# the integration tier); `scripts/build_caches.sh vllm` only the vLLM venvs and the tiny models (the integration
# tier builds them beside its GPUStack sessions, which do not need them); `scripts/build_caches.sh lab` only what the
# lab serves (`make lab`: the wheelhouse, the node image, the tiny model, the replica image with the venv it
# copies); no argument: all.
group=${1:-all}
case $group in
  all) for group in gpustack vllm lab; do bash "$0" "$group"; done; exit ;;
  gpustack|vllm|lab) ;;
  *) echo "build_caches: unknown group '$group' (all, gpustack, vllm or lab)" >&2; exit 2 ;;
esac
# One build of a group at a time: `make test` builds them in the background (scripts/test.sh) while its tiers call this
# again; the second waits for the first (whose stamps then make every step a no-op) instead of building beside it.
mkdir -p .cache
exec 9>>".cache/build_caches.$group.lock"
flock 9
# pin <file> <variable>: one pin, read by the pins' one reader (lab/pins.py).
pin() { .venv/bin/python lab/pins.py "$@"; }
lab_pins=lab/inventory/group_vars/all/pins.yml
if [ "$group" = gpustack ]; then
  gpustack_version=$(pin $lab_pins pairserve_gpustack_version)
  phase "GPUStack $gpustack_version wheelhouse" bash tools/build_wheelhouse.sh "$gpustack_version"
  phase "controller wheels" bash tools/build_controller_wheels.sh
  # The integration tier's GPUStack (tests/support/gpustack_server.py, ensure_venv: once, under its own lock), which
  # both of its GPUStack sessions otherwise wait for in their first fixture.
  phase "GPUStack $gpustack_version test venv" .venv/bin/python -c \
    'import sys; sys.path[:0] = ["tests", "."]; from support.gpustack_server import ensure_venv; ensure_venv(sys.argv[1])' \
    "$gpustack_version"
  phase "node image" .venv/bin/python -m lab images node
fi
if [ "$group" = vllm ]; then
  vllm_version=$(pin $lab_pins pairserve_vllm_version)
  # the vLLM the integration tier serves on CPU (lab/pins.py SERVE_VLLM: the upgrade's next pin)
  serve_vllm=$(pin lab/inventory/upgrade/next.yml pairserve_vllm_version)
  phase "vLLM $serve_vllm CPU venv" bash scripts/build_vllm_cpu.sh "$serve_vllm" serve
  phase "vLLM $vllm_version parser venv" bash scripts/build_vllm_cpu.sh "$vllm_version"
  phase "vLLM $vllm_version serving venv" bash scripts/build_vllm_cpu_serve.sh "$vllm_version"
  serve_python=.cache/vllm-cpu/$serve_vllm/venv/bin/python
  phase "tiny model" "$serve_python" scripts/build_tiny_model.py
  phase "tiny model (random twin)" "$serve_python" scripts/build_tiny_model.py --random
  phase "tiny model (vision)" "$serve_python" scripts/build_tiny_model.py --vision
  # The venvs share torch and most of their packages: one copy of each file on disk (about 2.7 GiB less).
  phase "hardlinks between the vLLM venvs" python3 scripts/dedupe_cache.py .cache/vllm-cpu
fi
if [ "$group" = lab ]; then
  # What `make lab` serves and nothing more (the integration tier's venvs are the other groups'): the nodes install
  # GPUStack from the wheelhouse, the replicas run the lab's pinned vLLM from its image, the hub serves the tiny
  # model (trained with the integration tier's vLLM venv when there is one, else with the lab's serving venv).
  gpustack_version=$(pin $lab_pins pairserve_gpustack_version)
  vllm_version=$(pin $lab_pins pairserve_vllm_version)
  phase "GPUStack $gpustack_version wheelhouse" bash tools/build_wheelhouse.sh "$gpustack_version"
  phase "node image" .venv/bin/python -m lab images node
  phase "vLLM $vllm_version serving venv" bash scripts/build_vllm_cpu_serve.sh "$vllm_version"
  phase "tiny model" .venv/bin/python scripts/build_tiny_model.py
  phase "vLLM $vllm_version replica image" .venv/bin/python -m lab images replica "$vllm_version"
fi
