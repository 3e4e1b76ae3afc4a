# shellcheck shell=bash
# Sourced by scripts/lab.sh after podman-env.sh: the lab's container registry on 127.0.0.1, so that the runner
# image reaches the nodes as gpustack/runner reaches a real node - named by digest in the pins and pulled by the
# runner_image role through the node's container engine.
#
# The registry is Debian's docker-registry (the CNCF distribution server), plain HTTP on loopback only. Podman
# talks HTTPS to any registry unless told otherwise: the lab's registries.conf marks 127.0.0.1:5000 insecure,
# for the podman service the workers use and for the push. A real node's registry speaks TLS; nothing in the
# collection differs. Its storage lives in .cache/ (a cache like the images: the next push finds its blobs),
# and `scripts/lab.sh down --images` removes it.
PAIRSERVE_LAB_REGISTRY=127.0.0.1:5000
PAIRSERVE_LAB_REGISTRY_DIR=$pairserve_root/.cache/lab-registry

# pairserve_lab_registries_conf <file>: a registries.conf that lets podman reach the lab registry over HTTP.
pairserve_lab_registries_conf() {
  cat >"$1" <<CONF
# Written by scripts/lib/lab-registry.sh: the lab's registry on loopback speaks plain HTTP.
unqualified-search-registries = []
[[registry]]
location = "$PAIRSERVE_LAB_REGISTRY"
insecure = true
CONF
}

# pairserve_lab_registry_start <state dir>: start the registry (once; its PID in <state>/registry.pid).
pairserve_lab_registry_start() {
  local state=$1
  if [ -f "$state/registry.pid" ] && kill -0 "$(cat "$state/registry.pid")" 2>/dev/null; then return 0; fi
  mkdir -p "$PAIRSERVE_LAB_REGISTRY_DIR"
  cat >"$state/registry.yml" <<CONF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $PAIRSERVE_LAB_REGISTRY_DIR
http:
  addr: $PAIRSERVE_LAB_REGISTRY
CONF
  setsid /usr/bin/docker-registry serve "$state/registry.yml" >"$state/registry.log" 2>&1 &
  echo $! >"$state/registry.pid"
  for _ in $(seq 100); do
    curl -fsS "http://$PAIRSERVE_LAB_REGISTRY/v2/" >/dev/null 2>&1 && return 0
    kill -0 "$(cat "$state/registry.pid")" 2>/dev/null || break
    sleep 0.1
  done
  echo "the lab registry did not answer on $PAIRSERVE_LAB_REGISTRY; see $state/registry.log" >&2
  return 1
}

# pairserve_lab_registry_push <local image> <repository:tag> <digest file>: push, write the manifest digest.
pairserve_lab_registry_push() {
  local image=$1 target=$PAIRSERVE_LAB_REGISTRY/$2 digest_file=$3
  podman push --quiet "$image" "docker://$target" --digestfile "$digest_file"
  grep -qE '^sha256:[0-9a-f]{64}$' "$digest_file" || {
    echo "podman push $target wrote no digest to $digest_file" >&2
    return 1
  }
  echo "lab registry: $target@$(cat "$digest_file")"
}
