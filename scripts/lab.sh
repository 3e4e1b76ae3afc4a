#!/usr/bin/env bash
# The local lab (the README's first command): the whole site.yml flow on one machine without GPUs.
#
#   scripts/lab.sh up     build what is missing, start the lab, converge site.yml (which ends by verifying
#                         through the route), print the endpoint and the figures
#   scripts/lab.sh start  only what comes before the first converge: caches, images, host services, nodes
#                         (molecule/default's create step)
#   scripts/lab.sh down   remove every container, process and file the lab created (cached images stay,
#                         `scripts/lab.sh down --images` removes them too), then check nothing is left
#   scripts/lab.sh upgrade   on a converged lab (GPUStack 2.2.3): builds what the scenario's pins need once
#                         (GPUStack 2.3.0's wheelhouse, vLLM 0.25.1's CPU image), then playbooks/upgrade.yml with
#                         the previous pins (inventory/lab/upgrade/previous.yml: GPUStack 2.2.3, vLLM 0.25.1), with a
#                         bad vLLM pin (refused, reported, nothing changed), with a runner image that cannot serve
#                         (drained, rolled out, failed verification, rolled back, reported), then with ONE pins change
#                         (inventory/lab/upgrade/next.yml: GPUStack 2.3.0, vLLM 0.27.1, and the checkpoint revision
#                         moved to the hub's next commit), then once more (changed=0), while a request loop counts
#                         failed requests on the route (molecule/upgrade's side effect)
#   scripts/lab.sh hardware_swap   on a converged lab: node-b's recorded cards become 2x RTX 4090, then
#                         `playbooks/rebuild_node.yml --limit node-b` twice, then once more after node-b's worker
#                         identity and pairs record were wiped (a reinstall), under the same request loop
#                         (molecule/hardware_swap's side effect)
#   scripts/lab.sh sleep_wake   on a converged lab: the controller (docs/controller.md) on in sleep mode with a short idle
#                         time, node-b's replica put to sleep, a request while it sleeps, a burst of long prompts
#                         that wakes it, the wake time measured; then the controller off again
#   scripts/lab.sh patch_restart   on a converged lab: the tokenizer patch undone on both nodes, then site.yml, which
#                         patches again and restarts each node's replicas drained, under the request loop; then
#                         site.yml once more (changed=0) (molecule/patch_restart's side effect; part of `test`)
#   scripts/lab.sh maintenance   on a converged lab: playbooks/maintenance.yml --limit node-b reboots node-b (its
#                         container restarted by the lab's reboot watcher) drained, under the request loop; then
#                         maintenance.yml --check and site.yml (both changed=0) (molecule/maintenance's side effect)
#   scripts/lab.sh restore   on a converged lab: playbooks/backup.yml (the archive fetched to the controller), node-a
#                         destroyed with its disk and recreated bare, then restore.yml (fails for node-a alone),
#                         rebuild_node.yml --limit node-a, verify.yml and site.yml under the request loop with the old
#                         inference key, the recovery time printed; then site.yml and restore.yml again (changed=0)
#                         (molecule/restore's side effect)
#   scripts/lab.sh queue_weights   on a converged lab: node-b's replica held to a fraction of its core, both replicas
#                         measured with playbooks/bench.yml, the controller on in weights mode with those speeds;
#                         the route's weights followed through idle, a backlog on each replica and a mixed load
#                         through the route (molecule/queue_weights's side effect)
#   scripts/lab.sh bench_arms   on a converged lab: playbooks/bench.yml (check mode, then for real) with one A/B arm,
#                         node-b's replica with --max-num-seqs 2 booted through GPUStack, measured against the
#                         baseline and put back, under the request loop (molecule/bench_arms's side effect)
#   scripts/lab.sh uninstall  on a converged lab: playbooks/uninstall.yml twice (the second changes nothing),
#                         then each node against the snapshot taken before its first converge: nothing left
#                         but the kept items (checkpoint cache, GPUStack's database, its dumps)
#   scripts/lab.sh reinstall  uninstall as above, then site.yml builds the service again on what was kept
#   scripts/lab.sh test   check mode on the fresh nodes, up, the idempotence proof (a second converge, changed=0,
#                         check mode, --tags checkpoint), the
#                         testinfra suite of molecule/default, the day-2 scenarios PAIRSERVE_LAB_SCENARIOS
#                         names (none by default) with their suites, the uninstall proof,
#                         down, and the check that nothing is left
#                         (what `make test` runs)
#
# What the lab substitutes for real hardware (every output says so too): node-a and node-b are podman
# containers with systemd on the host's network, reached over SSH (sshd on 127.0.0.1:2222 and :2223); their
# GPUs are the recorded hosts (2x RTX 5080, 2x RTX 4070 Ti SUPER) replayed through the NVML replay library
# under the real nvidia-ml-py (for gpu_pairs and for the workers' own detection), handed to the replica
# containers through a CDI spec made from the recordings; the checkpoint is the test
# suite's tiny Qwen3 served by a local hub on 127.0.0.1; the replicas are the CPU build of vLLM started by
# GPUStack's workers with GPUStack's own vLLM backend through a podman service on the host, from a runner image
# pulled by digest out of a registry on 127.0.0.1. GPUStack, PostgreSQL, the checkpoint download and patch, the
# route and the verification requests are the real thing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
state=$root/.lab
run_dir=/run/pairserve-lab
data_dir=/var/lib/pairserve-lab
# The lab hub's endpoint and commit, for every run against inventory/lab (site.yml, molecule default).
hub_vars=$root/inventory/lab/group_vars/all/lab_hub.yml
# The digest the lab registry gave the runner image, as the pin of a real site names it (git-ignored, removed by
# `down`; "runner_digest" loads after pins.yml, whose pairserve_runner_image it completes).
digest_vars=$root/inventory/lab/group_vars/all/runner_digest.yml
# The upgrade scenario's pins (inventory/lab/upgrade/previous.yml, then next.yml) are copied here: git-ignored,
# removed by `down`, loaded after pins.yml (a group_vars directory loads in lexical order; the last file wins).
upgrade_pins=$root/inventory/lab/group_vars/all/upgrade_pins.yml
nodes=(node-a node-b)
export PATH=$root/.venv/bin:$PATH ANSIBLE_CONFIG=$root/ansible.cfg ANSIBLE_FORCE_COLOR=0
# shellcheck source=lib/podman-env.sh
. scripts/lib/podman-env.sh
# shellcheck source=lib/vllm-cpu-image.sh
. scripts/lib/vllm-cpu-image.sh
# shellcheck source=lib/lab-registry.sh
. scripts/lib/lab-registry.sh
# shellcheck source=lib/pins.sh
. scripts/lib/pins.sh
# The lab serves the vLLM its pins name (inventory/lab/group_vars/all/pins.yml), as a real site does; every
# version string below (image tag, venv, registry tag) is derived from it (scripts/lib/pins.sh reads it).
lab_pins=$root/inventory/lab/group_vars/all/pins.yml
vllm_version=$(pairserve_pin "$lab_pins" pairserve_vllm_version) || exit 2
image=$(pairserve_vllm_cpu_image "$vllm_version")

declare -A took
# Returns the step's exit status: called where errexit is off (`up || rc=$?` in lab_test), a failed step must still
# stop its caller, which says `|| return`.
phase() {
  local name=$1 start=$SECONDS rc=0
  shift
  echo "=== lab: $name"
  "$@" || rc=$?
  took[$name]=$((SECONDS - start))
  echo "=== lab: $name took ${took[$name]} s$([ "$rc" -eq 0 ] || echo ", FAILED (exit $rc)")"
  return "$rc"
}

# The figures are a benchmark, not a timed test: each is printed with its target and whether it was met.
lab_up_target=${PAIRSERVE_LAB_UP_TARGET_S:-720}
verdict() {  # verdict <value> <test operator> <target>: "target met" or "target MISSED"
  if [ "$1" "$2" "$3" ]; then echo "target met"; else echo "target MISSED"; fi
}

