#!/usr/bin/env bash
# The integration tier as two pytest sessions side by side: the GPUStack suites (one GPUStack + PostgreSQL for the
# session, the day-2 plays) in one, everything else (hub, faults with a GPUStack of their own, CPU vLLM, verify) in
# the other. Most of the tier waits on services (GPUStack's loops, vLLM's boot, the hub), so two sessions on two
# cores finish in about the time of the longer one. Each session keeps its own fixtures, figures and summary, written
# to its log and printed whole when it ends; the tier fails if either does, and names which.
#
#   scripts/integration.sh [pytest args...]     e.g. -x, -k day2; PAIRSERVE_INTEGRATION_SERIAL=1 runs one session
set -uo pipefail
cd "$(dirname "$0")/.."
args=(--durations=15 -m "not upgrade" "$@")
if [ "${PAIRSERVE_INTEGRATION_SERIAL:-0}" = 1 ]; then
  exec bash scripts/pytest.sh "${args[@]}" tests/integration
fi
logs=$(mktemp -d /tmp/pairserve-integration.XXXXXX)
others=()
for path in tests/integration/*; do
  case $path in
    tests/integration/gpustack|*/__pycache__|*/conftest.py) ;;
    *) others+=("$path") ;;
  esac
done
start=$SECONDS
bash scripts/pytest.sh "${args[@]}" tests/integration/gpustack >"$logs/gpustack.log" 2>&1 &
pid_gpustack=$!
bash scripts/pytest.sh "${args[@]}" "${others[@]}" >"$logs/others.log" 2>&1 &
pid_others=$!
echo "integration: two sessions: tests/integration/gpustack (pid $pid_gpustack), the rest (pid $pid_others); logs in $logs"
# Stop both sessions, by their PIDs, if this script is interrupted.
trap 'kill "$pid_gpustack" "$pid_others" 2>/dev/null; wait; exit 130' INT TERM
rc_gpustack=0 rc_others=0
wait "$pid_others" || rc_others=$?
echo "=== integration session: everything but tests/integration/gpustack (rc $rc_others, $((SECONDS - start)) s)"
cat "$logs/others.log"
wait "$pid_gpustack" || rc_gpustack=$?
echo "=== integration session: tests/integration/gpustack (rc $rc_gpustack, $((SECONDS - start)) s)"
cat "$logs/gpustack.log"
trap - INT TERM
rm -rf "$logs"
echo "integration: $((SECONDS - start)) s; gpustack session rc $rc_gpustack, other session rc $rc_others"
[ "$rc_gpustack" -eq 0 ] && [ "$rc_others" -eq 0 ]
