#!/usr/bin/env bash
# Runs every molecule scenario (podman driver) with the podman settings this kind of host needs.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/podman-env.sh
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