stop_pid() {  # stop_pid <pidfile>: SIGTERM, wait, SIGKILL; only the process we started
  local file=$1 pid
  [ -f "$file" ] || return 0
  pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

# -- day 2 on the lab: upgrade and hardware swap, each under a bounded request loop on the route ----------

start_load() {  # start_load <dir> [url [loop args...]]: the request loop in the background, its key copied root-only from node-a
  local dir=$1 url=${2:-http://127.0.0.1:30080}
  shift
  [ $# -eq 0 ] || shift
  mkdir -p "$dir"
  (umask 077 && podman exec pairserve-lab-node-a cat /etc/pairserve/secrets/inference-api-key >"$dir/key")
  setsid python -m lab.route_load --url "$url" --model qwen --key-file "$dir/key" \
    --summary "$dir/load.json" --concurrency 2 --max-seconds 2400 "$@" >"$dir/load.log" 2>&1 &
  echo $! >"$dir/load.pid"
}

stop_load() {  # stop_load <dir>: SIGTERM the loop (it writes its summary), print its last line
  local dir=$1
  stop_pid "$dir/load.pid"
  rm -f "$dir/key"
  tail -n 1 "$dir/load.log" 2>/dev/null || true
}

# with_results <log> <command...>: the command with the pairserve_results callback on (tests/support/callback_plugins): every
# task result as one JSON line in <log's name>.jsonl beside the log, started empty; what the suites assert on
# (tests/support/lab_suite.py, results). Ad-hoc `ansible` loads callbacks only with ANSIBLE_LOAD_CALLBACK_PLUGINS.
with_results() {
  local jsonl=${1%.log}.jsonl
  shift
  rm -f "$jsonl"
  PAIRSERVE_RESULTS_FILE=$jsonl ANSIBLE_CALLBACK_PLUGINS=$root/tests/support/callback_plugins \
    ANSIBLE_CALLBACKS_ENABLED=pairserve_results ANSIBLE_LOAD_CALLBACK_PLUGINS=1 "$@"
}

play() {  # play <log> <rc file> <playbook> [args...]: run a play, keep its log, task results and exit status, never abort
  local log=$1 rcfile=$2 book=$3 rc=0
  shift 3
  with_results "$log" ansible-playbook -i inventory/lab/hosts.yml "$book" "$@" >"$log" 2>&1 || rc=$?
  echo "$rc" >"$rcfile"
  echo "  $(basename "$log" .log): rc=$rc, changed=$(recap_changed "$log") ($log, ${log%.log}.jsonl)"
}

set_pin() {  # set_pin <var> <value>: change one pin in the lab's generated inventory file, atomically
  python - "$hub_vars" "$1" "$2" <<'PY'
import json, os, sys
path, key, value = sys.argv[1:4]
text = open(path).read()
header = "".join(line for line in text.splitlines(True) if line.startswith("#"))
data = json.loads("".join(line for line in text.splitlines(True) if not line.startswith("#")))
data[key] = value
with open(path + ".tmp", "w") as f:
    f.write(header)
    json.dump(data, f, indent=1)
    f.write("\n")
os.replace(path + ".tmp", path)
PY
}

# Which day-2 steps run: all (the default of `scripts/lab.sh upgrade|hardware_swap` and of the molecule scenarios), or
# core (what `scripts/lab.sh test` runs when PAIRSERVE_LAB_SCENARIOS names them): without the broken runner
# image's rollback (~8 min) and the reinstall (~9 min). Each scenario writes what it ran to <dir>/steps; the
# suites skip, saying so, the checks of the steps that did not run.
day2_steps=${PAIRSERVE_LAB_DAY2_STEPS:-all}

prepare_upgrade() {  # what the upgrade scenario's pins need and the default lab (CI) does not build; each once
  local gs_next vllm_prev vllm_next
  gs_next=$(pairserve_pin inventory/lab/upgrade/next.yml pairserve_gpustack_version)
  vllm_prev=$(pairserve_pin inventory/lab/upgrade/previous.yml pairserve_vllm_version)
  vllm_next=$(pairserve_pin inventory/lab/upgrade/next.yml pairserve_vllm_version)
  phase "GPUStack $gs_next wheelhouse" bash tools/build_wheelhouse.sh "$gs_next"
  phase "GPUStack $gs_next worker tools" worker_tools "$gs_next"
  phase "vLLM $vllm_prev replica image" build_replica_image "$vllm_prev"
  phase "vLLM $vllm_next replica image" build_replica_image "$vllm_next"
}

use_pins() {  # use_pins previous|next: the scenario's pins file becomes the lab's, as a user edits pins.yml
  # The runner image of its vLLM comes from the lab registry by digest, as the default lab's does (pins.yml names
  # the repository from the vLLM version; the digest is known once the image is pushed): both nodes pull it,
  # node-b through Docker, which has no podman image store to find a localhost/ image in.
  local vllm digest_file
  vllm=$(pairserve_pin "inventory/lab/upgrade/$1.yml" pairserve_vllm_version) || return
  digest_file=$state/runner-$vllm.digest
  pairserve_lab_registry_start "$state" || return
  CONTAINERS_REGISTRIES_CONF=$state/registries.conf \
    pairserve_lab_registry_push "$(pairserve_vllm_cpu_image "$vllm")" "lab/vllm-cpu:$vllm" "$digest_file" || return
  { echo "# Written by scripts/lab.sh upgrade from inventory/lab/upgrade/$1.yml (git-ignored, removed by"
    echo "# \`scripts/lab.sh down\`); loaded after pins.yml, so these pins are the lab's now."
    grep -v '^#' "inventory/lab/upgrade/$1.yml"
    echo "pairserve_runner_image_digest: \"$(cat "$digest_file")\""; } >"$upgrade_pins.tmp"
  mv "$upgrade_pins.tmp" "$upgrade_pins"
}

broken_runner_image() {  # broken_runner_image <replica image>: localhost/pairserve-vllm-cpu:broken, built on it
  local dir=$state/broken-image
  mkdir -p "$dir"
  cat >"$dir/vllm" <<'SH'
#!/bin/sh
# The lab's broken runner image (scripts/lab.sh upgrade): it tells its vLLM version and cannot serve.
case "${1:-}" in
  --version|-v) exec /opt/vllm/bin/python -c 'import sys; from vllm.entrypoints.cli.main import main; sys.argv[0] = "vllm"; sys.exit(main())' "$@" ;;
esac
echo "pairserve lab: this runner image cannot serve (the upgrade scenario's broken image)" >&2
exit 1
SH
  chmod 0755 "$dir/vllm"
  printf 'FROM %s\nCOPY vllm /opt/vllm/bin/vllm\n' "$1" >"$dir/Containerfile"
  lab_podman build -q -t localhost/pairserve-vllm-cpu:broken "$dir" >/dev/null
}

server_version() {  # the version GPUStack's server answers on /version, without the leading v; empty if none
  python - <<'PY' 2>/dev/null || true
import json, urllib.request
with urllib.request.urlopen("http://127.0.0.1:30080/version", timeout=5) as resp:
    print(json.load(resp)["version"].lstrip("v"))
PY
}

snapshot_gpustack() {  # snapshot_gpustack <file>: ids of what the upgrade must keep, and what each replica runs
  python - "$1" <<'PY'
import json, sys, urllib.request
from lab.api import items, read_keys
key = read_keys()["management"]
snap = {path: items(path, key) for path in ("/v2/clusters", "/v2/workers", "/v2/models", "/v2/model-routes",
                                            "/v2/model-route-targets", "/v2/api-keys")}
# What answers on each replica's port: vLLM's own /version, and the image GPUStack registered.
snap["replica_vllm"] = {}
for inst in items("/v2/model-instances", key):
    try:
        with urllib.request.urlopen("http://%s:%d/version" % (inst["worker_ip"], inst["port"]), timeout=10) as resp:
            snap["replica_vllm"][inst["model_name"]] = json.load(resp)["version"]
    except (OSError, ValueError, KeyError) as err:
        snap["replica_vllm"][inst["model_name"]] = "error: %s" % err
with urllib.request.urlopen("http://127.0.0.1:30080/version", timeout=10) as resp:
    snap["server_version"] = json.load(resp)["version"]
open(sys.argv[1], "w").write(json.dumps(snap, indent=1))
print("lab upgrade: GPUStack %s, replicas on vLLM %s (%s)" % (snap["server_version"], snap["replica_vllm"], sys.argv[1]))
PY
}

load_after_server_restart() {  # load_after_server_restart <dir> <version>: in the background, wait until the
  # server answers <version>, record how long it did not answer (its restart: GPUStack's server proxies every
  # request and has no stand-in), then become the request loop in <dir> (same PID: stop_load stops either)
  local dir=$1 version=$2
  mkdir -p "$dir"
  (umask 077 && podman exec pairserve-lab-node-a cat /etc/pairserve/secrets/inference-api-key >"$dir/key")
  setsid python - "$dir" "$version" >"$dir/load.log" 2>&1 <<'PY' &
import json, os, sys, time, urllib.request
out, want = sys.argv[1], sys.argv[2]
start, last_old, down, seen = time.time(), None, None, None
while time.time() - start < 2400:
    try:
        with urllib.request.urlopen("http://127.0.0.1:30080/version", timeout=2) as resp:
            seen = json.load(resp)["version"].lstrip("v")
        if seen == want:
            break
        last_old = time.time()
    except (OSError, ValueError, KeyError):
        down = down or time.time()
    time.sleep(0.5)
else:
    json.dump({"error": "the server did not answer %s within 2400 s (last: %s)" % (want, seen)},
              open(out + "/server-restart.json", "w"))
    sys.exit(1)
back = time.time()
json.dump({"version": want, "server_unanswered_s": round(back - (down or back), 1),
           "old_version_last_seen_s": round(last_old - start, 1) if last_old else None,
           "new_version_first_seen_s": round(back - start, 1)}, open(out + "/server-restart.json", "w"), indent=1)
sys.stdout.flush()
os.execvp(sys.executable, [sys.executable, "-m", "lab.route_load", "--url", "http://127.0.0.1:30080", "--model", "qwen",
                           "--key-file", out + "/key", "--summary", out + "/load.json", "--concurrency", "2",
                           "--max-seconds", "2400"])
PY
  echo $! >"$dir/load.pid"
}

day2_upgrade() {
  local dir=$state/upgrade start=$SECONDS next running gs_prev vllm_prev
  next=$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["next_revision"])' "$state/hub.json")
  gs_prev=$(pairserve_pin inventory/lab/upgrade/previous.yml pairserve_gpustack_version)
  vllm_prev=$(pairserve_pin inventory/lab/upgrade/previous.yml pairserve_vllm_version)
  running=$(server_version)
  # The scenario starts from the previous pins; a lab that already runs a newer GPUStack (a second `upgrade`) has
  # a migrated database that the previous version must not be started on.
  if [ "$running" != "$gs_prev" ]; then
    echo "lab upgrade: GPUStack answers '${running:-nothing}' on 127.0.0.1:30080, not $gs_prev: the scenario starts" \
         "from a lab converged with the default pins. Run scripts/lab.sh down && scripts/lab.sh up first." >&2
    return 1
  fi
  mkdir -p "$dir"
  echo "=== lab upgrade: what the scenario's pins need (built once, not part of \`make lab\`)"
  prepare_upgrade
  start_load "$dir"
  echo "=== lab upgrade: the previous pins (inventory/lab/upgrade/previous.yml: GPUStack $gs_prev, vLLM $vllm_prev)"
  use_pins previous
  play "$dir/previous.log" "$dir/previous.rc" playbooks/upgrade.yml
  if [ "$(cat "$dir/previous.rc")" != 0 ]; then
    stop_load "$dir"
    echo "lab upgrade: the lab did not reach the previous pins; see $dir/previous.log" >&2
    return 1
  fi
  echo "=== lab upgrade: a vLLM pin without a runner image (expected to fail before anything changes)"
  play "$dir/bad-pin.log" "$dir/bad-pin.rc" playbooks/upgrade.yml \
    -e '{"pairserve_vllm_version": "0.99.0", "pairserve_runner_image": "localhost/pairserve-vllm-cpu:0.99.0",
         "pairserve_runner_image_digest": ""}'
  echo "$day2_steps" >"$dir/steps"
  if [ "$day2_steps" = all ]; then
    # A runner image that tells the pinned vLLM and cannot serve: the lab's replica image whose `vllm serve` exits
    # at once (an image without vLLM is refused before the drain by the runner image's version check). The replica
    # is drained, registered with it, rolled out, fails verification, and is put back exactly as it was. A local
    # image, by name (no digest: the previous pins' digest in upgrade_pins.yml is the registry image's).
    broken_runner_image "$(pairserve_vllm_cpu_image "$(pairserve_pin inventory/lab/upgrade/previous.yml pairserve_vllm_version)")" || return
    # the same image in the Docker engine node-b deploys through
    lab_podman save localhost/pairserve-vllm-cpu:broken | lab_docker load >/dev/null
    echo "=== lab upgrade: a runner image that cannot serve (expected: drained, verified, rolled back)"
    play "$dir/broken-image.log" "$dir/broken-image.rc" playbooks/upgrade.yml \
      -e '{"pairserve_runner_image": "localhost/pairserve-vllm-cpu:broken", "pairserve_runner_image_digest": "",
           "pairserve_verify_wait_timeout": 150}'
    lab_podman rmi localhost/pairserve-vllm-cpu:broken >/dev/null || true
    lab_docker rmi localhost/pairserve-vllm-cpu:broken >/dev/null 2>&1 || true
  fi
  # What the new pins must keep (ids of clusters, workers, models, routes, targets, API keys) and what runs now.
  snapshot_gpustack "$dir/before.json"
  echo "=== lab upgrade: the route under load while the previous pins, the bad pin and the broken image ran"
  stop_load "$dir"
  echo "=== lab upgrade: the new pins (inventory/lab/upgrade/next.yml: GPUStack $(pairserve_pin inventory/lab/upgrade/next.yml pairserve_gpustack_version)," \
       "vLLM $(pairserve_pin inventory/lab/upgrade/next.yml pairserve_vllm_version)) and pairserve_checkpoint_revision -> $next (the hub's next commit)"
  use_pins next
  set_pin pairserve_checkpoint_revision "$next"
  # The loop pauses while the server restarts on the new version (the route's one unavoidable gap: every request
  # goes through GPUStack's server) and runs again from its first answer on, through the workers' and replicas' turns.
  load_after_server_restart "$dir/gpustack" "$(pairserve_pin inventory/lab/upgrade/next.yml pairserve_gpustack_version)"
  play "$dir/upgrade-1.log" "$dir/upgrade-1.rc" playbooks/upgrade.yml
  echo "=== lab upgrade: the same pins again (expected changed=0)"
  play "$dir/upgrade-2.log" "$dir/upgrade-2.rc" playbooks/upgrade.yml
  echo "=== lab upgrade: the route under load from the server's restart on"
  stop_load "$dir/gpustack"
  cat "$dir/gpustack/server-restart.json" 2>/dev/null && echo
  echo "=== lab upgrade took $((SECONDS - start)) s"
}

day2_swap() {
  local dir=$state/hardware_swap start=$SECONDS
  mkdir -p "$dir"
  # The cards of node-b change: its recorded NVML host becomes 2x RTX 4090 (24 GiB). As on a real node, the
  # inventory stays as it is: the node's NVML answers change (the recording the node replays), and so does its CDI
  # spec, as the NVIDIA toolkit's `nvidia-ctk cdi generate` writes it after a swap.
  gpu_stand_in node-b tests/fixtures/nvml/node-b-2x4090.json
  # What GPUStack has before, so the suite can prove node-a's replica was not touched.
  python - "$dir/before.json" <<'PY'
import json, sys
from lab.api import items, read_keys
key = read_keys()["management"]
snap = {"models": {m["name"]: m for m in items("/v2/models", key)},
        "instances": {i["model_name"]: i for i in items("/v2/model-instances", key)}}
open(sys.argv[1], "w").write(json.dumps(snap, indent=1))
PY
  start_load "$dir"
  echo "=== lab swap: node-b now has 2x RTX 4090; rebuild_node.yml --limit node-b"
  play "$dir/rebuild-1.log" "$dir/rebuild-1.rc" playbooks/rebuild_node.yml --limit node-b
  echo "=== lab swap: rebuild_node.yml --limit node-b again (expected changed=0)"
  play "$dir/rebuild-2.log" "$dir/rebuild-2.rc" playbooks/rebuild_node.yml --limit node-b
  echo "=== lab swap: the route under load while the two rebuilds ran"
  stop_load "$dir"
  # A reinstall from scratch loses the worker's identity (GPUStack's worker_uuid in its data directory) and the
  # pairs record: the node must re-join under its name without a ghost worker or an orphaned replica. The node
  # goes down unannounced, as a reinstalled one does; the request loop starts once GPUStack has noticed (until
  # then GPUStack 2.2.3 still sends node-b its share and those requests fail: that is the node dying, not the
  # play), and counts what fails while rebuild_node.yml brings it back.
  echo "$day2_steps" >"$dir/steps"
  if [ "$day2_steps" != all ]; then
    echo "=== lab swap took $((SECONDS - start)) s (core steps; PAIRSERVE_LAB_DAY2_STEPS=all adds the reinstall)"
    return 0
  fi
  echo "=== lab swap: node-b reinstalled (worker data directory and pairs record wiped); rebuild_node.yml --limit node-b"
  podman exec pairserve-lab-node-b sh -c 'systemctl stop gpustack-worker && rm -rf /var/lib/gpustack-worker /var/lib/pairserve/pairs.json'
  python - <<'PY'
import sys, time
from lab.api import items, read_keys
key, start = read_keys()["management"], time.monotonic()
while time.monotonic() - start < 300:
    if all(w["state"] != "ready" for w in items("/v2/workers", key) if w["name"] == "node-b"):
        print("lab swap: GPUStack marked node-b's worker down after %.0f s" % (time.monotonic() - start))
        break
    time.sleep(2)
else:
    sys.exit("lab swap: GPUStack still shows node-b's worker ready 300 s after it stopped")
PY
  start_load "$dir/reinstall"
  play "$dir/reinstall.log" "$dir/reinstall.rc" playbooks/rebuild_node.yml --limit node-b
  echo "=== lab swap: the route under load while the rebuild of the reinstalled node ran"
  stop_load "$dir/reinstall"
  echo "=== lab swap took $((SECONDS - start)) s"
}

