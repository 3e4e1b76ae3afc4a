# shellcheck shell=bash
# Sourced after podman-env.sh: builds the lab's replica image, the CPU build of vLLM on the node image.
# No registry is reachable, so the venv scripts/build_vllm_cpu.sh made is copied in (a build-time volume,
# no 3 GB build context) and re-pointed at the image's own Python 3.11 (the venv was made with the host's).
pairserve_vllm_cpu_image() {
  local version=$1
  echo "localhost/pairserve-vllm-cpu:$version"
}

# pairserve_build_vllm_cpu_image <version> [venv] [NAME=VALUE]: the venv defaults to scripts/build_vllm_cpu.sh's;
# NAME=VALUE is one more environment variable of the image (the upgrade scenario's 0.25.1 image needs one).
pairserve_build_vllm_cpu_image() {
  local version=$1 image venv=${2:-} env=${3:-} ctx
  image=$(pairserve_vllm_cpu_image "$version")
  # Rebuilt when the node image under it was (its recipe label is inherited and compared), or lacks the variable.
  if podman image exists "$image" &&
    [ "$(pairserve_image_recipe "$image")" = "$(pairserve_image_recipe "$PAIRSERVE_NODE_IMAGE")" ] &&
    { [ -z "$env" ] || podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$image" | grep -qxF "$env"; }; then
    return 0
  fi
  venv=${venv:-$pairserve_root/.cache/vllm-cpu/$version/venv}
  [ -x "$venv/bin/python" ] || { echo "no vLLM CPU venv at $venv: run scripts/build_vllm_cpu.sh $version" >&2; return 1; }
  ctx=$(mktemp -d)
  cat >"$ctx/Containerfile" <<CONTAINERFILE
FROM $PAIRSERVE_NODE_IMAGE
LABEL org.pairserve.lab=true org.pairserve.vllm-version=$version
RUN cp -a /src /opt/vllm \\
 && ln -sfn /usr/bin/python3.11 /opt/vllm/bin/python3.11 \\
 && sed -i -e 's#^home = .*#home = /usr/bin#' -e '/^executable/d' -e '/^command/d' /opt/vllm/pyvenv.cfg \\
 && /opt/vllm/bin/python -c 'import vllm, sys; print("vllm", vllm.__version__, "on", sys.version.split()[0])' \\
 && /opt/vllm/bin/python -c 'from vllm.platforms.cpu import CpuPlatform; import torch; CpuPlatform.import_kernels(); torch.ops._C.init_cpu_memory_env'
ENV PATH=/opt/vllm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${env:+
ENV $env}
CMD ["python", "-m", "vllm.entrypoints.openai.api_server", "--help"]
CONTAINERFILE
  echo "building $image from $venv (copies about $(du -sh "$venv" | cut -f1))"
  podman build --quiet --network none --volume "$venv:/src:ro" -t "$image" "$ctx" >/dev/null
  rm -rf "$ctx"
}
