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

from sweep.checkpoints import kinds
from sweep.checkpoints.formats import open_checkpoint
from sweep.checkpoints.hashes import sha256_files
from sweep.checkpoints.hub import load_tokenizer
from sweep.config.identity import fingerprint, identity_dict
from sweep.config.load import ConfigError, check_depth_rows, layer_rows
from sweep.config.sections import ModelSpec, SweepConfig
from sweep.config.variants import variants_of
from sweep.format.variants import Variant
from sweep.config.study import check_study_layers
from sweep.plan import inputs as text_inputs
from sweep.plan import windows
from sweep.plan.architecture import FAST_ARCHS, ModelInfo
from sweep.plan.checkpoint import inspect_checkpoint
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
    # a weight variant of a trained model (sweep/format/variants.py, docs/nulls.md): a null or
    # an ensemble member, its weights made on the workers from the checkpoint above by its
    # kind's registered maker (sweep/checkpoints/kinds.py); None: a trained model
    variant: Variant | None = None

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
    models = tuple(p for m in cfg.models for p in _with_variants(_model_plan(m, cfg, text, tokenizers)))
    _check_analysis_layer(cfg, models)
    check_study_layers(cfg.study, [(m.spec, m.layers) for m in models])
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
    tokens, inputs = _tokens(m, info, cfg, text, tokenizers)
    own_tokenizer = text is not None and not cfg.inputs.tokenizer   # its files decide the ids
    engine = "fast" if cfg.compute.engine == "auto" and info.arch in FAST_ARCHS else "generic"
    files = checkpoint_record(open_checkpoint(info.local_dir), tokenizer=own_tokenizer)
    return ModelPlan(m, info, files, rows, tokens, inputs, engine,
                     tuple(cfg.depth.spans) if cfg.depth else ())


def _with_variants(m: ModelPlan) -> list[ModelPlan]:
    """Model `m`, then each of its variants (its nulls, then its ensemble members): the same
    checkpoint, rows and engine, the first n of its sequences (the nulls' and the members'
    are the same n: sweep/config/variants.py), its own group `<model>.<kind>.<seed>`; a
    ConfigError from a kind that cannot vary this checkpoint (a quantization ensemble of a
    file with nothing rounded)."""
    out, checked = [m], set()
    for planned in variants_of(m.spec):
        v = planned.variant
        if v.kind not in checked:               # once per kind: its plan-time refusal
            ckpt = open_checkpoint(m.info.local_dir, where=planned.where)
            kinds.maker(v).check(ckpt, planned.where)
            checked.add(v.kind)
        S = planned.sequences or m.tokens.shape[0]
        spec = dataclasses.replace(m.spec, name=v.group, nulls=None, quantization=None)
        out.append(dataclasses.replace(m, spec=spec, tokens=m.tokens[:S],
                                       inputs={**m.inputs, "sequences": S}, variant=v))
    return out


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
    ckpt = open_checkpoint(info.local_dir)
    if name not in tokenizers:
        tokenizers[name] = (load_tokenizer(inputs.tokenizer, None, "inputs.tokenizer")
                            if inputs.tokenizer else ckpt.tokenizer())
    tok = tokenizers[name]
    what = "dataset" if inputs.dataset else "text"
    if tok is None:
        raise ConfigError(f"inputs.{what}: {m.path} ships no tokenizer{ckpt.no_tokenizer} to read the "
                          f"text with — set inputs.tokenizer (a hub id or directory), or remove "
                          f"`{what}` for random tokens")
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
    from sweep.checkpoints.hub import TOKENIZER_IDENTITY as TOKENIZER_FILES

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
