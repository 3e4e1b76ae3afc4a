#!/usr/bin/env bash
# The hybrid Qwen3.5-family checkpoint with the multimodal profile, on one GPU (docs/gpu-proof.md,
# "A hybrid Qwen3.5-family checkpoint with the multimodal profile"). Not part of CI.
#
#   HYB_OUT=DIR HYB_MODELS=DIR [HYB_PARTS=/tmp/parts] [HYB_SHA256=...] [HYB_RUNS=...] bash scripts/gpu_proof/serve_hybrid.sh
#
# HYB_MODELS holds bf16/ (scripts/gpu_proof/build_tiny_hybrid.py [--train]) and optionally nvfp4/
# (scripts/gpu_proof/quantize_tiny_hybrid_nvfp4.py). The install, into HYB_SITE (default /tmp/site) for the host's
# python3 (torch 2.11.0, CUDA 13, transformers 5.17.0), comes from HYB_PARTS, either
#   site.part*   one xz-compressed tar of a directory site/ made here with `pip install --no-deps --target site`
#                of vLLM 0.25.1's PyPI wheel and the cp312 wheels of its other requirements (xz makes the CUDA
#                libraries about a third of their size in the wheel: fewer 64 MiB carries), or
#   bundle.part* one tar of those wheels, installed here with pip --no-deps (the 2026-12-02 run).
# Do not bundle transformers 5.24: its processor input check breaks vLLM 0.25.1's multimodal profiling of
# Qwen3.5 (docs/gpu-proof.md). FlashInfer (flashinfer-python 0.6.13, a requirement of the wheel, with
# apache-tvm-ffi) may already be in HYB_SITE; HYB_JIT=1 then builds its GDN prefill module (nvcc, JIT) before
# the first run and records the time (jit-gdn.json); a build already running (started by an earlier call)
# is waited for through FlashInfer's own lock.
# HYB_RUNS: space-separated runs LABEL:MODEL_SUBDIR[:HOST_ARGS[:CHECKS]] (MODEL_SUBDIR patch+SRC: a copy of SRC patched
# by the collection's tokenizer_patch module first; HOST_ARGS comma-separated additions after
# the rendered flags, e.g. --gdn-prefill-backend=triton; CHECKS llm_verify's checks, comma-separated); default one
# run per HYB_LABELS entry (bf16 nvfp4) with HYB_EXTRA_ARGS. For each run: vllm_args.render() of the multimodal
# profile with tensor_parallel_size 1 (scripts/gpu_proof/hybrid_proof.py), `vllm serve` with exactly that argv
# and env, the first request timed, a small and a 448x448 image request twice each (prefix caching), with
# HYB_VERIFY=1 the collection's llm_verify, with HYB_BENCH=1 (or =compare: without llm_bench) bench_compare.py (llm_bench's single stream beside
# `vllm bench serve`, HYB_BENCH_ROUNDS x HYB_BENCH_REQUESTS) and llm_bench, the server stopped, the boot log trimmed into run-<label>.json. HYB_DEADLINE_S: seconds after the
# start past which no run starts and a boot is not waited for (a run needs HYB_RUN_TAIL_S, default 90, after boot).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RES=${HYB_OUT:?set HYB_OUT}
MODELS=${HYB_MODELS:?set HYB_MODELS}
PARTS=${HYB_PARTS:-/tmp/parts}
SITE=${HYB_SITE:-/tmp/site}
PORT=${HYB_PORT:-8000}
BOOT_LIMIT=${HYB_BOOT_LIMIT:-240}
LABELS=${HYB_LABELS:-bf16 nvfp4}
DEADLINE=${HYB_DEADLINE_S:-100000}
TAIL_S=${HYB_RUN_TAIL_S:-90}
if [ -z "${HYB_RUNS:-}" ]; then
  HYB_RUNS=""; for L in $LABELS; do HYB_RUNS+="$L:$L:$(echo "${HYB_EXTRA_ARGS:-}" | tr ' ' ',') "; done
fi
mkdir -p "$RES"
export LC_ALL=C.UTF-8 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s)
log() { echo "== [+$(( $(date +%s) - T0 ))s] $*" | tee -a "$RES/steps.log"; }

