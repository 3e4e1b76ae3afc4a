#!/usr/bin/env python
"""Can the lent GPU machine run the worker's container runtime? (issue 41 part 2's probe; docs/gpu-proof.md)

    container_probe.py static --out FILE                  what the VM offers: cgroups, overlay, fuse, namespaces,
                                                          netfilter, the NVIDIA device nodes and driver libraries
    container_probe.py docker --bin DIR --out FILE        Debian 12's docker.io 20.10.24, containerd 1.6.20 and
                                                          runc 1.1.5 (binaries from their .debs, in DIR/bin and
                                                          DIR/lib): dockerd started as a plain process, an image
                                                          imported from a local tar, a container run, then one
                                                          with the GPU handed over as nvidia-container-runtime
                                                          does (device nodes, driver libraries bind-mounted)

DIR (made on the development machine, whose reachable mirror is Debian's):
    apt-get download docker.io containerd runc tini busybox-static libdevmapper1.02.1 libseccomp2
    for f in *.deb; do dpkg -x "$f" x; done
    mkdir -p b/bin b/lib; cp x/usr/sbin/dockerd x/usr/bin/docker x/usr/bin/containerd x/usr/bin/containerd-shim-runc-v2 \
      x/usr/sbin/runc x/bin/busybox b/bin/; cp x/usr/bin/tini-static b/bin/docker-init
    cp -a x/lib/x86_64-linux-gnu/libdevmapper* x/usr/lib/x86_64-linux-gnu/libseccomp* b/lib/
    tar -C b -cf - . | xz -9e > docker-bin.tar.xz      # 36 MiB, one carry

Every step is a shell command whose rc and output are recorded as they came; nothing is judged here but the
summary's yes/no per question, read from those outputs. Run as root on the lent machine (it mounts, makes a
cgroup and starts dockerd under /tmp/ctp and stops everything it started, by PID).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

WORK = Path("/tmp/ctp")


def sh(steps, name, command, timeout=20, env=None):
    """Run one shell command and keep its rc and output (last 6,000 characters)."""
    started = time.monotonic()
    try:
        proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=timeout,
                              env=env, check=False)
        out, rc = (proc.stdout + proc.stderr), proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = ((exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or ""))
        out, rc = out + "\n<timeout after %ds>" % timeout, 124
    steps.append({"name": name, "command": command, "rc": rc, "seconds": round(time.monotonic() - started, 2),
                  "output": out[-6000:]})
    return rc, out


STATIC = [
    ("kernel", "uname -a; cat /etc/os-release | head -4; nproc"),
    ("pid1", "cat /proc/1/comm; tr '\\0' ' ' < /proc/1/cmdline; echo; ls -d /run/systemd/system 2>&1"),
    ("cgroup_fs", "stat -fc %T /sys/fs/cgroup; cat /proc/self/cgroup; mount | grep -i cgroup"),
    ("cgroup_controllers", "cat /sys/fs/cgroup/cgroup.controllers; echo ---; cat /sys/fs/cgroup/cgroup.subtree_control"),
    ("cgroup_mkdir", "mkdir /sys/fs/cgroup/ctp-probe && cat /sys/fs/cgroup/ctp-probe/cgroup.controllers"
                     " && ls /sys/fs/cgroup/ctp-probe | tr '\\n' ' '; rc=$?; rmdir /sys/fs/cgroup/ctp-probe; exit $rc"),
    ("cgroup_v1_devices", "[ -d /sys/fs/cgroup/devices ] || { echo 'no cgroup v1 devices hierarchy'; exit 1; }; "
                          "mkdir /sys/fs/cgroup/devices/ctp-probe && head -3 /sys/fs/cgroup/devices/ctp-probe/devices.list; "
                          "rc=$?; rmdir /sys/fs/cgroup/devices/ctp-probe; exit $rc"),
    ("filesystems", "grep -E 'overlay|fuse|cgroup|tmpfs|ext4|xfs|btrfs' /proc/filesystems"),
    ("mounts", "df -T / /tmp /var/lib 2>&1; mount | grep -E ' / | /tmp | /var' | head"),
    ("overlay_mount", "d=/tmp/ctp/ov; mkdir -p $d/l $d/u $d/w $d/m && echo lower > $d/l/f && "
                      "mount -t overlay overlay -o lowerdir=$d/l,upperdir=$d/u,workdir=$d/w $d/m && "
                      "echo upper >> $d/m/f && cat $d/m/f && ls $d/u; rc=$?; umount $d/m 2>/dev/null; exit $rc"),
    ("fuse", "ls -la /dev/fuse 2>&1; command -v fuse-overlayfs fusermount fusermount3 2>&1"),
    ("userns", "cat /proc/sys/user/max_user_namespaces; cat /proc/sys/kernel/unprivileged_userns_clone 2>&1; "
               "cat /proc/sys/kernel/apparmor_restrict_unprivileged_userns 2>&1; unshare -U -r id"),
    ("namespaces", "for ns in -m -u -i -n '-p -f --mount-proc' -C; do unshare $ns true && echo \"unshare $ns ok\" "
                   "|| echo \"unshare $ns FAILED\"; done"),
    ("caps_seccomp", "grep -E 'Cap(Eff|Bnd)|Seccomp|NoNewPrivs' /proc/self/status; "
                     "ls /sys/kernel/security 2>&1; cat /sys/kernel/security/lsm 2>&1"),
    ("kernel_config", "(zcat /proc/config.gz 2>/dev/null || cat /boot/config-$(uname -r) 2>/dev/null) | grep -E "
                      "'^CONFIG_(OVERLAY_FS|FUSE_FS|USER_NS|PID_NS|NET_NS|CGROUPS|CGROUP_BPF|CGROUP_DEVICE|MEMCG|"
                      "CGROUP_PIDS|CGROUP_FREEZER|VETH|BRIDGE|BRIDGE_NETFILTER|NF_NAT|NETFILTER_XT_MATCH_ADDRTYPE|"
                      "IP_NF_IPTABLES|NF_TABLES|SECCOMP|SECCOMP_FILTER|BPF_SYSCALL|MODULES)=' "
                      "|| echo 'no kernel config readable (/proc/config.gz, /boot/config-*)'"),
    ("modules", "cat /proc/modules 2>&1 | cut -d' ' -f1 | tr '\\n' ' '; echo; ls /lib/modules 2>&1"),
    ("bpf", "ls /sys/fs/bpf 2>&1 | head -3; cat /proc/sys/kernel/unprivileged_bpf_disabled 2>&1"),
    ("network", "ls /sys/class/net; cat /proc/sys/net/ipv4/ip_forward; command -v ip iptables nft iptables-legacy "
                "2>&1; ip -br link 2>&1 | head"),
    ("runtimes_present", "for b in docker dockerd podman containerd runc crun conmon nvidia-ctk "
                         "nvidia-container-cli nvidia-container-runtime; do printf '%s: ' $b; "
                         "command -v $b || echo absent; done"),
    ("packages", "dpkg-query -W -f='${Package} ${Version} ${Status}\\n' iptables libdevmapper1.02.1 libseccomp2 "
                 "libsystemd0 libcap2 libgcrypt20 uidmap fuse-overlayfs slirp4netns 2>&1"),
    ("apt_sources", "ls /var/lib/apt/lists | head -5; cat /etc/apt/sources.list.d/*.sources 2>/dev/null | "
                    "grep -E '^(URIs|Suites)' | head -4"),
    ("nvidia_devices", "ls -la /dev/nvidia* /dev/dri 2>&1; cat /proc/driver/nvidia/version 2>&1"),
    ("nvidia_libraries", "echo LD_LIBRARY_PATH=$LD_LIBRARY_PATH; ldconfig -p | grep -E "
                         "'libcuda\\.so|libnvidia-ml|libnvidia-ptxjitcompiler|libnvidia-nvvm|libcudadebugger' ; "
                         "command -v nvidia-smi; ls /usr/local/nvidia 2>&1; ls /usr/local/nvidia/lib64 2>&1 | head -40"),
    ("nvidia_cdi", "ls /etc/cdi /var/run/cdi 2>&1"),
]


def static(args):
    steps = []
    WORK.mkdir(parents=True, exist_ok=True)
    for name, command in STATIC:
        sh(steps, name, command)
    shutil.rmtree(WORK / "ov", ignore_errors=True)
    by = {s["name"]: s for s in steps}
    summary = {
        "cgroup_v2": by["cgroup_fs"]["output"].startswith("cgroup2fs"),
        "cgroup_mkdir": by["cgroup_mkdir"]["rc"] == 0,
        "cgroup_v1_devices": by["cgroup_v1_devices"]["rc"] == 0,
        "overlay_mount": by["overlay_mount"]["rc"] == 0,
        "dev_fuse": "/dev/fuse" in by["fuse"]["output"] and "No such file" not in by["fuse"]["output"],
        "userns": by["userns"]["rc"] == 0,
        "systemd_pid1": by["pid1"]["output"].startswith("systemd"),
        "nvidia_device_nodes": "/dev/nvidiactl" in by["nvidia_devices"]["output"],
    }
    return {"mode": "static", "summary": summary, "steps": steps}


def _wait_socket(sock, proc, limit=40):
    for dummy in range(limit * 2):
        if Path(sock).exists() or proc.poll() is not None:
            break
        time.sleep(0.5)
    return Path(sock).exists()


def docker(args):
    steps = []
    bindir = Path(args.bin).resolve()
    root = WORK / "docker"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    env = dict(os.environ)
    env["PATH"] = "%s:%s" % (bindir / "bin", env.get("PATH", ""))
    sh(steps, "versions", "dockerd --version; docker --version; containerd --version; runc --version; "
                          "docker-init --version", env=env)
    rc, out = sh(steps, "ldd_dockerd", "ldd $(command -v dockerd); ldd $(command -v runc)", env=env)
    if "not found" in out:  # the .debs' own libdevmapper / libseccomp, for what the host lacks
        env["LD_LIBRARY_PATH"] = "%s:%s" % (bindir / "lib", env.get("LD_LIBRARY_PATH", ""))
        sh(steps, "ldd_with_carried_libs", "ldd $(command -v dockerd) | grep -E 'devmapper|not found'; "
                                           "ldd $(command -v runc) | grep -E 'seccomp|not found'", env=env)
    sock = root / "docker.sock"
    denv = dict(env, DOCKER_HOST="unix://%s" % sock)
    daemon = None
    result = {"mode": "docker", "steps": steps, "summary": {}}
    for driver in ("overlay2", "vfs"):
        log = open(root / ("dockerd-%s.log" % driver), "w", encoding="utf-8")  # pylint: disable=consider-using-with
        cmd = ["dockerd", "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
               "--pidfile", str(root / "docker.pid"), "-H", "unix://%s" % sock, "--iptables=false",
               "--ip6tables=false", "--bridge=none", "--ip-masq=false", "--userland-proxy=false",
               "--storage-driver", driver, "--exec-opt", "native.cgroupdriver=cgroupfs",
               "--cgroup-parent", "ctp-docker"]
        started = time.monotonic()
        daemon = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,  # pylint: disable=consider-using-with
                                  start_new_session=True)
        up = _wait_socket(sock, daemon)
        if up:
            rc, out = sh(steps, "docker_version_%s" % driver, "docker version", env=denv)
            up = rc == 0
        steps.append({"name": "dockerd_%s" % driver, "command": " ".join(cmd), "rc": daemon.poll(),
                      "seconds": round(time.monotonic() - started, 2), "up": up,
                      "output": (root / ("dockerd-%s.log" % driver)).read_text(errors="replace")[-6000:]})
        if up:
            result["summary"]["storage_driver"] = driver
            break
        _stop(daemon)
        daemon = None
    result["summary"]["dockerd_up"] = daemon is not None
    if daemon is None:
        return result
    try:
        sh(steps, "docker_info", "docker info", env=denv)
        # Two images made here from local files, no registry: busybox alone, and an empty root whose /usr is the
        # host's (bind-mounted read-only at run time: the host's own Python, torch and driver libraries), the way
        # issue 41 part 2 would make a runner image from the host's Python.
        rc, out = sh(steps, "import_busybox",
                     "r=%s/rootfs-bb; mkdir -p $r/bin $r/tmp $r/proc $r/sys $r/dev $r/etc && cp %s/bin/busybox $r/bin/ && "
                     "ln -sf busybox $r/bin/sh && tar -C $r -c . | docker import - ctp/busybox:1" % (root, bindir),
                     timeout=60, env=denv)
        rc, out = sh(steps, "run_busybox", "docker run --rm --network none ctp/busybox:1 /bin/busybox sh -c "
                                           "'echo hello from a container; cat /proc/self/cgroup; id'",
                     timeout=60, env=denv)
        result["summary"]["container_runs"] = rc == 0 and "hello from a container" in out
        sh(steps, "import_hostusr",
           "r=%s/rootfs-usr; mkdir -p $r/usr $r/etc $r/tmp $r/proc $r/sys $r/dev $r/root && "
           "for l in bin sbin lib lib64; do ln -sfn usr/$l $r/$l; done && "
           "tar -C $r -c . | docker import - ctp/hostusr:1" % root, timeout=60, env=denv)
        devices = " ".join("--device %s" % d for d in sorted(str(p) for p in Path("/dev").glob("nvidia*"))
                           if Path(d).is_char_device())
        smi = shutil.which("nvidia-smi") or "/usr/bin/nvidia-smi"
        # The host's Python and torch, wherever they live: /usr, and any prefix outside it, read-only.
        torch_spec = importlib.util.find_spec("torch")
        prefixes = {sys.prefix, sys.base_prefix, str(Path(shutil.which("python3") or sys.executable).resolve().parents[1])}
        if torch_spec and torch_spec.origin:
            prefixes.add(str(Path(torch_spec.origin).parents[1]))
        binds = " ".join("-v %s:%s:ro" % (d, d) for d in sorted(prefixes) if not d.startswith("/usr"))
        path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
        gpu_run = ("docker run --rm --network host %s -v /usr:/usr:ro %s -v /etc/ld.so.cache:/etc/ld.so.cache:ro "
                   "-e LD_LIBRARY_PATH=%s -e PATH=%s ctp/hostusr:1 "
                   % (devices, binds, os.environ.get("LD_LIBRARY_PATH", ""), path))
        result["gpu_run"] = gpu_run
        rc, out = sh(steps, "gpu_nvidia_smi", gpu_run + "%s -L" % smi, timeout=60, env=denv)
        result["summary"]["gpu_nvidia_smi"] = rc == 0 and "GPU 0" in out
        rc, out = sh(steps, "gpu_torch", gpu_run + "%s -c \"import torch; x = torch.arange(1 << 20, device='cuda', "
                     "dtype=torch.float64); print(torch.cuda.get_device_name(0), float(x.sum()), "
                     "torch.cuda.is_available())\"" % sys.executable, timeout=120, env=denv)
        result["summary"]["gpu_torch"] = rc == 0 and "549755289600.0" in out
        rc, out = sh(steps, "gpu_without_devices", "docker run --rm --network host -v /usr:/usr:ro "
                     "-v /etc/ld.so.cache:/etc/ld.so.cache:ro ctp/hostusr:1 %s -L" % smi, timeout=60, env=denv)
        result["summary"]["gpu_hidden_without_devices"] = rc != 0
    finally:
        sh(steps, "cleanup_containers", "docker ps -aq | xargs -r docker rm -f", timeout=30, env=denv)
        _stop(daemon)
        # dockerd leaves its default netns mount and the cgroup parent's directories: take them away too.
        sh(steps, "after_stop", "grep ' /tmp/ctp' /proc/mounts | cut -d' ' -f2 | sort -r | xargs -r -n1 umount; "
                                "find /sys/fs/cgroup -depth -type d -path '*ctp-docker*' -exec rmdir {} \\; ; "
                                "grep -c ' /tmp/ctp' /proc/mounts; find /sys/fs/cgroup -type d -name 'ctp-docker*' | wc -l")
    return result


def _stop(proc):
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("static")
    p.add_argument("--out", required=True)
    p = sub.add_parser("docker")
    p.add_argument("--bin", required=True)
    p.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    started = time.monotonic()
    result = {"static": static, "docker": docker}[args.cmd](args)
    result["seconds"] = round(time.monotonic() - started, 1)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
