"""Lab replica images only: `import torch` on the replica's own CPUs (VLLM_CPU_OMP_THREADS_BIND).

Installed by lab/images.py (build_replica_image) into every lab replica image, as
site-packages/pairserve_torch_import_affinity.py and a .pth line that imports it.

Why: while `import torch` runs, the MKL bundled in torch's libtorch_cpu counts cores by pinning the importing
thread to every CPU of its affinity mask in turn (MKL_Read_ThreadENV_Count_Cores, from at::init_num_threads;
strace shows sched_setaffinity [0 1] -> [0] -> [1] -> [0 1]). In the lab each replica's vLLM worker is bound to one
core of this 2-core machine. When a replica boots while the other one serves, its processes get pinned for a moment
to the core where the other replica's worker is busy, and this VM's scheduler can then leave them there with no CPU
at all for minutes (runnable, 0 ticks), long enough for the replica's verification to give up. No MKL or OpenMP
variable skips the count (MKL_NUM_THREADS, MKL_DYNAMIC, MKL_THREADING_LAYER, KMP_AFFINITY, OMP_PROC_BIND). So the
import runs with the affinity narrowed to the CPUs the replica is bound to, and the process gets its full mask back
after it. torch 2.11.0 (vLLM 0.25.1's image) and torch 2.13.0 (vLLM 0.27.1's) both count this way, in every process
of the replica that imports torch (vLLM's model-registry subprocess too).

A value that is not a CPU list (auto, nobind, unset) leaves everything as it is.
"""

import importlib.abc
import importlib.util
import os
import sys


def _bound_cpus(value):
    """CPUs named by a VLLM_CPU_OMP_THREADS_BIND value such as '1', '0-3', '0,2' or '0-1|2-3'; None otherwise."""
    cpus = set()
    for part in value.replace("|", ",").split(","):
        part = part.strip()
        if not part:
            continue
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            return None
        cpus.update(range(int(first), int(last if dash else first) + 1))
    return cpus or None


class _NarrowedImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `torch` with the other finders and runs its module code with the narrowed affinity."""

    def __init__(self, cpus):
        self.cpus = cpus
        self.spec = None
        self.loader = None

    def __getattr__(self, name):  # the rest of the loader interface (resource readers etc.) is torch's own loader's
        return getattr(self.loader, name)

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch" or self.spec is not None:
            return None
        sys.meta_path.remove(self)  # once: find the real spec, then leave the import system as it was
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        self.spec = spec
        spec.loader, self.loader = self, spec.loader
        return spec

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        wide = os.sched_getaffinity(0)
        narrow = self.cpus & wide
        if narrow:
            os.sched_setaffinity(0, narrow)
        try:
            self.loader.exec_module(module)
        finally:
            if narrow:
                os.sched_setaffinity(0, wide)


def install():
    cpus = _bound_cpus(os.environ.get("VLLM_CPU_OMP_THREADS_BIND", ""))
    if cpus and hasattr(os, "sched_setaffinity") and "torch" not in sys.modules:
        sys.meta_path.insert(0, _NarrowedImport(cpus))


install()
