"""``python -m elmo.allennlp elmo``: AllenNLP's ``allennlp elmo`` command (0.9), its flags, its
HDF5 layout in each mode, its refusals and its (stateful) numbers."""

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
from conftest import ALLENNLP, fixture_batches

from elmo.allennlp import ElmoEmbedder
from elmo.allennlp.command import main

OPTIONS, WEIGHTS = str(ALLENNLP / "options.json"), str(ALLENNLP / "lm_weights.hdf5")
MODEL = ["--options-file", OPTIONS, "--weight-file", WEIGHTS]
SENTENCES = ["Michael went to the store to buy some eggs .",
             "Joel rolled down the street on his skateboard .",
             "test / this is a first sentence",
             "Take a look , then , at Tuesday 's elections in New York City , New Jersey and Virginia :"]


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "sentences.txt"
    path.write_text("".join(s + "\n" for s in SENTENCES))
    return path


def expected_arrays():
    """What AllenNLP's command computed: a fresh stateful embedder, batches of 64 in file order."""
    return list(ElmoEmbedder(OPTIONS, WEIGHTS).embed_sentences([s.split() for s in SENTENCES], 64))


@pytest.mark.parametrize("mode", ["all", "top", "average"])
def test_each_mode_writes_allennlps_layout_and_numbers(text, tmp_path, mode):
    out = tmp_path / "out.hdf5"
    assert main(["elmo", str(text), str(out), f"--{mode}", *MODEL]) == 0
    expected = expected_arrays()
    with h5py.File(out, "r") as f:
        assert set(f.keys()) == {"0", "1", "2", "3", "sentence_to_index"}
        assert json.loads(f["sentence_to_index"][0]) == {s: str(i) for i, s in enumerate(SENTENCES)}
        for i, (sentence, array) in enumerate(zip(SENTENCES, expected)):
            want = {"all": array, "top": array[2], "average": (array[0] + array[1] + array[2]) / 3}[mode]
            assert f[str(i)].dtype == np.float32
            assert f[str(i)].shape == ((3, len(sentence.split()), 32) if mode == "all" else (len(sentence.split()), 32))
            np.testing.assert_allclose(f[str(i)][...], want, atol=1e-6, rtol=0)


def test_stateful_batches_reproduce_the_fixtures(tmp_path):
    """The command embeds in batches of --batch-size lines in file order, carrying state by row:
    the fixtures' 10 batches of 3, written as one file, give the original's top layer."""
    batches = fixture_batches("allennlp")
    path = tmp_path / "fixture.txt"
    path.write_text("".join(" ".join(s) + "\n" for batch, _ in batches for s in batch))
    out = tmp_path / "out.hdf5"
    assert main(["elmo", str(path), str(out), "--top", "--batch-size", "3", "--forget-sentences", *MODEL]) == 0
    expected = [e for _, exp in batches for e in exp]
    with h5py.File(out, "r") as f:
        assert len(f.keys()) == len(expected) and "sentence_to_index" not in f
        for i, want in enumerate(expected):
            top = f[str(i)][...]
            np.testing.assert_allclose(np.stack([top[:, :16], top[:, 16:]]), want, atol=1e-5, rtol=0)


def test_use_sentence_keys_keys_by_sentence_and_writes_no_index(text, tmp_path, capsys):
    out = tmp_path / "out.hdf5"
    assert main(["elmo", str(text), str(out), "--all", "--use-sentence-keys", *MODEL]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warned) == 1 and "line 3 contain(s) '/'" in warned[0]  # it becomes nested groups
    expected = expected_arrays()
    with h5py.File(out, "r") as f:
        assert "sentence_to_index" not in f
        assert set(f.keys()) == {s.split("/")[0] for s in SENTENCES}
        for sentence, want in zip(SENTENCES, expected):
            np.testing.assert_allclose(f[sentence][...], want, atol=1e-6, rtol=0)  # f[sentence] finds each