day2_sleepwake() {
  local dir=$state/sleep_wake start=$SECONDS since
  mkdir -p "$dir"
  # The controller's venv installs from its wheels (not part of `make lab`): built once.
  bash tools/build_controller_wheels.sh || return
  rm -f "$dir/demo.rc" "$dir/result.json"
  # The lab's settings: sleep after 30 s idle (not 30 min), look every 2 s, wake when node-a has 2 requests
  # waiting; the speeds are the lab's CPU replicas' (docs/lab.md: ~250 tok/s each at 4 sequences).
  cat >"$dir/controller.yml" <<'YAML'
pairserve_controller_enabled: true
pairserve_controller_mode: sleep
pairserve_controller_sleep_replica: qwen-node-b
pairserve_controller_idle_minutes: 0.5
pairserve_controller_drain_grace: 5
pairserve_controller_wake_waiting: 2
pairserve_controller_wake_prompt_tokens: 6000
pairserve_controller_interval: 2
pairserve_controller_hold: 4
pairserve_controller_wake_timeout: 600
pairserve_controller_replicas:
  - {name: qwen-node-a, prefill_tps: 2000, decode_tps: 250}
  - {name: qwen-node-b, prefill_tps: 2000, decode_tps: 245}
YAML
  echo "=== lab sleep/wake: the controller on (sleep mode, 30 s idle)"
  # The journal keeps earlier runs: this run's lines only, so the suite cannot pass on an older run's log.
  since=$(podman exec pairserve-lab-node-a date "+%Y-%m-%d %H:%M:%S")
  play "$dir/enable.log" "$dir/enable.rc" playbooks/controller.yml -e "@$dir/controller.yml"
  python -m lab.sleep_wake --dir "$dir" --result "$dir/result.json" || echo $? >"$dir/demo.rc"
  podman exec pairserve-lab-node-a journalctl -u pairserve-controller --since "$since" --no-pager -o short-iso >"$dir/controller.journal" 2>&1 || true
  echo "=== lab sleep/wake: the controller off again"
  play "$dir/disable.log" "$dir/disable.rc" playbooks/controller.yml -e pairserve_controller_enabled=false
  echo "=== lab sleep/wake took $((SECONDS - start)) s"
}

