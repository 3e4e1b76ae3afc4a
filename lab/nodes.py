"""The lab's two nodes: podman containers of the node image with systemd, on the host's network, reached by Ansible
over SSH (each node's sshd on 127.0.0.1 at its own port, with a host key made here and recorded in the lab's
known_hosts, so host key checking stays on), with their GPUs' stand-ins (the recorded NVML answers, a CDI spec) and
the unit of their container runtime's own socket.

What a node holds is snapshotted before the first converge (snapshot()), and the uninstall proof holds the node to
that snapshot afterwards (lab/stack.py).
"""

from __future__ import annotations

import glob
import re
import shutil
from pathlib import Path

import yaml

from lab import host

SSH_DIR = host.STATE / "ssh"
HOOK = host.STATE / "nvml-hook"
STAND_INS = host.REPO / "lab" / "stand_ins"


def host_vars(node: str) -> dict:
    return yaml.safe_load((host.INVENTORY / "host_vars" / ("%s.yml" % node)).read_text()) or {}


def runtime_of(node: str) -> str:
    """pairserve_runner_runtime of a node: its host_vars, else the lab's group_vars."""
    value = host_vars(node).get("pairserve_runner_runtime")
    if not value:
        value = (yaml.safe_load((host.GROUP_VARS / "serving.yml").read_text()) or {}).get("pairserve_runner_runtime")
    if not value:
        raise host.LabError("%s: no pairserve_runner_runtime in its inventory" % node)
    return value


def prepare_ssh() -> None:
    """The client key, each node's host key and sshd_config, and known_hosts; kept while .lab/ exists."""
    SSH_DIR.mkdir(parents=True, exist_ok=True)
    SSH_DIR.chmod(0o700)
    if not (SSH_DIR / "id_ed25519").exists():
        host.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "pairserve-lab", "-f", SSH_DIR / "id_ed25519"])
    known = []
    for node in host.NODES:
        directory = SSH_DIR / node
        directory.mkdir(exist_ok=True)
        key = directory / "ssh_host_ed25519_key"
        if not key.exists():
            host.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", node, "-f", key])
        shutil.copyfile(SSH_DIR / "id_ed25519.pub", directory / "authorized_keys")
        host.atomic_write(directory / "sshd_config", "\n".join((
            "# Written by the lab (lab/nodes.py): sshd of lab node %s, on loopback only." % node,
            "Port %d" % host.SSH_PORTS[node], "ListenAddress 127.0.0.1",
            "HostKey /etc/pairserve-lab/ssh_host_ed25519_key", "AuthorizedKeysFile /etc/pairserve-lab/authorized_keys",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "UsePAM no", "Subsystem sftp /usr/lib/openssh/sftp-server", "")))
        algo, blob = (key.with_suffix(".pub")).read_text().split()[:2]
        known.append("[127.0.0.1]:%d %s %s\n" % (host.SSH_PORTS[node], algo, blob))
    host.atomic_write(SSH_DIR / "known_hosts", "".join(known))


def _ssh_answers(node: str) -> bool:
    return host.run(["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "ConnectTimeout=2",
                     "-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=%s" % (SSH_DIR / "known_hosts"),
                     "-i", SSH_DIR / "id_ed25519", "-p", host.SSH_PORTS[node], "root@127.0.0.1", "true"],
                    check=False, capture=True).returncode == 0


def wait_for_ssh(nodes=host.NODES) -> None:
    """Each node answers over SSH with the lab's key and known host key."""
    for node in nodes:
        try:
            host.wait_for(lambda n=node: _ssh_answers(n), 30, 0.3,
                          "%s over SSH on 127.0.0.1:%d" % (node, host.SSH_PORTS[node]))
        except host.LabError as err:
            journal = host.node_exec(node, "journalctl", "-u", "pairserve-lab-sshd", "--no-pager", "-n", "20",
                                     check=False).stdout
            raise host.LabError("%s\n%s" % (err, journal)) from None


def stop_ssh_masters() -> None:
    """The persistent connections Ansible left (ControlPersist), each by its socket."""
    for sock in glob.glob(str(SSH_DIR / "cp" / "*")):
        if Path(sock).is_socket():
            host.run(["ssh", "-F", "/dev/null", "-o", "ControlPath=%s" % sock, "-O", "exit", "lab-node"],
                     check=False, capture=True)


