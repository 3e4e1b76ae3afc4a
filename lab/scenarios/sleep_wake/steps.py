"""The controller (docs/controller.md) turned on in sleep mode with a short idle time: node-b's replica is put to
sleep, a request is answered while it sleeps, a burst of long prompts wakes it and the wake time is measured
(lab/sleep_wake.py); then the controller is turned off again.

Leaves in .lab/sleep_wake/: controller.yml (the settings the play ran with), enable.* and disable.* (the plays),
result.json (the demonstration's figures), demo.rc (only when the demonstration failed: its exit status) and
controller.journal (the controller's journal of this run).
"""

from __future__ import annotations

from pathlib import Path

from lab import host
from lab.scenarios import Scenario

# The lab's settings: sleep after 30 s idle (not 30 min), look every 2 s, wake when node-a has 2 requests waiting;
# the speeds are the lab's CPU replicas' (docs/lab.md: ~250 tok/s each at 4 sequences).
SETTINGS = """\
pairserve_controller_enabled: true
pairserve_controller_mode: sleep
pairserve_controller_sleep_replica: qwen-node-b
pairserve_controller_idle_minutes: 0.5
pairserve_controller_drain_grace: 5
pairserve_controller_wake_waiting: 2
pairserve_controller_wake_prompt_tokens: 6000
pairserve_controller_interval: 2
pairserve_controller_hold: 4
pairserve_controller_wake_timeout: 600
pairserve_controller_replicas:
  - {name: qwen-node-a, prefill_tps: 2000, decode_tps: 250}
  - {name: qwen-node-b, prefill_tps: 2000, decode_tps: 245}
"""


def node_now() -> str:
    """node-a's clock, as journalctl --since reads it."""
    return host.node_exec("node-a", "date", "+%Y-%m-%d %H:%M:%S").stdout.strip()


def save_journal(path: Path, since: str) -> None:
    """The controller's journal on node-a from `since` on (the journal keeps earlier runs: this run's lines only,
    so the suite cannot pass on an older run's log); whatever journalctl said, even when it failed."""
    proc = host.node_exec("node-a", "journalctl", "-u", "pairserve-controller", "--since", since, "--no-pager",
                          "-o", "short-iso", check=False)
    Path(path).write_text((proc.stdout or "") + (proc.stderr or ""), encoding="utf-8")


def run(scenario: Scenario) -> None:
    """The controller on in sleep mode, the demonstration, its journal kept, the controller off."""
    scenario.dir.mkdir(parents=True, exist_ok=True)
    # The controller's venv installs from its wheels (not part of the lab's start): built once.
    host.run(["bash", "tools/build_controller_wheels.sh"])
    scenario.prepare("demo.rc", "result.json")
    settings = scenario.path("controller.yml")
    settings.write_text(SETTINGS, encoding="utf-8")
    scenario.say("the controller on (sleep mode, 30 s idle)")
    since = node_now()
    scenario.play("enable", "playbooks/controller.yml", "-e", "@%s" % settings)
    demo = host.run([host.PYTHON, "-m", "lab.sleep_wake", "--dir", scenario.dir,
                     "--result", scenario.path("result.json")], check=False)
    if demo.returncode != 0:
        scenario.path("demo.rc").write_text("%d\n" % demo.returncode, encoding="utf-8")
    save_journal(scenario.path("controller.journal"), since)
    scenario.say("the controller off again")
    scenario.play("disable", "playbooks/controller.yml", "-e", "pairserve_controller_enabled=false")
