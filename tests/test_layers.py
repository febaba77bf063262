"""The package layers, as data: every module of sweep/, analysis/ and cluster/ (recursively)
imports only the rooms its rule allows, no import cycle anywhere, sweep imports cluster and
never the other way, the store format (sweep.format) imports nothing of the three packages,
no module outside the one door (sweep/checkpoints/hf.py) touches a private transformers or datasets
name, and a test of the test for each."""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

from sweep.checkpoints import hf

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("sweep", "analysis", "cluster")


def copy_packages(dest: Path) -> None:
    """A copy of tdos' three packages under `dest`, for a test of a test to plant code in."""
    for top in PACKAGES:
        shutil.copytree(REPO / top, dest / top, ignore=shutil.ignore_patterns("__pycache__"))

# room (a module or package prefix) -> the rooms it may import besides itself; the longest
# prefix naming a module decides. Declarations every stage of sweep may read: sweep.errors and
# the store format sweep.format (arrays, ledger, dtypes, the analysis section), the ground
# floor that sweep writes and analysis reads: it imports nothing of sweep, analysis or cluster.
DECLARATIONS = ("sweep.errors", "sweep.format")
FORMAT = ("sweep.format",)            # all of sweep that analysis may import
RULES = {
    "sweep.errors": (),
    "sweep.format": (),
    # the checkpoint room: the readers, the door, the variants' weight makers (below the plan)
    "sweep.checkpoints": DECLARATIONS,
    # errors, the cluster's own section, the variant kinds' names and roles (no torch), and
    # how a path is tested for a directory (as the readers test it)
    "sweep.config": (*DECLARATIONS, "cluster.config", "sweep.checkpoints.kinds",
                     "sweep.checkpoints.reader"),
    "sweep.plan": (*DECLARATIONS, "sweep.config", "sweep.checkpoints"),   # plan reads checkpoints
    "sweep.store": (*DECLARATIONS, "sweep.config", "sweep.plan"),
    "sweep.tasks": (*DECLARATIONS, "sweep.plan"),
    "sweep.numerics": (*DECLARATIONS, "sweep.config.choices"),
    "sweep.blocks": (*DECLARATIONS, "sweep.numerics", "sweep.plan.architecture"),
    "sweep.generic": (*DECLARATIONS, "sweep.numerics", "sweep.plan", "sweep.checkpoints"),
    "sweep.worker": (*DECLARATIONS, "sweep.plan", "sweep.store", "sweep.tasks", "sweep.numerics",
                     "sweep.blocks", "sweep.generic", "sweep.checkpoints"),   # workers: tasks, store, plan
    "cluster": (),                                     # owns its config: nothing of sweep
    "sweep.budget": ("sweep", "cluster"),
    "sweep.process": ("sweep.checkpoints.hashes",),   # the cache directory; runs the probe as a string
    "sweep.run": ("sweep", "cluster", "analysis.views"),
    "sweep.export": ("sweep",),                                       # tdos export-null: a client
    "sweep.cli": ("sweep", "cluster", "analysis"),
    "sweep.__main__": ("sweep",),
    "sweep": (),                                                      # the package docstring
    # analysis: each room imports only the rooms above it; numbers print through _format
    "analysis._plot": FORMAT,
    "analysis._format": FORMAT,
    "analysis.spectrum": (*FORMAT, "analysis._plot", "analysis._format"),
    "analysis.io": (*FORMAT, "analysis._plot", "analysis._format", "analysis.spectrum"),
    "analysis.fit": (*FORMAT, "analysis._plot", "analysis._format", "analysis.spectrum",
                     "analysis.io"),
    "analysis.laws": (*FORMAT, "analysis._plot", "analysis._format", "analysis.spectrum",
                      "analysis.io", "analysis.fit"),
    "analysis.studies": (*FORMAT, "analysis._plot", "analysis._format", "analysis.spectrum",
                         "analysis.io", "analysis.fit", "analysis.laws"),
    "analysis.measure": (*FORMAT, "analysis._plot", "analysis._format", "analysis.spectrum",
                         "analysis.io", "analysis.fit", "analysis.laws", "analysis.studies"),
    # render computes nothing: it draws and prints the analysis measure made, and imports no
    # fit, law, study or reader (tests/test_render.py checks a fresh interpreter too)
    "analysis.report": (*FORMAT, "analysis._plot", "analysis._format"),
    # the two doors of `tdos analyze`: measure, then render
    "analysis.report.analyze": (*FORMAT, "analysis.measure", "analysis.studies", "analysis.report"),
    # `make docs`: committed JSON into docs/, its verdict sentences from the rule table
    "analysis.report.docgen": (*FORMAT, "analysis._format", "analysis.studies.verdicts"),
    "analysis.views": (*FORMAT, "analysis._plot", "analysis._format", "analysis.spectrum",
                       "analysis.io", "analysis.fit", "analysis.studies"),
    "analysis.cli": (*FORMAT, "analysis"),
    "analysis": (*FORMAT, "analysis"),                                # the lazy public names
}


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for top in PACKAGES:
        for p in sorted((root / top).rglob("*.py")):
            parts = list(p.relative_to(root).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _imports(name: str, path: Path, known) -> set[str]:
    """The repo modules `name` imports, at any depth of its code (relative ones resolved)."""
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known}
    return {m for m in out if m.split(".")[0] in PACKAGES and m != name}


