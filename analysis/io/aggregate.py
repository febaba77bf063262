"""Incremental aggregation of a store into per-token histograms on the global log bins.

Kept beside the store in `<store>.agg` (zarr v3; analysis never writes into the store):

    <model>/hist_<m>    (layer, seq, token, col) uint32  stable collective rates λ = −ln|ζ|
           /special_<m> (layer, seq, token, class) uint32  marginal, unstable, zero, nonfinite, scale
           /min_rate_<m> (layer, seq, token) float64  smallest stable rate of the token (exact)
           /hist_eff    (layer, seq, token, col) uint32  Δ_t·λ_A, every mode of a layer with a decay
           /hist_delta  (layer, seq, token, col) uint32  Δ_t, every channel (or head) of it
           /ledger      (layer, seq, block) int8   store ledger value the block was aggregated at

<m> is each mode count (`rates.MODES`): all_stable and symmetry_removed, from one pass.

Histograms are integer counts on fixed edges, so sums over any subset of (seq, token) equal
a from-scratch pass exactly; `update` reads only blocks whose store ledger changed since.
"""
from __future__ import annotations

import os
import shutil
from functools import lru_cache

import numpy as np
import zarr

from analysis.io.ssm import effective
from analysis.io.store import Store, open_store
from analysis.spectrum.rates import (CLASSES, N_COLS, SCALE_RESIDUAL_MAX, classify_rows,
                                     histogram_rows, marginal_threshold, mode_key)
from sweep.format.ledger import is_done, is_flagged, is_usable
from sweep.format.schema import SCALE_ARRAYS, SHIFT_ARRAYS
from sweep.format.settings import DEFAULT_MODES, MODES

AGG_FORMAT = 5              # 2: the "scale" class; 3: LayerNorm's shift direction; 4: layer_length;
                            # 5: both mode counts, bins 1e-17…1e8 (older aggregates are rebuilt)
HISTS_MAMBA = ("hist_eff", "hist_delta")


def agg_path(store_path) -> str:
    return os.fspath(store_path).rstrip("/\\") + ".agg"


def aggregate(store_path, path=None, progress=None) -> "Aggregate":
    """Bring the aggregate of every model of `store_path` up to date; return its reader."""
    path = path or agg_path(store_path)
    st = open_store(store_path)
    root = _open_root(path, st)
    for name in st.models:
        update_model(st.model(name), root, progress=progress)
    return Aggregate(path, store_path)


def _open_root(path, st: Store):
    """Open the aggregate; rebuild from scratch when it belongs to another store/config
    (a store made again at the same path from the same config is another store)."""
    if os.path.exists(path):
        root = zarr.open_group(path, mode="r+")
        a = root.attrs
        if (a.get("agg_format") == AGG_FORMAT and a.get("fingerprint") == st.fingerprint
                and a.get("creation_id") == st.creation_id
                and a.get("models") == st.models and _shapes_match(root, st)):
            return root
        shutil.rmtree(path)
    root = zarr.open_group(path, mode="w")
    root.attrs.update({"agg_format": AGG_FORMAT, "fingerprint": st.fingerprint,
                       "creation_id": st.creation_id, "models": st.models, "store": os.path.abspath(st.path)})
    return root


def _shapes_match(root, st: Store) -> bool:
    for name in st.models:
        if name in root and root[name]["ledger"].shape != st.model(name).group["ledger"].shape:
            return False
    return True


