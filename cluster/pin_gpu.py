"""Worker preload for multi-GPU SLURM jobs: give each worker process its own GPU.

Runs in the worker before any task, i.e. before anything can create a CUDA context.
The job script exports TDOS_JOB_GPUS (see slurm.slurm_job_kwargs).
"""
import os

from cluster.gpu import gpu_pin


def dask_setup(worker):
    gpus = int(os.environ.get("TDOS_JOB_GPUS", "0"))
    device = gpu_pin(worker.name, os.environ.get("CUDA_VISIBLE_DEVICES"), gpus)
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = device