def _room(name: str) -> str:
    return max((r for r in RULES if name == r or name.startswith(r + ".")), key=len)


def _inside(name: str, room: str) -> bool:
    return name == room or name.startswith(room + ".")


def violations(root: Path = REPO) -> list[str]:
    """Every import no rule allows, as 'module -> imported (room: allowed)'."""
    mods = _modules(root)
    bad = []
    for name, path in mods.items():
        room = _room(name)
        for m in sorted(_imports(name, path, mods)):
            if _inside(m, room) or any(_inside(m, a) for a in RULES[room]):
                continue
            if (m in mods and mods[m].name == "__init__.py"
                    and any(_inside(a, m) for a in RULES[room])):
                continue                    # `from pkg import module`: the package on the way
            bad.append(f"{name} -> {m} ({room}: {', '.join(RULES[room]) or 'nothing'})")
    return bad


def cycles(root: Path = REPO) -> list[list[str]]:
    """Import cycles between modules (each found once), by depth-first search."""
    mods = _modules(root)
    graph = {n: sorted(m for m in _imports(n, p, mods) if m in mods) for n, p in mods.items()}
    state, stack, found = {}, [], []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in graph[n]:
            if state.get(m) == 1:
                found.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in graph:
        if n not in state:
            visit(n)
    # a package __init__ importing its own submodules is how Python loads it, not a cycle
    return [c for c in found if not all(_inside(x, c[0]) or _inside(c[0], x) for x in c)]


def test_every_module_imports_only_what_its_room_allows():
    assert violations() == []


def test_no_import_cycle_anywhere():
    assert cycles() == []


def importers(root: Path = REPO) -> dict[tuple[str, str], list[str]]:
    """(a, b) -> the modules of package a that import package b, for sweep and cluster."""
    mods = _modules(root)
    out = {("sweep", "cluster"): [], ("cluster", "sweep"): []}
    for name, path in mods.items():
        for a, b in out:
            if _inside(name, a) and any(_inside(m, b) for m in _imports(name, path, mods)):
                out[a, b].append(name)
    return out


def test_sweep_imports_cluster_and_never_the_other_way():
    """Exactly one of sweep and cluster imports the other: the cluster owns its config."""
    found = importers()
    assert found["sweep", "cluster"], "sweep no longer imports cluster: say which one does now"
    assert found["cluster", "sweep"] == []


