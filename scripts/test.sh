#!/usr/bin/env bash
# `make test`, the whole suite (what CI runs): lint, sanity, unit, integration, the lab, the release checks, in that
# order, stopping at the first tier that fails, as make's prerequisites would.
#
# The caches (scripts/build_caches.sh) build in the background from the first second: ansible-lint and ansible-test
# sanity use one core of the two, so the build takes the other one, not a lane of the integration tier as it did
# when that tier built them. First what the integration tier needs (the wheelhouse, the node image, the CPU vLLM venvs,
# the tiny models), which it waits for; then the lab's replica image (copying a 5 GB venv: mostly disk), beside the
# integration tier, which the lab tier waits for. The build is stopped, by its process group, if this script ends
# first.
#
#   scripts/test.sh        (make test)
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p .cache
caches_log=.cache/build_caches.log
tier_caches=.cache/build_caches.integration-ready
rm -f "$tier_caches"
setsid bash -c "bash scripts/build_caches.sh gpustack && bash scripts/build_caches.sh vllm && touch $tier_caches && bash scripts/build_caches.sh lab" >"$caches_log" 2>&1 &
caches_pid=$!
echo "test: the caches build in the background (pid $caches_pid, log $caches_log)"
trap 'kill -- -"$caches_pid" 2>/dev/null; wait "$caches_pid" 2>/dev/null' EXIT
trap 'exit 130' INT TERM

caches_failed() {  # caches_failed <rc>: the build's log, then the suite ends
  cat "$caches_log" >&2
  echo "test: the cache build failed (rc $1): its log is above" >&2
  exit "$1"
}

start=$SECONDS
tier() {  # tier <make target>: one tier; the suite ends at the first that fails
  local target=$1 began=$SECONDS rc=0
  make --no-print-directory "$target" || rc=$?
  echo "test: $target: $((SECONDS - began)) s (rc $rc)"
  if [ "$rc" -ne 0 ]; then
    echo "test: $target failed after $((SECONDS - start)) s; the tiers after it did not run" >&2
    exit "$rc"
  fi
}

tier lint
tier sanity
tier unit

waited=$SECONDS
while [ ! -e "$tier_caches" ] && kill -0 "$caches_pid" 2>/dev/null; do
  sleep 2
done
if [ ! -e "$tier_caches" ]; then
  caches_rc=0
  wait "$caches_pid" || caches_rc=$?
  caches_failed "$((caches_rc ? caches_rc : 1))"
fi
echo "test: waited $((SECONDS - waited)) s after the unit tier for the integration tier's caches"

tier integration
waited=$SECONDS
caches_rc=0
wait "$caches_pid" || caches_rc=$?
trap - EXIT
[ "$caches_rc" -eq 0 ] || caches_failed "$caches_rc"
grep -E '^caches:' "$caches_log" || true
echo "test: waited $((SECONDS - waited)) s after the integration tier for the lab's replica image"
tier lab-test
tier release-check
echo "test: every tier passed in $((SECONDS - start)) s"
