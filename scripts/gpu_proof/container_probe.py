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
    container_probe.py gpustack-specs --bin DIR --wrapper W --out FILE
                                                          the containers GPUStack 2.2.3 / gpustack-runtime 0.2.1
                                                          ask Docker for (pause, replica, health sidecar): each
                                                          setting alone, all together, the replica with the GPU;
                                                          first on runc, then with the OCI runtime wrapper W
                                                          (lab/stand_ins/runc-no-negative-oom) as dockerd's default
                                                          runtime; plus the root's capabilities, decoded, and
                                                          whether it may lower an OOM score

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
import re
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


def _docker_env(steps, bindir):
    """The environment dockerd and the docker CLI run with: the carried binaries first, their libraries if needed."""
    env = dict(os.environ)
    env["PATH"] = "%s:%s" % (bindir / "bin", env.get("PATH", ""))
    sh(steps, "versions", "dockerd --version; docker --version; containerd --version; runc --version; "
                          "docker-init --version", env=env)
    rc, out = sh(steps, "ldd_dockerd", "ldd $(command -v dockerd); ldd $(command -v runc)", env=env)
    if "not found" in out:  # the .debs' own libdevmapper / libseccomp, for what the host lacks
        env["LD_LIBRARY_PATH"] = "%s:%s" % (bindir / "lib", env.get("LD_LIBRARY_PATH", ""))
        sh(steps, "ldd_with_carried_libs", "ldd $(command -v dockerd) | grep -E 'devmapper|not found'; "
                                           "ldd $(command -v runc) | grep -E 'seccomp|not found'", env=env)
    return env


def _start_dockerd(steps, root, env, label="", extra=()):
    """dockerd as a plain process (own socket, data and exec roots, no iptables, no bridge); overlay2, else vfs.

    Returns (process or None, storage driver or None); each try is a step named dockerd[_label]_<driver>.
    """
    sock = root / "docker.sock"
    denv = dict(env, DOCKER_HOST="unix://%s" % sock)
    tag = "%s_" % label if label else ""
    for driver in ("overlay2", "vfs"):
        logfile = root / ("dockerd-%s%s.log" % (tag, driver))
        log = open(logfile, "w", encoding="utf-8")  # pylint: disable=consider-using-with
        cmd = ["dockerd", "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
               "--pidfile", str(root / "docker.pid"), "-H", "unix://%s" % sock, "--iptables=false",
               "--ip6tables=false", "--bridge=none", "--ip-masq=false", "--userland-proxy=false",
               "--storage-driver", driver, "--exec-opt", "native.cgroupdriver=cgroupfs",
               "--cgroup-parent", "ctp-docker"] + list(extra)
        started = time.monotonic()
        daemon = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,  # pylint: disable=consider-using-with
                                  start_new_session=True)
        up = _wait_socket(sock, daemon)
        if up:
            rc, dummy = sh(steps, "docker_version_%s%s" % (tag, driver), "docker version", env=denv)
            up = rc == 0
        steps.append({"name": "dockerd_%s%s" % (tag, driver), "command": " ".join(cmd), "rc": daemon.poll(),
                      "seconds": round(time.monotonic() - started, 2), "up": up,
                      "output": logfile.read_text(errors="replace")[-6000:]})
        if up:
            return daemon, driver
        _stop(daemon)
        if sock.exists():
            sock.unlink()
    return None, None


def _gpu_handover():
    """What nvidia-container-runtime would add, by hand: --device for each NVIDIA character device, a -v (read-only)
    for each prefix of the host's Python and torch outside /usr, and a PATH that finds that Python first."""
    devices = " ".join("--device %s" % d for d in sorted(str(p) for p in Path("/dev").glob("nvidia*"))
                       if Path(d).is_char_device())
    torch_spec = importlib.util.find_spec("torch")
    prefixes = {sys.prefix, sys.base_prefix, str(Path(shutil.which("python3") or sys.executable).resolve().parents[1])}
    if torch_spec and torch_spec.origin:
        prefixes.add(str(Path(torch_spec.origin).parents[1]))
    binds = " ".join("-v %s:%s:ro" % (d, d) for d in sorted(prefixes) if not d.startswith("/usr"))
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
    return devices, binds, path