def test_the_layering_test_catches_a_back_arrow_and_a_cycle(tmp_path):
    """A test of the test: a copy of the packages with deliberate back-arrows (config
    importing the worker, the cluster importing sweep) and a cycle fails the checks."""
    copy_packages(tmp_path)
    assert violations(tmp_path) == [] and cycles(tmp_path) == []
    assert importers(tmp_path)["cluster", "sweep"] == []
    build = tmp_path / "cluster" / "build.py"
    build.write_text(build.read_text() + "\nfrom sweep.errors import ConfigError  # back-arrow\n")
    assert importers(tmp_path)["cluster", "sweep"] == ["cluster.build"]
    assert any(v.startswith("cluster.build -> sweep.errors") for v in violations(tmp_path))
    load = tmp_path / "sweep" / "config" / "load.py"
    load.write_text(load.read_text() + "\nfrom sweep.worker.task import run_task  # back-arrow\n")
    assert any(v.startswith("sweep.config.load -> sweep.worker.task") for v in violations(tmp_path))
    rates = tmp_path / "analysis" / "spectrum" / "rates.py"
    rates.write_text(rates.read_text() + "\nfrom analysis.spectrum.observables import tdos\n")
    assert any("analysis.spectrum.rates" in c for c in cycles(tmp_path))


def test_every_rule_names_a_module():
    mods = _modules(REPO)
    for room, allowed in RULES.items():
        for r in (room, *allowed):
            assert any(_inside(m, r) for m in mods), f"{r} names no module"


def _loaded_after(modules: str, watched: tuple) -> list[str]:
    """Which of `watched` a fresh interpreter holds after importing `modules` (comma-separated)."""
    code = f"import {modules}, sys; print(' '.join(m for m in {watched!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    return out.split()


def test_planning_imports_no_torch():
    assert _loaded_after("sweep.config.load, sweep.plan.make, sweep.store.writer, sweep.tasks, "
                         "sweep.budget", ("torch", "transformers")) == []
    # the config reads the cluster's section (cluster.config), not the cluster's builder
    assert _loaded_after("sweep.config.load, sweep.plan.make", ("distributed",)) == []


def test_the_store_format_imports_nothing_of_the_packages_nor_torch_nor_dask():
    """sweep.format is the ground floor: a reader of stores loads it without torch, Dask or any
    other module of sweep, analysis or cluster (the package `sweep` itself is a docstring)."""
    rooms = tuple(m for m in _modules(REPO) if not _inside(m, "sweep.format") and m != "sweep")
    assert _loaded_after("sweep.format.schema, sweep.format.ledger, sweep.format.dtypes, "
                         "sweep.format.settings",
                         ("torch", "dask", "distributed", "transformers", *rooms)) == []


def test_block_math_imports_neither_dask_nor_yaml():
    assert _loaded_after("sweep.numerics.linalg, sweep.numerics.spectra, sweep.numerics.depth, "
                         "sweep.numerics.memory", ("dask", "distributed", "yaml")) == []
    # the fast paths' LLaMA/GPT-2 blocks reuse transformers' rotary code, and transformers
    # imports yaml itself: for sweep.blocks only Dask is checked
    assert _loaded_after("sweep.blocks", ("dask", "distributed")) == []


def test_a_worker_imports_no_plotting_and_no_scipy():
    """Every task imports sweep.worker.task (and through it the store schema): no matplotlib,
    no scipy pulled in with it."""
    assert _loaded_after("sweep.worker.task", ("matplotlib", "scipy")) == []


def test_the_generic_path_imports_no_dask():
    """(transformers itself imports yaml, so only Dask is checked here)"""
    assert _loaded_after("sweep.generic.decode, sweep.generic.selfcheck, sweep.worker.model",
                         ("dask", "distributed")) == []


def test_the_fast_path_table_and_the_plan_name_the_same_models():
    from sweep.blocks import FAST
    from sweep.plan.architecture import FAST_ARCHS

    assert sorted(FAST) == sorted(FAST_ARCHS)


def test_store_layout_is_declared_once():
    """Writer, reader and the tests' synthetic stores take array names from sweep.format.schema."""
    for f in ("sweep/store/writer.py", "analysis/io/store.py", "tests/synthetic_store.py"):
        text = (REPO / f).read_text()
        assert "schema" in text, f
        assert '"scale_rayleigh", "scale_residual"' not in text, f"{f} spells out the arrays again"


def test_every_public_name_of_the_contract_imports():
    import analysis

    for name in analysis.__all__:
        assert getattr(analysis, name) is not None, name
    from analysis import (block_rates, bootstrap_ir_exponent, compare_alternatives,  # noqa: F401
                          fit_ir_exponent, fit_memory, memory_profile, open_store, power_law_gof)


