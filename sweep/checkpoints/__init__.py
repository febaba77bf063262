"""The one room that reads checkpoints, and makes the weights of their variants.

`open_checkpoint(path)` (formats.py) picks the reader of a checkpoint once: a transformers
directory (directory.py), a mamba_ssm directory (mamba_ssm.py) or a GGUF file (gguf_file.py,
its bytes and rounding bins in gguf_tensors.py). Every reader has the interface `Checkpoint`
declares: what the model is (its transformers config), where each of the model's tensors is
stored, one tensor read by the model's name, the tokenizer, the files that are its identity,
and the whole model as transformers loads it. Nothing outside this room asks which format a
checkpoint is.

The variants of a checkpoint (sweep/format/variants.py: nulls, ensemble members) are made
here too: `kinds.py` is the registry of kinds (names and roles, readable without torch),
`makers.py` the interface a kind implements and its two routes (one layer, the whole model),
`nulls.py` and `ensemble.py` the built-in kinds.

`hf.py` is the one door to transformers', datasets' and torch's private names.
"""
