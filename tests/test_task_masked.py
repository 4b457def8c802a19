"""The masked reductions task models share (elmo.tasks.masked): padding never counts, and a fully
masked row gives zeros, not NaN."""

import torch

from elmo.tasks.masked import masked_max, masked_mean, masked_min, masked_softmax


def test_masked_helpers():
    values = torch.tensor([[[1.0], [5.0], [-3.0]], [[2.0], [9.0], [9.0]], [[7.0], [7.0], [7.0]]])
    mask = torch.tensor([[True, True, True], [True, False, False], [False, False, False]])
    assert masked_max(values, mask).flatten().tolist() == [5.0, 2.0, 0.0]
    assert masked_min(values, mask).flatten().tolist() == [-3.0, 2.0, 0.0]
    assert masked_mean(values, mask).flatten().tolist() == [1.0, 2.0, 0.0]
    weights = masked_softmax(values.squeeze(-1), mask)
    torch.testing.assert_close(weights[1], torch.tensor([1.0, 0.0, 0.0]))
    assert weights[2].tolist() == [0.0, 0.0, 0.0]  # fully masked: zeros, not NaN
    torch.testing.assert_close(weights[0].sum(), torch.tensor(1.0))
