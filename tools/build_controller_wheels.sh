#!/usr/bin/env bash
# The wheels of the controller's venv for the lab's nodes (Debian 12, Python 3.11, no PyPI), once:
#   .cache/wheelhouse/controller/   mounted in the node containers at /srv/pairserve/wheelhouse/controller
# The pins are the controller role's own (roles/controller/defaults/main.yml, pairserve_controller_python_packages,
# the line for this Python or `default`), resolved with the repository's constraints.txt so that ansible-core's
# dependencies are the versions the tests run with. A no-op when every pinned wheel is there.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dest=$root/.cache/wheelhouse/controller
python=$root/.venv/bin/python
mapfile -t pins < <("$python" - <<'PY'
import sys
import yaml

with open("roles/controller/defaults/main.yml", encoding="utf-8") as handle:
    packages = yaml.safe_load(handle)["pairserve_controller_python_packages"]
minor = "%d.%d" % sys.version_info[:2]
print("\n".join(packages.get(minor) or packages["default"]))
PY
)
[ "${#pins[@]}" -gt 0 ] || { echo "build_controller_wheels: no pins in roles/controller/defaults/main.yml" >&2; exit 1; }
missing=0
for pin in "${pins[@]}"; do
  name=${pin%%==*} version=${pin#*==}
  compgen -G "$dest/${name//-/_}-$version-*.whl" >/dev/null || missing=1
done
if [ "$missing" = 0 ]; then
  echo "build_controller_wheels: $dest is up to date (${pins[*]})"
  exit 0
fi
tmp=$dest.partial
rm -rf "$tmp" && mkdir -p "$tmp"
"$root/.venv/bin/pip" download --quiet --disable-pip-version-check --only-binary=:all: --dest "$tmp" \
  -c constraints.txt "${pins[@]}"
rm -rf "$dest" && mv "$tmp" "$dest"
echo "build_controller_wheels: ${pins[*]}: $(ls "$dest" | grep -c '\.whl$') wheels in $dest"
