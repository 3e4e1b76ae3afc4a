"""Every credential of playbooks/rotate.yml rotated under the request loop, through the HTTPS front.

The loop stands for a client the operator moves: it reads its key file and its CA file before each request
(lab/route_load.py --follow-key-file --ca-file), and the scenario moves them as the how-to says
(docs/how-to/rotate-credentials.md). Each tag runs twice; the second run must change nothing. The old keys are kept
root-only in the scenario's directory for the suite's 401 checks (removed with .lab/ by `python -m lab down`).

Every file a reader follows (the lab's CA and server certificate in .lab/tls/, the loop's key and CA) is replaced
whole (written beside, then renamed), and the keys are root-only from their first byte.

Leaves in .lab/rotate/: each play's .log/.jsonl/.rc (management, management-rerun, inference-stage, inference,
inference-rerun, token, cert-same-ca, cert-same-ca-rerun, cert-both-cas, cert-new-ca, cert-old-ca-gone, cert-rerun,
verify, status), old-management-key and old-inference-key (root-only), ca.crt (the loop's CA file) and load.json (the
request loop's summary).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from lab import host
from lab.api import HTTPS_API
from lab.scenarios import Scenario

BOOK = "playbooks/rotate.yml"
TLS = host.STATE / "tls"


def copy(source: Path, target: Path, mode: int | None = None) -> None:
    """`source` over `target`, atomically (`mode` 0o600 for a key)."""
    host.atomic_write(target, Path(source).read_text(), mode=mode)


def run(scenario: Scenario) -> None:
    out = scenario.dir
    scenario.prepare("*.rc", "*.jsonl", "*.log", "*.json")
    for kind in ("management", "inference"):
        host.write_secret(out / ("old-%s-key" % kind),
                          host.node_read("node-a", "/etc/pairserve/secrets/%s-api-key" % kind))
    copy(TLS / "ca.crt", out / "ca.crt")
    # Every key made before this time is replaced (the converge made them earlier).
    before = "pairserve_rotate_before=" + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    time.sleep(1)
    load = scenario.load().start(HTTPS_API, "--follow-key-file", "--ca-file", out / "ca.crt")
    try:
        scenario.say("the management key (the controller's key file moved, restarted through its handler)")
        scenario.play("management", BOOK, "--tags", "management_key", "-e", before)
        scenario.play("management-rerun", BOOK, "--tags", "management_key", "-e", before)

        scenario.say("the inference key, the loop (a client outside the collection) moved while both keys serve")
        scenario.play("inference-stage", BOOK, "--tags", "inference_key", "-e", before,
                      "-e", "pairserve_rotation_retire=false")
        host.write_secret(out / "key", host.node_read("node-a", "/etc/pairserve/secrets/inference-api-key"))
        scenario.play("inference", BOOK, "--tags", "inference_key", "-e", before)
        scenario.play("inference-rerun", BOOK, "--tags", "inference_key", "-e", before)

        scenario.say("the registration token (GPUStack 2.2.3 cannot replace it: checked, not rotated)")
        scenario.play("token", BOOK, "--tags", "registration_token")

        scenario.say("a new certificate from the same CA (nginx reloaded, the workers untouched)")
        host.run([host.PYTHON, "-m", "lab.tls", "--renew", TLS])
        scenario.play("cert-same-ca", BOOK, "--tags", "certificate")
        scenario.play("cert-same-ca-rerun", BOOK, "--tags", "certificate")

        scenario.say("a new CA in three runs (both CAs trusted, the new certificate, the new CA alone)")
        host.run([host.PYTHON, "-m", "lab.tls", "--next-ca", TLS])
        following = TLS / "next"
        # 1. Both CAs trusted (the lab's CA file, which the plays install on the nodes, and the loop's).
        host.atomic_write(TLS / "ca.crt", (TLS / "ca.crt").read_text() + (following / "ca.crt").read_text())
        copy(TLS / "ca.crt", out / "ca.crt")
        scenario.play("cert-both-cas", BOOK, "--tags", "certificate")
        # 2. The server certificate from the new CA.
        copy(following / "gpustack.key", TLS / "gpustack.key", mode=0o600)
        copy(following / "gpustack.crt", TLS / "gpustack.crt")
        scenario.play("cert-new-ca", BOOK, "--tags", "certificate")
        # 3. The new CA alone (with its key, for the next renewal).
        copy(following / "ca.crt", out / "ca.crt")
        copy(following / "ca.crt", TLS / "ca.crt")
        copy(following / "ca.key", TLS / "ca.key", mode=0o600)
        shutil.rmtree(following)
        scenario.play("cert-old-ca-gone", BOOK, "--tags", "certificate")
        scenario.play("cert-rerun", BOOK, "--tags", "certificate")
    finally:
        load.stop()

    scenario.say("verify.yml and status.yml read the new keys (days left on the new certificate and CA)")
    scenario.play("verify", "playbooks/verify.yml")
    scenario.play("status", "playbooks/status.yml")
