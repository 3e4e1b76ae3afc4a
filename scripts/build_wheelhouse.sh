#!/usr/bin/env bash
# Builds the offline wheelhouse for one GPUStack version, once:
#   .cache/wheelhouse/gpustack-<version>/  (every wheel `pip install gpustack==<version>` needs)
# The pytest GPUStack server, the molecule node containers and the lab install from it with
#   pip install --no-index --find-links .cache/wheelhouse/gpustack-<version> \
#       -c roles/gpustack_install/files/gpustack-<version>.constraints.txt gpustack==<version>
# Target: Linux x86_64, CPython 3.11 (the controller and the Debian 12 node containers).
# Rebuilt when the constraints file changes (the stamp holds its hash); otherwise a no-op.
set -euo pipefail
usage() { echo "usage: $0 <gpustack-version>   e.g. $0 2.2.3" >&2; exit 2; }
[ $# -eq 1 ] || usage
version=$1
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "build_wheelhouse: '$version' is not a version like 2.2.3" >&2; exit 2; }

cd "$(dirname "$0")/.."
root=$PWD
constraints=$root/roles/gpustack_install/files/gpustack-$version.constraints.txt
if [ ! -f "$constraints" ]; then
  echo "build_wheelhouse: no constraints file for GPUStack $version at ${constraints#"$root"/};" \
       "create it (see the 2.2.3 one: SQLAlchemy must stay below 2.1)" >&2
  exit 1
fi
pip=${PIP:-$root/.venv/bin/pip}
dest=$root/.cache/wheelhouse/gpustack-$version
stamp=$dest.stamp
want=$(cat "$constraints" "$0" | sha256sum | cut -d' ' -f1)
if [ -d "$dest" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "build_wheelhouse: $dest is up to date ($(du -sh "$dest" | cut -f1))"
  exit 0
fi

start=$SECONDS
tmp=$dest.partial
rm -rf "$tmp" && mkdir -p "$tmp"
# --only-binary plus an explicit platform/python: the result must install on the Debian 12 nodes
# without a compiler, whatever machine builds it. pip itself is included so the node venvs get the
# same pip offline.
"$pip" download --quiet --dest "$tmp" \
  --only-binary=:all: --platform manylinux_2_36_x86_64 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform linux_x86_64 \
  --platform any --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none \
  -c "$constraints" "gpustack==$version" pip setuptools wheel
rm -rf "$dest" && mv "$tmp" "$dest"
echo "$want" >"$stamp"
echo "build_wheelhouse: GPUStack $version: $(ls "$dest" | wc -l) wheels, $(du -sh "$dest" | cut -f1) in $((SECONDS - start)) s"
