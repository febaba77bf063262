"""Config -> the immutable plan that every later step reads.

`make_plan(cfg)` resolves, once and before anything is computed or written, everything the
config points at: each checkpoint (config.json, the weight headers and shapes, the kind of
every layer, the files' identity: `sweep.plan.checkpoint`, `sweep.plan.architecture`), the tokenizer
and the token ids of every sequence (`sweep.plan.inputs`), and the layers and token counts to
sweep. No weights are loaded: the client stays as small as an idle interpreter plus
transformers, whatever the checkpoint's size. The store writer (sweep/store/writer.py), the
budget and `--dry-run` (sweep/budget/) and the tasks (sweep/tasks.py) read the plan; none
of them reads the config's paths again.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sweep.config.identity import fingerprint, identity_dict
from sweep.config.load import ConfigError, check_depth_rows, layer_rows
from sweep.config.sections import ModelSpec, SweepConfig
from sweep.plan import inputs as text_inputs
from sweep.plan import windows
from sweep.plan.architecture import FAST_ARCHS, ModelInfo
from sweep.plan.checkpoint import find_tokenizer, inspect_checkpoint, load_tokenizer
from sweep.plan.gguf_file import is_gguf
from sweep.plan.hashes import sha256_files
from sweep.plan.provenance import checkpoint_record


@dataclass(frozen=True)
class ModelPlan:
    """One checkpoint of the sweep, resolved: its store group's whole content is decided."""

    spec: ModelSpec                      # as configured (path, dtype, revision, name, …)
    info: ModelInfo                      # what config.json and the weight headers say
    checkpoint: dict                     # provenance record of the files that decide values
    rows: tuple[tuple[int, int], ...]    # (model layer, tokens planned) per store row
    tokens: np.ndarray = dataclasses.field(compare=False, repr=False)   # (S, L) int64 ids
    inputs: dict = dataclasses.field(default_factory=dict)    # how the ids were made
    engine: str = "generic"              # "fast" (sweep/blocks) | "generic" (sweep/generic)
    depth_spans: tuple[int, ...] = ()    # depth.spans (the rows are then one contiguous run)
    # a null model (docs/nulls.md): {"of": the trained model's name, "kind", "seed"}; its
    # weights are made on the workers from the checkpoint above; None: a trained model
    null: dict | None = None
    # a member of the quantization ensemble (sweep/plan/quantized.py, docs/nulls.md): {"of":
    # the trained model's name, "member", "ensemble"}; its weights are drawn on the workers
    # from the GGUF file above; not a null; None: not a member
    quant: dict | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(layer for layer, _ in self.rows)

    @property
    def depth(self) -> dict | None:
        """{"spans", "layers": [l0, l1]}: the stacks and the Lyapunov run (None: no `depth:`)."""
        if not self.depth_spans:
            return None
        return {"spans": list(self.depth_spans), "layers": [self.layers[0], self.layers[-1]]}


@dataclass(frozen=True)
class Plan:
    """The sweep of `config`, resolved."""

    config: SweepConfig
    models: tuple[ModelPlan, ...]

    @property
    def store(self) -> str:
        return self.config.store

    @property
    def token_block(self) -> int:
        return self.config.token_block

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.config)

    @property
    def identity(self) -> dict:
        return identity_dict(self.config)


def make_plan(cfg: SweepConfig) -> Plan:
    """Resolve `cfg` (from sweep.config.load.load_config): a ConfigError on anything missing,
    damaged or unsweepable, before any compute."""
    text = _read_inputs(cfg.inputs)    # read once: every model cuts its tokens from it
    tokenizers: dict = {}              # one tokenizer (and its load) shared by the models
    models = tuple(p for m in cfg.models
                   for p in _with_quantization(_with_nulls(_model_plan(m, cfg, text, tokenizers))))
    _check_analysis_layer(cfg, models)
    return Plan(cfg, models)


def _read_inputs(inputs):
    """The text (sweep/plan/inputs.py) or the dataset's split (sweep/plan/documents.py), or None."""
    if inputs.dataset:
        from sweep.plan.documents import open_documents

        return open_documents(inputs.dataset, inputs.dataset_config, inputs.split,
                              inputs.column or "text", inputs.base_dir)
    if inputs.text:
        return text_inputs.read_text(inputs.text, inputs.base_dir)
    return None


def _model_plan(m: ModelSpec, cfg: SweepConfig, text, tokenizers: dict) -> ModelPlan:
    info = inspect_checkpoint(m.path, m.revision, f"{m.where}.path", m.trust_remote_code)
    L = cfg.inputs.length
    if info.max_length is not None and L > info.max_length:
        raise ConfigError(f"inputs.length: {L} exceeds the context of {m.path} "
                          f"(max_length {info.max_length}) — use length <= {info.max_length}")
    where = f"{m.where}.layers" if m.layers is not None else "layers"
    rows = layer_rows(m.layers if m.layers is not None else cfg.layers, where, m.path,
                      info.n_layers, L)
    check_depth_rows(cfg.depth, rows, where, m.path)
    tokens, record = _tokens(m, info, cfg, text, tokenizers)
    own_tokenizer = text is not None and not cfg.inputs.tokenizer   # its files decide the ids
    engine = "fast" if cfg.compute.engine == "auto" and info.arch in FAST_ARCHS else "generic"
    return ModelPlan(m, info, checkpoint_record(info.local_dir, tokenizer=own_tokenizer), rows,
                     tokens, record, engine, tuple(cfg.depth.spans) if cfg.depth else ())