def recording_of(node: str) -> Path:
    """The recorded NVML host a node's host_vars name (pairserve_lab_nvml_recording, relative to the repository)."""
    recording = host_vars(node).get("pairserve_lab_nvml_recording")
    if not recording:
        raise host.LabError("no pairserve_lab_nvml_recording in inventory/lab/host_vars/%s.yml" % node)
    return host.REPO / recording


def gpu_stand_in(node: str, recording) -> None:
    """The NVML answers a node replays (a copy of the recording), and its CDI spec."""
    (HOOK / "hosts").mkdir(parents=True, exist_ok=True)
    host.atomic_write(HOOK / "hosts" / ("%s.json" % node), Path(recording).read_text())
    host.run([host.PYTHON, "-m", "lab.cdi", "--nvidia-smi", HOOK / "nvidia-smi", "--cuda-uuids", HOOK / "cuda-uuids",
              recording, node, host.CDI_DIR / ("pairserve-lab-%s.json" % node)], capture=True)


def gpu_stand_ins() -> None:
    """The GPUs' edge, from the recorded hosts: the NVML replay for the workers' own GPU detection (sitecustomize.py +
    the collection's nvml_replay.py, mounted at /opt/pairserve-lab/nvml and put on the worker's PYTHONPATH by the lab
    inventory), and a CDI spec per node naming its recorded GPUs by UUID, which the engines resolve when
    gpustack-runtime asks for nvidia.com/gpu=<UUID> (on a real node the NVIDIA toolkit writes it)."""
    HOOK.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(STAND_INS / "nvml_sitecustomize.py", HOOK / "sitecustomize.py")
    shutil.copyfile(host.REPO / "plugins" / "module_utils" / "nvml_replay.py", HOOK / "nvml_replay.py")
    # what each CDI spec mounts at /usr/bin/nvidia-smi, and in the place of CUDA's enumeration
    for name in ("nvidia-smi", "cuda-uuids"):
        shutil.copyfile(STAND_INS / name, HOOK / name)
        (HOOK / name).chmod(0o755)
    for node in host.NODES:
        gpu_stand_in(node, recording_of(node))


def create_node(node: str) -> bool:
    """A node's container started again when it exists, else a fresh one (a bare node: the OS image, SSH with the
    lab's keys, its data directory, the GPUs' stand-ins). True when it was created."""
    (host.DATA_DIR / node).mkdir(parents=True, exist_ok=True)
    name = host.container(node)
    if host.podman("container", "exists", name, check=False, capture=True).returncode == 0:
        host.podman("start", name, capture=True)
        return False
    host.podman("run", "-d", "--name", name, "--hostname", node, "--label", "org.pairserve.lab=true",
                "--network", "host", "--privileged", "--systemd", "always",
                "-v", "/sys/fs/cgroup/unified:/sys/fs/cgroup/unified:rw",
                "-v", "%s:/srv/pairserve/wheelhouse:ro" % (host.CACHE / "wheelhouse"),
                "-v", "%s:%s" % (host.RUN_DIR, host.RUN_DIR),
                "-v", "%s:%s" % (host.DATA_DIR / node, host.DATA_DIR / node),
                "-v", "%s:/etc/pairserve-lab:ro" % (SSH_DIR / node), "-v", "%s:/opt/pairserve-lab/nvml:ro" % HOOK,
                host.NODE_IMAGE, "/sbin/init", capture=True)
    host.say("lab: created %s" % name)
    return True


_UNIT_DIR = "/usr/lib/systemd/system"


