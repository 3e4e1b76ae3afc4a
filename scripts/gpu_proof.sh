#!/usr/bin/env bash
# Real-GPU proof (docs/gpu-proof.md), not in CI: on a host with one NVLinked GPU pair (checked on 2x H200),
#   1. gpu_pairs on the real NVML -> one pair (CUDA_VISIBLE_DEVICES by UUID)
#   2. vllm_args renders the argv of a GPU profile for the test model; vLLM 0.25.1 boots with it, TP=2
#   3. llm_verify's checks against that server: text, tool call, near-limit and past-limit (400), token count
#   4. llm_bench's measurements: single stream, concurrency 8, sweep, prefill, prefix cache cold/warm
#   5. the boot log, parsed (tests/unit/plugins/module_utils/test_vllm_log_gpu.py runs on its trimmed copy)
# and writes everything into one folder. See docs/gpu-proof.md.
#
# Usage (from the repository root):
#   PROOF_OUT=DIR PROOF_CARRY=DIR [PROOF_PARTS=/tmp/parts | PROOF_VLLM_WHEEL=FILE] bash scripts/gpu_proof.sh
# PROOF_CARRY holds wheels/ (vLLM 0.25.1's other requirements, as cp312 wheels),
# ansible/ (ansible-core 2.19.14, resolvelib, nvidia-ml-py) and model/ (scripts/gpu_proof/build_tiny_gpu.py's
# output). The vLLM 0.25.1 wheel comes whole (PROOF_VLLM_WHEEL) or as parts vllm.part* in PROOF_PARTS.
# Everything installs with --no-deps into PROOF_SITE (default /tmp/site) for the host's python3, which must
# hold torch 2.11.0 (CUDA 13); an existing install there is reused.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RES=${PROOF_OUT:-$ROOT/gpu-proof-results}
CARRY=${PROOF_CARRY:-$ROOT/.device-carry/final}
PARTS=${PROOF_PARTS:-/tmp/parts}
SITE=${PROOF_SITE:-/tmp/site}
PORT=${PROOF_PORT:-8000}
BOOT_LIMIT=${PROOF_BOOT_LIMIT:-420}
MAX_MODEL_LEN=8192     # scripts/gpu_proof/proof.py PROFILE
PREFILL_TOKENS=8000    # prefill / prefix-cache prompt: just inside the 8192 context
VLLM_SHA256=${PROOF_VLLM_SHA256:-}
mkdir -p "$RES"
export LC_ALL=C.UTF-8 PYTHONUNBUFFERED=1
# The host's rule for every program (NVLink multicast can take shared GPUs out of service): set before anything.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Nothing to fetch (the host reaches nothing, the model is local): no hub look-ups, no usage reports.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
T0=$(date +%s)
now() { echo $(( $(date +%s) - T0 )); }
log() { echo "== [+$(now)s] $*" | tee -a "$RES/steps.log"; }
declare -A TIMING

