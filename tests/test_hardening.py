"""No silent loss, no surprises: inputs read once (pipes and '-'), outputs never clobbered, models
never mutated, damaged weights refused, and clear one-line errors from the command line."""

import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch
from conftest import ALLENNLP, damaged_gzips, load_fixture_model
from test_train import VOCAB

from elmo import Elmo, Embedder, WeightsError
from elmo.model.weights import load_bilm_tf
from elmo.cli.main import EXIT_INTERRUPTED, main
from elmo.fileio import atomic_path, atomic_write_text, remove_stale_temporaries
from elmo.hub.checkpoints import load_checkpoint, load_softmax, save_checkpoint
from elmo.inference.runtime import Runtime

CLI = [sys.executable, "-m", "elmo.cli.main"]
FIXTURE_MODEL = ["--options", str(ALLENNLP / "options.json"), "--weights", str(ALLENNLP / "lm_weights.hdf5")]
LINES = ["The cat sat on the mat .", "Dogs bark .", "", "A third line here"]


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("".join(line + "\n" for line in LINES))
    return path


def run_cli(*args, stdin=None, shell_pipe=None):
    return subprocess.run([*CLI, *map(str, args)], input=stdin, capture_output=True, text=True)


def read_hdf5(path):
    with h5py.File(path, "r") as f:
        index = json.loads(f["sentence_to_index"][0])
        return {int(k): f[k][...] for k in f if k != "sentence_to_index"}, index


# ------------------------------------------------------------------------ inputs read once
@pytest.mark.parametrize("name", ["/dev/stdin", "-"])
def test_embed_reads_standard_input_once(tmp_path, text_file, name):
    out = tmp_path / "out.hdf5"
    result = run_cli("embed", name, out, *FIXTURE_MODEL, stdin=text_file.read_text())
    assert result.returncode == 0, result.stderr
    arrays, index = read_hdf5(out)
    assert sorted(arrays) == [0, 1, 2, 3]
    assert [arrays[i].shape[1] for i in range(4)] == [7, 3, 0, 4]
    assert "wrote 4 sentences" in result.stderr
    expected = Embedder(load_fixture_model("allennlp")).embed_sentences(LINES)
    for i in range(4):
        np.testing.assert_allclose(arrays[i], expected[i], rtol=0, atol=1e-6)


def test_embed_from_a_closed_standard_input_is_one_line(tmp_path):
    """Issue 60: `elmo embed - OUT 0<&-` raised AttributeError ('NoneType' object has no
    attribute 'buffer'): Python sets sys.stdin to None when descriptor 0 is closed."""
    result = subprocess.run([sys.executable, "-m", "elmo.cli.main", "embed", "-", str(tmp_path / "out.hdf5"),
                             *map(str, FIXTURE_MODEL)], capture_output=True, text=True, preexec_fn=lambda: os.close(0))
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "elmo embed: error: -: standard input is closed; pipe the text in (`... | elmo embed - OUT`) or give a file"]
    assert not (tmp_path / "out.hdf5").exists()


def test_embed_prints_from_standard_input_to_standard_output(text_file):
    result = run_cli("embed", "-", "-", *FIXTURE_MODEL, stdin=text_file.read_text())
    assert result.returncode == 0, result.stderr
    headers = [line for line in result.stdout.splitlines() if line.startswith("sentence ")]
    assert [h.split(":")[0] for h in headers] == ["sentence 0", "sentence 1", "sentence 2", "sentence 3"]
    assert "7 tokens" in headers[0] and "0 tokens" in headers[2]


def test_embed_file_api_reads_a_pipe_once(tmp_path, text_file):
    # A named pipe can be read only once: a second pass (e.g. counting lines first) sees nothing.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"cat {text_file} > {fifo}"])
    report = Embedder(load_fixture_model("allennlp")).embed_file(fifo, tmp_path / "out.hdf5")
    writer.wait()
    assert report.sentences == 4
    assert len(read_hdf5(tmp_path / "out.hdf5")[0]) == 4


# ------------------------------------------------------------------------ outputs not clobbered
def test_embed_refuses_to_overwrite_its_input(text_file):
    before = text_file.read_bytes()
    result = run_cli("embed", text_file, text_file, *FIXTURE_MODEL)
    assert result.returncode == 2
    assert "elmo never overwrites an input" in result.stderr  # the command line's rule, before any work
    assert text_file.read_bytes() == before


