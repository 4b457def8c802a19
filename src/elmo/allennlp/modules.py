"""AllenNLP's ``allennlp.modules.elmo``, on this library: ``Elmo``, ``batch_to_ids`` and the
lower-level ``_ElmoCharacterEncoder`` and ``_ElmoBiLm`` that code in the wild uses directly.

The classes keep AllenNLP's (2.10) constructor arguments, forward inputs, output dictionaries,
attribute paths (``elmo._elmo_lstm._elmo_lstm.reset_states()``, ``elmo.scalar_mix_0.scalar_parameters``),
``state_dict`` keys and shapes (:mod:`elmo.allennlp.names`), and its numbers, stateful as it was. They are thin layers: the network is :class:`elmo.model.network.BiLM`, run for inference by
:class:`elmo.inference.runtime.Runtime` (whose state policy carries AllenNLP's per-row state), and
for fine-tuning (``requires_grad`` with gradients enabled) by the biLM's own forward pass.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
from torch import nn

from elmo.checks import check_count
from elmo.allennlp import names
from elmo.allennlp.scalar_mix import ScalarMix
from elmo.hub import load_model
from elmo.inference.runtime import Runtime
from elmo.model.chars import MAX_CHARS, batch_to_char_ids
from elmo.model.dropout import Dropout
from elmo.model.network import BiLM, BiLMOutput, BiLMState, add_boundaries, remove_boundaries

ALLENNLP_STATE = "stateful"  # AllenNLP's biLM carried LSTM state from batch to batch, row by row
NO_CACHE_WARNING = "Word inputs were passed to ELMo but it does not have a cached vocab."  # AllenNLP's words

logger = logging.getLogger(__name__)


def batch_to_ids(batch: list[list[str]]) -> torch.Tensor:
    """Character ids ``(batch, max_len, 50)`` of tokenized sentences, 0 at padding: the input of
    :class:`Elmo`, exactly as AllenNLP's ``batch_to_ids`` made it."""
    if isinstance(batch, str) or any(isinstance(s, str) for s in batch):
        raise TypeError("batch_to_ids: expected a list of token lists, e.g. [['Hello', 'world']]")
    return batch_to_char_ids(batch)[0]


def load_bilm(options_file: str | os.PathLike, weight_file: str | os.PathLike | None = None) -> BiLM:
    """The biLM of an ``options_file`` + ``weight_file`` pair as AllenNLP took them: local paths
    or URLs (fetched once into the download cache: the published models' held to their pins, any
    other trusted on first use), through :func:`elmo.hub.load_model`. A whole model (an NLPL
    ``.zip``, an ELMoForManyLangs folder, an ``hf://`` id, the URL of a ``.zip``) may stand alone
    as ``options_file``, with ``weight_file`` left out (or the same path)."""
    from elmo.hub.archives import looks_like_model

    options = os.fspath(options_file)
    is_url = "://" in options  # a URL or an hf:// id: the resolver says what it names
    if (is_url and weight_file is None) or (not is_url and looks_like_model(options)):
        if weight_file is not None and os.fspath(weight_file) != options:
            raise ValueError(f"weight_file: {options} is a whole model (archive or folder); leave weight_file out")
        return load_model(options)
    if weight_file is None:
        raise ValueError(f"weight_file: needed with {options} (or pass a model archive or folder alone)")
    return load_model((options_file, weight_file))


def _byte_scheme_only(bilm: BiLM, where: str | os.PathLike) -> BiLM:
    """``bilm``, if it reads the byte ids that :func:`batch_to_ids` makes (every bilm-tf model)."""
    if bilm.config.char_cnn.characters != "bytes":
        raise ValueError(f"{where}: this model reads its own character dictionary (ELMoForManyLangs), not the byte "
                         f"ids of batch_to_ids that AllenNLP's modules take; use ElmoEmbedder or elmo.Embedder")
    return bilm


def _check_char_ids(inputs: Any, where: str = "inputs", width: int = MAX_CHARS) -> torch.Tensor:
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 3 or inputs.shape[-1] != width:
        shape = tuple(inputs.shape) if isinstance(inputs, torch.Tensor) else type(inputs).__name__
        raise ValueError(f"{where}: expected character ids (batch, timesteps, {width}) from batch_to_ids, "
                         f"got {shape}")
    return inputs


