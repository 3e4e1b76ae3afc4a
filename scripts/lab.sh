#!/usr/bin/env bash
# The README's first command. Today the lab is the two recorded hosts of the seed (node A: 2x RTX 5080,
# node B: 2x RTX 4070 Ti SUPER) replayed through the real nvidia-ml-py over the NVML replay library:
# it runs the real gpu_pairs detection and prints the pairs each replica would be pinned to.
set -euo pipefail
cd "$(dirname "$0")/.."
action=${1:-up}
case "$action" in
  up)
    start=$SECONDS
    ansible-playbook -i inventory/recorded/hosts.yml playbooks/detect.yml
    echo "lab: detection on the recorded hosts took $((SECONDS - start)) s"
    ;;
  down)
    echo "lab: nothing is running for the recorded-host lab; nothing to tear down"
    ;;
  *)
    echo "usage: $0 up|down" >&2
    exit 2
    ;;
esac
