"""Training and fine-tuning the biLM: the original's recipe, resumable at any step, data-parallel
with ``torch.distributed``.

Per step, each direction reads its own window of ``unroll_steps`` tokens for every row (see
:mod:`elmo.data`), the LSTM state carries over from the previous window, and the loss is
``0.5 * (forward NLL + backward NLL)`` (mean per token). As in bilm-tf, Adagrad (lr 0.2, initial
accumulator 1.0) sees the gradient of that loss times ``unroll_steps``, and the global gradient
norm is clipped to ``all_clip_norm_val``. AdamW (with warm-up and cosine decay) is the option.

A run directory holds ``options.json`` (config + training fields), ``vocab.txt``,
``checkpoints/step-*.pt`` (atomic, last K kept), ``metrics.csv`` and ``tensorboard/``.
Checkpoints hold everything to continue exactly: model, optimizer, schedule, RNG states, data
position and LSTM states.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from importlib import resources

import torch
import torch.distributed as dist
from tqdm import tqdm

from elmo.bilm import BiLMState
from elmo.config import BiLMConfig, ConfigError
from elmo.data import LMBatcher, SentenceStream, count_tokens, expand_paths
from elmo.evaluate import evaluate
from elmo.fileio import atomic_path, atomic_write_text
from elmo.lm import TRAIN_FORMAT, VOCAB_FILE, LanguageModel, latest_checkpoint, load_language_model, load_train_checkpoint
from elmo.vocab import Vocabulary

PRESETS = ("tiny", "small", "original")
METRIC_FIELDS = ["step", "tokens", "loss", "forward_perplexity", "backward_perplexity", "learning_rate",
                 "tokens_per_second", "elapsed_seconds", "heldout_forward_perplexity",
                 "heldout_backward_perplexity", "heldout_perplexity"]


@dataclass
class TrainSettings:
    """What ``elmo train`` / ``elmo finetune`` are asked to do. ``None`` means: take the value
    from the config's training fields (the preset's, or the model's being fine-tuned)."""

    train: list[str]
    output: str
    vocab: str | None = None
    config: str | None = "tiny"
    init_from: str | None = None  # fine-tune: a run directory or an exported model
    max_tokens: int | None = None
    epochs: float | None = None
    batch_size: int | None = None
    unroll_steps: int | None = None
    optimizer: str | None = None
    learning_rate: float | None = None
    dropout: float | None = None
    n_negative_samples: int | None = None  # 0: full softmax
    warmup_steps: int | None = None
    seed: int = 0
    checkpoint_every: int = 500
    keep_checkpoints: int = 3
    log_every: int = 10
    heldout: list[str] | None = None
    eval_every: int = 0
    eval_targets: int = 50_000
    device: str = "cpu"
    bf16: bool | None = None  # None: on for CUDA, off on CPU
    resume: bool = False
    progress: bool = True


def load_preset(name: str) -> BiLMConfig:
    """A training preset: ``tiny`` (minutes on a laptop CPU), ``small`` (2x1024_128) or
    ``original`` (2x4096_512, 2 highway layers)."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; expected one of {PRESETS} or an options.json path")
    text = resources.files("elmo").joinpath(f"resources/presets/{name}.json").read_text(encoding="utf-8")
    return BiLMConfig.from_dict(json.loads(text))


def resolve_config(settings: TrainSettings, base: BiLMConfig | None, vocab_size: int, n_train_tokens: int) -> BiLMConfig:
    """The run's config: the preset/options file (or the fine-tuned model's), with the settings'
    overrides and the counts measured from the data written into its training fields."""
    if base is None:
        spec = settings.config or "tiny"
        base = load_preset(spec) if spec in PRESETS else BiLMConfig.from_json(spec)
    training = dict(base.training)
    defaults = {"batch_size": 128, "unroll_steps": 20, "dropout": 0.1, "n_negative_samples_batch": 8192,
                "all_clip_norm_val": 10.0, "optimizer": "adagrad"}
    for key, value in defaults.items():
        training.setdefault(key, value)
    overrides = {"batch_size": settings.batch_size, "unroll_steps": settings.unroll_steps,
                 "dropout": settings.dropout, "n_negative_samples_batch": settings.n_negative_samples,
                 "optimizer": settings.optimizer, "learning_rate": settings.learning_rate,
                 "warmup_steps": settings.warmup_steps}
    training.update({k: v for k, v in overrides.items() if v is not None})
    if training["optimizer"] not in ("adagrad", "adamw"):
        raise ConfigError(f"optimizer: expected 'adagrad' or 'adamw', got {training['optimizer']!r}")
    training.setdefault("learning_rate", 0.2 if training["optimizer"] == "adagrad" else 1e-3)
    training["n_tokens_vocab"] = vocab_size
    training["n_train_tokens"] = n_train_tokens
    training["bidirectional"] = True
    config = BiLMConfig(char_cnn=base.char_cnn, lstm=base.lstm, training=training)
    config.validate()
    return config


# ------------------------------------------------------------------------------ distribution
@dataclass
class Distributed:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup_distributed(device: str) -> Distributed:
    """Join the process group when launched by ``torchrun`` (or ``elmo train --gpus/--processes``)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Distributed(0, 1, torch.device(device))
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.startswith("cuda"):
        gpu = torch.device("cuda", local_rank)
        torch.cuda.set_device(gpu)
        if not dist.is_initialized():
            dist.init_process_group("nccl")
        return Distributed(rank, world, gpu)
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    return Distributed(rank, world, torch.device(device))


