"""Train a small byte-level causal LM (Mamba or GPT-NeoX) on the Python standard library.

The demo needs *trained* weights: random ones show little structure in their relaxation
spectra. The corpus is the running interpreter's own stdlib source, which every machine
with Python has, so the run is reproducible offline. Bytes are tokens (vocab 256), and NUL
(0) separates files since it never occurs in source text. A byte-level tokenizer (id = byte
value) is saved beside the weights so that text inputs go through the ordinary
AutoTokenizer path like any other checkpoint's.

    python training/train_bytes.py --arch mamba --out checkpoints/tiny-mamba-bytes \
        --steps 520 --warmup 40 --minutes 55 --seed 0 --d-model 128 --batch 16 --seq-len 128

(the first stage of the shipped Mamba; every stage's exact command is in the README.md model
cards, and docs/demo-models.md summarises them). Mamba trains through
training/mamba_train_scan.py's training path (mixer_forward and the fused scan).

Writes config.json + model.safetensors (float32) and a README.md model card into --out.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import sysconfig
import time
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F

SEPARATOR = 0  # NUL: file separator and pad/bos/eos id
VAL_EVERY = 20  # every 20th file of the sorted list is held out
# Test suites are dropped: distro Pythons often ship without them, and their fixtures
# (binary blobs in string literals) are not representative source text.
EXCLUDED_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test"}
TRAIN_TAIL = 10  # final train loss = mean over this many last steps (short runs still fall fast)


@dataclass
class TrainConfig:
    arch: str = "mamba"  # mamba | gpt_neox
    out: str = "checkpoints/tiny-mamba-bytes"
    d_model: int = 0  # 0: the per-arch default that roughly matches parameter counts
    n_layers: int = 4
    steps: int = 1200
    minutes: float = 15.0  # wall-clock guard; the run stops early (and says so) if hit
    stop_after: int = 0  # >0: stop after this many steps of the `steps` schedule (replays a time-boxed run exactly)
    batch: int = 16
    seq_len: int = 256
    lr: float = 3e-3
    warmup: int = 100
    weight_decay: float = 0.1
    seed: int = 0
    eval_windows: int = 128
    log_every: int = 50
    init_from: str = ""  # a checkpoint dir (ours) to continue from instead of a fresh init

    def __post_init__(self):
        if self.arch not in ("mamba", "gpt_neox"):
            raise ValueError(f"arch: expected mamba or gpt_neox, got {self.arch!r}")
        if self.d_model == 0:
            self.d_model = {"mamba": 192, "gpt_neox": 144}[self.arch]
        if self.steps <= self.warmup:
            raise ValueError(f"steps: must exceed warmup ({self.warmup}), got {self.steps}")


# ---------------------------------------------------------------- corpus

def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path) -> list[Path]:
    """Sorted stdlib *.py files, so the split and byte order are deterministic."""
    files = sorted(root.rglob("*.py"))
    return [p for p in files if not EXCLUDED_DIRS & set(p.relative_to(root).parts[:-1])]


def split_files(files: list[Path]) -> tuple[list[Path], list[Path]]:
    """(train, held-out): every VAL_EVERY-th file is held out, whole files only."""
    val = files[VAL_EVERY - 1 :: VAL_EVERY]
    held = set(val)
    return [p for p in files if p not in held], val


def read_bytes(files: list[Path]) -> torch.Tensor:
    """Concatenated file bytes, each file followed by SEPARATOR.  # (N,) uint8"""
    blob = b"".join(p.read_bytes() + bytes([SEPARATOR]) for p in files)
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8)


def load_corpus() -> tuple[torch.Tensor, torch.Tensor, dict]:
    train_files, val_files = split_files(stdlib_files(stdlib_root()))
    train, val = read_bytes(train_files), read_bytes(val_files)
    meta = {
        "python": platform.python_version(),
        "train_files": len(train_files),
        "val_files": len(val_files),
        "train_bytes": train.numel(),
        "val_bytes": val.numel(),
    }
    return train, val, meta


def unigram_nats(train: torch.Tensor, val: torch.Tensor) -> float:
    """Cross-entropy of held-out bytes under the training byte frequencies (nats/byte).

    Add-half smoothing keeps a byte unseen in training from giving an infinite loss.
    """
    counts = torch.bincount(train.long(), minlength=256).double() + 0.5
    logp = counts.log() - counts.sum().log()
    return float(-logp[val.long()].mean())


# ---------------------------------------------------------------- model

