"""The sweep config read from YAML and validated at load.

`load_config` checks what the YAML itself says before anything else runs: syntax, field
names, types and ranges, paths made absolute, the store path; the sections it builds are the
dataclasses of sweep/config/sections.py. What the config points at — checkpoints, tokenizers,
texts — is read once by `sweep.plan.make.make_plan`, which turns a config into the immutable
plan every later step reads. Every failure of either is a one-line `ConfigError`,
`<field>: <what> — <fix>`.
"""
from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import yaml

from cluster.config import ClusterConfig, ConfigError as ClusterConfigError
from sweep.config.inputs import check_inputs, resolve_paths
from sweep.config.sections import (TOP_KEYS, ComputeConfig, DepthConfig, InputsConfig, MemoryConfig,
                                   ModelSpec, SweepConfig)
from sweep.config.study import check_study
from sweep.config.variants import check_nulls, check_quantization, variant_names
from sweep.config.validate import check_store, check_type, is_file, reject_unknown, set_dotted
from sweep.errors import ConfigError
from sweep.format.fields import FieldError, declared, first_problem, yaml_names
from sweep.format.settings import Settings
from sweep.format.study import Study

__all__ = ["ConfigError", "load_config", "config_from_dict", "with_store", "layer_rows",
           "check_depth_rows", "check_nulls", "check_quantization", "default_name"]


def load_config(path, overrides: dict | None = None) -> SweepConfig:
    """Read YAML at `path`, apply dotted-key `overrides` ({"store": ...}), validate."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found — give the path of a YAML config")
    try:
        raw = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte offset {e.start}) — give a YAML config "
                          f"file") from None
    except RecursionError:
        raise ConfigError(f"{path}: YAML nested too deeply to read — a sweep config is a few "
                          f"levels deep; see configs/tiny.yaml") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror}) — check its permissions") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        col = f" column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{where}: malformed YAML: {problem} — fix the syntax at line "
                          f"{mark.line + 1 if mark else '?'}{col}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with model, inputs, layers, store, "
                          f"got {type(raw).__name__} — see configs/tiny.yaml")
    for key, value in (overrides or {}).items():
        set_dotted(raw, key, value)
    return config_from_dict(raw, base_dir=path.parent)


def config_from_dict(raw: dict, base_dir: Path | str = ".") -> SweepConfig:
    """Validate a config mapping (as from YAML). Relative text paths resolve from base_dir."""
    if not isinstance(raw, dict):
        raise ConfigError(f"config: expected a mapping with model, inputs, layers, store, got "
                          f"{type(raw).__name__} — see configs/tiny.yaml")
    reject_unknown(raw, TOP_KEYS, "")
    models = _models(raw)
    inputs = _section(InputsConfig, raw.get("inputs"), "inputs")
    compute = _section(ComputeConfig, {} if raw.get("compute") is None else raw["compute"], "compute")
    cluster = _cluster(raw.get("cluster"))
    check_inputs(inputs)
    if "layers" not in raw:
        raise ConfigError("layers: required field missing — add e.g. `layers: [0, 1]` or `layers: all`")
    layers = _normalize_layers(raw["layers"], "layers")
    depth = _check_depth(raw.get("depth"))
    memory = _check_memory(raw.get("memory"), inputs.length)
    store = check_store(raw.get("store"))
    models = [_check_model(m) for m in models]
    for m in models:
        check_nulls(m, inputs.sequences)
        check_quantization(m, inputs.sequences)
    _check_unique_names(models)
    inputs = resolve_paths(inputs, base_dir)
    analysis = _check_analysis(_section(Settings, raw.get("analysis") or {}, "analysis"),
                               inputs.length)
    study = None if raw.get("study") is None else _section(Study, raw["study"], "study")
    check_study(study, models, depth)
    return SweepConfig(models=models, inputs=inputs, layers=layers, store=store,
                       compute=compute, cluster=cluster, analysis=analysis, depth=depth,
                       memory=memory, study=study)


def _cluster(raw) -> ClusterConfig:
    """The `cluster:` section. The cluster owns its config and its own error (it imports
    nothing of sweep); here it becomes sweep's ConfigError, the one `tdos` reports."""
    try:
        return ClusterConfig.from_dict(raw)
    except ClusterConfigError as e:
        raise ConfigError(str(e)) from None


# ---------------------------------------------------------------- sections

