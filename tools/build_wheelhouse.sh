#!/usr/bin/env bash
# Builds the offline wheelhouse for each GPUStack version given, once, for one node Python:
#   .cache/wheelhouse/gpustack-<version>/         Python 3.11 (Debian 12: the controller, the lab nodes, CI)
#   .cache/wheelhouse/gpustack-<version>-py3.X/   any other Python given with --python (3.10: Ubuntu 22.04,
#                                                 3.12: Ubuntu 24.04)
# holding every wheel `pip install gpustack==<version>` needs on that Python: the pins of
# roles/gpustack_install/files/py3.X/gpustack-<version>.constraints.txt, downloaded for the target that file was
# resolved for (tools/resolve_constraints.py --pip-options 3.X: wheels only, that CPython, its glibc's manylinux
# tags). A wheelhouse serves one Python: it holds compiled wheels (numpy, pydantic-core, ...) for that CPython only,
# and its pairserve-wheelhouse.json says which, so the gpustack_install role refuses it on a node of another Python.
# The pytest GPUStack server, the molecule nodes and the lab install from the 3.11 one with
#   pip install --no-index --find-links .cache/wheelhouse/gpustack-<version> -c <constraints> gpustack==<version>
# Rebuilt when its constraints file or the download options change (the stamp holds their hash); otherwise a
# no-op. A wheel already in another wheelhouse at the pinned version is hard-linked, not downloaded again (2.2.3 and
# 2.3.0 share 133 of their 140 wheels).
set -euo pipefail
usage() { echo "usage: $0 [--python 3.10|3.11|3.12] <gpustack-version>...   e.g. $0 2.2.3 2.3.0" >&2; exit 2; }
python_minor=3.11
if [ "${1:-}" = --python ]; then
  [[ ${2:-} =~ ^3\.[0-9]+$ ]] || usage
  python_minor=$2
  shift 2