def build_config(cfg: TrainConfig):
    from transformers import GPTNeoXConfig, MambaConfig

    ids = dict(vocab_size=256, pad_token_id=SEPARATOR, bos_token_id=SEPARATOR,
               eos_token_id=SEPARATOR)
    if cfg.arch == "mamba":
        return MambaConfig(hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
                           state_size=16, expand=2, conv_kernel=4, **ids)
    return GPTNeoXConfig(hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
                         num_attention_heads=4, intermediate_size=4 * cfg.d_model,
                         max_position_embeddings=1024, hidden_dropout=0.0,
                         attention_dropout=0.0, tie_word_embeddings=False, **ids)


def build_model(cfg: TrainConfig):
    from transformers import AutoModelForCausalLM

    if cfg.arch == "mamba":
        from mamba_train_scan import install  # training/ is on sys.path as the script's dir

        install()
    torch.manual_seed(cfg.seed)
    if not cfg.init_from:
        return AutoModelForCausalLM.from_config(build_config(cfg), dtype=torch.float32)
    model = AutoModelForCausalLM.from_pretrained(cfg.init_from, dtype=torch.float32)
    bookkeeping = {"_name_or_path", "architectures", "dtype", "transformers_version"}
    shape = [{k: v for k, v in c.to_dict().items() if k not in bookkeeping}
             for c in (model.config, build_config(cfg))]
    if shape[0] != shape[1]:
        raise ValueError(f"init_from: {cfg.init_from} is not a {cfg.arch} of d_model {cfg.d_model}, "
                         f"{cfg.n_layers} layers as built here")
    return model


def initial_model(cfg: TrainConfig):
    """A fresh model as the first stage built it: the reference for the A_log shift of a
    continued run (transformers' S4D-real A_log init, log 1 ... log N per channel, is the same
    for every seed)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(cfg.seed)
    return AutoModelForCausalLM.from_config(build_config(cfg), dtype=torch.float32)


def earlier_stages(cfg: TrainConfig) -> list[str]:
    """The commands that trained --init-from's weights, read from its model card (in order)."""
    if not cfg.init_from:
        return []
    card = (Path(cfg.init_from) / "README.md").read_text()
    return [line for line in card.splitlines() if line.startswith("python training/train_bytes.py")]


def stage_tokens(command: str) -> int:
    """Training tokens of one recorded command: steps run x batch x seq len."""
    import shlex

    stage = parse_args(shlex.split(command)[2:])
    return (stage.stop_after or stage.steps) * stage.batch * stage.seq_len


def keep_freed_memory() -> None:
    """Let glibc reuse freed memory instead of returning it to the OS (Linux only).

    A Mamba step allocates (batch, L, d_inner, state) float32 tensors of tens of MiB; by
    default glibc maps each one fresh and unmaps it on free, so every step page-faults all of
    them in again, which roughly doubled the step time on the shared 2-core machine.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if sys.platform != "linux" or name is None:
        return
    libc = ctypes.CDLL(name)
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # mallopt parameter ids from <malloc.h>
    libc.mallopt(M_MMAP_MAX, 0)  # large blocks from the heap, reusable after free
    libc.mallopt(M_TRIM_THRESHOLD, 2**30)  # keep up to 1 GiB of freed heap mapped


def a_log_values(model) -> torch.Tensor:
    """Every Mamba layer's A_log, flattened: (n_layers * d_inner * state,); empty for NeoX."""
    vals = [p.detach().flatten().clone() for n, p in model.named_parameters() if n.endswith("A_log")]
    return torch.cat(vals) if vals else torch.empty(0)


def a_log_shift(init: torch.Tensor, trained: torch.Tensor) -> dict:
    """How far training moved A_log (rate lambda_A = exp(A_log)) from its initialisation:
    tdos' own measure (analysis.spectrum.observables.a_log_shift: fraction moved by > 0.1, median and
    max |delta|, KS distance), plus the rate ranges for the model card."""
    from analysis.spectrum.observables import a_log_shift as shift

    out = shift(trained.double().numpy(), init.double().numpy())
    out.pop("reference")
    return {**out, "lambda_range_init": (float(init.exp().min()), float(init.exp().max())),
            "lambda_range_trained": (float(trained.exp().min()), float(trained.exp().max()))}


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- optimisation

def sample_batch(data: torch.Tensor, batch: int, seq_len: int, gen: torch.Generator):
    """Random windows of seq_len+1 bytes.  # (batch, seq_len+1) int64"""
    starts = torch.randint(0, data.numel() - seq_len - 1, (batch,), generator=gen)
    return torch.stack([data[s : s + seq_len + 1] for s in starts.tolist()]).long()


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup, then cosine to 10% of the peak: a short run still ends cool."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / (cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model, cfg: TrainConfig) -> torch.optim.AdamW:
    # Decay only matrices: norms, biases, A_log and D are scales, not capacity.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    keep = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": keep, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95))


def lm_loss(model, windows: torch.Tensor) -> torch.Tensor:
    """Mean next-byte cross-entropy in nats.  windows: (B, T+1)"""
    logits = model(input_ids=windows[:, :-1]).logits  # (B, T, 256)
    return F.cross_entropy(logits.reshape(-1, 256), windows[:, 1:].reshape(-1))