if [ ! -f "$SITE/vllm/__init__.py" ] && ls "$PARTS"/site.part* >/dev/null 2>&1; then
  SUM=$(cat "$PARTS"/site.part* | sha256sum | cut -d' ' -f1); log "site.tar.xz sha256 $SUM"
  if [ -n "${HYB_SHA256:-}" ] && [ "$SUM" != "$HYB_SHA256" ]; then log "sha256 differs from $HYB_SHA256"; exit 3; fi
  mkdir -p "$SITE"
  if command -v xz >/dev/null; then
    cat "$PARTS"/site.part* | xz -dc -T0 | tar -x -C "$SITE" --strip-components=1 || { log "unpacking failed"; exit 3; }
  else  # no xz binary: Python's lzma
    cat "$PARTS"/site.part* | python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)' \
      | tar -x -C "$SITE" --strip-components=1 || { log "unpacking failed"; exit 3; }
  fi
  log "unpacked $(ls "$SITE" | wc -l) entries into $SITE"
fi
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
import sys, shutil, importlib.util, torch, vllm, transformers
print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda)
print("vllm", vllm.__version__, "transformers", transformers.__version__)
fi = importlib.util.find_spec("flashinfer")
if fi:
    import flashinfer
    print("flashinfer", flashinfer.__version__, "cubin", importlib.util.find_spec("flashinfer_cubin") is not None)
else:
    print("flashinfer none")
