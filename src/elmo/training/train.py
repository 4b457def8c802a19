"""Training and fine-tuning the biLM: the original's recipe, resumable at any step, data-parallel
with ``torch.distributed``.

Per step, each direction reads its own window of ``unroll_steps`` tokens for every row (see
:mod:`elmo.training.data`), the LSTM state carries over from the previous window, and the loss is
``0.5 * (forward NLL + backward NLL)`` (mean per token). As in bilm-tf, Adagrad (lr 0.2, initial
accumulator 1.0) sees the gradient of that loss times ``unroll_steps``, and the global gradient
norm is clipped to ``all_clip_norm_val``. AdamW (with warm-up and cosine decay) is the option.

A run directory holds ``options.json`` (config + training fields), ``vocab.txt``,
``train_settings.json`` (the settings it was started with), ``checkpoints/step-*.pt`` (atomic,
last K kept), ``metrics.csv`` and ``tensorboard/``. Checkpoints hold everything to continue
exactly: model, optimizer, schedule, RNG states, data position, LSTM states, the run's seed and
length, and the training time so far. A resumed run refuses settings that would change it (see
:data:`CHANGEABLE_ON_RESUME` for those that may change), skips a damaged newest checkpoint, and
leaves no metric row or TensorBoard step twice.

The recipe and settings are in :mod:`elmo.training.recipe`, the resume policy in
:mod:`elmo.training.resume`, the process group in :mod:`elmo.training.distributed`; this module
is the :class:`Trainer`, which sets a run up in named steps (``_setup_model``,
``_setup_optimizer``, ``_setup_data``, ...) and runs it.
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
import time
from dataclasses import asdict

import torch
import torch.distributed as dist
from torch.optim.adagrad import adagrad

from elmo.fileio import atomic_path, atomic_write_text, check_folder, claim_folder
from elmo.hub.checkpoints import (
    VOCAB_FILE,
    checkpoint_paths,
    latest_checkpoint,
    load_latest_train_checkpoint,
    save_train_checkpoint,
)
from elmo.hub.resolve import load_language_model_with_origin
from elmo.kernels.encoder import distinct_words
from elmo.model.network import BiLMState
from elmo.model.vocab import Vocabulary
from elmo.progress import progress_bar
from elmo.training.data import (
    LMBatcher,
    PrefetchingBatcher,
    SentenceStream,
    count_tokens,
    expand_paths,
)
from elmo.training.distributed import gather_rows, setup_distributed, use_deterministic_kernels
from elmo.training.evaluate import evaluate
from elmo.lm.model import LanguageModel, predicted
from elmo.training.recipe import (
    DEFAULT_PRESET,
    RECIPE,
    TrainSettings,
    finetune_batch_size,
    resolve_config,
    run_steps,
    run_tokens,
)
from elmo.training.resume import (
    CHANGEABLE_ON_RESUME,
    RUN_KIND,
    SETTINGS_FILE,
    PreviousRun,
    is_run_from_before_markers,
    length_option,
    previous_run,
    resume_conflicts,
)
from elmo.lm.softmax import log_uniform_sample

METRIC_FIELDS = ["step", "tokens", "loss", "forward_perplexity", "backward_perplexity", "learning_rate",
                 "tokens_per_second", "elapsed_seconds", "heldout_forward_perplexity",
                 "heldout_backward_perplexity", "heldout_perplexity"]

# ------------------------------------------------------------------------------------ the run
# Fewer optimizer steps than this in a new run whose batch size was not chosen gets a warning.
FEW_STEPS = 50


class Trainer:
    """One training run. Build it, then call :meth:`run`."""

    def __init__(self, settings: TrainSettings):
        self.settings = settings
        self._check_settings()
        self.ctx = setup_distributed(settings.device)
        self._setup_corpus()
        init_model = self._setup_vocab()
        payload, previous = self._setup_resume(init_model)
        self._setup_config(init_model, payload, previous)
        self._setup_model(init_model)
        self._setup_optimizer()
        self._setup_data()
        self._setup_state()
        self._setup_run_directory(payload)

    # --------------------------------------------------------------------------- set-up
    def _check_settings(self) -> None:
        """Refuse bad settings and a folder that is not a run of elmo's, before the process
        group, the data and any file: a refused run leaves nothing."""
        s = self.settings
        s.validate()
        # A folder that is not a run of elmo's is refused now, before hours of work, and never written into.
        check_folder(s.output, RUN_KIND, recognise=is_run_from_before_markers, option="--output")
        if s.deterministic:
            use_deterministic_kernels()

    def _setup_corpus(self) -> None:
        """The training (and held-out) shards, and the training tokens they hold."""
        s = self.settings
        self.paths = expand_paths(s.train)
        self.heldout_paths = expand_paths(s.heldout) if s.heldout else None  # a typo fails now, not at step N
        _, self.n_train_tokens = count_tokens(self.paths)
        if self.n_train_tokens == 0:
            raise ValueError(f"{s.train}: the training shards hold no sentences")

    def _setup_vocab(self) -> LanguageModel | None:
        """The vocabulary: the fine-tuned model's (returned, with where it came from) or --vocab's."""
        s = self.settings
        init_model, self.init_origin = None, None
        if s.init_from is not None:
            init_model, vocab, self.init_origin = load_language_model_with_origin(s.init_from)
            if s.vocab is not None and Vocabulary.from_file(s.vocab).words != vocab.words:
                raise ValueError(f"{s.vocab}: fine-tuning keeps the model's vocabulary; this one differs")
        else:
            vocab = Vocabulary.from_file(s.vocab)
        self.vocab = vocab
        return init_model

    def _setup_resume(self, init_model: LanguageModel | None) -> tuple[dict | None, PreviousRun | None]:
        """The checkpoint to resume from and what the run directory fixes (both None for a new
        run); a resume that would change the run is refused (:mod:`elmo.training.resume`)."""
        s = self.settings
        if not s.resume and latest_checkpoint(s.output) is not None:
            raise FileExistsError(f"{s.output}: already holds checkpoints; pass --resume to continue "
                                  f"that run, or choose another --output")
        self.resume_from, payload = None, None
        previous = None
        if s.resume:
            found = load_latest_train_checkpoint(s.output)  # a damaged newest file is skipped, with a warning
            if found is not None:
                self.resume_from, payload = found
            previous = previous_run(s, payload, init_model.config if init_model else None, len(self.vocab),
                                    self.n_train_tokens)
        if previous is not None:
            conflicts = resume_conflicts(s, previous, self.vocab, self.n_train_tokens)
            if conflicts:
                raise ValueError(f"{s.output}: --resume continues the run as it was started, but "
                                 f"{'; '.join(conflicts)} (on resume only {', '.join(CHANGEABLE_ON_RESUME)} "
                                 f"may change; start a new --output to change the others)")
        return payload, previous

    def _setup_config(self, init_model: LanguageModel | None, payload: dict | None,
                      previous: PreviousRun | None) -> None:
        """The run's config (the resumed run's, or :func:`resolve_config`'s), batch, seed and length."""
        s = self.settings
        if previous is not None:
            config = previous.config
        else:
            config = resolve_config(s, init_model.config if init_model else None, len(self.vocab),
                                    self.n_train_tokens)
        self.config = config
        t = config.training
        self.batch_size, self.unroll_steps = t["batch_size"], t["unroll_steps"]
        if self.batch_size % self.ctx.world:
            raise ValueError(f"batch_size {self.batch_size} must divide evenly over {self.ctx.world} processes")
        self.tokens_per_step = self.batch_size * self.unroll_steps
        self.seed = s.seed if s.seed is not None else (previous.seed if previous and previous.seed is not None else 0)
        self.max_steps = self._max_steps(previous)
        if previous is None and s.batch_size is None and self.ctx.main:
            self._explain_batch_size(init_model)
        if payload is not None and self.max_steps < payload["step"]:
            raise ValueError(f"{length_option(s)}: gives {self.max_steps} steps, but the run is already at "
                             f"step {payload['step']}")

    def _setup_model(self, init_model: LanguageModel | None) -> None:
        """The language model (the fine-tuned model's weights, if any) on the device, under DDP
        when several processes train."""
        s = self.settings
        torch.manual_seed(self.seed + self.ctx.rank)  # dropout masks differ per rank
        # The softmax is initialised on the device itself (on a GPU, random numbers of the device's
        # generator): with the original vocabulary the CPU took 9 s (16 cores) to 93 s (2 cores).
        self.model = LanguageModel(self.config, len(self.vocab), lstm_path=s.lstm_path,
                                   compile_cells=s.compile_cells,
                                   softmax_device=self.ctx.device)
        if init_model is not None:
            self.model.load_state_dict(init_model.state_dict())
        self.model.to(self.ctx.device)
        if s.cuda_graphs:
            if self.ctx.world > 1:
                raise ValueError("--cuda-graphs: runs one process only (the graphs are not captured under DDP)")
            self.model.use_cuda_graphs()
        self.ddp = (torch.nn.parallel.DistributedDataParallel(self.model) if self.ctx.world > 1 else self.model)

    def _setup_optimizer(self) -> None:
        """Optimizer, learning-rate schedule, the sparse softmax step's switch and the negatives' sampler."""
        self.optimizer = self._optimizer()
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._schedule)
        # Whether the softmax weight's Adagrad step updates only the rows a step used (the targets
        # and negatives of a sampled softmax): the dense step's numbers, since its update of a row
        # without gradient is exactly nothing (the sum gains 0, the weight moves by 0), without a
        # (vocab, dim) gradient, sum and square root per step. One process only (DDP all-reduces
        # dense gradients), Adagrad only (AdamW moves every row).
        self.sparse_softmax = (self.config.training["optimizer"] == "adagrad" and self.ctx.world == 1
                               and self._n_samples() > 0)
        # Negatives are shared by the whole (global) batch: every rank draws the same ones.
        self.sampler = torch.Generator().manual_seed(self.seed + 7919)

    def _setup_data(self) -> None:
        """One batcher per direction over this rank's rows, built ahead in a thread if asked."""
        s = self.settings
        rows_per_rank = self.batch_size // self.ctx.world
        self.rows = slice(self.ctx.rank * rows_per_rank, (self.ctx.rank + 1) * rows_per_rank)
        self.batchers = [LMBatcher(SentenceStream(self.paths, seed=self.seed * 2 + d, reverse=bool(d)), self.vocab,
                                   self.batch_size, self.unroll_steps, rows=self.rows) for d in (0, 1)]
        prefetch = s.prefetch if s.prefetch is not None else (2 if self.ctx.device.type == "cuda" else 0)
        if prefetch:
            cuda = self.ctx.device.type == "cuda"
            self.batchers = [PrefetchingBatcher(b, depth=prefetch, pin_memory=cuda) for b in self.batchers]

    def _setup_state(self) -> None:
        """A new run's LSTM state, step and token counts and clock (a resume restores them later)."""
        self.state = self.model.bilm.zero_state(self.batch_size // self.ctx.world)
        self.step, self.tokens = 0, 0
        # Training time of the run so far: what earlier sessions spent (from the checkpoint) plus
        # this session's, so elapsed_seconds goes on rising across resumes.
        self.elapsed_before, self.session_start = 0.0, time.monotonic()

    def _setup_run_directory(self, payload: dict | None) -> None:
        """Claim the run directory, restore a resumed run, and write a new run's files."""
        s = self.settings
        if self.ctx.main:  # the run directory, made now with elmo's marker (or marked, if from before the marker)
            claim_folder(s.output, RUN_KIND, recognise=is_run_from_before_markers, option="--output", make_parents=True)
        if payload is not None:
            self._restore(payload)
        if s.resume and self.ctx.main:
            last_row = self._truncate_metrics()
            if payload is not None and "elapsed_seconds" not in payload and last_row is not None:
                # A checkpoint from before the field: the metric row of its step has the time.
                self.elapsed_before = float(last_row["elapsed_seconds"] or 0.0)
        if payload is None and self.ctx.main:
            self._write_run_files()

    def _explain_batch_size(self, init_model: LanguageModel | None) -> None:
        """Say on stderr which batch size a new run took when none was given: a fine-tune's comes
        from the fine-tuning rule; and warn when the run makes only a handful of updates."""
        s = self.settings
        source = f"the batch size of the config {s.config or DEFAULT_PRESET}"
        if init_model is not None:
            pretraining = init_model.config.training.get("batch_size", RECIPE.batch_size)
            _, why = finetune_batch_size(run_tokens(s.max_tokens, s.epochs, self.n_train_tokens), self.unroll_steps,
                                         pretraining, s.device)
            print(f"fine-tuning with batch {self.batch_size} x {self.unroll_steps} tokens: {self.max_steps} updates "
                  f"({why}; the model was pretrained with batch {pretraining}); --batch-size sets another",
                  file=sys.stderr)
            source = (f"the batch size of {s.init_from}'s options.json, the most the fine-tuning rule takes"
                      if self.batch_size == pretraining else f"the fine-tuning rule: {why}")
        if self.max_steps < FEW_STEPS:
            print(f"warning: {self.n_train_tokens:,} training tokens make {self.max_steps} optimizer step(s) of "
                  f"{self.batch_size} x {self.unroll_steps} tokens ({source}); pass --batch-size (a smaller one) "
                  f"or --epochs (more passes) for more updates", file=sys.stderr)

    def _max_steps(self, previous: PreviousRun | None) -> int:
        """The run's length in steps: as given, else (on resume) the run's, else one epoch."""
        s = self.settings
        if s.max_tokens is None and s.epochs is None and previous is not None and previous.max_steps is not None:
            # (A run extended before its length was stored may be past the length it was started with.)
            return max(previous.max_steps, previous.step)
        return run_steps(s.max_tokens, s.epochs, self.n_train_tokens, self.tokens_per_step)

    def _optimizer(self) -> torch.optim.Optimizer:
        t = self.config.training
        params = [p for p in self.model.parameters() if p.requires_grad]
        if t["optimizer"] == "adagrad":
            return torch.optim.Adagrad(params, lr=t["learning_rate"], initial_accumulator_value=1.0)
        return torch.optim.AdamW(params, lr=t["learning_rate"], weight_decay=t.get("weight_decay", RECIPE.adamw_weight_decay))

    def _schedule(self, step: int) -> float:
        """Learning-rate multiplier: constant for Adagrad (as the original); linear warm-up then
        cosine decay to 10% for AdamW."""
        t = self.config.training
        if t["optimizer"] == "adagrad":
            return 1.0
        warmup = t.get("warmup_steps", min(RECIPE.max_warmup_steps, self.max_steps // 10))
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, self.max_steps - warmup))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    def _write_run_files(self) -> None:
        s = self.settings
        # A resumed run given its own files back (--config RUN/options.json, --vocab RUN/vocab.txt)
        # has them already; an input is never written over (elmo.fileio.check_not_an_input).
        for source, name, save in ((s.config, "options.json", self.config.to_json),
                                   (s.vocab, VOCAB_FILE, self.vocab.save)):
            target = os.path.join(s.output, name)
            if not (s.resume and isinstance(source, str) and _same_file(source, target)):
                save(target)
        settings_path = os.path.join(s.output, SETTINGS_FILE)
        if s.resume and os.path.exists(settings_path):
            return  # restarted before its first checkpoint: the run keeps the settings it was started with
        # The values the run actually uses, so that a resume can tell a change from a default.
        recorded = asdict(s)
        recorded["seed"] = self.seed
        recorded["config"] = s.config if s.config is not None or s.init_from is not None else DEFAULT_PRESET
        if self.init_origin is not None:
            # A run directory's newest checkpoint changes as that run goes on: keep which one was read.
            recorded["init_checkpoint"] = self.init_origin
        atomic_write_text(settings_path, json.dumps(recorded, indent=2) + "\n")

    # ----------------------------------------------------------------------- checkpoints
    def elapsed_seconds(self) -> float:
        """Training time of the whole run so far, over all its sessions."""
        return self.elapsed_before + time.monotonic() - self.session_start

    def _checkpoint_payload(self) -> dict:
        c = gather_rows(self.state.c, self.ctx, dim=2)
        h = gather_rows(self.state.h, self.ctx, dim=2)
        rng = gather_rows(torch.get_rng_state().unsqueeze(0), self.ctx, dim=0)
        extra = {}
        if self.ctx.device.type == "cuda":
            # Dropout on the GPU draws from the GPU's generator: without its state a resume is not exact.
            extra["cuda_rng"] = gather_rows(torch.cuda.get_rng_state(self.ctx.device).unsqueeze(0), self.ctx, dim=0)
        return {**extra, "config": self.config.to_dict(), "vocab": self.vocab.words,
                "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "step": self.step, "tokens": self.tokens,
                "torch_rng": rng, "sampler_rng": self.sampler.get_state(),
                "batchers": [b.state_dict() for b in self.batchers],
                "lstm_c": c.cpu(), "lstm_h": h.cpu(), "world": self.ctx.world,
                "seed": self.seed, "max_steps": self.max_steps, "elapsed_seconds": self.elapsed_seconds()}

    def save_checkpoint(self) -> None:
        payload = self._checkpoint_payload()  # every rank joins the gathers
        if not self.ctx.main:
            return
        folder = os.path.join(self.settings.output, "checkpoints")
        os.makedirs(folder, exist_ok=True)
        save_train_checkpoint(payload, os.path.join(folder, f"step-{self.step:09d}.pt"))
        names = sorted(n for n in os.listdir(folder) if n.startswith("step-") and n.endswith(".pt"))
        for old in names[:-self.settings.keep_checkpoints]:
            os.remove(os.path.join(folder, old))

    def _restore(self, payload: dict) -> None:
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.scheduler.load_state_dict(payload["scheduler"])
        self.step, self.tokens = payload["step"], payload["tokens"]
        self.elapsed_before = float(payload.get("elapsed_seconds", 0.0))
        rng = payload["torch_rng"]
        torch.set_rng_state(rng[self.ctx.rank] if rng.shape[0] == self.ctx.world else rng[0])
        cuda_rng = payload.get("cuda_rng")
        if cuda_rng is not None and self.ctx.device.type == "cuda" and cuda_rng.shape[0] == self.ctx.world:
            torch.cuda.set_rng_state(cuda_rng[self.ctx.rank], self.ctx.device)
        self.sampler.set_state(payload["sampler_rng"])
        for batcher, state in zip(self.batchers, payload["batchers"]):
            batcher.load_state_dict(state)
        device = self.ctx.device
        self.state = BiLMState(payload["lstm_c"][:, :, self.rows].to(device).contiguous(),
                               payload["lstm_h"][:, :, self.rows].to(device).contiguous())
        if self.ctx.main:
            self._set_aside_damaged()

    def _set_aside_damaged(self) -> None:
        """Rename checkpoints newer than the one resumed from (they did not load) to ``*.damaged``:
        left in place, they would count among the newest ``keep_checkpoints`` and could push out
        every good one."""
        for path in checkpoint_paths(self.settings.output):
            if os.path.basename(path) > os.path.basename(self.resume_from):
                os.replace(path, path + ".damaged")
                print(f"{path}: did not load; kept as {os.path.basename(path)}.damaged", file=sys.stderr)

    def _truncate_metrics(self) -> dict | None:
        """Drop metric rows logged after the resumed step (those steps are about to be redone)
        and any row a kill cut short; returns the last row kept."""
        path = os.path.join(self.settings.output, "metrics.csv")
        if not os.path.exists(path):
            return None
        with open(path, newline="", encoding="utf-8") as f:
            # A cut-short row lacks its last fields (None) or has a step that is not a number.
            rows = [r for r in csv.DictReader(f)
                    if None not in r.values() and r["step"].isdigit() and int(r["step"]) <= self.step]
        with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, METRIC_FIELDS)
            writer.writeheader()
            writer.writerows(rows)
        return rows[-1] if rows else None

    # ------------------------------------------------------------------------------ loop
    def _autocast(self):
        bf16 = self.settings.bf16 if self.settings.bf16 is not None else self.ctx.device.type == "cuda"
        # CUDA graphs cannot hold autocast's cached weight casts (the fused path casts its own).
        return torch.autocast(self.ctx.device.type, dtype=torch.bfloat16, enabled=bf16,
                              cache_enabled=not self.settings.cuda_graphs)

    def train_step(self) -> tuple[float, float]:
        """One optimizer step. Returns the forward and backward mean NLL of this rank's rows."""
        nll_f, nll_b = self._step()
        return float(nll_f), float(nll_b)

    def train_step_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`train_step` without reading its losses: the forward and backward mean NLL stay
        on the device (detached, 0-dim), so that the host runs on to the next step while the
        device works, as the training loop does between logs. For timing steps as training
        runs them (``benchmarks/gpu_suite.py``)."""
        return self._step()

    def _step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step; the forward and backward mean NLL stay on the device (detached), so
        that nothing in the step waits for the device: whether the window is full, its distinct
        words, the negatives and the softmax rows in play come from the host, and the losses are
        read only when logged."""
        t = self.config.training
        batches = [batcher.next_batch() for batcher in self.batchers]
        full = all(bool(batch["mask"].all()) for batch in batches)  # host tensors: no device sync
        encoder = self.model.bilm.token_encoder
        words = distinct_words(torch.stack([batch["char_ids"] for batch in batches]), encoder.pad_id,
                               encoder.word_embedding is not None)
        n_samples = self._n_samples()
        samples = [log_uniform_sample(len(self.vocab), n_samples, "cpu", self.sampler)
                   for _ in batches] if n_samples else None
        rows = None
        if samples is not None and self.sparse_softmax:
            wanted = predicted(torch.stack([batch["targets"] for batch in batches]),
                               torch.stack([batch["mask"] for batch in batches]), full)
            ids = torch.cat([wanted[0], samples[0][0], wanted[1], samples[1][0]])
            rows = torch.unique(ids, return_inverse=True)  # the softmax rows in play, and where each id is
        device = self.ctx.device
        move = (lambda x: x.pin_memory().to(device, non_blocking=True)) if device.type == "cuda" else (lambda x: x)
        batches = [{k: v.to(device, non_blocking=True) for k, v in batch.items()} for batch in batches]
        words = words.to(device, non_blocking=True)
        if samples is not None:
            samples = [(move(ids), move(counts), tries) for ids, counts, tries in samples]
        softmax_rows = None
        if rows is not None:
            rows = tuple(move(x) for x in rows)
            # A leaf of the rows in play: the weight's gradient lands there, (rows, dim) and not
            # (vocab, dim), and the Adagrad step updates those rows only (see _sparse_softmax_step).
            softmax_rows = (self.model.softmax.weight.detach()[rows[0]].requires_grad_(), rows[1])
        self.model.train()
        with self._autocast():
            nll_f, nll_b, self.state = self.ddp(batches[0], batches[1], self.state, dropout=t["dropout"],
                                                full=full, words=words, samples=samples, softmax_rows=softmax_rows)
        loss = 0.5 * (nll_f.mean() + nll_b.mean())
        scale = self.unroll_steps if t["optimizer"] == "adagrad" else 1.0
        (loss * scale).backward()
        if softmax_rows is None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), t["all_clip_norm_val"])
            self.optimizer.step()
        else:
            softmax_weight = self.model.softmax.weight
            others = [p for p in self.model.parameters() if p is not softmax_weight]
            torch.nn.utils.clip_grad_norm_([*others, softmax_rows[0]], t["all_clip_norm_val"])
            self.optimizer.step()  # the softmax weight has no gradient: Adagrad leaves it to us
            self._sparse_softmax_step(rows[0], softmax_rows[0].grad)
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.tokens += self.tokens_per_step
        return nll_f.detach().mean(), nll_b.detach().mean()

    def _sparse_softmax_step(self, rows: torch.Tensor, grad: torch.Tensor) -> None:
        """Adagrad on the softmax weight's ``rows`` ``(k,)`` with their gradient ``(k, dim)``:
        torch's own Adagrad arithmetic on those rows, with the optimizer's step count and sums."""
        weight = self.model.softmax.weight
        group = self.optimizer.param_groups[0]
        state = self.optimizer.state[weight]
        with torch.no_grad():
            values, sums = weight[rows], state["sum"][rows]
            adagrad([values], [grad], [sums], [state["step"]], foreach=group["foreach"],
                    lr=group["lr"], weight_decay=group["weight_decay"], lr_decay=group["lr_decay"],
                    eps=group["eps"], maximize=group["maximize"])
            weight.index_copy_(0, rows, values)
            state["sum"].index_copy_(0, rows, sums)

    def _n_samples(self) -> int:
        n = self.config.training["n_negative_samples_batch"]
        # Sampling as many negatives as there are words is the full softmax, only slower.
        return 0 if n >= len(self.vocab) else n

    def run(self) -> dict:
        """Train until ``max_steps``; returns the last metrics."""
        s = self.settings
        if self.step >= self.max_steps:
            if self.ctx.main:
                print(f"{s.output}: the run is complete ({self.step} of {self.max_steps} steps); give a larger "
                      f"--max-tokens or --epochs to train on", file=sys.stderr)
            return {}
        writer = self._tensorboard() if self.ctx.main else None
        metrics_path = os.path.join(s.output, "metrics.csv")
        self.session_start = window_start = time.monotonic()
        window_tokens = 0
        sums, n = None, 0  # the window's summed losses, on the device until a row is logged
        last: dict = {}
        bar = progress_bar(s.progress if self.ctx.main else False, total=self.max_steps, initial=self.step, unit="step")
        while self.step < self.max_steps:
            step_losses = torch.stack(self._step()).double()  # summed as the Python floats were
            sums = step_losses if sums is None else sums + step_losses
            n += 1
            window_tokens += self.tokens_per_step
            bar.update(1)
            evaluate_now = s.heldout and s.eval_every and (self.step % s.eval_every == 0 or self.step == self.max_steps)
            if self.step % s.log_every == 0 or self.step == self.max_steps or evaluate_now:
                forward_sum, backward_sum = sums.tolist()  # the one wait for the device per logged row
                elapsed = time.monotonic() - window_start
                row = {"step": self.step, "tokens": self.tokens, "loss": 0.5 * (forward_sum + backward_sum) / n,
                       "forward_perplexity": math.exp(forward_sum / n), "backward_perplexity": math.exp(backward_sum / n),
                       "learning_rate": self.scheduler.get_last_lr()[0],
                       "tokens_per_second": window_tokens / max(elapsed, 1e-9),
                       "elapsed_seconds": self.elapsed_seconds()}
                if evaluate_now:
                    row.update(self.evaluate_heldout())
                if self.ctx.main:
                    self._log(metrics_path, writer, row)
                bar.set_postfix(loss=f"{row['loss']:.3f}", ppl=f"{math.exp(row['loss']):.1f}",
                                tok_s=f"{row['tokens_per_second']:.0f}", refresh=False)
                last = row
                sums, n, window_start, window_tokens = None, 0, time.monotonic(), 0
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
        result = evaluate(self.model, self.vocab, self.heldout_paths,
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
        # On resume, a "session start" at the first step to be redone makes readers drop the events
        # logged at or after it before the kill; the resumed step's own event is kept, as its
        # metrics.csv row is. (At the resumed step itself it would drop that one too.)
        purge_step = self.step + 1 if self.settings.resume else None
        return SummaryWriter(os.path.join(self.settings.output, "tensorboard"), purge_step=purge_step)

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
        for batcher in trainer.batchers:
            if isinstance(batcher, PrefetchingBatcher):
                batcher.close()
        if trainer.ctx.world > 1 and dist.is_initialized():
            # Leave together: a rank tearing down gloo while another still writes the last
            # checkpoint can abort the process.
            dist.barrier()
            dist.destroy_process_group()


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
