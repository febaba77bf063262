"""Write tdos stores of known content through the engine's own writer.

Every model group is made by `sweep.store.writer.create_group`, every block written by
`sweep.store.writer.write_block` (its chunks, then its ledger cell) and A_log by
`sweep.store.writer.write_a_log`, so analysis tests read exactly the layout a sweep writes (names,
dtypes, chunks and codes from sweep/format/schema.py). Only the root attributes, which the
engine derives from a config, are set here from the content itself. The truth
(eigenvalues, Δ, A_log, the IR exponent of the drawn spectra) is known exactly.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field

import numpy as np
import zarr

from sweep.format import schema
from sweep.format.variants import Variant
from sweep.store.writer import BlockValues, create_group, write_a_log, write_block

NAN_C = complex(np.nan, np.nan)


@dataclass
class SyntheticModel:
    """One model group. Arrays use store-row order (row i <-> model layer `layers[i]`)."""
    name: str
    eigenvalues: np.ndarray                  # (rows, seq, L_max, d) complex
    layers: list[int]
    arch: str = "mamba"
    dtype: str = "float32"
    token_block: int = 8
    layer_length: list[int] | None = None    # tokens planned per row (default L_max)
    tokens: np.ndarray | None = None         # (seq, L_max) int64
    delta: np.ndarray | None = None          # (rows, seq, L_max, d_inner)   Mamba
    a_log: np.ndarray | None = None          # (n_model_layers, d_inner, d_state)  Mamba
    scale_rayleigh: np.ndarray | None = None  # (rows, seq, L_max) ρ_t; None: left NaN
    scale_residual: np.ndarray | None = None  # (rows, seq, L_max) r_t    (not computed)
    shift_rayleigh: np.ndarray | None = None  # (rows, seq, L_max) ρ along 𝟙/√d; None: NaN
    shift_residual: np.ndarray | None = None  # (rows, seq, L_max) r along 𝟙/√d
    path: str = "synthetic/model"
    extra_identity: dict = field(default_factory=dict)
    variant: Variant | None = None           # a weight variant: a null, an ensemble member (Store.variant)
    frobenius2: np.ndarray | None = None     # (rows, seq, L_max) ‖J_tt‖_F²; None: left NaN

    @property
    def shape(self):
        return self.eigenvalues.shape

    def n_blocks(self):
        return -(-self.shape[2] // self.token_block)

    def lengths(self):
        return self.layer_length or [self.shape[2]] * self.shape[0]


def _cdtype(dtype):
    return np.complex64 if dtype == "float32" else np.complex128


def _rdtype(dtype):
    return np.float32 if dtype == "float32" else np.float64


def write_store(path, models: list[SyntheticModel], done=None):
    """Create the store; write the blocks where `done[name]` (rows, seq, block) is nonzero.

    `done[name]` values are ledger codes (1 done, 2 flagged); default: every planned block done.
    Blocks not done are left unwritten (fill NaN), as a sweep that has not reached them.
    """
    done = done or {}
    root = zarr.open_group(str(path), mode="w")
    # the identity part of a real config decides the content; here the content itself does
    config = {"models": [{"path": m.path, "dtype": m.dtype, "name": m.name, "layers": m.layers,
                          "content": hashlib.sha256(m.eigenvalues.tobytes()).hexdigest()}
                         for m in models],
              "inputs": {"sequences": models[0].shape[1], "length": models[0].shape[2], "seed": 0}}
    fp = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    root.attrs.update({
        "tdos_format": schema.FORMAT, "creation_id": fp[:32], "config": config,
        "models": [m.name for m in models], "fingerprint": fp, "software": {"torch": "synthetic"},
    })
    for m in models:
        _create_group(root, m)
        write_blocks(path, m, done.get(m.name, planned_mask(m)))
    return path


def planned_mask(m: SyntheticModel):
    """(rows, seq, block) int8: 1 for every block inside the row's planned length."""
    rows, nseq, _, _ = m.shape
    mask = np.zeros((rows, nseq, m.n_blocks()), np.int8)
    for i, n in enumerate(m.lengths()):
        mask[i, :, : -(-n // m.token_block)] = 1
    return mask


def _create_group(root, m: SyntheticModel):
    rows, nseq, lmax, d = m.shape
    tokens = m.tokens if m.tokens is not None else np.arange(nseq * lmax).reshape(nseq, lmax)
    identity = {"path": m.path, "revision": None, "arch": m.arch, "weights_sha256": "0" * 64,
                **m.extra_identity,
                # a variant names itself beside its checkpoint, as the sweep's group identity does
                **({"variant": m.variant.attrs()} if m.variant is not None else {})}
    g = create_group(
        root, m.name, identity=identity, dtype=m.dtype,
        checkpoint={"dir": None, "files": {"model.safetensors": {"sha256": "0" * 64}}},
        inputs={"sequences": nseq, "length": lmax, "seed": 0, "text": None,
                "token_block": m.token_block},
        layer_lengths=list(zip(m.layers, m.lengths())), token_block=m.token_block,
        tokens=np.asarray(tokens, np.int64), d_model=d, variant=m.variant, **_kinds(m))
    if m.a_log is not None:
        for layer, a in enumerate(np.asarray(m.a_log, _rdtype(m.dtype))):
            write_a_log(g, layer, a)
    return g


def _kinds(m: SyntheticModel) -> dict:
    """Every layer Mamba-1 (A_log (n_layers, d_inner, d_state) given) or attention."""
    if m.a_log is None:
        return {"layer_kinds": ["attention"] * (max(m.layers) + 1)}
    n, d_inner, d_state = np.shape(m.a_log)
    return {"layer_kinds": ["mamba"] * n, "a_log_shapes": [[d_inner, d_state]] * n}


def _pair(m, names, i, s, t0, t1):
    arrays = [getattr(m, n) for n in names]
    return None if arrays[0] is None else tuple(np.asarray(a[i, s, t0:t1]) for a in arrays)


def write_blocks(path, m: SyntheticModel, mask):
    """Write each block where mask > 0 with the engine's `write_block` (chunks, then the
    ledger cell). A block of code 2 gets one non-finite eigenvalue, which the writer flags."""
    g = zarr.open_group(str(path), mode="r+")[m.name]
    B = m.token_block
    lengths = m.lengths()
    for i, s, b in zip(*np.nonzero(mask)):
        t0 = int(b) * B
        t1 = min(t0 + B, lengths[i])                  # a task computes only planned tokens
        ev = np.array(m.eigenvalues[i, s, t0:t1], dtype=_cdtype(m.dtype))
        if mask[i, s, b] == 2:
            ev[0, 0] = complex(np.inf, 0.0)
        delta = None if m.delta is None else np.asarray(m.delta[i, s, t0:t1], _rdtype(m.dtype))
        values = BlockValues(eig=ev, delta=delta, eig_backend="torch-cpu",
                             scale=_pair(m, schema.SCALE_ARRAYS, i, s, t0, t1),
                             shift=_pair(m, schema.SHIFT_ARRAYS, i, s, t0, t1),
                             frobenius2=None if m.frobenius2 is None else
                             np.asarray(m.frobenius2[i, s, t0:t1], _rdtype(m.dtype)))
        assert write_block(g, int(i), int(s), int(b), t0, values) == mask[i, s, b]


# ----------------------------------------------------------------------------- spectra
def power_law_rates(rng, n, beta, lam_max):
    """n rates with density ∝ λ^β on (0, lam_max]: N(<λ) = n (λ/lam_max)^(β+1) exactly."""
    return lam_max * rng.random(n) ** (1.0 / (beta + 1.0))


def token_spectrum(rng, d, beta, n_ir, dtype="float32", lam_max=0.1, n_unstable=1, zero=False):
    """One token's d eigenvalues ζ: n_ir power-law IR modes (density ∝ λ^β below lam_max),
    one marginal ζ≈1 (the norm's scale direction), n_unstable |ζ|>1, optional ζ=0, and a UV
    bulk (log-normal λ around 1, outside the fit window)."""
    n_uv = d - n_ir - 1 - n_unstable - int(zero)
    lam = np.concatenate([power_law_rates(rng, n_ir, beta, lam_max),
                          np.exp(rng.normal(0.5, 0.8, n_uv)).clip(lam_max * 1.01)])
    theta = np.concatenate([rng.normal(0, 0.2, n_ir), rng.uniform(-np.pi, np.pi, n_uv)])
    zeta = np.exp(-lam + 1j * theta)
    # ζ = 1 up to the eigensolver's rounding (~eps·||J||): complex64 rounds |ζ| to 1 ± 1e-12
    eps = {"float32": 1e-11, "float64": 1e-14}[dtype]
    marginal = np.exp(1j * rng.normal(0, 1e-6, 1)) * (1 + rng.normal(0, eps, 1))
    unstable = np.exp(rng.uniform(0.01, 0.3, n_unstable) + 1j * rng.uniform(-3, 3, n_unstable))
    parts = [zeta, marginal, unstable] + ([np.zeros(1)] if zero else [])
    return np.concatenate(parts).astype(_cdtype(dtype))


def synthetic_model(name="mamba-syn", arch="mamba", beta=-0.2, rows=2, nseq=2, lmax=64, d=48,
                    n_ir=24, layers=None, token_block=8, dtype="float32", seed=0,
                    n_model_layers=6, d_inner=16, d_state=4, layer_length=None):
    """A Mamba-like (arch='mamba': Δ and A_log too) or Transformer-like model of known β."""
    rng = np.random.default_rng(seed)
    ev = np.stack([np.stack([np.stack([
        token_spectrum(rng, d, beta, n_ir, dtype, zero=(t % 16 == 5))
        for t in range(lmax)]) for _ in range(nseq)]) for _ in range(rows)])
    layers = layers if layers is not None else list(range(0, 2 * rows, 2))
    kw = {}
    if arch == "mamba":
        # log10 λ_A spread over -5…4 (the paper's intrinsic range); Δ log-normal like softplus outputs
        a_log = np.log(10.0 ** rng.uniform(-5, 4, (n_model_layers, d_inner, d_state)))
        delta = np.exp(rng.normal(-3.0, 1.5, (rows, nseq, lmax, d_inner)))
        kw = {"a_log": a_log, "delta": delta}
    return SyntheticModel(name=name, eigenvalues=ev, layers=layers, arch=arch, dtype=dtype,
                          token_block=token_block, layer_length=layer_length, **kw)


def null_models(of: SyntheticModel, beta, n=2, kind="random_init", seed=100, **kw):
    """n null models of `of` (named `<of>.<kind>.<k>`, attribute variant = {kind, seed k, of, role}),
    each of known β `beta` (kw: as synthetic_model, e.g. lmax, d, n_ir; arch from `of`)."""
    return [dataclasses.replace(synthetic_model(f"{of.name}.{kind}.{k}", of.arch, beta,
                                                rows=len(of.layers), layers=of.layers, seed=seed + k,
                                                **kw),
                                variant=Variant(kind, k, of.name, "null"))
            for k in range(n)]
