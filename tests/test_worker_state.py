"""A worker keeps its state in one object (sweep/worker/state.py WorkerState): no module of
sweep/worker/ holds mutable state of its own (an AST walk, with a test of the test planting
each kind), and task.py stays a table of handlers."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

WORKER = Path(__file__).resolve().parents[1] / "sweep" / "worker"
DISPLAYS = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
# constructors of containers or objects that are mutated as tasks run
MUTABLE = {"dict", "list", "set", "bytearray", "OrderedDict", "defaultdict", "Counter", "deque",
           "ChainMap", "local", "WeakKeyDictionary", "WeakValueDictionary", "WeakSet",
           "SimpleNamespace"}
CACHES = {"cache", "lru_cache"}      # a cached module-level function is state the process keeps


def _name(node: ast.AST) -> str:
    """`f` of f(...), m.f(...), @f, @m.f and @m.f(...)."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _top(body: list[ast.stmt]):
    """The statements that run at import: module and class bodies, and the branches of
    module-level if / try / with; not function bodies."""
    for node in body:
        yield node
        if isinstance(node, ast.ClassDef):
            yield from _top(node.body)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for branch in ("body", "orelse", "finalbody"):
                yield from _top(getattr(node, branch, []))
            for handler in getattr(node, "handlers", []):
                yield from _top(handler.body)


def mutable_state(source: str) -> list[str]:
    """'line N: what' for each piece of module-level mutable state in `source`."""
    tree = ast.parse(source)
    found = [f"line {n.lineno}: global {', '.join(n.names)}" for n in ast.walk(tree)
             if isinstance(n, ast.Global)]
    for node in _top(tree.body):
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) else None
        if isinstance(value, DISPLAYS) or (isinstance(value, ast.Call) and _name(value) in MUTABLE):
            found.append(f"line {node.lineno}: a mutable {type(value).__name__} "
                         f"{_name(value) if isinstance(value, ast.Call) else ''}".rstrip())
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [f"line {node.lineno}: @{_name(d)} on {node.name}"
                      for d in node.decorator_list if _name(d) in CACHES]
    return found


def test_no_module_of_the_worker_holds_mutable_state():
    found = {p.name: mutable_state(p.read_text()) for p in sorted(WORKER.glob("*.py"))}
    assert {name: lines for name, lines in found.items() if lines} == {}


@pytest.mark.parametrize("planted", [
    "_models = {}",
    "_seen: list[int] = []",
    "_ids = {k: 1 for k in 'ab'}",
    "import collections\n_arrays = collections.OrderedDict()",
    "from collections import defaultdict\n_count = defaultdict(int)",
    "import threading\n_local = threading.local()",
    "_tuned = False\ndef tune():\n    global _tuned\n    _tuned = True",
    "import functools\n@functools.cache\ndef software():\n    return {}",
    "from functools import lru_cache\n@lru_cache(maxsize=4)\ndef software():\n    return {}",
    "class Held:\n    seen = set()",
    "try:\n    _late = []\nexcept ImportError:\n    pass",
])
def test_the_walk_finds_each_kind_of_planted_state(planted):
    assert len(mutable_state(planted)) == 1


def test_the_walk_passes_constants_and_function_locals():
    clean = """
from types import MappingProxyType
ARRAY_CACHE = 8
NAMES = ("a", "b")
FIXED = frozenset({1, 2})
TABLE = MappingProxyType({"a": 1})
class State:
    held: object = None
def f():
    cache = {}
    return [cache]
"""
    assert mutable_state(clean) == []


def test_task_py_is_a_table_of_handlers():
    assert len((WORKER / "task.py").read_text().splitlines()) < 250
    assert {p.name: n for p in WORKER.glob("*.py")
            if (n := len(p.read_text().splitlines())) >= 400} == {}