def private_imports(root: Path = REPO) -> list[str]:
    """`from <repo module> import _name` across modules: a name used by two modules is public in
    its home, or the importer reaches past what the module offers."""
    bad = []
    for name, path in _modules(root).items():
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.ImportFrom) and not node.level and node.module
                    and node.module.split(".")[0] in PACKAGES):
                bad += [f"{name} imports {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    return bad


def test_no_module_imports_another_ones_private_name(tmp_path):
    assert private_imports() == []
    copy_packages(tmp_path)
    planted = tmp_path / "sweep" / "store" / "ledger.py"
    planted.write_text(planted.read_text() + "\nfrom sweep.store.writer import _planted\n")
    assert private_imports(tmp_path) == ["sweep.store.ledger imports sweep.store.writer._planted"]


# ---------------------------------------------------------------- the one door
# Outside sweep/checkpoints/hf.py no module imports a leading-underscore transformers/datasets name
# or one the door lists, and none reads or calls an attribute on the door's list.
DOOR = Path("sweep/checkpoints/hf.py")
LIBRARIES = ("transformers", "datasets")
ACCESSORS = ("getattr", "hasattr", "setattr", "delattr")


def _private_path(dotted: str) -> bool:
    """A transformers/datasets module path with a leading-underscore segment."""
    parts = dotted.split(".")
    return parts[0] in LIBRARIES and any(p.startswith("_") for p in parts[1:])


def _imported_names(node) -> list[str]:
    """What an import statement brings in, as dotted names (module, or module.name)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        return [f"{node.module}.{a.name}" for a in node.names]
    return []


def door_violations(root: Path = REPO) -> list[str]:
    """Every touch of a private name outside the door, as 'path:line: what'."""
    listed = {p.name for p in hf.PRIVATE}
    bad = []
    for top in PACKAGES:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root)
            if rel == DOOR:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(rel))):
                for name in _imported_names(node):
                    if _private_path(name) or name in listed:
                        bad.append(f"{rel}:{node.lineno}: imports {name}")
                if isinstance(node, ast.Attribute) and node.attr in hf.PRIVATE_ATTRIBUTES:
                    bad.append(f"{rel}:{node.lineno}: reads .{node.attr}")
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id in ACCESSORS and len(node.args) > 1
                        and isinstance(node.args[1], ast.Constant)
                        and node.args[1].value in hf.PRIVATE_ATTRIBUTES):
                    bad.append(f"{rel}:{node.lineno}: {node.func.id}(…, {node.args[1].value!r})")
    return bad


def test_no_private_name_outside_the_door():
    bad = door_violations()
    assert not bad, "\n".join(bad)


def test_the_check_finds_a_planted_import_and_attribute(tmp_path):
    copy_packages(tmp_path)
    planted = tmp_path / "sweep" / "worker" / "planted.py"
    planted.write_text("from transformers.utils import _is_package_available\n"
                       "import datasets._private\n"
                       "from transformers.core_model_loading import rename_source_key\n\n\n"
                       "def f(model, ds):\n"
                       "    model._init_weights(model)\n"
                       "    return getattr(ds, '_fingerprint')\n")
    bad = sorted(door_violations(tmp_path))
    assert bad == ["sweep/worker/planted.py:1: imports transformers.utils._is_package_available",
                   "sweep/worker/planted.py:2: imports datasets._private",
                   "sweep/worker/planted.py:3: imports transformers.core_model_loading.rename_source_key",
                   "sweep/worker/planted.py:7: reads ._init_weights",
                   "sweep/worker/planted.py:8: getattr(…, '_fingerprint')"], bad


def test_the_reader_reaches_up_only_in_store_beta():
    """analysis/io/store.py imports the `analysis` package (whose names load lazily) inside
    `Store.beta` alone: the primary β is the report's computation, reached at call time."""
    tree = ast.parse((REPO / "analysis" / "io" / "store.py").read_text())
    where = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import) and any(a.name == "analysis" for a in node.names):
                    where.append(fn.name)
    top = [n for n in tree.body if isinstance(n, ast.Import) and any(a.name == "analysis" for a in n.names)]
    assert where == ["beta"] and not top, where