def _gather_rows(tensor: torch.Tensor, ctx: Distributed, dim: int) -> torch.Tensor:
    """Concatenate every rank's rows along ``dim`` (ranks hold consecutive slices of the batch)."""
    if ctx.world == 1:
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(ctx.world)]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts, dim=dim)


# ------------------------------------------------------------------------------------ the run
class Trainer:
    """One training run. Build it, then call :meth:`run`."""

    def __init__(self, settings: TrainSettings):
        self.settings = s = settings
        self.ctx = setup_distributed(s.device)
        self.paths = expand_paths(s.train)
        _, self.n_train_tokens = count_tokens(self.paths)
        if self.n_train_tokens == 0:
            raise ValueError(f"{s.train}: the training shards hold no sentences")

        init_model = None
        if s.init_from is not None:
            init_model, vocab = load_language_model(s.init_from)
            if s.vocab is not None and Vocabulary.from_file(s.vocab).words != vocab.words:
                raise ValueError(f"{s.vocab}: fine-tuning keeps the model's vocabulary; this one differs")
        elif s.vocab is None:
            raise ValueError("a vocabulary is needed: --vocab vocab.txt (make one with elmo vocab)")
        else:
            vocab = Vocabulary.from_file(s.vocab)
        self.vocab = vocab

        self.resume_from = latest_checkpoint(s.output) if s.resume else None
        if not s.resume and latest_checkpoint(s.output) is not None:
            raise FileExistsError(f"{s.output}: already holds checkpoints; pass --resume to continue "
                                  f"that run, or choose another --output")
        if self.resume_from is not None:
            payload = load_train_checkpoint(self.resume_from)
            config = BiLMConfig.from_dict(payload["config"])
            if payload["vocab"] != vocab.words:
                raise ValueError(f"{self.resume_from}: the run's vocabulary differs from {s.vocab}")
        else:
            payload = None
            config = resolve_config(s, init_model.config if init_model else None, len(vocab), self.n_train_tokens)
        self.config = config
        t = config.training
        self.batch_size, self.unroll_steps = t["batch_size"], t["unroll_steps"]
        if self.batch_size % self.ctx.world:
            raise ValueError(f"batch_size {self.batch_size} must divide evenly over {self.ctx.world} processes")
        self.tokens_per_step = self.batch_size * self.unroll_steps
        self.max_steps = self._max_steps()

        torch.manual_seed(s.seed + self.ctx.rank)  # dropout masks differ per rank
        self.model = LanguageModel(config, len(vocab))
        if init_model is not None:
            self.model.load_state_dict(init_model.state_dict())
        self.model.to(self.ctx.device)
        self.ddp = (torch.nn.parallel.DistributedDataParallel(self.model) if self.ctx.world > 1 else self.model)
        self.optimizer = self._optimizer()
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._schedule)
        # Negatives are shared by the whole (global) batch: every rank draws the same ones.
        self.sampler = torch.Generator().manual_seed(s.seed + 7919)

        rows_per_rank = self.batch_size // self.ctx.world
        self.rows = slice(self.ctx.rank * rows_per_rank, (self.ctx.rank + 1) * rows_per_rank)
        self.batchers = [LMBatcher(SentenceStream(self.paths, seed=s.seed * 2 + d, reverse=bool(d)), vocab,
                                   self.batch_size, self.unroll_steps, rows=self.rows) for d in (0, 1)]
        self.state = self.model.bilm.zero_state(rows_per_rank)
        self.step, self.tokens = 0, 0
        if payload is not None:
            self._restore(payload)
        elif self.ctx.main:
            self._write_run_files()

    # --------------------------------------------------------------------------- set-up
    def _max_steps(self) -> int:
        s = self.settings
        if s.max_tokens is not None and s.epochs is not None:
            raise ValueError("give --max-tokens or --epochs, not both")
        if s.max_tokens is not None:
            tokens = s.max_tokens
        else:
            tokens = (s.epochs if s.epochs is not None else 1.0) * self.n_train_tokens
        return max(1, math.ceil(tokens / self.tokens_per_step))

    def _optimizer(self) -> torch.optim.Optimizer:
        t = self.config.training
        params = [p for p in self.model.parameters() if p.requires_grad]
        if t["optimizer"] == "adagrad":
            return torch.optim.Adagrad(params, lr=t["learning_rate"], initial_accumulator_value=1.0)
        return torch.optim.AdamW(params, lr=t["learning_rate"], weight_decay=t.get("weight_decay", 0.01))

    def _schedule(self, step: int) -> float:
        """Learning-rate multiplier: constant for Adagrad (as the original); linear warm-up then
        cosine decay to 10% for AdamW."""
        t = self.config.training
        if t["optimizer"] == "adagrad":
            return 1.0
        warmup = t.get("warmup_steps", min(1000, self.max_steps // 10))
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, self.max_steps - warmup))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    def _write_run_files(self) -> None:
        os.makedirs(self.settings.output, exist_ok=True)
        self.config.to_json(os.path.join(self.settings.output, "options.json"))
        self.vocab.save(os.path.join(self.settings.output, VOCAB_FILE))
        settings = asdict(self.settings)
        atomic_write_text(os.path.join(self.settings.output, "train_settings.json"), json.dumps(settings, indent=2) + "\n")

    # ----------------------------------------------------------------------- checkpoints
    def _checkpoint_payload(self) -> dict:
        c = _gather_rows(self.state.c, self.ctx, dim=2)
        h = _gather_rows(self.state.h, self.ctx, dim=2)
        rng = _gather_rows(torch.get_rng_state().unsqueeze(0), self.ctx, dim=0)
        return {"format": TRAIN_FORMAT, "version": 1, "config": self.config.to_dict(), "vocab": self.vocab.words,
                "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "step": self.step, "tokens": self.tokens,
                "torch_rng": rng, "sampler_rng": self.sampler.get_state(),
                "batchers": [b.state_dict() for b in self.batchers],
                "lstm_c": c.cpu(), "lstm_h": h.cpu(), "world": self.ctx.world}

    def save_checkpoint(self) -> None:
        payload = self._checkpoint_payload()  # every rank joins the gathers
        if not self.ctx.main:
            return
        folder = os.path.join(self.settings.output, "checkpoints")
        os.makedirs(folder, exist_ok=True)
        with atomic_path(os.path.join(folder, f"step-{self.step:09d}.pt")) as tmp:
            torch.save(payload, tmp)
        names = sorted(n for n in os.listdir(folder) if n.startswith("step-") and n.endswith(".pt"))
        for old in names[:-self.settings.keep_checkpoints]:
            os.remove(os.path.join(folder, old))

    def _restore(self, payload: dict) -> None:
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.scheduler.load_state_dict(payload["scheduler"])
        self.step, self.tokens = payload["step"], payload["tokens"]
        rng = payload["torch_rng"]
        torch.set_rng_state(rng[self.ctx.rank] if rng.shape[0] == self.ctx.world else rng[0])
        self.sampler.set_state(payload["sampler_rng"])
        for batcher, state in zip(self.batchers, payload["batchers"]):
            batcher.load_state_dict(state)
        device = self.ctx.device
        self.state = BiLMState(payload["lstm_c"][:, :, self.rows].to(device).contiguous(),
                               payload["lstm_h"][:, :, self.rows].to(device).contiguous())
        if self.ctx.main:
            self._truncate_metrics()

    def _truncate_metrics(self) -> None:
        """Drop metric rows logged after the checkpoint: those steps are about to be redone."""
        path = os.path.join(self.settings.output, "metrics.csv")
        if not os.path.exists(path):
            return
        with open(path, newline="", encoding="utf-8") as f:
            rows = [r for r in csv.DictReader(f) if int(r["step"]) <= self.step]
        with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, METRIC_FIELDS)
            writer.writeheader()
            writer.writerows(rows)

    # ------------------------------------------------------------------------------ loop
    def _autocast(self):
        bf16 = self.settings.bf16 if self.settings.bf16 is not None else self.ctx.device.type == "cuda"
        return torch.autocast(self.ctx.device.type, dtype=torch.bfloat16, enabled=bf16)

    def train_step(self) -> tuple[float, float]:
        """One optimizer step. Returns the forward and backward mean NLL of this rank's rows."""
        t = self.config.training
        batches = []
        for batcher in self.batchers:
            batch = batcher.next_batch()
            batches.append({k: v.to(self.ctx.device) for k, v in batch.items()})
        self.model.train()
        with self._autocast():
            nll_f, nll_b, self.state = self.ddp(batches[0], batches[1], self.state, dropout=t["dropout"],
                                                n_samples=self._n_samples(), generator=self.sampler)
        loss = 0.5 * (nll_f.mean() + nll_b.mean())
        scale = self.unroll_steps if t["optimizer"] == "adagrad" else 1.0
        (loss * scale).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), t["all_clip_norm_val"])
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.tokens += self.tokens_per_step
        return float(nll_f.detach().mean()), float(nll_b.detach().mean())

    def _n_samples(self) -> int:
        n = self.config.training["n_negative_samples_batch"]
        # Sampling as many negatives as there are words is the full softmax, only slower.
        return 0 if n >= len(self.vocab) else n

    def run(self) -> dict:
        """Train until ``max_steps``; returns the last metrics."""
        s = self.settings
        writer = self._tensorboard() if self.ctx.main else None
        metrics_path = os.path.join(s.output, "metrics.csv")
        start_time, window_start, window_tokens = time.time(), time.time(), 0
        sums, n = [0.0, 0.0], 0
        last: dict = {}
        bar = tqdm(total=self.max_steps, initial=self.step, unit="step", disable=not (s.progress and self.ctx.main),
                   dynamic_ncols=True)
        while self.step < self.max_steps:
            f, b = self.train_step()
            sums[0] += f
            sums[1] += b
            n += 1
            window_tokens += self.tokens_per_step
            bar.update(1)
            evaluate_now = s.heldout and s.eval_every and (self.step % s.eval_every == 0 or self.step == self.max_steps)
            if self.step % s.log_every == 0 or self.step == self.max_steps or evaluate_now:
                elapsed = time.time() - window_start
                row = {"step": self.step, "tokens": self.tokens, "loss": 0.5 * (sums[0] + sums[1]) / n,
                       "forward_perplexity": math.exp(sums[0] / n), "backward_perplexity": math.exp(sums[1] / n),
                       "learning_rate": self.scheduler.get_last_lr()[0],
                       "tokens_per_second": window_tokens / max(elapsed, 1e-9),
                       "elapsed_seconds": time.time() - start_time}
                if evaluate_now:
                    row.update(self.evaluate_heldout())
                if self.ctx.main:
                    self._log(metrics_path, writer, row)
                bar.set_postfix(loss=f"{row['loss']:.3f}", ppl=f"{math.exp(row['loss']):.1f}",
                                tok_s=f"{row['tokens_per_second']:.0f}")
                last = row
                sums, n, window_start, window_tokens = [0.0, 0.0], 0, time.time(), 0
            if self.step % s.checkpoint_every == 0 or self.step == self.max_steps:
                self.save_checkpoint()
        bar.close()
        if writer is not None:
            writer.close()
        return last

    def evaluate_heldout(self) -> dict:
        """Held-out perplexity on the first ``eval_targets`` predictions (rank 0 computes it)."""
        if not self.ctx.main:
            return {}
        result = evaluate(self.model, self.vocab, expand_paths(self.settings.heldout),
                          max_targets=self.settings.eval_targets, device=self.ctx.device)
        return {"heldout_forward_perplexity": result["forward_perplexity"],
                "heldout_backward_perplexity": result["backward_perplexity"],
                "heldout_perplexity": result["average_perplexity"]}

    def _tensorboard(self):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            print("tensorboard is not installed: metrics go to metrics.csv only (pip install tensorboard)")
            return None
        return SummaryWriter(os.path.join(self.settings.output, "tensorboard"), purge_step=self.step or None)

    @staticmethod
    def _log(path: str, writer, row: dict) -> None:
        new = not os.path.exists(path)
        with open(path, "a", newline="", encoding="utf-8") as f:
            out = csv.DictWriter(f, METRIC_FIELDS)
            if new:
                out.writeheader()
            out.writerow(row)
        if writer is not None:
            for key, value in row.items():
                if key != "step":
                    writer.add_scalar(key, value, row["step"])
            writer.flush()


def train(settings: TrainSettings) -> dict:
    """Train (or fine-tune, with ``init_from``) a biLM; returns the last logged metrics."""
    trainer = Trainer(settings)
    try:
        return trainer.run()
    finally:
        if trainer.ctx.world > 1 and dist.is_initialized():
            # Leave together: a rank tearing down gloo while another still writes the last
            # checkpoint can abort the process.
            dist.barrier()
            dist.destroy_process_group()

