"""The bidirectional language model: a shared token encoder feeding separate forward and backward
stacks of LSTM-with-projection layers, with a residual connection between layers.

Output for a batch: all ``L + 1`` layer activations ``(batch, L+1, time, 2*projection_dim)``.
Layer 0 is the token vector duplicated ``[e; e]``; layer ``l`` is ``[forward_l; backward_l]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from elmo.devices import available_memory
from elmo.model.chars import BOS_IDS, BYTES, EOS_IDS, ByteCharacters
from elmo.model.config import BiLMConfig, ConfigError
from elmo.model.cudnn_lstm import lstm_cudnn
from elmo.model.dictionary import CharacterDictionary
from elmo.model.encoder import TokenEncoder
from elmo.model.fused_lstm import lstm_fused
from elmo.model.lstm import LstmLayer, State

FORWARD, BACKWARD = 0, 1

# How the LSTM layers run when the model computes with autograd (training, and BiLM.forward):
# "plain": the per-timestep specification (lstm_plain); "fused": the fast path, every direction of
# a layer at once as one autograd Function over the window (elmo.model.fused_lstm), which CUDA
# graphs and torch.compile wrap; "cudnn": torch's LSTM kernel for full windows
# (elmo.model.cudnn_lstm), only for models whose options say "backend": "cudnn" (no clipping),
# and their default; their padded windows take the fused path. It stays while the GPU suite's
# cuDNN rows (train_* sections, planned, not yet measured on a GPU) have not shown whether it
# wins there. Inference without gradients goes through elmo.inference.runtime, which runs the
# specification for "plain" and its own kernel otherwise. The fused path trained the packaged size
# 1.9x faster than the per-direction "fast" path it replaced on the 2-core development CPU, and
# was faster in every row of the H200 runs (docs/training.md, "Training speed"; docs/gpu.md).
LSTM_PATHS = ("plain", "fused", "cudnn")
DEFAULT_LSTM_PATH = "fused"


def dropout_masks(p: float, count: int, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """``count`` dropout multipliers of ``shape`` (0, or ``1 / (1 - p)`` with probability ``1 - p``),
    stacked: ``(count, *shape)``, in ``like``'s dtype and device.

    Each is drawn as ``torch.nn.functional.dropout`` draws its mask on the CPU (``bernoulli_`` on a
    fresh tensor of ``shape``, then scaled), one after the other: a model that draws its masks here,
    in the order the per-direction path applies them, consumes the CPU generator exactly as that
    path does and trains on the same masks. On other devices one draw makes them all."""
    masks = like.new_empty((count, *shape))
    if like.device.type == "cpu":
        for mask in masks:
            mask.bernoulli_(1.0 - p)
    else:
        masks.bernoulli_(1.0 - p)
    return masks.div_(1.0 - p)


@dataclass
class BiLMState:
    """LSTM state of both stacks: ``c`` ``(2, L, batch, dim)``, ``h`` ``(2, L, batch, projection_dim)``.

    Index 0 of the first axis is the forward stack, 1 the backward stack.
    """

    c: torch.Tensor
    h: torch.Tensor

    @property
    def batch_size(self) -> int:
        return self.c.shape[2]

    def expand(self, n: int) -> "BiLMState":
        """A one-row state repeated for ``n`` rows."""
        return BiLMState(self.c.expand(-1, -1, n, -1).contiguous(), self.h.expand(-1, -1, n, -1).contiguous())

    def layer(self, direction: int, layer: int) -> State:
        return self.c[direction, layer], self.h[direction, layer]


@dataclass
class BiLMOutput:
    """``layers``: ``(batch, L+1, time, 2*projection_dim)``, zero at padding; ``mask``: ``(batch, time)``;
    ``state``: the final LSTM state of every row (what a stateful caller carries on)."""

    layers: torch.Tensor
    mask: torch.Tensor
    state: BiLMState


def add_boundaries(char_ids: torch.Tensor, mask: torch.Tensor, bos_ids=BOS_IDS, eos_ids=EOS_IDS
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Wrap each sentence in ``<S>`` ... ``</S>``: ``(batch, time, width)`` -> ``(batch, time+2, width)``.

    The end marker goes right after each row's last real token, so rows of different lengths
    (including empty ones) all get both markers. ``bos_ids``/``eos_ids`` ``(width,)``: the
    markers' ids in the model's scheme (the byte scheme's by default).
    """
    batch, time, n_chars = char_ids.shape
    lengths = mask.sum(dim=1)
    out = char_ids.new_zeros(batch, time + 2, n_chars)
    out[:, 1:-1] = char_ids
    out[:, 0] = torch.as_tensor(bos_ids, device=char_ids.device)
    out[torch.arange(batch, device=char_ids.device), lengths + 1] = torch.as_tensor(eos_ids, device=char_ids.device)
    new_mask = torch.arange(time + 2, device=mask.device).unsqueeze(0) < (lengths + 2).unsqueeze(1)
    return out, new_mask