def _models(raw: dict) -> list[ModelSpec]:
    if ("model" in raw) == ("models" in raw):
        raise ConfigError("model: give exactly one of `model:` (a mapping) or `models:` (a list)")
    if "model" in raw:
        return [_section(ModelSpec, raw["model"], "model")]
    items = raw["models"]
    if not isinstance(items, list) or not items:
        raise ConfigError(f"models: expected a non-empty list of model mappings, got {items!r}")
    return [_section(ModelSpec, m, f"models[{i}]") for i, m in enumerate(items)]


def _section(cls, raw, where: str):
    """Build section `cls` from a mapping: the fields it declares (sweep/format/fields.py), no
    other, each of its type, nested sections built alike; then each field's own check. A
    section of the store format (analysis, study) raises its own FieldError: said the same."""
    if not isinstance(raw, dict):
        if raw is None:
            raise ConfigError(f"{where}: required section missing — see configs/tiny.yaml")
        raise ConfigError(f"{where}: expected a mapping of fields, got {type(raw).__name__} {raw!r}")
    reject_unknown(raw, yaml_names(cls), where)
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in declared(cls):
        if f.name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{where}.{f.name}: required field missing — add `{f.name}: ...`")
            continue
        sub = f.metadata["section"]
        value, at = raw[f.name], f"{where}.{f.name}"
        kwargs[f.name] = (check_type(value, hints[f.name], at) if sub is None
                          else sub.parse(value, at) if hasattr(sub, "parse")  # a section of its own grammar
                          else _section(sub, value, at))
    if cls is ModelSpec:
        kwargs["where"] = where
    try:
        section = cls(**kwargs)
    except FieldError as e:
        raise ConfigError(str(e)) from None
    problem = first_problem(section, where)
    if problem:
        raise ConfigError(problem)
    return section


def _check_analysis(a: Settings, length: int) -> Settings:
    """What lies between the `analysis:` section and the inputs: Table I lengths within
    1..inputs.length, positions left to skip (the representative layer is checked by the
    plan). Each field's own check ran when the section was built."""
    if a.skip_positions >= length:
        raise ConfigError(f"analysis.skip_positions: {a.skip_positions} leaves no token of "
                          f"inputs.length {length} — use a value < {length}")
    if a.lengths is not None and max(a.lengths) > length:
        raise ConfigError(f"analysis.lengths: expected a list of token counts in 1..{length} "
                          f"(inputs.length), got {list(a.lengths)!r} — e.g. [8, 16, 24, 28]")
    return a


# ---------------------------------------------------------------- layers

def _check_depth(raw) -> DepthConfig | None:
    """The `depth:` section: spans, integers >= 2, sorted and unique (None: no section)."""
    if raw is None:
        return None
    d = _section(DepthConfig, raw, "depth")
    spans = list(d.spans) if isinstance(d.spans, (list, tuple)) else [d.spans]
    for i, s in enumerate(spans):
        check_type(s, int, f"depth.spans[{i}]")
        if s < 2:
            raise ConfigError(f"depth.spans[{i}]: a stack spans at least 2 layers, got {s} — "
                              f"single blocks are always swept; use e.g. [2, 4, 8]")
    if not spans:
        raise ConfigError("depth.spans: empty — give the stack lengths, e.g. [2, 4, 8]")
    return DepthConfig(sorted(set(spans)))


def _check_memory(raw, length: int) -> MemoryConfig | None:
    """The `memory:` section: lags in 0..length − 1 (the rest is each field's own check)."""
    if raw is None:
        return None
    m = _section(MemoryConfig, raw or {}, "memory")
    if not 0 <= m.lags < length:
        raise ConfigError(f"memory.lags: {m.lags} lags need 0 <= lags < inputs.length ({length}) — "
                          f"use e.g. {min(64, length - 1)}")
    return m


def check_depth_rows(depth: DepthConfig | None, rows, where: str, path: str) -> None:
    """A ConfigError unless the swept layers `rows` ((layer, tokens), ...) of model `path`
    form one contiguous run, with one token count, at least as long as the longest span."""
    if depth is None:
        return
    layers = [layer for layer, _ in rows]
    gaps = [(a, b) for a, b in zip(layers, layers[1:]) if b != a + 1]
    if gaps:
        a, b = gaps[0]
        raise ConfigError(f"{where}: depth needs consecutive layers, but layer {a} is followed by "
                          f"{b} for {path} — sweep {layers[0]}..{layers[-1]} or drop `depth:`")
    counts = sorted({tokens for _, tokens in rows})
    if len(counts) > 1:
        raise ConfigError(f"{where}: depth needs the same tokens at every layer, got {counts} for "
                          f"{path} — give one count (a list of layers), or drop `depth:`")
    if max(depth.spans) > len(layers):
        raise ConfigError(f"depth.spans: span {max(depth.spans)} is longer than the {len(layers)} "
                          f"swept layer(s) of {path} — use spans <= {len(layers)} or sweep more layers")


