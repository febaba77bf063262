# `make test` and `make demo` create .venv when missing: the CPU torch pin first (any other
# torch requirement would pull a multi-GB CUDA build), then tdos itself in editable mode.
PY := .venv/bin/python

.venv/.ready: pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

.PHONY: venv test demo bench
venv: .venv/.ready

test: .venv/.ready
	$(PY) -m pytest -q -x -rs --durations=15

demo: .venv/.ready
	.venv/bin/tdos sweep configs/demo.yaml
	.venv/bin/tdos analyze out/demo.zarr --out out/demo-report
	.venv/bin/tdos compare out/demo.zarr:mamba out/demo.zarr:neox --out out/demo-compare

bench: .venv/.ready
	$(PY) -u benchmarks/bench_block.py --models mamba-370m --name bench_block_mamba-v2 --naive 31 --solver-matrices 0
