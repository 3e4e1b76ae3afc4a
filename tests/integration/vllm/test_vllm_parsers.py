"""The rendered argv of every profile parses with the pinned release's REAL vLLM argument parser.

Each version's parser runs in its own CPU venv (scripts/build_vllm_cpu.sh <version>): 0.25.1 (the seed's pin,
parser-only install) and 0.27.1 (the serving build) always; more with PAIRSERVE_VLLM_PARSER_VERSIONS="0.25.1 0.27.1
0.32.0" after building them. A missing venv fails the test with the build command: this tier has no skips.
One subprocess per version parses every case (~10 s each).
"""

from __future__ import annotations

import json
import os
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import vllm_args as va
from lab import pins
from lab.profile import lab_profile
from lab.vllm_server import vllm_python

REPO = Path(__file__).resolve().parents[3]


pytestmark = pytest.mark.slow

# The lab's pinned vLLM (its parser build) and the one the integration tier serves (lab/pins.py).
VERSIONS = os.environ.get("PAIRSERVE_VLLM_PARSER_VERSIONS", "%s %s" % (pins.VLLM, pins.SERVE_VLLM)).split()
HELPER = Path(__file__).with_name("parse_argv.py")

SEED_CHECKPOINT = {"architecture": "Qwen3_5ForConditionalGeneration", "model_type": "qwen3_5", "hybrid": True, "vision": True,
                   "mtp": True, "native_context": 262144, "quantization": "nvfp4"}
TINY = {"architecture": "Qwen3ForCausalLM", "model_type": "qwen3", "hybrid": False, "vision": False, "mtp": False,
        "native_context": 8192, "quantization": None}
PAIR = {"memory_total_mib": 16303, "compute_capability": "12.0"}
MTP_ARM = {"name": "multimodal-mtp", "base": "multimodal", "ab_arm": True, "speculative": {"method": "mtp", "num_speculative_tokens": 2}}
NO_PREFIX = {"name": "text-no-prefix", "base": "text", "enable_prefix_caching": False}

# Each profile in both argv styles (GPUStack's --flag=value elements, and a split command line).
PROFILE_CASES = {
    "multimodal": ("multimodal", SEED_CHECKPOINT),
    "text": ("text", SEED_CHECKPOINT),
    "lab": (lab_profile(), TINY),  # the lab inventory owns it
    "multimodal-mtp": (MTP_ARM, SEED_CHECKPOINT),
    "text-no-prefix": (NO_PREFIX, SEED_CHECKPOINT),
}

# Deliberately wrong command lines: each must FAIL the same check, or the check proves nothing.
WRONG_CASES = {
    "typo-flag": ["--max-model-length=65536"],
    "unknown-tool-parser": ["--enable-auto-tool-choice", "--tool-call-parser=qwen3_cod"],
    "auto-tools-without-parser": ["--enable-auto-tool-choice"],
    "bad-mamba-mode": ["--mamba-cache-mode=everything"],
}


def _wrong_cases(version):
    cases = dict(WRONG_CASES)
    vt = va.version_tuple(version)
    if vt < (0, 33, 0):
        cases["disable-spelling"] = ["--disable-prefix-caching"]  # only 0.33 knows --disable-X
    if vt >= (0, 32, 0):
        cases["mamba-all"] = ["--mamba-cache-mode=all"]  # removed in 0.32
    return cases


def _cases(version):
    cases = {}
    for case_id, (profile, checkpoint) in PROFILE_CASES.items():
        for style in ("equals", "split"):
            cases["%s/%s" % (case_id, style)] = va.render(profile, version, checkpoint, PAIR, style=style).argv
    cases.update(_wrong_cases(version))
    return cases


@lru_cache(maxsize=None)
def parse_all(version):
    python = vllm_python(version) if (REPO / ".cache" / "vllm-cpu" / version / "stamp").exists() else None
    if python is None:
        pytest.fail("vLLM %s CPU venv missing: run `bash scripts/build_vllm_cpu.sh %s`" % (version, version), pytrace=False)
    proc = subprocess.run([str(python), str(HELPER)], input=json.dumps({"cases": _cases(version)}), capture_output=True, text=True,
                          timeout=300, check=False, env=dict(os.environ, VLLM_NO_USAGE_STATS="1"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("version", VERSIONS)
def test_the_venv_runs_the_pinned_release(version):
    assert parse_all(version)["version"] == version


@pytest.mark.parametrize("style", ["equals", "split"])
@pytest.mark.parametrize("case_id", list(PROFILE_CASES))
@pytest.mark.parametrize("version", VERSIONS)
def test_rendered_profile_parses_with_the_real_parser(version, case_id, style):
    result = parse_all(version)["results"]["%s/%s" % (case_id, style)]
    assert result["ok"], result["error"]
    args = result["args"]
    profile = va.resolve_profile(PROFILE_CASES[case_id][0])
    # The parser read what we meant, not merely accepted the words.
    assert args["max_model_len"] == profile["max_model_len"]
    assert args["tensor_parallel_size"] == profile["tensor_parallel_size"]
    assert args["max_num_seqs"] == 8 and args["max_num_batched_tokens"] == 8192
    assert args["reasoning_parser"] == "qwen3" and args["tool_call_parser"] == "qwen3_coder"
    assert args["enable_auto_tool_choice"] is True and args["trust_remote_code"] is True
    assert args["enable_prefix_caching"] is profile["enable_prefix_caching"]
    assert args["override_generation_config"] == {"temperature": 1.0, "top_p": 0.95, "top_k": 20}
    if case_id == "lab":
        assert args["enforce_eager"] is True
        assert args["kv_cache_memory_bytes"] == 64 * 1024 * 1024  # vLLM reads "64M" as MiB
        assert args["mamba_cache_mode"] != "align"
    else:
        assert args["gpu_memory_utilization"] == 0.92
        assert args["mamba_cache_mode"] == "align"  # hybrid checkpoint, < 0.33
    assert args["language_model_only"] is (case_id.startswith("text"))
    if case_id == "multimodal-mtp":
        spec = args["speculative_config"]
        spec = json.loads(spec) if isinstance(spec, str) else spec
        assert spec == {"method": "mtp", "num_speculative_tokens": 2}


@pytest.mark.parametrize("version,case_id", [(v, c) for v in VERSIONS for c in _wrong_cases(v)])
def test_deliberately_wrong_flags_fail_the_same_check(version, case_id):
    result = parse_all(version)["results"][case_id]
    assert not result["ok"], "%s parsed on vLLM %s: the check could not catch a bad flag" % (case_id, version)
    assert result["error"]


@pytest.mark.parametrize("version", VERSIONS)
def test_parser_tables_match_the_release_registries(version):
    parsed = parse_all(version)
    assert sorted(va.PARSERS[version]["reasoning"]) == parsed["reasoning_parsers"]
    assert sorted(va.PARSERS[version]["tool"]) == parsed["tool_parsers"]
