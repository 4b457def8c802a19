"""Every bilm-tf-layout file this library writes is read the way AllenNLP and bilm-tf read it.

The two readers below index exactly the keys and datasets their loaders index, expecting the
types they use (read from AllenNLP 2.10's ``allennlp/modules/elmo.py`` ``_ElmoCharacterEncoder``
and ``_ElmoBiLm``, ``elmo_lstm.py`` ``ElmoLstm.load_weights``, and bilm-tf's ``bilm/model.py``
``BidirectionalLanguageModelGraph``): a missing key is a KeyError there and an AssertionError here.
"""

import json

import h5py
import numpy as np
import torch
from conftest import ALLENNLP

from elmo import BiLM, BiLMConfig, CharCNNConfig, Embedder, LSTMConfig, save_bilm_tf
from elmo.hub import load_model
from elmo.hub.checkpoints import export_language_model
from elmo.hub.convert import convert_model
from elmo.hub.manylangs import save_manylangs
from elmo.hub.pretrained import packaged_model_dir
from elmo.model.vocab import Vocabulary
from elmo.model.weights import bilm_tf_reader_notes
from elmo.lm.model import LanguageModel


def _number_or_none(value) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def allennlp_reads(options_path, weights_path) -> None:
    """What AllenNLP's ``Elmo``/``ElmoEmbedder`` do with the pair, short of computing."""
    options = json.loads(open(options_path, encoding="utf-8").read())  # json.load, as they do
    lstm, cnn = options["lstm"], options["char_cnn"]
    assert lstm.get("use_skip_connections"), "_ElmoBiLm refuses biLMs without residual connections"
    for key in ("projection_dim", "dim", "n_layers"):
        assert _int(lstm[key]), f"lstm.{key}"
    # ElmoLstm(memory_cell_clip_value=options["lstm"]["cell_clip"], ...): indexed, Optional[float]
    assert _number_or_none(lstm["cell_clip"]) and _number_or_none(lstm["proj_clip"])
    assert cnn["max_characters_per_token"] == 50  # viewed as (-1, 50): its ELMoCharacterMapper's width
    assert cnn["activation"] in ("tanh", "relu")
    assert _int(cnn["embedding"]["dim"]) and _int(cnn["n_highway"])
    filters = cnn["filters"]
    assert all(len(f) == 2 and _int(f[0]) and _int(f[1]) for f in filters)
    n_filters, proj, dim, char_dim = sum(f[1] for f in filters), lstm["projection_dim"], lstm["dim"], cnn["embedding"]["dim"]
    with h5py.File(weights_path, "r") as fin:
        assert fin["char_embed"][...].shape == (261, char_dim)  # indexed with byte ids 0..261 after its zero row
        for i, (width, num) in enumerate(filters):
            w = np.transpose(fin["CNN"][f"W_cnn_{i}"][...].squeeze(axis=0), axes=(2, 1, 0))
            assert w.shape == (num, char_dim, width), "Invalid weight file"
            assert fin["CNN"][f"b_cnn_{i}"][...].shape == (num,)
        for k in range(cnn["n_highway"]):
            high = fin[f"CNN_high_{k}"]
            weight = np.concatenate([high["W_transform"][...].T, -1.0 * high["W_carry"][...].T], axis=0)
            assert weight.shape == (2 * n_filters, n_filters)
            assert np.concatenate([high["b_transform"][...], high["b_carry"][...]]).shape == (2 * n_filters,)
        # Always a Linear(n_filters, projection_dim), always loaded from CNN_proj.
        assert fin["CNN_proj"]["W_proj"][...].T.shape == (proj, n_filters)
        assert fin["CNN_proj"]["b_proj"][...].shape == (proj,)
        for layer in range(lstm["n_layers"]):
            for direction in range(2):
                cell = fin[f"RNN_{direction}"]["RNN"]["MultiRNNCell"][f"Cell{layer}"]["LSTMCell"]
                assert cell["W_0"][...].T.shape == (4 * dim, proj + proj)
                assert cell["B"][...].shape == (4 * dim,)
                assert cell["W_P_0"][...].T.shape == (proj, dim)


