#!/usr/bin/env bash
# pytest with "no tests collected" (exit 5) treated as the failure it is.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest -p no:cacheprovider "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests in: $* -- that is a failure, not a pass" >&2
  exit 1
fi
exit "$rc"
