"""Where a layer-local model's weights come from (sweep/generic/local.py): the model built
from its checkpoint's config with every parameter on the meta device (accelerate's
`init_empty_weights`; buffers built for real: they are computed, not stored), and the
checkpoint's own key for each parameter slot. The checkpoint's tensors are read one by one
through its reader (sweep/checkpoints/)."""
from __future__ import annotations

from pathlib import Path

import torch

from sweep.checkpoints import hf
from sweep.checkpoints.makers import slots
from sweep.checkpoints.formats import open_checkpoint


def skeleton(local: Path, dtype: torch.dtype, trust_remote_code: bool, device: torch.device):
    """(model, checkpoint): the model of checkpoint `local` (a directory or a GGUF file) in eval
    mode, every parameter on meta, its buffers built for real on `device`; its reader, bound
    to the model (`checkpoint.sources`: the stored tensor of each of the model's keys)."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    ckpt = open_checkpoint(Path(local))
    config = ckpt.config("model.path", trust_remote_code)
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, trust_remote_code=trust_remote_code)
    # accelerate wraps every parameter registered inside in a new one, so the tensors
    # transformers tied there (the head and the embedding) are two: tied again, as one
    model.tie_weights()
    model.requires_grad_(False)
    # computed buffers (rotary tables, embedding scales) as from_pretrained leaves them:
    # built in the compute dtype, then set again by the model's own _init_weights (the
    # weights it also visits are on meta: no work)
    model.eval()
    with torch.no_grad():
        for m in model.modules():
            hf.init_module(model, m)
            for k, b in list(m.named_buffers(recurse=False, remove_duplicate=False)):
                if b.device != device:
                    setattr(m, k, b.to(device))
    ckpt.bind(model)
    return model, ckpt


def slot_names(model, sources: dict) -> tuple[dict, list[str]]:
    """(names, missing): names maps (id(module), attribute) of every parameter slot to the
    model's key of that parameter the checkpoint holds (`sources`: Checkpoint.sources);
    missing lists the parameters it holds under no key."""
    # the output embedding is never called (the decoding stops at layer l): it stays on
    # meta, whatever the checkpoint names it
    out = model.get_output_embeddings()
    unused = {id(p) for p in out.parameters()} if out is not None else set()
    unused -= {id(p) for p in model.get_input_embeddings().parameters()}
    # a tied parameter has several keys, and the checkpoint holds one of them
    keys: dict[int, list] = {}
    for path, m in model.named_modules(remove_duplicate=False):
        for k, p in slots(m):
            keys.setdefault(id(p), []).append(((id(m), k), f"{path}.{k}" if path else k))
    names, missing = {}, []
    for pid, entries in keys.items():
        held = [n for _, n in entries if n in sources]
        missing += [] if held or pid in unused else [entries[0][1]]
        names.update({slot: (held or [entries[0][1]])[0] for slot, _ in entries})
    return names, missing