def test_forget_sentences_and_duplicates(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("The cat sat .\nThe cat sat .\n")
    out = tmp_path / "out.hdf5"
    assert main(["elmo", str(path), str(out), "--all", *MODEL]) == 0
    with h5py.File(out, "r") as f:  # duplicates are fine with line keys; the map keeps the last
        assert set(f.keys()) == {"0", "1", "sentence_to_index"}
        assert json.loads(f["sentence_to_index"][0]) == {"The cat sat .": "1"}
    assert main(["elmo", str(path), str(out), "--top", "--forget-sentences", *MODEL]) == 0
    with h5py.File(out, "r") as f:  # an existing output is replaced, as AllenNLP's was
        assert set(f.keys()) == {"0", "1"} and f["0"].shape == (4, 32)


def test_refusals_come_before_the_model_loads_and_leave_no_output(tmp_path, capsys):
    missing_model = ["--options-file", OPTIONS, "--weight-file", str(tmp_path / "absent.hdf5")]
    blank = tmp_path / "blank.txt"
    blank.write_text("A\n\n  \nB\n")
    out = tmp_path / "out.hdf5"
    assert main(["elmo", str(blank), str(out), "--all", *missing_model]) == 2
    assert f"{blank}: lines 2, 3 are empty" in capsys.readouterr().err
    repeated = tmp_path / "repeated.txt"
    repeated.write_text("A b\nC\nA b\n")
    assert main(["elmo", str(repeated), str(out), "--all", "--use-sentence-keys", *missing_model]) == 2
    assert f"{repeated}:3: repeats line 1" in capsys.readouterr().err
    assert main(["elmo", str(repeated), str(repeated), "--all", *missing_model]) == 2
    assert "the output file is the input file" in capsys.readouterr().err
    assert not out.exists() and repeated.read_text() == "A b\nC\nA b\n"
    dot = tmp_path / "dot.txt"
    dot.write_text("A b\n.\n")
    assert main(["elmo", str(dot), str(out), "--all", "--use-sentence-keys", *MODEL]) == 2
    assert f"{dot}:2: '.' cannot be an HDF5 key" in capsys.readouterr().err
    assert not out.exists()


def test_flags_and_arguments_as_allennlp_parsed_them(text, tmp_path, capsys):
    out = str(tmp_path / "out.hdf5")
    with pytest.raises(SystemExit) as e:  # one of --all, --top, --average is required
        main(["elmo", str(text), out, *MODEL])
    assert e.value.code == 2 and "one of the arguments --all --top --average is required" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["elmo", str(text), out, "--all", "--top", *MODEL])
    with pytest.raises(SystemExit):
        main(["train", "config.json"])
    assert "invalid choice: 'train'" in capsys.readouterr().err
    assert main(["elmo", str(text), out, "--all", "--batch-size", "0", *MODEL]) == 2
    assert "--batch-size: must be at least 1" in capsys.readouterr().err
    assert main(["elmo", str(text), out, "--all", "--include-package", "no_such_package_here", *MODEL]) == 2
    assert "--include-package: cannot import 'no_such_package_here'" in capsys.readouterr().err
    assert main(["elmo", str(text), out, "--average", "--vocab-path", "v.txt", "--file-friendly-logging",
                 "--include-package", "json", "--batch-size", "2", *MODEL]) == 0
    err = capsys.readouterr().err
    assert "warning: --vocab-path is ignored" in err and "4/4" in err  # progress lines, even off a terminal
    with h5py.File(out, "r") as f:
        assert f["3"].shape == (len(SENTENCES[3].split()), 32)