def bilm_tf_reads(options_path, weights_path) -> None:
    """What bilm-tf's ``BidirectionalLanguageModel`` does with the pair, short of computing."""
    options = json.loads(open(options_path, encoding="utf-8").read())
    lstm, cnn = options["lstm"], options["char_cnn"]
    proj, dim = lstm["projection_dim"], lstm["dim"]
    filters = cnn["filters"]
    n_filters = sum(f[1] for f in filters)
    assert _int(cnn["max_characters_per_token"]) and _int(cnn["embedding"]["dim"])
    assert cnn["n_characters"] == 262, "InvalidNumberOfCharacters: Set n_characters=262 after training"
    assert cnn["activation"] in ("tanh", "relu")
    n_highway = cnn.get("n_highway")
    n_layers = lstm.get("n_layers", 1)
    assert _number_or_none(lstm.get("cell_clip")) and _number_or_none(lstm.get("proj_clip"))
    assert isinstance(lstm["use_skip_connections"], bool)
    use_proj = n_filters != proj
    if use_proj:
        assert n_filters > proj
    assert proj < dim, "bilm-tf builds no LSTM projection otherwise"
    # Its custom getter maps each variable to a dataset of the same name and shape.
    needed = {"char_embed": (261, cnn["embedding"]["dim"])}
    for i, (width, num) in enumerate(filters):
        needed[f"CNN/W_cnn_{i}"] = (1, width, cnn["embedding"]["dim"], num)
        needed[f"CNN/b_cnn_{i}"] = (num,)
    for k in range(n_highway or 0):
        for name, shape in (("W_carry", (n_filters, n_filters)), ("b_carry", (n_filters,)),
                            ("W_transform", (n_filters, n_filters)), ("b_transform", (n_filters,))):
            needed[f"CNN_high_{k}/{name}"] = shape
    if use_proj:
        needed["CNN_proj/W_proj"], needed["CNN_proj/b_proj"] = (n_filters, proj), (proj,)
    for direction in range(2):
        for layer in range(n_layers):
            prefix = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            needed[f"{prefix}/W_0"], needed[f"{prefix}/B"] = (proj + proj, 4 * dim), (4 * dim,)
            needed[f"{prefix}/W_P_0"] = (dim, proj)
    with h5py.File(weights_path, "r") as fin:
        for name, shape in needed.items():
            assert fin[name].shape == shape, name


def random_model(cell_clip=3.0, proj_clip=3.0, filters=((1, 4), (2, 8), (3, 20)), n_characters=262) -> BiLM:
    torch.manual_seed(1)
    config = BiLMConfig(char_cnn=CharCNNConfig(embedding_dim=4, filters=list(filters), n_highway=1,
                                               n_characters=n_characters),
                        lstm=LSTMConfig(dim=32, projection_dim=8, n_layers=2, cell_clip=cell_clip, proj_clip=proj_clip))
    model = BiLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model


SENTENCES = [["a", "test", "of", "readers"], ["ünïcode", "too"]]


def exports(tmp_path):
    """(name, options path, weights path, the model it came from or None) of every writer."""
    out = []
    for name, model in (("clipped", random_model()), ("no clipping", random_model(None, None)),
                        ("training-style 261 characters", random_model(n_characters=261)),
                        ("filters equal projection", random_model(filters=((1, 4), (2, 4))))):
        folder = tmp_path / name.replace(" ", "-")
        out.append((f"save_bilm_tf, {name}", *save_bilm_tf(model, folder), model))
    lm = LanguageModel(random_model(None, None).config, 5)
    export_language_model(lm, Vocabulary(["<S>", "</S>", "<UNK>", "a", "b"]), tmp_path / "export")
    out.append(("export_language_model (elmo export)", tmp_path / "export" / "options.json",
                tmp_path / "export" / "weights.hdf5", lm.bilm))
    packaged = packaged_model_dir()
    out.append(("the packaged default model", packaged / "options.json", packaged / "weights.hdf5", None))
    convert_model((ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5"), tmp_path / "converted")
    out.append(("elmo convert of a bilm-tf pair", tmp_path / "converted" / "options.json",
                tmp_path / "converted" / "weights.hdf5", None))
    from test_manylangs import ascii_dictionary_model

    save_manylangs(ascii_dictionary_model(), tmp_path / "theirs")
    convert_model(str(tmp_path / "theirs"), tmp_path / "from-manylangs")
    out.append(("elmo convert of an ELMoForManyLangs model", tmp_path / "from-manylangs" / "options.json",
                tmp_path / "from-manylangs" / "weights.hdf5", None))
    return out


def test_every_export_reads_in_allennlp_and_bilm_tf(tmp_path):
    for name, options, weights, model in exports(tmp_path):
        allennlp_reads(options, weights)
        bilm_tf_reads(options, weights)
        # ... and in this library, to the same numbers as the model that was written.
        if model is not None:
            want = Embedder(model, state="reset").embed_sentences(SENTENCES)
            got = Embedder(load_model((options, weights)), state="reset").embed_sentences(SENTENCES)
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a, b, err_msg=name)


def test_no_clipping_is_written_as_null(tmp_path):
    options, _ = save_bilm_tf(random_model(None, None), tmp_path)
    text = open(options, encoding="utf-8").read()
    assert '"cell_clip": null' in text and '"proj_clip": null' in text
    assert load_model((options, tmp_path / "weights.hdf5")).config.lstm.cell_clip is None


def test_allennlp_projection_of_a_model_without_one_is_the_identity(tmp_path):
    model = random_model(filters=((1, 4), (2, 4)))  # 8 filters, projection_dim 8: bilm-tf has no projection
    assert model.token_encoder.projection is None
    _, weights = save_bilm_tf(model, tmp_path)
    with h5py.File(weights, "r") as f:
        assert np.array_equal(f["CNN_proj/W_proj"][...], np.eye(8)) and not f["CNN_proj/b_proj"][...].any()


def test_reader_notes_name_what_other_readers_cannot_do():
    config = random_model().config
    assert bilm_tf_reader_notes(config) == []
    config.lstm.use_skip_connections = False
    config.lstm.projection_dim = 64
    notes = bilm_tf_reader_notes(config)
    assert any("AllenNLP refuses biLMs without residual connections" in n for n in notes)
    assert any("projection_dim (64) is not below dim (32)" in n for n in notes)
    assert any("n_filters > projection_dim" in n for n in notes)