day2_patch_restart() {  # the tokenizer patch undone on both nodes, then site.yml under the request loop
  # As after a run that left a checkpoint unpatched (or a new export): site.yml patches it again, and since
  # vLLM reads the tokenizer only at start-up, restarts each node's replicas one node at a time, drained from the
  # route first. The loop counts every request meanwhile; the converge's task results are kept as JSON lines.
  local dir=$state/patch_restart start=$SECONDS key
  mkdir -p "$dir"
  rm -f "$dir"/*.rc "$dir"/*.jsonl "$dir"/*.json
  key=$(podman exec pairserve-lab-node-a cat /etc/pairserve/secrets/management-api-key)
  PAIRSERVE_KEY=$key python -c 'import json, os, sys
from lab.api import items
key = os.environ["PAIRSERVE_KEY"]
json.dump({i["model_name"]: i["id"] for i in items("/v2/model-instances", key)}, open(sys.argv[1], "w"))' "$dir/instances-before.json"
  echo "=== lab patch restart: the tokenizer patch undone on both nodes (tokenizer_patch state=restored)"
  # shellcheck disable=SC2016  # Jinja, rendered by Ansible per node
  local unpatch_rc=0
  with_results "$dir/unpatch.log" ansible -i inventory/lab/hosts.yml gpu_nodes -m pairserve.llm.tokenizer_patch \
    -a '{"path": "{{ (pairserve_checkpoint_cache_dir | pairserve.llm.checkpoint_paths(pairserve_checkpoint_repo, pairserve_checkpoint_revision)).snapshot_path }}", "state": "restored"}' \
    >"$dir/unpatch.log" 2>&1 || unpatch_rc=$?
  echo "$unpatch_rc" >"$dir/unpatch.rc"
  start_load "$dir"
  echo "=== lab patch restart: site.yml patches again and restarts the replicas, drained, under the request loop"
  play "$dir/converge.log" "$dir/converge.rc" site.yml
  stop_load "$dir"
  PAIRSERVE_KEY=$key python -c 'import json, os, sys
from lab.api import items
key = os.environ["PAIRSERVE_KEY"]
json.dump({i["model_name"]: {"id": i["id"], "state": i["state"]} for i in items("/v2/model-instances", key)}, open(sys.argv[1], "w"))' "$dir/instances-after.json"
  echo "=== lab patch restart: site.yml again (nothing to restart: changed=0)"
  play "$dir/rerun.log" "$dir/rerun.rc" site.yml
  echo "=== lab patch restart took $((SECONDS - start)) s"
}

day2_rotate() {  # every credential of playbooks/rotate.yml rotated under the request loop, through the HTTPS front
  # The loop stands for a client the operator moves: it reads its key file and its CA file before each request
  # (lab/route_load.py --follow-key-file --ca-file), and the scenario moves them as the how-to says
  # (docs/how-to/rotate-credentials.md). Each tag runs twice; the second run must change nothing. The old keys are
  # kept root-only in the scenario's directory for the suite's 401 checks (removed by `down` with .lab/).
  local dir=$state/rotate start=$SECONDS tls=$state/tls before k
  mkdir -p "$dir"
  rm -f "$dir"/*.rc "$dir"/*.jsonl "$dir"/*.log "$dir"/*.json
  for k in management inference; do
    (umask 077 && podman exec pairserve-lab-node-a cat "/etc/pairserve/secrets/$k-api-key" >"$dir/old-$k-key")
  done
  cp "$tls/ca.crt" "$dir/ca.crt"
  # Every key made before this time is replaced (the converge made them earlier).
  before=$(date -u +%FT%TZ)
  sleep 1
  start_load "$dir" https://127.0.0.1:30443 --follow-key-file --ca-file "$dir/ca.crt"
  echo "=== lab rotate: the management key (the controller's key file moved, restarted through its handler)"
  play "$dir/management.log" "$dir/management.rc" playbooks/rotate.yml --tags management_key -e "pairserve_rotate_before=$before"
  play "$dir/management-rerun.log" "$dir/management-rerun.rc" playbooks/rotate.yml --tags management_key -e "pairserve_rotate_before=$before"
  echo "=== lab rotate: the inference key, the loop (a client outside the collection) moved while both keys serve"
  play "$dir/inference-stage.log" "$dir/inference-stage.rc" playbooks/rotate.yml --tags inference_key \
    -e "pairserve_rotate_before=$before" -e pairserve_rotation_retire=false
  (umask 077 && podman exec pairserve-lab-node-a cat /etc/pairserve/secrets/inference-api-key >"$dir/key.new" &&
    mv "$dir/key.new" "$dir/key")
  play "$dir/inference.log" "$dir/inference.rc" playbooks/rotate.yml --tags inference_key -e "pairserve_rotate_before=$before"
  play "$dir/inference-rerun.log" "$dir/inference-rerun.rc" playbooks/rotate.yml --tags inference_key -e "pairserve_rotate_before=$before"
  echo "=== lab rotate: the registration token (GPUStack 2.2.3 cannot replace it: checked, not rotated)"
  play "$dir/token.log" "$dir/token.rc" playbooks/rotate.yml --tags registration_token
  echo "=== lab rotate: a new certificate from the same CA (nginx reloaded, the workers untouched)"
  python -m lab.tls --renew "$tls"
  play "$dir/cert-same-ca.log" "$dir/cert-same-ca.rc" playbooks/rotate.yml --tags certificate
  play "$dir/cert-same-ca-rerun.log" "$dir/cert-same-ca-rerun.rc" playbooks/rotate.yml --tags certificate
  echo "=== lab rotate: a new CA in three runs (both CAs trusted, the new certificate, the new CA alone)"
  python -m lab.tls --next-ca "$tls"
  cat "$tls/ca.crt" "$tls/next/ca.crt" >"$tls/ca.crt.new" && mv "$tls/ca.crt.new" "$tls/ca.crt"
  cp "$tls/ca.crt" "$dir/ca.crt.new" && mv "$dir/ca.crt.new" "$dir/ca.crt"
  play "$dir/cert-both-cas.log" "$dir/cert-both-cas.rc" playbooks/rotate.yml --tags certificate
  (umask 077 && cp "$tls/next/gpustack.key" "$tls/gpustack.key.new") && mv "$tls/gpustack.key.new" "$tls/gpustack.key"
  cp "$tls/next/gpustack.crt" "$tls/gpustack.crt.new" && mv "$tls/gpustack.crt.new" "$tls/gpustack.crt"
  play "$dir/cert-new-ca.log" "$dir/cert-new-ca.rc" playbooks/rotate.yml --tags certificate
  cp "$tls/next/ca.crt" "$dir/ca.crt.new" && mv "$dir/ca.crt.new" "$dir/ca.crt"
  cp "$tls/next/ca.crt" "$tls/ca.crt.new" && mv "$tls/ca.crt.new" "$tls/ca.crt"
  (umask 077 && cp "$tls/next/ca.key" "$tls/ca.key.new") && mv "$tls/ca.key.new" "$tls/ca.key"
  rm -rf "$tls/next"
  play "$dir/cert-old-ca-gone.log" "$dir/cert-old-ca-gone.rc" playbooks/rotate.yml --tags certificate
  play "$dir/cert-rerun.log" "$dir/cert-rerun.rc" playbooks/rotate.yml --tags certificate
  stop_load "$dir"
  echo "=== lab rotate: verify.yml and status.yml read the new keys (days left on the new certificate and CA)"
  play "$dir/verify.log" "$dir/verify.rc" playbooks/verify.yml
  play "$dir/status.log" "$dir/status.rc" playbooks/status.yml
  echo "=== lab rotate took $((SECONDS - start)) s"
}

reboot_watcher() {  # reboot_watcher <dir>: in the background, the lab's reboot: pairserve-lab-<node> restarted for
  # each file /run/pairserve-lab/reboot/<node> (what the lab inventory's pairserve_maintenance_reboot_command writes on
  # the node). `podman restart` stops the container as a shutdown does (systemd gets its stop signal and stops its
  # units), then starts it again; the node's disk stays. Stopped by stop_pid <dir>/reboot-watcher.pid.
  local dir=$1
  mkdir -p "$run_dir/reboot"
  # shellcheck disable=SC2016  # expanded by the background shell
  setsid bash -c 'while :; do
      for f in "$1"/*; do
        [ -e "$f" ] || continue
        node=$(basename "$f"); rm -f "$f"
        echo "$(date -u +%H:%M:%SZ) reboot of $node: podman restart pairserve-lab-$node"
        podman restart --time 30 "pairserve-lab-$node" >/dev/null && echo "$(date -u +%H:%M:%SZ) $node started again"
      done
      sleep 1
    done' reboot-watcher "$run_dir/reboot" >"$dir/reboot-watcher.log" 2>&1 &
  echo $! >"$dir/reboot-watcher.pid"
}

maintenance_snapshot() {  # maintenance_snapshot <file>: GPUStack's instances, workers and route weights, and when
  # node-b's container started (a reboot restarts it)
  PAIRSERVE_STARTED=$(podman inspect --format '{{.State.StartedAt}}' pairserve-lab-node-b) python - "$1" <<'PY'
import json, os, sys
from lab.api import items, read_keys
key = read_keys()["management"]
names = {m["id"]: m["name"] for m in items("/v2/models", key)}
json.dump({"instances": {i["model_name"]: {"id": i["id"], "state": i["state"]} for i in items("/v2/model-instances", key)},
           "workers": {w["name"]: {"state": w["state"], "maintenance": w.get("maintenance")} for w in items("/v2/workers", key)},
           "weights": {names.get(t["model_id"], str(t["model_id"])): t["weight"] for t in items("/v2/model-route-targets", key)
                       if t.get("model_id") is not None},
           "node_b_started": os.environ["PAIRSERVE_STARTED"]}, open(sys.argv[1], "w"), indent=1)
PY
}

day2_maintenance() {  # node-b rebooted by playbooks/maintenance.yml under the request loop; check mode; site.yml
  # The node is drained, its worker put in GPUStack's maintenance mode and its replica stopped; the reboot is a
  # restart of its container (reboot_watcher). The loop counts every request meanwhile; then maintenance.yml in check
  # mode (a maintenance is an act: check mode says what it would do and changes nothing) and site.yml (changed=0: the
  # node is back as the site declares it).
  local dir=$state/maintenance start=$SECONDS
  mkdir -p "$dir"
  rm -f "$dir"/*.rc "$dir"/*.jsonl "$dir"/*.json "$dir"/*.log
  maintenance_snapshot "$dir/before.json"
  reboot_watcher "$dir"
  start_load "$dir"
  echo "=== lab maintenance: playbooks/maintenance.yml --limit node-b (reboot) under the request loop"
  play "$dir/maintenance.log" "$dir/maintenance.rc" playbooks/maintenance.yml --limit node-b
  stop_load "$dir"
  stop_pid "$dir/reboot-watcher.pid"
  rmdir "$run_dir/reboot" 2>/dev/null || true
  maintenance_snapshot "$dir/after.json"
  echo "=== lab maintenance: maintenance.yml --check (changed=0, nothing done)"
  play "$dir/check.log" "$dir/check.rc" playbooks/maintenance.yml --limit node-b --check
  maintenance_snapshot "$dir/after-check.json"
  echo "=== lab maintenance: site.yml (changed=0)"
  play "$dir/rerun.log" "$dir/rerun.rc" site.yml
  echo "=== lab maintenance took $((SECONDS - start)) s"
}

site_snapshot() {  # site_snapshot <file>: what GPUStack holds by name (routes and their targets'
  # weights, models, API keys, workers) and each replica's instance (its id survives a restore when its worker does,
  # and a refused drain when nothing was done); what the restore must bring back and a fault must leave alone
  python - "$1" <<'PY'
import json, sys
from lab.api import items, read_keys
key = read_keys()["management"]
names = {m["id"]: m["name"] for m in items("/v2/models", key)}
routes = {r["id"]: r["name"] for r in items("/v2/model-routes", key)}
targets = {name: {} for name in routes.values()}
for t in items("/v2/model-route-targets", key):
    if t.get("route_id") in routes and t.get("model_id") is not None:
        targets[routes[t["route_id"]]][names.get(t["model_id"], str(t["model_id"]))] = t["weight"]
json.dump({"routes": targets, "models": sorted(names.values()),
           "api_keys": sorted(k["name"] for k in items("/v2/api-keys", key)),
           "workers": {w["name"]: {"id": w["id"], "state": w["state"]} for w in items("/v2/workers", key)},
           "instances": {i["model_name"]: {"id": i["id"], "state": i["state"], "worker": i.get("worker_name")}
                         for i in items("/v2/model-instances", key)}}, open(sys.argv[1], "w"), indent=1)
PY
}

destroy_node() {  # destroy_node <node>: the node lost with its disk, at once (no shutdown): its container killed and
  # removed, its data directory deleted (checkpoint cache; its PostgreSQL lived in the container), and what the lab
  # keeps of a node outside its container because the nodes share the host: the replica containers its worker started
  # in the host's engine, and its firewall tables in the host's ruleset (a lost machine takes both with it)
  local node=$1
  podman rm -f -t 0 "pairserve-lab-$node" >/dev/null || true
  lab_podman ps -a --format '{{.ID}} {{.Labels}}' 2>/dev/null |
    awk -v p="$node.runtime.gpustack.ai/workload:" 'index($0, p) {print $1}' |
    xargs -r env CONTAINERS_CONF="$state/containers.conf" podman rm -f --depend -t 0 >/dev/null || true
  if [ -S "$run_dir/docker.sock" ]; then
    lab_docker ps -a --format '{{.ID}} {{.Labels}}' 2>/dev/null |
      awk -v p="$node.runtime.gpustack.ai/workload=" 'index($0, p) {print $1}' |
      xargs -r docker -H "unix://$run_dir/docker.sock" rm -f >/dev/null 2>&1 || true
  fi
  nft delete table inet "pairserve_${node//-/_}" 2>/dev/null || true
  [ "$node" != node-a ] || nft delete table inet pairserve_server 2>/dev/null || true
  rm -rf "${data_dir:?}/$node"
}

restore_figures() {  # restore_figures <dir>: the drill's figures from its event times and the loop's summary
  python - "$1" <<'PY'
import json, sys, time
out = sys.argv[1]
times = dict(line.strip().split("=", 1) for line in open(out + "/times") if "=" in line)
times = {k: float(v) for k, v in times.items()}
load = json.load(open(out + "/load.json"))
gone = times["destroyed"]
outage = load.get("longest_outage") or {}
back = outage.get("to")


def since(name):
    return round(times[name] - gone, 1) if name in times else None


figures = {"times": times, "outage": outage,
           "recovery_s": round(back - gone, 1) if back is not None and back > gone else None,
           "node_bare_s": since("node_bare"), "restore_done_s": since("restored"),
           "node_a_replica_back_s": since("rebuilt"), "total_s": since("site_done"),
           "requests": load["requests"], "ok": load["ok"], "failed": load["failed"],
           "failures_by_class": load["failures_by_class"],
           "ok_after_recovery": load.get("ok_after_longest_outage"),
           "failed_after_recovery": load.get("failures_after_longest_outage")}
json.dump(figures, open(out + "/figures.json", "w"), indent=1)
print("=== lab figures: restore drill (node-a destroyed at %s UTC)" % time.strftime("%H:%M:%S", time.gmtime(gone)))
print("  recovery time (the route answered nothing): %s s, from the destroy to the first request answered again "
      "(%s requests failed in it)" % (figures["recovery_s"], outage.get("failed")))
print("  node-a bare again (container, SSH):          %s s" % figures["node_bare_s"])
print("  restore.yml done:                            %s s" % figures["restore_done_s"])
print("  node-a's replica back (rebuild_node.yml):    %s s" % figures["node_a_replica_back_s"])
print("  total (site.yml done):                       %s s" % figures["total_s"])
print("  requests through the route with the old key: %d, %d ok, %d failed %s; after the recovery %s ok, failed %s"
      % (load["requests"], load["ok"], load["failed"], json.dumps(load["failures_by_class"]),
         figures["ok_after_recovery"], json.dumps(figures["failed_after_recovery"])))
PY
}

day2_restore() {  # node-a (the server, and a GPU node) lost with its disk and restored from a backup, under the
  # request loop, as docs/how-to/backup-restore.md's "Runbook: node A is lost" goes: backup.yml with the archive
  # fetched to the controller; node-a destroyed and recreated bare at its address; restore.yml (its last play fails
  # for node-a alone: its worker is not there yet); rebuild_node.yml --limit node-a; verify.yml; site.yml; then
  # site.yml and restore.yml again (changed=0). The loop keeps the inference key it started with: the old key.
  local dir=$state/restore start=$SECONDS archive
  mkdir -p "$dir"
  rm -rf "$dir/backups"
  rm -f "$dir"/*.rc "$dir"/*.jsonl "$dir"/*.json "$dir"/*.log "$dir/times" "$dir/figures.txt" "$dir/old-inference-key"
  echo "=== lab restore: playbooks/backup.yml, the archive fetched to $dir/backups"
  play "$dir/backup.log" "$dir/backup.rc" playbooks/backup.yml -e "pairserve_backup_fetch_dir=$dir/backups"
  archive=$(find "$dir/backups/node-a" -name '*.tar.gz' 2>/dev/null | sort | tail -n 1 || true)
  if [ "$(cat "$dir/backup.rc")" != 0 ] || [ -z "$archive" ]; then
    echo "lab restore: no archive fetched to $dir/backups/node-a; see $dir/backup.log" >&2
    return 1
  fi
  site_snapshot "$dir/before.json" || return
  # The clients' key, kept root-only for the suite: the restored server must accept it.
  (umask 077 && podman exec pairserve-lab-node-a cat /etc/pairserve/secrets/inference-api-key >"$dir/old-inference-key")
  # Bounded as the other loops, with room for the whole drill (its plays install node-a from nothing).
  start_load "$dir" http://127.0.0.1:30080 --timeout 30 --max-seconds 3600
  sleep 10  # the loop's first answers, before the loss
  echo "=== lab restore: node-a destroyed (container, data directory, its replica containers and firewall tables)"
  echo "destroyed=$(date +%s.%N)" >"$dir/times"
  destroy_node node-a
  stop_ssh_masters
  # Node-b's worker loses its server: its heartbeats and status reports fail (every 30 s) while node-a is rebuilt.
  sleep 30
  echo "=== lab restore: node-a recreated bare at its address (same hostname, SSH, GPUs' stand-ins)"
  create_node node-a && wait_for_ssh && node_runtime_units node-a || { stop_load "$dir"; return 1; }
  echo "node_bare=$(date +%s.%N)" >>"$dir/times"
  echo "=== lab restore: playbooks/restore.yml (expected to fail for node-a alone: its worker is not there yet)"
  play "$dir/restore.log" "$dir/restore.rc" playbooks/restore.yml -e "pairserve_backup_restore_file=$archive"
  echo "restored=$(date +%s.%N)" >>"$dir/times"
  site_snapshot "$dir/after-restore.json" || true
  echo "=== lab restore: playbooks/rebuild_node.yml --limit node-a"
  play "$dir/rebuild.log" "$dir/rebuild.rc" playbooks/rebuild_node.yml --limit node-a
  echo "rebuilt=$(date +%s.%N)" >>"$dir/times"
  echo "=== lab restore: playbooks/verify.yml (through the route, with the inference key the restore put back)"
  play "$dir/verify.log" "$dir/verify.rc" playbooks/verify.yml
  echo "=== lab restore: site.yml (node-a's firewall and what else neither play installs)"
  play "$dir/site.log" "$dir/site.rc" site.yml
  echo "site_done=$(date +%s.%N)" >>"$dir/times"
  echo "=== lab restore: the route under load from before the loss to here"
  stop_load "$dir"
  site_snapshot "$dir/after.json" || true
  restore_figures "$dir" | tee "$dir/figures.txt" || true
  echo "=== lab restore: site.yml again (changed=0)"
  play "$dir/rerun-site.log" "$dir/rerun-site.rc" site.yml
  echo "=== lab restore: restore.yml again with the same archive (changed=0: nothing to do)"
  play "$dir/rerun-restore.log" "$dir/rerun-restore.rc" playbooks/restore.yml -e "pairserve_backup_restore_file=$archive"
  echo "=== lab restore took $((SECONDS - start)) s"
}

maintenance_record() {  # maintenance_record <node>: maintenance.yml's record on the node, or "absent"
  podman exec "pairserve-lab-$1" cat /var/lib/pairserve/maintenance.json 2>/dev/null || echo absent
}

worker_unit() {  # worker_unit <node> <stop|start>: the node's GPUStack worker stopped or started (systemctl in its container)
  podman exec "pairserve-lab-$1" systemctl "$2" gpustack-worker
}

day2_faults() {  # partial failures on the converged lab (issue 44; docs/lab.md, "The faults scenario"): what a
  # failed node, a dead worker and a drain that would leave nothing do to the route. Four faults, each followed by
  # the fix-up a user runs, then site.yml (changed=0):
  # 1. site.yml, and node-b's SSH port refusing connections from the checkpoint play on (a table of the lab's own
  #    in the host's ruleset): node-b is unreachable half-way, node-a's run goes on, and the route keeps node-b's
  #    target at its weight.
  # 2. maintenance.yml --limit node-a while node-b's worker is stopped: refused before anything changes, since
  #    draining node-a would leave the route nothing.
  # 3. maintenance.yml --limit node-a (action none) and node-b's worker killed as soon as node-a is drained, under
  #    the request loop: the maintenance stops before node-a's replicas go down and node-a's weights come back;
  #    after node-b's worker is started again, maintenance.yml finishes.
  # 4. node-b's worker stopped across verify.yml and status.yml, as while the node restarts: both fail naming
  #    node-b's worker first; with the worker up again verify.yml passes.
  local dir=$state/faults start=$SECONDS
  mkdir -p "$dir"
  rm -f "$dir"/*.rc "$dir"/*.jsonl "$dir"/*.json "$dir"/*.log "$dir/times" "$dir"/refused-record-*
  site_snapshot "$dir/before.json" || return
  echo "=== lab faults 1: site.yml; node-b's SSH port refuses connections from its checkpoint play on"
  # After the plays that only check (a failure there stops every host, by design): node-b has its worker and its
  # replica, and fails in the middle of the run, when the checkpoint play begins.
  : >"$dir/cut.log"
  (
    until grep -q '^PLAY \[Pinned checkpoint' "$dir/cut.log"; do sleep 0.2; done
    nft -f - <<'NFT'
table inet pairserve_lab_fault {
  chain input {
    type filter hook input priority -10; policy accept;
    tcp dport 2223 reject with tcp reset
  }
}
NFT
    stop_ssh_masters
    echo "cut=$(date +%s.%N)" >>"$dir/times"
  ) >"$dir/cutter.log" 2>&1 &
  echo $! >"$dir/cutter.pid"
  play "$dir/cut.log" "$dir/cut.rc" site.yml
  stop_pid "$dir/cutter.pid"
  nft delete table inet pairserve_lab_fault 2>/dev/null || true
  site_snapshot "$dir/after-cut.json" || true
  echo "=== lab faults 1: site.yml with node-b reachable again, then again (changed=0)"
  play "$dir/cut-fixup.log" "$dir/cut-fixup.rc" site.yml
  play "$dir/cut-rerun.log" "$dir/cut-rerun.rc" site.yml
  echo "=== lab faults 2: maintenance.yml --limit node-a while node-b's worker is stopped (refused)"
  # No wait for GPUStack to notice (its check of the workers runs every 15 s): the drain's check asks the worker.
  worker_unit node-b stop
  site_snapshot "$dir/before-refused.json" || true
  maintenance_record node-a >"$dir/refused-record-before"
  play "$dir/refused.log" "$dir/refused.rc" playbooks/maintenance.yml --limit node-a -e pairserve_maintenance_action=none
  site_snapshot "$dir/after-refused.json" || true
  maintenance_record node-a >"$dir/refused-record-after"
  worker_unit node-b start
  python -m lab.faults wait-worker node-b ready --timeout 300 || return
  echo "=== lab faults 3: maintenance.yml --limit node-a; node-b's worker killed once node-a is drained"
  start_load "$dir"
  # shellcheck disable=SC2016  # expanded by the background shell
  # The worker dies (SIGKILL), and stays down (its unit stopped, so systemd does not start it again).
  setsid bash -c 'python -m lab.faults wait-drained node-a --timeout 900 && echo "killed=$(date +%s.%N)" >>"$1/times" &&
      podman exec pairserve-lab-node-b sh -c "systemctl kill --signal=SIGKILL gpustack-worker; systemctl stop gpustack-worker"' \
    _ "$dir" >"$dir/killer.log" 2>&1 &
  echo $! >"$dir/killer.pid"
  play "$dir/lost.log" "$dir/lost.rc" playbooks/maintenance.yml --limit node-a -e pairserve_maintenance_action=none
  echo "lost_done=$(date +%s.%N)" >>"$dir/times"
  # Its own session (setsid): the whole group, so that a wait still running (the drain refused) ends with it.
  [ ! -f "$dir/killer.pid" ] || kill -- -"$(cat "$dir/killer.pid")" 2>/dev/null || true
  stop_pid "$dir/killer.pid"
  site_snapshot "$dir/after-lost.json" || true
  stop_load "$dir"
  echo "=== lab faults 3: node-b's worker started again; maintenance.yml --limit node-a finishes; site.yml (changed=0)"
  worker_unit node-b start
  python -m lab.faults wait-worker node-b ready --timeout 300 || return
  play "$dir/finish.log" "$dir/finish.rc" playbooks/maintenance.yml --limit node-a -e pairserve_maintenance_action=none
  play "$dir/rerun.log" "$dir/rerun.rc" site.yml
  site_snapshot "$dir/after.json" || true
  echo "=== lab faults 4: node-b restarting (its worker stopped) across verify.yml and status.yml"
  # No wait for GPUStack to notice: it lists node-b's worker ready and its instance running until its own check of
  # the workers (every 15 s) finds the worker gone; the faults suite takes either state.
  worker_unit node-b stop
  # Its wait for the replicas gets 30 s: GPUStack marks them unreachable once its syncer finds the worker gone.
  play "$dir/verify-down.log" "$dir/verify-down.rc" playbooks/verify.yml -e pairserve_verify_wait_timeout=30
  play "$dir/status-down.log" "$dir/status-down.rc" playbooks/status.yml
  echo "=== lab faults 4: node-b's worker up again; verify.yml passes (changed=0)"
  worker_unit node-b start
  python -m lab.faults wait-worker node-b ready --timeout 300 || return
  play "$dir/verify-back.log" "$dir/verify-back.rc" playbooks/verify.yml
  echo "=== lab faults took $((SECONDS - start)) s"
}

day2_weights() {
  local dir=$state/queue_weights start=$SECONDS container results since
  mkdir -p "$dir"
  # The controller's venv installs from its wheels (not part of `make lab`): built once.
  bash tools/build_controller_wheels.sh || return
  rm -rf "$dir/bench" "$dir/demo.rc" "$dir/result.json"
  # Replicas of different speed, as the seed's pairs are: node-b's replica container gets a fraction of its core
  # (cgroup CPU quota; the container is left as it is otherwise and gets its whole core back at the end). Half a
  # core makes it about 2 times slower at decode and 5 times at prefill than node-a's. At 30 % vLLM 0.25.1's CPU
  # engine hung in a decode step under the mixed load (its worker never answered; "RPC call to sample_tokens timed
  # out" after 300 s, the instance restarted by GPUStack) in three runs of three: a stand-in failure, not the
  # controller's, which also left a replica not running when the controller was turned off.
  container=$(replica_container qwen-node-b)
  echo "=== lab weights: node-b's replica ($container) held to ${PAIRSERVE_LAB_SLOW_QUOTA:-50} % of its core"
  cpu_quota "$container" "$((${PAIRSERVE_LAB_SLOW_QUOTA:-50} * 1000))"
  echo "=== lab weights: both replicas measured (playbooks/bench.yml, replicas only)"
  play "$dir/bench.log" "$dir/bench.rc" playbooks/bench.yml -e pairserve_bench_measure_route=false \
    -e "pairserve_bench_report_dir=$dir/bench" -e pairserve_bench_label=queue-weights
  # The controller's lab settings: look every 2 s, at most one route update per 4 s, the default dead band, and
  # a 5 s horizon: the tiny model's requests take seconds, where the seed's take minutes (30 s there).
  cat >"$dir/controller-base.yml" <<'YAML'
pairserve_controller_enabled: true
pairserve_controller_mode: weights
pairserve_controller_interval: 2
pairserve_controller_hold: 4
pairserve_controller_min_change: 5
pairserve_controller_horizon: 5
pairserve_controller_prior_prompt_tokens: 400
pairserve_controller_prior_generation_tokens: 96
YAML
  results=$(find "$dir/bench" -path '*-baseline/results.json' 2>/dev/null | sort | tail -n 1 || true)
  if [ -n "$results" ] && python -m lab.queue_weights speeds --bench "$results" \
    --base "$dir/controller-base.yml" --out "$dir/controller.yml"; then
    echo "=== lab weights: the controller on (weights mode, the measured speeds)"
    # The journal keeps earlier runs: this run's lines only, so the suite cannot pass on an older run's log.
    since=$(podman exec pairserve-lab-node-a date "+%Y-%m-%d %H:%M:%S")
    play "$dir/enable.log" "$dir/enable.rc" playbooks/controller.yml -e "@$dir/controller.yml"
    python -m lab.queue_weights demo --vars "$dir/controller.yml" --dir "$dir" --result "$dir/result.json" ||
      echo $? >"$dir/demo.rc"
    podman exec pairserve-lab-node-a journalctl -u pairserve-controller --since "$since" --no-pager -o short-iso \
      >"$dir/controller.journal" 2>&1 || true
    echo "=== lab weights: the controller off again (the route gets its static weights back)"
    play "$dir/disable.log" "$dir/disable.rc" playbooks/controller.yml -e "@$dir/controller.yml" \
      -e pairserve_controller_enabled=false
  else
    echo "lab weights: no speeds from the bench run (see $dir/bench.log)" >&2
    echo 1 >"$dir/demo.rc"
  fi
  cpu_quota "$container" -1
  echo "=== lab weights took $((SECONDS - start)) s"
}

cpu_quota() {  # cpu_quota <container> <microseconds per 100 ms, -1: none>: the container's CFS quota (cgroup v1,
  # as on this kind of machine; `podman update --cpus` sets it but cannot lift it again)
  local id file
  id=$(lab_podman inspect --format '{{.Id}}' "$1" 2>/dev/null || lab_docker inspect --format '{{.Id}}' "$1")
  file=$(find /sys/fs/cgroup/cpu/ -path "*$id*" -name cpu.cfs_quota_us 2>/dev/null | head -n 1 || true)
  [ -n "$file" ] || { echo "lab: no cgroup v1 CPU quota file for $1" >&2; return 1; }
  echo "$2" >"$file"
}

replica_container() {  # replica_container <model>: the running container GPUStack's worker started for it (in
  # whichever of the lab's engines its node deploys through)
  local name
  name=$({ lab_podman ps --format '{{.Names}}'; lab_docker ps --format '{{.Names}}' 2>/dev/null; } |
    grep -F -- "$1" | grep -v -e pause -e health | head -n 1)
  [ -n "$name" ] || { echo "lab: no running container of $1" >&2; return 1; }
  echo "$name"
}

day2_arms() {
  local dir=$state/bench_arms start=$SECONDS
  mkdir -p "$dir"
  rm -rf "$dir/reports"
  # One A/B arm on node-b, booted through GPUStack: --max-num-seqs 2 instead of the lab profile's 8 (vLLM 0.27.1's
  # CPU build parses it; the concurrency-4 run then queues half its streams, so the arm should regress throughput).
  # A user writes the arms in group_vars; the lab passes them as an extra-vars file.
  cat >"$dir/arms.yml" <<YAML
pairserve_bench_label: arms
pairserve_bench_report_dir: $dir/reports
pairserve_bench_arm_boot_timeout: 600
pairserve_bench_arms:
  - name: seqs-2
    node: node-b
    replica: {max_num_seqs: 2}
YAML
  arms_snapshot() {  # arms_snapshot <file>: GPUStack's models, instances and the route's weights, for the suite
    python - "$1" <<'PY'
import json, sys
from lab.api import items, read_keys, route_weights
key = read_keys()["management"]
snap = {"models": {m["name"]: m for m in items("/v2/models", key)},
        "instances": {i["model_name"]: i for i in items("/v2/model-instances", key)},
        "weights": route_weights(key)}
open(sys.argv[1], "w").write(json.dumps(snap, indent=1))
PY
  }
  arms_snapshot "$dir/before.json"
  start_load "$dir"
  echo "=== lab arms: playbooks/bench.yml --check (says what it would boot, changes nothing)"
  play "$dir/check.log" "$dir/check.rc" playbooks/bench.yml --check -e "@$dir/arms.yml"
  arms_snapshot "$dir/after-check.json"
  echo "=== lab arms: playbooks/bench.yml with arm seqs-2 on node-b (drain, boot, request, measure, put back)"
  play "$dir/bench.log" "$dir/bench.rc" playbooks/bench.yml -e "@$dir/arms.yml"
  echo "=== lab arms: the route under load while the plays ran"
  stop_load "$dir"
  arms_snapshot "$dir/after.json"
  echo "=== lab arms took $((SECONDS - start)) s"
}

lab_podman() { CONTAINERS_CONF=$state/containers.conf podman "$@"; }

start_podman_service() {
  # The workers start replicas through this service. The runc wrapper only lifts the negative OOM score
  # gpustack-runtime asks for, which this sandbox's root may not set (no CAP_SYS_RESOURCE).
  cp "$CONTAINERS_CONF" "$state/containers.conf"
  sed -i 's/^runtime = "runc"/runtime = "runc-lab"/' "$state/containers.conf"
  # A launcher with an absolute interpreter: podman runs the runtime with its own PATH.
  printf '#!/bin/sh\nexec /usr/bin/python3 %s "$@"\n' "$root/scripts/lib/runc-no-negative-oom" >"$state/runc-lab"
  chmod 0755 "$state/runc-lab"
  printf '[engine.runtimes]\nrunc-lab = ["%s"]\n' "$state/runc-lab" >>"$state/containers.conf"
  pairserve_lab_registries_conf "$state/registries.conf"
  mkdir -p "$run_dir"
  if [ -f "$state/podman.pid" ] && kill -0 "$(cat "$state/podman.pid")" 2>/dev/null; then return 0; fi
  CONTAINERS_CONF=$state/containers.conf CONTAINERS_REGISTRIES_CONF=$state/registries.conf \
    setsid podman system service --time=0 "unix://$run_dir/podman.sock" \
    >"$state/podman-service.log" 2>&1 &
  echo $! >"$state/podman.pid"
  for _ in $(seq 50); do [ -S "$run_dir/podman.sock" ] && return 0; sleep 0.2; done
  echo "podman service did not create $run_dir/podman.sock; see $state/podman-service.log" >&2
  return 1
}

start_docker_engine() {
  # GPUStack's Docker road (the runtime's first choice, what most GPU hosts run): a Docker engine on the host whose
  # socket the nodes see at $run_dir/docker.sock; node-b's inventory names it (pairserve_runner_runtime: docker).
  # Its default runtime is `nvidia`, as nvidia-ctk configures it on a real node: here the lab's stand-in
  # (lab/nvidia-container-runtime), which reads NVIDIA_VISIBLE_DEVICES from each container's bundle and adds the
  # recorded GPUs named there (node-b's recording, as the GPU stand-ins phase writes it), then runs the lab's runc
  # wrapper (this sandbox's root cannot lower an OOM score or grant CAP_SYS_RESOURCE). Images live in .cache like
  # the registry's; no bridge network (every lab container runs on the host's network or none).
  local docker_data=$root/.cache/lab-docker
  mkdir -p "$run_dir" "$docker_data"
  cat >"$state/runc-lab" <<LAUNCHER
#!/bin/sh
exec /usr/bin/python3 $root/scripts/lib/runc-no-negative-oom "\$@"
LAUNCHER
  cat >"$state/nvidia-runtime" <<LAUNCHER
#!/bin/sh
PAIRSERVE_LAB_NODE=node-b PAIRSERVE_LAB_GPUS=$state/nvml-hook/hosts/node-b.json \\
PAIRSERVE_LAB_MOUNTS=$state/nvml-hook/nvidia-smi:/usr/bin/nvidia-smi,$state/nvml-hook/cuda-uuids:/usr/local/bin/pairserve-lab-cuda-uuids \\
PAIRSERVE_NEXT_RUNTIME=$state/runc-lab exec /usr/bin/python3 $root/lab/nvidia-container-runtime "\$@"
LAUNCHER
  chmod 0755 "$state/runc-lab" "$state/nvidia-runtime"
  cat >"$state/docker-daemon.json" <<CONF
{"default-runtime": "nvidia", "runtimes": {"nvidia": {"path": "$state/nvidia-runtime"}},
 "iptables": false, "ip-forward": false, "ip-masq": false, "bridge": "none", "log-level": "warn"}
CONF
  if [ -f "$state/dockerd.pid" ] && kill -0 "$(cat "$state/dockerd.pid")" 2>/dev/null; then return 0; fi
  setsid dockerd --config-file "$state/docker-daemon.json" --data-root "$docker_data" --exec-root "$run_dir/docker" \
    --pidfile "$state/dockerd.pid.own" -H "unix://$run_dir/docker.sock" >"$state/dockerd.log" 2>&1 &
  echo $! >"$state/dockerd.pid"
  for _ in $(seq 100); do
    docker -H "unix://$run_dir/docker.sock" version >/dev/null 2>&1 && return 0
    kill -0 "$(cat "$state/dockerd.pid")" 2>/dev/null || break
    sleep 0.2
  done
  echo "the lab's Docker engine did not answer on $run_dir/docker.sock; see $state/dockerd.log" >&2
  return 1
}

start_hub() {
  if [ -f "$state/hub.pid" ] && kill -0 "$(cat "$state/hub.pid")" 2>/dev/null && [ -f "$state/hub.json" ] &&
    [ -f "$hub_vars" ]; then return 0; fi
  stop_pid "$state/hub.pid"
  rm -f "$state/hub.json"
  setsid python -m lab.hub --repo pairserve/tiny-qwen3 --model-dir .cache/tiny-model/qwen3-tiny \
    --state "$state/hub.json" >"$state/hub.log" 2>&1 &
  echo $! >"$state/hub.pid"
  for _ in $(seq 100); do [ -f "$state/hub.json" ] && break; sleep 0.2; done
  [ -f "$state/hub.json" ] || { echo "lab hub did not start; see $state/hub.log" >&2; return 1; }
  python - "$state/hub.json" "$hub_vars" "$root" <<'PY'
import json, sys
hub, out, root = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
with open(out + ".tmp", "w") as f:
    f.write("# Written by scripts/lab.sh for this lab run (git-ignored, removed by `scripts/lab.sh down`):\n"
            "# the lab hub's endpoint and the commit sha it serves the tiny test model at.\n")
    json.dump({"pairserve_hf_endpoint": hub["endpoint"], "pairserve_checkpoint_repo": hub["repo"],
               "pairserve_checkpoint_revision": hub["revision"],
               "pairserve_verify_expectations_file": root + "/.cache/tiny-model/qwen3-tiny/verification.json"}, f, indent=1)
    f.write("\n")
import os
os.replace(out + ".tmp", out)
PY
}

# Ansible reaches the nodes over SSH with pipelining and a persistent control connection, as real nodes. Each
# node's sshd listens on 127.0.0.1 at its own port (the nodes share the host's network), with a host key made
# here and recorded in the lab's known_hosts, so host key checking stays on.
declare -A ssh_port=([node-a]=2222 [node-b]=2223)
ssh_dir=$state/ssh

prepare_ssh() {  # the client key, each node's host key and sshd_config, known_hosts; kept while .lab/ exists
  local node dir
  mkdir -p "$ssh_dir"
  chmod 0700 "$ssh_dir"
  [ -f "$ssh_dir/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C pairserve-lab -f "$ssh_dir/id_ed25519"
  : >"$ssh_dir/known_hosts.tmp"
  for node in "${nodes[@]}"; do
    dir=$ssh_dir/$node
    mkdir -p "$dir"
    [ -f "$dir/ssh_host_ed25519_key" ] || ssh-keygen -q -t ed25519 -N '' -C "$node" -f "$dir/ssh_host_ed25519_key"
    cp "$ssh_dir/id_ed25519.pub" "$dir/authorized_keys"
    cat >"$dir/sshd_config" <<CONF
# Written by scripts/lab.sh: sshd of lab node $node, on loopback only.
Port ${ssh_port[$node]}
ListenAddress 127.0.0.1
HostKey /etc/pairserve-lab/ssh_host_ed25519_key
AuthorizedKeysFile /etc/pairserve-lab/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
Subsystem sftp /usr/lib/openssh/sftp-server
CONF
    echo "[127.0.0.1]:${ssh_port[$node]} $(cut -d' ' -f1,2 "$dir/ssh_host_ed25519_key.pub")" >>"$ssh_dir/known_hosts.tmp"
  done
  mv "$ssh_dir/known_hosts.tmp" "$ssh_dir/known_hosts"
}

wait_for_ssh() {  # each node answers over SSH with the lab's key and known host key
  local node
  for node in "${nodes[@]}"; do
    for _ in $(seq 100); do
      ssh -F /dev/null -o BatchMode=yes -o ConnectTimeout=2 -o StrictHostKeyChecking=yes \
        -o UserKnownHostsFile="$ssh_dir/known_hosts" -i "$ssh_dir/id_ed25519" -p "${ssh_port[$node]}" \
        root@127.0.0.1 true 2>/dev/null && continue 2
      sleep 0.3
    done
    echo "lab: $node does not answer over SSH on 127.0.0.1:${ssh_port[$node]}" >&2
    podman exec "pairserve-lab-$node" journalctl -u pairserve-lab-sshd --no-pager -n 20 >&2 || true
    return 1
  done
}

stop_ssh_masters() {  # the persistent connections Ansible left (ControlPersist), each by its socket
  local sock
  for sock in "$ssh_dir"/cp/*; do
    [ -S "$sock" ] && ssh -F /dev/null -o ControlPath="$sock" -O exit lab-node 2>/dev/null || true
  done
}

# The GPUs' edge, from the recorded hosts (docs/lab.md): the NVML replay for the workers' own GPU detection
# (sitecustomize.py + the collection's nvml_replay.py, mounted at /opt/pairserve-lab/nvml and put on the worker's
# PYTHONPATH by the lab inventory), and a CDI spec per node naming its recorded GPUs by UUID, which podman
# resolves when gpustack-runtime asks for nvidia.com/gpu=<UUID> (on a real node the NVIDIA toolkit writes it).
cdi_dir=/var/run/cdi

recording_of() {  # recording_of <node>: the recorded NVML host its host_vars name (relative to the repository)
  sed -n 's#^pairserve_lab_nvml_recording: "\(.*\)"$#\1#p' "inventory/lab/host_vars/$1.yml"
}

gpu_stand_in() {  # gpu_stand_in <node> <recording>: the NVML answers the node replays, and its CDI spec
  mkdir -p "$state/nvml-hook/hosts"
  install -m 0644 "$2" "$state/nvml-hook/hosts/.$1.json.tmp"
  mv "$state/nvml-hook/hosts/.$1.json.tmp" "$state/nvml-hook/hosts/$1.json"
  python3 -m lab.cdi --nvidia-smi "$state/nvml-hook/nvidia-smi" --cuda-uuids "$state/nvml-hook/cuda-uuids" \
    "$2" "$1" "$cdi_dir/pairserve-lab-$1.json"
}

gpu_stand_ins() {
  local node recording
  mkdir -p "$state/nvml-hook"
  cp scripts/lib/nvml_sitecustomize.py "$state/nvml-hook/sitecustomize.py"
  cp plugins/module_utils/nvml_replay.py "$state/nvml-hook/nvml_replay.py"
  install -m 0755 lab/nvidia-smi "$state/nvml-hook/nvidia-smi"  # what each CDI spec mounts at /usr/bin/nvidia-smi
  install -m 0755 lab/cuda-uuids "$state/nvml-hook/cuda-uuids"  # and in the place of CUDA's enumeration
  for node in "${nodes[@]}"; do
    recording=$(recording_of "$node")
    [ -n "$recording" ] || { echo "lab: no pairserve_lab_nvml_recording in inventory/lab/host_vars/$node.yml" >&2; return 1; }
    gpu_stand_in "$node" "$recording"
  done
}

worker_tools() {  # worker_tools <GPUStack version>: the stub tools archive the lab inventory names for that release
  .venv/bin/python -m lab.tools_archive "$1" "$state/gpustack-tools/gpustack-tools-$1.tar.gz"
}

create_node() {  # create_node <node>: its container started again when it exists, else a fresh one (a bare node:
  # the OS image, SSH with the lab's keys, its data directory, the GPUs' stand-ins), as the restore drill rebuilds node-a
  local node=$1
  mkdir -p "$data_dir/$node"
  if podman container exists "pairserve-lab-$node"; then
    podman start "pairserve-lab-$node" >/dev/null
    return
  fi
  podman run -d --name "pairserve-lab-$node" --hostname "$node" --label org.pairserve.lab=true \
    --network host --privileged --systemd always \
    -v /sys/fs/cgroup/unified:/sys/fs/cgroup/unified:rw \
    -v "$root/.cache/wheelhouse:/srv/pairserve/wheelhouse:ro" \
    -v "$run_dir:$run_dir" -v "$data_dir/$node:$data_dir/$node" \
    -v "$ssh_dir/$node:/etc/pairserve-lab:ro" -v "$state/nvml-hook:/opt/pairserve-lab/nvml:ro" \
    "$PAIRSERVE_NODE_IMAGE" /sbin/init >/dev/null
  echo "lab: created pairserve-lab-$node"
}

start_nodes() {
  local node
  prepare_ssh
  for node in "${nodes[@]}"; do create_node "$node" || return; done
  wait_for_ssh
  for node in "${nodes[@]}"; do node_runtime_units "$node" || return; done
}

# node_runtime_units <node>: the unit of the node's own runtime socket, as the distribution's package ships it
# (podman: podman.socket on /run/podman/podman.sock; Docker: docker.service with docker.socket on /run/docker.sock),
# installed but not enabled: the product enables it, orders the worker after it and pings it from the node. Here the
# service behind the socket is systemd-socket-proxyd forwarding to the engine the lab runs on the host, so the node
# reaches the real engine at its real default path. Which runtime: the node's pairserve_runner_runtime.
node_runtime_units() {
  local node=$1 runtime unit=/usr/lib/systemd/system
  runtime=$(sed -n 's/^pairserve_runner_runtime: *//p' "inventory/lab/host_vars/$node.yml" inventory/lab/group_vars/all/serving.yml | head -1)
  case $runtime in
    podman)
      podman exec -i "pairserve-lab-$node" sh -c "cat >$unit/podman.socket.tmp && mv $unit/podman.socket.tmp $unit/podman.socket" <<UNIT
