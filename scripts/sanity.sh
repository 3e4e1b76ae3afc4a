#!/usr/bin/env bash
# ansible-test needs the collection at .../ansible_collections/<ns>/<name>: copy the tracked and
# untracked-not-ignored files there (a git repo of its own, so ansible-test lists exactly those).
set -euo pipefail
cd "$(dirname "$0")/.."
# One directory per checkout: two checkouts' runs at once (a CI clone beside a working copy) must not delete
# each other's copy and venv half-way.
base=${SANITY_DIR:-/tmp/pairserve-sanity-$(pwd | sha1sum | cut -c1-10)}
dest=$base/ansible_collections/pairserve/llm
# The copy (and the venv ansible-test makes in it) is this run's only: removed when the run ends, however it ends.
trap 'rm -rf "$base/ansible_collections"; rmdir "$base" 2>/dev/null || true' EXIT
rm -rf "$dest" && mkdir -p "$dest"
git ls-files -z --cached --others --exclude-standard | rsync -a --ignore-missing-args --from0 --files-from=- ./ "$dest/"
cd "$dest"
git init -q && git add -A && git -c user.name=sanity -c user.email=sanity@localhost commit -qm sanity
"$OLDPWD/.venv/bin/ansible-test" sanity --venv --python 3.11 --color no "$@"