def docker(args):
    steps = []
    bindir = Path(args.bin).resolve()
    root = WORK / "docker"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    env = _docker_env(steps, bindir)
    sock = root / "docker.sock"
    denv = dict(env, DOCKER_HOST="unix://%s" % sock)
    result = {"mode": "docker", "steps": steps, "summary": {}}
    daemon, driver = _start_dockerd(steps, root, env)
    if driver:
        result["summary"]["storage_driver"] = driver
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
        devices, binds, path = _gpu_handover()
        smi = shutil.which("nvidia-smi") or "/usr/bin/nvidia-smi"
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


# Linux capability numbers (linux/capability.h): bit n of a Cap* mask in /proc/<pid>/status is CAPABILITIES[n].
CAPABILITIES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
    "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
    "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
    "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
    "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
    "CHECKPOINT_RESTORE",
)


def decode_caps(status_text, last_cap):
    """capsh --decode for every Cap* line of /proc/<pid>/status: the names set, and those of 0..last_cap missing."""
    decoded = {}
    for line in status_text.splitlines():
        if not line.startswith("Cap") or ":" not in line:
            continue
        key, value = line.split(":", 1)
        mask = int(value.strip(), 16)
        names = ["CAP_" + (CAPABILITIES[n] if n < len(CAPABILITIES) else str(n)) for n in range(64) if mask >> n & 1]
        missing = ["CAP_" + (CAPABILITIES[n] if n < len(CAPABILITIES) else str(n)) for n in range(last_cap + 1)
                   if not mask >> n & 1]
        decoded[key] = {"hex": value.strip(), "count": len(names), "missing": missing}
    return decoded


# What gpustack-runtime 0.2.1's Docker deployer asks the engine for when GPUStack 2.2.3's vLLM backend creates a
# replica (docs/gpu-proof.md, "Part 2: GPUStack's containers on the lent machine", cites the lines), as docker CLI
# flags that set the same HostConfig fields. GPUStack names no OCI runtime: the engine's default one runs them.
SHM_BYTES = 10 * (1 << 30)  # GPUStack's GPUSTACK_MODEL_RUNTIME_SHM_SIZE_GIB default, 10 GiB, in bytes
PAUSE_SETTINGS = (
    ("oom_score_adj", "--oom-score-adj -998"),
    ("privileged", "--privileged"),  # the pause is privileged when a RUN container is, and vLLM's is
    ("no_new_privileges", "--security-opt no-new-privileges"),
    ("ipc_shareable", "--ipc shareable"),
    ("shm_size", "--shm-size %d" % SHM_BYTES),
    ("network_host", "--network host"),
    ("restart_no", "--restart no"),
)
HOLDER = "{holder}"  # the running pause container whose namespaces a replica joins
REPLICA_SETTINGS = (
    ("network_container", "--network container:%s" % HOLDER),
    ("ipc_container", "--ipc container:%s" % HOLDER),
    ("shm_size_with_ipc_container", "--ipc container:%s --shm-size %d" % (HOLDER, SHM_BYTES)),
    ("privileged", "--privileged"),
    ("visible_devices_env", "-e NVIDIA_VISIBLE_DEVICES=0 -e CUDA_VISIBLE_DEVICES=0"),
    ("model_dir_bind", "--mount type=bind,source=%s,target=%s" % (WORK / "models", WORK / "models")),  # mode RWX
    ("healthcheck_none", "--no-healthcheck"),
)
# The unhealthy-restart (autoheal) sidecar, made only when the first check of a RUN container has teardown set;
# GPUStack 2.2.3's vLLM backend sets no checks, so a replica gets none. Its settings are tried once, together.
HEALTH_SETTINGS = "--restart always --network none -v {sock}:/var/run/docker.sock -e AUTOHEAL_CONTAINER_LABEL=ctp"
# Inside each container: what it was given (OOM score, capabilities, no_new_privs, /dev/shm), then a marker.
READ = ("/bin/busybox sh -c 'echo oom=$(cat /proc/self/oom_score_adj); "
        "grep -E \"^(CapEff|CapBnd|NoNewPrivs)\" /proc/self/status; df -k /dev/shm | tail -1; echo ctp-ok'")
HOST_CONFIG_KEYS = ("Privileged", "OomScoreAdj", "SecurityOpt", "IpcMode", "NetworkMode", "ShmSize", "RestartPolicy",
                    "CapAdd", "Runtime", "Devices", "Mounts")