def runtime_units(node: str) -> None:
    """The unit of a node's own runtime socket, as the distribution's package ships it (podman: podman.socket on
    /run/podman/podman.sock; Docker: docker.service with docker.socket on /run/docker.sock), installed but not
    enabled: the product enables it, orders the worker after it and pings it from the node. The service behind the
    socket is systemd-socket-proxyd forwarding to the engine the lab runs on the host, so the node reaches the real
    engine at its real default path."""
    runtime = runtime_of(node)
    if runtime == "podman":
        units = {
            "podman.socket": "# pairserve lab: the node's podman API socket, as Debian's podman package ships it.\n"
                             "[Unit]\nDescription=Podman API Socket (pairserve lab stand-in: the host's podman "
                             "service behind it)\n\n[Socket]\nListenStream=%t/podman/podman.sock\nSocketMode=0660\n\n"
                             "[Install]\nWantedBy=sockets.target\n",
            "podman.service": "# pairserve lab: forwards the node's podman socket to the podman service on the lab's "
                              "host.\n[Unit]\nDescription=Podman API Service (pairserve lab stand-in)\n"
                              "Requires=podman.socket\nAfter=podman.socket\n\n[Service]\n"
                              "ExecStart=/lib/systemd/systemd-socket-proxyd %s\n" % (host.RUN_DIR / "podman.sock")}
    elif runtime == "docker":
        units = {
            "docker.socket": "# pairserve lab: the node's Docker API socket, as Debian's docker.io package ships it.\n"
                             "[Unit]\nDescription=Docker Socket for the API (pairserve lab stand-in)\n\n[Socket]\n"
                             "ListenStream=/run/docker.sock\nSocketMode=0660\n\n[Install]\nWantedBy=sockets.target\n",
            "docker.service": "# pairserve lab: forwards the node's Docker socket to the lab's Docker engine on the "
                              "host.\n[Unit]\nDescription=Docker Application Container Engine (pairserve lab "
                              "stand-in)\nRequires=docker.socket\nAfter=network-online.target docker.socket\n"
                              "Wants=network-online.target\n\n[Service]\n"
                              "ExecStart=/lib/systemd/systemd-socket-proxyd %s\n\n[Install]\n"
                              "WantedBy=multi-user.target\n" % host.DOCKER_SOCK}
    else:
        raise host.LabError("%s: pairserve_runner_runtime %r is neither podman nor docker" % (node, runtime))
    for name, text in units.items():
        host.node_write(node, "%s/%s" % (_UNIT_DIR, name), text)
    host.node_exec(node, "systemctl", "daemon-reload")


def start_nodes() -> None:
    prepare_ssh()
    for node in host.NODES:
        create_node(node)
    wait_for_ssh()
    for node in host.NODES:
        runtime_units(node)


def worker_unit(node: str, action: str) -> None:
    """A node's GPUStack worker stopped or started (systemctl in its container)."""
    if action not in ("stop", "start"):
        raise host.LabError("worker_unit: stop or start, not %r" % action)
    host.node_exec(node, "systemctl", action, "gpustack-worker")


def destroy_node(node: str) -> None:
    """A node lost with its disk, at once (no shutdown): its container killed and removed, its data directory deleted
    (checkpoint cache; its PostgreSQL lived in the container), and what the lab keeps of a node outside its container
    because the nodes share the host: the replica containers its worker started in the host's engines, and its
    firewall tables in the host's ruleset (a lost machine takes both with it)."""
    from lab import engines  # pylint: disable=import-outside-toplevel
    host.podman("rm", "-f", "-t", "0", host.container(node), check=False, capture=True)
    engines.remove_workloads(node)
    host.nft_delete("pairserve_%s" % node.replace("-", "_"))
    if node == "node-a":
        host.nft_delete("pairserve_server")
    shutil.rmtree(host.DATA_DIR / node, ignore_errors=True)