@torch.no_grad()
def evaluate(model, data: torch.Tensor, cfg: TrainConfig) -> float:
    """Held-out nats/byte on eval_windows evenly spaced, fixed windows."""
    model.eval()
    span = cfg.seq_len + 1
    starts = torch.linspace(0, data.numel() - span, cfg.eval_windows).long().tolist()
    losses = [lm_loss(model, torch.stack([data[s : s + span] for s in starts[i : i + 16]]).long())
              for i in range(0, len(starts), 16)]
    model.train()
    return float(torch.stack(losses).mean())


def train(model, train_data: torch.Tensor, cfg: TrainConfig) -> dict:
    """Run up to cfg.steps AdamW steps, stopping early at cfg.minutes of wall time."""
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = make_optimizer(model, cfg)
    t0, recent = time.time(), []
    model.train()
    for step in range(min(cfg.steps, cfg.stop_after or cfg.steps)):
        if time.time() - t0 > 60 * cfg.minutes:
            print(f"time box hit at step {step}", flush=True)
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        loss = lm_loss(model, sample_batch(train_data, cfg.batch, cfg.seq_len, gen))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        recent.append(loss.item())
        if (step + 1) % cfg.log_every == 0:
            rate = (step + 1) / (time.time() - t0)
            print(f"step {step + 1} loss {sum(recent[-cfg.log_every:]) / cfg.log_every:.4f} "
                  f"({rate:.2f} steps/s)", flush=True)
    tail = recent[-TRAIN_TAIL:]
    return {"steps_done": len(recent), "wall_s": time.time() - t0,
            "train_nats": sum(tail) / len(tail)}


# ---------------------------------------------------------------- output

def command_line(cfg: TrainConfig, steps_done: int) -> str:
    """The command that replays this run step for step, whatever the wall clock allows."""
    stop = f" --stop-after {steps_done}" if steps_done < cfg.steps else ""
    return (f"python training/train_bytes.py --arch {cfg.arch} --out {cfg.out}{stop} "
            f"--steps {cfg.steps} --warmup {cfg.warmup} --minutes {cfg.minutes:g} --seed {cfg.seed} "
            f"--d-model {cfg.d_model} --batch {cfg.batch} --seq-len {cfg.seq_len} "
            f"--lr {cfg.lr:g}" + (f" --init-from {cfg.init_from}" if cfg.init_from else ""))


def bits(nats: float) -> float:
    return nats / math.log(2)


def model_card(cfg: TrainConfig, meta: dict, result: dict, n: int) -> str:
    rows = [(f"train (mean of the last {TRAIN_TAIL} steps)", result["train_nats"]),
            ("held-out", result["val_nats"]), ("unigram baseline on held-out", result["unigram_nats"])]
    table = "\n".join(f"| {name} | {x:.4f} | {bits(x):.4f} |" for name, x in rows)
    stopped = "" if result["steps_done"] == cfg.steps else (
        f" **Stopped by the {cfg.minutes:g}-minute time box at step {result['steps_done']} of the "
        f"{cfg.steps}-step schedule;** `--stop-after` below replays exactly those steps.")
    return f"""# tiny-{cfg.arch.replace('_', '-')}-bytes

A byte-level causal language model ({cfg.arch}, {n:,} parameters, float32) trained for the
tdos demo: small enough to sweep on a laptop CPU, trained enough that its per-token
Jacobian spectra are not those of random weights. Not for any other use.

## Data
Python {meta['python']} standard library source: every `*.py` under the interpreter's
`sysconfig.get_paths()["stdlib"]`, sorted by path, excluding directories named
{', '.join(sorted(EXCLUDED_DIRS))}. Files are concatenated, each followed by a NUL byte (id 0).
Every {VAL_EVERY}th file of the sorted list is held out.
Train: {meta['train_files']} files, {meta['train_bytes']:,} bytes.
Held out: {meta['val_files']} files, {meta['val_bytes']:,} bytes.

## Model
`{cfg.arch}` via transformers, {cfg.n_layers} layers, d_model {cfg.d_model}, vocab 256 (bytes;
pad = bos = eos = 0; tokenizer.json maps each byte to its value). {arch_details(cfg)}

## Training
AdamW (betas 0.9/0.95, weight decay {cfg.weight_decay} on matrices only), peak lr {cfg.lr:g},
linear warmup {cfg.warmup} steps then cosine to 10% of peak, grad-norm clip 1.0.
{result['steps_done']} steps of batch {cfg.batch} x seq len {cfg.seq_len} random windows
(seed {cfg.seed}): {result['steps_done'] * cfg.batch * cfg.seq_len:,} training tokens (bytes) seen.
1 CPU thread, {result['wall_s'] / 60:.1f} minutes wall ({result['wall_s'] / max(result['steps_done'], 1):.2f} s a step,
on a 2-core machine shared with other jobs).{stopped}{scan_note(cfg)}{continued(cfg, result)}
{a_log_section(result.get('a_log'))}
## Loss
Held-out loss: mean over {cfg.eval_windows} fixed, evenly spaced {cfg.seq_len}-byte windows,
each scored from an empty context. Unigram baseline: cross-entropy of all held-out bytes under
the training byte frequencies (add-0.5 smoothing).

| | nats/byte | bits/byte |
|---|---|---|
{table}

## Reproduce
```
torch {torch.__version__}, Python {meta['python']}
{chr(10).join(result['earlier_stages'] + [command_line(cfg, result['steps_done'])])}
```
"""


