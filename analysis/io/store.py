"""Read a tdos store (docs/store.md; names in sweep/format/schema.py). The store is the only
input of analysis/.

Rows of `eigenvalues`/`delta` are token positions: row t = eig(J_tt). Blocks whose ledger
cell is not 1 (pending, or flagged for non-finite values) read as NaN rows, so row t is
always token t and every consumer filters with `np.isfinite`.
"""
from __future__ import annotations

import os
from functools import cached_property

import numpy as np
import zarr

from sweep.format import schema, variants
from sweep.format.ledger import Ledger, is_done, is_usable
from sweep.format.schema import SCALE_ARRAYS, SHIFT_ARRAYS, StoreError
from sweep.format.variants import Variant


def open_store(path, model=None) -> "Store":
    """Open `path` read-only; `model` picks a group (default: the first model of the store)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise StoreError(f"no store at {path}")
    try:
        root = zarr.open_group(path, mode="r")
        attrs = dict(root.attrs)
    except Exception as exc:  # zarr raises several types for a non-zarr folder
        raise StoreError(f"{path} is not a zarr store ({type(exc).__name__})") from None
    schema.check_format(attrs, path)
    models = list(root.attrs.get("models", []))
    if not models:
        raise StoreError(f"{path} holds no model groups")
    name = models[0] if model is None else model
    if name not in models:
        raise StoreError(f"model {name!r} not in {path}; models: {', '.join(models)}")
    return Store(path, root, name)


class Store:
    """One model group of a store. See docs/api.md for the public reading API."""

    def __init__(self, path, root, name):
        self.path, self.root, self.name = path, root, name
        self.group = root[name]
        self.models = list(root.attrs["models"])

    def model(self, name) -> "Store":
        return open_store(self.path, name)

    def __repr__(self):
        c = self.block_counts()
        return (f"Store({self.path!r}, model={self.name!r}, arch={self.arch}, dtype={self.dtype}, "
                f"layers={self.layers}, done={c['done']}/{c['planned']})")

    # ------------------------------------------------------------------ metadata
    @cached_property
    def identity(self) -> dict:
        return dict(self.group.attrs.get("model", {}))

    @cached_property
    def inputs(self) -> dict:
        return dict(self.group.attrs.get("inputs", {}))

    @cached_property
    def variant(self) -> Variant | None:
        """For a weight variant (docs/nulls.md): Variant(kind, seed, of, role), a null (role
        "null") or an ensemble member (role "ensemble"); None for a trained model."""
        return Variant.from_attrs(self.group.attrs)

    @cached_property
    def nulls(self) -> list[str]:
        """Names of this model's null models in the store, in store order."""
        return self._variants("null")

    @cached_property
    def ensemble(self) -> list[str]:
        """Names of this model's ensemble members (its quantization ensemble) in the store, in
        store order."""
        return self._variants("ensemble")

    def null_kinds(self) -> dict[str, list[str]]:
        """{kind: names of this model's nulls of it}, each in store order."""
        return variants.families(self.root, "null").get(self.name, {})

    def _variants(self, role: str) -> list[str]:
        return variants.folded(self.root, role).get(self.name, [])

    @property
    def arch(self) -> str:
        return self.identity.get("arch", "unknown")

    @property
    def is_mamba(self) -> bool:
        """Whether any layer has a learned decay (Δ_t and A_log: Mamba-style, gated delta
        rule): `ssm_layers` says which."""
        return "delta" in self.group and "a_log" in self.group

    @cached_property
    def layer_kinds(self) -> list[str]:
        """The kind of every model layer ("attention", "mamba", "mamba2", "recurrent",
        "mamba2+attention", … with "+moe" when it routes to experts)."""
        kinds = self.group.attrs.get("layer_kinds")
        if kinds:
            return list(kinds)
        n = int(self.group["a_log"].shape[0]) if self.is_mamba else max(self.layers) + 1
        return ["mamba" if self.is_mamba else "attention"] * n

    def layer_kind(self, layer) -> str:
        return self.layer_kinds[int(layer)]

    @property
    def ssm_layers(self) -> list[int]:
        """Model layers with Δ_t and A_log (Mamba-1, Mamba-2, gated delta rule), swept or not."""
        return [i for i, k in enumerate(self.layer_kinds) if schema.is_ssm(k)]

    def _a_log_shape(self, layer) -> tuple[int, ...]:
        shapes = self.group.attrs.get("a_log_shapes")
        if shapes:
            return tuple(shapes[int(layer)] or ())
        return tuple(self.group["a_log"].shape[1:])

    def delta_channels(self, layer) -> int:
        """Width of Δ_t at model layer `layer`: d_inner (Mamba-1), heads (Mamba-2, gated delta
        rule), heads·key channels (Kimi-Linear's per-channel gate)."""
        widths = self.group.attrs.get("delta_channels")
        return int(widths[int(layer)]) if widths else self._need_ssm(layer, "Δ_t")[0]

    @property
    def dtype(self) -> str:
        """Compute dtype of the sweep ('float32' | 'float64')."""
        return self.identity["dtype"]

    @cached_property
    def software(self) -> dict:
        """Versions on the machine that made the store (torch, cuda, ...); {} if upgraded."""
        return dict(self.root.attrs.get("software") or {})

    @cached_property
    def worker_software(self) -> list[dict]:
        """The distinct software of the workers that computed this group's blocks."""
        return list(self.group.attrs.get("worker_software", []))

    def eig_backend(self, layer) -> np.ndarray:
        """(seq, block) str: the eigensolver that computed each block (schema.EIG_BACKENDS;
        "unknown" for blocks not written, or written before format 2)."""
        codes = np.asarray(self.group["eig_backend"][self.row(layer)])
        return np.asarray(schema.EIG_BACKENDS, dtype=object)[codes]

    def jacobian_path(self, layer) -> np.ndarray:
        """(seq, block) str: which code computed each block's J_tt (schema.JACOBIAN_PATHS:
        "hand-written", "generic"; "unknown" for blocks not written, or before format 3)."""
        if "jacobian_path" not in self.group:
            return np.full(self.group["ledger"].shape[1:], "unknown", dtype=object)
        codes = np.asarray(self.group["jacobian_path"][self.row(layer)])
        return np.asarray(schema.JACOBIAN_PATHS, dtype=object)[codes]

    @property
    def fingerprint(self) -> str:
        return str(self.root.attrs.get("fingerprint", ""))

    @property
    def creation_id(self) -> str:
        """New each time a store is created: with the fingerprint, the store's identity."""
        return str(self.root.attrs["creation_id"])

    @cached_property
    def row_layers(self) -> list[int]:
        """Model layer index of each row of the arrays, in the store's row order: a grown
        store appends rows (sweep/store/grow.py), so it need not be ascending."""
        return [int(x) for x in self.group["layer"][:]]

    @cached_property
    def layers(self) -> list[int]:
        """The swept model layers, ascending (`row` gives each one's row of the arrays)."""
        return sorted(self.row_layers)

    @cached_property
    def layer_length(self) -> dict[int, int]:
        return dict(zip(self.row_layers, (int(x) for x in self.group["layer_length"][:])))

    @property
    def n_seqs(self) -> int:
        return int(self.group["eigenvalues"].shape[1])

    @property
    def max_length(self) -> int:
        return int(self.group["eigenvalues"].shape[2])

    @property
    def d_model(self) -> int:
        return int(self.group["eigenvalues"].shape[3])

    @property
    def token_block(self) -> int:
        return int(self.inputs["token_block"])

    def row(self, layer) -> int:
        try:
            return self.row_layers.index(int(layer))
        except ValueError:
            raise StoreError(f"layer {layer} not in store (layers: {self.layers})") from None

    # ------------------------------------------------------------------ ledger
    def ledger(self) -> np.ndarray:
        """(rows, seq, block) int8 ledger, -1 beyond each row's planned length (sweep.format.ledger);
        rows in the store's order (`row_layers`)."""
        return Ledger.read(self.group).unplanned_marked

    def usable_blocks(self) -> list[tuple[int, int, int]]:
        """(layer, seq, block) of every block read as values: DONE, all finite (not flagged)."""
        i, s, b = np.nonzero(is_usable(self.ledger()))
        return [(self.row_layers[r], int(q), int(c)) for r, q, c in zip(i, s, b)]

    def block_counts(self) -> dict:
        """Planned blocks, done (flagged included, as everywhere), of which flagged, pending."""
        led = Ledger.read(self.group)
        return {"planned": led.total, "done": led.done, "flagged": led.flagged,
                "pending": led.total - led.done}

    def _row_mask(self, layer, seq) -> np.ndarray:
        """(L_layer,) bool: token rows that belong to a usable block (done, not flagged)."""
        n, B = self.layer_length[layer], self.token_block
        usable = is_usable(self.group["ledger"][self.row(layer), seq])
        return np.repeat(usable, B)[:n]       # one row read; the tail past n is unplanned

    # ------------------------------------------------------------------ the primary β
    def beta(self, layer, L=None, **overrides):
        """The primary β at (layer, L), the `Headline` that `tdos analyze` prints for it
        (estimator, mode count, interval, unit, GOF p, modes in the window), under the store's
        recorded analysis settings (`overrides`: Settings fields). L default: the report's.
        The computation lives above this reader (analysis/studies/primary.py); it is reached
        through the package's lazy public names at call time (ARCHITECTURE.md)."""
        import analysis

        settings = analysis.Settings.from_store(self.root.attrs, **overrides)
        return analysis.primary_beta(self, layer, L, settings)

    # ------------------------------------------------------------------ data
    def tokens(self, seq=0) -> np.ndarray:
        return np.asarray(self.group["tokens"][seq])              # (L_max,) int64

    def eigenvalues(self, layer, seq=0) -> np.ndarray:
        """(L_layer, d) complex; rows of pending or flagged blocks are NaN."""
        n = self.layer_length[layer]
        ev = np.array(self.group["eigenvalues"][self.row(layer), seq, :n])
        ev[~self._row_mask(layer, seq)] = np.nan
        return ev

    def scale_direction(self, layer, seq=0) -> tuple[np.ndarray, np.ndarray]:
        """ρ (L_layer,), r (L_layer,) float64 of J_tt along h_t; NaN rows as in `eigenvalues`
        and where not computed (a store upgraded from format 1): the classification then
        uses values only."""
        return self._direction(layer, seq, SCALE_ARRAYS)

    def shift_direction(self, layer, seq=0) -> tuple[np.ndarray, np.ndarray]:
        """ρ (L_layer,), r (L_layer,) float64 of J_tt along 𝟙/√d; as `scale_direction`."""
        return self._direction(layer, seq, SHIFT_ARRAYS)

    def norm_directions(self, layer, seq=0) -> tuple[np.ndarray, np.ndarray]:
        """ρ (L_layer, 2), r (L_layer, 2): column 0 along h_t (scale), 1 along 𝟙/√d (shift);
        what `analysis.spectrum.rates.mode_masks` takes to find the scale class."""
        (a, b), (c, e) = self.scale_direction(layer, seq), self.shift_direction(layer, seq)
        return np.stack([a, c], 1), np.stack([b, e], 1)

    def _direction(self, layer, seq, names):
        return tuple(self._per_token(layer, seq, name) for name in names)

    def frobenius2(self, layer, seq=0) -> np.ndarray:
        """(L_layer,) float64 ‖J_tt‖_F²; NaN rows as in `eigenvalues`."""
        return self._per_token(layer, seq, "frobenius2")

    def nonnormality(self, layer, seq=0) -> np.ndarray:
        """(L_layer,) float64 Henrici's relative departure of J_tt from normality,
        sqrt(max(0, ‖J‖_F² − Σ|ζ_i|²)) / ‖J‖_F: 0 for a normal J_tt, up to 1; NaN rows as
        in `eigenvalues`."""
        return self._per_token(layer, seq, "nonnormality")

    def _per_token(self, layer, seq, name) -> np.ndarray:
        n = self.layer_length[layer]
        a = np.array(self.group[name][self.row(layer), seq, :n], np.float64)
        a[~self._row_mask(layer, seq)] = np.nan
        return a

    # ------------------------------------------------------------------ stacked blocks (depth)
    @cached_property
    def depth(self) -> dict | None:
        """{"spans": [s, ...], "layers": [l0, l1]} of a group swept with `depth:`, else None."""
        d = self.group.attrs.get("depth")
        return dict(d) if d else None

    @property
    def depth_spans(self) -> list[int]:
        """The stack lengths s swept ([] without `depth:`)."""
        return list(self._need_depth()["spans"]) if self.depth else []

    @property
    def lyapunov_layers(self) -> tuple[int, int]:
        """(l0, l1): the run of layers the Lyapunov exponents are taken over (S = l1 − l0 + 1)."""
        l0, l1 = self._need_depth()["layers"]
        return int(l0), int(l1)

    def _walks_done(self, seq) -> np.ndarray:
        """(L,) bool: tokens whose walk up the layers is written."""
        n, B = min(self.layer_length.values()), self.token_block
        return np.repeat(is_done(self.group["depth_ledger"][seq]), B)[:n]

    def stack_eigenvalues(self, layer, span, seq=0) -> np.ndarray:
        """(L, d) complex: row t = eig(P_t(layer, span)), P_t = J^(layer+span−1)_tt ⋯ J^(layer)_tt;
        NaN rows for tokens not walked yet."""
        return self._stack("stack_eigenvalues", layer, span, seq)

    def stack_gain(self, layer, span, seq=0) -> np.ndarray:
        """(L,) float64 ‖P_t(layer, span)‖_F² / d: the mean squared gain of a random unit
        perturbation of h_{layer,t} after `span` blocks; NaN as in `stack_eigenvalues`."""
        return self._stack("stack_gain", layer, span, seq).astype(np.float64)

    def stack_lyapunov(self, layer, span, seq=0) -> np.ndarray:
        """(L, d) float64 (1/span) ln σ_i(P_t(layer, span)), largest first; NaN as in
        `stack_eigenvalues`."""
        return self._stack("stack_lyapunov", layer, span, seq).astype(np.float64)

    def stack_shift_direction(self, layer, span, seq=0) -> tuple[np.ndarray, np.ndarray]:
        """ρ (L,), r (L,) float64: P_t(layer, span)'s Rayleigh quotient and relative residual
        along 𝟙/√d; NaN as in `stack_eigenvalues`."""
        return tuple(self._stack(n, layer, span, seq).astype(np.float64)
                     for n in ("stack_shift_rayleigh", "stack_shift_residual"))

    def lyapunov(self, seq=0) -> np.ndarray:
        """(L, d) float64 finite-depth Lyapunov exponents γ_i = (1/S) ln σ_i(P_t(l0, S)) of each
        token over `lyapunov_layers` (S layers), largest first; NaN rows for tokens not walked
        yet."""
        return self._run_exponents("lyapunov", seq)

    def lyapunov_qr(self, seq=0) -> np.ndarray:
        """(L, d) float64 Benettin's QR exponents over the run from the identity frame, largest
        first: a diagnostic that depends on the basis at finite depth, not the exponents."""
        return self._run_exponents("lyapunov_qr", seq)

    def _run_exponents(self, name, seq):
        self._need_depth()
        n = min(self.layer_length.values())
        g = np.array(self.group[name][seq, :n], np.float64)
        g[~self._walks_done(seq)] = np.nan
        return g

    def _stack(self, name, layer, span, seq):
        spans = self.depth_spans
        l0, l1 = self.lyapunov_layers
        if int(span) not in spans:
            raise StoreError(f"span {span} not swept in model {self.name!r} (depth.spans: {spans})")
        if not l0 <= int(layer) <= l1 - int(span) + 1:
            raise StoreError(f"no stack of {span} blocks starts at layer {layer} in model "
                             f"{self.name!r}: starts run {l0}..{l1 - int(span) + 1}")
        n = min(self.layer_length.values())
        a = np.array(self.group[name][spans.index(int(span)), self.row(layer), seq, :n])
        a[~self._walks_done(seq)] = np.nan
        return a

    # ------------------------------------------------------------------ token memory
    @cached_property
    def memory_meta(self) -> dict:
        """{lags, probes, every, estimator} of the group's token memory (StoreError: none)."""
        meta = self.group.attrs.get("memory")
        if not meta:
            raise StoreError(f"model {self.name!r} holds no token memory — add `memory: {{lags: 64, "
                             f"probes: 8, every: 8}}` to the config and run the sweep again "
                             f"(--resume computes only the memory)")
        return dict(meta)

    def conv_width(self, layer) -> int | None:
        """Taps of model layer `layer`'s causal depthwise convolution (Mamba's conv_kernel,
        LFM2's L_cache), 0 when it has none, None when the store predates its recording (a
        `tdos sweep --resume` records it)."""
        widths = self.group.attrs.get("conv_widths")
        return None if widths is None else int(widths[int(layer)])

    def memory(self, layer, seq=0) -> np.ndarray:
        """(L_layer, lags+1) float64 m_t(k) = ‖J_{t,t−k}‖_F²; NaN where t − k < 0, at tokens
        not sampled, and for profiles not written yet."""
        return self._memory("memory", layer, seq)

    def memory_stderr(self, layer, seq=0) -> np.ndarray:
        """(L_layer, lags+1) float64: the standard error of `memory` (0 when exact)."""
        return self._memory("memory_stderr", layer, seq)

    def _memory(self, name, layer, seq):
        self.memory_meta
        n = self.layer_length[layer]
        a = np.array(self.group[name][self.row(layer), seq, :n], np.float64)
        if not is_done(self.group["memory_ledger"][self.row(layer), seq]):
            a[:] = np.nan
        return a

    def _need_depth(self) -> dict:
        if not self.depth:
            raise StoreError(f"model {self.name!r} was swept without `depth:` — add "
                             f"`depth: {{spans: [2, 4]}}` to the config and sweep into a new store")
        return self.depth

    def delta(self, layer, seq=0) -> np.ndarray:
        """(L_layer, delta_channels(layer)) selective step Δ_t: per channel (Mamba-1), per head
        (Mamba-2: softplus(dt + dt_bias); gated delta rule: −g_t / exp(A_log) of the log decay
        g_t its kernel receives, softplus(a_t + dt_bias) where g_t = −exp(A_log)·softplus(a_t
        + dt_bias)), per key channel of each head (Kimi-Linear); NaN rows as in `eigenvalues`."""
        self._need_ssm(layer, "delta")
        n = self.layer_length[layer]
        de = np.array(self.group["delta"][self.row(layer), seq, :n, : self.delta_channels(layer)])
        de[~self._row_mask(layer, seq)] = np.nan
        return de

    def a_log(self, layer) -> np.ndarray:
        """A_log of model layer `layer` (swept or not): (d_inner, d_state) Mamba-1, (heads,)
        Mamba-2 and the gated delta rule (one A per head)."""
        shape = self._need_ssm(layer, "a_log")
        a = np.asarray(self.group["a_log"][int(layer)])                 # (channel, state)
        return a[: shape[0], : shape[1]] if len(shape) == 2 else a[: shape[0], 0]

    def intrinsic_rates(self, layer) -> np.ndarray:
        """λ_A = exp(A_log), float64: d_inner·d_state modes (Mamba-1), one per head (Mamba-2,
        gated delta rule)."""
        return np.exp(self.a_log(layer).astype(np.float64)).ravel()

    def effective_rates(self, layer, seq=0) -> np.ndarray:
        """λ_eff = Δ_t·exp(A_log), float64, the rate at which the layer's state decays at token
        t: (L_layer, d_inner, d_state) Mamba-1, (L_layer, delta_channels) otherwise (for a gated
        delta rule, −g_t: the log decay transformers hands its kernel)."""
        lam = np.exp(self.a_log(layer).astype(np.float64))
        return effective(self.delta(layer, seq).astype(np.float64), lam)

    @property
    def n_model_layers(self) -> int:
        return len(self.layer_kinds)

    def _need_ssm(self, layer, what) -> tuple[int, ...]:
        if not self.is_mamba or not schema.is_ssm(self.layer_kind(layer)):
            kind = self.layer_kinds[int(layer)] if int(layer) < len(self.layer_kinds) else "?"
            raise StoreError(f"model {self.name!r} layer {layer} ({kind}) has no {what}: only "
                             f"layers with a learned decay ({', '.join(schema.SSM_KINDS)}; "
                             f"here layers {self.ssm_layers}) do")
        return self._a_log_shape(layer)


def effective(delta: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """Δ_t·λ_A: delta (..., c), lam (c, N) Mamba-1 -> (..., c, N); lam (H,) one rate per head,
    H dividing c (c = H, or c = H·K key channels stored head-major) -> (..., c)."""
    if lam.ndim == 2:
        return delta[..., None] * lam
    return delta * np.repeat(lam, delta.shape[-1] // lam.shape[0])