# What a node holds that an install can add or take away, one line per item, sorted so two snapshots compare:
#   path      every file outside the kernel's, runtime and log trees, Ansible's own remote tmp and async results,
#             and the trees dpkg and the packages' maintainer scripts own (/usr but /usr/local, dpkg's and apt's
#             state, /etc/alternatives, the SysV links, the certificate store): the packages are their own lines;
#             a file a package ships (its conffiles in /etc too) is "package-file"
#   data      the lab data directory the host shares with the node (checkpoint cache)
#   user, group, package (distribution packages)
#   enabled, running   services; a unit whose file a package ships is "package-enabled", "package-running",
#             and so is a .wants/ link to one ("package-link"): only the collection's own units count as its own
# What the OS's own daily timers write is left out, as its logs are: dpkg-db-backup.timer and logrotate.timer write
# /var/backups/{dpkg,alternatives,apt}.* and /var/lib/logrotate at midnight.
_SNAPSHOT = r'''
find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp -o -path /var/tmp \
  -o -path /var/log -o -path /var/cache -o -path /var/lib/systemd -o -path /root/.ansible \
  -o -path /var/lib/logrotate -o -path "/var/backups/dpkg.*" -o -path "/var/backups/alternatives.tar.*" \
  -o -path "/var/backups/apt.*" \
  -o -path /root/.ansible_async -o -path /var/lib/dpkg -o -path /var/lib/apt -o -path /var/lib/ucf \
  -o -path /etc/alternatives -o -path "/etc/rc?.d" -o -path /etc/ssl/certs \
  -o \( -path "/usr/*" -a ! -path /usr/local -a ! -path "/usr/local/*" \) \) -prune -o -print |
awk 'FILENAME != "-" { own[$0] = 1; next } { print (($0 in own) ? "package-file " : "path ") $0 }' \
  /var/lib/dpkg/info/*.list - |
while read -r kind p; do
  case $kind:$p in
    path:/etc/systemd/*.wants/*)
      case $(readlink "$p") in /lib/systemd/*|/usr/lib/systemd/*) echo "package-link $p"; continue ;; esac ;;
  esac
  echo "$kind $p"
done
cut -d: -f1 /etc/passwd | sed "s/^/user /"
cut -d: -f1 /etc/group | sed "s/^/group /"
dpkg-query -W -f 'package ${Package}\n'
unit_lines() {
  while read -r u; do
    case $(systemctl show -P FragmentPath "$u" 2>/dev/null) in
      /lib/systemd/*|/usr/lib/systemd/*) echo "package-$1 $u" ;;
      *) echo "$1 $u" ;;
    esac
  done
}
systemctl list-unit-files --type=service --state=enabled --no-legend --plain | awk '{print $1}' | unit_lines enabled
systemctl list-units --type=service --state=running --no-legend --plain | awk '{print $1}' | unit_lines running
'''


def snapshot(node: str) -> list[str]:
    """What a node holds, sorted (see above)."""
    lines = host.node_exec(node, "sh", "-c", _SNAPSHOT).stdout.splitlines()
    data = host.DATA_DIR / node
    if data.is_dir():
        lines.append("data %s" % data)
        lines += ["data %s" % p for p in data.rglob("*")]
    return sorted(set(line for line in lines if line.strip()))


# Kept by the uninstall unless asked (docs/first-install.md, "Undo"): the checkpoint cache on each GPU node,
# GPUStack's database in PostgreSQL and the dumps on node A. Kept always: the distribution packages the roles
# installed, with what their maintainer scripts made (PostgreSQL's cluster and configuration, its user, the snakeoil
# certificate of ssl-cert, tzdata's and locales' files, fontconfig's, lighttpd's javascript alias, nginx's
# configuration tree and web root); the container runtime's socket link (the runtime is the site's).
UNINSTALL_KEPT = re.compile("|".join((
    r"data /var/lib/pairserve-lab/node-[ab]/hf-cache(/.*)?", r"path /var/backups/pairserve(/.*)?",
    r"path /var/lib/postgresql(/.*)?", r"path /etc/postgresql(-common)?(/.*)?",
    r"path /etc/apt/apt\.conf\.d/02autoremove-postgresql", r"path /etc/ssl/private/ssl-cert-snakeoil\.key",
    r"path /etc/(localtime|timezone|locale\.gen|networks|default/(locale|sysstat))", r"path /etc/fonts/conf\.d(/.*)?",
    r"path /usr/local/share/fonts", r"path /etc/lighttpd(/.*)?", r"path /etc/systemd/user(/.*)?",
    r"path /etc/nginx(/.*)?", r"path /var/lib/nginx(/.*)?", r"path /var/www(/.*)?",
    r"path /etc/systemd/system/sockets\.target\.wants",
    r"package .*", r"package-(file|link|enabled|running) .*", r"user postgres", r"group (postgres|ssl-cert)")))


def compare(fresh: list[str], now: list[str]) -> tuple[list[str], list[str], int]:
    """(left behind, gone, kept) of a node after the uninstall against its fresh snapshot: what is new and not a kept
    item, what the fresh node had and is gone, and how many new items are kept ones."""
    before, after = set(fresh), set(now)
    added = sorted(after - before)
    left = [line for line in added if not UNINSTALL_KEPT.fullmatch(line)]
    return left, sorted(before - after), len(added) - len(left)
