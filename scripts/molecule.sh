#!/usr/bin/env bash
# Runs every molecule scenario (podman driver) with the podman settings this kind of host needs.
set -euo pipefail
cd "$(dirname "$0")/.."
# podman's settings for this kind of host (lab/host.py): the suites' testinfra reaches the nodes with podman.
CONTAINERS_CONF=$(.venv/bin/python -m lab podman-conf)
export CONTAINERS_CONF
shopt -s nullglob
scenarios=(molecule/*/molecule.yml)
if [ ${#scenarios[@]} -eq 0 ]; then
  echo "no molecule scenarios under molecule/: nothing to test is a failure" >&2
  exit 1
fi
for s in "${scenarios[@]}"; do
  name=$(basename "$(dirname "$s")")
  echo "=== molecule scenario $name"
  start=$SECONDS
  .venv/bin/molecule test -s "$name"
  echo "=== molecule scenario $name: $((SECONDS - start)) s"
done
