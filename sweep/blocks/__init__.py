"""Hand-written J_tt of whole residual blocks, each beside an autograd reference of its own
(`BlockOps.jacobians_ref`), kept where benchmarks/bench_engines.py shows them >= 1.3x faster
end to end than the generic path (benchmarks/README.md). Block math: torch only, no Dask.

FAST is the table the worker builds a block from; the plan names the same model types
(sweep/plan/architecture.py FAST_ARCHS) without importing torch, and tests/test_layers.py
holds the two equal.
"""
from sweep.blocks.gpt2 import GPT2Ops
from sweep.blocks.gpt_neox import GPTNeoXOps
from sweep.blocks.llama import LlamaOps
from sweep.blocks.mamba import MambaOps

FAST = {"gpt2": GPT2Ops, "gpt_neox": GPTNeoXOps, "llama": LlamaOps, "mamba": MambaOps}
