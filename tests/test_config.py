import json

import pytest
from conftest import ALLENNLP, BILM_TF

from elmo import BiLMConfig, ConfigError


@pytest.mark.parametrize("folder", [ALLENNLP, BILM_TF])
def test_options_round_trip_exactly(folder, tmp_path):
    original = json.loads((folder / "options.json").read_text())
    config = BiLMConfig.from_json(folder / "options.json")
    assert config.to_dict() == original
    config.to_json(tmp_path / "options.json")
    assert json.loads((tmp_path / "options.json").read_text()) == original


def test_reads_fields_and_training_section():
    options = json.loads((ALLENNLP / "options.json").read_text())
    options.update({"n_tokens_vocab": 458, "unroll_steps": 20, "dropout": 0.1, "batch_size": 128})
    config = BiLMConfig.from_dict(options)
    assert config.char_cnn.filters == [(1, 4), (2, 8), (3, 16), (4, 32), (5, 64)]
    assert config.char_cnn.n_filters == 124
    assert config.lstm.use_skip_connections is True
    assert config.output_dim == 32 and config.n_output_layers == 3
    assert config.training["unroll_steps"] == 20
    assert BiLMConfig.from_dict(config.to_dict()) == config


def test_missing_clip_means_no_clipping():
    options = json.loads((ALLENNLP / "options.json").read_text())
    del options["lstm"]["cell_clip"]
    config = BiLMConfig.from_dict(options)
    assert config.lstm.cell_clip is None
    # Written as null, not left out: AllenNLP indexes options["lstm"]["cell_clip"] (issue 39).
    assert config.to_dict()["lstm"]["cell_clip"] is None
    assert BiLMConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize("edit, field", [
    (lambda o: o.update(vocab_size=3), "vocab_size"),
    (lambda o: o["lstm"].update(hidden=3), "lstm.hidden"),
    (lambda o: o["char_cnn"].update(activation="gelu"), "char_cnn.activation"),
    (lambda o: o["char_cnn"].update(n_characters=300), "char_cnn.n_characters"),
    (lambda o: o["char_cnn"].update(filters=[[1, 4], [2]]), "char_cnn.filters[1]"),
    (lambda o: o["char_cnn"].update(filters=[[60, 4]]), "char_cnn.filters[0]"),
    (lambda o: o["lstm"].update(n_layers=0), "lstm.n_layers"),
    (lambda o: o["lstm"].update(dim="64"), "lstm.dim"),
    (lambda o: o["lstm"].update(use_skip_connections=1), "lstm.use_skip_connections"),
    (lambda o: o["lstm"].update(cell_clip=-1), "lstm.cell_clip"),
    (lambda o: o["lstm"].pop("projection_dim"), "lstm.projection_dim"),
    (lambda o: o.pop("char_cnn"), "char_cnn"),
    (lambda o: o["char_cnn"]["embedding"].update(dim=0), "char_cnn.embedding.dim"),
    (lambda o: o.update(dropout=1.5), "dropout"),
    (lambda o: o.update(bidirectional=False), "bidirectional"),
])
def test_bad_field_is_named(edit, field):
    options = json.loads((ALLENNLP / "options.json").read_text())
    edit(options)
    with pytest.raises(ConfigError) as error:
        BiLMConfig.from_dict(options)
    assert str(error.value).startswith(field)


def test_any_number_of_layers_is_valid():
    options = json.loads((ALLENNLP / "options.json").read_text())
    for n in (1, 3, 4):
        options["lstm"]["n_layers"] = n
        assert BiLMConfig.from_dict(options).n_output_layers == n + 1


def test_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "options.json"
    bad.write_text('{"lstm": {,}')
    with pytest.raises(ConfigError, match=r"options.json: not valid JSON \(line 1"):
        BiLMConfig.from_json(bad)
    bad.write_text('{"lstm": {"dim": 8, "projection_dim": 4, "n_layers": 1}}')
    with pytest.raises(ConfigError, match=r"options.json: char_cnn: missing"):
        BiLMConfig.from_json(bad)


@pytest.mark.parametrize("edit, field", [
    (lambda o: o["lstm"].update(dim=10**9), "lstm.dim"),
    (lambda o: o["lstm"].update(projection_dim=10**8), "lstm.projection_dim"),
    (lambda o: o["lstm"].update(n_layers=10**7), "lstm.n_layers"),
    (lambda o: o["char_cnn"].update(filters=[[1, 4], [2, 10**6]]), "char_cnn.filters"),
    (lambda o: o["char_cnn"]["embedding"].update(dim=10**10), "char_cnn.embedding.dim"),
])
def test_absurd_sizes_are_refused_before_anything_is_allocated(edit, field):
    options = json.loads((ALLENNLP / "options.json").read_text())
    edit(options)
    with pytest.raises(ConfigError) as caught:
        BiLMConfig.from_dict(options)
    message = str(caught.value)
    assert message.startswith(f"{field}: ") and "\n" not in message
    assert "parameters" in message and "float32" in message and "32 GiB" in message


def test_size_check_runs_before_the_model_allocates():
    from elmo import BiLM

    config = BiLMConfig()
    config.lstm.dim = 10**9  # set after construction: BiLM validates before its first tensor
    with pytest.raises(ConfigError, match=r"^lstm\.dim: 1000000000 makes a biLM of 4\.62e\+12 parameters, 18\.5 TB"):
        BiLM(config)
    # The largest published model is far inside the bound.
    from elmo.model.config import MAX_PARAMETER_BYTES, published_config

    assert published_config("original").parameter_count() == 93_600_864
    assert 4 * published_config("original").parameter_count() < MAX_PARAMETER_BYTES / 90


def test_binary_options_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"lm_weights\.hdf5: not an options\.json: this is an HDF5 file, not JSON "
                                          r"text \(the weights file\?\)"):
        BiLMConfig.from_json(ALLENNLP / "lm_weights.hdf5")
    latin = tmp_path / "latin1.json"
    latin.write_bytes('{"lstm": "caf\xe9"}'.encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.json: not an options\.json: byte 13 is not UTF-8 text"):
        BiLMConfig.from_json(latin)