def _normalize_layers(raw, where: str):
    """"all" | list of ints | {layer: tokens} -> "all" | sorted list | sorted dict."""
    if raw == "all":
        return "all"
    if isinstance(raw, list) and raw:
        for i, v in enumerate(raw):
            check_type(v, int, f"{where}[{i}]")
        dup = sorted({v for v in raw if raw.count(v) > 1})
        if dup:
            raise ConfigError(f"{where}: layer {dup[0]} listed twice; list each layer once")
        return sorted(raw)
    if isinstance(raw, dict) and raw:
        for k, v in raw.items():
            check_type(k, int, f"{where}.{k}")
            check_type(v, int, f"{where}.{k}")
        return dict(sorted(raw.items()))
    raise ConfigError(f"{where}: expected a list of layer indices, \"all\", or a mapping "
                      f"{{layer: tokens}}; got {raw!r}")


def layer_rows(layers, where: str, path: str, n: int, length: int) -> tuple[tuple[int, int], ...]:
    """(layer, tokens) of each store row for a model of `n` layers; a ConfigError names the
    offending entry of `layers` (at `where`)."""
    if layers == "all":
        return tuple((layer, length) for layer in range(n))
    items = layers.items() if isinstance(layers, dict) else ((layer, length) for layer in layers)
    out = []
    for i, (layer, tokens) in enumerate(items):
        key = f"{where}.{layer}" if isinstance(layers, dict) else f"{where}[{i}]"
        if not 0 <= layer < n:
            raise ConfigError(f"{key}: layer {layer} out of range for {path} (0..{n - 1}) — "
                              f"use a value < {n}")
        if not 1 <= tokens <= length:
            raise ConfigError(f"{key}: {tokens} tokens for layer {layer} must be in 1..inputs.length "
                              f"({length}) — lower it or raise inputs.length")
        out.append((layer, tokens))
    return tuple(out)


def _check_model(m: ModelSpec) -> ModelSpec:
    """A path that names a file other than a GGUF refused; per-model layers checked; the
    store group name derived when not given."""
    _check_not_a_file(m)
    own = _normalize_layers(m.layers, f"{m.where}.layers") if m.layers is not None else None
    return dataclasses.replace(m, layers=own, name=m.name or default_name(m))


def _check_not_a_file(m: ModelSpec) -> None:
    """A checkpoint is a folder (or a GGUF file): a file inside one, the weights someone
    pointed at, is named with the folder to give instead."""
    p = Path(m.path).expanduser()
    if p.suffix.lower() == ".gguf" or not is_file(p):
        return
    if (p.parent / "config.json").is_file():
        raise ConfigError(f"{m.where}.path: {m.path} is a file inside a checkpoint folder — give "
                          f"its folder, {p.parent}")
    raise ConfigError(f"{m.where}.path: {m.path} is a file, not a checkpoint — give a checkpoint "
                      f"folder (config.json and the weights), a .gguf file or a hub id")


def default_name(m: ModelSpec) -> str:
    """Store group name from path, revision and dtype: 'mamba-370m', 'pythia-410m@step1000-float64'."""
    base = Path(str(m.path).rstrip("/")).name or "model"
    name = base + (f"@{m.revision}" if m.revision else "")
    return name + (f"-{m.dtype}" if m.dtype != "float32" else "")


def _check_unique_names(models: list[ModelSpec]) -> None:
    seen = {}
    for m in models:
        if "/" in m.name or "\\" in m.name or m.name.startswith(".") or m.name == "zarr.json":
            raise ConfigError(f"{m.where}.name: {m.name!r} cannot be a store group name — "
                              f"avoid '/', '\\', a leading '.' and 'zarr.json'")
        for name, where in ((m.name, f"{m.where}.name"), *variant_names(m)):
            if name in seen:
                raise ConfigError(f"{where}: group name {name!r} is also used by {seen[name]} — "
                                  f"set a distinct `name`")
            seen[name] = where


def with_store(cfg: SweepConfig, store: str) -> SweepConfig:
    """`cfg` writing to another store path (checked like the YAML `store` field)."""
    return dataclasses.replace(cfg, store=check_store(store))