def continued(cfg: TrainConfig, result: dict) -> str:
    if not cfg.init_from:
        return ""
    earlier = sum(stage_tokens(c) for c in result["earlier_stages"])
    total = earlier + result["steps_done"] * cfg.batch * cfg.seq_len
    return (f"\n**Continued training:** these steps started from the weights in {cfg.init_from} "
            f"(fresh optimizer state, new warmup), which the earlier command(s) under Reproduce had "
            f"trained on {earlier:,} tokens: {total:,} training tokens seen in all.")


def scan_note(cfg: TrainConfig) -> str:
    if cfg.arch != "mamba":
        return ""
    return ("\nThis stage's MambaMixer ran through training/mamba_train_scan.py's training path "
            "(mixer_forward: the conv + silu and the gated selective scan in the C kernels of "
            "training/selective_scan.c, with hand-written backwards), checked at start-up against "
            "transformers' own MambaMixer and reference scan (values and gradients); the weights "
            "are plain transformers weights and load and run through transformers' code.")


def a_log_section(shift: dict | None) -> str:
    if shift is None:
        return ""
    lo0, hi0 = shift["lambda_range_init"]
    lo, hi = shift["lambda_range_trained"]
    return f"""
## A_log: shift from its initialisation
Over all {shift['entries']:,} A_log entries (every layer x channel x state; rate lambda_A = exp(A_log)):
{shift['moved']:.1%} moved by |delta A_log| > 0.1 from their initial values (median |delta| {shift['median_abs_delta']:.3f},
max {shift['max_abs_delta']:.2f}); the Kolmogorov-Smirnov distance between the initial and trained
value sets is {shift['ks']:.3f} (the initial values are the atoms log 1 ... log N of S4D-real init: KS registers even small moves,
the fraction moved is the robust measure). lambda_A spans {lo0:.2f} ... {hi0:.2f} at init, {lo:.3g} ... {hi:.3g} trained.
"""


def arch_details(cfg: TrainConfig) -> str:
    if cfg.arch == "mamba":
        return "Mamba-1 blocks: state 16, expand 2, conv 4, tied embeddings."
    return (f"GPT-NeoX blocks: 4 heads, rotary on 25% of each head (Pythia's default), MLP {4 * cfg.d_model}, "
            "parallel residual, max_position_embeddings 1024, untied embeddings.")


def save(model, cfg: TrainConfig, meta: dict, result: dict) -> None:
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    from byte_tokenizer import save_byte_tokenizer  # training/ is on sys.path as the script's dir

    model.save_pretrained(out, safe_serialization=True)
    save_byte_tokenizer(out)
    (out / "README.md").write_text(model_card(cfg, meta, result, n_params(model)))


def parse_args(argv: list[str]) -> TrainConfig:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for field in fields(TrainConfig):  # class defaults, before __post_init__ fills d_model
        parser.add_argument("--" + field.name.replace("_", "-"), type=type(field.default),
                            default=field.default)
    return TrainConfig(**vars(parser.parse_args(argv)))


def main(argv: list[str] | None = None) -> None:
    cfg = parse_args(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(1)  # the machine is shared; one core per run
    keep_freed_memory()
    train_data, val_data, meta = load_corpus()
    model = build_model(cfg)
    print(f"{cfg.arch}: {n_params(model):,} params; {meta}", flush=True)
    a_log_init = a_log_values(initial_model(cfg) if cfg.init_from else model)
    stages = earlier_stages(cfg)  # read before --out (possibly the same dir) is overwritten
    result = train(model, train_data, cfg)
    result["earlier_stages"] = stages
    if a_log_init.numel():
        result["a_log"] = a_log_shift(a_log_init, a_log_values(model))
    result["val_nats"] = evaluate(model, val_data, cfg)
    result["unigram_nats"] = unigram_nats(train_data, val_data)
    print(result, flush=True)
    save(model, cfg, meta, result)


if __name__ == "__main__":
    main()
