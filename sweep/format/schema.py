"""What a tdos store holds on disk: the one declaration its writer and readers import.

sweep/store/writer.py creates and writes stores from these names, analysis/io/store.py and the
live view read them, and tests/synthetic_store.py writes stores of known content with them.
docs/store.md describes the layout for people. Any change of layout bumps FORMAT, and
`check_format` is the one place an older store is told what to do. The ledger's codes and
their meaning are in ledger.py, the compute dtypes in dtypes.py.
"""
from __future__ import annotations

from dataclasses import dataclass

from sweep.format import dtypes

# 1: the first layout (scale_*/shift_* arrays added later without a bump);
# 2: every array always present, eig_backend per block, creation_id, checkpoint file stats;
# 3: any causal LM: the kind of every layer (`layer_kinds`), Δ/A_log for every Mamba-style
#    layer (per channel for Mamba-1, per head for Mamba-2), which Jacobian path computed
#    each block, config.json (and tokenizer files) in the checkpoint record
# 4: the residual stream h_l entering every swept layer (`residual`, `residual_ledger`),
#    ‖J_tt‖_F² and J_tt's departure from normality per token (`frobenius2`, `nonnormality`);
#    groups swept with `depth:` also hold the stack arrays (`stack_eigenvalues`, `stack_gain`,
#    `lyapunov`, `depth_ledger`): optional, like the Mamba-only ones, so a group without
#    them is a format-4 group swept without depth; likewise the memory arrays (`memory`,
#    `memory_stderr`, `memory_ledger`), added to a group by the first sweep with `memory:`;
#    and gated delta-rule layers (kind `deltanet`, with the group attribute `delta_channels`):
#    a format-4 group without that attribute has Δ_t as wide as A_log's first axis (Mamba),
#    and a delta-rule layer swept before stored none (its kind says "recurrent")
# 5: `lyapunov` holds (1/S) ln σ_i of the run's product (format 4: Benettin's QR exponents,
#    now `lyapunov_qr`); depth groups also hold each stack's (1/s) ln σ_i (`stack_lyapunov`)
#    and its Rayleigh quotient and residual along 𝟙/√d (`stack_shift_rayleigh`/`_residual`)
# 6: a weight variant's group carries one attribute, `variant` = {kind, seed, of, role}
#    (sweep/format/variants.py), where format 5 wrote `null` {of, kind, seed} or `quantization`
#    {of, member, ensemble}; an ensemble member's group is `<of>.quantized.<k>` (was
#    `<of>.quant.<k>`)
FORMAT = 6
UPGRADABLE = (1, 2, 3, 4, 5)      # formats `tdos upgrade STORE` rewrites to FORMAT in place

# eig_backend codes, (layer, seq, block) int8: which eigensolver computed the block
EIG_BACKENDS = ("unknown",        # not written yet, or a store upgraded from format 1
                "torch-cpu",      # torch.linalg.eigvals: LAPACK geev of torch's bundled BLAS
                "scipy-openblas",  # scipy.linalg.eigvals: geev of numpy/scipy's OpenBLAS
                "torch-cuda")     # torch.linalg.eigvals on a CUDA device

# jacobian_path codes, (layer, seq, block) int8: which code computed the block's J_tt
JACOBIAN_PATHS = ("unknown",      # not written yet, or a store upgraded from format 1 or 2
                  "hand-written",  # sweep/blocks: the architecture's structured J_tt
                  "generic")      # sweep/generic: autograd of transformers' own layer

# layer kinds (group attribute `layer_kinds`, one per model layer): "+"-joined parts
# the parts with a learned decay, hence Δ_t and A_log: a state decays by exp(−Δ_t·exp(A_log))
# per token (per channel and state for Mamba-1, per head for Mamba-2); `deltanet`, a gated
# delta rule (OLMo-Hybrid, Qwen3-Next, Kimi-Linear), by exp(g_t), the gate transformers hands
# its kernel, with Δ_t = −g_t / exp(A_log): per head, or per key channel of a head (Kimi)
SSM_KINDS = ("mamba", "mamba2", "deltanet")


@dataclass(frozen=True)
class ArraySpec:
    dims: tuple[str, ...]
    kind: str                     # "int64" | "int8" | "real" / "complex": in the compute dtype
    per_token: bool = False       # chunks (1, 1, token_block, ...): written by block tasks
    per_sequence: bool = False    # chunks (1, 1, ...): one per (layer row, sequence)
    ssm: bool = False             # present only in groups with a layer of SSM_KINDS
    depth: bool = False           # present only in groups swept with `depth:` (attribute `depth`)
    memory: bool = False          # present once a sweep with `memory:` opened the group


