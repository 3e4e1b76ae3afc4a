"""llm_bench through Ansible: bad input and unreachable targets refused before anything is measured or written."""

from __future__ import annotations

from support.ansible_runner import run_module


def test_bench_module_refuses_bad_input_before_any_request(tmp_path):
    res = run_module("llm_bench", {"targets": [{"name": "a", "base_url": "http://127.0.0.1:9", "model": "m"},
                                               {"name": "a", "base_url": "http://127.0.0.1:9", "model": "m"}],
                                   "report_dir": str(tmp_path)})
    assert res.failed and "names must be unique" in res["msg"]
    res = run_module("llm_bench", {"targets": [{"name": "a", "base_url": "http://127.0.0.1:9", "model": "m"}],
                                   "report_dir": str(tmp_path), "compare_with": [str(tmp_path / "nope.json")]})
    assert res.failed and "is not a results.json" in res["msg"]
    assert list(tmp_path.iterdir()) == []


def test_bench_module_check_mode_names_the_unreachable_target(tmp_path):
    res = run_module("llm_bench", {"targets": [{"name": "qwen-node-a", "base_url": "http://127.0.0.1:9",
                                                "model": "m"}], "report_dir": str(tmp_path)}, check=True)
    assert res.failed
    assert "qwen-node-a does not answer" in res["msg"] and "unreachable" in res["msg"]
    assert list(tmp_path.iterdir()) == [], "check mode writes nothing"
