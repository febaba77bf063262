"""What a stored number depends on besides the config: the checkpoint's files, the software,
the float settings. Recorded in the store (docs/store.md) and checked before anything is reused.

A checkpoint directory can be overwritten in place (continued training saves over the same
path, a user edits config.json), so a path alone never names a model. The store records the
size, mtime and sha256 of every file that decides the values — config.json, the weights, and
the tokenizer's files when text is tokenized — when it is made; a later run compares the
sha256 of each file as it is now with the record. The hashes come from sweep.checkpoints.hashes:
the Hugging Face cache's blob names, or a cache keyed by each file's size, mtime, ctime and
inode, and a file is read only when neither knows its present state.
"""
from __future__ import annotations

import os
import platform
from pathlib import Path

from sweep.errors import CheckpointChanged
from sweep.checkpoints.hashes import sha256_files


def checkpoint_record(ckpt, tokenizer: bool = False) -> dict:
    """{"dir", "files": {name: {"size", "mtime_ns", "sha256"}}} of the files of checkpoint
    `ckpt` (a sweep.checkpoints reader) whose content decides a sweep's values, as they are now
    (streamed when read: the client's memory does not grow with the checkpoint). "dir" is
    where a worker loads the checkpoint from: its directory, or the GGUF file."""
    files = {h.path.name: {"size": h.size, "mtime_ns": h.mtime_ns, "sha256": h.sha256}
             for h in sha256_files(ckpt.identity_files(tokenizer))}
    return {"dir": str(Path(ckpt.path).resolve()), "files": files}


def verify_checkpoint(record: dict, where: str) -> None:
    """Raise CheckpointChanged unless the files in record["dir"] are the recorded ones.

    Each file's present sha256 (sweep.checkpoints.hashes: read only where neither the HF blob name nor
    the hash cache knows the file's present size, mtime, ctime and inode) against the record.
    A record without a directory here (a store made on another machine, or upgraded from
    format 1) is left to the workers, which compare the hash of what they load.
    """
    d = record.get("dir")
    if not d or not Path(d).exists():
        return
    paths = [checkpoint_file(d, name) for name in record["files"]]
    for p in paths:
        if not p.is_file():
            raise CheckpointChanged(f"{where}: {p}, recorded when the store was made, is gone — "
                                    f"restore it or sweep into a new store")
    for h in sha256_files(paths):
        if h.sha256 != record["files"][h.path.name]["sha256"]:
            raise CheckpointChanged(f"{where}: {h.path} changed since the store was made (sha256 "
                                    f"differs) — sweep the changed checkpoint into a new store")


def checkpoint_file(location, name: str) -> Path:
    """File `name` of the checkpoint at `location`: a file of its directory, or the checkpoint
    itself when it is that one file (a GGUF)."""
    location = Path(location)
    return location if location.name == name and location.is_file() else location / name


def file_state(local_dir, names) -> tuple:
    """((name, size, mtime_ns, ctime_ns, inode), ...): changes whenever a file is rewritten."""
    out = []
    for name in sorted(names):
        s = os.stat(checkpoint_file(local_dir, name))
        out.append((name, s.st_size, s.st_mtime_ns, s.st_ctime_ns, s.st_ino))
    return tuple(out)


def sha256_file(path) -> str:
    """The sha256 of one file (sweep.checkpoints.hashes.sha256_files), without a progress bar."""
    return sha256_files([path], progress=False)[0].sha256


def strict_fp32() -> None:
    """Switch TensorFloat-32 off for matmul and cuDNN, whatever the process default.

    TF32 keeps 10 mantissa bits: J_tt products on an Ampere-or-newer GPU would then carry
    ~1e-3 relative error, far above the fp32 eigenvalues' own rounding. Set on every
    worker before each task (cheap, and harmless on a CPU-only machine).
    """
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def software() -> dict:
    """Versions that decide the rounding of every stored value, JSON-able."""
    import numpy
    import scipy
    import torch
    import transformers

    cuda = torch.version.cuda
    device = torch.cuda.get_device_name(0) if cuda and torch.cuda.is_available() else None
    return {"torch": torch.__version__, "cuda": cuda, "cudnn": _cudnn(), "device": device,
            "transformers": transformers.__version__, "numpy": numpy.__version__,
            "scipy": scipy.__version__, "python": platform.python_version()}


def _cudnn():
    """cuDNN's version where CUDA is in use, else None. Asked only on CUDA, and guarded: a
    CPU-only run must never fail over a cuDNN library that does not match torch's build
    (torch raises RuntimeError for a mismatched one, an import error for a broken one)."""
    import torch

    if not torch.cuda.is_available():
        return None
    try:
        return torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except (RuntimeError, ImportError, OSError) as e:
        return f"unreadable ({type(e).__name__}: {e})"