# pairserve lab (scripts/lab.sh): the node's podman API socket, as Debian's podman package ships it.
[Unit]
Description=Podman API Socket (pairserve lab stand-in: the host's podman service behind it)

[Socket]
ListenStream=%t/podman/podman.sock
SocketMode=0660

[Install]
WantedBy=sockets.target
UNIT
      podman exec -i "pairserve-lab-$node" sh -c "cat >$unit/podman.service.tmp && mv $unit/podman.service.tmp $unit/podman.service" <<UNIT
# pairserve lab (scripts/lab.sh): forwards the node's podman socket to the podman service on the lab's host.
[Unit]
Description=Podman API Service (pairserve lab stand-in)
Requires=podman.socket
After=podman.socket

[Service]
ExecStart=/lib/systemd/systemd-socket-proxyd $run_dir/podman.sock
UNIT
      ;;
    docker)
      podman exec -i "pairserve-lab-$node" sh -c "cat >$unit/docker.socket.tmp && mv $unit/docker.socket.tmp $unit/docker.socket" <<UNIT
# pairserve lab (scripts/lab.sh): the node's Docker API socket, as Debian's docker.io package ships it.
[Unit]
Description=Docker Socket for the API (pairserve lab stand-in)

[Socket]
ListenStream=/run/docker.sock
SocketMode=0660

