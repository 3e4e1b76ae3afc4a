#!/usr/bin/env bash
# Builds the offline wheelhouse for each GPUStack version given, once:
#   .cache/wheelhouse/gpustack-<version>/  (every wheel `pip install gpustack==<version>` needs)
# The pytest GPUStack server, the molecule node containers and the lab install from it with
#   pip install --no-index --find-links .cache/wheelhouse/gpustack-<version> \
#       -c roles/gpustack_install/files/gpustack-<version>.constraints.txt gpustack==<version>
# Target: Linux x86_64, CPython 3.11 (the controller and the Debian 12 node containers).
# Rebuilt when its constraints file or the download options change (the stamp holds their hash); otherwise a
# no-op. A wheel already in another version's wheelhouse at the pinned version is hard-linked, not downloaded
# again (2.2.3 and 2.3.0 share 133 of their 140 wheels).
set -euo pipefail
usage() { echo "usage: $0 <gpustack-version>...   e.g. $0 2.2.3 2.3.0" >&2; exit 2; }
[ $# -ge 1 ] || usage
for version in "$@"; do
  [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "build_wheelhouse: '$version' is not a version like 2.2.3" >&2; exit 2; }
done

cd "$(dirname "$0")/.."
root=$PWD
pip=${PIP:-$root/.venv/bin/pip}
# --only-binary plus an explicit platform/python: the result must install on the Debian 12 nodes
# without a compiler, whatever machine builds it. pip itself is included so the node venvs get the
# same pip offline.
download_opts=(--only-binary=:all: --platform manylinux_2_36_x86_64 --platform manylinux_2_28_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform linux_x86_64
  --platform any --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none)

# "name-version" of a wheel file name or a `name==version` pin, normalised (PEP 503 name, `_` separators).
wheel_key() { awk -F- '{n=tolower($1); gsub(/[-_.]+/,"_",n); print n"-"$2}'; }
pin_keys() {
  awk -F'==' '!/^[[:space:]]*#/ && NF == 2 {n=tolower($1); gsub(/[-_.]+/,"_",n); gsub(/[[:space:]]/,"",$2); print n"-"$2}' \
    "$1" | sort -u
}
# Whether wheelhouse $1 holds a wheel for every pin of constraints file $2 and for gpustack==$3.
holds_every_pin() {
  [ -z "$(comm -23 <({ pin_keys "$2"; echo "gpustack-$3"; } | sort -u) <(ls "$1" | wheel_key | sort -u))" ]
}

build() {
  local version=$1
  local constraints=$root/roles/gpustack_install/files/gpustack-$version.constraints.txt
  if [ ! -f "$constraints" ]; then
    echo "build_wheelhouse: no constraints file for GPUStack $version at ${constraints#"$root"/};" \
         "create it (see the 2.2.3 one: SQLAlchemy must stay below 2.1)" >&2
    exit 1
  fi
  local dest=$root/.cache/wheelhouse/gpustack-$version
  local stamp=$dest.stamp
  local want
  want="v2 $( (cat "$constraints"; printf '%s\n' "${download_opts[@]}") | sha256sum | cut -d' ' -f1)"
  local have
  have=$(cat "$stamp" 2>/dev/null || true)
  # A stamp of one bare hash was written before the v2 key (it hashed this whole script). Keep such a
  # wheelhouse, stamp untouched (the test venvs key on it), while it holds every pinned wheel.
  if [ -d "$dest" ] && { [ "$have" = "$want" ] ||
      { [[ $have =~ ^[0-9a-f]{64}$ ]] && holds_every_pin "$dest" "$constraints" "$version"; }; }; then
    echo "build_wheelhouse: $dest is up to date ($(du -sh "$dest" | cut -f1))"
    return 0
  fi

  local start=$SECONDS tmp=$dest.partial linked=0 wheel
  rm -rf "$tmp" && mkdir -p "$tmp"
  # pip download keeps a file already in --dest ("File was already downloaded"): seed the pinned wheels
  # other wheelhouses hold, as hard links (same disk, no copy).
  local pins
  pins=$(pin_keys "$constraints")
  for wheel in "$root"/.cache/wheelhouse/gpustack-*/*.whl; do
    [ -e "$wheel" ] && [ "${wheel%/*}" != "$dest" ] && [ ! -e "$tmp/${wheel##*/}" ] || continue
    grep -qxF "$(wheel_key <<<"${wheel##*/}")" <<<"$pins" || continue
    ln "$wheel" "$tmp/" 2>/dev/null || cp "$wheel" "$tmp/"
    linked=$((linked + 1))
  done
  "$pip" download --quiet --dest "$tmp" "${download_opts[@]}" -c "$constraints" "gpustack==$version" pip setuptools wheel
  rm -rf "$dest" && mv "$tmp" "$dest"
  echo "$want" >"$stamp"
  echo "build_wheelhouse: GPUStack $version: $(ls "$dest" | wc -l) wheels ($linked linked from other versions)," \
       "$(du -sh "$dest" | cut -f1) in $((SECONDS - start)) s"
}

for version in "$@"; do
  build "$version"
done
