"""The drop-in's ``state_dict`` in AllenNLP 2.10's names, shapes and layouts, both directions.

The reference ``state_dict`` is built here from the weight file by AllenNLP's own loading rules
(``_ElmoCharacterEncoder._load_*`` in ``allennlp/modules/elmo.py`` and ``ElmoLstm.load_weights``
in ``allennlp/modules/elmo_lstm.py``), not by the library's mapping; AllenNLP's cell and highway
arithmetic is written out here too, to check that the layouts mean what AllenNLP computes.
"""

import json
from collections import OrderedDict

import h5py
import numpy as np
import pytest
import torch
from conftest import ALLENNLP

from elmo.allennlp import Elmo, _ElmoBiLm, _ElmoCharacterEncoder, batch_to_ids
from elmo.model.network import lstm_step

OPTIONS, WEIGHTS = str(ALLENNLP / "options.json"), str(ALLENNLP / "lm_weights.hdf5")
SENTENCES = [["The", "cat", "sat", "on", "the", "mat", "."], ["Dogs", "bark"], ["A"]]


def allennlp_state_dict(n_mixes: int = 1, prefix: str = "") -> "OrderedDict[str, torch.Tensor]":
    """What AllenNLP 2.10's ``Elmo(OPTIONS, WEIGHTS, n_mixes).state_dict()`` holds, in its order."""
    options = json.loads(open(OPTIONS).read())
    cnn, lstm = options["char_cnn"], options["lstm"]
    state = OrderedDict()
    enc, rnn = f"{prefix}_elmo_lstm._token_embedder.", f"{prefix}_elmo_lstm._elmo_lstm."
    with h5py.File(WEIGHTS, "r") as f:
        chars = f["char_embed"][...]
        state[enc + "_char_embedding_weights"] = np.concatenate([np.zeros((1, chars.shape[1]), "float32"), chars])
        for i, _ in enumerate(cnn["filters"]):
            state[f"{enc}char_conv_{i}.weight"] = np.transpose(f["CNN"][f"W_cnn_{i}"][...].squeeze(0), (2, 1, 0))
            state[f"{enc}char_conv_{i}.bias"] = f["CNN"][f"b_cnn_{i}"][...]
        for k in range(cnn["n_highway"]):
            high = f[f"CNN_high_{k}"]
            state[f"{enc}_highways._layers.{k}.weight"] = np.concatenate(
                [high["W_transform"][...].T, -1.0 * high["W_carry"][...].T])
            state[f"{enc}_highways._layers.{k}.bias"] = np.concatenate(
                [high["b_transform"][...], -1.0 * high["b_carry"][...]])
        state[enc + "_projection.weight"] = f["CNN_proj"]["W_proj"][...].T
        state[enc + "_projection.bias"] = f["CNN_proj"]["b_proj"][...]
        cell, input_size = lstm["dim"], lstm["projection_dim"]
        for layer in range(lstm["n_layers"]):
            for direction, name in enumerate(("forward", "backward")):
                data = f[f"RNN_{direction}"]["RNN"]["MultiRNNCell"][f"Cell{layer}"]["LSTMCell"]
                tf_weights = np.transpose(data["W_0"][...])
                torch_weights = tf_weights.copy()
                for torch_w, tf_w in ((torch_weights[:, :input_size], tf_weights[:, :input_size]),
                                      (torch_weights[:, input_size:], tf_weights[:, input_size:])):
                    torch_w[cell:2 * cell] = tf_w[2 * cell:3 * cell]
                    torch_w[2 * cell:3 * cell] = tf_w[cell:2 * cell]
                tf_bias = data["B"][...].copy()
                tf_bias[2 * cell:3 * cell] += 1
                torch_bias = tf_bias.copy()
                torch_bias[cell:2 * cell] = tf_bias[2 * cell:3 * cell]
                torch_bias[2 * cell:3 * cell] = tf_bias[cell:2 * cell]
                cell_prefix = f"{rnn}{name}_layer_{layer}."
                state[cell_prefix + "input_linearity.weight"] = torch_weights[:, :input_size]
                state[cell_prefix + "state_linearity.weight"] = torch_weights[:, input_size:]
                state[cell_prefix + "state_linearity.bias"] = torch_bias
                state[cell_prefix + "state_projection.weight"] = np.transpose(data["W_P_0"][...])
    for k in range(n_mixes):
        state[f"{prefix}scalar_mix_{k}.gamma"] = np.array([1.0], "float32")
        for j in range(lstm["n_layers"] + 1):
            state[f"{prefix}scalar_mix_{k}.scalar_parameters.{j}"] = np.array([0.0], "float32")
    return OrderedDict((key, torch.tensor(np.ascontiguousarray(value), dtype=torch.float32))
                       for key, value in state.items())


