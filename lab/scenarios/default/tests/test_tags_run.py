"""`site.yml --tags checkpoint` on the converged lab runs the checkpoint step and what it needs, nothing else, and
changes nothing (the lab is converged).

`python -m lab test` runs exactly this after its check-mode phase and names the log in PAIRSERVE_TAGS_LOG; run
alone, the test runs it itself. What may run is read from `ansible-playbook --list-tasks --tags checkpoint` on the
same inventory (the tasks tagged `always` and the checkpoint role's), so the test follows the playbooks, not a copy.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from lab.api import REPO

INVENTORY = "lab/inventory/hosts.yml"
ROLE = "pairserve.llm.checkpoint : "


def playbook(*args):
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", INVENTORY, "site.yml", *args],
                          cwd=REPO, capture_output=True, text=True, check=False, timeout=1200,
                          env=dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return proc.stdout


def test_tags_checkpoint_runs_the_checkpoint_step_only_and_changes_nothing():
    log = os.environ.get("PAIRSERVE_TAGS_LOG")
    output = Path(log).read_text(encoding="utf-8", errors="replace") if log else playbook("--tags", "checkpoint")
    listed = set(re.findall(r"^ {6}(\S.*?)\tTAGS: ", playbook("--list-tasks", "--tags", "checkpoint"), re.M))
    ran = re.findall(r"^TASK \[(.+?)\] \*+$", output, re.M)
    assert any(name.startswith(ROLE + "Remove the persisted 2048-token truncation") for name in ran), ran
    # The checkpoint role's own includes are named at run time only; anything else must be in the listing.
    # Facts are gathered by the preflight play whatever the tags (read-only; --list-tasks does not list it).
    others = sorted({name for name in ran if not name.startswith(ROLE) and name not in listed | {"Gathering Facts"}})
    assert not others, "ran outside --tags checkpoint: %s" % others
    # Each role's argument check runs whatever the tags (Ansible tags it always); nothing else of these roles.
    assert not any(name.startswith(("pairserve.llm.replica : ", "pairserve.llm.route : ",
                                    "pairserve.llm.gpustack_worker : Install"))
                   and "Validating arguments against arg spec" not in name for name in ran), ran
    recap = dict(re.findall(r"^(node-[ab])\s*:.*?changed=(\d+)", output, re.M))
    assert set(recap) == {"node-a", "node-b"} and set(recap.values()) == {"0"}, recap