fi
[ $# -ge 1 ] || usage
for version in "$@"; do
  [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "build_wheelhouse: '$version' is not a version like 2.2.3" >&2; exit 2; }
done

cd "$(dirname "$0")/.."
root=$PWD
pip=${PIP:-$root/.venv/bin/pip}
# --only-binary plus an explicit platform/python, the target the constraints file was resolved for (one place:
# tools/resolve_constraints.py): the result must install on the nodes of that Python without a compiler,
# whatever machine builds it. pip itself is included so the node venvs get the same pip offline.
mapfile -t download_opts < <("${PYTHON:-$root/.venv/bin/python}" "$root/tools/resolve_constraints.py" \
  --pip-options "$python_minor") || exit 2
[ ${#download_opts[@]} -gt 0 ] || exit 2
suffix=$([ "$python_minor" = 3.11 ] || echo "-py$python_minor")

# "name-version" of a wheel file name or a `name==version` pin, normalised (PEP 503 name, `_` separators).
wheel_key() { awk -F- '{n=tolower($1); gsub(/[-_.]+/,"_",n); print n"-"$2}'; }
pin_keys() {
  awk -F'==' '!/^[[:space:]]*#/ && NF == 2 {n=tolower($1); gsub(/[-_.]+/,"_",n); gsub(/[[:space:]]/,"",$2); print n"-"$2}' \
    "$1" | sort -u
}
# Whether wheelhouse $1 holds a wheel for every pin of constraints file $2 and for gpustack==$3.
holds_every_pin() {
  [ -z "$(comm -23 <({ pin_keys "$2"; echo "gpustack-$3"; } | sort -u) <(ls "$1" | grep '\.whl$' | wheel_key | sort -u))" ]
}
# Whether wheel file name $1 installs on CPython $python_minor: pure or abi-less, its own ABI, or abi3 of an
# older or equal CPython. Only such wheels are linked from another wheelhouse (which may serve another Python).
wheel_fits() {
  local tags abi py
  IFS=- read -r -a tags <<<"${1%.whl}"
  abi=${tags[${#tags[@]}-2]} py=${tags[${#tags[@]}-3]}
  case $abi in
    none | "cp${python_minor/./}") return 0 ;;
    abi3) [[ $py =~ ^cp3([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -le "${python_minor#3.}" ] ;;
    *) return 1 ;;
  esac
}

build() {
  local version=$1
  local constraints=$root/roles/gpustack_install/files/py$python_minor/gpustack-$version.constraints.txt
  if [ ! -f "$constraints" ]; then
    echo "build_wheelhouse: no constraints file for GPUStack $version on Python $python_minor at" \
         "${constraints#"$root"/}; create it with tools/resolve_constraints.py --python $python_minor $version" \
         "(from the release's holds, roles/gpustack_install/files/gpustack-$version.constraints.txt)" >&2
    exit 1
  fi
  local dest=$root/.cache/wheelhouse/gpustack-$version$suffix
  local stamp=$dest.stamp
  local want
  want="v3 $( (pin_keys "$constraints"; printf '%s\n' "${download_opts[@]}") | sha256sum | cut -d' ' -f1)"
  local have
  have=$(cat "$stamp" 2>/dev/null || true)
  # A stamp from before the v3 key (a bare hash: this whole script; v2: the whole constraints file, comments
  # included, and the options before they came from resolve_constraints.py). Keep such a wheelhouse, stamp
  # untouched (the test venvs key on it), while it holds every pinned wheel.
  if [ -d "$dest" ] && { [ "$have" = "$want" ] ||
      { [[ $have =~ ^(v2\ )?[0-9a-f]{64}$ ]] && holds_every_pin "$dest" "$constraints" "$version"; }; }; then
    describe "$dest" "$version" "$constraints"
    echo "build_wheelhouse: $dest is up to date ($(du -sh "$dest" | cut -f1))"
    return 0
  fi

  local start=$SECONDS tmp=$dest.partial linked=0 wheel
  rm -rf "$tmp" && mkdir -p "$tmp"
  # pip download keeps a file already in --dest ("File was already downloaded"): seed the pinned wheels
  # other wheelhouses hold that fit this Python, as hard links (same disk, no copy).
  local pins
  pins=$(pin_keys "$constraints")
  for wheel in "$root"/.cache/wheelhouse/gpustack-*/*.whl; do
    [ -e "$wheel" ] && [ "${wheel%/*}" != "$dest" ] && [ ! -e "$tmp/${wheel##*/}" ] || continue
    grep -qxF "$(wheel_key <<<"${wheel##*/}")" <<<"$pins" && wheel_fits "${wheel##*/}" || continue
    ln "$wheel" "$tmp/" 2>/dev/null || cp "$wheel" "$tmp/"
    linked=$((linked + 1))
  done
  "$pip" download --quiet --dest "$tmp" "${download_opts[@]}" -c "$constraints" "gpustack==$version" pip setuptools wheel
  describe "$tmp" "$version" "$constraints"
  rm -rf "$dest" && mv "$tmp" "$dest"
  echo "$want" >"$stamp"
  echo "build_wheelhouse: GPUStack $version, Python $python_minor: $(ls "$dest" | grep -c '\.whl$') wheels" \
       "($linked linked from other wheelhouses), $(du -sh "$dest" | cut -f1) in $((SECONDS - start)) s"
}

# The wheelhouse's own record of what it serves: the gpustack_install role reads it on the node and refuses a
# wheelhouse of another GPUStack version or Python. Written into an up-to-date wheelhouse that lacks it.
describe() {
  local file=$1/pairserve-wheelhouse.json
  local body
  body=$(printf '{"gpustack": "%s", "python": "%s", "constraints": "%s"}\n' "$2" "$python_minor" \
    "${3#"$root"/roles/gpustack_install/files/}")
  [ "$(cat "$file" 2>/dev/null)" = "$body" ] || echo "$body" >"$file"
}

for version in "$@"; do
  build "$version"
done