def test_embed_refuses_the_input_through_another_name(tmp_path, text_file):
    link = tmp_path / "link.txt"
    os.link(text_file, link)
    with pytest.raises(ValueError, match="the output file is the input file"):
        Embedder(load_fixture_model("allennlp")).embed_file(text_file, link, overwrite=True)


def test_embed_replaces_an_existing_output_only_with_force(tmp_path, text_file):
    out = tmp_path / "out.hdf5"
    out.write_bytes(b"precious")
    result = run_cli("embed", text_file, out, *FIXTURE_MODEL)
    assert result.returncode == 2 and "already exists" in result.stderr and "--force" in result.stderr
    assert out.read_bytes() == b"precious"
    result = run_cli("embed", text_file, out, *FIXTURE_MODEL, "--force")
    assert result.returncode == 0, result.stderr
    assert len(read_hdf5(out)[0]) == 4


def test_output_folder_is_not_created_for_a_typo(tmp_path, text_file):
    result = run_cli("embed", text_file, tmp_path / "typo" / "out.hdf5", *FIXTURE_MODEL)
    assert result.returncode == 2 and "does not exist" in result.stderr
    assert not (tmp_path / "typo").exists()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        atomic_write_text(tmp_path / "nope" / "x.txt", "x")
    atomic_write_text(tmp_path / "made" / "x.txt", "x", make_parents=True)
    assert (tmp_path / "made" / "x.txt").read_text() == "x"


def test_stale_temporaries_of_dead_processes_are_removed(tmp_path):
    target = tmp_path / "out.hdf5"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    stale = tmp_path / f"out.hdf5.elmo-tmp.{dead_pid}.{'a' * 32}.tmp"
    stale.write_bytes(b"x" * 1000)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        live = tmp_path / f"out.hdf5.elmo-tmp.{sleeper.pid}.{'b' * 32}.tmp"  # another run still writing
        live.write_bytes(b"y")
        # Not our naming, whatever they look like: never touched (a user's backup named like the
        # temporaries of earlier versions, with a dead process's id in it, included).
        foreign = [tmp_path / "out.hdf5.notes.tmp", tmp_path / f"out.hdf5.{dead_pid}.backup.tmp",
                   tmp_path / f"out.hdf5.elmo-tmp.{dead_pid}.backup.tmp"]
        for path in foreign:
            path.write_bytes(b"z")
        with atomic_path(target) as tmp:
            assert os.path.basename(tmp).startswith("out.hdf5.elmo-tmp.")
            open(tmp, "wb").write(b"new")
        assert not stale.exists()
        assert live.exists() and all(path.read_bytes() == b"z" for path in foreign)
        assert target.read_bytes() == b"new"
        assert remove_stale_temporaries(target) == []
    finally:
        sleeper.kill()
        sleeper.wait()


# ------------------------------------------------------------------------ sentences, not characters
def test_a_single_string_is_one_sentence():
    embedder = Embedder(load_fixture_model("allennlp"))
    (array,) = embedder.embed_sentences("The cat sat .")
    assert array.shape == (3, 4, 32)
    one = embedder.embed_sentence("The cat sat .")
    tokens = embedder.embed_sentence(["The", "cat", "sat", "."])
    np.testing.assert_allclose(one, array, rtol=0, atol=1e-6)
    np.testing.assert_allclose(tokens, array, rtol=0, atol=1e-6)
    assert embedder.embed_sentence("The cat sat .", layers="top").shape == (4, 32)


def test_sentences_that_are_not_text_are_rejected_clearly():
    embedder = Embedder(load_fixture_model("allennlp"))
    with pytest.raises(TypeError, match=r"sentences\[1\]: expected a string or a list of token strings"):
        embedder.embed_sentences(["fine", 42])
    with pytest.raises(TypeError, match="expected a string or a list of token strings"):
        embedder.embed_sentence([1, 2, 3])


@pytest.mark.parametrize("sentences", [{"a": 1}, {"the cat": "sat"}, {"a", "b"}, b"bytes"])
def test_a_mapping_or_set_of_sentences_is_refused_naming_its_type(sentences):
    """Issue 45: embed_sentences({"a": 1}) embedded the dict's key."""
    with pytest.raises(TypeError, match=rf"sentences: expected a list of sentences \(strings or token lists\), "
                                        rf"got {type(sentences).__name__}$"):
        Embedder(load_fixture_model("allennlp")).embed_sentences(sentences)