class _ElmoCharacterEncoder(nn.Module):
    """AllenNLP's ``_ElmoCharacterEncoder``: the biLM's character CNN alone, giving each token its
    context-independent vector.

    ``forward(inputs)`` takes character ids ``(batch, timesteps, 50)`` and returns
    ``{"token_embedding": (batch, timesteps + 2, dim), "mask": (batch, timesteps + 2)}``: the
    sentence boundaries ``<S>`` and ``</S>`` are added, as AllenNLP did. Padding positions hold
    the CNN's vector of an empty slot (as in AllenNLP), masked out by ``mask``.
    """

    def __init__(self, options_file: str | os.PathLike, weight_file: str | os.PathLike,
                 requires_grad: bool = False):
        super().__init__()
        self._setup(_byte_scheme_only(load_bilm(options_file, weight_file), options_file), requires_grad)

    @classmethod
    def _of(cls, bilm: BiLM, requires_grad: bool) -> "_ElmoCharacterEncoder":
        """The encoder of a biLM already loaded (``_ElmoBiLm`` shares its weights)."""
        encoder = cls.__new__(cls)
        nn.Module.__init__(encoder)
        encoder._setup(bilm, requires_grad)
        return encoder

    def _setup(self, bilm: BiLM, requires_grad: bool) -> None:
        self._token_encoder = bilm.token_encoder
        self.output_dim = bilm.config.lstm.projection_dim
        self.requires_grad = requires_grad
        for p in self._token_encoder.parameters():
            p.requires_grad_(requires_grad)
        # state_dict in AllenNLP's names and layout, both ways (elmo.allennlp.names).
        self.register_state_dict_post_hook(_encoder_state_dict_hook)
        self.register_load_state_dict_pre_hook(_encoder_load_hook)
        self.register_load_state_dict_post_hook(_encoder_loaded_hook)

    @property
    def _char_embedding_weights(self) -> nn.Parameter:
        """AllenNLP's name for the character embedding ``(262, char_dim)`` (row 0: padding)."""
        return self._token_encoder.char_embedding.weight

    @property
    def _convolutions(self) -> list[nn.Conv1d]:
        """AllenNLP's list of the character convolutions (its ``char_conv_{i}``)."""
        return list(self._token_encoder.convs)

    @property
    def _projection(self) -> nn.Linear | None:
        return self._token_encoder.projection

    def get_output_dim(self) -> int:
        return self.output_dim

    def forward(self, inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        inputs = _check_char_ids(inputs)
        mask = (inputs > 0).any(dim=-1)
        ids, mask_with_boundaries = add_boundaries(inputs, mask)
        return {"token_embedding": self._token_encoder(ids), "mask": mask_with_boundaries}


def _encoder_state_dict_hook(module: "_ElmoCharacterEncoder", state: dict, prefix: str, metadata) -> None:
    names.encoder_to_allennlp(module._token_encoder, state, prefix)


def _encoder_load_hook(module: "_ElmoCharacterEncoder", state: dict, prefix: str, metadata, strict, missing,
                       unexpected, errors) -> None:
    names.encoder_from_allennlp(module._token_encoder, state, prefix, errors)
    module.__dict__["_load_prefix"] = prefix  # for _encoder_loaded_hook, which is not told it


def _encoder_loaded_hook(module: "_ElmoCharacterEncoder", incompatible) -> None:
    names.name_missing_keys(names.encoder_key_map(module._token_encoder), module.__dict__.pop("_load_prefix", ""),
                            incompatible.missing_keys)


def _lstm_state_dict_hook(module: "_ElmoLstm", state: dict, prefix: str, metadata) -> None:
    names.lstm_to_allennlp(len(module.forward_layers), state, prefix)


def _lstm_load_hook(module: "_ElmoLstm", state: dict, prefix: str, metadata, strict, missing, unexpected,
                    errors) -> None:
    names.lstm_from_allennlp(module.forward_layers, "forward", state, prefix, errors)
    names.lstm_from_allennlp(module.backward_layers, "backward", state, prefix, errors)
    module.__dict__["_load_prefix"] = prefix  # for _lstm_loaded_hook, which is not told it


def _lstm_loaded_hook(module: "_ElmoLstm", incompatible) -> None:
    names.name_missing_keys(names.lstm_key_map(len(module.forward_layers)), module.__dict__.pop("_load_prefix", ""),
                            incompatible.missing_keys)


def _bilm_load_hook(module: "_ElmoBiLm", state: dict, prefix: str, metadata, strict, missing, unexpected,
                    errors) -> None:
    # AllenNLP's vocab_to_cache table: the CNN vectors of the cached words, which the runtime's
    # token memo recomputes from the character CNN (the same weights), so it is not kept.
    state.pop(prefix + "_word_embedding.weight", None)


class _ElmoLstm(nn.Module):
    """The LSTM stacks of ``_ElmoBiLm`` and the state they carry (``_ElmoBiLm._elmo_lstm``, where
    AllenNLP code resets it: ``elmo._elmo_lstm._elmo_lstm.reset_states()``).

    It owns the inference runtime of the biLM, and with it the state policy: ``"stateful"``
    (AllenNLP's), ``"warm"`` or ``"reset"`` (see :mod:`elmo.inference.states`). ``_states`` reads
    and writes the carried state in AllenNLP's layout, ``(hidden (layers, batch, 2 * proj),
    memory (layers, batch, 2 * cell))``, forward direction first on the last axis.
    """

    def __init__(self, bilm: BiLM, state: str = ALLENNLP_STATE):
        super().__init__()
        self.forward_layers = bilm.forward_layers
        self.backward_layers = bilm.backward_layers
        # The whole biLM runs here; its parts are registered by the modules that own them (the
        # token encoder by _ElmoCharacterEncoder), so that each weight has one name.
        self.__dict__["_bilm"] = bilm
        self._mode = state
        self._runtime: Runtime | None = Runtime(bilm, state=state)
        self._pending: BiLMState | None = None  # carried state waiting for a rebuilt runtime
        # state_dict in AllenNLP's ElmoLstm names (forward_layer_0.input_linearity.weight, ...).
        self.register_state_dict_post_hook(_lstm_state_dict_hook)
        self.register_load_state_dict_pre_hook(_lstm_load_hook)
        self.register_load_state_dict_post_hook(_lstm_loaded_hook)

    @property
    def state(self) -> str:
        return self._mode

    @property
    def runtime(self) -> Runtime:
        """The runtime, on the device the weights are on now (rebuilt, with the carried state,
        after the module was moved)."""
        device = next(self._bilm.parameters()).device
        if self._runtime is None or self._runtime.device != device:
            carried = self._pending
            if self._runtime is not None:
                carried = self._runtime.carried_state
            self._runtime = Runtime(self._bilm, state=self._mode)
            if carried is not None:
                self._runtime.carried_state = carried  # moved to the new device by the runtime
            self._pending = None
        return self._runtime

    def step(self, char_ids: torch.Tensor, mask: torch.Tensor, *, words=None,
             differentiable: bool = False) -> BiLMOutput:
        """One batch ``(batch, time, 50)`` through the runtime's one step (:meth:`Runtime.step`):
        the policy's initial state in, the layers with boundaries out, the carried state updated."""
        return self.runtime.step(char_ids, mask, words=words, keep_boundaries=True, differentiable=differentiable)

    def reset_states(self, mask: torch.Tensor | None = None) -> None:
        """Forget the carried state: all rows, or (as AllenNLP's) those where ``mask``
        ``(batch,)`` is True."""
        if mask is None:
            self.runtime.reset_state()
            return
        carried = self.runtime.carried_state
        if carried is None:
            return
        mask = torch.as_tensor(mask, dtype=torch.bool, device=carried.c.device).reshape(-1)
        if mask.shape[0] != carried.batch_size:
            raise ValueError(f"Trying to reset states using mask with incorrect batch size. Expected batch size: "
                             f"{carried.batch_size}. Provided batch size: {mask.shape[0]}.")
        keep = (~mask).to(carried.c.dtype)[None, None, :, None]
        self.runtime.carried_state = BiLMState(carried.c * keep, carried.h * keep)

    @property
    def _states(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        carried = self.runtime.carried_state
        if carried is None:
            return None
        return torch.cat([carried.h[0], carried.h[1]], dim=-1), torch.cat([carried.c[0], carried.c[1]], dim=-1)

    @_states.setter
    def _states(self, value: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        if value is None:
            self.runtime.carried_state = None
            return
        hidden, memory = value
        lstm = self._bilm.config.lstm
        expected = ((lstm.n_layers, 2 * lstm.projection_dim), (lstm.n_layers, 2 * lstm.dim))
        got = ((hidden.shape[0], hidden.shape[-1]), (memory.shape[0], memory.shape[-1]))
        if hidden.dim() != 3 or memory.dim() != 3 or got != expected or hidden.shape[1] != memory.shape[1]:
            raise ValueError(f"_states: expected (hidden (layers, batch, {2 * lstm.projection_dim}), memory "
                             f"(layers, batch, {2 * lstm.dim})) for {lstm.n_layers} layers, got "
                             f"{tuple(hidden.shape)} and {tuple(memory.shape)}")
        runtime = self.runtime
        proj, cell = lstm.projection_dim, lstm.dim
        c = torch.stack([memory[..., :cell], memory[..., cell:]]).to(runtime.device, torch.float32)
        h = torch.stack([hidden[..., :proj], hidden[..., proj:]]).to(runtime.device, torch.float32)
        runtime.carried_state = BiLMState(c.contiguous(), h.contiguous())

    def __getstate__(self) -> dict[str, Any]:
        # The runtime (stacked weights, token memo) is rebuilt after unpickling; the policy and
        # the carried state travel.
        state = dict(super().__getstate__())
        runtime = self._runtime
        if runtime is not None:
            state["_pending"] = runtime.carried_state
        state["_runtime"] = None
        return state


class _ElmoBiLm(nn.Module):
    """AllenNLP's ``_ElmoBiLm``: the whole biLM, every layer with the sentence boundaries.

    ``forward(inputs, word_inputs=None)`` takes character ids ``(batch, timesteps, 50)`` and, with
    ``vocab_to_cache``, word ids ``(batch, timesteps)`` into that list (0 is padding), and returns
    ``{"activations": [L + 1 tensors (batch, timesteps + 2, dim)], "mask": (batch, timesteps + 2)}``.
    As in AllenNLP 2.10, word ids outside the cached vocabulary fall back to the character ids,
    and word ids without a cache are ignored in favour of the character ids.

    Stateful by default, as AllenNLP was; ``state="warm"`` or ``"reset"`` make it deterministic.
    Submodules as in AllenNLP: ``_token_embedder`` (an :class:`_ElmoCharacterEncoder`) and
    ``_elmo_lstm`` (whose ``reset_states()`` forgets the carried state); :attr:`bilm` is the
    :class:`~elmo.model.network.BiLM` they share.
    """

    def __init__(self, options_file: str | os.PathLike, weight_file: str | os.PathLike,
                 requires_grad: bool = False, vocab_to_cache: list[str] | None = None, *,
                 state: str = ALLENNLP_STATE, _any_characters: bool = False):
        super().__init__()
        bilm = load_bilm(options_file, weight_file)
        if not _any_characters:  # ElmoEmbedder makes its ids with the model's own scheme
            _byte_scheme_only(bilm, options_file)
        for p in bilm.parameters():
            p.requires_grad_(requires_grad)
        self._token_embedder = _ElmoCharacterEncoder._of(bilm, requires_grad)
        self._elmo_lstm = _ElmoLstm(bilm, state)
        self._requires_grad = requires_grad
        self.num_layers = bilm.config.n_output_layers  # the token layer and each LSTM layer
        self._vocab: list[str] | None = None
        if requires_grad and vocab_to_cache:
            logger.warning("You are fine tuning ELMo and caching char CNN word vectors. Here the cached words are "
                           "encoded by the (trainable) character CNN, so their vectors follow its training.")
        if vocab_to_cache:
            self.create_cached_cnn_embeddings(vocab_to_cache)
        self.register_load_state_dict_pre_hook(_bilm_load_hook)

    @property
    def bilm(self) -> BiLM:
        """The biLM these modules run (its weights are this module's parameters)."""
        return self._elmo_lstm._bilm

    @property
    def state(self) -> str:
        return self._elmo_lstm.state

    def get_output_dim(self) -> int:
        return self.bilm.output_dim

    def create_cached_cnn_embeddings(self, tokens: list[str]) -> None:
        """Accept word ids into ``tokens`` from now on (0 is padding, so ``tokens[0]`` is never
        read). Each word's CNN vector is computed once and remembered by the runtime's token
        memo, which is what AllenNLP's precomputed table saved."""
        self._vocab = list(tokens)

    def train(self, mode: bool = True) -> "_ElmoBiLm":
        super().train(mode)
        self.bilm.train(mode)
        return self

    def _words_of(self, word_inputs: torch.Tensor) -> list[list[str]] | None:
        """The token lists behind word ids, or None where an id is outside the cached vocabulary
        (AllenNLP's lookup failed there and it fell back to the character ids)."""
        assert self._vocab is not None
        size = len(self._vocab)
        rows = []
        for row in word_inputs.tolist():
            words = []
            for index in row:
                if index == 0:  # padding
                    break
                if not 0 < index < size:
                    return None
                words.append(self._vocab[index])
            rows.append(words)
        return rows

    def _layers(self, inputs: torch.Tensor | None, word_inputs: torch.Tensor | None = None,
                words: list[list[str]] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """All layers ``(batch, L+1, timesteps+2, dim)`` with boundaries, and their mask
        ``(batch, timesteps+2)``. ``words``: the token lists behind ``inputs``, if known (the
        runtime's token memo then skips the CNN for words it has seen)."""
        if word_inputs is not None and self._vocab is not None:
            if word_inputs.dim() != 2:
                raise ValueError(f"word_inputs: expected word ids (batch, timesteps), got {tuple(word_inputs.shape)}")
            rows = self._words_of(word_inputs)
            if rows is not None:
                words = rows
                inputs, _ = batch_to_char_ids(rows)
                if inputs.shape[1] < word_inputs.shape[1]:  # keep the caller's timesteps
                    inputs = nn.functional.pad(inputs, (0, 0, 0, word_inputs.shape[1] - inputs.shape[1]))
                inputs = inputs.to(word_inputs.device)
            elif inputs is None:
                raise ValueError(f"word_inputs: an id is outside vocab_to_cache ({len(self._vocab)} words, ids 1 to "
                                 f"{len(self._vocab) - 1}) and no character ids were passed to fall back on")
        inputs = _check_char_ids(inputs, width=self.bilm.characters.width)
        mask = (inputs > 0).any(dim=-1)

        # With requires_grad, the biLM's own forward under autograd, so that gradients reach its weights.
        out = self._elmo_lstm.step(inputs, mask, words=words,
                                   differentiable=self._requires_grad and torch.is_grad_enabled())
        return out.layers, out.mask

    def forward(self, inputs: torch.Tensor | None, word_inputs: torch.Tensor | None = None) -> dict[str, Any]:
        layers, mask = self._layers(inputs, word_inputs)
        return {"activations": list(layers.unbind(dim=1)), "mask": mask}


class Elmo(nn.Module):
    """AllenNLP's ``Elmo``: a frozen (or, with ``requires_grad``, trainable) biLM and
    ``num_output_representations`` scalar mixes, each followed by dropout.

    ``forward(inputs, word_inputs=None)`` takes character ids ``(batch, timesteps, 50)`` from
    :func:`batch_to_ids` (extra leading dimensions are flattened and restored) and, with
    ``vocab_to_cache``, word ids ``(batch, timesteps)`` into that list; it returns
    ``{"elmo_representations": [...], "mask": ...}``: one ``(batch, timesteps, dim)`` tensor per
    mix and the ``(batch, timesteps)`` mask, with the sentence boundaries removed unless
    ``keep_sentence_boundaries``. As AllenNLP 2.10: word ids outside the cache fall back to the
    character ids; word ids without a cache log a warning and the character ids are used. Unlike
    AllenNLP, ``inputs`` may be None when every word id is cached.

    ``module``: instead of the two files, a module with ``num_layers``, ``get_output_dim()`` and a
    forward returning ``{"activations", "mask"}`` (an :class:`_ElmoBiLm`, say), as in AllenNLP.
    ``state``: ``"stateful"`` (AllenNLP's behaviour, the default), ``"warm"`` or ``"reset"``.
    """

    def __init__(self, options_file: str | os.PathLike | None, weight_file: str | os.PathLike | None,
                 num_output_representations: int, requires_grad: bool = False, do_layer_norm: bool = False,
                 dropout: float = 0.5, vocab_to_cache: list[str] | None = None,
                 keep_sentence_boundaries: bool = False, scalar_mix_parameters: list[float] | None = None,
                 module: nn.Module | None = None, *, state: str = ALLENNLP_STATE):
        super().__init__()
        check_count(num_output_representations, "num_output_representations")
        if module is not None:
            if options_file is not None or weight_file is not None:
                raise ValueError("module: Don't provide options_file or weight_file with module")
            self._elmo_lstm = module
        else:
            self._elmo_lstm = _ElmoBiLm(options_file, weight_file, requires_grad=requires_grad,
                                        vocab_to_cache=vocab_to_cache, state=state)
        self._has_cached_vocab = vocab_to_cache is not None
        self._keep_sentence_boundaries = keep_sentence_boundaries
        n_layers = self._elmo_lstm.num_layers
        if scalar_mix_parameters is not None and len(scalar_mix_parameters) != n_layers:
            raise ValueError(f"scalar_mix_parameters: {len(scalar_mix_parameters)} values for a biLM with "
                             f"{n_layers} layers")
        self._dropout = Dropout(dropout)
        self._scalar_mixes: list[ScalarMix] = []
        for k in range(num_output_representations):
            # Fixed weights freeze the whole mix (its gamma too), as in AllenNLP.
            mix = ScalarMix(n_layers, do_layer_norm=do_layer_norm, initial_scalar_parameters=scalar_mix_parameters,
                            trainable=scalar_mix_parameters is None)
            self.add_module(f"scalar_mix_{k}", mix)
            self._scalar_mixes.append(mix)

    @property
    def state(self) -> str | None:
        """The LSTM state policy of the biLM (None for a ``module`` of another kind)."""
        return getattr(self._elmo_lstm, "state", None)

    def get_output_dim(self) -> int:
        return self._elmo_lstm.get_output_dim()

    def reset_states(self) -> None:
        """Forget the LSTM state carried between batches (stateful mode), as
        ``elmo._elmo_lstm._elmo_lstm.reset_states()`` does."""
        self._elmo_lstm._elmo_lstm.reset_states()

    def forward(self, inputs: torch.Tensor | None, word_inputs: torch.Tensor | None = None) -> dict[str, Any]:
        original_shape = inputs.shape if inputs is not None else None
        reshaped_inputs = inputs
        if inputs is not None:
            if inputs.dim() < 3 or inputs.shape[-1] != MAX_CHARS:
                raise ValueError(f"inputs: expected character ids (batch, timesteps, {MAX_CHARS}) from batch_to_ids, "
                                 f"got {tuple(inputs.shape)}")
            if inputs.dim() > 3:
                reshaped_inputs = inputs.reshape(-1, *inputs.shape[-2:])
        reshaped_word_inputs = word_inputs
        if word_inputs is not None:
            if not self._has_cached_vocab:
                logger.warning(NO_CACHE_WARNING)
                reshaped_word_inputs = None
                if inputs is None:
                    raise ValueError("word_inputs: this Elmo was built without vocab_to_cache, and no character "
                                     "ids were passed; pass batch_to_ids(...) as inputs")
            elif word_inputs.dim() > 2:
                reshaped_word_inputs = word_inputs.reshape(-1, word_inputs.shape[-1])
        elif inputs is None:
            raise ValueError("inputs: character ids are required (batch_to_ids(sentences))")

        if isinstance(self._elmo_lstm, _ElmoBiLm):
            layers, mask = self._elmo_lstm._layers(reshaped_inputs, reshaped_word_inputs)
        else:
            bilm_output = self._elmo_lstm(reshaped_inputs, reshaped_word_inputs)
            layers, mask = torch.stack(bilm_output["activations"], dim=1), bilm_output["mask"]

        # As AllenNLP: each mix sees the layers with the boundaries (its layer norm counts them),
        # which are removed afterwards.
        mixed = [mix(list(layers.unbind(dim=1)), mask) for mix in self._scalar_mixes]
        if not self._keep_sentence_boundaries:
            stacked, mask = remove_boundaries(torch.stack(mixed, dim=1), mask)
            mixed = list(stacked.unbind(dim=1))
        representations = [self._dropout(m) for m in mixed]

        if word_inputs is not None and word_inputs.dim() > 2:
            leading = word_inputs.shape[:-1]
        elif original_shape is not None and len(original_shape) > 3:
            leading = original_shape[:-2]
        else:
            leading = None
        if leading is not None:  # give the leading dimensions back
            time = mask.shape[-1]
            representations = [r.reshape(*leading, time, r.shape[-1]) for r in representations]
            mask = mask.reshape(*leading, time)
        return {"elmo_representations": representations, "mask": mask}


__all__ = ["Elmo", "_ElmoBiLm", "_ElmoCharacterEncoder", "batch_to_ids", "load_bilm"]
