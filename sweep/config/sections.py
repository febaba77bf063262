"""The sweep config's sections: one frozen dataclass per YAML section, each field declared
once with `option` (sweep/format/fields.py): its type, default, one line of help and its
check. The YAML fields the loader accepts (`yaml_names`), docs/config.md's table of fields
(sweep/config/docs.py) and, for `analysis:`, the flags of `tdos analyze` come from here. A
field made with plain `dataclasses.field` (`ModelSpec.where`, `InputsConfig.base_dir`) is set
by the loader, never read from the file. `sweep.config.load` builds the sections from the YAML
and checks what lies between fields; the `analysis:` and `study:` sections are the store
format's own (sweep/format/settings.py, sweep/format/study.py), the `cluster:` section the
cluster's (cluster/config.py)."""
from __future__ import annotations

import typing
from dataclasses import dataclass, field

from cluster.config import ClusterConfig
from sweep.config.choices import CPU_LINALG, DEVICES, ENGINES
from sweep.config.inputs import BOS_RULES, OFFSETS, SEED_MAX, WINDOWS
from sweep.format import dtypes
from sweep.format.fields import Check, at_least, finite_at_least, nonempty, one_of, option, yaml_names
from sweep.format.settings import Settings
from sweep.format.study import Study
from sweep.config.variants import NullsConfig, QuantizationConfig

__all__ = ["NullsConfig", "QuantizationConfig", "ModelSpec", "InputsConfig", "ComputeConfig", "DepthConfig",
           "MemoryConfig", "SweepConfig", "DATASET_FIELDS", "TOP_KEYS"]


@dataclass(frozen=True)
class ModelSpec:
    """One checkpoint to sweep; each becomes its own group of the store."""
    path: str = option(help="hub id (`state-spaces/mamba-370m`, from the Hugging Face cache), a "
                       "checkpoint directory (HF `save_pretrained` or mamba_ssm format) or a local "
                       "`.gguf` file; a relative path is relative to the working directory of "
                       "`tdos sweep`. The plan resolves it once, and workers load what it resolved "
                       "to (they may run anywhere that sees the same file system)", see="models.md")
    dtype: str = option("float32", "compute precision; eigenvalues are stored as complex64 / complex128",
                        check=one_of(dtypes.NAMES, f"use {' or '.join(dtypes.NAMES)}",
                                     what="{v!r} is not supported"))
    revision: str | None = option(None, "hub revision (branch, tag or commit)")
    name: str | None = option(None, "store group name",
                              default_text="default from the path, revision and dtype "
                                           "(`mamba-370m-float64`)")
    layers: typing.Any = option(None, "this model's own layers, instead of the top-level ones",
                                kind="like `layers`")
    trust_remote_code: bool = option(False, "run the modelling code a checkpoint ships (`auto_map`; "
                                     "a `model_type` transformers does not know): that code is then "
                                     "what is differentiated")
    nulls: NullsConfig | None = option(None, "null models swept beside it", section=NullsConfig)
    quantization: QuantizationConfig | None = option(None, "a GGUF's quantization ensemble beside it",
                                                     section=QuantizationConfig)
    # the config key it came from ("model", "models[1]"): what its errors name
    where: str = field(default="model", compare=False, repr=False)


_NEEDS_DATASET = "; needs `dataset`"