[Install]
WantedBy=sockets.target
UNIT
      podman exec -i "pairserve-lab-$node" sh -c "cat >$unit/docker.service.tmp && mv $unit/docker.service.tmp $unit/docker.service" <<UNIT
# pairserve lab (scripts/lab.sh): forwards the node's Docker socket to the lab's Docker engine on the host.
[Unit]
Description=Docker Application Container Engine (pairserve lab stand-in)
Requires=docker.socket
After=network-online.target docker.socket
Wants=network-online.target

[Service]
ExecStart=/lib/systemd/systemd-socket-proxyd $run_dir/docker.sock

[Install]
WantedBy=multi-user.target
UNIT
      ;;
    *) echo "lab: $node: no pairserve_runner_runtime in its inventory" >&2; return 1 ;;
  esac
  podman exec "pairserve-lab-$node" systemctl daemon-reload
}

converge() {  # converge <log> [ansible-playbook args...]
  local log=$1
  shift
  ansible-playbook -i inventory/lab/hosts.yml site.yml "$@" | tee "$log"
}

check_converge() {  # check mode at -vvv into the log (the test suite looks for secrets in it); the recap on screen
  local log=$1 rc=0
  ansible-playbook -vvv --check -i inventory/lab/hosts.yml site.yml >"$log" 2>&1 || rc=$?
  sed -n '/^PLAY RECAP/,$p' "$log"
  return "$rc"
}

fresh_check() {  # site.yml --check on nodes nothing was installed on yet: rc 0, and the changes a real run makes shown
  local log=$1 rc=0
  with_results "$log" ansible-playbook --check -i inventory/lab/hosts.yml site.yml >"$log" 2>&1 || rc=$?
  sed -n '/^PLAY RECAP/,$p' "$log"
  if [ "$rc" -ne 0 ] || [ "$(recap_changed "$log")" -eq 0 ]; then
    echo "lab: check mode on fresh nodes: rc=$rc, changed=$(recap_changed "$log") (expected rc 0 and changes); see $log" >&2
    return 1
  fi
}

recap_changed() { awk '/PLAY RECAP/{r=1} r && /changed=/{sub(/.*changed=/,""); s+=$1} END{print s+0}' "$1"; }

build_runtime_stand_ins() {
  # gpustack-runtime's pause container and its autoheal container are stood in for by the node image running
  # `sleep infinity` (the lab has no autoheal; GPUStack's restart_on_error stays). They reach the nodes as on a
  # real node: pushed to the lab registry, pinned by digest (push_runner_image), pulled by the runner_image role.
  local tag ctx
  for tag in pause health; do
    podman image exists "localhost/pairserve-runtime:$tag" &&
      [ "$(pairserve_image_recipe "localhost/pairserve-runtime:$tag")" = "$PAIRSERVE_NODE_IMAGE_RECIPE" ] && continue
    ctx=$(mktemp -d)
    # SIGKILL: `sleep` as PID 1 ignores SIGTERM, and a stop would wait out its timeout.
    printf 'FROM %s\nLABEL org.pairserve.lab=true org.pairserve.stand-in=gpustack/runtime:%s\nSTOPSIGNAL SIGKILL\nCMD ["sleep", "infinity"]\n' \
      "$PAIRSERVE_NODE_IMAGE" "$tag" >"$ctx/Containerfile"
    podman build --quiet --network none -t "localhost/pairserve-runtime:$tag" "$ctx" >/dev/null
    rm -rf "$ctx"
    echo "LAB: localhost/pairserve-runtime:$tag stands in for gpustack/runtime:$tag (sleep infinity)"
  done
}

