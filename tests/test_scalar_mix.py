import pytest
import torch
from conftest import load_fixture_model

from elmo import Elmo, ScalarMix, batch_to_char_ids
from elmo.model.network import masked_layer_norm


def random_layers(batch=2, n_layers=3, time=5, dim=4):
    layers = torch.randn(batch, n_layers, time, dim)
    mask = torch.ones(batch, time, dtype=torch.bool)
    mask[1, 3:] = False
    return layers, mask


def test_starts_as_plain_average():
    layers, mask = random_layers()
    mix = ScalarMix(3)
    torch.testing.assert_close(mix(layers, mask), layers.mean(dim=1))
    torch.testing.assert_close(mix.layer_weights(), torch.full((3,), 1 / 3))


def test_weights_and_gamma():
    layers, mask = random_layers()
    mix = ScalarMix(3)
    with torch.no_grad():
        mix.scalars.copy_(torch.tensor([0.0, 1.0, 2.0]))
        mix.gamma.fill_(2.0)
    w = torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0)
    expected = 2.0 * (w[0] * layers[:, 0] + w[1] * layers[:, 1] + w[2] * layers[:, 2])
    torch.testing.assert_close(mix(layers, mask), expected)


def test_layer_norm_is_one_mean_and_variance_over_unmasked_elements():
    layers, mask = random_layers()
    h = layers[:, 0]
    values = h[mask]  # (n_unmasked_tokens, dim): every real element of the batch
    expected = (h - values.mean()) / torch.sqrt(values.var(unbiased=False) + 1e-12)
    torch.testing.assert_close(masked_layer_norm(h, mask), expected)
    # Padding values must not matter.
    h2 = h.clone()
    h2[1, 3:] = 1000.0
    torch.testing.assert_close(masked_layer_norm(h2, mask)[mask], expected[mask])


def test_fixed_modes():
    layers, mask = random_layers()
    torch.testing.assert_close(ScalarMix(3, mode="top")(layers, mask), layers[:, 2])
    torch.testing.assert_close(ScalarMix(3, mode=0)(layers, mask), layers[:, 0])
    torch.testing.assert_close(ScalarMix(3, mode="average")(layers, mask), layers.mean(dim=1))
    assert not ScalarMix(3, mode="average").scalars.requires_grad
    assert ScalarMix(3, mode=1).layer_weights().tolist() == [0.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="layer 3 does not exist"):
        ScalarMix(3, mode=3)
    with pytest.raises(ValueError, match="expected 'mix'"):
        ScalarMix(3, mode="sum")


def test_l2_penalty():
    mix = ScalarMix(3, l2_coef=0.001)
    with torch.no_grad():
        mix.scalars.copy_(torch.tensor([1.0, 2.0, 3.0]))
    torch.testing.assert_close(mix.l2_penalty(), torch.tensor(0.014))
    assert ScalarMix(3, mode="top", l2_coef=1.0).l2_penalty().item() == 0.0


def test_gradients_reach_the_mix_and_dropout_only_in_training():
    layers, mask = random_layers()
    mix = ScalarMix(3, dropout=0.5)
    mix.train()
    with torch.no_grad():
        mix.scalars.copy_(torch.tensor([0.5, -0.5, 0.0]))
    (mix(layers, mask).sum() + mix.l2_penalty()).backward()
    assert mix.scalars.grad is not None and mix.scalars.grad.abs().sum() > 0
    assert mix.gamma.grad is not None
    mix.eval()
    torch.testing.assert_close(mix(layers, mask), mix(layers, mask))
    mix.train()
    assert (mix(layers, mask) == 0).float().mean() > 0.3


def test_elmo_frozen_bilm_and_independent_mixes():
    elmo = Elmo(load_fixture_model("allennlp"), num_output_representations=2, dropout=0.0, l2_coef=0.1)
    elmo.train()
    assert not elmo.bilm.training
    assert all(not p.requires_grad for p in elmo.bilm.parameters())
    sentences = [["The", "cat", "sat", "."], ["Dogs", "bark"]]
    out = elmo.embed(sentences)
    assert len(out.representations) == 2
    assert out.representations[0].shape == (2, 4, 32)
    assert out.mask.tolist() == [[True] * 4, [True, True, False, False]]
    assert (out.representations[0][1, 2:] == 0).all()
    loss = out.representations[0].sum() + elmo.l2_penalty()
    loss.backward()
    assert elmo.mixes[0].scalars.grad.abs().sum() > 0
    # The second mix only sees its own L2 term, whose gradient at s = 0 is zero.
    assert elmo.mixes[1].scalars.grad.abs().sum() == 0 and elmo.mixes[1].gamma.grad is None
    # Same inputs as char ids, and the raw layers agree with the Embedder's.
    ids, mask = batch_to_char_ids(sentences)
    layers, _ = elmo.layers(ids)
    torch.testing.assert_close(elmo.mix(layers, mask).representations[1], out.representations[1])