# -- 0. install --------------------------------------------------------------------------------------------
if [ ! -f "$SITE/vllm/__init__.py" ]; then
  WHEEL=${PROOF_VLLM_WHEEL:-}
  if [ -z "$WHEEL" ]; then
    ls "$PARTS"/vllm.part* >/dev/null 2>&1 || { log "no vLLM wheel: set PROOF_VLLM_WHEEL or put vllm.part* in $PARTS"; exit 3; }
    WHEEL=/tmp/vllm-0.25.1-cp38-abi3-manylinux_2_28_x86_64.whl
    cat "$PARTS"/vllm.part* > "$WHEEL"
  fi
  SUM=$(sha256sum "$WHEEL" | cut -d' ' -f1); log "vLLM wheel sha256 $SUM"
  if [ -n "$VLLM_SHA256" ] && [ "$SUM" != "$VLLM_SHA256" ]; then log "sha256 differs from $VLLM_SHA256: parts missing or corrupt"; exit 3; fi
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
    "$WHEEL" "$CARRY"/wheels/*.whl "$CARRY"/ansible/*.whl > "$RES/install.log" 2>&1 || { log "pip install failed"; tail -20 "$RES/install.log"; exit 3; }
fi
TIMING[install_s]=$(now)
export PYTHONPATH=$SITE
python3 - > "$RES/host.txt" 2>&1 <<'EOF'
import sys, torch, vllm, ansible.release, pynvml
print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda)
print("vllm", vllm.__version__); print("ansible-core", ansible.release.__version__); print("pynvml", pynvml.__file__)
print("cuda devices", torch.cuda.device_count(), [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
EOF
nvidia-smi --query-gpu=index,name,pci.bus_id,uuid,driver_version,memory.total --format=csv >> "$RES/host.txt" 2>&1
cat "$RES/host.txt"; log "install done"

# The collection as ansible_collections.pairserve.llm, ansible-core from the carried wheels.
COLL=$(mktemp -d); mkdir -p "$COLL/ansible_collections/pairserve" && ln -sfn "$ROOT" "$COLL/ansible_collections/pairserve/llm"
printf "[defaults]\n" > "$COLL/ansible.cfg"
export ANSIBLE_COLLECTIONS_PATH=$COLL ANSIBLE_PYTHON_INTERPRETER=$(command -v python3) ANSIBLE_CONFIG=$COLL/ansible.cfg
export ANSIBLE_LOCALHOST_WARNING=0 ANSIBLE_INVENTORY_UNPARSED_WARNING=0 ANSIBLE_NOCOLOR=1 ANSIBLE_CALLBACK_RESULT_FORMAT=yaml
adhoc() {  # adhoc MODULE ARGS_JSON NAME: run one module, keep its printed output and its JSON result
  local tree; tree=$(mktemp -d)
  python3 "$SITE/bin/ansible" localhost -i localhost, -c local -m "$1" -a "$2" --tree "$tree" > "$RES/$3.txt" 2>&1
  local rc=$?; cp "$tree/localhost" "$RES/$3.json" 2>/dev/null; echo "$rc"
}
PROOF="python3 $ROOT/scripts/gpu_proof/proof.py --collections $COLL"

# -- 1. gpu_pairs on the real NVML -------------------------------------------------------------------------
rc=$(adhoc pairserve.llm.gpu_pairs '{"expected_pairs": 1}' gpu_pairs); log "1. gpu_pairs rc=$rc"
[ "$rc" = 0 ] || { cat "$RES/gpu_pairs.txt"; exit 4; }

# -- 2. the rendered argv ----------------------------------------------------------------------------------
MODEL=$CARRY/model
$PROOF render --pairs "$RES/gpu_pairs.json" --model "$MODEL" --out "$RES" --port "$PORT" > "$RES/command.txt" 2>&1 \
  || { cat "$RES/command.txt"; log "2. render failed"; exit 5; }
log "2. rendered: $(cat "$RES/command.txt")"
mapfile -t ARGV < "$RES/server-argv.txt"
mapfile -t ENVV < "$RES/server-env.txt"

# -- 3. serve, then verify ---------------------------------------------------------------------------------
S0=$(date +%s)
env "${ENVV[@]}" setsid python3 -m vllm.entrypoints.openai.api_server "${ARGV[@]}" > "$RES/serve.log" 2>&1 < /dev/null &
SPID=$!
stop_server() {
  kill -0 "$SPID" 2>/dev/null || return 0
  kill -TERM -- "-$SPID" 2>/dev/null
  for _ in $(seq 1 20); do kill -0 "$SPID" 2>/dev/null || return 0; sleep 1; done
  kill -TERM -- "-$SPID" 2>/dev/null; sleep 3; kill -KILL -- "-$SPID" 2>/dev/null   # may ignore TERM while starting
}
trap stop_server EXIT
OK=0
while [ $(( $(date +%s) - S0 )) -lt "$BOOT_LIMIT" ]; do
  if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then OK=1; break; fi
  kill -0 "$SPID" 2>/dev/null || break
  sleep 2
done
TIMING[boot_s]=$(( $(date +%s) - S0 ))
log "3. server health=$OK after ${TIMING[boot_s]}s"
if [ "$OK" = 1 ]; then
  curl -s "http://127.0.0.1:$PORT/v1/models" > "$RES/models.json"
  V0=$(date +%s)
  rc=$(adhoc pairserve.llm.llm_verify "$($PROOF verify-args --model "$MODEL" --max-model-len $MAX_MODEL_LEN --base-url "http://127.0.0.1:$PORT" --boot-log "$RES/serve.log")" verify)
  TIMING[verify_s]=$(( $(date +%s) - V0 )); TIMING[verify_rc]=$rc
  log "3. llm_verify rc=$rc"
  # -- 4. bench --------------------------------------------------------------------------------------------
  B0=$(date +%s)
  rc=$(adhoc pairserve.llm.llm_bench "$($PROOF bench-args --report-dir "$RES/bench" --prefill-tokens $PREFILL_TOKENS --base-url "http://127.0.0.1:$PORT")" bench)
  TIMING[bench_s]=$(( $(date +%s) - B0 )); TIMING[bench_rc]=$rc
  log "4. llm_bench rc=$rc"
  nvidia-smi --query-gpu=index,memory.used,memory.total,utilization.gpu --format=csv >> "$RES/host.txt" 2>&1
else
  tail -60 "$RES/serve.log"
fi
stop_server; trap - EXIT

# -- 5. boot log facts + summary ---------------------------------------------------------------------------
TIMING[total_s]=$(now)
{ echo "{"; sep=""; for k in "${!TIMING[@]}"; do printf '%s "%s": %s\n' "$sep" "$k" "${TIMING[$k]}"; sep=","; done; echo "}"; } > "$RES/timing.json"
$PROOF summary --out "$RES" 2>&1 | tee -a "$RES/steps.log"
rm -rf "$COLL"
[ "$OK" = 1 ]