# ------------------------------------------------------------------------ models never mutated
def test_embedder_never_changes_the_model_it_was_handed(bfloat16_selected):  # the bfloat16 copy too
    model = load_fixture_model("allennlp").train()  # a caller's model, mid-training
    before = {k: v.clone() for k, v in model.state_dict().items()}
    first = Embedder(model)
    reference = first.embed_sentences(LINES)
    Embedder(model, precision="bfloat16").embed_sentences(LINES)
    assert model.training, "the embedder switched the caller's model to eval mode"
    assert not hasattr(model, "compute_dtype") or model.compute_dtype == torch.float32
    for name, value in model.state_dict().items():
        assert value.dtype == before[name].dtype and torch.equal(value, before[name]), name
    again = first.embed_sentences(LINES)  # the earlier embedder's outputs did not change
    for a, b in zip(again, reference):
        np.testing.assert_array_equal(a, b)


def test_runtime_shares_a_model_on_its_device_and_rejects_bad_devices():
    model = load_fixture_model("allennlp")
    assert Runtime(model, device="cpu").model is model  # same device: shared, nothing copied
    with pytest.raises(ValueError, match="not a device name"):
        Runtime(model, device="banana")
    if not torch.cuda.is_available():  # tests/test_cuda.py checks the copy onto a GPU
        with pytest.raises(ValueError, match="CUDA is not available"):
            Runtime(model, device="cuda")


def test_elmo_runs_through_the_runtime_and_gradients_reach_its_mixes():
    elmo = Elmo(load_fixture_model("allennlp"), num_output_representations=1, dropout=0.0)
    out = elmo.embed([["The", "cat", "sat", "."]])
    out.representations[0].sum().backward()
    grads = [p.grad for p in elmo.mixes[0].parameters()]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    assert all(p.grad is None for p in elmo.bilm.parameters())


# ------------------------------------------------------------------------ damaged weights
def _copy_fixture(tmp_path):
    options = tmp_path / "options.json"
    weights = tmp_path / "weights.hdf5"
    shutil.copy(ALLENNLP / "options.json", options)
    shutil.copy(ALLENNLP / "lm_weights.hdf5", weights)
    return options, weights


def test_a_weights_dataset_of_strings_is_refused_naming_it(tmp_path):
    """Issue 45: strings of the right shape gave a TypeError from np.isfinite."""
    options, weights = _copy_fixture(tmp_path)
    name = "RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/W_P_0"
    with h5py.File(weights, "r+") as f:
        shape = f[name].shape
        del f[name]
        f.create_dataset(name, data=np.full(shape, "0.5", dtype=object), dtype=h5py.string_dtype())
    with pytest.raises(WeightsError) as error:
        load_bilm_tf(options, weights)
    assert str(error.value).startswith(f"{weights}: dataset '{name}' holds variable-length strings, "
                                       "not numbers"), error.value
    text = tmp_path / "in.txt"
    text.write_text("a b\n")
    result = run_cli("embed", text, "--options", options, "--weights", weights)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"{weights}: dataset '{name}' holds" in result.stderr
    # A softmax file of fixed-length strings, the same.
    softmax = tmp_path / "softmax.hdf5"
    with h5py.File(softmax, "w") as f:
        f["softmax/W"] = np.full((5, 16), b"x")
        f["softmax/b"] = np.zeros(5, dtype=np.float32)
    with pytest.raises(WeightsError, match=r"softmax.hdf5: dataset 'softmax/W' holds byte strings \(\|S1\), not num"):
        load_softmax(softmax, 5, 16)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_infinite_weights_are_refused_naming_the_dataset(tmp_path, bad):
    options, weights = _copy_fixture(tmp_path)
    name = "RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/W_P_0"
    with h5py.File(weights, "r+") as f:
        array = f[name][...]
        array[2, 3] = bad
        f[name][...] = array
    with pytest.raises(WeightsError, match=f"{name}' holds 1 NaN or infinite"):
        load_bilm_tf(options, weights)


def test_nan_in_a_native_checkpoint_is_refused(tmp_path):
    model = load_fixture_model("allennlp")
    with torch.no_grad():
        model.forward_layers[0].bias[5] = float("nan")
    save_checkpoint(model, tmp_path / "m.pt")
    with pytest.raises(WeightsError, match="forward_layers.0.bias' holds 1 NaN"):
        load_checkpoint(tmp_path / "m.pt")


# ------------------------------------------------------------------------ the command line
def test_version_and_defaults_in_help():
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.startswith("elmo ")
    help_text = " ".join(run_cli("embed", "--help").stdout.split())
    assert "sentences per batch (default: 64)" in help_text
    assert "(default: 4096)" in help_text and "(default: cpu)" in help_text


