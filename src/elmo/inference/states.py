"""Where each batch's LSTM state comes from.

The original carries LSTM state from batch to batch by row, so a sentence's vectors depend on
whatever was embedded before it in the same row. Three policies:

* ``"warm"`` (default): every sentence starts from one fixed state derived from the model, the
  average state it reaches after each sentence of a built-in warm-up text. Deterministic, and
  close to the states the model saw in training, where text arrives as a running stream
  (``experiments/state_modes.py`` measures this: see ``docs/state.md``).
* ``"reset"``: every sentence starts from zero state. Deterministic, but the model never saw zero
  state in training except at the very start, and its first tokens come out off-distribution.
* ``"stateful"``: the original's behaviour, exactly; row ``i`` of a batch starts where row ``i`` of
  the previous batch ended (rows never seen start at zero).

This module is the policy and the warm state's file; it never runs a model. The runtime
(:mod:`elmo.inference.runtime`) computes the warm state, hands it to its :class:`StateKeeper`, and
runs each batch from the keeper's initial state.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from elmo.fileio import atomic_path
from elmo.model.chars import tokenize
from elmo.model.network import BiLMState

STATE_MODES = ("warm", "reset", "stateful")
DEFAULT_STATE = "warm"
# Bump when the warm-up procedure changes: cached states of an older procedure are then unused.
WARM_STATE_VERSION = 1
WARM_STATE_FILE = "warm_state.npz"  # beside a model's weights, e.g. the packaged model's


def warmup_text() -> bytes:
    """The built-in warm-up text, as stored in the package."""
    return resources.files("elmo").joinpath("resources/warmup.txt").read_bytes()


def warmup_sentences() -> list[list[str]]:
    """The built-in warm-up text: 30 tokenized sentences of plain English prose."""
    return [tokenize(line) for line in warmup_text().decode("utf-8").splitlines() if line.strip()]


def save_warm_state(state: BiLMState, key: str, path: str | os.PathLike, make_parents: bool = False) -> None:
    """Store a warm state (and the key it was computed for) as a numpy archive, atomically."""
    with atomic_path(path, make_parents) as tmp, open(tmp, "wb") as f:
        np.savez(f, key=np.array(key), c=state.c.cpu().numpy(), h=state.h.cpu().numpy())


def load_warm_state(path: str | os.PathLike, key: str) -> BiLMState | None:
    """The state :func:`save_warm_state` stored at ``path``, if it is there, readable and computed
    for ``key`` (on the CPU); else None (absent or damaged: the caller computes it again)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            if str(f["key"]) != key:
                return None
            return BiLMState(torch.from_numpy(f["c"]), torch.from_numpy(f["h"]))
    except (OSError, KeyError, ValueError):
        return None


def warm_state_cache_path(key: str) -> Path:
    """Where a computed warm state is kept: ``$ELMO_CACHE/warm-states/<key>.npz``."""
    from elmo.fileio import default_cache_dir

    return default_cache_dir() / "warm-states" / f"{key}.npz"


class StateKeeper:
    """Hands out the initial state for each batch under one of :data:`STATE_MODES` and, in
    stateful mode, remembers each row's final state.

    In warm mode the owner sets :attr:`warm` (a one-row state) before the first batch: the keeper
    only keeps it, so that it never has to run the model it serves (:attr:`needs_warm` says when).
    """

    def __init__(self, mode: str = DEFAULT_STATE):
        if mode not in STATE_MODES:
            raise ValueError(f"state: expected one of {STATE_MODES}, got {mode!r}")
        self.mode = mode
        self.warm: BiLMState | None = None
        self._carried: BiLMState | None = None

    @property
    def needs_warm(self) -> bool:
        """Whether the next :meth:`initial` needs :attr:`warm`, and it is not set yet."""
        return self.mode == "warm" and self.warm is None

    def initial(self, batch: int) -> BiLMState | None:
        """Initial state for a batch of ``batch`` rows (None means zeros)."""
        if self.mode == "reset":
            return None
        if self.mode == "warm":
            if self.warm is None:
                raise RuntimeError("warm state mode: set StateKeeper.warm before the first batch")
            return self.warm.expand(batch)
        if self._carried is None:
            return None
        carried = self._carried
        state = BiLMState(carried.c.new_zeros(*carried.c.shape[:2], batch, carried.c.shape[3]),
                          carried.h.new_zeros(*carried.h.shape[:2], batch, carried.h.shape[3]))
        rows = min(batch, carried.batch_size)
        state.c[:, :, :rows] = carried.c[:, :, :rows]
        state.h[:, :, :rows] = carried.h[:, :, :rows]
        return state

    def update(self, final: BiLMState) -> None:
        """Record a batch's final state (stateful mode only; other modes ignore it)."""
        if self.mode != "stateful":
            return
        final = BiLMState(final.c.detach(), final.h.detach())
        if self._carried is None or self._carried.batch_size <= final.batch_size:
            self._carried = final
            return
        # A smaller batch updates its rows; the rows it did not use keep their old state.
        self._carried.c[:, :, :final.batch_size] = final.c
        self._carried.h[:, :, :final.batch_size] = final.h

    @property
    def carried(self) -> BiLMState | None:
        """The state each row hands to the same row of the next batch (stateful mode), or None
        when nothing is carried (before the first batch, after :meth:`reset`, other modes)."""
        return self._carried

    @carried.setter
    def carried(self, state: BiLMState | None) -> None:
        """Replace the carried state, e.g. one saved earlier (stateful mode only)."""
        if state is not None and self.mode != "stateful":
            raise ValueError(f"state: a {self.mode!r} policy carries no state between batches; "
                             "only 'stateful' takes one")
        self._carried = None if state is None else BiLMState(state.c.detach(), state.h.detach())

    def reset(self) -> None:
        """Forget carried state (stateful mode) and the warm state (after the weights change)."""
        self._carried = None
        self.warm = None


__all__ = ["DEFAULT_STATE", "STATE_MODES", "StateKeeper", "WARM_STATE_FILE", "WARM_STATE_VERSION", "load_warm_state",
           "save_warm_state", "warm_state_cache_path", "warmup_sentences", "warmup_text"]
