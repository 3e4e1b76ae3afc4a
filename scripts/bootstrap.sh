#!/usr/bin/env bash
# Installs everything the tests and the lab need on a fresh Debian 12 machine, idempotently:
# Debian packages, the controller venv (.venv) pinned by constraints.txt, the collections we depend on
# (taken out of the PyPI `ansible` wheel because Galaxy may be unreachable), and the in-place link
# .cache/collections/ansible_collections/pairserve/llm -> this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cache=$root/.cache
mkdir -p "$cache"

apt_packages=(git make rsync podman runc mmdebstrap postgresql iproute2 nftables ca-certificates curl docker-registry openssh-client docker.io)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: apt install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The downloaded .deb files are not needed again; the suite's disk is a budget (the vLLM venvs and images).
  apt-get clean
  # The tests start their own PostgreSQL clusters on private ports; the distribution's default one is not used.
  if command -v pg_lsclusters >/dev/null; then
    pg_lsclusters -h 2>/dev/null | awk '{print $1, $2}' | while read -r v c; do pg_ctlcluster "$v" "$c" stop 2>/dev/null || true; done
  fi
fi

stamp=$cache/venv.stamp
want=$(cat requirements.txt constraints.txt | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "bootstrap: controller venv (.venv)"
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r requirements.txt -c constraints.txt
  echo "$want" >"$stamp"
fi

# Collections: from the `ansible` wheel pinned below (the same versions a user gets from Galaxy for it).
ansible_wheel_version=12.3.0
colls=$cache/collections/ansible_collections
if [ ! -f "$cache/collections.$ansible_wheel_version.stamp" ]; then
  echo "bootstrap: collections from ansible==$ansible_wheel_version"
  rm -rf "$cache/dl" && mkdir -p "$cache/dl" "$colls"
  .venv/bin/pip download -q --no-deps -d "$cache/dl" "ansible==$ansible_wheel_version"
  .venv/bin/python - "$cache" <<'PY'
import glob, sys, zipfile, yaml
cache = sys.argv[1]
wanted = [c["name"].replace(".", "/") for c in yaml.safe_load(open("requirements.yml"))["collections"]]
with zipfile.ZipFile(glob.glob(f"{cache}/dl/ansible-*.whl")[0]) as z:
    members = [n for n in z.namelist() if any(n.startswith(f"ansible_collections/{w}/") for w in wanted)]
    z.extractall(f"{cache}/collections", members)
PY
  rm -rf "$cache/dl"
  touch "$cache/collections.$ansible_wheel_version.stamp"
fi
mkdir -p "$colls/pairserve"
ln -sfn "$root" "$colls/pairserve/llm"

# ansible-test sanity --venv downloads get-pip from ansible's CI host, unreachable offline; this stand-in
# bootstraps pip from the interpreter's own ensurepip and then installs what it was asked for.
getpip=$HOME/.ansible/test/cache/get_pip_24_2.py
if [ ! -f "$getpip" ]; then
  mkdir -p "$(dirname "$getpip")"
  cat >"$getpip" <<'PY'
"""Offline stand-in for get-pip.py used by ansible-test (written by pairserve's scripts/bootstrap.sh)."""
import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"])
if args:
    subprocess.check_call([sys.executable, "-m", "pip", "install", *args])
PY
fi
version=$(.venv/bin/ansible --version)
echo "bootstrap: ready (${version%%$'\n'*})"
