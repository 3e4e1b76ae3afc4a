"""Every credential rotated on the lab (`python -m lab scenario rotate`, molecule/rotate's side effect): judged from
the plays' logs and task results (the pairserve_results callback's JSON lines), the request loop's summary,
GPUStack's answers through the HTTPS front and the nodes themselves.

Every check depends on the side effect having run: a missing file fails (it never skips).
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import urllib.error
import urllib.request

import pytest
from cryptography import x509

from lab.api import HTTPS_API, LAB_CA, NODE_A, STATE, items, read_keys
from support.lab_suite import load_summary, rc, recap, results
from support.recap import items as loop_items, module_args

DIR = STATE / "rotate"
PLAYS = ("management", "management-rerun", "inference-stage", "inference", "inference-rerun", "token",
         "cert-same-ca", "cert-same-ca-rerun", "cert-both-cas", "cert-new-ca", "cert-old-ca-gone", "cert-rerun")
RERUNS = ("management-rerun", "inference-rerun", "token", "cert-same-ca-rerun", "cert-rerun")
PROBE = {"management": "/v2/users/me", "inference": "/v1/models"}


def status_of(path: str, key: str) -> int:
    req = urllib.request.Request(HTTPS_API + path, headers={"Authorization": "Bearer " + key})
    try:
        with urllib.request.urlopen(req, timeout=30, context=ssl.create_default_context(cafile=str(LAB_CA))) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.mark.parametrize("play", PLAYS)
def test_every_rotation_play_succeeded(play):
    assert rc(DIR / f"{play}.rc") == 0, results(DIR / f"{play}.log").where(status="failed")


@pytest.mark.parametrize("play", RERUNS)
def test_a_second_run_of_each_tag_changes_nothing(play):
    changed = {host: counts["changed"] for host, counts in recap(DIR / f"{play}.log").items()}
    assert set(changed.values()) == {0}, (changed, results(DIR / f"{play}.log").where(changed=True))


def test_the_route_answered_every_request_during_every_rotation():
    summary = load_summary(DIR)
    assert summary["requests"] > 0 and summary["ok"] == summary["requests"], summary
    assert summary["failed"] == 0, summary


@pytest.mark.parametrize("kind", ("management", "inference"))
def test_the_old_key_is_refused_and_the_new_one_accepted(kind):
    old = (DIR / f"old-{kind}-key").read_text().strip()
    new = read_keys()[kind]
    assert old and new and old != new
    assert status_of(PROBE[kind], old) == 401
    assert status_of(PROBE[kind], new) == 200


def test_the_keys_files_are_root_only_and_no_rotation_is_left_half_done():
    listing = subprocess.run(["podman", "exec", NODE_A, "stat", "-c", "%n %a %U", "/etc/pairserve/secrets/management-api-key",
                              "/etc/pairserve/secrets/inference-api-key"], check=True, capture_output=True, text=True)
    assert [line.split()[1:] for line in listing.stdout.splitlines()] == [["600", "root"], ["600", "root"]]
    left = subprocess.run(["podman", "exec", NODE_A, "sh", "-c", "ls /etc/pairserve/secrets/*.next 2>/dev/null || true"],
                          check=True, capture_output=True, text=True).stdout.strip()
    assert left == ""


def test_the_plays_that_read_the_keys_work_with_the_new_ones_without_a_manual_step():
    # verify.yml and status.yml read both keys through role maintenance's connect, after every rotation.
    for play in ("verify", "status"):
        assert rc(DIR / f"{play}.rc") == 0, results(DIR / f"{play}.log").where(status="failed")


def test_no_key_value_appears_in_any_log_or_recorded_result():
    values = [read_keys()[k] for k in ("management", "inference")] + [
        (DIR / f"old-{k}-key").read_text().strip() for k in ("management", "inference")]
    for path in sorted(DIR.glob("*.log")) + sorted(DIR.glob("*.jsonl")):
        text = path.read_text(errors="replace")
        for value in values:
            assert value not in text, f"a key value appears in {path.name}"


def test_the_registration_token_was_checked_and_said_not_replaced():
    assert "The registration token is NOT replaced" in (DIR / "token.log").read_text()
    # The check's answer per node is its assert's message (printed only at -v; the recorded result keeps it).
    run = results(DIR / "token.log")
    said = {r["_host"]: r.get("msg") for r in run.where(action="ansible.builtin.assert",
                                                        task="Stop when the worker would fail its next start")}
    assert said == {host: f"{host}: the worker configuration holds the cluster's registration token."
                    for host in ("node-a", "node-b")}, said


def served_certificate() -> x509.Certificate:
    host, port = HTTPS_API.split("//", 1)[1].rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(LAB_CA))
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))


def test_the_front_serves_the_last_certificate_from_the_new_ca():
    served = served_certificate()
    assert served == x509.load_pem_x509_certificate((STATE / "tls" / "gpustack.crt").read_bytes())
    assert served.issuer.rfc4514_string() == "CN=pairserve lab CA (next)"


@pytest.mark.parametrize("play", ("cert-same-ca", "cert-new-ca"))
def test_nginx_was_reloaded_not_restarted_and_the_workers_left_alone_for_a_new_certificate(play):
    run = results(DIR / f"{play}.log")
    reloaded = run.where(host="node-a", task="Reload nginx", status="ok", changed=True)
    assert reloaded, run.where(task="Reload nginx")
    # systemd_service reports state "started" for a reload too: what was asked is in its arguments.
    started = [r for r in run.records if r.get("name") == "nginx" and r.get("changed")
               and module_args(r).get("state") in ("started", "restarted")]
    assert not started, started
    assert not run.where(task="Restart the GPUStack worker", changed=True)


@pytest.mark.parametrize("play", ("cert-both-cas", "cert-old-ca-gone"))
def test_a_ca_change_restarted_each_worker_drained_one_node_at_a_time(play):
    run = results(DIR / f"{play}.log")
    restarted = [r["_host"] for r in run.where(task="Restart the GPUStack worker", changed=True)]
    assert sorted(restarted) == ["node-a", "node-b"], run.where(task="Restart the GPUStack worker")
    # The drain and the restore are role maintenance's weights.yml (gpustack_route with drain, then with targets).
    restarts = {id(r) for r in run.where(task="Restart the GPUStack worker", changed=True)}
    weights = {id(r) for r in run.where(task_file="maintenance/tasks/weights.yml", action="pairserve.llm.gpustack_route",
                                        changed=True)}
    steps = []
    for record in run.records:
        if id(record) in restarts:
            steps.append((record["_host"], "restart"))
        elif id(record) in weights:
            drain = any(module_args(item).get("drain") for item in loop_items(record))
            steps.append((record["_host"], "drain" if drain else "restore"))
    # One node at a time: drained, restarted, given its weight back, before the next node is drained.
    assert steps == [(host, step) for host in ("node-a", "node-b") for step in ("drain", "restart", "restore")], steps
    # The server's certificate did not change in these runs.
    assert not run.where(task="Reload nginx", changed=True)


def test_the_workers_are_ready_after_every_rotation():
    key = read_keys()["management"]
    workers = {w["name"]: w["state"] for w in items("/v2/workers", key)}
    assert workers and set(workers.values()) == {"ready"}, workers


def test_status_shows_the_days_left_on_the_new_certificate_and_ca():
    assert rc(DIR / "status.rc") == 0
    text = (DIR / "status.log").read_text()
    assert "HTTPS certificate CN=pairserve lab GPUStack server:" in text
    assert "HTTPS CA CN=pairserve lab CA (next):" in text
    assert "HTTPS CA CN=pairserve lab CA:" not in text  # the old CA is gone from the workers' trust