def scrambled(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` with every parameter overwritten by noise: a load must bring all of them back."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p))
    return module


def test_state_dict_has_allennlps_keys_shapes_order_and_values():
    theirs = allennlp_state_dict(n_mixes=2)
    ours = Elmo(OPTIONS, WEIGHTS, 2).state_dict()
    assert list(ours) == list(theirs)
    for key, value in theirs.items():
        assert ours[key].shape == value.shape, key
        # The forget gate's +1 moves from the run time into the bias: float rounding only.
        torch.testing.assert_close(ours[key], value, rtol=0, atol=1e-6, msg=key)


def test_allennlp_state_dict_loads_strictly_and_gives_the_library_loaders_numbers():
    reference = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, state="reset")
    with torch.no_grad():
        for k, value in enumerate((0.5, -1.0, 2.0)):
            reference.scalar_mix_0.scalar_parameters[k].fill_(value)
        reference.scalar_mix_0.gamma.fill_(0.75)
    theirs = allennlp_state_dict()
    for k, value in enumerate((0.5, -1.0, 2.0)):
        theirs[f"scalar_mix_0.scalar_parameters.{k}"] = torch.tensor([value])
    theirs["scalar_mix_0.gamma"] = torch.tensor([0.75])

    loaded = scrambled(Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, state="reset"))
    result = loaded.load_state_dict(theirs, strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    ids = batch_to_ids(SENTENCES)
    got, want = loaded(ids), reference(ids)
    torch.testing.assert_close(got["elmo_representations"][0], want["elmo_representations"][0], rtol=0, atol=1e-5)
    assert torch.equal(got["mask"], want["mask"])
    # The same keys are what AllenNLP's strict load of the drop-in's state_dict checks.
    assert set(loaded.state_dict()) == set(theirs)


def test_a_strict_load_with_a_missing_or_misshapen_allennlp_key_fails_naming_it():
    theirs = allennlp_state_dict()
    del theirs["_elmo_lstm._elmo_lstm.backward_layer_1.state_projection.weight"]
    with pytest.raises(RuntimeError, match=r"Missing key.*backward_layer_1\.state_projection\.weight"):
        Elmo(OPTIONS, WEIGHTS, 1).load_state_dict(theirs, strict=True)
    del theirs["_elmo_lstm._token_embedder._highways._layers.1.bias"]
    result = Elmo(OPTIONS, WEIGHTS, 1).load_state_dict(theirs, strict=False)
    assert sorted(result.missing_keys) == ["_elmo_lstm._elmo_lstm.backward_layer_1.state_projection.weight",
                                           "_elmo_lstm._token_embedder._highways._layers.1.bias"]
    theirs = allennlp_state_dict()
    theirs["_elmo_lstm._token_embedder._highways._layers.0.weight"] = torch.zeros(3, 3)
    with pytest.raises(RuntimeError, match=r"size mismatch for _elmo_lstm\._token_embedder\._highways\._layers\.0"):
        Elmo(OPTIONS, WEIGHTS, 1).load_state_dict(theirs, strict=True)


def test_lower_level_modules_use_allennlps_names():
    encoder = _ElmoCharacterEncoder(OPTIONS, WEIGHTS)
    want = {k[len("_elmo_lstm._token_embedder."):]: v for k, v in allennlp_state_dict().items()
            if k.startswith("_elmo_lstm._token_embedder.")}
    assert list(encoder.state_dict()) == list(want)
    scrambled(encoder).load_state_dict(want, strict=True)
    ids = batch_to_ids(SENTENCES)
    torch.testing.assert_close(encoder(ids)["token_embedding"],
                               _ElmoCharacterEncoder(OPTIONS, WEIGHTS)(ids)["token_embedding"], rtol=0, atol=1e-6)
    assert encoder._char_embedding_weights is encoder._token_encoder.char_embedding.weight
    assert encoder._projection.weight.shape == (16, 124) and len(encoder._convolutions) == 5

    bilm = _ElmoBiLm(OPTIONS, WEIGHTS)
    want = {k[len("_elmo_lstm."):]: v for k, v in allennlp_state_dict().items() if k.startswith("_elmo_lstm.")}
    assert list(bilm.state_dict()) == list(want)


def test_allennlp_layouts_compute_what_allennlp_computes():
    """AllenNLP's highway and LSTM cell, written out from its source, on the drop-in's state_dict,
    against the library's modules."""
    bilm = _ElmoBiLm(OPTIONS, WEIGHTS).bilm
    state = Elmo(OPTIONS, WEIGHTS, 1).state_dict()
    torch.manual_seed(3)

    x = torch.randn(5, 124)
    layer = state["_elmo_lstm._token_embedder._highways._layers.0.weight"], \
        state["_elmo_lstm._token_embedder._highways._layers.0.bias"]
    nonlinear, gate = torch.nn.functional.linear(x, *layer).chunk(2, dim=-1)
    gate = torch.sigmoid(gate)
    allennlp_highway = gate * x + (1 - gate) * torch.relu(nonlinear)
    torch.testing.assert_close(allennlp_highway, bilm.token_encoder.highways[0](x), rtol=0, atol=1e-6)

    cell = "_elmo_lstm._elmo_lstm.backward_layer_1."
    inputs, h, c = torch.randn(5, 16), torch.randn(5, 16), torch.randn(5, 64)
    gates = (inputs @ state[cell + "input_linearity.weight"].t() + h @ state[cell + "state_linearity.weight"].t()
             + state[cell + "state_linearity.bias"])
    i, f, j, o = (torch.sigmoid(gates[:, :64]), torch.sigmoid(gates[:, 64:128]), torch.tanh(gates[:, 128:192]),
                  torch.sigmoid(gates[:, 192:]))
    memory = (i * j + f * c).clamp(-3, 3)
    allennlp_h = (o * torch.tanh(memory) @ state[cell + "state_projection.weight"].t()).clamp(-3, 3)
    layer = bilm.backward_layers[1]
    c_ours, h_ours = lstm_step(layer, inputs @ layer.input_weight.t() + layer.bias, (c, h))
    torch.testing.assert_close(memory, c_ours, rtol=0, atol=1e-5)
    torch.testing.assert_close(allennlp_h, h_ours, rtol=0, atol=1e-5)


def test_scalar_parameters_are_allennlps_and_train():
    elmo = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0)
    params = elmo.scalar_mix_0.scalar_parameters
    assert len(params) == 3 and all(p.shape == (1,) and p.requires_grad for p in params)
    elmo(batch_to_ids(SENTENCES))["elmo_representations"][0].sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in params)
    assert elmo.scalar_mix_0.gamma.grad is not None
    fixed = Elmo(OPTIONS, WEIGHTS, 1, scalar_mix_parameters=[1.0, 2.0, 3.0])
    assert [p.item() for p in fixed.scalar_mix_0.scalar_parameters] == [1.0, 2.0, 3.0]
    assert not any(p.requires_grad for p in fixed.scalar_mix_0.parameters())


def test_cached_vocabulary_table_in_an_allennlp_state_dict_loads():
    vocab = ["@@PADDING@@", "The", "cat"]
    theirs = allennlp_state_dict()
    theirs["_elmo_lstm._word_embedding.weight"] = torch.randn(len(vocab), 16)  # AllenNLP's cached CNN table
    elmo = Elmo(OPTIONS, WEIGHTS, 1, vocab_to_cache=vocab)
    elmo.load_state_dict(theirs, strict=True)
    assert "_elmo_lstm._word_embedding.weight" in theirs  # the caller's dict is not changed


def test_state_dicts_in_the_library_names_of_earlier_versions_still_load():
    fresh = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, state="reset")
    bilm = fresh._elmo_lstm.bilm
    old = OrderedDict()
    for key, value in bilm.token_encoder.state_dict().items():
        old[f"_elmo_lstm._token_embedder._token_encoder.{key}"] = value
    for direction in ("forward", "backward"):
        for key, value in getattr(bilm, f"{direction}_layers").state_dict().items():
            old[f"_elmo_lstm._elmo_lstm.{direction}_layers.{key}"] = value
    old["scalar_mix_0.scalars"] = torch.tensor([0.1, 0.2, 0.3])
    old["scalar_mix_0.gamma"] = torch.tensor([2.0])
    loaded = scrambled(Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, state="reset"))
    loaded.load_state_dict(old, strict=True)
    assert [round(p.item(), 6) for p in loaded.scalar_mix_0.scalar_parameters] == [0.1, 0.2, 0.3]
    ids = batch_to_ids(SENTENCES)
    torch.testing.assert_close(loaded._elmo_lstm(ids)["activations"][2], fresh._elmo_lstm(ids)["activations"][2],
                               rtol=0, atol=1e-6)


# ---------------------------------------------------------------------------- ElmoTokenEmbedder
def test_token_embedder_shapes_names_and_gradients():
    from elmo.allennlp import ElmoTokenEmbedder

    ids = batch_to_ids(SENTENCES)
    plain = ElmoTokenEmbedder(OPTIONS, WEIGHTS, dropout=0.0, state="reset")
    assert plain.get_output_dim() == 32 and plain(ids).shape == (3, 7, 32)
    embedder = ElmoTokenEmbedder(OPTIONS, WEIGHTS, dropout=0.0, requires_grad=True, projection_dim=5,
                                 state="reset")
    assert embedder.get_output_dim() == 5
    out = embedder(ids)
    assert out.shape == (3, 7, 5)
    assert embedder(ids.reshape(1, 3, 7, 50)).shape == (1, 3, 7, 5)  # leading dimensions kept
    # What AllenNLP computes: Elmo's one representation, then the projection.
    torch.testing.assert_close(out, embedder._projection(plain(ids)), rtol=0, atol=1e-5)
    out.pow(2).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in embedder.parameters()), \
        [name for name, p in embedder.named_parameters() if p.grad is None or p.grad.abs().sum() == 0]

    frozen = ElmoTokenEmbedder(OPTIONS, WEIGHTS, dropout=0.0, projection_dim=5, state="reset")
    frozen(ids).sum().backward()
    trained = {name for name, p in frozen.named_parameters() if p.grad is not None}
    assert trained == {"_projection.weight", "_projection.bias", "_elmo.scalar_mix_0.gamma",
                       "_elmo.scalar_mix_0.scalar_parameters.0", "_elmo.scalar_mix_0.scalar_parameters.1",
                       "_elmo.scalar_mix_0.scalar_parameters.2"}
    keys = list(frozen.state_dict())
    assert keys[0] == "_elmo._elmo_lstm._token_embedder._char_embedding_weights"
    assert keys[-2:] == ["_projection.weight", "_projection.bias"]
    theirs = allennlp_state_dict(prefix="_elmo.")
    theirs["_projection.weight"], theirs["_projection.bias"] = torch.zeros(5, 32), torch.ones(5)
    scrambled(frozen).load_state_dict(theirs, strict=True)
    assert torch.equal(frozen(ids), torch.ones(3, 7, 5))