def test_cuda_device_without_a_gpu_is_a_clear_error(text, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main(["elmo", str(text), str(tmp_path / "out.hdf5"), "--all", "--cuda-device", "0", *MODEL]) == 2
    assert "CUDA is not available" in capsys.readouterr().err


def test_the_module_runs_as_a_command_reading_standard_input(tmp_path):
    """`allennlp elmo` in an old script becomes `python -m elmo.allennlp elmo`, nothing else."""
    out = tmp_path / "out.hdf5"
    result = subprocess.run([sys.executable, "-m", "elmo.allennlp", "elmo", "-", str(out), "--top", *MODEL],
                            input="The cat sat .\nDogs bark\n", capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    with h5py.File(out, "r") as f:
        assert f["0"].shape == (4, 32) and f["1"].shape == (2, 32)
        assert json.loads(f["sentence_to_index"][0]) == {"The cat sat .": "0", "Dogs bark": "1"}
    help_text = subprocess.run([sys.executable, "-m", "elmo.allennlp", "elmo", "--help"], capture_output=True,
                               text=True).stdout
    for flag in ("--all", "--top", "--average", "--options-file", "--weight-file", "--batch-size", "--cuda-device",
                 "--forget-sentences", "--use-sentence-keys"):
        assert flag in help_text


def test_embed_file_with_sentence_keys_writes_no_index(tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("The cat sat .\nDogs bark\n")
    out = tmp_path / "out.hdf5"
    embedder = ElmoEmbedder(OPTIONS, WEIGHTS, state="reset")
    with open(text) as f:
        embedder.embed_file(f, str(out), output_format="average", use_sentence_keys=True)
    with h5py.File(out, "r") as f:
        assert set(f.keys()) == {"The cat sat .", "Dogs bark"}
        np.testing.assert_allclose(f["Dogs bark"][...], embedder.embed_sentence(["Dogs", "bark"]).mean(axis=0),
                                   atol=1e-6)
    text.write_text("The cat\n\nsat\n")
    with open(text) as f, pytest.raises(ValueError, match=f"{text}: line 2 is empty"):
        embedder.embed_file(f, str(tmp_path / "other.hdf5"))
    assert not (tmp_path / "other.hdf5").exists()


def test_the_migration_pages_command_example_runs(tmp_path):
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "from-allennlp.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", page, re.S | re.M)
    [command] = [body for language, body in blocks if not language and "examples/sentences.txt" in body]
    out = tmp_path / "vectors.hdf5"
    command = command.replace(" vectors.hdf5 ", f" {out} ").replace("python -m", f"{sys.executable} -m")
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=root)
    assert result.returncode == 0, result.stderr
    lines = (root / "examples" / "sentences.txt").read_text().splitlines()
    with h5py.File(out, "r") as f:
        assert set(f.keys()) == {*map(str, range(len(lines))), "sentence_to_index"}
        assert f["0"].shape == (len(lines[0].split()), 32)


def test_offline_error_names_this_commands_own_options(text, tmp_path, capsys, monkeypatch):
    """Issue 45: the error suggested --options/--weights, which this command does not take."""
    import socket

    monkeypatch.setenv("ELMO_ALLOW_HTTP", "1")
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    with socket.socket() as s:  # a port nothing listens on any more: as offline
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("ELMO_MODELS_URL", f"http://127.0.0.1:{port}")  # where the default model is fetched
    assert main(["elmo", str(text), str(tmp_path / "out.hdf5"), "--all"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m elmo.allennlp elmo: error: could not download http://127.0.0.1:{port}/"), err
    # The reason, how to install the file by hand, and where Hub copies may be.
    assert err.count("\n") == 3 and err.splitlines()[2].startswith("Copies of published ELMo models are on the "
                                                                    "Hugging Face Hub"), err
    assert "(or pass local paths as --options-file and --weight-file, to load files from elsewhere)" in err, err
    assert "--options/--weights" not in err and "from_files" not in err
    assert not (tmp_path / "out.hdf5").exists()


def test_a_folder_as_output_is_refused_before_anything_is_embedded(text, tmp_path, capsys, monkeypatch):
    (tmp_path / "out").mkdir()
    monkeypatch.setattr(ElmoEmbedder, "embed_sentences", lambda *a, **k: pytest.fail("embedded first"))
    assert main(["elmo", str(text), str(tmp_path / "out"), "--top", *MODEL]) == 2
    err = capsys.readouterr().err
    assert err == (f"python -m elmo.allennlp elmo: error: {tmp_path / 'out'}: a folder is in the way of the output "
                   "file; give a file name\n")
    assert os.listdir(tmp_path / "out") == []
    # An existing file is replaced, as AllenNLP did.
    (tmp_path / "old.hdf5").write_bytes(b"an earlier output")
    monkeypatch.undo()
    assert main(["elmo", str(text), str(tmp_path / "old.hdf5"), "--top", *MODEL]) == 0
    assert h5py.is_hdf5(tmp_path / "old.hdf5")
