"""Stage 2, plan: make.py turns a SweepConfig into an immutable Plan: checkpoint.py and
architecture.py inspect every checkpoint (config.json, weight headers, the model on the meta
device) and resolve model.path once; layers.py names each layer's kind; inputs.py,
documents.py, windows.py make the token ids; provenance.py records the files' identity,
with their sha256s from hashes.py (HF blob names, a cache keyed by each file's state).
Imports config; importing it loads no torch (the meta model is built inside a function)."""
