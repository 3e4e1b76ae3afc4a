#!/usr/bin/env bash
# What a user meets: the built tarball, an install from it, ansible-doc, one real play from the installed
# copy (not the checkout), the execution environment definition, the changelog fragments and the
# generated reference docs.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export PATH=$root/.venv/bin:$PATH
tmp=$(mktemp -d /tmp/pairserve-release.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

echo "== build"
rm -rf dist && ansible-galaxy collection build --force --output-path dist . >/dev/null
tarball=$(ls dist/pairserve-llm-*.tar.gz)
python3 scripts/check_tarball.py galaxy.yml "$tarball"
echo "$tarball: $(du -h "$tarball" | cut -f1)"

echo "== install into a fresh collections path"
mkdir -p "$tmp/collections"
ansible-galaxy collection install --force --no-deps -p "$tmp/collections" "$tarball" >/dev/null
# The dependencies come from the bootstrap's copy; pairserve.llm only from the tarball.
deps=$tmp/deps/ansible_collections
mkdir -p "$deps"
for d in "$root"/.cache/collections/ansible_collections/*; do
  [ "$(basename "$d")" = pairserve ] || ln -s "$d" "$deps/"
done
printf '[defaults]\ninterpreter_python = auto_silent\n' >"$tmp/ansible.cfg"
export ANSIBLE_COLLECTIONS_PATH=$tmp/collections:$tmp/deps ANSIBLE_CONFIG=$tmp/ansible.cfg ANSIBLE_NOCOLOR=1
cd "$tmp"
installed=$(ansible-galaxy collection list pairserve.llm 2>/dev/null | awk '/^# /{print $2}' | head -1)
case "$installed" in
  "$tmp/collections"*) echo "pairserve.llm resolves to the installed copy ($installed)" ;;
  *) echo "pairserve.llm does not resolve to the installed copy: $installed" >&2; exit 1 ;;
esac
ansible-doc -l pairserve.llm | tee "$tmp/doc-list.txt"
for m in gpu_pairs hf_snapshot tokenizer_patch gpustack_model gpustack_route runner_image; do
  grep -q "^pairserve.llm.$m " "$tmp/doc-list.txt" || { echo "ansible-doc -l does not list pairserve.llm.$m" >&2; exit 1; }
done

echo "== a real play from the installed copy: GPU detection on a recorded host"
coll=$tmp/collections/ansible_collections/pairserve/llm
cat >"$tmp/hosts.yml" <<YAML
all:
  children:
    gpu_nodes:
      hosts:
        node-a:
          pairserve_nvml_replay: $coll/tests/fixtures/nvml/node-a-2x5080.json
          pairserve_expected_pairs: 1
  vars:
    ansible_connection: local
    ansible_python_interpreter: $root/.venv/bin/python
    pairserve_node_venv: $root/.cache/recorded-node-venv
    pairserve_node_venv_apt_packages: []
YAML
ansible-playbook -i "$tmp/hosts.yml" pairserve.llm.detect | tee "$tmp/play.txt" | grep -E "pair 0|PLAY RECAP|failed=" 
grep -q "failed=0" "$tmp/play.txt"
grep -q "replay:$coll/tests/fixtures/nvml/node-a-2x5080.json" "$tmp/play.txt"
cd "$root"

echo "== deploy only: a fresh venv with ansible-core and the controller's requirements, no test toolchain"
# What docs/first-install.md ("Controller, deploy only") tells a user who only deploys: ansible-core and
# meta/ee-requirements.txt with the collection's constraints, the collection from the tarball. The dependencies come
# from the bootstrap's copies here (Galaxy is unreachable); a user gets them with the collection from Galaxy.
# meta/ee-requirements.txt pins what the execution environment installs; they must be constraints.txt's pins.
while IFS= read -r line; do
  case "$line" in ''|'#'*) continue ;; esac
  grep -qxF "$line" constraints.txt || { echo "meta/ee-requirements.txt: $line is not constraints.txt's pin" >&2; exit 1; }
done <meta/ee-requirements.txt
deploy=$tmp/deploy-venv
python3 -m venv "$deploy"
"$deploy/bin/pip" install -q --disable-pip-version-check -c constraints.txt ansible-core -r meta/ee-requirements.txt
for tool in pytest molecule ansible-lint pytest-testinfra huggingface-hub podman; do
  if "$deploy/bin/pip" show -q "$tool" >/dev/null 2>&1; then
    echo "the deploy-only venv carries $tool, which deploying must not need" >&2
    exit 1
  fi
done
mkdir -p "$tmp/deploy-collections"
ANSIBLE_COLLECTIONS_PATH=$tmp/deploy-collections \
  "$deploy/bin/ansible-galaxy" collection install --force --no-deps -p "$tmp/deploy-collections" "$tarball" >/dev/null
dcoll=$tmp/deploy-collections/ansible_collections/pairserve/llm
(
  cd "$tmp"
  export ANSIBLE_COLLECTIONS_PATH=$tmp/deploy-collections:$tmp/deps PATH=$deploy/bin:/usr/sbin:/usr/bin:/sbin:/bin
  # The whole site is a valid playbook for that ansible-core, and its inventory check runs on the controller
  # alone: over the example inventory without its vault, it must list the missing secrets and stop, contacting
  # no host (the example's addresses are documentation ranges).
  ansible-playbook -i "$dcoll/inventory/example/hosts.yml" pairserve.llm.site --syntax-check >/dev/null
  set +e
  ansible-playbook -i "$dcoll/inventory/example/hosts.yml" pairserve.llm.validate >"$tmp/deploy-validate.txt" 2>&1
  validate_rc=$?
  set -e
  if [ "$validate_rc" = 0 ] || ! grep -q "pairserve_gpustack_admin_password: is not set" "$tmp/deploy-validate.txt" ||
     ! grep -q "REPLACE-WITH-THE-40-HEX-COMMIT-SHA" "$tmp/deploy-validate.txt" ||
     grep -q "UNREACHABLE" "$tmp/deploy-validate.txt"; then
    echo "the validation play from the deploy-only install did not stop on the example's missing secrets alone:" >&2
    tail -30 "$tmp/deploy-validate.txt" >&2
    exit 1
  fi
  echo "deploy-only venv: $("$deploy/bin/ansible" --version | head -1), $("$deploy/bin/pip" list 2>/dev/null | tail -n +3 | wc -l) packages;" \
    "site.yml parses; the validation play lists the example's missing secrets, no host contacted"
)

echo "== execution environment definition"
ansible-builder create -f execution-environment.yml -c "$tmp/ee-context" >/dev/null
test -f "$tmp/ee-context/Containerfile"
echo "ansible-builder create: $(wc -l <"$tmp/ee-context/Containerfile") lines of Containerfile"

echo "== changelog"
antsibull-changelog lint
if base=$(git merge-base HEAD "${CHANGELOG_BASE:-origin/main}" 2>/dev/null) && [ "$base" != "$(git rev-parse HEAD)" ]; then
  if git diff --name-only "$base" HEAD | grep -qE '^(plugins|roles)/' &&
     ! git diff --name-only --diff-filter=A "$base" HEAD | grep -q '^changelogs/fragments/'; then
    echo "plugins/ or roles/ changed since $base without a changelogs/fragments/ entry" >&2
    exit 1
  fi
fi

echo "== generated reference docs"
python scripts/gen_docs.py --check
echo "release check: ok"
