"""Which of GPUStack's container settings does a root without CAP_SYS_RESOURCE refuse, and does the lab's runc
wrapper make them pass? The probe's record of 2026-12-07 (issue 41 part 2; docs/gpu-proof.md, "Part 2: GPUStack's
containers on the lent machine").

Two records of scripts/gpu_proof/container_probe.py gpustack-specs. The lent GPU machine's
(gpustack-specs-probe-lent-2026-12-07.json: one H200, the carried Docker 20.10.24 binaries) answers the question
there, the GPU handed over included; the development machine's, made first, is below. The tests that read what a
root without CAP_SYS_RESOURCE refuses and what the wrapper makes pass run on both records.

tests/fixtures/gpu-proof/gpustack-specs-probe-devhost-2026-12-07.json holds scripts/gpu_proof/container_probe.py
gpustack-specs as it ran on the development machine, because no lent GPU machine could be started (three tries,
recorded). That machine is a Firecracker VM with the lent machine's kernel and the same capability masks, but it
has no GPU and uses cgroup v1. The record has the root's capabilities and OOM-score writes, then GPUStack 2.2.3 /
gpustack-runtime 0.2.1's pause, replica and health settings as Docker flags: each alone, all together, and the
replica with the GPU. That runs twice, on runc (phase `runc`) and with the wrapper as dockerd's default runtime
(phase `clamp`). Every step keeps its command, rc and output. These tests read the answers out of those outputs,
so a summary that disagrees with its own evidence fails here. The GPU cases prove nothing on this host, and the
tests say so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[4] / "tests" / "fixtures" / "gpu-proof"
RECORD = FIXTURES / "gpustack-specs-probe-devhost-2026-12-07.json"
LENT = FIXTURES / "gpustack-specs-probe-lent-2026-12-07.json"
LENT_2026_12_06 = FIXTURES / "container-probe-2026-12-06.json"
SHM = 10 * (1 << 30)  # GPUStack's default shm for a replica, 10 GiB
SYS_RESOURCE = 24  # linux/capability.h
PAUSE_SINGLE = ("oom_score_adj", "privileged", "no_new_privileges", "ipc_shareable", "shm_size", "network_host",
                "restart_no")
REPLICA_SINGLE = ("network_container", "ipc_container", "shm_size_with_ipc_container", "privileged",
                  "visible_devices_env", "model_dir_bind", "healthcheck_none")
GPU_CASES = ("gpu", "gpu_unprivileged")
REFUSED = {"oom_score_adj": "can't get final child's PID from pipe: EOF",
           "privileged": "unable to apply caps: operation not permitted"}


@pytest.fixture(scope="module", params=[RECORD, LENT], ids=["devhost", "lent"])
def any_record(request):
    return json.loads(request.param.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def record():
    return json.loads(RECORD.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def lent():
    return json.loads(LENT.read_text(encoding="utf-8"))


def _step(record, name):
    (step,) = [s for s in record["probe"]["steps"] if s["name"] == name]
    return step


def _case(record, phase, container, name):
    (case,) = [c for c in record["probe"]["phases"][phase]["cases"]
               if c["container"] == container and c["name"] == name]
    return case


def _mask(text, key):
    return int(re.search(r"^%s:\s*([0-9a-f]+)$" % key, text, re.M).group(1), 16)


def test_it_ran_on_the_development_machine_because_no_lent_machine_started(record):
    lent = record["lent_machine"]
    assert lent["ran"] is False and len(lent["tries"]) == 3
    assert all(t["answer"].startswith("no device machine could be started") for t in lent["tries"])
    assert lent["device_seconds_spent"] == lent["tries"][0]["budget_left_s_before"] - lent["tries"][-1]["after"]
    host = _step(record, "host")["output"].splitlines()
    assert host[0] == record["host"]["kernel"] and host[1] == "process_api" and "nvidia-smi: command not found" in host[2]


def test_the_root_lacks_cap_sys_resource_and_nothing_else(any_record):
    caps = _step(any_record, "caps")["output"]
    last_cap = int(caps.split()[-1])
    for key in ("CapEff", "CapPrm", "CapBnd"):
        mask = _mask(caps, key)
        assert [n for n in range(last_cap + 1) if not mask >> n & 1] == [SYS_RESOURCE], key
        assert any_record["probe"]["caps"][key]["missing"] == ["CAP_SYS_RESOURCE"], key
    # capsh agrees where it is installed (the development machine): every capability named but cap_sys_resource.
    # The lent machine has none (`command -v capsh` fails, no output); the masks above are the answer there.
    capsh = _step(any_record, "capsh")
    if "NVIDIA H200" in _step(any_record, "host")["output"]:
        assert capsh["rc"] == 1 and capsh["output"] == "", capsh
    else:
        assert capsh["rc"] == 0 and "cap_sys_nice,cap_sys_time" in capsh["output"]
        assert "cap_sys_resource" not in capsh["output"]


def test_the_lent_machines_root_has_the_same_masks(record):
    # What makes this host's refusals stand for the lent machine's: the masks the earlier probe read there.
    lent = json.loads(LENT_2026_12_06.read_text(encoding="utf-8"))
    (there,) = [s["output"] for s in lent["static"]["steps"] if s["name"] == "caps_seccomp"]
    here = _step(record, "caps")["output"]
    for key in ("CapEff", "CapBnd"):
        assert _mask(there, key) == _mask(here, key) == 0x1fffeffffff, key
    assert not _mask(there, "CapEff") >> SYS_RESOURCE & 1


def test_the_root_may_not_lower_its_oom_score(any_record):
    assert _step(any_record, "oom_read")["output"].split() == ["self=0", "pid1=0"]
    for value in ("-998", "-1"):
        step = _step(any_record, "oom_write_%s" % value)
        assert step["rc"] != 0 and "Permission denied" in step["output"], value
    for value in ("0", "500"):
        step = _step(any_record, "oom_write_%s" % value)
        assert step["rc"] == 0 and step["output"].split() == [value], value


def test_docker_stored_gpustacks_settings(any_record):
    for phase, runtime in (("runc", "runc"), ("clamp", "pairserve-clamp")):
        pause = _case(any_record, phase, "pause", "all")["host_config"]
        assert (pause["OomScoreAdj"], pause["Privileged"], pause["IpcMode"], pause["NetworkMode"],
                pause["ShmSize"], pause["RestartPolicy"]["Name"], pause["Runtime"]) == (
            -998, True, "shareable", "host", SHM, "no", runtime)
        assert "no-new-privileges" in pause["SecurityOpt"] and pause["CapAdd"] is None
        replica = _case(any_record, phase, "replica", "all")["host_config"]
        assert replica["Privileged"] is True and replica["ShmSize"] == SHM and replica["OomScoreAdj"] == 0
        assert replica["NetworkMode"] == replica["IpcMode"] and replica["IpcMode"].startswith("container:")
        assert replica["Mounts"] == [{"Type": "bind", "Source": "/tmp/ctp/models", "Target": "/tmp/ctp/models"}]
        assert replica["CapAdd"] is None and replica["Runtime"] == runtime


def test_runc_refuses_exactly_the_oom_score_and_privileged(any_record):
    for name in PAUSE_SINGLE:
        case = _case(any_record, "runc", "pause", name)
        if name in REFUSED:
            assert not case["ok"] and REFUSED[name] in case["error"], name
        else:
            assert case["ok"] and case["inside"]["oom_score_adj"] == "0", name
    # Together, runc stops at the OOM score first.
    pause = _case(any_record, "runc", "pause", "all")
    assert not pause["ok"] and REFUSED["oom_score_adj"] in pause["error"]
    for name in REPLICA_SINGLE:
        case = _case(any_record, "runc", "replica", name)
        assert case["ok"] == (name != "privileged"), name
        if name == "privileged":
            assert REFUSED["privileged"] in case["error"]
    for name in ("all", "gpu"):
        case = _case(any_record, "runc", "replica", name)
        assert not case["ok"] and REFUSED["privileged"] in case["error"], name
    # The replica joined a pause without the two refused settings, so its own settings were still tried.
    holder = any_record["probe"]["phases"]["runc"]["holder"]
    assert holder["running"] and not holder["as_gpustack_asks"]
    assert "--oom-score-adj" not in holder["flags"] and "--privileged" not in holder["flags"]


def test_the_wrapper_makes_every_setting_pass(any_record):
    phase = any_record["probe"]["phases"]["clamp"]
    failed = [c["name"] for c in phase["cases"] if not c["ok"] and c["name"] not in GPU_CASES]
    assert failed == []
    assert phase["holder"]["running"] and phase["holder"]["as_gpustack_asks"]
    assert _step(any_record, "clamp_default_runtime")["output"].split()[0] == "pairserve-clamp"
    # What the wrapper removed, read inside: the OOM score is 0, not -998, and the privileged containers have every
    # capability Docker 20.10 asks for (bits 0-37, up to CAP_AUDIT_READ) but CAP_SYS_RESOURCE.
    pause = _case(any_record, "clamp", "pause", "all")["inside"]
    assert pause["oom_score_adj"] == "0" and pause["NoNewPrivs"] == "1" and pause["shm_kib"] == str(SHM // 1024)
    assert _case(any_record, "clamp", "replica", "all")["inside"]["shm_kib"] == str(SHM // 1024)
    for name in ("pause", "replica"):
        eff = int(_case(any_record, "clamp", name, "all")["inside"]["CapEff"], 16)
        assert eff == (1 << 38) - 1 - (1 << SYS_RESOURCE), name


def test_the_gpu_cases_prove_nothing_here(record):
    # No GPU and no torch on this host: the cases ran but failed, so none reads as a pass. The lent machine's run
    # is what would show the replica on the GPU.
    for phase in ("runc", "clamp"):
        for name in GPU_CASES:
            assert not _case(record, phase, "replica", name)["ok"], (phase, name)
    assert "No module named 'torch'" in _case(record, "clamp", "replica", "gpu")["error"]


def test_the_summary_is_the_cases(any_record):
    probe = any_record["probe"]
    for phase, part in probe["phases"].items():
        assert probe["summary"][phase] == {"%s_%s" % (c["container"], c["name"]): c["ok"] for c in part["cases"]}
        assert (len([c for c in part["cases"] if c["container"] == "pause"]), len(part["cases"])) == (8, 19)


def test_the_trial_left_nothing_behind(any_record):
    for phase in ("runc", "clamp"):
        assert _step(any_record, "%s_after_stop" % phase)["output"].split() == ["0", "0"]
        assert _step(any_record, "%s_after_stop_processes" % phase)["output"] == ""


def test_the_lent_machine_ran_it_with_its_gpu(lent):
    assert lent["lent_machine"]["ran"] is True
    host = _step(lent, "host")["output"].splitlines()
    assert host[0] == lent["host"]["kernel"] and host[1] == "process_api" and "NVIDIA H200" in host[2]


def test_on_the_lent_machine_runc_refuses_the_privileged_gpu_replica(lent):
    case = _case(lent, "runc", "replica", "gpu")
    assert not case["ok"] and REFUSED["privileged"] in case["error"]


def test_on_the_lent_machine_the_gpu_reaches_the_replica_the_way_gpustack_asks_with_the_wrapper(lent):
    # GPUStack's replica settings (privileged, the pause's network and IPC, 10 GiB shm) with the device nodes and
    # driver libraries handed over as nvidia-container-runtime does: torch inside sees the H200 and computes.
    for phase, name in (("clamp", "gpu"), ("clamp", "gpu_unprivileged"), ("runc", "gpu_unprivileged")):
        case = _case(lent, phase, "replica", name)
        assert case["ok"], (phase, name, case["error"])
        out = _step(lent, "%s_replica_%s" % (phase, name))["output"]
        assert re.search(r"^gpu NVIDIA_H200 [0-9.]+ 1$", out, re.M) and out.rstrip().endswith("ctp-ok"), (phase, name, out)
    flags = _case(lent, "clamp", "replica", "gpu")["flags"]
    assert "--privileged" in flags and "--shm-size %d" % SHM in flags and "NVIDIA_VISIBLE_DEVICES=0" in flags
