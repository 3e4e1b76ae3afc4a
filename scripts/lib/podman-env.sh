# shellcheck shell=bash
# Sourced by the molecule and lab scripts: podman settings for this kind of host, without touching /etc.
# - runc, not crun: crun 1.8 refuses cgroup v1 hybrid hosts ("cgroups in hybrid mode not supported").
# - cgroupfs: there is no systemd on the host to be the cgroup manager.
# - explicit ulimits: podman's root defaults need CAP_SYS_RESOURCE, which this sandbox's root lacks.
# Also builds (once) the node image shared by molecule and the lab: Debian 12 with systemd as PID 1.
pairserve_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pairserve_state=${PAIRSERVE_STATE_DIR:-$pairserve_root/.cache/podman}
mkdir -p "$pairserve_state"
PAIRSERVE_NODE_IMAGE=${PAIRSERVE_NODE_IMAGE:-localhost/pairserve-node:bookworm}
export PAIRSERVE_NODE_IMAGE

_nofile=$(ulimit -Hn)
_nproc=$(ulimit -Hu)
if [ "$_nproc" = unlimited ] || [ "$_nproc" -gt 32768 ]; then _nproc=32768; fi
cat >"$pairserve_state/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=${_nofile}:${_nofile}", "nproc=${_nproc}:${_nproc}"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
CONF
export CONTAINERS_CONF=$pairserve_state/containers.conf

# Bump when the recipe below changes: an image with another recipe label is rebuilt (and so is every image
# built FROM it, see vllm-cpu-image.sh).
PAIRSERVE_NODE_IMAGE_RECIPE=3

pairserve_image_recipe() {  # pairserve_image_recipe <image>: its org.pairserve.recipe label, empty if none
  podman image inspect --format '{{ index .Labels "org.pairserve.recipe" }}' "$1" 2>/dev/null || true
}

# The lab reaches its nodes over SSH, as Ansible reaches real nodes. The nodes share the host's network, so
# Debian's ssh.service (port 22 on every address) is masked; pairserve-lab-sshd.service runs sshd with the
# configuration scripts/lab.sh mounts at /etc/pairserve-lab (its own port on 127.0.0.1, its host key, the
# lab's client key); without that mount it does not start (molecule's control-plane containers).
pairserve_node_sshd_hook() {
  cat <<'HOOK'
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
ln -sf /etc/systemd/system/pairserve-lab-sshd.service "$1"/etc/systemd/system/multi-user.target.wants/pairserve-lab-sshd.service
rm -f "$1"/etc/ssh/ssh_host_*
HOOK
}

pairserve_build_node_image() {
  if [ "$(pairserve_image_recipe "$PAIRSERVE_NODE_IMAGE")" = "$PAIRSERVE_NODE_IMAGE_RECIPE" ]; then
    return 0
  fi
  local mirror
  mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  mirror=${mirror:-http://deb.debian.org/debian}
  echo "building node image $PAIRSERVE_NODE_IMAGE from $mirror (mmdebstrap, about a minute)"
  # The epoch-dated apt stamp makes `cache_valid_time` refresh the emptied package lists.
  # libnuma1: the CPU build of vLLM in the lab's replica image (built FROM this one) loads it.
  mmdebstrap --quiet --variant=apt \
    --include=python3,python3-apt,python3-venv,sudo,systemd,systemd-sysv,dbus,ca-certificates,iproute2,procps,libnuma1,openssh-server \
    --aptopt='Acquire::Languages "none"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    --customize-hook='mkdir -p "$1"/var/lib/apt/periodic; touch -d @0 "$1"/var/lib/apt/periodic/update-success-stamp' \
    --customize-hook="$(pairserve_node_sshd_hook)" \
    bookworm - "$mirror" |
    podman import --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' \
      --change "LABEL org.pairserve.recipe=$PAIRSERVE_NODE_IMAGE_RECIPE" - "$PAIRSERVE_NODE_IMAGE" >/dev/null
}
