"""The paper's network, the specification every fast path is tested against, top to bottom:

1. **Token encoder** (:class:`TokenEncoder`): each token's characters -> character embeddings ->
   convolutions of several widths, max-pooled over positions -> activation -> :class:`Highway`
   layers -> a linear projection to the LSTM's width: ``(batch, time, chars)`` ->
   ``(batch, time, projection_dim)``. A context-independent vector for any string.
2. **LSTM with projection** (:class:`LstmLayer`, :func:`lstm_step`, :func:`lstm_plain`): bilm-tf's
   cell with a forget bias of +1, a clipped cell state and a clipped projected output.
3. **biLM** (:class:`BiLM`): one shared token encoder feeding separate forward and backward stacks
   of those layers, with a residual connection between layers. Output for a batch: all ``L + 1``
   layers ``(batch, L+1, time, 2*projection_dim)``; layer 0 is the token vector duplicated
   ``[e; e]``, layer ``l`` is ``[forward_l; backward_l]``.
4. **Scalar mix** (:class:`ScalarMix`): the task-specific collapse of those layers into one vector
   per token, ``ELMo_k = gamma * sum_j softmax(s)_j * h_{k,j}`` (Peters et al. 2018, eq. 1).

Plain PyTorch, one timestep at a time: what each number is, not how to compute it quickly. The
fast paths (oneDNN's blocked products, the fused training window, CUDA graphs, the
inference encoder) are :mod:`elmo.kernels`, which imports this module and is tested against it;
:mod:`elmo.kernels.dispatch` chooses between them. Parameter names are bilm-tf's, one to one, so
its weight files (:mod:`elmo.model.weights`) and this library's checkpoints load unchanged.

One option serves the ELMoForManyLangs models (``char_cnn.characters == "dictionary"``): their
character ids come from the model's dictionary, and a word embedding (``word_dim``) is
concatenated before the projection. Their ids then hold the word id in column 0 and the
character ids after it (:mod:`elmo.model.dictionary`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from elmo.devices import available_memory
from elmo.model.chars import BOS_IDS, BYTES, EOS_IDS, PAD_CHAR, ByteCharacters
from elmo.model.config import BiLMConfig, CharCNNConfig, ConfigError
from elmo.model.dictionary import CharacterDictionary
from elmo.model.dropout import Dropout

# ---------------------------------------------------------------------------- 1. token encoder

PAD_ID = PAD_CHAR + 1  # the id of a padding slot inside a word (after the +1 shift), byte scheme


class Highway(nn.Module):
    """One highway layer in bilm-tf's form.

    ``g = sigmoid(x W_carry + b_carry); y = g * relu(x W_transform + b_transform) + (1 - g) * x``.
    Note that bilm-tf's "carry" gate multiplies the *transformed* input (the usual papers call that
    the transform gate); we keep its names so the weight file maps one to one.
    """

    def __init__(self, dim: int):
        super().__init__()
        self.carry = nn.Linear(dim, dim)
        self.transform = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(..., dim)`` -> ``(..., dim)``."""
        return highway(self.carry(x), self.transform(x), x)