print("nvcc", shutil.which("nvcc"))
print("cuda devices", torch.cuda.device_count(), [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
EOF
nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used --format=csv >> "$RES/host.txt" 2>&1
cat "$RES/host.txt"

COLL=$(mktemp -d); mkdir -p "$COLL/ansible_collections/pairserve" && ln -sfn "$ROOT" "$COLL/ansible_collections/pairserve/llm"
HP="python3 $ROOT/scripts/gpu_proof/hybrid_proof.py --collections $COLL"
printf "[defaults]\n" > "$COLL/ansible.cfg"
export ANSIBLE_COLLECTIONS_PATH=$COLL ANSIBLE_PYTHON_INTERPRETER=$(command -v python3) ANSIBLE_CONFIG=$COLL/ansible.cfg
export ANSIBLE_LOCALHOST_WARNING=0 ANSIBLE_INVENTORY_UNPARSED_WARNING=0 ANSIBLE_NOCOLOR=1
adhoc() {  # adhoc MODULE ARGS_JSON NAME: one module on localhost, its printed output and its JSON result
  local tree; tree=$(mktemp -d)
  python3 -m ansible adhoc localhost -i localhost, -c local -m "$1" -a "$2" --tree "$tree" > "$RES/$3.txt" 2>&1
  local rc=$?; cp "$tree/localhost" "$RES/$3.json" 2>/dev/null; echo "$rc"
}
if [ "${HYB_JIT:-0}" = 1 ]; then
  command -v nvcc >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
  export MAX_JOBS=${MAX_JOBS:-$(nproc)}
  log "FlashInfer GDN prefill JIT (nvcc $(command -v nvcc), MAX_JOBS=$MAX_JOBS)"
  $HP jit-gdn --out "$RES/jit-gdn.json" > "$RES/jit-gdn.log" 2>&1; log "jit-gdn rc=$? $(head -c 400 "$RES/jit-gdn.json")"
fi

SPID=
stop_server() {
  [ -n "$SPID" ] || return 0
  kill -0 "$SPID" 2>/dev/null || return 0
  kill -TERM -- "-$SPID" 2>/dev/null
  for _ in $(seq 1 20); do kill -0 "$SPID" 2>/dev/null || return 0; sleep 1; done
  kill -TERM -- "-$SPID" 2>/dev/null; sleep 3; kill -KILL -- "-$SPID" 2>/dev/null   # may ignore TERM while starting
}
trap stop_server EXIT

for RUN in $HYB_RUNS; do
  IFS=: read -r LABEL SUB EXTRA_CSV CHECKS <<< "$RUN"
  if [ "${SUB%%+*}" = patch ]; then
    # patch+SRC: a copy of SRC (a checkpoint whose tokenizer still truncates at 2048) with the collection's
    # tokenizer_patch module applied to it, then served: "after tokenizer_patch and a restart".
    SRC=${SUB#patch+}; SUB=$SRC-patched
    rm -rf "${MODELS:?}/$SUB"; cp -r "$MODELS/$SRC" "$MODELS/$SUB"
    rc=$(adhoc pairserve.llm.tokenizer_patch "{\"path\": \"$MODELS/$SUB\"}" "patch-$LABEL")
    log "$LABEL: tokenizer_patch on a copy of $SRC rc=$rc changed=$(grep -o '"changed": [a-z]*' "$RES/patch-$LABEL.json" | head -1)"
  fi
  MODEL=$MODELS/$SUB
  [ -f "$MODEL/config.json" ] || { log "$LABEL: no checkpoint $SUB, skipped"; continue; }
  LEFT=$(( DEADLINE - ($(date +%s) - T0) ))
  [ "$LEFT" -gt $(( TAIL_S + 60 )) ] || { log "$LABEL: not started, ${LEFT}s left before the deadline"; continue; }
  LIMIT=$(( LEFT - TAIL_S )); [ "$LIMIT" -lt "$BOOT_LIMIT" ] || LIMIT=$BOOT_LIMIT
  $HP render --model "$MODEL" --out "$RES/r-$LABEL" --port "$PORT" > "$RES/command-$LABEL.txt" 2>&1 \
    || { cat "$RES/command-$LABEL.txt"; log "$LABEL: render failed"; continue; }
  cp "$RES/r-$LABEL/argv.json" "$RES/argv-$LABEL.json"
  log "$LABEL: $(cat "$RES/command-$LABEL.txt")"
  mapfile -t ARGV < "$RES/r-$LABEL/server-argv.txt"
  mapfile -t ENVV < "$RES/r-$LABEL/server-env.txt"
  # Host additions after the rendered flags (e.g. --gdn-prefill-backend=triton), recorded in host-args-LABEL.txt.
  EXTRA=(); [ -n "$EXTRA_CSV" ] && IFS=, read -r -a EXTRA <<< "$EXTRA_CSV"
  ARGV+=("${EXTRA[@]}")
  printf '%s\n' "${EXTRA[@]}" > "$RES/host-args-$LABEL.txt"
  S0=$(date +%s)
  env "${ENVV[@]}" setsid python3 -m vllm.entrypoints.openai.api_server "${ARGV[@]}" > "$RES/serve-$LABEL.log" 2>&1 < /dev/null &
  SPID=$!
  OK=0
  while [ $(( $(date +%s) - S0 )) -lt "$LIMIT" ]; do
    if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then OK=1; break; fi
    kill -0 "$SPID" 2>/dev/null || break
    sleep 2
  done
  BOOT_S=$(( $(date +%s) - S0 ))
  log "$LABEL: health=$OK after ${BOOT_S}s (limit ${LIMIT}s)"
  if [ "$OK" = 1 ]; then
    $HP requests --base-url "http://127.0.0.1:$PORT" --out "$RES/requests-$LABEL.json" \
      --first-timeout $(( DEADLINE - ($(date +%s) - T0) - 30 )) 2>&1 | tee -a "$RES/steps.log"
    if [ "${HYB_VERIFY:-0}" = 1 ]; then
      MML=$(grep -o -- '--max-model-len=[0-9]*' "$RES/r-$LABEL/server-argv.txt" | cut -d= -f2)
      V0=$(date +%s)
      rc=$(adhoc pairserve.llm.llm_verify "$($HP verify-args --model "$MODEL" --base-url "http://127.0.0.1:$PORT" \
             --name "hybrid-$LABEL" --max-model-len "$MML" --boot-log "$RES/serve-$LABEL.log" \
             ${CHECKS:+--checks "$CHECKS"})" "verify-$LABEL")
      log "$LABEL: llm_verify rc=$rc in $(( $(date +%s) - V0 ))s: $(grep -o '"failed_checks": \[[^]]*\]' "$RES/verify-$LABEL.json" | head -1)"
    fi
    if [ "${HYB_BENCH:-0}" = 1 ] || [ "${HYB_BENCH:-0}" = compare ]; then
      # The bench play's single-stream measurement beside `vllm bench serve`, alternating on this server
      # (bench_compare.py), then llm_bench itself as the bench play runs it.
      B0=$(date +%s)
      python3 "$ROOT/scripts/gpu_proof/bench_compare.py" --collections "$COLL" --base-url "http://127.0.0.1:$PORT" \
        --model hybrid --tokenizer "$MODEL" --out "$RES/bench-compare-$LABEL.json" \
        --rounds "${HYB_BENCH_ROUNDS:-6}" --requests "${HYB_BENCH_REQUESTS:-6}" \
        --budget-s $(( DEADLINE - ($(date +%s) - T0) - 60 )) > "$RES/bench-compare-$LABEL.txt" 2>&1
      log "$LABEL: bench_compare rc=$? in $(( $(date +%s) - B0 ))s: $(tail -1 "$RES/bench-compare-$LABEL.txt" | head -c 300)"
      [ "$HYB_BENCH" = compare ] || { B0=$(date +%s)
      rc=$(adhoc pairserve.llm.llm_bench "$($HP bench-args --base-url "http://127.0.0.1:$PORT" --label "$LABEL" \
             --report-dir "$RES/bench-report-$LABEL")" "bench-$LABEL")
      log "$LABEL: llm_bench rc=$rc in $(( $(date +%s) - B0 ))s"; }
    fi
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