def _create_model(root, st: Store):
    rows, nseq, lmax, B = len(st.row_layers), st.n_seqs, st.max_length, st.token_block
    g = root.create_group(st.name)
    g.attrs.update({"threshold": marginal_threshold(st.dtype), "dtype": st.dtype,
                    "arch": st.arch, "layers": st.row_layers, "classes": list(CLASSES),
                    "layer_length": [st.layer_length[layer] for layer in st.row_layers],
                    "scale_by_eigenvector": True, "shift_by_eigenvector": True,   # format 2: always stored
                    "scale_residual_max": SCALE_RESIDUAL_MAX, "modes": list(MODES)})
    names = tuple(f"hist_{mode_key(m)}" for m in MODES) + (HISTS_MAMBA if st.is_mamba else ())
    for name in names:
        g.create_array(name, shape=(rows, nseq, lmax, N_COLS), chunks=(1, 1, B, N_COLS),
                       dtype=np.uint32, fill_value=0,
                       dimension_names=("layer", "seq", "token", "col"))
    for key in map(mode_key, MODES):
        g.create_array(f"special_{key}", shape=(rows, nseq, lmax, len(CLASSES)),
                       chunks=(1, 1, B, len(CLASSES)), dtype=np.uint32, fill_value=0,
                       dimension_names=("layer", "seq", "token", "class"))
        g.create_array(f"min_rate_{key}", shape=(rows, nseq, lmax), chunks=(1, 1, B),
                       dtype=np.float64, fill_value=np.nan, dimension_names=("layer", "seq", "token"))
    g.create_array("ledger", shape=(rows, nseq, -(-lmax // B)), chunks=(rows, nseq, -(-lmax // B)),
                   dtype=np.int8, fill_value=0, dimension_names=("layer", "seq", "block"))
    return g


def update_model(st: Store, root, progress=None) -> int:
    """Aggregate the blocks of one model that are new since the last update; return how many."""
    g = root[st.name] if st.name in root else _create_model(root, st)
    src = st.ledger()
    agg = np.asarray(g["ledger"][:])
    todo = np.argwhere(is_done(src) & (agg != src))
    thr = float(g.attrs["threshold"])
    rates_a = {}
    for n, (i, s, b) in enumerate(todo):
        layer = st.row_layers[i]                  # rows as the store's (not ascending when grown)
        if layer in st.ssm_layers and layer not in rates_a:
            # (d_inner, d_state) Mamba-1, (heads,) Mamba-2 and the delta rule; Δ_t's width
            rates_a[layer] = np.exp(st.a_log(layer).astype(np.float64)), st.delta_channels(layer)
        _aggregate_block(st, g, i, s, b, thr, rates_a.get(layer), flagged=bool(is_flagged(src[i, s, b])))
        agg[i, s, b] = src[i, s, b]
        if (n + 1) % 64 == 0:
            g["ledger"][:] = agg    # checkpoint: an interrupted update keeps most of its work
        if progress is not None:
            progress(n + 1, len(todo))
    if len(todo):
        g["ledger"][:] = agg        # written after the chunks: the ledger is the record
    return len(todo)


def _aggregate_block(st: Store, g, i, s, b, thr, decay, flagged):
    """Histogram one block's tokens; a flagged block's histograms are written as zeros.
    `decay`: (λ_A, Δ_t's width) of a layer with a decay, else None."""
    B = st.token_block
    t0, t1 = b * B, min((b + 1) * B, st.layer_length[st.row_layers[i]])
    zeta = np.asarray(st.group["eigenvalues"][i, s, t0:t1])           # (T, d)
    T = t1 - t0
    rho, resid = _scale_chunk(st, i, s, t0, t1)                       # (T, 2), (T, 2)
    if flagged:
        zeta = np.full_like(zeta, np.nan)
    for modes, (stable, special) in classify_rows(zeta, thr, rho, resid).items():
        key = mode_key(modes)
        g[f"hist_{key}"][i, s, t0:t1] = histogram_rows(stable)
        g[f"special_{key}"][i, s, t0:t1] = special
        with np.errstate(all="ignore"):
            g[f"min_rate_{key}"][i, s, t0:t1] = np.where(np.isfinite(stable).any(1), np.nanmin(
                np.where(np.isfinite(stable), stable, np.inf), axis=1), np.nan)
    if decay is not None:
        lam_a, c = decay
        delta = np.asarray(st.group["delta"][i, s, t0:t1, :c], np.float64)   # (T, c)
        if flagged:
            delta = np.full_like(delta, np.nan)
        # Δ_t·λ_A: (T, d_inner·d_state) for Mamba-1, (T, c) otherwise
        g["hist_eff"][i, s, t0:t1] = histogram_rows(effective(delta, lam_a).reshape(T, -1))
        g["hist_delta"][i, s, t0:t1] = histogram_rows(delta)


def _scale_chunk(st: Store, i, s, t0, t1):
    """ρ (T, 2), r (T, 2) of one block, columns scale (h_t) and shift (𝟙/√d); NaN where not
    computed (no such mode: value rule only)."""
    rho, resid = ([np.asarray(st.group[n][i, s, t0:t1], np.float64) for n in pair]
                  for pair in zip(SCALE_ARRAYS, SHIFT_ARRAYS))
    return np.stack(rho, 1), np.stack(resid, 1)


class Aggregate:
    """Read side of `<store>.agg`: sums over sequences and token prefixes t < L."""

    def __init__(self, path, store_path=None, model=None, skip=0):
        self.path = path
        self.root = zarr.open_group(path, mode="r")
        self.models = list(self.root.attrs["models"])
        self.name = model or self.models[0]
        self.g = self.root[self.name]
        self.store_path = store_path
        self.skip = int(skip)       # token positions t < skip read as not there

    def model(self, name) -> "Aggregate":
        return Aggregate(self.path, self.store_path, name, self.skip)

    def skipping(self, k) -> "Aggregate":
        """This aggregate with token positions t < k left out of every sum, count and
        resampling (analysis.skip_positions: e.g. a BOS or attention-sink position 0)."""
        return Aggregate(self.path, self.store_path, self.name, k)

    @property
    def layers(self) -> list[int]:
        return list(self.g.attrs["layers"])

    @property
    def threshold(self) -> float:
        return float(self.g.attrs["threshold"])

    @property
    def scale_by_eigenvector(self) -> bool:
        """Whether the scale mode was identified by ρ_t, r_t (False: older store, value rule)."""
        return bool(self.g.attrs.get("scale_by_eigenvector", False))

    @property
    def shift_by_eigenvector(self) -> bool:
        """Whether LayerNorm's shift direction 𝟙/√d was checked too (False: older store)."""
        return bool(self.g.attrs.get("shift_by_eigenvector", False))

    @property
    def is_mamba(self) -> bool:
        return "hist_eff" in self.g

    def _row(self, layer):
        return self.layers.index(int(layer))

    def ledger(self) -> np.ndarray:
        return np.asarray(self.g["ledger"][:])

    def token_hist(self, layer, kind="block", modes=DEFAULT_MODES) -> np.ndarray:
        """(seq, token, col) per-token histograms of one layer (zeros where not aggregated);
        kind "block" (collective rates under mode count `modes`), "eff" or "delta" (Mamba)."""
        name = f"hist_{mode_key(modes)}" if kind == "block" else f"hist_{kind}"
        h = _load(self.path, self.name, name, self._row(layer), self._stamp())
        if self.skip:
            h = h.copy()                 # the cached array stays whole
            h[:, :self.skip] = 0
        return h

    def token_done(self, layer) -> np.ndarray:
        """(seq, token) bool: token rows aggregated from a done (unflagged) block."""
        row = self._row(layer)
        led = is_usable(self.ledger()[row])
        arr = self.g[f"hist_{mode_key(DEFAULT_MODES)}"]
        B = arr.chunks[2]
        done = np.repeat(led, B, axis=1)[:, : arr.shape[2]]
        # a layer's last block may be partial: tokens past its planned length were never computed
        done[:, self.g.attrs["layer_length"][row]:] = False
        done[:, :self.skip] = False
        return done

    def hist(self, layer, L=None, kind="block", seqs=None, modes=DEFAULT_MODES) -> np.ndarray:
        """(col,) counts pooled over sequences `seqs` (default all) and tokens t < L."""
        h = self.token_hist(layer, kind, modes)
        h = h if seqs is None else h[list(seqs)]
        return h[:, :L].sum(axis=(0, 1), dtype=np.int64)

    def special(self, layer, L=None, modes=DEFAULT_MODES) -> dict:
        """Class counts of tokens t < L under `modes` (+ "tokens"). all-stable:
        "unstable" counts |ζ| ≥ 1 and nothing is marginal or scale."""
        arr = self.g[f"special_{mode_key(modes)}"]
        sp = np.asarray(arr[self._row(layer)])[:, self.skip:L].sum(axis=(0, 1), dtype=np.int64)
        out = dict(zip(CLASSES, (int(x) for x in sp)))
        out["tokens"] = int(self.token_done(layer)[:, :L].sum())
        return out

    def min_rate(self, layer, L=None, modes=DEFAULT_MODES) -> float:
        m = np.asarray(self.g[f"min_rate_{mode_key(modes)}"][self._row(layer)])[:, self.skip:L]
        return float(np.nanmin(m)) if np.isfinite(m).any() else float("nan")

    def _stamp(self):
        """Changes whenever the aggregate ledger or the store behind it changes,
        invalidating the per-layer cache."""
        return hash((self.root.attrs.get("creation_id"), self.ledger().tobytes()))


@lru_cache(maxsize=16)
def _load(path, model, name, row, stamp):
    return np.asarray(zarr.open_group(path, mode="r")[model][name][row])
