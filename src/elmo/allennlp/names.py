"""AllenNLP's parameter names and layouts for the drop-in's ``state_dict``, both directions.

The drop-in runs the library's biLM (:class:`elmo.model.network.BiLM`), whose parameters keep
bilm-tf's layout: the LSTM gates in TensorFlow's order (input, new memory, forget, output) with
the forget gate's +1 applied at run time, and each highway layer as two ``Linear`` (carry,
transform). AllenNLP 2.10 stores the same numbers differently:

* ``_ElmoCharacterEncoder``: ``_char_embedding_weights`` ``(262, char_dim)``,
  ``char_conv_{i}.{weight,bias}``, ``_highways._layers.{k}.{weight,bias}`` one ``Linear(n, 2n)``
  per layer holding ``[W_transform; -W_carry]`` and ``[b_transform; -b_carry]`` (its gate
  multiplies the input, bilm-tf's the transformed input), ``_projection.{weight,bias}``;
* ``ElmoLstm``: ``{forward,backward}_layer_{i}.input_linearity.weight`` ``(4 cell, input)``,
  ``.state_linearity.weight`` ``(4 cell, hidden)`` and ``.bias`` ``(4 cell,)``, gates in the order
  input, forget, memory, output, the forget bias +1 stored in the bias, and
  ``.state_projection.weight`` ``(hidden, cell)``.

The modules register a ``state_dict`` post-hook that rewrites their own keys into AllenNLP's and a
``load_state_dict`` pre-hook that rewrites AllenNLP's keys into theirs, so a ``state_dict`` saved
from AllenNLP's classes loads with ``strict=True``, and the drop-in's loads into AllenNLP's. Keys
already in the library's names still load (``state_dict``\\ s saved by earlier versions). The
rewriting is a permutation, a sign change and the forget gate's +1: the numbers are the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

# Where each gate's block sits: bilm-tf (i, j, f, o) and AllenNLP (i, f, j, o) swap the middle
# two; the permutation is its own inverse.
GATE_ORDER = (0, 2, 1, 3)
FORGET_BLOCK = 1  # the forget gate's block in AllenNLP's order
FORGET_BIAS = 1.0  # bilm-tf adds it at run time; AllenNLP keeps it in state_linearity.bias

Pair = tuple[str, str]  # (the library's local key, AllenNLP's local key)


def _swap_gates(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` ``(4 * cell, ...)`` with its gate blocks reordered (either direction)."""
    blocks = tensor.chunk(4, dim=0)
    return torch.cat([blocks[k] for k in GATE_ORDER], dim=0)


def _with_forget_bias(bias: torch.Tensor, sign: float) -> torch.Tensor:
    """``bias`` ``(4 * cell,)`` in AllenNLP's order with ``sign * 1`` added to the forget gate."""
    cell = bias.shape[0] // 4
    out = bias.clone()
    out[FORGET_BLOCK * cell:(FORGET_BLOCK + 1) * cell] += sign * FORGET_BIAS
    return out


def encoder_pairs(encoder) -> Iterator[Pair]:
    """The one-to-one keys of a :class:`~elmo.model.network.TokenEncoder` (``encoder``), local to
    the module holding it as ``_token_encoder``."""
    yield "_token_encoder.char_embedding.weight", "_char_embedding_weights"
    for i in range(len(encoder.convs)):
        for what in ("weight", "bias"):
            yield f"_token_encoder.convs.{i}.{what}", f"char_conv_{i}.{what}"
    if encoder.projection is not None:
        for what in ("weight", "bias"):
            yield f"_token_encoder.projection.{what}", f"_projection.{what}"


def _highway_keys(k: int, what: str) -> tuple[str, str, str]:
    """(carry, transform, AllenNLP's) keys of highway layer ``k``'s ``what`` (weight or bias)."""
    return (f"_token_encoder.highways.{k}.carry.{what}", f"_token_encoder.highways.{k}.transform.{what}",
            f"_highways._layers.{k}.{what}")


def _lstm_keys(direction: str, index: int) -> dict[str, str]:
    """The library's local keys of one LSTM layer -> AllenNLP's (``direction``: forward/backward)."""
    ours, theirs = f"{direction}_layers.{index}", f"{direction}_layer_{index}"
    return {f"{ours}.input_weight": f"{theirs}.input_linearity.weight",
            f"{ours}.state_weight": f"{theirs}.state_linearity.weight",
            f"{ours}.bias": f"{theirs}.state_linearity.bias",
            f"{ours}.projection": f"{theirs}.state_projection.weight"}


def encoder_key_map(encoder) -> dict[str, str]:
    """The character encoder's local keys -> AllenNLP's (a highway's carry and transform both
    name AllenNLP's one layer)."""
    keys = dict(encoder_pairs(encoder))
    for k in range(len(encoder.highways)):
        for what in ("weight", "bias"):
            carry, transform, theirs = _highway_keys(k, what)
            keys[carry] = keys[transform] = theirs
    return keys


def lstm_key_map(n_layers: int) -> dict[str, str]:
    """The LSTM stacks' local keys -> AllenNLP's ``ElmoLstm``'s."""
    return {ours: theirs for index in range(n_layers) for direction in ("forward", "backward")
            for ours, theirs in _lstm_keys(direction, index).items()}