def test_ctrl_c_is_a_message_not_a_traceback(monkeypatch, capsys, text_file):
    import elmo.cli.embed

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(elmo.cli.embed, "run", interrupted)
    assert main(["embed", str(text_file)]) == EXIT_INTERRUPTED
    err = capsys.readouterr().err
    assert "elmo embed: interrupted" in err and "Traceback" not in err


def test_broken_pipe_stops_quietly(tmp_path):
    text = tmp_path / "many.txt"
    text.write_text("".join(f"sentence number {i} is here .\n" for i in range(400)))
    command = " ".join([*CLI, "embed", str(text), *FIXTURE_MODEL]) + " | head -n 1"
    result = subprocess.run(["bash", "-c", f"set -o pipefail; {command}"], capture_output=True, text=True)
    assert result.stdout.startswith("sentence 0:")
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr
    assert result.returncode == 141


def test_empty_inputs_of_prepare_and_vocab_are_refused(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    result = run_cli("prepare", empty, "--output", tmp_path / "prepared")
    assert result.returncode == 2 and "no sentence to write" in result.stderr
    assert "empty file" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "prepared").exists()
    result = run_cli("vocab", empty, "--output", tmp_path / "vocab.txt")
    assert result.returncode == 2 and "no tokens to count" in result.stderr
    assert not (tmp_path / "vocab.txt").exists()
    words = tmp_path / "words.txt"
    words.write_text("a b a\n")
    result = run_cli("vocab", empty, words, "--output", tmp_path / "vocab.txt")
    assert result.returncode == 0 and f"warning: {empty}: no tokens in this file" in result.stderr
    assert (tmp_path / "vocab.txt").read_text().split() == ["<S>", "</S>", "<UNK>", "a", "b"]


READING_COMMANDS = {
    "embed": lambda src, tmp: ["embed", src, tmp / "out.hdf5", *FIXTURE_MODEL],
    "prepare": lambda src, tmp: ["prepare", src, "--output", tmp / "prepared"],
    "vocab": lambda src, tmp: ["vocab", src, "--output", tmp / "vocab.txt"],
    "train": lambda src, tmp: ["train", "--train", src, "--vocab", VOCAB, "--output", tmp / "run", "--no-progress"],
}


@pytest.mark.parametrize("kind", ["truncated", "corrupt"])
@pytest.mark.parametrize("command", list(READING_COMMANDS))
def test_a_damaged_gz_input_is_one_line_naming_the_file(tmp_path, capsys, command, kind):
    """Issue 45: a truncated or corrupt .gz (a half-downloaded corpus) gave a traceback (EOFError,
    zlib.error) in embed, prepare, vocab and train."""
    source = damaged_gzips(tmp_path)[kind]
    before = sorted(os.listdir(tmp_path))
    assert main([str(a) for a in READING_COMMANDS[command](source, tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"elmo {command}: error: {source}: not readable as gzip ("), err
    assert "read up to byte" in err and "truncated or corrupt" in err, err
    assert sorted(os.listdir(tmp_path)) == before  # no output, no work file, no run directory


def test_bad_device_is_one_clear_line(text_file):
    result = run_cli("embed", text_file, "--device", "banana", *FIXTURE_MODEL)
    assert result.returncode == 2 and "not a device name" in result.stderr and "Traceback" not in result.stderr
    if not torch.cuda.is_available():
        result = run_cli("embed", text_file, "--device", "cuda", *FIXTURE_MODEL)
        assert result.returncode == 2 and "CUDA is not available" in result.stderr


def test_bfloat16_falls_back_to_float32_without_bfloat16_hardware(monkeypatch):
    import elmo.inference.precision

    model = load_fixture_model("allennlp")
    monkeypatch.setattr(elmo.inference.precision, "cpu_flags", lambda: {"avx2", "fma"})
    with pytest.warns(UserWarning, match="neither AVX-512 BF16 nor AMX"):
        runtime = Runtime(model, precision="bfloat16")
    assert runtime.precision == "float32" and runtime.dtype == torch.float32
    monkeypatch.setattr(elmo.inference.precision, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    assert Runtime(model, precision="bfloat16").dtype == torch.bfloat16
    monkeypatch.setattr(elmo.inference.precision, "cpu_flags", lambda: None)  # flags unknown: as asked
    assert Runtime(model, precision="bfloat16").dtype == torch.bfloat16