def highway(carry: torch.Tensor, transform: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The highway layer after its two products: ``carry = x W_carry + b_carry`` and ``transform =
    x W_transform + b_transform`` (each ``(..., dim)``, however they were computed) and its input
    ``x`` -> ``g * relu(transform) + (1 - g) * x`` with ``g = sigmoid(carry)``."""
    gate = torch.sigmoid(carry)
    return gate * torch.relu(transform) + (1.0 - gate) * x


class TokenEncoder(nn.Module):
    """Character CNN token encoder: ``(batch, time, width)`` ids -> ``(batch, time, output_dim)``.

    For one token of ``n_slots`` character ids ``c_1 .. c_n``::

        E = [emb(c_1), ..., emb(c_n)]                        # (n_slots, embedding_dim)
        p_k = max_t (conv_k(E)_t)  for each width k          # VALID convolution, max-pooled
        x = activation([p_1; ...; p_K])                      # (n_filters,), tanh or relu
        x = highway_L(... highway_1(x))                      # Highway
        e = [word_vector;] x W_proj + b_proj                 # (output_dim,)

    ``output_dim`` is the LSTM projection dim. As in bilm-tf, the final projection exists only when
    its input width differs from it (every published model has one); ELMoForManyLangs' encoder
    always has one. ``pad_id`` is the id of a padding slot inside a word (:data:`PAD_ID` for the
    byte scheme; a dictionary model's own).
    """

    def __init__(self, config: CharCNNConfig, output_dim: int, pad_id: int = PAD_ID):
        super().__init__()
        self.config = config
        dictionary = config.characters == "dictionary"
        # Row 0 is the padding id (a token slot with no token); it stays zero.
        n_rows = config.n_characters + 1 if dictionary else 262
        self.char_embedding = nn.Embedding(n_rows, config.embedding_dim, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(config.embedding_dim, n, width) for width, n in config.filters)
        n_filters = config.n_filters
        self.highways = nn.ModuleList(Highway(n_filters) for _ in range(config.n_highway))
        self.word_embedding = nn.Embedding(config.n_words + 1, config.word_dim, padding_idx=0) if config.word_dim else None
        projection_in = n_filters + config.word_dim
        self.projection = nn.Linear(projection_in, output_dim) if projection_in != output_dim or dictionary else None
        self.activation = torch.tanh if config.activation == "tanh" else torch.relu
        self.output_dim = output_dim
        self.pad_id = pad_id
        self.n_slots = config.max_characters_per_token

    def split_ids(self, ids: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
        """``ids`` ``(..., width)`` -> word ids ``(...)`` (None without a word embedding) and
        character ids ``(..., n_slots)``."""
        if self.word_embedding is None:
            return None, ids
        return ids[..., 0], ids[..., 1:]

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        """``char_ids``: ``(batch, time, width)`` int64 -> token vectors ``(batch, time, output_dim)``."""
        batch, time, _ = char_ids.shape
        word_ids, char_ids = self.split_ids(char_ids)
        chars = self.char_embedding(char_ids.reshape(batch * time, self.n_slots))  # (B*T, slots, char_dim)
        chars = chars.transpose(1, 2)  # (B*T, char_dim, slots): Conv1d wants channels first
        # VALID convolution over all slots, max over positions, then the activation.
        pooled = [conv(chars).max(dim=2).values for conv in self.convs]  # each (B*T, n_filters_i)
        words = word_ids.reshape(batch * time) if word_ids is not None else None
        return self.head(torch.cat(pooled, dim=1), words).reshape(batch, time, self.output_dim)

    def head(self, pooled: torch.Tensor, word_ids: torch.Tensor | None = None) -> torch.Tensor:
        """What follows the max-pool: ``(n, n_filters)`` pooled features -> the activation, the
        highway layers and the projection -> ``(n, output_dim)``; ``word_ids`` ``(n,)`` for a model
        with a word embedding (ELMoForManyLangs: [word vector; CNN output] into the projection)."""
        x = self.activation(pooled)
        for highway in self.highways:
            x = highway(x)
        if word_ids is not None:
            x = torch.cat([self.word_embedding(word_ids), x], dim=1)
        if self.projection is not None:
            x = self.projection(x)
        return x


# ------------------------------------------------------------------ 2. LSTM with projection

FORGET_BIAS = 1.0

State = tuple[torch.Tensor, torch.Tensor]  # (c (batch, dim), h (batch, projection_dim))


class LstmLayer(nn.Module):
    """One LSTM-with-projection layer, in bilm-tf's exact arithmetic.

    For each timestep (TensorFlow's ``LSTMCell(num_proj=..., cell_clip=..., proj_clip=...)``,
    :func:`lstm_step`)::

        i, j, f, o = split(x_t W_x + h_{t-1} W_h + b, 4)         # TF's gate order
        c_t = sigmoid(f + 1) * c_{t-1} + sigmoid(i) * tanh(j)    # forget bias +1, not stored in b
        c_t = clip(c_t, cell_clip)
        h_t = clip((sigmoid(o) * tanh(c_t)) W_P, proj_clip)      # h_t is the projected output

    At padded timesteps the state is carried unchanged and the output is zero, so the final state
    of each row is the state after its last real token (TF's ``dynamic_rnn`` with
    ``sequence_length``; :func:`lstm_plain`).

    Parameters: ``input_weight`` ``W_x``: ``(4*dim, input_dim)``, ``state_weight`` ``W_h``:
    ``(4*dim, projection_dim)``, ``bias`` ``b``: ``(4*dim,)`` (without the forget bias),
    ``projection`` ``W_P``: ``(projection_dim, dim)``.
    """

    def __init__(self, input_dim: int, dim: int, projection_dim: int,
                 cell_clip: float | None, proj_clip: float | None):
        super().__init__()
        self.input_dim, self.dim, self.projection_dim = input_dim, dim, projection_dim
        self.cell_clip, self.proj_clip = cell_clip, proj_clip
        self.input_weight = nn.Parameter(torch.empty(4 * dim, input_dim))
        self.state_weight = nn.Parameter(torch.empty(4 * dim, projection_dim))
        self.bias = nn.Parameter(torch.zeros(4 * dim))
        self.projection = nn.Parameter(torch.empty(projection_dim, dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform over the joint ``[x; h]`` matrix, as TF initialises ``W_0``."""
        bound = math.sqrt(6.0 / (self.input_dim + self.projection_dim + 4 * self.dim))
        nn.init.uniform_(self.input_weight, -bound, bound)
        nn.init.uniform_(self.state_weight, -bound, bound)
        nn.init.zeros_(self.bias)
        bound = math.sqrt(6.0 / (self.dim + self.projection_dim))
        nn.init.uniform_(self.projection, -bound, bound)

    def zero_state(self, batch: int, like: torch.Tensor) -> State:
        """Zero ``(c, h)`` for ``batch`` rows, on ``like``'s device and dtype."""
        return (like.new_zeros(batch, self.dim), like.new_zeros(batch, self.projection_dim))

    def forward(self, inputs: torch.Tensor, mask: torch.Tensor, state: State | None = None,
                ) -> tuple[torch.Tensor, State]:
        """Run the layer as the specification does (:func:`lstm_plain`); the fast paths are
        :func:`elmo.kernels.fused_lstm.lstm_fused` (training) and
        :func:`elmo.kernels.cpu_lstm.bilstm_inference` (inference)."""
        return lstm_plain(self, inputs, mask, state)


def lstm_step(layer: LstmLayer, x_gates: torch.Tensor, state: State) -> State:
    """One timestep from precomputed input gates ``x_gates`` ``(batch, 4*dim)``; returns ``(c, h)``."""
    c_prev, h_prev = state
    gates = x_gates + h_prev @ layer.state_weight.t()
    i, j, f, o = gates.chunk(4, dim=1)
    c = torch.sigmoid(f + FORGET_BIAS) * c_prev + torch.sigmoid(i) * torch.tanh(j)
    if layer.cell_clip is not None:
        c = c.clamp(-layer.cell_clip, layer.cell_clip)
    h = (torch.sigmoid(o) * torch.tanh(c)) @ layer.projection.t()
    if layer.proj_clip is not None:
        h = h.clamp(-layer.proj_clip, layer.proj_clip)
    return c, h


def lstm_plain(layer: LstmLayer, inputs: torch.Tensor, mask: torch.Tensor,
               state: State | None = None) -> tuple[torch.Tensor, State]:
    """The per-timestep reference loop.

    ``inputs``: ``(batch, time, input_dim)``; ``mask``: ``(batch, time)`` bool, a prefix of True per
    row; ``state``: ``(c, h)`` or None for zeros. Returns ``outputs`` ``(batch, time, projection_dim)``
    (zero where masked) and the final ``(c, h)`` of every row.
    """
    batch, time, _ = inputs.shape
    c, h = state if state is not None else layer.zero_state(batch, inputs)
    outputs = []
    for t in range(time):
        x_gates = inputs[:, t] @ layer.input_weight.t() + layer.bias
        c_new, h_new = lstm_step(layer, x_gates, (c, h))
        keep = mask[:, t].unsqueeze(1)
        c = torch.where(keep, c_new, c)
        h = torch.where(keep, h_new, h)
        outputs.append(torch.where(keep, h_new, torch.zeros_like(h_new)))
    if outputs:
        out = torch.stack(outputs, dim=1)
    else:
        out = inputs.new_zeros(batch, 0, layer.projection_dim)
    return out, (c, h)



# -------------------------------------------------------------------------------- 3. the biLM

FORWARD, BACKWARD = 0, 1

# The ways the LSTM layers may run under autograd, as a model is told (BiLM(lstm_path=...),
# ``--lstm-path``): "plain", this module's specification; "fused", the fast path. What runs each,
# and why, is elmo.kernels.dispatch.
LSTM_PATHS = ("plain", "fused")
DEFAULT_LSTM_PATH = "fused"


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

    For a sentence wrapped in ``<S>`` ... ``</S>`` with token vectors ``e_t`` (:class:`TokenEncoder`)::

        f^0 = b^0 = e                                   # one encoder, both directions
        f^l = LSTM_l^fwd(f^{l-1}) [+ f^{l-1} if l > 1]  # read left to right
        b^l = LSTM_l^bwd(b^{l-1}) [+ b^{l-1} if l > 1]  # read right to left, its own layers
        layers = [[e; e], [f^1; b^1], ..., [f^L; b^L]]  # (batch, L+1, time, 2*projection_dim)

    (the bracketed residual where ``use_skip_connections``), zero at padding, the boundaries
    removed again unless asked to keep them.

    The residual joins each layer's output only (the state ``h`` a layer carries stays the
    cell's own); dropout, in training, drops each layer's input before its cell.

    ``forward`` takes character ids *without* sentence boundaries; it adds them, runs both
    directions and by default removes them again. ``characters`` turns tokens into those ids
    (``model.characters.batch(sentences)``): the bilm-tf byte scheme, or for a model whose
    ``char_cnn.characters`` is ``"dictionary"`` (ELMoForManyLangs') its
    :class:`~elmo.model.dictionary.CharacterDictionary`, which must then be given.

    ``fast``, ``lstm_path`` and ``compile_cells`` say which fast paths the code that runs the
    model (:mod:`elmo.kernels.dispatch`, :class:`elmo.inference.runtime.Runtime`, the trainer)
    may take; they change the speed, not the model, and this class's own methods always compute
    the specification.
    """

    def __init__(self, config: BiLMConfig, fast: bool = True, lstm_path: str | None = None,
                 compile_cells: bool = False, characters: Characters | None = None):
        super().__init__()
        config.validate()
        _check_memory(config)
        self.config = config
        self.characters = _check_characters(config, characters)
        # lstm_path: one of LSTM_PATHS; None: DEFAULT_LSTM_PATH, or
        # "plain" when not fast. fast=False (or "plain") also makes inference run the specification
        # (elmo.inference.runtime honours it).
        if lstm_path is None:
            lstm_path = DEFAULT_LSTM_PATH if fast else "plain"
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
        """How the LSTM runs with autograd: ``"plain"`` or ``"fused"`` (see :data:`LSTM_PATHS`)."""
        return self._lstm_path

    @lstm_path.setter
    def lstm_path(self, path: str) -> None:
        if path not in LSTM_PATHS:
            raise ValueError(f"lstm_path: expected one of {', '.join(LSTM_PATHS)}, got {path!r}")
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
            self._lstm_path = DEFAULT_LSTM_PATH

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
                  state: BiLMState, dropout: float = 0.0,
                  ) -> tuple[list[torch.Tensor], list[State]]:
        """Run one direction's layers over ``inputs`` ``(batch, time, projection_dim)`` already in
        that direction's reading order. Returns each layer's output ``(batch, time, projection_dim)``
        (with the residual added when enabled) and each layer's final ``(c, h)``.

        ``dropout`` (training only) drops each layer's input, as bilm-tf's DropoutWrapper inside
        its ResidualWrapper does: the residual adds the undropped input. The model's fast paths
        for the same: :func:`elmo.kernels.dispatch.run_stack`."""
        layers = self.forward_layers if direction == FORWARD else self.backward_layers
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

    def boundary_tokens(self, char_ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The sentence boundaries added (:func:`add_boundaries`) and every token encoded: token
        vectors ``(batch, time+2, projection_dim)``, zero at padding, and their mask ``(batch, time+2)``."""
        ids, full_mask = add_boundaries(char_ids, mask, self.characters.bos_ids, self.characters.eos_ids)
        tokens = self.token_encoder(ids)  # (batch, time+2, projection_dim)
        return tokens * full_mask.unsqueeze(-1).to(tokens.dtype), full_mask

    def output(self, tokens: torch.Tensor, forward_out: list[torch.Tensor], backward_out: list[torch.Tensor],
               full_mask: torch.Tensor, state: BiLMState, keep_boundaries: bool = False) -> BiLMOutput:
        """The biLM's layers from the token vectors and each layer's outputs in reading order
        (``(batch, time+2, projection_dim)`` each, the backward ones already reversed back):
        ``[e; e]``, then ``[forward_l; backward_l]`` zero at padding, stacked as ``(batch, L+1,
        time+2, 2*projection_dim)``; the boundaries removed unless ``keep_boundaries``."""
        keep = full_mask.unsqueeze(-1).to(tokens.dtype)
        layers = [torch.cat([tokens, tokens], dim=-1)]
        layers += [torch.cat([f, b], dim=-1) * keep for f, b in zip(forward_out, backward_out)]
        stacked = torch.stack(layers, dim=1)  # (batch, L+1, time+2, 2*projection_dim)
        if keep_boundaries:
            return BiLMOutput(stacked, full_mask, state)
        stacked, out_mask = remove_boundaries(stacked, full_mask)
        return BiLMOutput(stacked, out_mask, state)

    def forward(self, char_ids: torch.Tensor, mask: torch.Tensor, state: BiLMState | None = None,
                keep_boundaries: bool = False) -> BiLMOutput:
        """``char_ids``: ``(batch, time, 50)``; ``mask``: ``(batch, time)``; ``state``: initial LSTM
        state (None for zeros). Returns :class:`BiLMOutput` with ``time`` positions, or ``time + 2``
        when ``keep_boundaries``.

        The specification, with or without gradients. The same under the model's fast LSTM path
        with autograd: :func:`elmo.kernels.dispatch.bilm_forward`; fast inference:
        :class:`elmo.inference.runtime.Runtime`. Both compute the same numbers (to float rounding).
        """
        batch = char_ids.shape[0]
        if state is None:
            state = self.zero_state(batch)
        tokens, full_mask = self.boundary_tokens(char_ids, mask)
        backward_in = reverse_within_length(tokens, full_mask)
        forward_out, forward_final = self.run_stack(FORWARD, tokens, full_mask, state)
        backward_out, backward_final = self.run_stack(BACKWARD, backward_in, full_mask, state)
        backward_out = [reverse_within_length(out, full_mask) for out in backward_out]
        finals = forward_final + backward_final  # forward layers first, then backward
        c = torch.stack([c for c, _ in finals]).view(2, self.n_layers, batch, -1)
        h = torch.stack([h for _, h in finals]).view(2, self.n_layers, batch, -1)
        return self.output(tokens, forward_out, backward_out, full_mask, BiLMState(c, h), keep_boundaries)


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


# -------------------------------------------------------------------------- 4. the scalar mix
#
# ``ELMo_k = gamma * sum_j softmax(s)_j * h_{k,j}`` (Peters et al. 2018, eq. 1), with optional
# layer normalisation of each ``h_j`` before mixing, dropout on the result and an L2 penalty on ``s``.

LAYER_NORM_EPS = 1e-12  # bilm-tf's weight_layers uses the same


def masked_layer_norm(layer: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Normalise one biLM layer as the original does: a single mean and variance over *all*
    unmasked elements of the batch (not per token). ``layer``: ``(batch, time, dim)``,
    ``mask``: ``(batch, time)``."""
    keep = mask.unsqueeze(-1).to(layer.dtype)
    count = keep.sum() * layer.shape[-1]
    mean = (layer * keep).sum() / count
    variance = (((layer - mean) * keep) ** 2).sum() / count
    return (layer - mean) / torch.sqrt(variance + LAYER_NORM_EPS)


class ScalarMix(nn.Module):
    """Mix ``n_layers`` biLM layers into one.

    ``mode``: ``"mix"`` (learned softmax weights), ``"average"`` (fixed equal weights), ``"top"``
    (last layer only) or an ``int`` (that single layer). ``gamma`` is learned in every mode.
    ``l2_coef`` is the paper's lambda: :meth:`l2_penalty` returns ``l2_coef * sum(s**2)`` for the
    task to add to its loss (zero for the fixed modes).
    """

    def __init__(self, n_layers: int, mode: str | int = "mix", do_layer_norm: bool = False,
                 dropout: float = 0.0, l2_coef: float = 0.0):
        super().__init__()
        if isinstance(mode, int) and not isinstance(mode, bool):
            if not -n_layers <= mode < n_layers:
                raise ValueError(f"mode: layer {mode} does not exist; the biLM has {n_layers} layers")
        elif mode not in ("mix", "average", "top"):
            raise ValueError(f"mode: expected 'mix', 'average', 'top' or a layer index, got {mode!r}")
        self.n_layers, self.mode, self.do_layer_norm, self.l2_coef = n_layers, mode, do_layer_norm, l2_coef
        # s starts at 0 (equal weights) and gamma at 1; s only trains in "mix" mode.
        self.scalars = nn.Parameter(torch.zeros(n_layers), requires_grad=(mode == "mix"))
        self.gamma = nn.Parameter(torch.ones(1))
        self.dropout = Dropout(dropout)

    def layer_weights(self) -> torch.Tensor:
        """The softmax-normalised layer weights ``(n_layers,)`` this mix applies."""
        if self.mode in ("mix", "average"):
            return torch.softmax(self.scalars, dim=0)
        index = self.n_layers - 1 if self.mode == "top" else self.mode % self.n_layers
        return torch.nn.functional.one_hot(torch.tensor(index), self.n_layers).to(self.gamma.dtype)

    def forward(self, layers: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``layers``: ``(batch, n_layers, time, dim)``; ``mask``: ``(batch, time)`` ->
        ``(batch, time, dim)``."""
        if layers.shape[1] != self.n_layers:
            raise ValueError(f"ScalarMix built for {self.n_layers} layers got {layers.shape[1]}")
        if self.mode in ("top",) or isinstance(self.mode, int):
            index = self.n_layers - 1 if self.mode == "top" else self.mode
            chosen = [layers[:, index]]
            weights = torch.ones(1, dtype=layers.dtype, device=layers.device)
        else:
            chosen = list(layers.unbind(dim=1))
            weights = torch.softmax(self.scalars, dim=0).to(layers.dtype)
        if self.do_layer_norm:
            chosen = [masked_layer_norm(h, mask) for h in chosen]
        mixed = sum(w * h for w, h in zip(weights, chosen))
        return self.dropout(self.gamma.to(layers.dtype) * mixed)

    def l2_penalty(self) -> torch.Tensor:
        """``l2_coef * sum(s**2)``: add it to the task loss (the paper's lambda * ||w||^2)."""
        if self.mode != "mix":
            return self.scalars.new_zeros(())
        return self.l2_coef * (self.scalars ** 2).sum()
