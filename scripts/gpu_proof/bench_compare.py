#!/usr/bin/env python
"""The bench play's single-stream measurement beside vLLM's `vllm bench serve`, on a server already running.

    bench_compare.py --collections DIR --base-url URL --model NAME --tokenizer MODEL_DIR --out FILE
                     [--rounds 6] [--requests 6] [--output-len 128]

The GPU form of benchmarks/bench_vs_vllm_bench.py (`make bench`, the CPU figures 1.016 / 0.942): its own `ours()`
(`_bench_measure.single_stream`, the code llm_bench runs) and `theirs()` (vLLM's `vllm bench serve` parser and main(),
what `vllm bench serve` runs) are imported from that file and called unchanged, in the same alternating
rounds, with the same medians. Only the server and the Python that runs vLLM differ: the server is given
(scripts/gpu_proof/serve_hybrid.sh started it), and `vllm bench serve` runs in this interpreter's environment
(PYTHONPATH holding the vLLM 0.25.1 install), not in the CPU suite's venv.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _instrument(collections):
    sys.path.insert(0, str(Path(collections).resolve()))
    spec = importlib.util.spec_from_file_location("bench_vs_vllm_bench", REPO / "benchmarks" / "bench_vs_vllm_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--collections", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=6)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--budget-s", type=float, default=0, help="start no round that would end past this (0: none)")
    args = parser.parse_args(argv)

    inst = _instrument(args.collections)
    client = inst.Client(args.base_url, None, 600)
    rows = {"ours": [], "vllm bench serve": []}
    seconds = {"ours": [], "vllm bench serve": []}
    prompt_tokens = None
    error = None
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as workdir:
        inst.ours(client, args.model, 8, 2)  # the benchmark's warm-up, as its main() does
        for dummy in range(args.rounds):
            last = 1.2 * sum(x[-1] for x in seconds.values() if x) if seconds["ours"] else 30
            if args.budget_s and time.monotonic() - started + last > args.budget_s:
                error = "budget: %d rounds in %.0f s of %.0f" % (
                    len(seconds["ours"]), time.monotonic() - started, args.budget_s)
                break
            try:
                t0 = time.monotonic()
                mine = inst.ours(client, args.model, args.output_len, args.requests)
                seconds["ours"].append(round(time.monotonic() - t0, 2))
                prompt_tokens = mine["prompt_tokens"]
                t0 = time.monotonic()
                other = inst.theirs(sys.executable, args.base_url, args.model, args.tokenizer, prompt_tokens,
                                    args.output_len, args.requests, workdir)
                seconds["vllm bench serve"].append(round(time.monotonic() - t0, 2))
            except (SystemExit, Exception) as exc:  # pylint: disable=broad-except
                error = str(exc)[-4000:]
                break
            rows["ours"].append(mine)
            rows["vllm bench serve"].append(other)
            print("round %d: decode %.1f / %.1f tok/s, TTFT %.2f / %.2f ms" % (
                len(rows["ours"]), mine["decode_tok_s"], other["decode_tok_s"], mine["ttft_ms"], other["ttft_ms"]),
                flush=True)
    pairs = list(zip(rows["ours"], rows["vllm bench serve"]))
    result = {"base_url": args.base_url, "model": args.model, "rounds": len(pairs), "rounds_asked": args.rounds,
              "requests_per_round": args.requests, "output_len": args.output_len, "prompt_tokens": prompt_tokens,
              "vllm_python": sys.executable, "runs": rows, "seconds": seconds, "error": error,
              "wall_s": round(time.monotonic() - started, 1)}
    if pairs:
        result["decode_ratios"] = [a["decode_tok_s"] / b["decode_tok_s"] for a, b in pairs]
        result["ttft_ratios"] = [a["ttft_ms"] / b["ttft_ms"] for a, b in pairs]
        result["decode_ratio"] = statistics.median(result["decode_ratios"])
        result["ttft_ratio"] = statistics.median(result["ttft_ratios"])
        result["summary"] = {name: {"decode_tok_s": statistics.median(r["decode_tok_s"] for r in runs),
                                    "ttft_ms": statistics.median(r["ttft_ms"] for r in runs)}
                             for name, runs in rows.items()}
        print("ratio ours/vllm: decode %.3f, TTFT %.3f (median of %d rounds; target: within 5 %%)"
              % (result["decode_ratio"], result["ttft_ratio"], len(pairs)))
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if error:
        print("stopped: %s" % error[-1500:])
    return 0 if pairs and (not error or error.startswith("budget")) else 1


if __name__ == "__main__":
    sys.exit(main())
