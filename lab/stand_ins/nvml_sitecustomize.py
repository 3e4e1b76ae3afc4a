"""Lab only: the NVML replay inside the GPUStack worker's processes (mounted at /opt/pairserve-lab/nvml).

The lab (lab/nodes.py gpu_stand_ins) puts this file (as sitecustomize.py) and the collection's nvml_replay.py in
one directory, mounts it into each node container, and the lab inventory starts the worker with PYTHONPATH pointing
at it and PAIRSERVE_NVML_REPLAY naming the node's recording. Python imports sitecustomize at every interpreter
start, so the worker's first nvmlInit() loads the replay instead of libnvidia-ml.so.1. gpustack-runtime's
NVML module star-imports the real nvidia-ml-py (`pynvml`), so its detection - the GPUs the worker reports,
and the UUIDs its deployer requests for a replica container - reads the recorded host with no change to
GPUStack's code. A real node has no such file: its worker loads the driver's library.
"""

import os
import sys

_RECORDING = os.environ.get("PAIRSERVE_NVML_REPLAY")
if _RECORDING:
    try:
        import nvml_replay  # the collection's plugins/module_utils/nvml_replay.py, copied beside this file

        nvml_replay.install(_RECORDING)
    except Exception as exc:  # pylint: disable=broad-except  # never break the interpreter's start
        print("pairserve lab: NVML replay of %s not active (%s); GPU detection will find no GPU"
              % (_RECORDING, exc), file=sys.stderr)
