import h5py
import numpy as np
import pytest
import torch
from conftest import ALLENNLP

from elmo import BiLM, WeightsError, batch_to_char_ids, save_bilm_tf, save_checkpoint
from elmo.hub.checkpoints import load_checkpoint
from elmo.model.weights import load_bilm_tf
from elmo.model.config import BiLMConfig, published_config
from elmo.model.weights import _tf_datasets

# The numbers' promises: CI runs these again with the CPU kernels held to AVX2.
pytestmark = pytest.mark.exactness


def assert_same_parameters(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


def test_load_save_load_is_identical(allennlp_model, tmp_path):
    options, weights = save_bilm_tf(allennlp_model, tmp_path)
    again = load_bilm_tf(options, weights)
    assert_same_parameters(allennlp_model, again)
    # The written file has exactly the datasets (and values) of the original.
    with h5py.File(ALLENNLP / "lm_weights.hdf5", "r") as a, h5py.File(weights, "r") as b:
        names_a, names_b = [], []
        a.visititems(lambda n, o: names_a.append(n) if isinstance(o, h5py.Dataset) else None)
        b.visititems(lambda n, o: names_b.append(n) if isinstance(o, h5py.Dataset) else None)
        assert sorted(names_a) == sorted(names_b)
        for name in names_a:
            np.testing.assert_array_equal(a[name][...], b[name][...], err_msg=name)


@pytest.mark.parametrize("n_layers, skip, activation, filters, n_highway", [
    (1, True, "relu", [[1, 4], [3, 8]], 0),
    (3, False, "tanh", [[2, 6], [5, 10]], 1),
    (2, True, "relu", [[1, 8], [2, 8]], 2),  # 16 filters == projection_dim 16: no projection layer
])
def test_round_trip_any_valid_options(tmp_path, n_layers, skip, activation, filters, n_highway):
    config = BiLMConfig.from_dict({
        "lstm": {"dim": 24, "projection_dim": 16, "n_layers": n_layers, "cell_clip": 3, "proj_clip": 3,
                 "use_skip_connections": skip},
        "char_cnn": {"embedding": {"dim": 4}, "filters": filters, "n_highway": n_highway,
                     "activation": activation, "n_characters": 262, "max_characters_per_token": 50}})
    model = BiLM(config).eval()
    options, weights = save_bilm_tf(model, tmp_path)
    again = load_bilm_tf(options, weights).eval()
    assert_same_parameters(model, again)
    ids, mask = batch_to_char_ids([["a", "round", "trip"]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mask).layers, again(ids, mask).layers, rtol=0, atol=0)


def test_small_published_size_round_trip(tmp_path):
    model = BiLM(published_config("small"))
    options, weights = save_bilm_tf(model, tmp_path)
    with h5py.File(weights, "r") as f:
        assert f["char_embed"].shape == (261, 16)
        assert f["CNN/W_cnn_6"].shape == (1, 7, 16, 1024)
        assert f["CNN_high_0/W_carry"].shape == (2048, 2048)
        assert f["CNN_proj/W_proj"].shape == (2048, 128)
        assert f["RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_0"].shape == (256, 4096)
        assert f["RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_P_0"].shape == (1024, 128)
        assert "CNN_high_1/W_carry" not in f
    assert_same_parameters(model, load_bilm_tf(options, weights))


@pytest.mark.parametrize("name, expected", [
    ("medium", {"RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0": (512, 8192),
                "RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_P_0": (2048, 256), "CNN_proj/W_proj": (2048, 256)}),
    ("original", {"RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/W_0": (1024, 16384),
                  "RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/W_P_0": (4096, 512), "CNN_high_1/W_transform": (2048, 2048)}),
])
def test_published_sizes_expect_the_published_shapes(name, expected):
    with torch.device("meta"):  # shapes only: no memory for the big ones
        model = BiLM(published_config(name))
    shapes = {dataset: shape for dataset, shape, _, _ in _tf_datasets(model)}
    for dataset, shape in expected.items():
        assert shapes[dataset] == shape


def _copy_weights(tmp_path, edit):
    path = tmp_path / "weights.hdf5"
    with h5py.File(ALLENNLP / "lm_weights.hdf5", "r") as src, h5py.File(path, "w") as dst:
        for name in ["char_embed", "CNN", "CNN_high_0", "CNN_high_1", "CNN_proj", "RNN_0", "RNN_1"]:
            src.copy(name, dst)
        edit(dst)
    return path


def test_missing_dataset_is_named(tmp_path):
    path = _copy_weights(tmp_path, lambda f: f.__delitem__("CNN_high_1/W_carry"))
    with pytest.raises(WeightsError, match=r"dataset 'CNN_high_1/W_carry' is missing \(expected shape \(124, 124\)"):
        load_bilm_tf(ALLENNLP / "options.json", path)


def test_misshaped_dataset_is_named(tmp_path):
    def edit(f):
        del f["CNN_proj/W_proj"]
        f["CNN_proj/W_proj"] = np.zeros((124, 15), np.float32)
    path = _copy_weights(tmp_path, edit)
    with pytest.raises(WeightsError, match=r"'CNN_proj/W_proj' has shape \(124, 15\), but .*needs \(124, 16\)"):
        load_bilm_tf(ALLENNLP / "options.json", path)


def test_not_hdf5_is_reported(tmp_path):
    path = tmp_path / "weights.hdf5"
    path.write_text("not hdf5")
    with pytest.raises(WeightsError, match="cannot open as HDF5"):
        load_bilm_tf(ALLENNLP / "options.json", path)


def test_float16_storage_loads_as_float32(allennlp_model, tmp_path):
    options, weights = save_bilm_tf(allennlp_model, tmp_path, dtype="float16")
    with h5py.File(weights, "r") as f:
        assert f["CNN_proj/W_proj"].dtype == np.float16
    half = load_bilm_tf(options, weights)
    assert all(p.dtype == torch.float32 for p in half.parameters())
    for a, b in zip(allennlp_model.parameters(), half.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)


def test_native_checkpoint_round_trip(allennlp_model, tmp_path):
    path = tmp_path / "model.pt"
    save_checkpoint(allennlp_model, path, note="hello")
    model, payload = load_checkpoint(path)
    assert payload["note"] == "hello"
    assert model.config == allennlp_model.config
    assert_same_parameters(allennlp_model, model)


class _Evil:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_native_checkpoint_refuses_pickled_code(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"format": "elmo-bilm", "version": 1, "payload": _Evil()}, path)
    with pytest.raises(WeightsError, match="not a readable elmo checkpoint"):
        load_checkpoint(path)


def test_native_checkpoint_rejects_other_files(tmp_path):
    path = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, path)
    with pytest.raises(WeightsError, match="not an elmo checkpoint"):
        load_checkpoint(path)