def name_missing_keys(keys: dict[str, str], prefix: str, missing: list[str]) -> None:
    """Rewrite in place the library's names in a load's ``missing`` keys under ``prefix`` into
    AllenNLP's (``keys``: local names, from :func:`encoder_key_map` or :func:`lstm_key_map`), so
    that a strict load's error names the key the caller's ``state_dict`` lacks."""
    renamed = []
    for key in missing:
        local = key[len(prefix):] if key.startswith(prefix) else None
        key = prefix + keys[local] if local in keys else key
        if key not in renamed:
            renamed.append(key)
    missing[:] = renamed


def _rename(state: dict, old: str, new: str, value: torch.Tensor) -> None:
    state.pop(old, None)
    state[new] = value


def encoder_to_allennlp(encoder, state: dict, prefix: str) -> None:
    """Rewrite in place the character encoder's keys under ``prefix`` into AllenNLP's."""
    for ours, theirs in encoder_pairs(encoder):
        if prefix + ours in state:
            _rename(state, prefix + ours, prefix + theirs, state[prefix + ours])
    for k in range(len(encoder.highways)):
        for what in ("weight", "bias"):
            carry, transform, theirs = (prefix + key for key in _highway_keys(k, what))
            if carry in state and transform in state:
                joined = torch.cat([state.pop(transform), -state.pop(carry)], dim=0)
                state[theirs] = joined
    for what in ("weight", "bias"):  # AllenNLP registers its projection after the highways
        key = f"{prefix}_projection.{what}"
        if key in state:
            state[key] = state.pop(key)


def lstm_to_allennlp(n_layers: int, state: dict, prefix: str) -> None:
    """Rewrite in place the LSTM stacks' keys under ``prefix`` into AllenNLP's ``ElmoLstm``'s."""
    # AllenNLP registers forward_layer_0, backward_layer_0, forward_layer_1, ...
    for index in range(n_layers):
        for direction in ("forward", "backward"):
            for ours, theirs in _lstm_keys(direction, index).items():
                if prefix + ours not in state:
                    continue
                value = state[prefix + ours]
                if ours.endswith(".bias"):
                    value = _with_forget_bias(_swap_gates(value), +1.0)
                elif not ours.endswith(".projection"):
                    value = _swap_gates(value)
                _rename(state, prefix + ours, prefix + theirs, value)


def _take(state: dict, key: str, shape: torch.Size, errors: list[str],
          convert: Callable[[torch.Tensor], torch.Tensor] = lambda t: t) -> torch.Tensor | None:
    """``state[key]`` converted, or None (with an error naming ``key``) when its shape is not ``shape``."""
    value = state[key]
    if tuple(value.shape) != tuple(shape):
        errors.append(f"size mismatch for {key}: copying a param with shape {tuple(value.shape)} from checkpoint, "
                      f"the shape in current model is {tuple(shape)}.")
        return None
    return convert(value)


def encoder_from_allennlp(encoder, state: dict, prefix: str, errors: list[str]) -> None:
    """Rewrite in place AllenNLP's character-encoder keys under ``prefix`` into the library's.
    A key of the wrong shape is left as it is, with a message in ``errors``."""
    ours_of = dict(encoder.named_parameters(prefix="_token_encoder"))
    for ours, theirs in encoder_pairs(encoder):
        if prefix + theirs in state:
            value = _take(state, prefix + theirs, ours_of[ours].shape, errors)
            if value is not None:
                _rename(state, prefix + theirs, prefix + ours, value)
    for k, highway in enumerate(encoder.highways):
        n = highway.carry.weight.shape[0]
        for what, shape in (("weight", (2 * n, n)), ("bias", (2 * n,))):
            carry, transform, theirs = (prefix + key for key in _highway_keys(k, what))
            if theirs in state:
                value = _take(state, theirs, shape, errors)
                if value is not None:
                    del state[theirs]
                    state[transform], state[carry] = value[:n], -value[n:]


def lstm_from_allennlp(layers, direction: str, state: dict, prefix: str, errors: list[str]) -> None:
    """Rewrite in place AllenNLP's keys of the ``direction`` LSTM stack (``layers``, the library's
    :class:`~elmo.model.network.LstmLayer` list) under ``prefix`` into the library's."""
    for index, layer in enumerate(layers):
        ours_of = dict(layer.named_parameters(prefix=f"{direction}_layers.{index}"))
        for ours, theirs in _lstm_keys(direction, index).items():
            if prefix + theirs not in state:
                continue
            if ours.endswith(".bias"):
                def convert(t):
                    return _swap_gates(_with_forget_bias(t, -1.0))
            elif ours.endswith(".projection"):
                def convert(t):
                    return t
            else:
                convert = _swap_gates
            value = _take(state, prefix + theirs, ours_of[ours].shape, errors, convert)
            if value is not None:
                _rename(state, prefix + theirs, prefix + ours, value)


__all__ = ["encoder_from_allennlp", "encoder_key_map", "encoder_to_allennlp", "lstm_from_allennlp", "lstm_key_map",
           "lstm_to_allennlp", "name_missing_keys"]
