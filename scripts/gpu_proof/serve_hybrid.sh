#!/usr/bin/env bash
# The hybrid Qwen3.5-family checkpoint with the multimodal profile, on one GPU (docs/gpu-proof.md,
# "A hybrid Qwen3.5-family checkpoint with the multimodal profile"). Not part of CI.
#
#   HYB_OUT=DIR HYB_MODELS=DIR [HYB_PARTS=/tmp/parts] [HYB_SHA256=...] bash scripts/gpu_proof/serve_hybrid.sh
#
# HYB_MODELS holds bf16/ (scripts/gpu_proof/build_tiny_hybrid.py) and optionally nvfp4/
# (scripts/gpu_proof/quantize_tiny_hybrid_nvfp4.py). HYB_PARTS holds bundle.part* : one tar of vLLM 0.25.1's
# PyPI wheel and the cp312 wheels of its other requirements, installed with --no-deps into HYB_SITE (default
# /tmp/site) for the host's python3 (torch 2.11.0, CUDA 13, transformers 5.17.0). Do not bundle transformers 5.24:
# its processor input check breaks vLLM 0.25.1's multimodal profiling of Qwen3.5 (docs/gpu-proof.md).
# HYB_EXTRA_ARGS: host additions appended after the rendered flags (recorded per checkpoint). For each checkpoint: vllm_args.render() of the multimodal profile with
# tensor_parallel_size 1 (scripts/gpu_proof/hybrid_proof.py), `vllm serve` with exactly that argv and env, one
# text and one image chat request, the server stopped, the boot log trimmed into run-<label>.json.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RES=${HYB_OUT:?set HYB_OUT}
MODELS=${HYB_MODELS:?set HYB_MODELS}
PARTS=${HYB_PARTS:-/tmp/parts}
SITE=${HYB_SITE:-/tmp/site}
PORT=${HYB_PORT:-8000}
BOOT_LIMIT=${HYB_BOOT_LIMIT:-240}
LABELS=${HYB_LABELS:-bf16 nvfp4}
mkdir -p "$RES"
export LC_ALL=C.UTF-8 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s)
log() { echo "== [+$(( $(date +%s) - T0 ))s] $*" | tee -a "$RES/steps.log"; }

if [ ! -f "$SITE/vllm/__init__.py" ]; then
  ls "$PARTS"/bundle.part* >/dev/null 2>&1 || { log "no bundle parts in $PARTS"; exit 3; }
  cat "$PARTS"/bundle.part* > /tmp/bundle.tar
  SUM=$(sha256sum /tmp/bundle.tar | cut -d' ' -f1); log "bundle sha256 $SUM"
  if [ -n "${HYB_SHA256:-}" ] && [ "$SUM" != "$HYB_SHA256" ]; then log "sha256 differs from $HYB_SHA256"; exit 3; fi
  rm -rf /tmp/bundle && mkdir -p /tmp/bundle && tar -xf /tmp/bundle.tar -C /tmp/bundle && rm -f /tmp/bundle.tar
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" /tmp/bundle/*.whl \
    > "$RES/install.log" 2>&1 || { log "pip install failed"; tail -20 "$RES/install.log"; exit 3; }
  log "installed $(ls /tmp/bundle | wc -l) wheels"
fi
export PYTHONPATH=$SITE
python3 - > "$RES/host.txt" 2>&1 <<'EOF'
import sys, torch, vllm, transformers
print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda)
print("vllm", vllm.__version__, "transformers", transformers.__version__)
print("cuda devices", torch.cuda.device_count(), [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
EOF
nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used --format=csv >> "$RES/host.txt" 2>&1
cat "$RES/host.txt"

COLL=$(mktemp -d); mkdir -p "$COLL/ansible_collections/pairserve" && ln -sfn "$ROOT" "$COLL/ansible_collections/pairserve/llm"
HP="python3 $ROOT/scripts/gpu_proof/hybrid_proof.py --collections $COLL"

SPID=
stop_server() {
  [ -n "$SPID" ] || return 0
  kill -0 "$SPID" 2>/dev/null || return 0
  kill -TERM -- "-$SPID" 2>/dev/null
  for _ in $(seq 1 20); do kill -0 "$SPID" 2>/dev/null || return 0; sleep 1; done
  kill -TERM -- "-$SPID" 2>/dev/null; sleep 3; kill -KILL -- "-$SPID" 2>/dev/null   # may ignore TERM while starting
}
trap stop_server EXIT

for LABEL in $LABELS; do
  MODEL=$MODELS/$LABEL
  [ -f "$MODEL/config.json" ] || { log "$LABEL: no checkpoint, skipped"; continue; }
  $HP render --model "$MODEL" --out "$RES/r-$LABEL" --port "$PORT" > "$RES/command-$LABEL.txt" 2>&1 \
    || { cat "$RES/command-$LABEL.txt"; log "$LABEL: render failed"; continue; }
  cp "$RES/r-$LABEL/argv.json" "$RES/argv-$LABEL.json"
  log "$LABEL: $(cat "$RES/command-$LABEL.txt")"
  mapfile -t ARGV < "$RES/r-$LABEL/server-argv.txt"
  mapfile -t ENVV < "$RES/r-$LABEL/server-env.txt"
  # Host additions after the rendered flags (HYB_EXTRA_ARGS, e.g. --gdn-prefill-backend=triton: flashinfer is
  # not installed here), recorded in host-args.txt.
  read -r -a EXTRA <<< "${HYB_EXTRA_ARGS:-}"
  ARGV+=("${EXTRA[@]}")
  printf '%s\n' "${EXTRA[@]}" > "$RES/host-args-$LABEL.txt"
  S0=$(date +%s)
  env "${ENVV[@]}" setsid python3 -m vllm.entrypoints.openai.api_server "${ARGV[@]}" > "$RES/serve-$LABEL.log" 2>&1 < /dev/null &
  SPID=$!
  OK=0
  while [ $(( $(date +%s) - S0 )) -lt "$BOOT_LIMIT" ]; do
    if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then OK=1; break; fi
    kill -0 "$SPID" 2>/dev/null || break
    sleep 2
  done
  BOOT_S=$(( $(date +%s) - S0 ))
  log "$LABEL: health=$OK after ${BOOT_S}s"
  if [ "$OK" = 1 ]; then
    $HP requests --base-url "http://127.0.0.1:$PORT" --out "$RES/requests-$LABEL.json" 2>&1 | tee -a "$RES/steps.log"
    curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^vllm:(prefix_cache|prompt_tokens_total|generation_tokens_total|num_preemptions)' \
      > "$RES/metrics-$LABEL.txt" 2>&1
    nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader >> "$RES/metrics-$LABEL.txt" 2>&1
  else
    tail -40 "$RES/serve-$LABEL.log"
  fi
  stop_server; SPID=
  $HP record --out "$RES" --label "$LABEL" --model-name "$(basename "$MODEL")" --health "$OK" --boot-s "$BOOT_S" 2>&1 | tee -a "$RES/steps.log"
done
trap - EXIT
rm -rf "$COLL"
log "done"