# every array of a model group; NaN (or code 0) marks a value not written yet
ARRAYS = {
    "layer": ArraySpec(("layer",), "int64"),                   # model layer of each row
    "layer_length": ArraySpec(("layer",), "int64"),            # tokens planned at that row
    "tokens": ArraySpec(("seq", "token"), "int64"),            # token ids fed
    "eigenvalues": ArraySpec(("layer", "seq", "token", "mode"), "complex", per_token=True),
    # Rayleigh quotient ρ_t and relative residual r_t of J_tt along h_t (the norm's scale
    # direction) and along 𝟙/√d (LayerNorm's shift direction)
    "scale_rayleigh": ArraySpec(("layer", "seq", "token"), "real", per_token=True),
    "scale_residual": ArraySpec(("layer", "seq", "token"), "real", per_token=True),
    "shift_rayleigh": ArraySpec(("layer", "seq", "token"), "real", per_token=True),
    "shift_residual": ArraySpec(("layer", "seq", "token"), "real", per_token=True),
    # ‖J_tt‖_F² and Henrici's relative departure from normality of J_tt,
    # sqrt(max(0, ‖J‖_F² − Σ|ζ_i|²)) / ‖J‖_F (0 for a normal matrix)
    "frobenius2": ArraySpec(("layer", "seq", "token"), "real", per_token=True),
    "nonnormality": ArraySpec(("layer", "seq", "token"), "real", per_token=True),
    "ledger": ArraySpec(("layer", "seq", "block"), "int8"),
    "eig_backend": ArraySpec(("layer", "seq", "block"), "int8"),
    "jacobian_path": ArraySpec(("layer", "seq", "block"), "int8"),
    # Δ_t per channel (Mamba-1: d_inner), per head (Mamba-2, gated delta rule) or per key
    # channel of each head, head-major (Kimi's delta rule); rows of other layers stay NaN
    "delta": ArraySpec(("layer", "seq", "token", "channel"), "real", per_token=True, ssm=True),
    # A_log of every layer with a decay (SSM_KINDS), swept or not: (d_inner, d_state) for
    # Mamba-1, (heads, 1) for Mamba-2 and the delta rule; other layers stay NaN
    "a_log": ArraySpec(("model_layer", "channel", "state"), "real", ssm=True),
    # h_{l,t}: the residual stream entering the row's layer, in the compute dtype, from the
    # streaming forward (embedding, then one layer at a time); written per (row, sequence),
    # then its residual_ledger cell (DONE)
    "residual": ArraySpec(("layer", "seq", "token", "hidden"), "real", per_sequence=True),
    "residual_ledger": ArraySpec(("layer", "seq"), "int8", per_sequence=True),
    # stacked blocks (`depth:`; group attribute depth = {"spans": [s, ...], "layers": [l0, l1]}):
    # eig(P_t(l, s)) of P_t(l, s) = J^(l+s-1)_tt ⋯ J^(l)_tt at the row of its first layer l
    # (NaN where l + s − 1 > l1), and ‖P_t(l, s)‖_F² / d, the mean squared gain of a random
    # unit perturbation of h_{l,t} after s blocks
    "stack_eigenvalues": ArraySpec(("span", "layer", "seq", "token", "mode"), "complex", depth=True),
    "stack_gain": ArraySpec(("span", "layer", "seq", "token"), "real", depth=True),
    # finite-depth Lyapunov exponents over the run l0..l1 (S = l1 − l0 + 1 blocks):
    # γ_i = (1/S) ln σ_i(P_t(l0, S)), the singular values, largest first (format 5)
    "lyapunov": ArraySpec(("seq", "token", "mode"), "real", depth=True),
    # a token block's walk up the run (its single blocks, stacks and exponents) is written:
    # its cell is set last, after the blocks' own ledger cells
    "depth_ledger": ArraySpec(("seq", "block"), "int8", depth=True),
    # token memory (`memory:`; group attribute memory = {lags, probes, every, estimator}):
    # m_t(k) = ‖J_{t,t−k}‖_F² = ‖∂h_{l+1,t}/∂h_{l,t−k}‖_F² at the sampled output tokens t (rows
    # of the others, and t − k < 0, NaN), exact or Hutchinson's estimate with its standard
    # error; one chunk per (row, sequence), its memory_ledger cell set last
    "memory": ArraySpec(("layer", "seq", "token", "lag"), "real", per_sequence=True, memory=True),
    "memory_stderr": ArraySpec(("layer", "seq", "token", "lag"), "real", per_sequence=True,
                               memory=True),
    "memory_ledger": ArraySpec(("layer", "seq"), "int8", per_sequence=True, memory=True),
    # format 5, stacked blocks: Benettin's QR exponents of the run from the identity frame, a
    # basis-dependent diagnostic, largest first; (1/s) ln σ_i(P_t(l, s)) of every stack; the
    # stack's Rayleigh quotient and relative residual along 𝟙/√d (LayerNorm's shift direction
    # is invariant under every block, so under their product)
    "lyapunov_qr": ArraySpec(("seq", "token", "mode"), "real", depth=True),
    "stack_lyapunov": ArraySpec(("span", "layer", "seq", "token", "mode"), "real", depth=True),
    "stack_shift_rayleigh": ArraySpec(("span", "layer", "seq", "token"), "real", depth=True),
    "stack_shift_residual": ArraySpec(("span", "layer", "seq", "token"), "real", depth=True),
}
SCALE_ARRAYS = ("scale_rayleigh", "scale_residual")
SHIFT_ARRAYS = ("shift_rayleigh", "shift_residual")
STACK_ARRAYS_5 = ("lyapunov_qr", "stack_lyapunov", "stack_shift_rayleigh", "stack_shift_residual")

