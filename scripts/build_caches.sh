#!/usr/bin/env bash
# Builds every expensive thing the suite and the lab share, once per machine (each step keeps a stamp
# and is a no-op afterwards), and prints what each phase cost:
#   - the GPUStack 2.2.3 wheelhouse (PostgreSQL test server venv, molecule nodes and lab nodes install from it)
#   - the CPU vLLM 0.27.1 venv (serves the tiny model) and the vLLM 0.25.1 parser venv (argv checks)
#   - the vLLM 0.25.1 serving venv (its own torch 2.11 and torchvision: the image check's server, the lab's replicas)
#   - the tiny Qwen3 model overfit on the verification prompts, its untrained twin, the tiny Qwen2.5-VL model
#   - the node image (Debian 12 + systemd) molecule and the lab run
set -euo pipefail
cd "$(dirname "$0")/.."
phase() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "caches: $name: $((SECONDS - start)) s"
}
# `scripts/build_caches.sh gpustack` builds only what the control plane needs (molecule); no argument: all.
group=${1:-all}
phase "GPUStack wheelhouse" bash scripts/build_wheelhouse.sh 2.2.3
# shellcheck source=lib/podman-env.sh
. scripts/lib/podman-env.sh
phase "node image" pairserve_build_node_image
if [ "$group" = all ]; then
  phase "vLLM 0.27.1 CPU venv" bash scripts/build_vllm_cpu.sh 0.27.1
  phase "vLLM 0.25.1 parser venv" bash scripts/build_vllm_cpu.sh 0.25.1
  phase "vLLM 0.25.1 serving venv" bash scripts/build_vllm_cpu_serve.sh 0.25.1
  phase "tiny model" .cache/vllm-cpu/0.27.1/venv/bin/python scripts/build_tiny_model.py
  phase "tiny model (random twin)" .cache/vllm-cpu/0.27.1/venv/bin/python scripts/build_tiny_model.py --random
  phase "tiny model (vision)" .cache/vllm-cpu/0.27.1/venv/bin/python scripts/build_tiny_model.py --vision
fi
