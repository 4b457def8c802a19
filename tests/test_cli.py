"""``elmo embed`` end to end, as a user runs it."""

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
from conftest import ALLENNLP, fixture_batches, top_as_fixture

from elmo.cli.main import main

MODEL_ARGS = ["--options", str(ALLENNLP / "options.json"), "--weights", str(ALLENNLP / "lm_weights.hdf5")]


def test_stateful_cli_reproduces_fixture_and_layout(tmp_path):
    batches = fixture_batches("allennlp")
    lines = [" ".join(tokens) for batch, _ in batches for tokens in batch]
    expected = [e for _, exp in batches for e in exp]
    src = tmp_path / "input.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    # A real subprocess through the installed console script's module.
    result = subprocess.run([sys.executable, "-m", "elmo.cli.main", "embed", str(src), str(out), *MODEL_ARGS,
                             "--layers", "all", "--batch-size", "3", "--state", "stateful"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    with h5py.File(out, "r") as f:
        assert sorted(f.keys(), key=lambda k: (len(k), k)) == [str(i) for i in range(30)] + ["sentence_to_index"]
        index = json.loads(f["sentence_to_index"][0])
        assert f["sentence_to_index"].shape == (1,)
        for i, line in enumerate(lines):
            assert index[line] == str(i)
            data = f[str(i)]
            assert data.dtype == np.float32 and data.shape == (3, len(line.split()), 32)
            np.testing.assert_allclose(top_as_fixture(data[...]), expected[i], atol=1e-5, rtol=0)
    assert os.listdir(tmp_path) == ["input.txt", "out.hdf5"] or sorted(os.listdir(tmp_path)) == ["input.txt", "out.hdf5"]


@pytest.mark.parametrize("layers", ["top", "average"])
def test_single_vector_layers_and_empty_line(tmp_path, layers):
    src = tmp_path / "in.txt"
    src.write_text("a short line\n\nanother one here .\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    assert main(["embed", str(src), str(out), *MODEL_ARGS, "--layers", layers]) == 0
    with h5py.File(out, "r") as f:
        assert f["0"].shape == (3, 32)
        assert f["1"].shape == (0, 32)
        assert f["2"].shape == (4, 32)
        assert json.loads(f["sentence_to_index"][0]) == {"a short line": "0", "": "1", "another one here .": "2"}


def test_gzip_input(tmp_path):
    import gzip
    src = tmp_path / "in.txt.gz"
    with gzip.open(src, "wt", encoding="utf-8") as f:
        f.write("compressed input works\n")
    out = tmp_path / "out.hdf5"
    assert main(["embed", str(src), str(out), *MODEL_ARGS]) == 0
    with h5py.File(out, "r") as f:
        assert f["0"].shape == (3, 3, 32)


def test_invalid_utf8_names_the_line_and_writes_nothing(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_bytes(b"fine line\nanother fine line\nbroken \xff\xfe line\n")
    out = tmp_path / "out.hdf5"
    assert main(["embed", str(src), str(out), *MODEL_ARGS]) == 2
    err = capsys.readouterr().err
    assert f"{src}:3: not valid UTF-8" in err
    assert sorted(os.listdir(tmp_path)) == ["in.txt"]  # no output, no temporary left behind


def test_existing_output_survives_a_failed_run(tmp_path):
    src = tmp_path / "in.txt"
    src.write_bytes(b"ok\n\xff\n")
    out = tmp_path / "out.hdf5"
    out.write_bytes(b"previous results")
    assert main(["embed", str(src), str(out), *MODEL_ARGS]) == 2
    assert out.read_bytes() == b"previous results"


def test_bad_model_files_are_reported(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("x\n")
    bad_options = tmp_path / "options.json"
    bad_options.write_text('{"lstm": {"dim": 8, "projection_dim": 4, "n_layers": 1}, "char_cnn": {}}')
    code = main(["embed", str(src), str(tmp_path / "o.hdf5"), "--options", str(bad_options),
                 "--weights", str(ALLENNLP / "lm_weights.hdf5")])
    assert code == 2
    assert "options.json: char_cnn.embedding: missing" in capsys.readouterr().err
    code = main(["embed", str(tmp_path / "missing.txt"), str(tmp_path / "o.hdf5"), *MODEL_ARGS])
    assert code == 2
    assert "missing.txt" in capsys.readouterr().err


def test_batch_size_must_be_positive(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("x\n")
    assert main(["embed", str(src), str(tmp_path / "o.hdf5"), *MODEL_ARGS, "--batch-size", "0"]) == 2
    assert "--batch-size" in capsys.readouterr().err


def test_cache_vocab_then_embed_with_it(tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("the\ncat\nsat\n")
    cache = tmp_path / "cache.hdf5"
    assert main(["cache-vocab", str(words), str(cache), *MODEL_ARGS]) == 0
    src = tmp_path / "in.txt"
    src.write_text("the cat sat on a mat\n")
    plain, cached = tmp_path / "plain.hdf5", tmp_path / "cached.hdf5"
    assert main(["embed", str(src), str(plain), *MODEL_ARGS]) == 0
    assert main(["embed", str(src), str(cached), *MODEL_ARGS, "--vocab-cache", str(cache),
                 "--precision", "float32", "--max-tokens", "64"]) == 0
    with h5py.File(plain, "r") as a, h5py.File(cached, "r") as b:
        np.testing.assert_allclose(a["0"][...], b["0"][...], atol=1e-5, rtol=0)
    assert main(["embed", str(src), str(tmp_path / "bf.hdf5"), *MODEL_ARGS, "--precision", "bfloat16"]) == 0


def test_absurd_or_binary_options_get_one_line(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("a b\n")
    options = json.loads((ALLENNLP / "options.json").read_text())
    options["lstm"]["dim"] = 10**9
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps(options))
    weights = str(ALLENNLP / "lm_weights.hdf5")
    assert main(["embed", str(src), "--options", str(huge), "--weights", weights]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "huge.json: lstm.dim: 1000000000 makes a biLM of" in err and "GiB" in err
    assert main(["embed", str(src), "--options", weights, "--weights", weights]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "lm_weights.hdf5: not an options.json: this is an HDF5 file" in err
