"""Torch's own LSTM kernel (cuDNN on a GPU) for models trained without clipping.

A model whose options say ``"lstm": {"backend": "cudnn", "cell_clip": null, "proj_clip": null, ...}``
is a different model from the published ones: bilm-tf's cell clips the cell and the projection at
3, and torch's ``nn.LSTM(proj_size=...)`` cannot. Without clipping the two cells are the same
function, so such a model keeps this library's parameters and files (bilm-tf's layout, which any
reader computes correctly since the options say no clipping), and only its training runs through
torch's kernel, with the weights mapped on every call:

=====================  ================================  ==================================
                       bilm-tf (``LstmLayer``)           torch (``nn.LSTM``, one layer)
=====================  ================================  ==================================
gate order             ``i, j, f, o``                    ``i, f, g, o`` (``g`` is bilm-tf's ``j``)
biases                 one ``b``; +1 added to ``f``      ``b_ih`` and ``b_hh``, nothing added
input weights          ``input_weight`` ``(4*dim, in)``  ``weight_ih_l0``
state weights          ``state_weight`` ``(4*dim, p)``   ``weight_hh_l0``
projection             ``projection`` ``(p, dim)``       ``weight_hr_l0``
=====================  ================================  ==================================

:func:`to_torch_lstm` puts bilm-tf's bias in ``b_ih`` and the forget gate's +1 in ``b_hh``, so no
value is rounded on the way there and :func:`from_torch_lstm` maps back bit for bit; weights made
by torch itself come back with ``b = b_ih + b_hh - 1`` (on ``f``), one rounding of their sum.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch

from elmo.model.network import FORGET_BIAS, LstmLayer


def _torch_order(rows: torch.Tensor) -> torch.Tensor:
    """bilm-tf's ``i, j, f, o`` blocks of rows -> torch's ``i, f, g, o`` (``g`` = ``j``)."""
    i, j, f, o = rows.chunk(4, dim=0)
    return torch.cat([i, f, j, o], dim=0)


def _bilm_tf_order(rows: torch.Tensor) -> torch.Tensor:
    """torch's ``i, f, g, o`` blocks of rows -> bilm-tf's ``i, j, f, o``."""
    i, f, g, o = rows.chunk(4, dim=0)
    return torch.cat([i, g, f, o], dim=0)


def to_torch_lstm(layer: LstmLayer) -> list[torch.Tensor]:
    """``[weight_ih, weight_hh, bias_ih, bias_hh, weight_hr]`` of a one-layer ``nn.LSTM(proj_size=...)``
    that computes ``layer`` (without clipping). Differentiable: gradients reach ``layer``'s parameters."""
    forget = torch.zeros(4, layer.dim, dtype=layer.bias.dtype, device=layer.bias.device)
    forget[1] = FORGET_BIAS  # torch's second block is the forget gate
    return [_torch_order(layer.input_weight), _torch_order(layer.state_weight), _torch_order(layer.bias),
            forget.view(-1), layer.projection]


def from_torch_lstm(weight_ih: torch.Tensor, weight_hh: torch.Tensor, bias_ih: torch.Tensor, bias_hh: torch.Tensor,
                    weight_hr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """bilm-tf's ``(input_weight, state_weight, bias, projection)`` of a one-layer ``nn.LSTM``'s
    weights (``weight_*_l0`` and ``bias_*_l0``)."""
    bias = _bilm_tf_order(bias_ih + bias_hh)
    dim = bias.shape[0] // 4
    bias = torch.cat([bias[:2 * dim], bias[2 * dim:3 * dim] - FORGET_BIAS, bias[3 * dim:]])
    return _bilm_tf_order(weight_ih), _bilm_tf_order(weight_hh), bias, weight_hr


def load_torch_lstm(layer: LstmLayer, lstm: torch.nn.LSTM) -> None:
    """Set ``layer``'s parameters from a one-layer, one-direction ``nn.LSTM`` with ``proj_size``."""
    if lstm.num_layers != 1 or lstm.bidirectional or lstm.proj_size != layer.projection_dim or not lstm.bias:
        raise ValueError("load_torch_lstm: expects a one-layer, one-direction nn.LSTM with biases and "
                         f"proj_size={layer.projection_dim}")
    values = from_torch_lstm(lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0, lstm.weight_hr_l0)
    with torch.no_grad():
        for param, value in zip((layer.input_weight, layer.state_weight, layer.bias, layer.projection), values):
            param.copy_(value)


def lstm_cudnn(layers: Sequence[LstmLayer], inputs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor],
               ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """:func:`elmo.kernels.fused_lstm.lstm_fused`'s contract for full windows (no ``lengths``),
    through torch's LSTM kernel (cuDNN on a GPU, its own loop on a CPU), one call per layer.
    ``inputs``: ``(n, time, batch, input_dim)``; ``state``: ``(c (n, batch, dim), h (n, batch,
    proj))``. The layers must not clip (:class:`~elmo.model.config.LSTMConfig` refuses
    ``backend: cudnn`` with clipping)."""
    if any(layer.cell_clip is not None or layer.proj_clip is not None for layer in layers):
        raise ValueError("lstm_cudnn: torch's LSTM kernel cannot clip; these layers clip the cell or projection")
    c0, h0 = state
    outputs, finals_c, finals_h = [], [], []
    for direction, layer in enumerate(layers):
        with warnings.catch_warnings():
            # cuDNN copies weights that are not one flat buffer; here they are rebuilt every call.
            warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous chunk")
            # On a CPU, oneDNN has no projection: torch's own loop runs, as it should.
            warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")
            out, h, c = torch._VF.lstm(inputs[direction], (h0[direction].unsqueeze(0).to(inputs.dtype),
                                                           c0[direction].unsqueeze(0).to(inputs.dtype)),
                                       to_torch_lstm(layer), True, 1, 0.0, layer.training, False, False)
        outputs.append(out)
        finals_c.append(c[0])
        finals_h.append(h[0])
    return torch.stack(outputs), (torch.stack(finals_c).to(c0.dtype), torch.stack(finals_h).to(c0.dtype))