def _with_nulls(m: ModelPlan) -> list[ModelPlan]:
    """Model `m`, then each of its nulls: the same checkpoint, rows and engine, the first
    `nulls.sequences` of its sequences, its own group `<model>.<kind>.<seed>`."""
    nulls = m.spec.nulls
    if nulls is None:
        return [m]
    S = nulls.sequences or m.tokens.shape[0]
    out = [m]
    for kind, seed in nulls.seeds():
        spec = dataclasses.replace(m.spec, name=f"{m.name}.{kind}.{seed}", nulls=None)
        out.append(dataclasses.replace(m, spec=spec, tokens=m.tokens[:S],
                                       inputs={**m.inputs, "sequences": S},
                                       null={"of": m.name, "kind": kind, "seed": seed}))
    return out


def _with_quantization(group: list[ModelPlan]) -> list[ModelPlan]:
    """`group` (a model and its nulls), then each member of the model's quantization ensemble:
    the same checkpoint, rows and engine, the first `quantization.sequences` of its sequences,
    its own group `<model>.quant.<k>`; a ConfigError when the file has nothing rounded."""
    m = group[0]
    q = m.spec.quantization
    if q is None:
        return group
    from sweep.plan.quantized import check_ensemble

    local = Path(m.info.local_dir)
    where = f"{m.spec.where}.quantization"
    check_ensemble(m.spec.path, local if local.is_file() else None, where)
    if m.info.not_local:                 # a GGUF transformers reads only as a whole
        raise ConfigError(f"{where}: {m.spec.path}: {m.info.not_local}, so its members cannot be "
                          f"drawn tensor by tensor — remove `quantization:` from {m.spec.where}")
    S = q.sequences or m.tokens.shape[0]
    members = []
    for k in range(q.ensemble):
        spec = dataclasses.replace(m.spec, name=f"{m.name}.quant.{k}", nulls=None, quantization=None)
        members.append(dataclasses.replace(m, spec=spec, tokens=m.tokens[:S],
                                           inputs={**m.inputs, "sequences": S},
                                           quant={"of": m.name, "member": k, "ensemble": q.ensemble}))
    return group + members


def _tokens(m: ModelSpec, info: ModelInfo, cfg: SweepConfig, source, tokenizers: dict):
    """((S, L) int64 ids, the inputs record): random from the seed, or windows of the text
    or the dataset (sweep/plan/windows.py: documents, offsets, BOS) read with inputs.tokenizer
    (default: the checkpoint's own)."""
    inputs = cfg.inputs
    S, L, vocab = inputs.sequences, inputs.length, info.vocab_size
    record = {"sequences": S, "length": L, "seed": inputs.seed, "text": inputs.text,
              "tokenizer": inputs.tokenizer, "token_block": cfg.token_block}
    if source is None:
        return text_inputs.random_ids(inputs.seed, S, L, vocab), record
    name = inputs.tokenizer or str(info.local_dir)    # the resolved snapshot: revisions differ
    if name not in tokenizers:
        tokenizers[name] = (load_tokenizer(inputs.tokenizer, None, "inputs.tokenizer")
                            if inputs.tokenizer else find_tokenizer(info.local_dir))
    tok = tokenizers[name]
    what = "dataset" if inputs.dataset else "text"
    if tok is None:
        gguf = " (no tokenizer.ggml.model in the GGUF's metadata)" if is_gguf(m.path) else ""
        raise ConfigError(f"inputs.{what}: {m.path} ships no tokenizer{gguf} to read the text with — set "
                          f"inputs.tokenizer (a hub id or directory), or remove `{what}` for random tokens")
    if inputs.dataset:
        ids, windows_record = windows.dataset_tokens(source, inputs, tok, vocab, name, m.path)
    else:
        ids, windows_record = windows.text_tokens(source, inputs, tok, vocab, name, m.path)
        record.update(source.record())
    record.update(windows_record)
    if inputs.tokenizer:
        record["tokenizer_files"] = _tokenizer_files(tok)
    return ids, record


def _tokenizer_files(tok) -> dict:
    """{file: sha256} of a tokenizer given apart from the checkpoint (its identity)."""
    from sweep.plan.provenance import TOKENIZER_FILES

    d = Path(getattr(tok, "name_or_path", "") or "")
    if not d.is_dir():
        from huggingface_hub import snapshot_download

        d = Path(snapshot_download(tok.name_or_path, local_files_only=True,
                                   allow_patterns=list(TOKENIZER_FILES)))
    return {h.path.name: h.sha256
            for h in sha256_files([d / n for n in TOKENIZER_FILES if (d / n).is_file()])}


def _check_analysis_layer(cfg: SweepConfig, models) -> None:
    swept = sorted({layer for m in models for layer in m.layers})
    a = cfg.analysis
    if a.layer is not None and a.layer not in swept:
        raise ConfigError(f"analysis.layer: layer {a.layer} is not swept (swept: {swept}) — "
                          f"pick one of them or add it to `layers`")


def load_plan(path, overrides: dict | None = None) -> Plan:
    """`make_plan(load_config(path, overrides))`: the YAML read, checked and resolved."""
    from sweep.config.load import load_config

    return make_plan(load_config(path, overrides))


def plan_from_dict(raw: dict, base_dir=".") -> Plan:
    """`make_plan(config_from_dict(raw, base_dir))`."""
    from sweep.config.load import config_from_dict

    return make_plan(config_from_dict(raw, base_dir))
