"""The sweep config's sections: one frozen dataclass per YAML section, and the YAML field
names each one reads (`YAML_FIELDS`: a new config field is added to its dataclass and there).
`sweep.config.load` builds them from the YAML and checks their values."""
from __future__ import annotations

import typing
from dataclasses import dataclass, field

from cluster.config import ClusterConfig
from sweep.config.variants import NullsConfig, QuantizationConfig

__all__ = ["NullsConfig", "QuantizationConfig", "ModelSpec", "InputsConfig", "ComputeConfig", "DepthConfig", "MemoryConfig",
           "AnalysisConfig", "SweepConfig", "YAML_FIELDS", "DATASET_FIELDS", "TOP_KEYS"]


@dataclass(frozen=True)
class ModelSpec:
    """One checkpoint to sweep; each becomes its own group of the store."""

    path: str                       # hub id or local dir (HF format or mamba_ssm format)
    dtype: str = "float32"
    revision: str | None = None
    name: str | None = None         # store group name; derived from path/revision/dtype if null
    layers: typing.Any = None       # per-model override of the top-level `layers`
    trust_remote_code: bool = False  # run a checkpoint's own modelling code (auto_map)
    nulls: NullsConfig | None = None    # null models swept beside it (docs/nulls.md)
    quantization: QuantizationConfig | None = None   # a GGUF's quantization ensemble beside it
    where: str = field(default="model", compare=False, repr=False)


@dataclass(frozen=True)
class InputsConfig:
    sequences: int
    length: int                     # L_max: tokens per sequence
    seed: int = 0                   # random token ids when no text is given
    text: str | None = None         # file | directory | glob | stdlib:pydoc_data.topics
    tokenizer: str | None = None    # hub id or directory; default: each checkpoint's own
    # Hugging Face datasets (sweep/plan/documents.py, sweep/plan/windows.py); None: the default
    dataset: str | None = None      # hub id | save_to_disk directory | data files (path or glob)
    dataset_config: str | None = None
    split: str | None = None        # default train
    column: str | None = None       # default text
    min_chars: int | None = None    # drop shorter documents; default 0
    windows: str | None = None      # document (default for datasets) | packed (text: packed)
    offset: str | None = None       # document windows: start (default) | random
    bos: str | None = None          # auto (default for datasets) | always | never
    base_dir: str = field(default=".", compare=False, repr=False)   # relative paths resolve here


@dataclass(frozen=True)
class ComputeConfig:
    token_block: int = 32           # tokens per task: one chunk of the eigenvalue array
    device: str = "auto"            # auto | cpu | cuda, on the workers
    live_every: float = 10.0        # seconds between live TDOS renders; 0 disables
    cpu_linalg: str = "auto"        # auto | torch | openblas: the CPU's GEMM and eig library
    engine: str = "auto"            # auto | generic: J_tt by a hand-written fast path where one
                                    # exists (sweep/blocks/__init__.py FAST), else transformers' own layer
    resident_layers: int = 1        # decoder layers a worker holds at most (layer-local route)
    stall_after: float = 30.0       # seconds a worker may stay paused for memory (or the cluster
                                    # without workers) before the sweep names it (sweep/watch.py)


@dataclass(frozen=True)
class DepthConfig:
    """Stacked blocks (sweep/numerics/depth.py): products of J_tt over `spans` consecutive swept layers
    and the Lyapunov exponents of the whole run; None (no `depth:` section) computes neither."""
    spans: typing.Any = (2, 4, 8)   # stack lengths s (integers >= 2), as a sorted list once checked


@dataclass(frozen=True)
class MemoryConfig:
    """Token memory (sweep/numerics/memory.py): m_t(k) = ‖J_{t,t−k}‖_F² of every swept block for
    k = 0..lags at the output tokens t = 0, every, 2·every, …; None (no `memory:` section)
    computes none. Not part of the fingerprint: adding it to a finished sweep computes only the
    memory arrays (the group records its settings, and other settings are refused)."""
    lags: int = 64                  # K: lags k = 0..K
    probes: int = 8                 # 0: exact (d cotangents); p: Hutchinson, p Rademacher cotangents
    every: int = 8                  # n: output tokens t = 0, n, 2n, …

    def record(self) -> dict:
        """What the store keeps of it (group attribute `memory`)."""
        return {"lags": self.lags, "probes": self.probes, "every": self.every,
                "estimator": "exact" if self.probes == 0 else
                f"hutchinson ({self.probes} Rademacher probes)"}


@dataclass(frozen=True)
class AnalysisConfig:
    """What `tdos analyze`, `tdos compare`, the live view and the summary compute under
    (sweep.format.settings.Settings checks the values); not part of the fingerprint (it decides
    no stored value). CLI flags of `tdos analyze` / `tdos compare` override each field."""
    window: typing.Any = (1e-4, 5e-2)   # [lo, hi] fit window in λ (YAML `1e-4` reads as a string: accepted)
    level: float = 0.9              # confidence level of every interval and verdict
    n_boot: int = 500               # bootstrap replicates per CI, Monte-Carlo sets per GOF p
    modes: str = "all-stable"       # mode count the figures draw: all-stable | symmetry-removed
    lengths: typing.Any = None      # Table I rows: prefix lengths L (default 8, 16, 32, ...)
    layer: int | None = None        # representative layer (default 24 if swept, else the middle)
    skip_positions: int = 0         # token positions t < k left out of every number
    seed: int = 0                   # seed of every resampling and simulation
    memory_window: typing.Any = None   # [k_lo, k_hi] lags of the memory fits (default conv width..lags)
    primary: str | None = None      # "estimator:modes" of headlines and verdicts (default: the paper's
                                    # for its own setting, else tdos'; docs/analysis.md)


@dataclass(frozen=True)
class SweepConfig:
    models: list[ModelSpec]
    inputs: InputsConfig
    layers: typing.Any              # "all" | [l, ...] | {l: tokens}, normalized
    store: str
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    depth: DepthConfig | None = None
    memory: MemoryConfig | None = None

    @property
    def token_block(self) -> int:
        return self.compute.token_block


DATASET_FIELDS = ("dataset", "dataset_config", "split", "column", "min_chars", "windows",
                  "offset", "bos")
TOP_KEYS = ("model", "models", "inputs", "layers", "store", "compute", "cluster", "analysis",
            "depth", "memory")
# the fields a YAML section may give; the others (ModelSpec.where, InputsConfig.base_dir) are
# set by the loader, never read from the file; `nulls:` takes the registered null kinds
# (NullsConfig.parse)
YAML_FIELDS = {
    ModelSpec: ("path", "dtype", "revision", "name", "layers", "trust_remote_code", "nulls",
                "quantization"),
    QuantizationConfig: ("ensemble", "sequences"),
    InputsConfig: ("sequences", "length", "seed", "text", "tokenizer", *DATASET_FIELDS),
    ComputeConfig: ("token_block", "device", "live_every", "cpu_linalg", "engine", "resident_layers",
                    "stall_after"),
    DepthConfig: ("spans",),
    MemoryConfig: ("lags", "probes", "every"),
    AnalysisConfig: ("window", "level", "n_boot", "modes", "lengths", "layer", "skip_positions",
                     "seed", "memory_window", "primary"),
}
