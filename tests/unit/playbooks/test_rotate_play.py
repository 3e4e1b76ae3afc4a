"""playbooks/rotate.yml's tags: each tag runs its credential's plays and nothing of the others; a run without a tag,
or a key tag without pairserve_rotate_before, or with a time in the future, stops before anything is read or
changed (no GPUStack runs here: the guard comes first; the module's refusal of a future time is checked with a
closed port, where a later step would fail differently).

The rotations themselves: tests/integration/gpustack/test_rotation.py (keys, against the session's GPUStack) and the
lab scenario `rotate` (lab/scenarios/rotate/tests, every tag under the request loop)."""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys

import pytest

from support.ansible_runner import REPO, run_playbook

ROTATE = REPO / "playbooks" / "rotate.yml"
TAGS = ("management_key", "inference_key", "registration_token", "certificate")
PLAYS = {
    "management_key": {"Rotate the management key"},
    "inference_key": {"Rotate the inference key"},
    "registration_token": {"Read the workers' registration token", "Check that each worker holds the cluster's registration token"},
    "certificate": {"Check the HTTPS certificate before anything changes", "The workers trust the server's CA first",
                    "Then the server's certificate"},
}


def plays_with_tasks(*args: str) -> set[str]:
    """The plays in which `--list-tasks` lists a task that is not tagged always."""
    run = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "inventory/example/hosts.yml",
                          str(ROTATE), "--list-tasks", *args], cwd=REPO, capture_output=True, text=True, check=False,
                         timeout=300, env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1"))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    plays, play = set(), None
    for line in run.stdout.splitlines():
        head = re.match(r"^  play #\d+ \([^)]*\): (.*?)\tTAGS:", line)
        if head:
            play = head.group(1)
            continue
        task = re.match(r"^ {6}(\S.*?)\tTAGS: \[(.*)\]$", line)
        if task and "always" not in {t.strip() for t in task.group(2).split(",")}:
            plays.add(play)
    return plays


@pytest.mark.parametrize("tag", TAGS)
def test_each_tag_runs_only_its_credentials_plays(tag):
    assert plays_with_tasks("--tags", tag) == PLAYS[tag]


def test_every_play_but_the_guard_belongs_to_one_tag():
    assert plays_with_tasks() == set().union(*PLAYS.values())


def inventory(tmp_path):
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps({"all": {"children": {"gpustack_server": {"hosts": {"gs": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        # Nothing answers here: a step past the guard would fail on the connection, not with the guard's message.
        "pairserve_gpustack_api_port": 9, "pairserve_gpustack_admin_password": "unused-Passw0rd",
        "pairserve_gpustack_secrets_dir": str(tmp_path / "secrets")}}}, "gpu_nodes": {"hosts": {}}}}}))
    return path


def test_a_run_without_a_tag_stops_naming_the_tags(tmp_path):
    run = run_playbook(ROTATE, inventory=inventory(tmp_path), timeout=300)
    assert run.rc == 2, run.stdout[-3000:]
    assert "rotates only the credentials named with --tags, one or more of management_key, inference_key, " \
           "registration_token, certificate (asked: all)" in run.stdout, run.stdout[-3000:]
    assert [r["_task"] for r in run.results if not r.get("skipped")][-1] == "Stop unless a credential is named by its tag"


def test_a_key_tag_without_a_time_stops_naming_the_variable(tmp_path):
    run = run_playbook(ROTATE, inventory=inventory(tmp_path), env={"ANSIBLE_RUN_TAGS": "inference_key"}, timeout=300)
    assert run.rc == 2, run.stdout[-3000:]
    assert "pairserve_rotate_before, which is not set" in run.stdout, run.stdout[-3000:]
    assert not (tmp_path / "secrets").exists()


def test_a_time_in_the_future_is_refused_before_anything_changes(tmp_path):
    later = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    run = run_playbook(ROTATE, inventory=inventory(tmp_path), env={"ANSIBLE_RUN_TAGS": "inference_key"},
                       extra_vars={"pairserve_rotate_before": later}, timeout=300)
    assert run.rc == 2, run.stdout[-3000:]
    assert "in the future: every run until then would rotate the key again" in run.stdout, run.stdout[-3000:]
    assert not (tmp_path / "secrets").exists()


def test_a_certificate_the_ca_does_not_sign_stops_before_any_node_changes(tmp_path):
    from cryptography import x509  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives import hashes, serialization  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives.asymmetric import ec  # pylint: disable=import-outside-toplevel
    from cryptography.x509.oid import NameOID  # pylint: disable=import-outside-toplevel

    def self_signed(cn, ca):
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=90))
                .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
                .add_extension(x509.SubjectAlternativeName([x509.DNSName("node-a")]), critical=False)
                .sign(key, hashes.SHA256()))
        pem = serialization.PrivateFormat.PKCS8
        return (cert.public_bytes(serialization.Encoding.PEM).decode(),
                key.private_bytes(serialization.Encoding.PEM, pem, serialization.NoEncryption()).decode())

    cert, key = self_signed("node-a", ca=False)
    (tmp_path / "other-ca.crt").write_text(self_signed("a CA that signed nothing here", ca=True)[0])
    hosts = inventory(tmp_path)
    data = json.loads(hosts.read_text())
    data["all"]["children"]["gpustack_server"]["hosts"]["gs"].update(
        pairserve_gpustack_tls_cert=cert, pairserve_gpustack_tls_key=key, pairserve_gpustack_server_address="node-a",
        pairserve_gpustack_tls_ca_file=str(tmp_path / "other-ca.crt"), pairserve_gpustack_tls_dir=str(tmp_path / "tls"))
    hosts.write_text(json.dumps(data))
    run = run_playbook(ROTATE, inventory=hosts, env={"ANSIBLE_RUN_TAGS": "certificate"}, timeout=300)
    assert run.rc == 2, run.stdout[-3000:]
    stopped = run.by_task["Stop on a certificate that cannot serve this node"]
    assert stopped["_status"] == "failed" and "pairserve_gpustack_tls_ca_file" in stopped["msg"], stopped
    assert key not in run.stdout + json.dumps(run.results)
    assert not (tmp_path / "tls").exists()
    assert not [r for r in run.results if r["_task"] in ("Write the certificate", "Restart the GPUStack worker")]