GPU_CHECK = '''import os
import torch
x = torch.arange(1 << 20, device="cuda", dtype=torch.float64)
print("visible", os.environ.get("NVIDIA_VISIBLE_DEVICES"), os.environ.get("CUDA_VISIBLE_DEVICES"))
print("gpu", torch.cuda.get_device_name(0).replace(" ", "_"), float(x.sum()), torch.cuda.device_count())
'''
TORCH_SUM = repr(float(sum(range(1 << 20))))


def _case(cases, steps, denv, phase, container, name, flags, image="ctp/busybox:1", command=READ, marker="ctp-ok"):
    """docker create with the flags, its HostConfig as the engine stored it, docker start -a, docker rm."""
    cname = "ctp-%s-%s-%s" % (phase, container, name.replace("_", "-"))
    hc_file = WORK / "gs" / ("%s.hostconfig.json" % cname)
    command_line = ("docker create --name {n} {f} {i} {c} >/dev/null && "
                    "docker inspect -f '{{{{json .HostConfig}}}}' {n} > {h} && docker start -a {n}; rc=$?; "
                    "docker rm -f {n} >/dev/null 2>&1; exit $rc").format(n=cname, f=flags, i=image, c=command, h=hc_file)
    rc, out = sh(steps, "%s_%s_%s" % (phase, container, name), command_line, timeout=180, env=denv)
    host_config = {}
    if hc_file.exists():
        stored = json.loads(hc_file.read_text(encoding="utf-8") or "{}")
        host_config = {k: stored.get(k) for k in HOST_CONFIG_KEYS}
    errors = [line for line in out.splitlines() if "Error" in line or "error" in line]
    case = {"phase": phase, "container": container, "name": name, "flags": flags, "rc": rc,
            "ok": rc == 0 and marker in out, "error": errors[-1] if errors else "", "host_config": host_config,
            "inside": _inside(out)}
    cases.append(case)
    return case


def _inside(out):
    """What a container read about itself (READ's lines): OOM score, capability masks, no_new_privs, /dev/shm KiB."""
    found = {}
    for key, pattern in (("oom_score_adj", r"^oom=(-?\d+)$"), ("CapEff", r"^CapEff:\s*([0-9a-f]+)$"),
                         ("CapBnd", r"^CapBnd:\s*([0-9a-f]+)$"), ("NoNewPrivs", r"^NoNewPrivs:\s*(\d)$"),
                         ("shm_kib", r"^\S+\s+(\d+)\s+\d+\s+\d+\s+\d+%\s+/dev/shm$")):
        match = re.search(pattern, out, re.M)
        if match:
            found[key] = match.group(1)
    return found


def _holder(steps, denv, phase, flags):
    """The pause container replicas join: started detached, as the deployer starts it; its state and, read on the
    host, its OOM score and capabilities."""
    cname = "ctp-%s-holder" % phase
    rc, out = sh(steps, "%s_holder" % phase,
                 "docker run -d --name %s %s ctp/busybox:1 /bin/busybox sleep 3600 >/dev/null; rc=$?; "
                 "docker inspect -f '{{.State.Status}} {{.State.Pid}} {{.State.Error}}' %s; "
                 "pid=$(docker inspect -f '{{.State.Pid}}' %s); [ \"$pid\" -gt 0 ] 2>/dev/null && "
                 "{ echo oom=$(cat /proc/$pid/oom_score_adj); grep -E '^Cap(Eff|Bnd)' /proc/$pid/status; }; exit $rc"
                 % (cname, flags, cname, cname), timeout=60, env=denv)
    return cname, rc == 0 and out.startswith("running")