def remove_boundaries(layers: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Undo :func:`add_boundaries` on outputs: ``(batch, L+1, time+2, dim)`` -> ``(batch, L+1, time, dim)``."""
    lengths = mask.sum(dim=1) - 2
    time = layers.shape[2] - 2
    new_mask = torch.arange(time, device=mask.device).unsqueeze(0) < lengths.unsqueeze(1)
    out = layers[:, :, 1:-1] * new_mask[:, None, :, None].to(layers.dtype)
    return out, new_mask


def reverse_within_length(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Reverse each row's real timesteps in place, leaving padding where it is.

    ``x``: ``(batch, time, ...)``; ``mask``: ``(batch, time)``. Applying it twice is the identity.
    """
    batch, time = mask.shape
    lengths = mask.sum(dim=1, keepdim=True)
    steps = torch.arange(time, device=x.device).unsqueeze(0)
    index = torch.where(steps < lengths, lengths - 1 - steps, steps)  # (batch, time)
    index = index.view(batch, time, *([1] * (x.dim() - 2))).expand_as(x)
    return x.gather(1, index)


def run_fused_stacks(stacks: list, inputs: torch.Tensor, c0: torch.Tensor, h0: torch.Tensor,
                     drop: torch.Tensor | None, lengths: torch.Tensor | None, skip_connections: bool,
                     compiled: bool = False, cudnn: bool = False) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """:meth:`BiLM.fused_stacks` on explicit ``lengths`` ``(n, batch)`` (None: every row full).
    ``cudnn``: full windows through torch's LSTM kernel (layers without clipping)."""
    x = inputs.transpose(1, 2)  # (n, time, batch, proj): time-major, as the fused window wants it
    outputs, finals_c, finals_h = [], [], []
    for index in range(len(stacks[0])):
        x_in = x if drop is None else x * drop[:, index].transpose(1, 2)
        layers = [stack[index] for stack in stacks]
        if cudnn and lengths is None:
            out, (c, h) = lstm_cudnn(layers, x_in, (c0[:, index], h0[:, index]))
        else:
            out, (c, h) = lstm_fused(layers, x_in, (c0[:, index], h0[:, index]), lengths, compiled=compiled)
        if index > 0 and skip_connections:
            out = out + x  # the residual joins the output only; the carried state h stays the cell's own
        outputs.append(out)
        finals_c.append(c)
        finals_h.append(h)
        x = out
    return [out.transpose(1, 2) for out in outputs], torch.stack(finals_c, dim=1), torch.stack(finals_h, dim=1)


Characters = ByteCharacters | CharacterDictionary


def _binary_size(n: float) -> str:
    """Bytes as a reader takes them in: ``9 GiB``, ``512 MiB``, ``1 KiB``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} bytes"


def _too_large(config: BiLMConfig, why: str) -> str:
    n = config.parameter_count()
    return (f"these options describe a biLM of {n:,} parameters, {_binary_size(4 * n)} in float32, which does "
            f"not fit in this machine's memory ({why}); use a smaller model or a machine with more memory")


def _check_memory(config: BiLMConfig) -> None:
    """Refuse, before allocating, a biLM whose parameters alone need more main memory than this
    process may still take (:func:`elmo.devices.available_memory`), rather than failing inside
    the allocation after gigabytes of it, or being killed."""
    room = available_memory()
    if room is not None and 4 * config.parameter_count() > room:
        raise ConfigError(_too_large(config, f"{_binary_size(room)} is available"))


class BiLM(nn.Module):
    """Token encoder + forward and backward LSTM stacks.

    ``forward`` takes character ids *without* sentence boundaries; it adds them, runs both
    directions and by default removes them again. ``characters`` turns tokens into those ids
    (``model.characters.batch(sentences)``): the bilm-tf byte scheme, or for a model whose
    ``char_cnn.characters`` is ``"dictionary"`` (ELMoForManyLangs') its
    :class:`~elmo.model.dictionary.CharacterDictionary`, which must then be given.
    """

    def __init__(self, config: BiLMConfig, fast: bool = True, lstm_path: str | None = None,
                 compile_cells: bool = False, characters: Characters | None = None):
        super().__init__()
        config.validate()
        _check_memory(config)
        self.config = config
        self.characters = _check_characters(config, characters)
        # lstm_path: one of LSTM_PATHS; None: DEFAULT_LSTM_PATH ("cudnn" for a cuDNN model), or
        # "plain" when not fast. fast=False (or "plain") also makes inference run the specification
        # (elmo.inference.runtime honours it).
        if lstm_path is None:
            lstm_path = ("cudnn" if config.lstm.backend == "cudnn" else DEFAULT_LSTM_PATH) if fast else "plain"
        elif not fast and lstm_path != "plain":
            raise ValueError(f"BiLM: fast=False is the plain path; lstm_path={lstm_path!r} contradicts it")
        self.lstm_path = lstm_path
        # The fused path's pointwise functions through torch.compile (one kernel each on a GPU).
        self.compile_cells = compile_cells
        lstm = config.lstm

        def stack() -> nn.ModuleList:
            return nn.ModuleList(
                LstmLayer(lstm.projection_dim, lstm.dim, lstm.projection_dim, lstm.cell_clip, lstm.proj_clip)
                for _ in range(lstm.n_layers))

        try:
            self.token_encoder = TokenEncoder(config.char_cnn, lstm.projection_dim, pad_id=self.characters.pad_id)
            self.forward_layers = stack()
            self.backward_layers = stack()
        except (RuntimeError, MemoryError) as error:  # what an allocation past the system's room raises
            if isinstance(error, RuntimeError) and "alloc" not in str(error) and "memory" not in str(error):
                raise
            raise ConfigError(_too_large(config, "the allocation failed")) from None

    @property
    def lstm_path(self) -> str:
        """How the LSTM runs with autograd: ``"plain"``, ``"fused"`` or ``"cudnn"`` (see :data:`LSTM_PATHS`)."""
        return self._lstm_path

    @lstm_path.setter
    def lstm_path(self, path: str) -> None:
        if path not in LSTM_PATHS:
            raise ValueError(f"lstm_path: expected one of {', '.join(LSTM_PATHS)}, got {path!r}")
        if path == "cudnn" and self.config.lstm.backend != "cudnn":
            raise ValueError("lstm_path 'cudnn': torch's LSTM kernel cannot clip, so it runs only models whose "
                             "options say \"backend\": \"cudnn\" (cell_clip and proj_clip null); this one has "
                             f"cell_clip {self.config.lstm.cell_clip}, proj_clip {self.config.lstm.proj_clip}")
        self._lstm_path = path

    @property
    def fast(self) -> bool:
        """False: the specification everywhere (training and inference); True: a fast path. Setting
        it True on a plain model selects :data:`DEFAULT_LSTM_PATH`."""
        return self._lstm_path != "plain"

    @fast.setter
    def fast(self, value: bool) -> None:
        if not value:
            self._lstm_path = "plain"
        elif self._lstm_path == "plain":
            self._lstm_path = "cudnn" if self.config.lstm.backend == "cudnn" else DEFAULT_LSTM_PATH

    @property
    def n_layers(self) -> int:
        return self.config.lstm.n_layers

    @property
    def output_dim(self) -> int:
        return self.config.output_dim

    def zero_state(self, batch: int) -> BiLMState:
        """All-zero LSTM state for ``batch`` rows."""
        p = next(self.parameters())
        lstm = self.config.lstm
        return BiLMState(p.new_zeros(2, lstm.n_layers, batch, lstm.dim),
                         p.new_zeros(2, lstm.n_layers, batch, lstm.projection_dim))

    def run_stack(self, direction: int, inputs: torch.Tensor, mask: torch.Tensor,
                  state: BiLMState, dropout: float = 0.0, full: bool | None = None,
                  ) -> tuple[list[torch.Tensor], list[State]]:
        """Run one direction's layers over ``inputs`` ``(batch, time, projection_dim)`` already in
        that direction's reading order. Returns each layer's output ``(batch, time, projection_dim)``
        (with the residual added when enabled) and each layer's final ``(c, h)``.

        ``dropout`` (training only) drops each layer's input, as bilm-tf's DropoutWrapper inside
        its ResidualWrapper does: the residual adds the undropped input. ``full``: whether ``mask``
        is all True, when the caller knows it (None: asked of ``mask``)."""
        layers = self.forward_layers if direction == FORWARD else self.backward_layers
        if self.lstm_path in ("fused", "cudnn"):
            drop = None
            if dropout > 0 and self.training:
                drop = dropout_masks(dropout, len(layers), inputs.shape, inputs).unsqueeze(1)
            c0, h0 = state.c[direction:direction + 1], state.h[direction:direction + 1]
            outputs, c, h = self.fused_stacks(inputs.unsqueeze(0), mask.unsqueeze(0), c0, h0, [layers], drop, full)
            return [out[0] for out in outputs], [(c[0, i], h[0, i]) for i in range(len(layers))]
        outputs, finals = [], []
        x = inputs
        for index, layer in enumerate(layers):
            x_in = nn.functional.dropout(x, dropout, self.training) if dropout > 0 else x
            out, final = layer(x_in, mask, state.layer(direction, index))
            if index > 0 and self.config.lstm.use_skip_connections:
                # The residual joins the layer's output only; the carried state h stays the cell's own.
                out = out + x
            outputs.append(out)
            finals.append(final)
            x = out
        return outputs, finals

    def fused_stacks(self, inputs: torch.Tensor, mask: torch.Tensor, c0: torch.Tensor, h0: torch.Tensor,
                     stacks: list, drop: torch.Tensor | None = None, full: bool | None = None,
                     ) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """Run ``n`` stacks of layers (``stacks``: ``n`` lists of this model's LSTM layers, e.g.
        ``[forward_layers, backward_layers]``) side by side with :func:`lstm_fused`, layer by layer.

        ``inputs``: ``(n, batch, time, projection_dim)``, each in its stack's reading order;
        ``mask``: ``(n, batch, time)``; ``c0`` ``(n, L, batch, dim)`` and ``h0`` ``(n, L, batch,
        projection_dim)``: initial states; ``drop``: ``(n, L, batch, time, projection_dim)`` dropout
        multipliers of each layer's input, or None. Returns each layer's output ``(n, batch, time,
        projection_dim)`` (residual added, zero at padding) and the final ``c`` ``(n, L, batch, dim)``
        and ``h`` ``(n, L, batch, projection_dim)``."""
        if full is None:
            full = bool(mask.all())
        lengths = None if full else mask.sum(dim=2)
        return run_fused_stacks(stacks, inputs, c0, h0, drop, lengths, self.config.lstm.use_skip_connections,
                                self.compile_cells, cudnn=self.lstm_path == "cudnn")

    def forward(self, char_ids: torch.Tensor, mask: torch.Tensor, state: BiLMState | None = None,
                keep_boundaries: bool = False) -> BiLMOutput:
        """``char_ids``: ``(batch, time, 50)``; ``mask``: ``(batch, time)``; ``state``: initial LSTM
        state (None for zeros). Returns :class:`BiLMOutput` with ``time`` positions, or ``time + 2``
        when ``keep_boundaries``.

        This is the specification and the training path, with or without gradients; fast
        inference is :class:`elmo.inference.runtime.Runtime`, which computes the same numbers.
        """
        batch = char_ids.shape[0]
        ids, full_mask = add_boundaries(char_ids, mask, self.characters.bos_ids, self.characters.eos_ids)
        if state is None:
            state = self.zero_state(batch)
        tokens = self.token_encoder(ids)  # (batch, time+2, projection_dim)
        keep = full_mask.unsqueeze(-1).to(tokens.dtype)
        tokens = tokens * keep

        backward_in = reverse_within_length(tokens, full_mask)
        if self.lstm_path in ("fused", "cudnn"):
            both_masks = full_mask.unsqueeze(0).expand(2, -1, -1)
            outputs, c, h = self.fused_stacks(torch.stack([tokens, backward_in]), both_masks, state.c, state.h,
                                              [self.forward_layers, self.backward_layers])
            forward_out = [out[0] for out in outputs]
            backward_out = [reverse_within_length(out[1], full_mask) for out in outputs]
        else:
            forward_out, forward_final = self.run_stack(FORWARD, tokens, full_mask, state)
            backward_out, backward_final = self.run_stack(BACKWARD, backward_in, full_mask, state)
            backward_out = [reverse_within_length(out, full_mask) for out in backward_out]
            finals = forward_final + backward_final  # forward layers first, then backward
            c = torch.stack([c for c, _ in finals]).view(2, self.n_layers, batch, -1)
            h = torch.stack([h for _, h in finals]).view(2, self.n_layers, batch, -1)

        layers = [torch.cat([tokens, tokens], dim=-1)]
        layers += [torch.cat([f, b], dim=-1) * keep for f, b in zip(forward_out, backward_out)]
        stacked = torch.stack(layers, dim=1)  # (batch, L+1, time+2, 2*projection_dim)
        new_state = BiLMState(c, h)
        if keep_boundaries:
            return BiLMOutput(stacked, full_mask, new_state)
        stacked, out_mask = remove_boundaries(stacked, full_mask)
        return BiLMOutput(stacked, out_mask, new_state)


def _check_characters(config: BiLMConfig, characters: Characters | None) -> Characters:
    """The model's character scheme, checked against its config."""
    cnn = config.char_cnn
    if cnn.characters == "bytes":
        if characters is not None and not isinstance(characters, ByteCharacters):
            raise ConfigError("char_cnn.characters: this is a byte-scheme model; a character dictionary has no use here")
        return BYTES
    if not isinstance(characters, CharacterDictionary):
        raise ConfigError("char_cnn.characters: a 'dictionary' model needs its character dictionary "
                          "(BiLM(config, characters=CharacterDictionary(...)))")
    if characters.max_chars != cnn.max_characters_per_token:
        raise ConfigError(f"char_cnn.max_characters_per_token: {cnn.max_characters_per_token}, but the character "
                          f"dictionary is for {characters.max_chars}")
    if characters.n_char_ids > cnn.n_characters:
        raise ConfigError(f"char_cnn.n_characters: {cnn.n_characters}, but {characters.where_chars} uses ids up "
                          f"to {characters.n_char_ids - 1}")
    if (characters.words is not None) != bool(cnn.word_dim):
        raise ConfigError("char_cnn.word_embedding: a word dictionary goes with a word embedding, and only with one")
    if characters.n_word_ids > cnn.n_words:
        raise ConfigError(f"char_cnn.word_embedding.n_words: {cnn.n_words}, but {characters.where_words} uses ids "
                          f"up to {characters.n_word_ids - 1}")
    return characters
