"""Count GPUs without touching CUDA in this process.

The client must not create a CUDA context before dask-cuda spawns its workers: a context
in the parent pins memory on device 0 and, with fork, breaks CUDA in every child. So no
torch.cuda.* here; NVML (pynvml) and nvidia-smi read the driver without a context.
"""
from __future__ import annotations

import os
import shutil
import subprocess


def detect_gpus() -> int:
    """GPUs this process may use: the physical count, narrowed by CUDA_VISIBLE_DEVICES."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = [v for v in visible.split(",") if v.strip()]
        # CUDA stops enumerating at the first invalid entry; "-1" is the usual "hide all"
        if not entries or entries[0].strip().startswith("-"):
            return 0
    physical = _nvml_count()
    if physical is None:
        physical = _nvidia_smi_count()
    if visible is not None:
        return min(physical, len(entries))
    return physical


def _nvml_count() -> int | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        return 0   # library present, no driver: a CPU machine


def _nvidia_smi_count() -> int:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def gpu_pin(worker_name: str, visible: str | None, gpus: int) -> str | None:
    """CUDA_VISIBLE_DEVICES for worker `name-i` of a job running `gpus` workers (SLURM).

    dask-worker --nworkers N names its processes `<name>-0 .. <name>-(N-1)`; worker i takes
    the i-th device SLURM granted the job, so each task's `cuda:0` is a different GPU.
    """
    if gpus <= 1:
        return None
    index = int(str(worker_name).rsplit("-", 1)[1])
    devices = visible.split(",") if visible else [str(i) for i in range(gpus)]
    return devices[index % len(devices)].strip()