def _phase(steps, denv, phase, sock, gpu):
    """GPUStack's pause, replica and health settings, each alone, then together, then the replica with the GPU."""
    cases = []
    for name, flags in PAUSE_SETTINGS:
        _case(cases, steps, denv, phase, "pause", name,
              flags if "--network" in flags else flags + " --network none")
    pause_all = " ".join(flags for dummy, flags in PAUSE_SETTINGS)
    whole = _case(cases, steps, denv, phase, "pause", "all", pause_all)
    # A replica joins the pause's namespaces: the pause as GPUStack asks for it if that starts, else the pause with
    # only the settings that passed alone, so the replica's own settings are still tried.
    kept = pause_all if whole["ok"] else " ".join(
        flags for (name, flags) in PAUSE_SETTINGS
        if any(c["ok"] for c in cases if c["container"] == "pause" and c["name"] == name))
    holder, running = _holder(steps, denv, phase, kept)
    result = {"cases": cases, "holder": {"name": holder, "flags": kept, "running": running,
                                         "as_gpustack_asks": kept == pause_all}}
    if running:
        for name, flags in REPLICA_SETTINGS:
            flags = flags.replace(HOLDER, holder)
            _case(cases, steps, denv, phase, "replica", name,
                  flags if "--network" in flags else flags + " --network none")
        replica_all = " ".join(f.replace(HOLDER, holder) for dummy, f in REPLICA_SETTINGS
                               if not f.startswith("--ipc container") or "--shm-size" in f)
        _case(cases, steps, denv, phase, "replica", "all", replica_all)
        devices, binds, path = gpu
        hand_over = ("-v /usr:/usr:ro %s -v /etc/ld.so.cache:/etc/ld.so.cache:ro -e LD_LIBRARY_PATH=%s -e PATH=%s"
                     % (binds, os.environ.get("LD_LIBRARY_PATH", ""), path))
        check = ("/bin/sh -c 'echo oom=$(cat /proc/self/oom_score_adj); grep -E \"^(CapEff|CapBnd)\" /proc/self/status; "
                 "%s %s && echo ctp-ok'" % (sys.executable, WORK / "models" / "gpu_check.py"))
        # Privileged, a container gets every device node; the driver's libraries come as the probe gave them.
        _case(cases, steps, denv, phase, "replica", "gpu", "%s %s" % (replica_all, hand_over),
              image="ctp/hostusr:1", command=check, marker=TORCH_SUM)
        # What the replica would need if privileged were dropped: the NVIDIA device nodes named one by one.
        _case(cases, steps, denv, phase, "replica", "gpu_unprivileged",
              "%s %s %s" % (replica_all.replace("--privileged", "").strip(), devices, hand_over),
              image="ctp/hostusr:1", command=check, marker=TORCH_SUM)
    health = HEALTH_SETTINGS.format(sock=sock)
    rc, out = sh(steps, "%s_health_all" % phase,
                 "docker run -d --name ctp-%s-health %s ctp/busybox:1 /bin/busybox sleep 3600 >/dev/null; "
                 "sleep 1; docker inspect -f '{{.State.Status}} {{.RestartCount}} {{.State.Error}}' ctp-%s-health"
                 % (phase, health, phase), timeout=60, env=denv)
    cases.append({"phase": phase, "container": "health", "name": "all", "flags": health, "rc": rc,
                  "ok": rc == 0 and out.startswith("running"), "error": "" if rc == 0 else out.strip()[-500:],
                  "host_config": {}})
    sh(steps, "%s_cleanup_containers" % phase, "docker ps -aq | xargs -r docker rm -f", timeout=60, env=denv)
    return result


def _leftovers(limit=10.0):
    """Processes still running from under the probe's directory (containerd's shims leave on their own, later)."""
    deadline = time.monotonic() + limit
    while True:
        found = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(WORK) in cmdline and int(proc.name) != os.getpid():
                found.append("%s %s" % (proc.name, cmdline.strip()[:200]))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def _after_stop(steps, name):
    """dockerd leaves its default netns mount and the cgroup parent's directories: take them away too; a process
    of its own still running after 10 s (a shim) is recorded and stopped by its PID."""
    left = _leftovers()
    for line in left:
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except OSError:
            pass
    steps.append({"name": name + "_processes", "command": "scan /proc/*/cmdline for %s" % WORK,
                  "rc": 0, "seconds": 0, "output": "\n".join(left)})
    sh(steps, name, "grep ' %s' /proc/mounts | cut -d' ' -f2 | sort -r | xargs -r -n1 umount; "
                    "find /sys/fs/cgroup -depth -type d -path '*ctp-docker*' -exec rmdir {} \\; ; "
                    "grep -c ' %s' /proc/mounts; find /sys/fs/cgroup -type d -name 'ctp-docker*' | wc -l"
                    % (WORK, WORK))