# attributes: root group, then each model group
ROOT_ATTRS = ("tdos_format", "creation_id", "fingerprint", "config", "models", "software",
              "analysis",      # analysis: the config's `analysis:` section (Table I lengths, layer)
              "history")       # [{date, added, fingerprint}]: creation, then each growth (optional:
                               # absent in stores made before it; sweep/store/grow.py)
# layer_kinds: one kind per model layer; a_log_shapes: per model layer, A_log's shape
# ([d_inner, d_state] Mamba-1, [heads] Mamba-2 and the delta rule) or null; delta_channels:
# per model layer, the width of Δ_t (0 where none; absent in groups written before it: then
# A_log's first axis)
GROUP_ATTRS = ("model", "checkpoint", "inputs", "layer_kinds", "a_log_shapes", "delta_channels",
               "complete", "worker_software", "depth",    # depth: only in groups swept with `depth:`
               "memory",                      # memory: only once a sweep with `memory:` ran
               "conv_widths",                 # with memory: causal-conv taps per model layer (0: none)
               "variant",                     # a weight variant's {kind, seed, of, role} (variants.py)
               "growing")                     # only while a growth is under way (sweep/store/grow.py)


def dtype_of(name: str, compute_dtype: str) -> str:
    """numpy dtype name of array `name` in a group swept in `compute_dtype` (float32|float64)."""
    kind = ARRAYS[name].kind
    if kind == "real":
        return compute_dtype
    if kind == "complex":
        return dtypes.row(compute_dtype).complex
    return kind


def group_arrays(ssm: bool, depth: bool = False, memory: bool = False) -> tuple[str, ...]:
    """Names of the arrays a group holds (`ssm`: it has a layer with a decay; `depth`: it was
    swept with `depth:`; `memory`: with `memory:`)."""
    return tuple(n for n, spec in ARRAYS.items() if (ssm or not spec.ssm)
                 and (depth or not spec.depth) and (memory or not spec.memory))


def is_ssm(kind: str) -> bool:
    """Whether a layer of this kind has a learned decay: Δ_t and A_log."""
    return any(part in SSM_KINDS for part in kind.split("+"))


class StoreError(Exception):
    """A one-line, user-facing reason why a path cannot be used as a tdos store."""


def check_format(attrs, path) -> None:
    """Raise StoreError unless the root attributes `attrs` say this tdos can read the store."""
    fmt = attrs.get("tdos_format")
    if fmt == FORMAT:
        return
    if fmt is None:
        raise StoreError(f"{path} is not a tdos store (no tdos_format attribute); give the path "
                         f"of a sweep's store")
    if fmt in UPGRADABLE:
        raise StoreError(f"{path} is a tdos store of format {fmt}; this tdos reads format "
                         f"{FORMAT}: run `tdos upgrade {path}` once (it adds the newer arrays and "
                         f"attributes, keeping every value), then retry")
    raise StoreError(f"{path} has tdos_format {fmt!r}, which this tdos (format {FORMAT}) cannot "
                     f"read; use the tdos version that wrote it, or sweep again into a new store")
