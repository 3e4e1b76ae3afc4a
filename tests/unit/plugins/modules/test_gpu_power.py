"""pairserve.llm.gpu_power through real Ansible over recorded power series, the replay's series in-process, and
tools/record_nvml.py --power-samples round-tripped through the replay.

All module cases run as tasks of one generated playbook (one ansible-playbook process); each task's raw result
comes back by name. Expected figures are computed here from the fixtures' own series, and the seed's published
numbers (21.6 W, 102.8 W, 1.09 MWh a year, 495 tok/s at 645 W) are asserted as they are.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pynvml
import pytest

from support.nvml_recordings import derived_recording, play_over_recordings, replaying
from support.scripts import load

REPO = Path(__file__).resolve().parents[4]
FIXTURES = REPO / "tests" / "fixtures" / "nvml"
NODE_A = FIXTURES / "node-a-2x5080.json"
NODE_B = FIXTURES / "node-b-2x4070tis.json"
NODE_A_LOADED = FIXTURES / "node-a-2x5080-power-loaded.json"
NODE_B_LOADED = FIXTURES / "node-b-2x4070tis-power-loaded.json"
H200_IDLE = FIXTURES / "h200-power-2026-11-30.json"
H200_LOADED = FIXTURES / "h200-power-loaded-2026-11-30.json"
BENCH = FIXTURES / "seed-bench-results-power.json"


def recording(path: Path) -> dict:
    return json.loads(path.read_text())


def uuids(path: Path) -> list:
    return [device["UUID"] for device in recording(path)["devices"]]


def series_w(path: Path, device: int) -> list:
    return [mw / 1000.0 for mw in recording(path)["devices"][device]["PowerUsageSeries"]]


def nearest_rank_p95(values: list) -> float:
    ordered = sorted(values)
    return ordered[math.ceil(0.95 * len(ordered)) - 1]


def expected(values: list) -> dict:
    mean = statistics.fmean(values)
    return {"samples": len(values), "mean_w": round(mean, 2), "min_w": round(min(values), 2),
            "max_w": round(max(values), 2), "p95_w": round(nearest_rank_p95(values), 2),
            "annual_kwh": round(mean * 8766 / 1000, 1)}


def _hold_fixture(tmp: Path) -> str:
    return derived_recording(NODE_A, tmp / "node-a-hold.json",
                             "the power series holds its last value past its end.",
                             lambda data: data["power_series"].update(mode="hold"))


def _empty_series_fixture(tmp: Path) -> str:
    return derived_recording(NODE_A, tmp / "node-a-empty-series.json",
                             "an empty power series, which no recorder writes.",
                             lambda data: data["devices"][1].update(PowerUsageSeries=[]))


def _cases(tmp: Path) -> list:
    """(task name, module args, recording, check mode, expect failure)."""
    bench = recording(BENCH)
    node_a_pair = {"index": 0, "name": "NVIDIA GeForce RTX 5080", "uuids": uuids(NODE_A)}
    node_b_pair = {"index": 0, "name": "NVIDIA GeForce RTX 4070 Ti SUPER", "uuids": uuids(NODE_B)}
    short = {"window_seconds": 2, "interval_seconds": 0.1}  # the 20 samples each seed series holds
    return [
        # A read-only module's four steps: nothing changes, and check mode measures the same.
        ("node-a check", {**short, "pairs": [uuids(NODE_A)]}, NODE_A, True, False),
        ("node-a apply", {**short, "pairs": [uuids(NODE_A)]}, NODE_A, False, False),
        ("node-a check again", {**short, "pairs": [uuids(NODE_A)]}, NODE_A, True, False),
        ("node-a apply again", {**short, "pairs": [uuids(NODE_A)]}, NODE_A, False, False),
        ("node-b idle", {**short, "pairs": [node_b_pair]}, NODE_B, False, False),
        ("node-a two cycles", {"window_seconds": 4, "interval_seconds": 0.1, "pairs": [node_a_pair]}, NODE_A,
         False, False),
        ("node-a hold", {"window_seconds": 2.5, "interval_seconds": 0.1, "pairs": [node_a_pair]},
         _hold_fixture(tmp), False, False),
        ("node-a idle with bench", {**short, "pairs": [node_a_pair], "bench_report": bench,
                                    "bench_targets": {"0": "qwen-node-a"}}, NODE_A, False, False),
        ("node-a loaded", {**short, "phase": "loaded", "pairs": [node_a_pair], "bench_report": bench,
                           "bench_targets": {"0": "qwen-node-a"}}, NODE_A_LOADED, False, False),
        ("node-b loaded", {**short, "phase": "loaded", "pairs": [node_b_pair], "bench_report": bench,
                           "bench_targets": {"0": "qwen-node-b"}, "return_samples": False}, NODE_B_LOADED, False,
         False),
        # The real H200 recordings (0.25 s apart), replayed at their own interval: 10 samples.
        ("h200 idle", {"window_seconds": 2.5, "interval_seconds": 0.25, "pairs": [uuids(H200_IDLE)]}, H200_IDLE,
         False, False),
        ("h200 loaded", {"window_seconds": 2.5, "interval_seconds": 0.25, "phase": "loaded"}, H200_LOADED, False,
         False),
        # Failures that must say what to do.
        ("unknown uuid", {**short, "pairs": [["GPU-not-on-this-host", uuids(NODE_A)[0]]]}, NODE_A, False, True),
        ("interval longer than window", {"window_seconds": 1, "interval_seconds": 2}, NODE_A, False, True),
        ("targets without report", {**short, "pairs": [node_a_pair], "bench_targets": {"0": "qwen-node-a"}},
         NODE_A, False, True),
        ("target not in report", {**short, "pairs": [node_a_pair], "bench_report": bench,
                                  "bench_targets": {"0": "qwen-node-z"}}, NODE_A, False, True),
        ("bad phase", {**short, "phase": "busy"}, NODE_A, False, True),
        ("lost gpu", short, FIXTURES / "lost-gpu.json", False, True),
        ("empty series", short, _empty_series_fixture(tmp), False, True),
        ("no driver", short, "", False, True),
    ]


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu_power")
    # "no driver": an empty PAIRSERVE_NVML_REPLAY means the real library, which this machine does not have.
    return play_over_recordings(tmp, "gpu_power", _cases(tmp))


def power(record: dict) -> dict:
    assert record["_status"] == "ok", record
    return record["power"]


# --- the seed's idle figures ------------------------------------------------------------------------

def test_read_only_four_steps_measure_the_same(played):
    steps = ["node-a check", "node-a apply", "node-a check again", "node-a apply again"]
    results = [power(played[step]) for step in steps]
    assert all(played[step]["changed"] is False for step in steps)
    for result in results:
        assert {k: v for k, v in result.items() if k != "elapsed_s"} == {
            k: v for k, v in results[0].items() if k != "elapsed_s"}
    assert results[0]["source"] == f"replay:{NODE_A}"


def test_node_a_per_gpu_and_pair_figures_from_the_fixture(played):
    result = power(played["node-a apply"])
    first, second = series_w(NODE_A, 0), series_w(NODE_A, 1)
    for gpu, values in zip(result["gpus"], (first, second)):
        assert {k: gpu[k] for k in expected(values)} == expected(values)
        assert gpu["samples_w"] == [round(v, 3) for v in values]
        assert gpu["power_limit_w"] == 360.0
        assert gpu["energy_j"] is None and gpu["unsupported"] == ["energy: Unknown"]  # not in the recording
    (pair,) = result["pairs"]
    summed = [a + b for a, b in zip(first, second)]
    assert {k: pair[k] for k in expected(summed)} == expected(summed)
    assert pair["power_limit_w"] == 720.0 and pair["uuids"] == uuids(NODE_A)
    # The seed: the 5080 pair idles at 21.6 W.
    assert pair["mean_w"] == 21.6 and pair["annual_kwh"] == 189.3
    assert "21.6 W mean, 189.3 kWh/year" in played["node-a apply"]["msg"]


def test_node_b_idles_at_102_8_and_both_pairs_burn_1_09_mwh_a_year(played):
    node_a, node_b = power(played["node-a apply"]), power(played["node-b idle"])
    (pair,) = node_b["pairs"]
    summed = [a + b for a, b in zip(series_w(NODE_B, 0), series_w(NODE_B, 1))]
    assert {k: pair[k] for k in expected(summed)} == expected(summed)
    assert pair["mean_w"] == 102.8 and pair["name"] == "NVIDIA GeForce RTX 4070 Ti SUPER"
    assert round(pair["mean_w"] / node_a["pairs"][0]["mean_w"], 1) == 4.8  # "nearly five times as much"
    total_w = node_a["total"]["mean_w"] + node_b["total"]["mean_w"]
    assert round(total_w, 1) == 124.4
    assert round(total_w * node_a["hours_per_year"] / 1e6, 2) == 1.09  # MWh a year, left on


def test_a_series_cycles_past_its_end_or_holds_its_last_value(played):
    cycled = power(played["node-a two cycles"])["gpus"][0]
    assert cycled["samples"] == 40 and cycled["samples_w"] == [round(v, 3) for v in series_w(NODE_A, 0)] * 2
    assert cycled["mean_w"] == 10.4
    held = power(played["node-a hold"])["gpus"][0]
    values = series_w(NODE_A, 0)
    assert held["samples_w"] == [round(v, 3) for v in values + [values[-1]] * 5]


# --- bench report, throughput per watt ----------------------------------------------------------------

def test_loaded_window_gives_throughput_per_watt(played):
    node_a, node_b = power(played["node-a loaded"])["pairs"][0], power(played["node-b loaded"])["pairs"][0]
    assert node_a["mean_w"] == 360.0 and node_b["mean_w"] == 285.0  # the assumed split of the seed's 645 W
    assert "samples_w" not in node_b  # return_samples: false
    bench = node_a["bench"]
    assert (bench["target"], bench["concurrency"], bench["throughput_tok_s"], bench["ceiling_tok_s"],
            bench["decode_tok_s"]) == ("qwen-node-a", 8, 244.0, 275.0, 64.9)
    assert bench["per_watt"] == {"throughput_tok_s": round(244 / 360, 4), "ceiling_tok_s": round(275 / 360, 4)}
    assert node_b["bench"]["per_watt"]["ceiling_tok_s"] == round(220 / 285, 4)
    # The seed: 495 tok/s at saturation for 645 W of GPU board power.
    both = (node_a["bench"]["ceiling_tok_s"] + node_b["bench"]["ceiling_tok_s"]) / (node_a["mean_w"] + node_b["mean_w"])
    assert round(both, 3) == round(495 / 645, 3) == 0.767


def test_idle_window_reports_bench_figures_but_no_per_watt(played):
    bench = power(played["node-a idle with bench"])["pairs"][0]["bench"]
    assert bench["throughput_tok_s"] == 244.0 and bench["per_watt"] is None and bench["power_basis_w"] is None


# --- the real H200 recordings ------------------------------------------------------------------------

def test_h200_recordings_replay_their_first_samples_and_energy(played):
    for name, path in (("h200 idle", H200_IDLE), ("h200 loaded", H200_LOADED)):
        result = power(played[name])
        gpu = result["gpus"][0]
        values = series_w(path, 0)[:10]
        assert {k: gpu[k] for k in expected(values)} == expected(values)
        assert gpu["power_limit_w"] == 700.0 and gpu["unsupported"] == []
        counter = recording(path)["devices"][0]["TotalEnergyConsumptionSeries"]
        assert gpu["energy_j"] == round((counter[9] - counter[0]) / 1000.0, 3)
        # Replayed at the interval it was recorded with, the counter agrees with the sampled draw.
        assert gpu["energy_mean_w"] == pytest.approx(gpu["mean_w"], rel=0.15)
    idle, loaded = power(played["h200 idle"]), power(played["h200 loaded"])
    assert 70 < idle["gpus"][0]["mean_w"] < 100 and 600 < loaded["gpus"][0]["mean_w"] <= 700
    assert idle["pairs"][0]["uuids"] == ["GPU-efd0f60a-d1ce-8c05-55f5-a249ea5edf8e"]
    assert loaded["pairs"] == [] and loaded["total"]["mean_w"] == loaded["gpus"][0]["mean_w"]


# --- failures -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, words", [
    ("unknown uuid", ["GPU-not-on-this-host", "no GPU of this host", "GPU-5080a000-0000-4000-8000-000000000001"]),
    ("interval longer than window", ["interval_seconds (2.0) is longer than window_seconds (1.0)"]),
    ("targets without report", ["bench_report is not"]),
    ("target not in report", ["'qwen-node-z'", "qwen-node-a, qwen-node-b"]),
    ("bad phase", ["phase", "busy"]),
    ("lost gpu", ["GpuIsLost", "fallen off the bus"]),
    ("empty series", ["PowerUsageSeries must be a non-empty list"]),
    ("no driver", ["NVML could not start", "LibraryNotFound"]),
])
def test_failures_say_what_is_wrong(played, name, words):
    record = played[name]
    assert record["_status"] == "failed", record
    for word in words:
        assert word in record["msg"], record["msg"]


# --- the replay and the recorder in-process ---------------------------------------------------------------

@pytest.fixture()
def replay():
    with replaying() as install:
        yield install


def test_energy_counter_keeps_counting_past_the_recording(replay):
    replay(H200_IDLE)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    counter = recording(H200_IDLE)["devices"][0]["TotalEnergyConsumptionSeries"]
    answers = [pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) for dummy in range(len(counter) + 3)]
    assert answers[:len(counter)] == counter
    steps = [b - a for a, b in zip(counter, counter[1:])]
    assert answers[len(counter):] == [counter[-1] + sum(steps[:k]) for k in (1, 2, 3)]


def test_recordings_without_series_answer_as_before(replay):
    library = replay(FIXTURES / "h200x2-2026-11-30.json")
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert [pynvml.nvmlDeviceGetPowerUsage(handle) for dummy in range(3)] == [79510] * 3
    assert library.series_position(1) == 0
    # No energy answer in that recording: the replay says Unknown, as for any answer it lacks.
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)


def test_gpu_pairs_reads_the_first_sample_which_is_the_seed_figure(replay):
    library = replay(NODE_B)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetPowerUsage(handle) == recording(NODE_B)["devices"][0]["PowerUsage"] == 51600
    assert library.series_position(0) == 1 and library.series_position(1) == 0


def test_record_nvml_power_samples_round_trip_through_the_replay(replay, tmp_path):
    record_nvml = load(REPO / "tools" / "record_nvml.py", "record_nvml")
    replay(NODE_A)
    out = tmp_path / "rerecorded.json"
    assert record_nvml.main(["-o", str(out), "--power-samples", "20", "--power-interval", "0.001",
                             "--power-phase", "idle"]) == 0
    again = json.loads(out.read_text())
    original = recording(NODE_A)["devices"][0]["PowerUsageSeries"]
    # record() itself asked PowerUsage once (the scalar), so the sampled series starts one answer later.
    assert again["devices"][0]["PowerUsage"] == original[0]
    assert again["devices"][0]["PowerUsageSeries"] == original[1:] + original[:1]
    assert again["power_series"]["samples"] == 20 and len(again["power_series"]["t_s"]) == 20
    assert again["devices"][0]["TotalEnergyConsumption"] == {"error": "Unknown", "code": 999}
    assert "TotalEnergyConsumptionSeries" not in again["devices"][0]