def gpustack_specs(args):
    """GPUStack's containers, as its Docker deployer asks for them, on dockerd with runc, then with the wrapper."""
    steps = []
    result = {"mode": "gpustack-specs", "steps": steps, "summary": {}, "phases": {}}
    sh(steps, "host", "uname -r; cat /proc/1/comm; nvidia-smi -L 2>&1")
    # The root's own limits: capabilities (decoded) and whether it may lower an OOM score.
    rc, out = sh(steps, "caps", "grep Cap /proc/self/status; cat /proc/sys/kernel/cap_last_cap")
    last_cap = int(out.split()[-1]) if rc == 0 else 63
    result["caps"] = decode_caps(out, last_cap)
    result["caps"]["cap_last_cap"] = last_cap
    sh(steps, "capsh", "command -v capsh && capsh --decode=$(awk '/^CapBnd/ {print $2}' /proc/self/status)")
    sh(steps, "oom_read", "echo self=$(cat /proc/self/oom_score_adj) pid1=$(cat /proc/1/oom_score_adj)")
    for value in ("-998", "-1", "0", "500"):
        sh(steps, "oom_write_%s" % value, "echo %s > /proc/self/oom_score_adj && cat /proc/self/oom_score_adj"
           % value)
    bindir = Path(args.bin).resolve()
    root = WORK / "gs"
    shutil.rmtree(WORK, ignore_errors=True)
    (WORK / "models").mkdir(parents=True)
    root.mkdir(parents=True)
    (WORK / "models" / "gpu_check.py").write_text(GPU_CHECK, encoding="utf-8")
    env = _docker_env(steps, bindir)
    sock = root / "docker.sock"
    denv = dict(env, DOCKER_HOST="unix://%s" % sock)
    # The stand-in runtime: the wrapper in front of the carried runc, registered with dockerd as its default in the
    # second phase, so the deployer's requests reach it unchanged (GPUStack names no runtime).
    shim = root / "pairserve-clamp"
    shim.write_text("#!/bin/sh\nPAIRSERVE_REAL_RUNC=%s exec %s %s \"$@\"\n"
                    % (bindir / "bin" / "runc", sys.executable, Path(args.wrapper).resolve()), encoding="utf-8")
    shim.chmod(0o755)
    gpu = _gpu_handover()
    result["gpu_handover"] = {"devices": gpu[0], "binds": gpu[1], "path": gpu[2]}
    clamp = ("--add-runtime", "pairserve-clamp=%s" % shim, "--default-runtime", "pairserve-clamp")
    for phase, extra in (("runc", ()), ("clamp", clamp)):
        daemon, driver = _start_dockerd(steps, root, env, label=phase, extra=extra)
        result["summary"]["dockerd_%s" % phase] = driver
        if daemon is None:
            continue
        try:
            sh(steps, "%s_default_runtime" % phase, "docker info -f '{{.DefaultRuntime}} {{json .Runtimes}}'",
               env=denv)
            sh(steps, "%s_images" % phase,
               "docker image inspect ctp/busybox:1 >/dev/null 2>&1 || { r=%s/rootfs-bb; "
               "mkdir -p $r/bin $r/tmp $r/proc $r/sys $r/dev $r/etc && cp %s/bin/busybox $r/bin/ && "
               "ln -sf busybox $r/bin/sh && tar -C $r -c . | docker import - ctp/busybox:1; }; "
               "docker image inspect ctp/hostusr:1 >/dev/null 2>&1 || { r=%s/rootfs-usr; "
               "mkdir -p $r/usr $r/etc $r/tmp $r/proc $r/sys $r/dev $r/root && "
               "for l in bin sbin lib lib64; do ln -sfn usr/$l $r/$l; done && "
               "tar -C $r -c . | docker import - ctp/hostusr:1; }; docker images --format '{{.Repository}}:{{.Tag}}'"
               % (root, bindir, root), timeout=60, env=denv)
            result["phases"][phase] = _phase(steps, denv, phase, sock, gpu)
        finally:
            _stop(daemon)
            log = root / ("dockerd-%s_%s.log" % (phase, driver))
            sh(steps, "%s_dockerd_notes" % phase, "grep -iE 'oom|capab|level=(warn|error)' %s | head -40" % log)
            _after_stop(steps, "%s_after_stop" % phase)
    for phase, part in result["phases"].items():
        result["summary"][phase] = {"%s_%s" % (c["container"], c["name"]): c["ok"] for c in part["cases"]}
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
    p = sub.add_parser("gpustack-specs")
    p.add_argument("--bin", required=True)
    p.add_argument("--wrapper", required=True, help="the OCI runtime wrapper to try in front of runc")
    p.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    started = time.monotonic()
    result = {"static": static, "docker": docker, "gpustack-specs": gpustack_specs}[args.cmd](args)
    result["seconds"] = round(time.monotonic() - started, 1)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