@dataclass(frozen=True)
class InputsConfig:
    """The token ids of every sequence: random, natural text, or a Hugging Face dataset's
    documents (sweep/plan/inputs.py, documents.py, windows.py)."""
    sequences: int = option(help="number of input sequences",
                            check=at_least(1, "use a positive number of sequences"))
    length: int = option(help="L_max, tokens per sequence (at most the model's context); "
                         "sequences x length <= 1e8", check=at_least(1, "use a positive token count"))
    seed: int = option(0, "seed of the random token ids (numpy `default_rng`), used when no `text` "
                       "is given; with `dataset`, of the document shuffle and the offsets",
                       check=Check(lambda v: 0 <= v <= SEED_MAX, "must be in 0..2**63-1, got {v}",
                                   "use e.g. seed: 0", "0..2^63-1"))
    text: str | None = option(None, "natural text instead of random ids: a file, a directory (every "
                              "non-hidden file below it, in sorted order), a glob (`corpus/**/*.txt`), "
                              "or `stdlib:pydoc_data.topics`; relative paths are relative to the "
                              "config file", check=nonempty(), see="#inputs")
    tokenizer: str | None = option(None, "hub id or directory of the tokenizer that reads `text` or "
                                   "`dataset`", check=nonempty(),
                                   default_text="default each checkpoint's own tokenizer files")
    dataset: str | None = option(None, "documents from Hugging Face `datasets` instead of `text` (not "
                                 "both): a hub id (`Salesforce/wikitext`), a `save_to_disk` directory, "
                                 "or data files, a path or glob of `.jsonl` / `.json` / `.parquet` / "
                                 "`.csv` / `.txt`; relative paths are relative to the config file",
                                 check=nonempty(), see="#datasets")
    dataset_config: str | None = option(None, "the hub dataset's configuration "
                                        "(`wikitext-103-raw-v1`); hub ids only", check=nonempty())
    split: str | None = option(None, "the split; data files form the one split `train`; a saved "
                               "single Dataset defaults to the split it was saved from" + _NEEDS_DATASET,
                               check=nonempty(), default_text="default `train`")
    column: str | None = option(None, "the column holding each document's text" + _NEEDS_DATASET,
                                check=nonempty(), default_text="default `text`")
    min_chars: int | None = option(None, "documents with fewer characters are skipped" + _NEEDS_DATASET,
                                   check=at_least(0, "use e.g. min_chars: 0"), default_text="default 0")
    windows: str | None = option(None, "`document`: each sequence is one document long enough for "
                                 "`length` tokens, so no sequence spans two documents; `packed`: the "
                                 "documents joined and cut (the only choice, and the behaviour, of "
                                 "`text`)", check=one_of(WINDOWS, "use one of them or leave it out"),
                                 default_text="default `document` with `dataset`, `packed` with `text`")
    offset: str | None = option(None, "document windows: read each document from its first token, "
                                "or from a token offset drawn from `seed`",
                                check=one_of(OFFSETS, "use one of them or leave it out"),
                                default_text="default `start`")
    bos: str | None = option(None, "position 0 of every sequence: `auto` puts the tokenizer's BOS "
                             "there when the tokenizer adds one itself (LLaMA-family tokenizers do, "
                             "GPT-2/NeoX ones do not), `always` / `never` force it. With `text`, "
                             "unset keeps the behaviour from before `bos` existed (only sequence 0 "
                             "can start with a BOS)",
                             check=one_of(BOS_RULES, "use one of them or leave it out"),
                             default_text="default `auto` with `dataset`")
    # the config file's directory: relative text and dataset paths resolve here
    base_dir: str = field(default=".", compare=False, repr=False)


@dataclass(frozen=True)
class ComputeConfig:
    """How the workers compute."""
    token_block: int = option(32, "tokens per task, one chunk of the eigenvalue array",
                              check=at_least(1, "use e.g. token_block: 32"))
    device: str = option("auto", "where the workers compute", check=one_of(DEVICES, "leave it out for auto"))
    live_every: float = option(10.0, "period of the live TDOS picture next to the store (longer when "
                               "a render takes more than a tenth of it); 0 disables",
                               check=finite_at_least(0, "seconds", "use e.g. 10, or 0 to disable"))
    cpu_linalg: str = option("auto", "which library does the CPU's J_tt products and eigenvalues",
                             check=one_of(CPU_LINALG, "leave it out for auto"), see="performance.md")
    engine: str = option("auto", "how J_tt is computed: `auto` takes a hand-written fast path where "
                         "one exists (Mamba-1, GPT-NeoX, LLaMA, GPT-2) and the generic path for every "
                         "other model; `generic` differentiates transformers' own layer everywhere",
                         check=one_of(ENGINES, "leave it out for auto"),
                         see="models.md#the-hand-written-fast-paths")
    resident_layers: int = option(1, "decoder layers a worker keeps materialised on the layer-local "
                                  "route; more means fewer re-reads when one worker serves several "
                                  "layers, at one layer's memory each", see="scale.md",
                                  check=at_least(1, "use e.g. 1 (the default)", integer=True))
    stall_after: float = option(30.0, "how long a worker may stay paused for memory, or a cluster stay "
                                "without any worker, before the sweep names it; when no block can "
                                "progress the sweep stops with that line and the command that resumes it",
                                check=finite_at_least(0, "seconds", "use e.g. 30 (the default)", strict=True),
                                see="clusters.md#stalls-paused-workers-and-empty-clusters")