push_runner_image() {  # the runner, pause and health images into the lab registry; their digests become the lab's pins
  local want="$PAIRSERVE_LAB_REGISTRY/lab/vllm-cpu:{{ pairserve_vllm_version }}" pinned tag
  pinned=$(pairserve_pin "$lab_pins" pairserve_runner_image) || return
  [ "$pinned" = "$want" ] || { echo "lab: $lab_pins pins pairserve_runner_image '$pinned'; the lab pushes '$want'" >&2; return 1; }
  for tag in pause health; do
    pinned=$(pairserve_pin "$lab_pins" "pairserve_runtime_${tag}_image") || return
    [ "$pinned" = "$PAIRSERVE_LAB_REGISTRY/lab/runtime:$tag" ] ||
      { echo "lab: $lab_pins pins pairserve_runtime_${tag}_image '$pinned'; the lab pushes '$PAIRSERVE_LAB_REGISTRY/lab/runtime:$tag'" >&2; return 1; }
  done
  pairserve_lab_registry_start "$state"
  CONTAINERS_REGISTRIES_CONF=$state/registries.conf \
    pairserve_lab_registry_push "$image" "lab/vllm-cpu:$vllm_version" "$state/runner.digest"
  for tag in pause health; do
    CONTAINERS_REGISTRIES_CONF=$state/registries.conf \
      pairserve_lab_registry_push "localhost/pairserve-runtime:$tag" "lab/runtime:$tag" "$state/runtime-$tag.digest"
  done
  cat >"$digest_vars" <<VARS
---
# Written by scripts/lab.sh (git-ignored, removed by \`scripts/lab.sh down\`): the digests the lab registry gave
# the runner image $image when it was pushed as $PAIRSERVE_LAB_REGISTRY/lab/vllm-cpu:$vllm_version (pins.yml),
# and the pause and health stand-ins pushed as $PAIRSERVE_LAB_REGISTRY/lab/runtime:pause and :health.
pairserve_runner_image_digest: "$(cat "$state/runner.digest")"
pairserve_runtime_pause_image_digest: "$(cat "$state/runtime-pause.digest")"
pairserve_runtime_health_image_digest: "$(cat "$state/runtime-health.digest")"
VARS
}

disk_report() {  # disk_report <when>: free space where the nodes keep their data, and what the lab's stores hold
  local free
  free=$(df -B1M --output=avail /var/lib | tail -n 1 | tr -d ' ')
  # -x: not into the running containers' overlay mounts under both stores (they would be counted twice)
  echo "lab: disk $1: $((free / 1024)) GiB free under /var/lib (the nodes' checkpoint caches); build caches $(du -shx .cache 2>/dev/null | cut -f1), podman $(du -shx /var/lib/containers/storage 2>/dev/null | cut -f1)"
}

# In `make test` the lab tier runs after the integration tier, the last user of the CPU vLLM venvs, and once the
# replica image is built the lab needs them no more. On a disk with less free than the lab still takes
# (PAIRSERVE_LAB_DISK_NEED_GIB, 16: the Docker engine's copy of the replica image, the nodes' installs, the replicas;
# measured 9-11 GiB), they are removed, saying so: `make caches` builds them again (about 7 minutes).
free_disk_for_lab() {
  local need=${PAIRSERVE_LAB_DISK_NEED_GIB:-16} before after
  before=$(($(df -B1M --output=avail /var/lib | tail -n 1 | tr -d ' ') / 1024))
  [ "$before" -lt "$need" ] && [ -d .cache/vllm-cpu ] || return 0
  rm -rf .cache/vllm-cpu
  after=$(($(df -B1M --output=avail /var/lib | tail -n 1 | tr -d ' ') / 1024))
  echo "lab: $before GiB free under /var/lib and the lab takes about $need: removed the CPU vLLM venvs (.cache/vllm-cpu, the integration tier's; the replica image is built), $after GiB free now"
}

built=0
start() {  # everything before the first converge; molecule default's create step runs this too
  mkdir -p "$state"
  # Built once per invocation: `test` runs start twice (before the fresh check mode and in up), and the caches may
  # have been freed in between (free_disk_for_lab).
  if [ "$built" -eq 0 ]; then
    # Only what the lab serves (the wheelhouse, the node image, the tiny model, the replica image): the integration
    # tier's venvs are not the lab's, and `make test` builds them itself.
    phase caches bash scripts/build_caches.sh lab || return
    built=1
  fi
  phase "runtime stand-ins" build_runtime_stand_ins || return
  phase "host services" bash -c "$(declare -f stop_pid start_podman_service start_docker_engine start_hub pairserve_lab_registries_conf); PAIRSERVE_LAB_REGISTRY=$PAIRSERVE_LAB_REGISTRY root=$root state=$state run_dir=$run_dir hub_vars=$hub_vars; start_podman_service && start_docker_engine && start_hub" || return
  phase "registry" push_runner_image || return
  phase "GPU stand-ins" gpu_stand_ins || return
  phase "worker tools" worker_tools "$(pairserve_pin "$lab_pins" pairserve_gpustack_version)" || return
  # The CA and certificate GPUStack serves HTTPS with (inventory/lab/group_vars/all/tls.yml names them).
  phase "lab CA" python -m lab.tls "$state/tls" || return
  phase nodes start_nodes || return
  disk_report "before the first converge"
  # Before anything is installed: what uninstall.yml is held to (scripts/lab.sh test, "uninstall").
  [ -e "$state/converge-1.log" ] || snapshot_fresh_nodes
}

up() {  # the main job: the lab serving through the route, verified; ends by printing the endpoint
  local start=$SECONDS
  start || return
  phase "first converge" converge "$state/converge-1.log" || { local rc=$?; disk_report "after the failed converge"; return "$rc"; }
  lab_up_took=$((SECONDS - start))
  disk_report "after the first converge"
  local k slowest="first converge" phases=(caches "runtime stand-ins" "host services" registry
    "GPU stand-ins" "worker tools" nodes "first converge")
  for k in "${phases[@]}"; do [ "${took[$k]}" -le "${took[$slowest]}" ] || slowest=$k; done
  cat <<REPORT

=== lab figures (make lab-test adds the idempotence proof: a second converge and a check-mode run)
  total: $lab_up_took s to the endpoint: $(verdict "$lab_up_took" -le "$lab_up_target") (target <= $lab_up_target s for a fresh "make lab" with no cache built; this run built caches in ${took[caches]} s; slowest phase: $slowest, ${took[$slowest]} s)
$(for k in "${phases[@]}"; do printf '  %-16s %5s s\n' "$k" "${took[$k]}"; done)

=== the endpoint (GPUStack on node-a, on this machine's network, HTTPS with the lab's CA)
  route: qwen  (replicas qwen-node-a 58 %, qwen-node-b 42 %, GPUStack's vLLM backend on the CPU build of vLLM $vllm_version, tiny test model)
  key:   the inference API key is root-only on node-a: KEY=\$(podman exec pairserve-lab-node-a cat /etc/pairserve/secrets/inference-api-key)
  curl -s --cacert $state/tls/ca.crt https://127.0.0.1:30443/v1/chat/completions -H "Authorization: Bearer \$KEY" \\
       -H 'Content-Type: application/json' -d '{"model": "qwen", "temperature": 0,
       "messages": [{"role": "user", "content": "Is the pair ready?"}]}'
REPORT
}

idempotence() {  # make lab-test: the converged lab again (changed=0, within 25 % of the first), then --check
  # The offline road (first-install.md, "Offline images"): the three pinned images reached the nodes from the lab
  # registry, the stand-in for a LAN mirror. With it stopped, the converged nodes converge again and check mode
  # passes: once the images are on a node, nothing in site.yml (pull, checks, GPU probe) needs a registry.
  stop_pid "$state/registry.pid"
  ! curl -fsS --max-time 2 "http://$PAIRSERVE_LAB_REGISTRY/v2/" >/dev/null 2>&1 || {
    echo "lab: the registry still answers on $PAIRSERVE_LAB_REGISTRY after it was stopped" >&2
    return 1
  }
  phase "second converge" converge "$state/converge-2.log"
  phase "check mode" check_converge "$state/converge-check.log"
  pairserve_lab_registry_start "$state"  # the suite's image tests ask it for what it does not have
  # One step again by its tag, as a user re-runs the tokenizer patch: only it and what it needs run.
  phase "tags checkpoint" converge "$state/converge-tags.log" --tags checkpoint
  local second check share
  second=$(recap_changed "$state/converge-2.log")
  check=$(recap_changed "$state/converge-check.log")
  share=$((100 * took["second converge"] / (took["first converge"] > 0 ? took["first converge"] : 1)))
  cat <<REPORT

=== lab figures: idempotence
  first converge   ${took["first converge"]} s
  second converge  ${took["second converge"]} s: changed=$second, $share% of the first converge's time: $(verdict "$share" -le 25) (target <= 25 %)
  check mode       ${took["check mode"]} s: changed=$check (at -vvv: $state/converge-check.log)
  both with the image registry stopped (the offline road: the pinned images were already on the nodes)
  --tags checkpoint ${took["tags checkpoint"]} s: changed=$(recap_changed "$state/converge-tags.log") ($state/converge-tags.log)
REPORT
  [ "$second" -eq 0 ] && [ "$check" -eq 0 ]
}

down() {
  local node
  for node in "${nodes[@]}"; do
    podman rm -f -t 10 "pairserve-lab-$node" >/dev/null 2>&1 || true
    # The node's firewall table lives in the host's ruleset (the nodes share its network): ours, by its name.
    nft delete table inet "pairserve_${node//-/_}" 2>/dev/null || true
  done
  # node-a's table that keeps GPUStack's plain port for the node itself while HTTPS is on.
  nft delete table inet pairserve_server 2>/dev/null || true
  # The faults scenario's cut of node-b's SSH port, if a killed run left it.
  nft delete table inet pairserve_lab_fault 2>/dev/null || true
  # The outsider of molecule/default/tests/test_firewall.py, if a killed run left it.
  ip link del psl-out-h 2>/dev/null || true
  ip netns del pairserve-lab-outsider 2>/dev/null || true
  # Replica containers the workers started through the service: gpustack-runtime labels every container
  # of a workload (the replica and its pause container) <prefix>/workload; each lab worker has its own
  # prefix, <node>.runtime.gpustack.ai (inventory/lab/group_vars/all/control_plane.yml).
  if [ -f "$state/containers.conf" ]; then
    workload_containers podman | xargs -r env CONTAINERS_CONF="$state/containers.conf" podman rm -f --depend -t 5 >/dev/null || true
  fi
  workload_containers docker | xargs -r docker -H "unix://$run_dir/docker.sock" rm -f >/dev/null 2>&1 || true
  stop_ssh_masters
  stop_pid "$state/hub.pid"
  stop_pid "$state/podman.pid"
  stop_pid "$state/dockerd.pid"
  # The Docker engine leaves its bind of the host's network namespace mounted under its exec root.
  awk -v dir="$run_dir/" 'index($2, dir) == 1 {print $2}' /proc/mounts | sort -r | xargs -r -n 1 umount -l 2>/dev/null || true
  stop_pid "$state/registry.pid"
  rm -rf "$run_dir" "$data_dir" "$state" "$hub_vars" "$upgrade_pins" "$digest_vars" "$cdi_dir"/pairserve-lab-*.json
  if [ "${1:-}" = --images ]; then
    podman rmi -f "$image" "$PAIRSERVE_NODE_IMAGE" localhost/pairserve-runtime:pause localhost/pairserve-runtime:health >/dev/null 2>&1 || true
    rm -rf "$PAIRSERVE_LAB_REGISTRY_DIR"
  fi
  echo "lab: down (cached images kept unless --images: $image, $PAIRSERVE_NODE_IMAGE)"
}

workload_containers() {  # [podman|docker]: ids of the containers gpustack-runtime started, whatever the prefix
  if [ "${1:-podman}" = podman ] || [ -z "${1:-}" ]; then
    podman ps -a --format '{{.ID}} {{.Labels}}' 2>/dev/null | awk '/runtime\.gpustack\.ai\/workload:/{print $1}'
  fi
  if [ "${1:-docker}" = docker ] && [ -S "$run_dir/docker.sock" ]; then
    lab_docker ps -a --format '{{.ID}} {{.Labels}}' 2>/dev/null | awk '/runtime\.gpustack\.ai\/workload=/{print $1}'
  fi
}

lab_docker() { docker -H "unix://$run_dir/docker.sock" "$@"; }

# -- uninstall on the lab: what site.yml added is gone again, except what the uninstall keeps -----------

