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
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

import torch

from elmo.bilm import BiLM, BiLMState
from elmo.chars import batch_to_char_ids, tokenize

if TYPE_CHECKING:  # the runtime builds on this module
    from elmo.runtime import Runtime

STATE_MODES = ("warm", "reset", "stateful")
DEFAULT_STATE = "warm"


def warmup_sentences() -> list[list[str]]:
    """The built-in warm-up text: 30 tokenized sentences of plain English prose."""
    text = resources.files("elmo").joinpath("resources/warmup.txt").read_text(encoding="utf-8")
    return [tokenize(line) for line in text.splitlines() if line.strip()]


@torch.inference_mode()
def compute_warm_state(model: "BiLM | Runtime", sentences: list[list[str]] | None = None) -> BiLMState:
    """Read ``sentences`` (default: the warm-up text) as one running stream, starting from zero,
    and average the state reached after each sentence. Returns a one-row state.

    ``model`` is a runtime (its device and precision are used) or a biLM (run in float32)."""
    if isinstance(model, BiLM):
        from elmo.runtime import Runtime

        model = Runtime(model, state="reset")
    sentences = sentences if sentences is not None else warmup_sentences()
    state = model.zero_state(1)
    total_c, total_h = torch.zeros_like(state.c), torch.zeros_like(state.h)
    for sentence in sentences:
        ids, mask = batch_to_char_ids([sentence])
        state = model(ids, mask, state).state
        total_c += state.c
        total_h += state.h
    return BiLMState(total_c / len(sentences), total_h / len(sentences))


class StateKeeper:
    """Hands out the initial state for each batch under one of :data:`STATE_MODES` and, in
    stateful mode, remembers each row's final state."""

    def __init__(self, model: "BiLM | Runtime", mode: str = DEFAULT_STATE):
        if mode not in STATE_MODES:
            raise ValueError(f"state: expected one of {STATE_MODES}, got {mode!r}")
        self.model, self.mode = model, mode
        self._warm: BiLMState | None = None
        self._carried: BiLMState | None = None

    def initial(self, batch: int) -> BiLMState | None:
        """Initial state for a batch of ``batch`` rows (None means zeros)."""
        if self.mode == "reset":
            return None
        if self.mode == "warm":
            if self._warm is None:
                self._warm = compute_warm_state(self.model)
            return self._warm.expand(batch)
        if self._carried is None:
            return None
        state = self.model.zero_state(batch)
        rows = min(batch, self._carried.batch_size)
        state.c[:, :, :rows] = self._carried.c[:, :, :rows]
        state.h[:, :, :rows] = self._carried.h[:, :, :rows]
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

    def reset(self) -> None:
        """Forget carried state (stateful mode) and the cached warm state (after weights change)."""
        self._carried = None
        self._warm = None
