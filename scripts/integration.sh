#!/usr/bin/env bash
# The integration tier as three pytest sessions side by side: the GPUStack suites (one GPUStack + PostgreSQL for the
# session), the day-2 plays against a GPUStack of their own (tests/integration/gpustack/test_day2.py: upgrades,
# rebuilds and maintenance drain, wait and restore, the longest file of the tier), and everything else (hub, faults
# with a GPUStack of their own, CPU vLLM, verify). Most of the tier waits on services (GPUStack's loops, vLLM's boot,
# the hub, the plays' drains), so the sessions on two cores finish in about the time of the longest one. Each session
# keeps its own fixtures, figures and summary, written to its log and printed whole when it ends; the tier fails if
# any does, and names which.
#
# The tier builds its own caches (scripts/build_caches.sh): what the GPUStack sessions need first (the wheelhouse,
# seconds once built), then the vLLM venvs and tiny models in the third session's lane, before its tests, while the
# GPUStack sessions run. Measured on a fresh 2-core machine: the build took 391 s beside the sessions against 255 s
# alone (it is CPU, not waiting), so the tier gains about 50 s, not the build's whole time.
#
#   scripts/integration.sh [pytest args...]     e.g. -x, -k day2; PAIRSERVE_INTEGRATION_SERIAL=1 runs one session
set -uo pipefail
cd "$(dirname "$0")/.."
args=(--durations=15 -m "not upgrade" "$@")
if [ "${PAIRSERVE_INTEGRATION_SERIAL:-0}" = 1 ]; then
  bash scripts/build_caches.sh || exit
  exec bash scripts/pytest.sh "${args[@]}" tests/integration
fi
bash scripts/build_caches.sh gpustack || exit
day2=tests/integration/gpustack/test_day2.py
others=()
for path in tests/integration/*; do
  case $path in
    tests/integration/gpustack|*/__pycache__|*/conftest.py) ;;
    *) others+=("$path") ;;
  esac
done
declare -A session_paths=(
  [gpustack]="tests/integration/gpustack --ignore=$day2"
  [day2]="$day2"
  [others]="${others[*]}")
names=(gpustack day2 others)
logs=$(mktemp -d /tmp/pairserve-integration.XXXXXX)
declare -A pids rcs took
start=$SECONDS
for name in "${names[@]}"; do
  # shellcheck disable=SC2086  # the paths are words
  if [ "$name" = others ]; then
    { bash scripts/build_caches.sh vllm && bash scripts/pytest.sh "${args[@]}" ${session_paths[$name]}; } >"$logs/$name.log" 2>&1 &
  else
    bash scripts/pytest.sh "${args[@]}" ${session_paths[$name]} >"$logs/$name.log" 2>&1 &
  fi
  pids[$name]=$!
done
echo "integration: ${#names[@]} sessions: $(for n in "${names[@]}"; do printf '%s (pid %s) ' "$n" "${pids[$n]}"; done)- logs in $logs"
# Stop every session, by its PID, if this script is interrupted.
trap 'kill "${pids[@]}" 2>/dev/null; wait; exit 130' INT TERM
# Each session's log is printed whole as soon as it ends (the first to end first).
declare -A name_of
for name in "${names[@]}"; do
  name_of[${pids[$name]}]=$name
done
running=("${pids[@]}")
while [ ${#running[@]} -gt 0 ]; do
  rc=0
  wait -n -p ended "${running[@]}" || rc=$?
  name=${name_of[$ended]}
  mapfile -t running < <(printf '%s\n' "${running[@]}" | grep -vx "$ended")
  rcs[$name]=$rc
  took[$name]=$((SECONDS - start))
  echo "=== integration session $name: ${session_paths[$name]} (rc $rc, ${took[$name]} s)"
  cat "$logs/$name.log"
done
trap - INT TERM
rm -rf "$logs"
failed=()
for name in "${names[@]}"; do
  [ "${rcs[$name]}" -eq 0 ] || failed+=("$name")
done
echo "integration: $((SECONDS - start)) s; $(for n in "${names[@]}"; do printf '%s %s s rc %s; ' "$n" "${took[$n]}" "${rcs[$n]}"; done)"
if [ ${#failed[@]} -gt 0 ]; then
  echo "integration: failed session(s): ${failed[*]}" >&2
  exit 1
fi
