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


# ---------------------------------------------------------------- issue 60: options that mean nothing
@pytest.mark.parametrize("edit, field", [
    (lambda o: o["lstm"].update(cell_clip=float("nan")), "lstm.cell_clip"),
    (lambda o: o["lstm"].update(proj_clip=float("nan")), "lstm.proj_clip"),
    (lambda o: o["lstm"].update(proj_clip=float("-inf")), "lstm.proj_clip"),
    (lambda o: o.update(dropout=float("nan")), "dropout"),
    (lambda o: o.update(learning_rate=float("nan")), "learning_rate"),
    (lambda o: o.update(learning_rate=float("inf")), "learning_rate"),
    (lambda o: o.update(all_clip_norm_val=float("nan")), "all_clip_norm_val"),
    (lambda o: o.update(weight_decay=-float("inf")), "weight_decay"),
    (lambda o: o.update(learning_rate=10**400), "learning_rate"),
])
def test_non_finite_numbers_are_refused_naming_the_field(tmp_path, edit, field):
    """Before, "cell_clip": NaN passed ("NaN <= 0" is false) and every vector written was NaN."""
    options = json.loads((ALLENNLP / "options.json").read_text())
    edit(options)
    path = tmp_path / "options.json"
    path.write_text(json.dumps(options))  # Python writes NaN and Infinity as JSON5 does, as bilm-tf's files may
    with pytest.raises(ConfigError) as caught:
        BiLMConfig.from_json(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {field}: ") and "\n" not in message and len(message) < 300, message


def test_an_infinite_clip_means_no_clipping_and_is_written_back_as_null():
    options = json.loads((ALLENNLP / "options.json").read_text())
    options["lstm"]["proj_clip"] = float("inf")
    config = BiLMConfig.from_bytes(json.dumps(options).encode(), "options.json")
    assert config.lstm.proj_clip is None and config.to_dict()["lstm"]["proj_clip"] is None


@pytest.mark.parametrize("edit, field", [
    (lambda o: o["lstm"].update(dim=10**400), "lstm.dim"),
    (lambda o: o["char_cnn"].update(n_highway=10**400), "char_cnn.n_highway"),
    (lambda o: o.update(n_epochs=-10**400), "n_epochs"),
])
def test_a_400_digit_integer_is_one_line_not_an_overflow(edit, field):
    """Before, formatting the refusal of a 400-digit size raised OverflowError."""
    options = json.loads((ALLENNLP / "options.json").read_text())
    edit(options)
    with pytest.raises(ConfigError) as caught:
        BiLMConfig.from_dict(options)
    message = str(caught.value)
    assert message.startswith(f"{field}: ") and len(message) < 400 and ("10^4" in message or "401 digits" in message), \
        message


def test_deeply_nested_or_huge_options_are_refused_naming_the_file(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"lstm": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ConfigError, match=r"deep\.json: not an options\.json: its JSON is nested too deeply"):
        BiLMConfig.from_json(deep)
    huge = tmp_path / "huge.json"
    huge.write_text('{"lstm": "' + "x" * (2 << 20) + '"}')
    with pytest.raises(ConfigError, match=r"huge\.json: not an options\.json: more than 1 MiB"):
        BiLMConfig.from_json(huge)


def test_a_model_the_memory_cannot_hold_is_refused_before_allocating(tmp_path, monkeypatch, capsys):
    """Before, a biLM under the 32 GiB ceiling but larger than the machine's memory failed inside
    the allocation (RuntimeError: can't allocate memory) after gigabytes of it."""
    import elmo.model.network as bilm_module
    from elmo import BiLM
    from elmo.cli.main import main

    monkeypatch.setattr(bilm_module, "available_memory", lambda: 2**10)  # 1 KiB left
    config = BiLMConfig.from_json(ALLENNLP / "options.json")
    with pytest.raises(ConfigError, match=r"these options describe a biLM of [\d,]+ parameters, [\d.]+ KiB in "
                                          r"float32, which does not fit in this machine's memory \(1 KiB is available\)"):
        BiLM(config)
    text = tmp_path / "in.txt"
    text.write_text("a b\n")
    assert main(["embed", str(text), str(tmp_path / "out.hdf5"), "--options", str(ALLENNLP / "options.json"),
                 "--weights", str(ALLENNLP / "lm_weights.hdf5")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"elmo embed: error: {ALLENNLP / 'options.json'}: these options "
                                               "describe a biLM"), err
    monkeypatch.setattr(bilm_module, "available_memory", lambda: None)  # not Linux: nothing to check against
    BiLM(config)


def test_available_memory_reads_the_address_space_limit():
    import subprocess
    import sys

    # The limit is set after the import, at 1 GiB above what the process already maps: importing
    # PyTorch maps more than 3 GiB on some CPUs (an AMX Xeon's), where a fixed limit made it abort.
    code = ("import resource; from elmo.devices import available_memory; "
            "size = next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmSize:')); "
            "resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 30), resource.RLIM_INFINITY)); "
            "print(available_memory())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert 0 < int(out) <= 1 << 30
