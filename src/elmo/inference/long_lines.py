"""Embedding a sentence of any length in bounded memory, exactly.

A batch holds its whole sentences on the device: ``(L+1) x tokens x dim`` floats of layers plus
the LSTM's work, so a document on one line (100,000 tokens or more) would exhaust memory. Here a
long sentence runs through the biLM in windows of ``window`` timesteps instead:

* Both directions advance window by window, each carrying its LSTM state from one window into the
  next, exactly as one long run would. The forward stack reads windows from the left end, the
  backward stack from the right end (its own reading order), so both are streams; every layer of
  a window is finished before the next window starts.
* A token's output needs both directions, but the forward stack reaches the left end first and the
  backward stack the right end. So each window's per-direction layers go to two temporary files
  (on disk, not in memory), and a last pass reads them back in token order and yields the
  combined ``(tokens, L+1, dim)`` layers window by window.

Memory: the model, one window's activations (``window`` tokens, as a batch of ``window`` padded
tokens would take) and the sentence's tokens as strings. Disk: ``(2L+1) x projection_dim x 4``
bytes per token, freed at the end. Windows are a multiple of the LSTM kernel's input-gate chunk,
so the arithmetic is the same as one run over the whole sentence.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from elmo.kernels.cpu_lstm import GATE_CHUNK_STEPS
from elmo.model.chars import BOS_TOKEN, EOS_TOKEN

if TYPE_CHECKING:
    from elmo.inference.runtime import Runtime


def window_for(max_tokens: int) -> int:
    """The window (timesteps) for a token budget: a multiple of the input-gate chunk, at least one chunk."""
    return max(GATE_CHUNK_STEPS, max_tokens // GATE_CHUNK_STEPS * GATE_CHUNK_STEPS)


@torch.inference_mode()
def embed_long_sentence(runtime: Runtime, tokens: Sequence[str], window: int, spill_dir: str | None = None,
                        progress: Callable[[int, int], None] | None = None) -> Iterator[np.ndarray]:
    """Yield one sentence's layers in token order, ``(w, L+1, 2*projection_dim)`` float32 pieces
    of at most ``window`` tokens. The sentence starts from the runtime's initial state for one row
    (warm or reset policy; stateful mode carries state between the rows of batches and does not
    come here). ``spill_dir``: where the temporary files go (default: the system's).
    ``progress(done, total)`` is called after each window with the timesteps run so far, of the
    ``total`` (the tokens and the two boundaries): a progress bar can move within one long line.
    The windows run through the runtime's pieces of its fast path (:meth:`~elmo.inference.runtime.
    Runtime.token_vectors`, :meth:`~elmo.inference.runtime.Runtime.lstm_layer`), so every step is
    computed as in a batch."""
    if runtime.state == "stateful":
        raise ValueError("a sentence longer than the batch budget cannot be embedded in stateful mode (its state "
                         "depends on the batch rows around it); use the warm or reset policy")
    window = window_for(window)
    config = runtime.config
    n_layers, proj = config.lstm.n_layers, config.lstm.projection_dim
    device = runtime.device
    seq = [BOS_TOKEN, *tokens, EOS_TOKEN]
    length = len(seq)
    state = runtime.initial_state(1)
    if state is None:
        state = runtime.zero_state(1)
    c = [state.c[:, i].to(device).clone() for i in range(n_layers)]  # each (2, 1, dim)
    h = [state.h[:, i].to(device).clone() for i in range(n_layers)]
    skip = config.lstm.use_skip_connections
    forward_row = (n_layers + 1) * proj  # token vector, then each layer's forward output
    backward_row = n_layers * proj
    with tempfile.TemporaryFile(dir=spill_dir) as forward_file, tempfile.TemporaryFile(dir=spill_dir) as backward_file:
        for start in range(0, length, window):
            stop = min(length, start + window)
            steps = stop - start
            forward_tokens = runtime.token_vectors(seq[start:stop])
            # The backward stack reads the sentence from its end: its steps start..stop are
            # positions length-1-start down to length-stop.
            backward_tokens = runtime.token_vectors(seq[length - stop:length - start][::-1])
            x = torch.stack([forward_tokens, backward_tokens]).unsqueeze(1)  # (2, 1, steps, proj)
            lengths = torch.tensor([steps], device=device)
            forward_out, backward_out = [forward_tokens], []
            for i in range(n_layers):
                out, c[i], h[i] = runtime.lstm_layer(i, x, lengths, c[i], h[i])
                if i > 0 and skip:
                    out = out + x
                forward_out.append(out[0, 0])
                backward_out.append(out[1, 0])
                x = out
            forward_file.write(torch.cat(forward_out, dim=-1).float().cpu().numpy().tobytes())
            backward_file.write(torch.cat(backward_out, dim=-1).float().cpu().numpy().tobytes())
            if progress is not None:
                progress(stop, length)
        # Token p (1..length-2 of seq) is step p of the forward stack and step length-1-p of the backward one.
        for first in range(1, length - 1, window):
            last = min(length - 1, first + window)
            n = last - first
            forward_file.seek(first * forward_row * 4)
            forward = np.fromfile(forward_file, dtype=np.float32, count=n * forward_row).reshape(n, n_layers + 1, proj)
            backward_file.seek((length - last) * backward_row * 4)
            backward = np.fromfile(backward_file, dtype=np.float32, count=n * backward_row).reshape(n, n_layers, proj)
            backward = backward[::-1]
            piece = np.empty((n, n_layers + 1, 2 * proj), dtype=np.float32)
            piece[:, 0, :proj] = forward[:, 0]
            piece[:, 0, proj:] = forward[:, 0]
            piece[:, 1:, :proj] = forward[:, 1:]
            piece[:, 1:, proj:] = backward
            yield piece
