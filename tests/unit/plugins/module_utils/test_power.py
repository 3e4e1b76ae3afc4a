"""plugins/module_utils/power.py in-process: the arithmetic (nearest-rank p95, annual energy, the sample count), the
pairs and bench report as given, summarise() over hand-made readings (ticks with refused answers, a counter that
restarted), and sample()'s fixed schedule over a replayed recording with an injected clock.

The gpu_power module over the recorded hosts (the seed's figures, cycle/hold, per-watt, failures) is in
tests/unit/plugins/modules/test_gpu_power.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import nvml_replay, power

NODE_A = Path(__file__).resolve().parents[3] / "fixtures" / "nvml" / "node-a-2x5080.json"


def test_percentile_is_nearest_rank():
    values = list(range(20, 0, -1))  # 1..20, unsorted
    assert power.percentile(values, 95) == 19  # ceil(0.95 * 20) = 19th smallest
    assert power.percentile(values, 100) == 20 and power.percentile(values, 0) == 1
    assert power.percentile([7.5], 95) == 7.5
    with pytest.raises(ValueError, match="percentile of no samples"):
        power.percentile([], 95)


def test_stats_and_the_annual_energy_of_a_constant_draw():
    assert power.annual_kwh(124.4) == pytest.approx(1090.4904)  # the seed's 124.4 W: 1.09 MWh a year
    assert power.stats([10.4, 11.2]) == {"samples": 2, "mean_w": 10.8, "min_w": 10.4, "max_w": 11.2, "p95_w": 11.2,
                                         "annual_kwh": 94.7}
    assert power.stats([]) == {"samples": 0, "mean_w": None, "min_w": None, "max_w": None, "p95_w": None,
                               "annual_kwh": None}


@pytest.mark.parametrize("window, interval, expected", [(2, 0.1, 20), (1, 1, 1), (100, 0.001, 100000), (1, 0.3, 3)])
def test_sample_count(window, interval, expected):
    assert power.sample_count(window, interval) == expected


@pytest.mark.parametrize("window, interval, message", [
    (0, 1, r"window_seconds \(0\) and interval_seconds \(1\) must both be greater than 0"),
    (1, -0.5, "must both be greater than 0"),
    (1, 2, r"interval_seconds \(2\) is longer than window_seconds \(1\)"),
    (101, 0.001, "gives 101000 samples, more than 100000: sample less often"),
])
def test_sample_count_refusals(window, interval, message):
    with pytest.raises(power.PowerError, match=message):
        power.sample_count(window, interval)


def gpu(index, uuid, power_mw, energy=None, name="NVIDIA GeForce RTX 5080", limit=360.0, errors=()):
    ticks = [0.1 * i for i in range(len(power_mw))]
    return {"index": index, "uuid": uuid, "bus_id": "00000000:0%d:00.0" % (index + 1), "name": name,
            "power_limit_w": limit, "_power_mw": list(power_mw),
            "_energy_mj": list(zip(ticks, energy or [None] * len(power_mw))), "_errors": set(errors)}


def raw(*gpus):
    return {"source": "replay:test", "samples": len(gpus[0]["_power_mw"]), "interval_s": 0.1, "elapsed_s": 0.2,
            "gpus": list(gpus)}


def test_resolve_pairs_takes_gpu_pairs_entries_uuid_lists_and_comma_strings():
    gpus = [gpu(0, "GPU-a", []), gpu(1, "GPU-b", [], name="NVIDIA RTX A6000")]
    got = power.resolve_pairs([{"index": 4, "uuids": ["GPU-a", "GPU-b"], "name": "mine"}, ["GPU-b"], " GPU-a , "],
                              gpus)
    assert [(p["index"], p["name"], [m["uuid"] for m in p["members"]]) for p in got] == [
        (4, "mine", ["GPU-a", "GPU-b"]), (1, "NVIDIA RTX A6000", ["GPU-b"]), (2, "NVIDIA GeForce RTX 5080", ["GPU-a"])]
    assert power.resolve_pairs(None, gpus) == []


@pytest.mark.parametrize("pairs, message", [
    ([5], r"pairs\[0\] is 5: give a pair from pairserve_gpu.pairs"),
    ([["GPU-a"], []], r"pairs\[1\] is \[\]"),
    ([{"uuids": ["GPU-a", 3]}], r"pairs\[0\] is \{'uuids': \['GPU-a', 3\]\}"),
    ([["GPU-a", "GPU-z"]], r"pairs\[0\] names GPU-z, which is no GPU of this host \(GPUs present: "
                           r"00000000:01:00.0 GPU-a\)"),
])
def test_resolve_pairs_refusals(pairs, message):
    with pytest.raises(power.PowerError, match=message):
        power.resolve_pairs(pairs, [gpu(0, "GPU-a", [])])


def test_bench_report_shapes():
    report = {"targets": [{"name": "qwen-node-a", "measurement": {"concurrency": {"throughput_tok_s": 244.0}}},
                          {"name": "qwen-node-b", "measurement": None}, {"no": "name"}, "junk"]}
    assert power.bench_targets_of(report) == {"qwen-node-a": {"concurrency": {"throughput_tok_s": 244.0}},
                                              "qwen-node-b": {}}
    assert power.bench_targets_of({"results": [{"name": "x"}]}) == {"x": {}}  # llm_bench's registered result
    with pytest.raises(power.PowerError, match="bench_report must be the bench JSON"):
        power.bench_targets_of(["qwen-node-a"])
    with pytest.raises(power.PowerError, match="has no `targets`"):
        power.bench_targets_of({"targets": "qwen-node-a"})


def test_bench_block_divides_only_a_loaded_windows_throughput_by_its_draw():
    measurements = {"t": {"concurrency": {"concurrency": 8, "throughput_tok_s": 495.0},
                          "single_stream": {"decode_tok_s": 64.9}}}
    loaded = power.bench_block(measurements, "t", 645.0, "loaded")
    assert loaded == {"target": "t", "concurrency": 8, "decode_tok_s": 64.9, "throughput_tok_s": 495.0,
                      "ceiling_tok_s": None, "per_watt": {"throughput_tok_s": 0.7674}, "power_basis_w": 645.0}
    idle = power.bench_block(measurements, "t", 21.6, "idle")
    assert idle["per_watt"] is None and idle["power_basis_w"] is None
    with pytest.raises(power.PowerError, match="names 'u', which the bench report did not measure \\(it has: t\\)"):
        power.bench_block(measurements, "u", 645.0, "loaded")


def test_summarise_sums_a_pair_tick_by_tick_and_skips_ticks_a_member_refused():
    first = gpu(0, "GPU-a", [10000, 12000, None, 14000], energy=[1000, 2000, 3000, 4500])
    second = gpu(1, "GPU-b", [20000, 20000, 20000, 20000], energy=[9000, 100, 200, 300], errors={"power: Unknown"})
    got = power.summarise(raw(first, second), pairs=[["GPU-a", "GPU-b"]])
    a, b = got["gpus"]
    assert (a["samples"], a["mean_w"], a["samples_w"]) == (3, 12.0, [10.0, 12.0, 14.0])
    assert (a["energy_j"], a["energy_mean_w"]) == (3.5, 11.67)  # 3.5 J over 0.3 s
    assert (b["energy_j"], b["energy_mean_w"], b["unsupported"]) == (None, None, ["power: Unknown"])  # counter restarted
    (pair,) = got["pairs"]
    assert pair["samples_w"] == [30.0, 32.0, 34.0] and pair["mean_w"] == 32.0
    assert pair["power_limit_w"] == 720.0 and pair["energy_j"] is None and pair["energy_mean_w"] is None
    assert got["total"] == {"gpus": 2, "mean_w": 32.0, "annual_kwh": 280.5}  # 32 W * 8766 h


def test_summarise_without_any_reading_of_a_gpu_has_no_total_and_checks_bench_targets():
    silent = gpu(1, "GPU-b", [None, None], limit=None)
    got = power.summarise(raw(gpu(0, "GPU-a", [1000, 3000]), silent), pairs=[["GPU-a", "GPU-b"]],
                          return_samples=False)
    assert got["total"] == {"gpus": 2, "mean_w": None, "annual_kwh": None}
    assert got["pairs"][0]["samples"] == 0 and got["pairs"][0]["power_limit_w"] is None
    assert "samples_w" not in got["gpus"][0] and "samples_w" not in got["pairs"][0]
    report = {"targets": [{"name": "q", "measurement": {}}]}
    with pytest.raises(power.PowerError, match=r"bench_targets has pair index\(es\) 3, but the pairs given are 0"):
        power.summarise(raw(gpu(0, "GPU-a", [1000])), pairs=[["GPU-a"]], bench_report=report, bench_targets={3: "q"})
    with pytest.raises(power.PowerError, match="bench_targets is set but bench_report is not"):
        power.summarise(raw(gpu(0, "GPU-a", [1000])), bench_targets={"0": "q"})


def test_summary_line():
    fact = power.summarise(raw(gpu(0, "GPU-a", [10000, 11000]), gpu(1, "GPU-b", [11000, 12000])),
                           pairs=[{"index": 0, "uuids": ["GPU-a", "GPU-b"]}])
    assert power.summary(fact) == ("idle window, 2 samples every 0.1 s: pair 0 (NVIDIA GeForce RTX 5080): 22.0 W mean, "
                                   "192.9 kWh/year; all 2 GPU(s): 22.0 W, 192.9 kWh/year [replay:test]")


class FakeClock:
    """A clock that moves only when slept on: the schedule is exact and the test instant."""

    def __init__(self):
        self.now = 1000.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def test_gather_reads_every_gpu_once_per_tick_on_a_fixed_schedule():
    clock = FakeClock()
    uuids = ["GPU-5080a000-0000-4000-8000-000000000001", "GPU-5080a000-0000-4000-8000-000000000002"]
    try:
        fact = power.gather({nvml_replay.ENV_VAR: str(NODE_A)}, window_seconds=0.5, interval_seconds=0.1,
                            pairs=[uuids], clock=clock, sleep=clock.sleep)
    finally:
        nvml_replay.uninstall()
    # tick k at start + k * 0.1: no wait before the first tick, then 0.1 s before each of the other four
    assert clock.sleeps == pytest.approx([0.1] * 4)
    assert fact["samples"] == 5 and fact["elapsed_s"] == 0.4 and fact["source"] == "replay:%s" % NODE_A
    # the first five answers of each recorded series (node-a-2x5080.json), in mW
    assert fact["gpus"][0]["samples_w"] == [10.4, 10.7, 10.2, 10.5, 10.0]
    assert fact["gpus"][0]["power_limit_w"] == 360.0 and fact["gpus"][0]["unsupported"] == ["energy: Unknown"]
    assert fact["pairs"][0]["uuids"] == uuids and fact["pairs"][0]["samples"] == 5


def test_gather_refuses_a_bad_phase_or_report_before_sampling():
    clock = FakeClock()
    with pytest.raises(power.PowerError, match="phase is 'busy': use one of idle, loaded"):
        power.gather({}, window_seconds=1, interval_seconds=0.1, phase="busy", clock=clock, sleep=clock.sleep)
    with pytest.raises(power.PowerError, match="has no `targets`"):
        power.gather({}, window_seconds=1, interval_seconds=0.1, bench_report={}, clock=clock, sleep=clock.sleep)
    assert clock.sleeps == []
