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

import hashlib
import os
import warnings
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from elmo.fileio import atomic_path
from elmo.model.bilm import BiLM, BiLMState
from elmo.model.chars import batch_to_char_ids, tokenize

if TYPE_CHECKING:  # the runtime builds on this module
    from elmo.inference.runtime import Runtime

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
        from elmo.inference.runtime import Runtime

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


# Bump when the warm-up procedure changes: cached states of an older procedure are then unused.
WARM_STATE_VERSION = 1
WARM_STATE_FILE = "warm_state.npz"  # beside a model's weights, e.g. the packaged model's


def warm_state_key(runtime: "Runtime") -> str:
    """What a warm state depends on: the weights (their fingerprint), the warm-up text, the
    precision and the kind of device it is computed in, and the procedure's version."""
    from elmo.model.weights import weights_fingerprint

    text = resources.files("elmo").joinpath("resources/warmup.txt").read_bytes()
    parts = [weights_fingerprint(runtime.model), hashlib.sha256(text).hexdigest(), runtime.precision,
             runtime.device.type, str(WARM_STATE_VERSION)]
    return hashlib.sha256(":".join(parts).encode()).hexdigest()


def _read_warm_state(path: Path, key: str, runtime: "Runtime") -> BiLMState | None:
    """The state stored at ``path`` if it is there, readable and computed for ``key``."""
    try:
        with np.load(path, allow_pickle=False) as f:
            if str(f["key"]) != key:
                return None
            c, h = torch.from_numpy(f["c"]), torch.from_numpy(f["h"])
    except (OSError, KeyError, ValueError):
        return None  # absent or damaged: it is recomputed (and rewritten)
    expected = runtime.zero_state(1)
    if c.shape != expected.c.shape or h.shape != expected.h.shape:
        return None
    return BiLMState(c.to(runtime.device), h.to(runtime.device))


def save_warm_state(state: BiLMState, key: str, path: str | os.PathLike, make_parents: bool = False) -> None:
    """Store a warm state (and the key it was computed for) as a numpy archive, atomically."""
    with atomic_path(path, make_parents) as tmp, open(tmp, "wb") as f:
        np.savez(f, key=np.array(key), c=state.c.cpu().numpy(), h=state.h.cpu().numpy())


def warm_state_cache_path(key: str) -> Path:
    from elmo.hub.download import default_cache_dir

    return default_cache_dir() / "warm-states" / f"{key}.npz"


def load_or_compute_warm_state(runtime: "Runtime") -> BiLMState:
    """The warm state of the runtime's model, computed once per model and kept on disk.

    Looked up first beside the packaged model (its ``warm_state.npz``, shipped with it), then in
    ``$ELMO_CACHE/warm-states/<key>.npz``; otherwise computed (running the warm-up text, most of
    the start-up time of a one-sentence ``elmo embed``) and saved there. The key is
    :func:`warm_state_key`, so a changed model, text, precision or procedure never reads a stale
    state. A stored state is the computed one, bit for bit; computing it again under another
    thread count or CPU can differ in the last bits (up to ~3e-6), as any float32 product does."""
    from elmo.hub.pretrained import packaged_model_dir

    key = warm_state_key(runtime)
    for path in (packaged_model_dir() / WARM_STATE_FILE, warm_state_cache_path(key)):
        state = _read_warm_state(path, key, runtime)
        if state is not None:
            return state
    state = compute_warm_state(runtime)
    try:
        save_warm_state(state, key, warm_state_cache_path(key), make_parents=True)
    except OSError as e:  # a read-only home costs the next run its start-up time, nothing else
        warnings.warn(f"could not keep the warm state in {warm_state_cache_path(key)}: {e}", stacklevel=2)
    return state


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
                self._warm = (load_or_compute_warm_state(self.model) if not isinstance(self.model, BiLM)
                              else compute_warm_state(self.model))
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

    @property
    def carried(self) -> BiLMState | None:
        """The state carried into the next batch in stateful mode (None before the first batch)."""
        return self._carried

    def restore(self, carried: BiLMState | None) -> None:
        """Carry ``carried`` into the next batch (stateful mode): how a resumed run continues
        where the interrupted one stopped."""
        self._carried = carried

    def reset(self) -> None:
        """Forget carried state (stateful mode) and the cached warm state (after weights change)."""
        self._carried = None
        self._warm = None