@dataclass(frozen=True)
class DepthConfig:
    """Stacked blocks (sweep/numerics/depth.py): products of J_tt over `spans` consecutive swept layers
    and the Lyapunov exponents of the whole run; None (no `depth:` section) computes neither."""
    spans: typing.Any = option(
        (2, 4, 8), "stacks of s consecutive blocks: eig of P_t(l, s) = J^(l+s−1)_tt ⋯ J^(l)_tt for "
        "every start l, and the Lyapunov exponents (1/S) ln σ_i over all swept layers. Needs "
        "consecutive swept layers with one token count, and spans no longer than the run; part of "
        "the store's identity", kind="list of integers >= 2",
        default_text="default [2, 4, 8] when `depth:` is given", see="depth.md")


@dataclass(frozen=True)
class MemoryConfig:
    """Token memory (sweep/numerics/memory.py): m_t(k) = ‖J_{t,t−k}‖_F² of every swept block for
    k = 0..lags at the output tokens t = 0, every, 2·every, …; None (no `memory:` section)
    computes none. Not part of the fingerprint: adding it to a finished sweep computes only the
    memory arrays (the group records its settings, and other settings are refused)."""
    lags: int = option(64, "m_t(k) = ‖J_{t,t−k}‖_F² for k = 0..K",
                       kind="integer, 0 <= K < `inputs.length`", see="memory.md")
    probes: int = option(8, "0: exact, d cotangents per sampled token; p: Hutchinson's estimate from p "
                         "Rademacher cotangents, with its standard error",
                         check=at_least(0, "0 for the exact profile, e.g. 8 for Hutchinson's estimate"))
    every: int = option(8, "the sampled output tokens t = 0, n, 2n, …",
                        check=at_least(1, "e.g. 8 samples every 8th output token"))

    def record(self) -> dict:
        """What the store keeps of it (group attribute `memory`)."""
        return {"lags": self.lags, "probes": self.probes, "every": self.every,
                "estimator": "exact" if self.probes == 0 else
                f"hutchinson ({self.probes} Rademacher probes)"}


@dataclass(frozen=True)
class SweepConfig:
    """The whole config; the YAML's top-level fields."""
    models: list[ModelSpec] = option(help="exactly one of them; each model becomes its own group of "
                                     "the store", names=("model", "models"), section=ModelSpec,
                                     kind="mapping / list of mappings", default_text="required")
    inputs: InputsConfig = option(help="the token ids", section=InputsConfig)
    layers: typing.Any = option(help="zero-based layer indices; `{layer: tokens}` sweeps each layer up "
                                "to its own length (<= `inputs.length`)",
                                kind="`all` \\| list \\| mapping")
    store: str = option(help="the zarr v3 directory the sweep writes (created; rerun to resume)")
    compute: ComputeConfig = option(help="how the workers compute", factory=ComputeConfig,
                                    section=ComputeConfig)
    cluster: ClusterConfig = option(help="where tasks run", factory=ClusterConfig, kind="mapping",
                                    default_text="default a local cluster", see="clusters.md")
    analysis: Settings = option(help="what `tdos analyze` computes under", factory=Settings,
                                section=Settings)
    depth: DepthConfig | None = option(None, "stacked blocks and Lyapunov exponents", section=DepthConfig)
    memory: MemoryConfig | None = option(None, "token memory", section=MemoryConfig)
    study: Study | None = option(None, "the family of tests declared before the sweep; recorded in the "
                                 "store when it starts, not part of its identity", section=Study,
                                 see="analysis.md")

    @property
    def token_block(self) -> int:
        return self.compute.token_block


DATASET_FIELDS = ("dataset", "dataset_config", "split", "column", "min_chars", "windows",
                  "offset", "bos")
TOP_KEYS = yaml_names(SweepConfig)
