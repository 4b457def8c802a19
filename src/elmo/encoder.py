"""Token encoder: characters -> char embeddings -> n-gram convolutions with max-pool -> highway
layers -> linear projection. Gives a context-independent vector to any string.

This is the readable reference implementation; the fast path (issue 4) is tested against it.
"""

from __future__ import annotations

import torch
from torch import nn

from elmo.config import CharCNNConfig


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
        gate = torch.sigmoid(self.carry(x))
        return gate * torch.relu(self.transform(x)) + (1.0 - gate) * x


class TokenEncoder(nn.Module):
    """Character CNN token encoder.

    ``output_dim`` is the LSTM projection dim. As in bilm-tf, the final projection exists only when
    the number of filters differs from it (every published model has one).
    """

    def __init__(self, config: CharCNNConfig, output_dim: int):
        super().__init__()
        self.config = config
        # Row 0 is the padding id (a token slot with no token); it stays zero.
        self.char_embedding = nn.Embedding(262, config.embedding_dim, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(config.embedding_dim, n, width) for width, n in config.filters)
        n_filters = config.n_filters
        self.highways = nn.ModuleList(Highway(n_filters) for _ in range(config.n_highway))
        self.projection = nn.Linear(n_filters, output_dim) if n_filters != output_dim else None
        self.activation = torch.tanh if config.activation == "tanh" else torch.relu
        self.output_dim = output_dim

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        """``char_ids``: ``(batch, time, 50)`` int64 -> token vectors ``(batch, time, output_dim)``."""
        batch, time, n_chars = char_ids.shape
        chars = self.char_embedding(char_ids.reshape(batch * time, n_chars))  # (B*T, 50, char_dim)
        chars = chars.transpose(1, 2)  # (B*T, char_dim, 50): Conv1d wants channels first
        # VALID convolution over all 50 slots, max over positions, then the activation.
        pooled = [conv(chars).max(dim=2).values for conv in self.convs]  # each (B*T, n_filters_i)
        x = self.activation(torch.cat(pooled, dim=1))  # (B*T, n_filters)
        for highway in self.highways:
            x = highway(x)
        if self.projection is not None:
            x = self.projection(x)  # (B*T, output_dim)
        return x.reshape(batch, time, self.output_dim)


def encode_distinct(encoder: TokenEncoder, char_ids: torch.Tensor) -> torch.Tensor:
    """Same result as ``encoder(char_ids)``, running the CNN once per distinct token of the batch.

    ``char_ids``: ``(batch, time, 50)`` -> ``(batch, time, output_dim)``. Natural text repeats
    words a lot (a batch of 64 x 20 tokens has ~600 distinct ones), and the CNN dominates the
    token encoder's cost. Gradients flow through the gather to the shared computation.
    """
    batch, time, n_chars = char_ids.shape
    distinct, inverse = torch.unique(char_ids.reshape(-1, n_chars), dim=0, return_inverse=True)
    vectors = encoder(distinct.unsqueeze(0))[0]  # (n_distinct, output_dim)
    return vectors[inverse].reshape(batch, time, -1)
