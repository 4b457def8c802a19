"""The CPU dropout (elmo.model.dropout) is the definition of dropout, and the task models use it."""

import pytest
import torch


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_cpu_dropout_is_the_definition_of_dropout(p):
    """elmo.dropout draws its mask from uniform numbers instead of bernoulli_: the result must be
    exactly ``x * [u >= p] / (1 - p)`` for the draws ``u`` of the same generator state, keep
    about ``1 - p`` of the elements, and pass gradients through the kept ones only."""
    from elmo.model.dropout import Dropout, dropout

    x = torch.randn(64, 50, 40, requires_grad=True)
    torch.manual_seed(7)
    expected = x.detach() * (torch.rand_like(x) >= p).float() / (1 - p)
    torch.manual_seed(7)
    out = dropout(x, p, training=True)
    assert torch.allclose(out, expected, rtol=1e-6, atol=0)
    kept = out.detach() != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.01  # 128,000 draws: 4 standard deviations
    out.sum().backward()
    assert torch.allclose(x.grad, kept.float() / (1 - p), rtol=1e-6, atol=0)

    module = Dropout(p)
    assert isinstance(module, torch.nn.Dropout)
    module.eval()
    assert module(x) is x  # evaluation and p = 0 leave the input as it is
    assert dropout(x, 0.0, training=True) is x
    assert torch.equal(dropout(x, 1.0, training=True), torch.zeros_like(x))


def test_cpu_dropout_keeps_the_distribution_of_torch_dropout():
    """Over many draws, elmo.model.dropout and torch's dropout agree in keep rate and mean output."""
    from elmo.model.dropout import dropout

    x = torch.full((400_000,), 2.0)
    ours = dropout(x, 0.3, training=True)
    theirs = torch.nn.functional.dropout(x, 0.3, training=True)
    assert abs((ours != 0).float().mean() - (theirs != 0).float().mean()) < 0.005
    assert abs(ours.mean().item() - 2.0) < 0.02 and abs(theirs.mean().item() - 2.0) < 0.02


def test_dropout_rejects_a_probability_out_of_range():
    from elmo.model.dropout import dropout

    with pytest.raises(ValueError, match="between 0 and 1"):
        dropout(torch.ones(3), 1.5, training=True)


def test_task_models_use_the_fast_dropout():
    """Every dropout of the task models, the scalar mix and the AllenNLP-style Elmo module is
    elmo.dropout's (torch's own on the CPU was a tenth of a task's training step)."""
    import inspect

    from elmo.allennlp import modules as allennlp
    from elmo.model import network
    from elmo.model.dropout import Dropout
    from elmo.tasks import classification, coref, entailment, qa, srl, tagging

    for module in (allennlp, network.ScalarMix, classification, coref, entailment, qa, srl, tagging):
        source = inspect.getsource(module)
        assert "nn.Dropout(" not in source and "functional.dropout(" not in source, module.__name__
        assert "Dropout(" in source, module.__name__
    assert type(network.ScalarMix(3, dropout=0.5).dropout) is Dropout
