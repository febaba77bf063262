"""The synthetic example of docs/analysis.md, "Reading a result against its null", and the
measured family-wise error and power of Holm's correction (tests/test_nulls.py's simulation).
Run: PYTHONPATH=$PWD:tests .venv/bin/python benchmarks/null_example.py  (about a minute)

A store written through the real writer (tests/synthetic_store.py): model "trained" of
β = −0.2 (2 sequences × 64 tokens, d = 48, 24 power-law IR modes per token) and three
random_init nulls of β = −0.5 (same shape, other seeds); a second trained model "other" of
β = −0.2 and two shuffled nulls of the same β −0.2 (a null it cannot be told from).
"""
import numpy as np

from analysis.io.store import open_store
from analysis.studies.nulls import null_study
from sweep.format.settings import Settings
from synthetic_store import null_models, synthetic_model, write_store
from test_nulls import _family

kw = dict(nseq=2, lmax=64, d=48, n_ir=24)
a = synthetic_model("trained", "attention", -0.2, rows=1, **kw)
b = synthetic_model("other", "attention", -0.2, rows=1, seed=9, **kw)
path = write_store("/tmp/null_example.zarr", [a, b, *null_models(a, -0.5, n=3, **kw),
                                              *null_models(b, -0.2, n=2, kind="shuffled", seed=300, **kw)])
s = Settings(n_boot=500)
for name in ("trained", "other"):
    st = open_store(path, name)
    c = null_study(st, 0, 64, s, s.primary_for(False)).comparisons[0]
    print(f"{name}: {c.observable} = {c.trained.value:+.3f} [{c.trained.lo:+.3f}, {c.trained.hi:+.3f}] "
          f"({c.trained.unit}); nulls {np.round(c.null_values, 3).tolist()}; z = {c.z:+.2f}; above "
          f"{c.rank} of {len(c.nulls)}; Δ = {c.delta:+.3f} [{c.lo:+.3f}, {c.hi:+.3f}]; p raw "
          f"{c.p_raw:.2g} ({c.p_method}); {c.verdict} (alone)")

rng = np.random.default_rng(42)
fw, raw = [], []
for _ in range(1000):
    f = _family(rng, [0.0] * 40)
    fw.append(any(t.verdict(0.9) == "differ" for t in f.tests))
    raw.append(any(t.p_raw < 0.1 for t in f.tests))
print(f"40 identical comparisons, 1000 repetitions: family-wise error Holm {np.mean(fw):.3f}, "
      f"uncorrected {np.mean(raw):.3f}")
found = [np.mean([t.verdict(0.9) == "differ" for t in _family(rng, [0.15] * 10 + [0.0] * 30).tests[:10]])
         for _ in range(200)]
print(f"10 of 40 with Δβ = 0.15 (1500 modes each side), 200 repetitions: Holm finds {np.mean(found):.3f}")
