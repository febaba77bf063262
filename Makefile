# `make test` and `make demo` create .venv when missing: the CPU torch pin first (any other
# torch requirement would pull a multi-GB CUDA build), then tdos itself in editable mode,
# every dependency at the version requirements.lock holds (what `make test` was last green on).
PY := .venv/bin/python
FAMILY_TESTS := tests/test_families.py tests/test_generic_ssm.py tests/test_selfcheck.py \
                tests/test_versions.py tests/test_wheel.py tests/test_local.py \
                tests/test_layer_local.py tests/test_depth_sweep.py tests/test_memory_sweep.py \
                tests/test_decay.py
# the Hugging Face cache layout whose blob names stand for sha256s: the newest huggingface_hub too
FAMILY_TESTS += tests/test_hashes.py

.venv/.ready: pyproject.toml requirements.lock
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q -c requirements.lock torch==2.13.0
	$(PY) -m pip install -q -c requirements.lock -e '.[dev]'
	touch $@

.PHONY: venv test test-latest lock demo bench docs
venv: .venv/.ready

test: .venv/.ready
	$(PY) -m pytest -q -x -rs --durations=15

# The family tests in a fresh venv with the newest releases pyproject allows (no lock), or
# with one transformers forced: `make test-latest TRANSFORMERS=5.24.0`.
test-latest:
	rm -rf .venv-latest
	python3 -m venv .venv-latest
	.venv-latest/bin/python -m pip install -q torch==2.13.0
	.venv-latest/bin/python -m pip install -q -e '.[dev]' $(if $(TRANSFORMERS),'transformers==$(TRANSFORMERS)')
	.venv-latest/bin/python -m pip list 2>/dev/null | grep -iE '^(transformers|torch|kernels) '
	.venv-latest/bin/python -m pytest -q -x -p no:cacheprovider $(FAMILY_TESTS)

# Regenerate requirements.lock from pyproject's ranges: the newest allowed releases, resolved
# in a fresh venv; then run `make test` on it before committing the new lock.
lock:
	rm -rf .venv-lock
	python3 -m venv .venv-lock
	.venv-lock/bin/python -m pip install -q torch==2.13.0
	.venv-lock/bin/python -m pip install -q '.[dev]'
	{ echo "# make lock: every package of .[dev] at the version make test was green on"; \
	  .venv-lock/bin/python -m pip freeze --all --exclude-editable | grep -v -e "^tdos" -e "^pip=="; } > requirements.lock
	rm -rf .venv-lock build

demo: .venv/.ready
	.venv/bin/tdos sweep configs/demo.yaml
	.venv/bin/tdos analyze out/demo.zarr --out out/demo-report
	.venv/bin/tdos compare out/demo.zarr:mamba out/demo.zarr:neox --out out/demo-compare

bench: .venv/.ready
	$(PY) -u benchmarks/bench_block.py --models mamba-370m --name bench_block_mamba-v2 --naive 31 --solver-matrices 0

# Pages whose numbers come from committed results: docs/templates/*.md rendered into docs/
# from the JSON each names (analysis/report/docgen.py); tests/test_docgen.py checks they agree.
docs: .venv/.ready
	$(PY) -m analysis.report.docgen
