#!/usr/bin/env bash
# GPUStack 2.2.3 on a node's own Python through the collection's install code, on a host without systemd or
# PostgreSQL (docs/gpu-proof.md, "GPUStack 2.2.3 on Ubuntu 24.04 / Python 3.12"):
#   1. the host: its system python3, venv and ensurepip, apt's Python binding, the packages the role installs;
#   2. GPUStack's venv through the gpustack_install role: attempt A, gpustack_install.yml, the role as a site runs it,
#      with every apt-get/apt-cache/apt-mark/apt call of its modules logged (a pass-through in front of PATH), then A
#      once more (the second converge). Only where A fails is its failure kept and a fallback tried, which goes
#      around exactly the task that failed, with the role's own code for everything else; the report marks it
#      (`fallback`), and a fallback proves less than A:
#        B  (apt task failed, its packages installed) the apt lists marked fresh, the role as it is;
#        C  the role's preflight alone, then the role from the task after the apt task, with the preflight's fact;
#        D  (C failed creating the venv without ensurepip) the venv made without pip and pip put in it from the
#           wheelhouse, then C's run again;
#   3. `gpustack --version`, `pip check`, `pip freeze`;
#   4. GPUStack's GPU collection on this host's NVML (gpustack_worker_side.py gpus);
#   5. the seed replicas' specs from the replica role (replica_spec.yml, check-only, the nodes' GPUs replayed) and the
#      `vllm serve` command GPUStack's vLLM backend builds for each (gpustack_worker_side.py argv);
#   6. PROOF_OUT/gpustack-py312.json (everything, gpustack_worker_side.py report) and PROOF_OUT/logs.tar.gz.
#
#   PROOF_OUT=DIR PROOF_WHEELHOUSE=DIR PROOF_ANSIBLE_WHEELS=DIR bash scripts/gpu_proof/gpustack_py312.sh
# PROOF_ANSIBLE_WHEELS: ansible-core and its requirements as wheels for the host's python3 (a venv is made of them,
# with nvidia-ml-py from the wheelhouse); or PROOF_ANSIBLE_VENV: an existing venv with both. Optional:
# PROOF_GPUSTACK_PREFIX (default /opt/gpustack), PROOF_ALLOW_APT_STAMP (default 1; 0: no attempt B, which touches
# /var/lib/apt/periodic/update-success-stamp), PROOF_PYTHON (default python3: makes the ansible venv),
# PROOF_APT_TIMEOUT (seconds per apt fetch, written to /etc/apt/apt.conf.d; unset: apt's own), PROOF_ATTEMPT_TIMEOUT
# (seconds per ansible-playbook run, default 300).
# It changes the host (the prefix, the apt stamp): run it on a machine that is given back afterwards.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
repo=$PWD
out=${PROOF_OUT:?PROOF_OUT: the folder for the results}
wheelhouse=${PROOF_WHEELHOUSE:?PROOF_WHEELHOUSE: the wheelhouse for this host Python}
prefix=${PROOF_GPUSTACK_PREFIX:-/opt/gpustack}
allow_stamp=${PROOF_ALLOW_APT_STAMP:-1}
python=${PROOF_PYTHON:-python3}
runner_image=${PROOF_RUNNER_IMAGE:-docker.io/gpustack/runner:cuda12.9-vllm0.25.1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef}
work=$(mktemp -d /tmp/gpustack-py312.XXXXXX)
mkdir -p "$out" "$work/collections/ansible_collections/pairserve"
ln -s "$repo" "$work/collections/ansible_collections/pairserve/llm"
steps=$work/steps.tsv
: >"$steps"
log() { echo "== $(date +%T) $*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# step NAME RC SECONDS
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$steps"; }

# -- 1. the host ------------------------------------------------------------------------------------------------
probe() {
  local key=$1 output rc
  shift
  output=$("$@" 2>&1)
  rc=$?
  printf '%s\t%s\t%s\n' "$key" "$rc" "$(printf '%s' "$output" | head -c 600 | tr '\n\t' '| ')" >>"$work/probe.tsv"
}
: >"$work/probe.tsv"
# shellcheck disable=SC2016  # expanded by the inner shell
probe os sh -c '. /etc/os-release && echo "$PRETTY_NAME"'
probe kernel uname -r
probe pid1 ps -o comm= -p 1
probe systemd_running test -d /run/systemd/system
probe systemctl sh -c 'command -v systemctl'
probe postgresql sh -c 'command -v postgres psql pg_ctl'
probe container_runtime sh -c 'command -v docker podman'
probe nvidia_smi nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.total --format=csv,noheader
probe system_python /usr/bin/python3 -c 'import sys; print(sys.version.split()[0], sys.executable)'
probe system_python_venv /usr/bin/python3 -c 'import venv; print("venv")'
probe system_python_ensurepip /usr/bin/python3 -c 'import ensurepip; print(ensurepip.version())'
probe system_python_apt /usr/bin/python3 -c 'import apt_pkg; print(apt_pkg.VERSION)'
probe system_python_packaging /usr/bin/python3 -c 'import packaging; print(packaging.__version__)'
probe system_python_setuptools /usr/bin/python3 -c 'import setuptools; print(setuptools.__version__)'
for pkg in python3-venv python3.12-venv python3-pip python3-apt python3-setuptools; do
  # shellcheck disable=SC2016  # dpkg-query's own format fields
  probe "dpkg_$pkg" dpkg-query -W -f='${Status} ${Version}' "$pkg"
done
probe apt_lists sh -c 'ls /var/lib/apt/lists | grep -vc -e "^lock$" -e "^partial$" -e "^auxfiles$"'
probe apt_stamp ls -l --time-style=+%FT%T /var/lib/apt/periodic/update-success-stamp
probe proof_python "$python" -c 'import sys; print(sys.version.split()[0], sys.executable)'

# -- the controller: ansible-core in a venv of its own (no PYTHONPATH: it would leak into GPUStack's pip) -------
t0=$(now)
if [ -n "${PROOF_ANSIBLE_VENV:-}" ]; then
  ans_python=$PROOF_ANSIBLE_VENV/bin/python
  rc=0
else
  ans_venv=$work/ansible-venv
  "$python" -m venv --without-pip "$ans_venv" &&
    ans_site=$("$ans_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') &&
    "$python" -m pip install -q --no-index --no-deps --no-compile --target "$ans_site" \
      "${PROOF_ANSIBLE_WHEELS:?PROOF_ANSIBLE_WHEELS or PROOF_ANSIBLE_VENV}"/*.whl "$wheelhouse"/nvidia_ml_py-*.whl
  rc=$?
  ans_python=$ans_venv/bin/python
fi
record controller "$rc" "$(since "$t0")"
[ "$rc" = 0 ] || { log "no ansible controller"; }
ans_site=$("$ans_python" -c 'import ansible, os; print(os.path.dirname(os.path.dirname(ansible.__file__)))')
export ANSIBLE_CONFIG=$repo/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$work/collections ANSIBLE_NOCOLOR=1 \
  ANSIBLE_LOCAL_TEMP=$work/ansible-tmp ANSIBLE_RETRY_FILES_ENABLED=0 PIP_DISABLE_PIP_VERSION_CHECK=1
"$ans_python" -m ansible.cli.playbook --version >"$work/ansible-version.txt" 2>&1

# The module interpreter of `device`: the system python3, as on a node. ansible.builtin.pip needs `packaging` or
# `setuptools` in it (python3-pip brings them on Debian/Ubuntu, the role's apt task installs it); where the system
# python3 has neither, the controller's python (which has packaging) runs the modules and the report says so.
interp=/usr/bin/python3
if ! /usr/bin/python3 -c 'import packaging' 2>/dev/null && ! /usr/bin/python3 -c 'import setuptools' 2>/dev/null; then
  interp=$ans_python
fi
"$ans_python" - "$work/vars.json" "$wheelhouse" "$prefix" "$interp" "$work" <<'EOF'
import json, sys
path, wheelhouse, prefix, interp, work = sys.argv[1:]
json.dump({"pairserve_gpustack_wheelhouse": wheelhouse, "pairserve_gpustack_prefix": prefix,
           "ansible_python_interpreter": interp, "pairserve_proof_dir": work}, open(path, "w"))
EOF

playbook=("$ans_python" -m ansible.cli.playbook -i scripts/gpu_proof/gpustack_py312_inventory.yml)

# apt's commands as the role's modules find them (ansible.builtin.apt looks them up on PATH first): each one that
# exists gets a pass-through in front of PATH that logs the call (attempt, argv) to apt-calls.tsv and runs it
# unchanged. A command the host lacks gets none, so that no module sees a tool the host does not have.
apt_shim=$work/apt-shim
mkdir -p "$apt_shim"
: >"$work/apt-calls.tsv"
for tool in apt-get apt-cache apt-mark apt aptitude; do
  real=$(command -v "$tool") || continue
  # shellcheck disable=SC2016  # expanded by the pass-through when it runs
  printf '#!/bin/sh\nprintf "%%s\\t%%s\\n" "${PAIRSERVE_PROOF_ATTEMPT:-}" "%s $*" >>%s\nexec %s "$@"\n' \
    "$tool" "$work/apt-calls.tsv" "$real" >"$apt_shim/$tool"
  chmod 0755 "$apt_shim/$tool"
done
# The pass-through is what a lookup on PATH finds, and it logs: one call of its own, as the attempt `check`.
[ -x "$apt_shim/apt-get" ] && PATH=$apt_shim:$PATH PAIRSERVE_PROOF_ATTEMPT=check apt-get --version >/dev/null 2>&1
last_failed_task() { awk '/^TASK \[/{t=$0} /^(fatal|failed):/{print t; exit}' "$1"; }

# attempt NAME PLAYBOOK ARGS...
attempt() {
  local name=$1 book=$2 t rc
  shift 2
  log "install attempt $name"
  t=$(now)
  PATH=$apt_shim:$PATH PAIRSERVE_PROOF_ATTEMPT=$name timeout "${PROOF_ATTEMPT_TIMEOUT:-300}" "${playbook[@]}" \
    "scripts/gpu_proof/$book" -e "@$work/vars.json" "$@" >"$work/install-$name.log" 2>&1
  rc=$?
  record "install:$name" "$rc" "$(since "$t")"
  # What the role decided and what dpkg answered, per attempt (gpustack_install.yml writes it when the role ends).
  [ -f "$work/gpustack_install-fact.json" ] && mv "$work/gpustack_install-fact.json" "$work/gpustack_install-fact-$name.json"
  return $rc
}

# -- 2. GPUStack's venv through the role ------------------------------------------------------------------------
# A host that reaches no network: apt's fetches get a few seconds each, so the role's apt cache update fails in
# seconds rather than minutes (it changes how long apt waits, not what it does).
if [ -n "${PROOF_APT_TIMEOUT:-}" ] && [ -d /etc/apt/apt.conf.d ]; then
  printf 'Acquire::http::Timeout "%s";\nAcquire::https::Timeout "%s";\nAcquire::Retries "0";\n' \
    "$PROOF_APT_TIMEOUT" "$PROOF_APT_TIMEOUT" >/etc/apt/apt.conf.d/99pairserve-proof-timeout
fi
installed=""
again=()
if attempt A-role gpustack_install.yml; then
  installed=A-role
elif last_failed_task "$work/install-A-role.log" | grep -qE 'Install the venv tooling|system_packages : Install the packages that are missing'; then
  if [ "$allow_stamp" = 1 ] && /usr/bin/python3 -c 'import apt_pkg' 2>/dev/null &&
      dpkg-query -W -f='${Status}' python3-venv 2>/dev/null | grep -q 'ok installed' &&
      dpkg-query -W -f='${Status}' python3-pip 2>/dev/null | grep -q 'ok installed'; then
    mkdir -p /var/lib/apt/periodic && touch /var/lib/apt/periodic/update-success-stamp
    attempt B-apt-lists-fresh gpustack_install.yml && installed=B-apt-lists-fresh
  fi
  if [ -z "$installed" ] && attempt C-preflight gpustack_install_preflight.yml; then
    after_apt=(--start-at-task 'Create the version directory' -e "@$work/gpustack_install-preflight.json")
    if attempt C-after-apt-task gpustack_install.yml "${after_apt[@]}"; then
      installed=C-after-apt-task
      again=("${after_apt[@]}")
    elif last_failed_task "$work/install-C-after-apt-task.log" | grep -q 'Install GPUStack into its own venv' &&
        grep -q ensurepip "$work/install-C-after-apt-task.log"; then
      venv=$("$ans_python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["pairserve_gpustack_install"]["venv"])' \
        "$work/gpustack_install-preflight.json")
      t=$(now)
      pip_wheels=("$wheelhouse"/pip-*.whl)
      pip_wheel=${pip_wheels[0]}
      # pip runs from its own wheel (python pip-X.whl/pip) and installs that wheel into the venv.
      { /usr/bin/python3 -m venv --without-pip "$venv" &&
          "$venv/bin/python" "$pip_wheel/pip" install --no-index --no-deps "$pip_wheel"; } \
        >"$work/venv-without-ensurepip.log" 2>&1
      record "venv-without-ensurepip" "$?" "$(since "$t")"
      if attempt D-after-apt-task gpustack_install.yml "${after_apt[@]}"; then
        installed=D-after-apt-task
        again=("${after_apt[@]}")
      fi
    fi
  fi
fi
if [ -n "$installed" ]; then
  attempt "again-$installed" gpustack_install.yml "${again[@]}"
else
  # E, only when no attempt through the role got a venv: the install the role's pip task runs, by hand, so that the
  # steps below still say what GPUStack does on this Python. The report names it; it proves nothing about the role.
  log "no venv through the role: E, the role's pip command by hand"
  t=$(now)
  base=/usr/bin/python3
  [ -x "$base" ] || base=$python
  py=$("$base" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  pip_wheels=("$wheelhouse"/pip-*.whl)
  pip_wheel=${pip_wheels[0]}
  mkdir -p "$prefix/2.2.3" &&
    cp "roles/gpustack_install/files/py$py/gpustack-2.2.3.constraints.txt" "$prefix/2.2.3/constraints.txt" &&
    "$base" -m venv --without-pip "$prefix/2.2.3/venv" &&
    "$prefix/2.2.3/venv/bin/python" "$pip_wheel/pip" install -q --no-index --no-deps "$pip_wheel" &&
    "$prefix/2.2.3/venv/bin/python" -m pip install --no-index --find-links "$wheelhouse" \
      -c "$prefix/2.2.3/constraints.txt" gpustack==2.2.3 >"$work/install-E-by-hand.log" 2>&1 &&
    ln -sfn 2.2.3 "$prefix/current"
  record "by-hand:E" "$?" "$(since "$t")"
fi

# What apt's state is after the role ran (the same probes as before it).
probe apt_lists_after sh -c 'ls /var/lib/apt/lists | grep -vc -e "^lock$" -e "^partial$" -e "^auxfiles$"'
probe apt_stamp_after ls -l --time-style=+%FT%T /var/lib/apt/periodic/update-success-stamp
# shellcheck disable=SC2016  # dpkg-query's own format fields
probe dpkg_python3-apt_after dpkg-query -W -f='${Status} ${Version}' python3-apt

# -- 3. what was installed --------------------------------------------------------------------------------------
venv=$prefix/current/venv
if [ -x "$venv/bin/gpustack" ]; then
  # GPUStack 2.2.3's CLI has a `version` command; `--version` is kept too (what it answers is part of the record).
  t=$(now)
  "$venv/bin/gpustack" version >"$work/gpustack-version.txt" 2>&1
  record gpustack-version "$?" "$(since "$t")"
  "$venv/bin/gpustack" --version >"$work/gpustack-dash-version.txt" 2>&1
  record gpustack-dash-version "$?" 0
  "$venv/bin/python" --version >"$work/venv-python.txt" 2>&1
  "$venv/bin/python" -m pip check >"$work/pip-check.txt" 2>&1
  record pip-check "$?" 0
  "$venv/bin/python" -m pip freeze --all >"$work/pip-freeze.txt" 2>&1
  du -sm "$(readlink -f "$venv")" | cut -f1 >"$work/venv-mib.txt"
  readlink "$prefix/current" >"$work/current-link.txt"

  # -- 4. GPUStack's GPU collection on this host's NVML ---------------------------------------------------------
  t=$(now)
  PYTHONPATH=$work/collections timeout 180 "$venv/bin/python" scripts/gpu_proof/gpustack_worker_side.py gpus \
    "$work/gpus.json" >"$work/gpus.log" 2>&1
  record gpus "$?" "$(since "$t")"

  # -- 5. the seed replicas: the replica role's specs, GPUStack's vllm serve command ----------------------------
  t=$(now)
  PYTHONPATH=$work/collections "$venv/bin/python" scripts/gpu_proof/gpustack_worker_side.py seed-checkpoint \
    "$work/seed-model" "$work/checkpoint.json" >"$work/seed-checkpoint.log" 2>&1 &&
    timeout 300 "${playbook[@]}" scripts/gpu_proof/replica_spec.yml -e "@$work/checkpoint.json" -e "pairserve_proof_dir=$work" \
      >"$work/replica-spec.log" 2>&1
  record replica-spec "$?" "$(since "$t")"
  mkdir -p "$work/nvml-hook"
  cp lab/stand_ins/nvml_sitecustomize.py "$work/nvml-hook/sitecustomize.py"
  cp plugins/module_utils/nvml_replay.py "$work/nvml-hook/nvml_replay.py"
  for node in node-a node-b; do
    case $node in
      node-a) recording=$repo/tests/fixtures/nvml/node-a-2x5080.json ;;
      node-b) recording=$repo/tests/fixtures/nvml/node-b-2x4070tis.json ;;
    esac
    t=$(now)
    # A clean environment: GPUStack copies the worker's own environment into the replica's (filter_env_vars).
    env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="${HOME:-/root}" LANG=C.UTF-8 \
      PYTHONPATH="$work/nvml-hook:$work/collections" PAIRSERVE_NVML_REPLAY="$recording" \
      GPUSTACK_RUNTIME_DETECT=NVIDIA GPUSTACK_RUNTIME_DETECT_NO_PCI_CHECK=1 PAIRSERVE_ANSIBLE_SITE="$ans_site" \
      PAIRSERVE_PROOF_RUNNER_IMAGE="$runner_image" PAIRSERVE_PROOF_DATA_DIR="$work/gpustack-data" \
      timeout 180 "$venv/bin/python" scripts/gpu_proof/gpustack_worker_side.py argv "$work/replica-$node.json" \
      "$work/argv-$node.json" >"$work/argv-$node.log" 2>&1
    record "argv:$node" "$?" "$(since "$t")"
  done
fi

# -- 6. the results ---------------------------------------------------------------------------------------------
"$ans_python" scripts/gpu_proof/gpustack_worker_side.py report "$work" "$out/gpustack-py312.json" \
  "$installed" "$interp" "$prefix" "$wheelhouse"
rc=$?
tar -czf "$out/logs.tar.gz" -C "$work" --exclude=ansible-venv --exclude=collections --exclude=seed-model \
  --exclude=gpustack-data --exclude=ansible-tmp --exclude=nvml-hook .
log "results in $out (work folder $work)"
exit $rc