# What a node holds that an install can add or take away, one line per item, sorted so two snapshots diff:
#   path      every file outside the kernel's, runtime and log trees, Ansible's own remote tmp and async results,
#             and the trees dpkg and the packages' maintainer scripts own (/usr but /usr/local, dpkg's and apt's
#             state, /etc/alternatives, the SysV links, the certificate store): the packages are their own lines;
#             a file a package ships (its conffiles in /etc too) is "package-file"
#   data      the lab data directory the host shares with the node (checkpoint cache)
#   user, group, package (distribution packages)
#   enabled, running   services; a unit whose file a package ships is "package-enabled", "package-running",
#             and so is a .wants/ link to one ("package-link"): only the collection's own units count as its own
# What the OS's own daily timers write is left out, as its logs are: at midnight dpkg-db-backup.timer and
# logrotate.timer write /var/backups/{dpkg,alternatives,apt}.* and /var/lib/logrotate, and a run across midnight saw
# them "left behind" by uninstall.yml.
node_snapshot() {  # node_snapshot <node>
  local node=$1
  podman exec "pairserve-lab-$node" sh -c '
    find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp -o -path /var/tmp \
      -o -path /var/log -o -path /var/cache -o -path /var/lib/systemd -o -path /root/.ansible \
      -o -path /var/lib/logrotate -o -path "/var/backups/dpkg.*" -o -path "/var/backups/alternatives.tar.*" \
      -o -path "/var/backups/apt.*" \
      -o -path /root/.ansible_async -o -path /var/lib/dpkg -o -path /var/lib/apt -o -path /var/lib/ucf \
      -o -path /etc/alternatives -o -path "/etc/rc?.d" -o -path /etc/ssl/certs \
      -o \( -path "/usr/*" -a ! -path /usr/local -a ! -path "/usr/local/*" \) \) -prune -o -print |
    awk "FILENAME != \"-\" { own[\$0] = 1; next } { print ((\$0 in own) ? \"package-file \" : \"path \") \$0 }" \
      /var/lib/dpkg/info/*.list - |
    while read -r kind p; do
      case $kind:$p in
        path:/etc/systemd/*.wants/*)
          case $(readlink "$p") in /lib/systemd/*|/usr/lib/systemd/*) echo "package-link $p"; continue ;; esac ;;
      esac
      echo "$kind $p"
    done
    cut -d: -f1 /etc/passwd | sed "s/^/user /"
    cut -d: -f1 /etc/group | sed "s/^/group /"
    dpkg-query -W -f "package \${Package}\n"
    unit_lines() {  # unit_lines <kind>: "<kind> <unit>", or "package-<kind> <unit>" for a unit a package ships
      while read -r u; do
        case $(systemctl show -P FragmentPath "$u" 2>/dev/null) in
          /lib/systemd/*|/usr/lib/systemd/*) echo "package-$1 $u" ;;
          *) echo "$1 $u" ;;
        esac
      done
    }
    systemctl list-unit-files --type=service --state=enabled --no-legend --plain | awk "{print \$1}" | unit_lines enabled
    systemctl list-units --type=service --state=running --no-legend --plain | awk "{print \$1}" | unit_lines running'
  [ -d "$data_dir/$node" ] && find "$data_dir/$node" | sed 's/^/data /'
  true
}

# Kept by the uninstall unless asked (docs/first-install.md, "Undo"): the checkpoint cache on each GPU node,
# GPUStack's database in PostgreSQL and the dumps on node A. Kept always: the distribution packages the roles
# installed, with what their maintainer scripts made (PostgreSQL's cluster and configuration, its user, the
# snakeoil certificate of ssl-cert, tzdata's and locales' files, fontconfig's, lighttpd's javascript alias, nginx's).
uninstall_kept='^(data /var/lib/pairserve-lab/node-[ab]/hf-cache(/.*)?|path /var/backups/pairserve(/.*)?'
uninstall_kept+='|path /var/lib/postgresql(/.*)?|path /etc/postgresql(-common)?(/.*)?|path /etc/apt/apt\.conf\.d/02autoremove-postgresql'
uninstall_kept+='|path /etc/ssl/private/ssl-cert-snakeoil\.key|path /etc/(localtime|timezone|locale\.gen|networks|default/(locale|sysstat))'
uninstall_kept+='|path /etc/fonts/conf\.d(/.*)?|path /usr/local/share/fonts|path /etc/lighttpd(/.*)?|path /etc/systemd/user(/.*)?'
# nginx (the HTTPS front's package) keeps its configuration tree and the web root its scripts filled.
uninstall_kept+='|path /etc/nginx(/.*)?|path /var/lib/nginx(/.*)?|path /var/www(/.*)?'
# The container runtime is the site's: the worker role enabled its socket unit (first-install.md, "Undo"), whose
# link is a package link; enabling podman.socket also made the directory that holds it.
uninstall_kept+='|path /etc/systemd/system/sockets\.target\.wants'
uninstall_kept+='|package .*|package-(file|link|enabled|running) .*|user postgres|group (postgres|ssl-cert))$'

snapshot_fresh_nodes() {  # before the first converge: what each node holds before the collection touches it
  local node
  mkdir -p "$state/snapshots"
  for node in "${nodes[@]}"; do
    [ -s "$state/snapshots/$node.fresh" ] || node_snapshot "$node" | sort >"$state/snapshots/$node.fresh"
  done
}

uninstall_proof() {  # uninstall.yml on the converged lab, then each node against its fresh snapshot; again: changed=0
  local node rc=0 added removed kept
  play "$state/uninstall-1.log" "$state/uninstall-1.rc" playbooks/uninstall.yml -e pairserve_uninstall_confirm=yes
  play "$state/uninstall-2.log" "$state/uninstall-2.rc" playbooks/uninstall.yml -e pairserve_uninstall_confirm=yes
  [ "$(cat "$state/uninstall-1.rc")" -eq 0 ] || { tail -n 40 "$state/uninstall-1.log" >&2; rc=1; }
  [ "$(cat "$state/uninstall-2.rc")" -eq 0 ] && [ "$(recap_changed "$state/uninstall-2.log")" -eq 0 ] ||
    { echo "lab: uninstall again: rc=$(cat "$state/uninstall-2.rc"), changed=$(recap_changed "$state/uninstall-2.log") (expected 0, 0)" >&2; rc=1; }
  sed -n '/Kept (removed only when asked)/,/Always kept/p' "$state/uninstall-1.log" | sed 's/^ *"//; s/",\{0,1\}$//'
  for node in "${nodes[@]}"; do
    node_snapshot "$node" | sort >"$state/snapshots/$node.uninstalled"
    added=$(comm -13 "$state/snapshots/$node.fresh" "$state/snapshots/$node.uninstalled" | grep -Ev "$uninstall_kept" || true)
    removed=$(comm -23 "$state/snapshots/$node.fresh" "$state/snapshots/$node.uninstalled" || true)
    kept=$(comm -13 "$state/snapshots/$node.fresh" "$state/snapshots/$node.uninstalled" | grep -Ec "$uninstall_kept" || true)
    echo "  $node: $(grep -c . <<<"$added" || true) items left behind, $(grep -c . <<<"$removed" || true) items of the fresh node gone, $kept kept items (checkpoint cache, database, dumps, distribution packages and what their scripts made)"
    if [ -n "$added$removed" ]; then
      { [ -z "$added" ] || printf '    left behind: %s\n' "$added"; [ -z "$removed" ] || printf '    gone: %s\n' "$removed"; } | head -n 60 >&2
      rc=1
    fi
  done
  # On the host: no replica container of the workers, no listener of GPUStack or a replica, no runner image.
  local found=()
  mapfile -t found < <(workload_containers | sed 's/^/replica container /')
  mapfile -t -O ${#found[@]} found < <(ss -Hltn | awk '{print $4}' |
    grep -E ':(30080|30443|10150|10151|10161|10170|10171|400[0-9][0-9]|401[0-6][0-9])$' | sed 's/^/listener /')
  mapfile -t -O ${#found[@]} found < <({ lab_podman images --format '{{.Repository}}@{{.Digest}}';
    lab_docker images --digests --format '{{.Repository}}@{{.Digest}}'; } 2>/dev/null |
    grep -E "^$PAIRSERVE_LAB_REGISTRY/lab/(vllm-cpu|runtime)@sha256" | sed 's/^/pinned image /')
  mapfile -t -O ${#found[@]} found < <(nft list tables 2>/dev/null | grep -E 'inet pairserve_(node_[ab]|server|lab_fault)$' | sed 's/^/firewall /')
  # nginx's tree is kept as the package's; the collection's site in it is not.
  mapfile -t -O ${#found[@]} found < <(podman exec pairserve-lab-node-a sh -c \
    'ls -d /etc/nginx/conf.d/pairserve-* /etc/nginx/sites-enabled/pairserve-* 2>/dev/null' | sed 's/^/nginx site /')
  if [ ${#found[@]} -gt 0 ]; then
    printf '  left behind on the host: %s\n' "${found[@]}" >&2
    rc=1
  fi
  [ "$rc" -ne 0 ] || echo "  uninstall: nothing left behind but the kept items; the second run changed nothing"
  return "$rc"
}

reinstall() {  # on a converged lab: uninstall.yml (held to the fresh snapshots), then site.yml builds it all again
  phase uninstall uninstall_proof
  phase "converge after uninstall" converge "$state/converge-reinstall.log"
  echo "=== lab figures: reinstall"
  echo "  site.yml after uninstall.yml: ${took["converge after uninstall"]} s (the checkpoint cache and GPUStack's database were kept)"
}

leftovers() {  # prints what the lab left behind (nothing after a clean `down`); fails if anything
  local found=()
  mapfile -t -O ${#found[@]} found < <(podman ps -a --format 'container {{.Names}}' --filter label=org.pairserve.lab=true 2>/dev/null)
  mapfile -t -O ${#found[@]} found < <(workload_containers | sed 's/^/container /')
  local path
  for path in "$state" "$run_dir" "$data_dir" "$hub_vars" "$upgrade_pins" "$digest_vars" "$cdi_dir"/pairserve-lab-*.json; do
    [ -e "$path" ] && found+=("path $path")
  done
  mapfile -t -O ${#found[@]} found < <(nft list tables 2>/dev/null | grep -E 'inet pairserve_(node_[ab]|server|lab_fault)$' | sed 's/^/firewall /')
  mapfile -t -O ${#found[@]} found < <(ip netns list 2>/dev/null | grep -E '^pairserve-lab-' | sed 's/^/network namespace /')
  mapfile -t -O ${#found[@]} found < <(pgrep -af 'lab[.]hub|lab[.]route_load|podman system service .*pairserve-lab|dockerd .*pairserve-lab|docker-registry serve|ssh: .*\.lab/ssh/cp' | sed 's/^/process /')
  # The lab's listeners: GPUStack API and workers, PostgreSQL on node-a, replica port ranges.
  mapfile -t -O ${#found[@]} found < <(ss -Hltn | awk '{print $4}' |
    grep -E ':(30080|30443|10150|10151|10161|10170|10171|5432|5000|2222|2223|400[0-9][0-9]|401[0-6][0-9])$' | sed 's/^/listener /')
  if [ ${#found[@]} -gt 0 ]; then
    printf 'lab: left behind: %s\n' "${found[@]}" >&2
    return 1
  fi
  echo "lab: nothing left behind (no lab container, replica container, process, listener or state directory)"
}

lab_test() {  # what CI runs: up, the idempotence proof, the test suite against the running lab, down, nothing left
  local rc=0
  # Check mode on the fresh nodes first, as a user tries a new inventory (then up: start again is a no-op).
  if [ -e "$state/converge-1.log" ]; then
    echo "lab: already converged; check mode on fresh nodes needs scripts/lab.sh down first" >&2
    return 1
  fi
  start || rc=$?
  [ "$rc" -ne 0 ] || free_disk_for_lab || rc=$?
  [ "$rc" -ne 0 ] || phase "check mode on fresh nodes" fresh_check "$state/converge-fresh-check.log" || rc=$?
  [ "$rc" -ne 0 ] || up || rc=$?
  [ "$rc" -ne 0 ] || idempotence || rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "=== lab: tests against the running lab (molecule/default/tests)"
    PAIRSERVE_CHECK_LOG=$state/converge-check.log PAIRSERVE_TAGS_LOG=$state/converge-tags.log \
      PAIRSERVE_FRESH_CHECK_LOG=$state/converge-fresh-check.log python -m pytest -p no:cacheprovider -q --durations=10 \
      --rootdir=molecule/default molecule/default/tests || rc=$?
  fi
  # Day 2 on the same lab (molecule/<scenario> runs the same side effect and tests on a lab of its own):
  # PAIRSERVE_LAB_SCENARIOS names them (e.g. "upgrade hardware_swap"); by default only patch_restart (a few
  # minutes: the drained restart that every tokenizer patch on a running cluster goes through). The others stay
  # out of CI: its budget is 60 minutes, and the upgrade scenario alone takes about 40 on this 2-core kind of
  # machine (docs/lab.md, "Status"). `make molecule` and `scripts/lab.sh <scenario>` run them.
  local scenario
  day2_steps=${PAIRSERVE_LAB_DAY2_STEPS:-core}
  for scenario in ${PAIRSERVE_LAB_SCENARIOS-patch_restart}; do
    [ "$rc" -eq 0 ] || break
    [ -n "${scenarios[$scenario]:-}" ] || { echo "lab: no scenario $scenario" >&2; rc=2; break; }
    phase "$scenario" "${scenarios[$scenario]}" || rc=$?
    python -m pytest -p no:cacheprovider -q --durations=10 --rootdir="molecule/$scenario" "molecule/$scenario/tests" || rc=$?
  done
  # Last on the running lab: playbooks/uninstall.yml, held to the fresh nodes' snapshots.
  [ "$rc" -ne 0 ] || phase uninstall uninstall_proof || rc=$?
  local start=$SECONDS
  down
  echo "=== lab: down took $((SECONDS - start)) s"
  leftovers || rc=1
  return "$rc"
}

# The day-2 scenarios, each by its one name: the molecule scenario's (molecule/<name>: its side effect runs
# `scripts/lab.sh <name>`, its tests judge it) and its logs' directory under .lab/.
declare -A scenarios=([upgrade]=day2_upgrade [hardware_swap]=day2_swap [sleep_wake]=day2_sleepwake
  [queue_weights]=day2_weights [bench_arms]=day2_arms [patch_restart]=day2_patch_restart
  [rotate]=day2_rotate [maintenance]=day2_maintenance [restore]=day2_restore [faults]=day2_faults)

case "${1:-up}" in
  up) up ;;
  start) start ;;
  down) shift; down "$@" && leftovers ;;
  test) lab_test ;;
  uninstall) uninstall_proof ;;
  reinstall) reinstall ;;
  *)
    if [ -n "${scenarios[${1}]:-}" ]; then
      "${scenarios[$1]}"
    else
      echo "usage: $0 up|start|down [--images]|test|uninstall|reinstall|SCENARIO" >&2
      echo "  SCENARIO: $(printf '%s\n' "${!scenarios[@]}" | sort | tr '\n' ' ')" >&2
      exit 2
    fi ;;
esac
