"""The sweep's view of what is done: counts over a store's groups, the rows of `tdos status`,
walks and lag profiles. The ledger itself is read by one class, sweep.format.ledger.Ledger,
beside the predicates that say what "done" means."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import zarr

from sweep.format import schema, variants
from sweep.format.ledger import Ledger, is_done


@dataclass(frozen=True)
class LedgerCounts:
    """Blocks of the planned part of the ledgers, and A_log layers still missing."""

    total: int                 # planned blocks
    done: int                  # in the ledger (flagged included)
    flagged: int               # of which non-finite
    missing_a_log: int         # model layers whose A_log is not written (Mamba-style)
    missing_walks: int = 0     # (sequence, token block) walks whose stacks are not written (depth)
    missing_memory: int = 0    # (layer row, sequence) lag profiles not written (memory)

    @property
    def complete(self) -> bool:
        return (self.done == self.total and self.missing_a_log == 0 and self.missing_walks == 0
                and self.missing_memory == 0)


def counts(root: zarr.Group, names, within: dict | None = None) -> LedgerCounts:
    """LedgerCounts summed over the model groups `names`, each seen as `within` says
    ({name: (model layers, sequences)}: a config's part of a grown store; None: all)."""
    ledgers = [Ledger.read(root[n]).within(*within[n]) if within else Ledger.read(root[n])
               for n in names]
    return LedgerCounts(sum(x.total for x in ledgers), sum(x.done for x in ledgers),
                        sum(x.flagged for x in ledgers),
                        sum(len(x.missing_a_log) for x in ledgers),
                        sum(len(x.pending_walks()) for x in ledgers),
                        sum(len(x.pending_memory()) for x in ledgers))


def _groups_with(path: str, array: str):
    """(model name, group, its Ledger) of every trained model of the store at `path` holding
    `array` (its variants are counted in variant_rows)."""
    root = zarr.open_group(str(path), mode="r")
    for name in variants.trained_models(root):
        if name in root and array in root[name]:
            yield name, root[name], Ledger.read(root[name])


def walk_rows(path: str) -> list[dict]:
    """Per model swept with `depth:`: its spans, run of layers, and walks done / planned."""
    out = []
    for name, g, led in _groups_with(path, "depth_ledger"):
        total = int(led.planned[0].sum())
        out.append({"model": name, "spans": g.attrs["depth"]["spans"],
                    "layers": g.attrs["depth"]["layers"], "total": total,
                    "done": total - len(led.pending_walks())})
    return out


def memory_rows(path: str) -> list[dict]:
    """Per model swept with `memory:`: its settings and (layer, sequence) profiles done / planned."""
    return [{"model": name, **g.attrs["memory"], "total": led.memory.size,
             "done": led.memory.size - len(led.pending_memory())}
            for name, g, led in _groups_with(path, "memory_ledger")]


def variant_rows(path: str, role: str = "null") -> dict[str, dict]:
    """Per trained model with variants of `role` (its nulls, or its ensemble members), those
    together: their names and seeds per kind, blocks done (flagged included) / flagged /
    planned summed over them, how many are complete (every block, A_log, walk and profile),
    walks and lag profiles done / planned when swept (else None), and the sequences they rest
    on beside the model's."""
    root = zarr.open_group(str(path), mode="r")
    found = variants.variants(root)
    out = {}
    for model, by_kind in variants.families(root, role).items():
        names = [n for group in by_kind.values() for n in group]
        if not names:
            continue
        leds = [Ledger.read(root[n]) for n in names]
        kinds = {kind: [found[n].seed for n in group] for kind, group in by_kind.items()}
        walks = [(int(x.planned[0].sum()) - len(x.pending_walks()), int(x.planned[0].sum()))
                 for x in leds if x.walks is not None]
        profiles = [(x.memory.size - len(x.pending_memory()), x.memory.size)
                    for x in leds if x.memory is not None]
        out[model] = {"models": names, "kinds": kinds, "done": sum(x.done for x in leds),
                      "flagged": sum(x.flagged for x in leds), "total": sum(x.total for x in leds),
                      "complete": sum(counts(root, [n]).complete for n in names),
                      "walks": _sum_pairs(walks), "profiles": _sum_pairs(profiles),
                      "sequences": (min(x.residual.shape[1] for x in leds),
                                    int(root[model].attrs["inputs"]["sequences"]))}
    return out


def _sum_pairs(pairs) -> tuple[int, int] | None:
    return (sum(a for a, _ in pairs), sum(b for _, b in pairs)) if pairs else None


def status_rows(path: str) -> list[dict]:
    """Per trained model and layer: blocks done / flagged / total, tokens planned, sequences
    whose h_l is stored (of how many), dtype, kind. Weight variants are summed in variant_rows."""
    from sweep.store.writer import group_ready

    root = zarr.open_group(str(path), mode="r")
    try:
        schema.check_format(root.attrs, path)
    except schema.StoreError as e:
        from sweep.errors import StoreMismatch

        raise StoreMismatch(f"store: {e}") from None
    rows = []
    for name in _models_and_unread(root):
        if not group_ready(root, name):
            rows.append({"model": name, "layer": None, "done": 0, "flagged": 0, "total": None,
                         "tokens": None, "residual": None, "dtype": None, "kind": None})
            continue
        g = root[name]
        led = Ledger.read(g)
        kinds = g.attrs.get("layer_kinds") or []
        for r in np.argsort(led.layers, kind="stable"):       # a grown store's rows: appended
            layer, n = led.layers[r], led.lengths[r]
            done, flagged, total = led.row_counts(r)
            stored = int(is_done(led.residual[r]).sum())
            rows.append({"model": name, "layer": int(layer), "done": done,
                         "flagged": flagged, "total": total, "tokens": int(n),
                         "residual": f"{stored}/{led.residual.shape[1]}",
                         "dtype": g.attrs["model"]["dtype"],
                         "kind": kinds[int(layer)] if kinds else None})
    return rows


def _models_and_unread(root) -> list[str]:
    """The root's models that are not variants, with every group still being made (no
    attributes yet: listed on its own, as `tdos status` shows a sweep starting)."""
    found = variants.variants(root)
    return [n for n in root.attrs.get("models", []) if n not in found]
