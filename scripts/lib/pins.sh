# shellcheck shell=bash
# The one reader of the version pins for shell scripts: every version a script builds, installs or names as
# "the pinned one" comes from the pins files (inventory/lab/group_vars/all/pins.yml, inventory/lab/upgrade/
# {previous,next}.yml), never from a literal. It parses the YAML with the repository venv's Python through
# lab/pins.py, the same reader the tests and the lab's Python use.
#
#   pairserve_pin <pins file> <variable>    e.g. pairserve_pin inventory/lab/upgrade/next.yml pairserve_vllm_version
#   pairserve_lab_pin <variable>            the default lab's pins.yml
#   pairserve_serve_vllm                    the vLLM the integration tier serves on CPU (lab/pins.py SERVE_VLLM)
pairserve_pins_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

pairserve_pin() {
  local python=$pairserve_pins_root/.venv/bin/python
  [ -x "$python" ] || { echo "pins: $python missing: run \`make deps\` first" >&2; return 1; }
  "$python" "$pairserve_pins_root/lab/pins.py" "$1" "$2"
}

pairserve_lab_pin() {
  pairserve_pin "$pairserve_pins_root/inventory/lab/group_vars/all/pins.yml" "$1"
}

pairserve_serve_vllm() {
  pairserve_pin "$pairserve_pins_root/inventory/lab/upgrade/next.yml" pairserve_vllm_version
}
