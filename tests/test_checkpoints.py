"""Whatever the public API saves, the same API loads: one round trip per public save function,
and the one checkpoint reader's one-line errors (damaged, foreign, code, newer, another kind)."""

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import ALLENNLP, load_fixture_model
from test_train import CORPUS, VOCAB, tiny_settings

from elmo import BiLMConfig, Embedder, WeightsError, load_model, save_bilm_tf, save_checkpoint
from elmo.hub import (
    load_language_model,
    load_language_model_with_origin,
    read_checkpoint,
)
from elmo.hub.checkpoints import load_checkpoint
from elmo.hub.checkpoints import (
    NATIVE_FORMAT,
    TRAIN_FORMAT,
    TRAIN_VERSION,
    export_language_model,
    load_softmax,
    load_train_checkpoint,
    save_softmax,
)
from elmo.hub.pretrained import packaged_model_dir
from elmo.inference.embed_file import load_embeddings
from elmo.inference.layer_cache import load_or_compute
from elmo.inference.runtime import Runtime, warm_state_key
from elmo.inference.states import load_warm_state, save_warm_state
from elmo.inference.vocab_cache import load_vocab_cache, save_vocab_cache
from elmo.model.chars import batch_to_char_ids
from elmo.model.network import BiLMState
from elmo.model.vocab import Vocabulary
from elmo.model.weights import load_bilm_tf
from elmo.training.train import Trainer

CLI = [sys.executable, "-m", "elmo.cli.main"]
SENTENCES = [["The", "cat", "sat", "."], ["Dogs", "bark", "at", "night", "."]]


def assert_same_parameters(a: torch.nn.Module, b: torch.nn.Module) -> None:
    left, right = a.state_dict(), b.state_dict()
    assert left.keys() == right.keys()
    for name in left:
        assert torch.equal(left[name].float(), right[name].float()), name


def same_layers(a, b) -> None:
    ids, mask = batch_to_char_ids(SENTENCES)
    with torch.no_grad():
        torch.testing.assert_close(a(ids, mask).layers, b(ids, mask).layers, rtol=0, atol=0)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished 10-step training run and its trainer (checkpoints at steps 5 and 10)."""
    run = tmp_path_factory.mktemp("run") / "run"
    trainer = Trainer(tiny_settings(run, max_tokens=4 * 10 * 10))
    trainer.run()
    return run, trainer


# ------------------------------------------------------------------ round trips, one per save
def test_save_checkpoint_round_trip_through_every_loader(allennlp_model, tmp_path):
    path = tmp_path / "model.pt"
    save_checkpoint(allennlp_model, path, note="hello")
    model, payload = load_checkpoint(path)
    assert payload["note"] == "hello" and payload["format"] == NATIVE_FORMAT
    assert model.config == allennlp_model.config
    assert_same_parameters(allennlp_model, model)
    # The one resolver reads it too (it refused this file before): the API, and every --model.
    assert_same_parameters(allennlp_model, load_model(path))
    vectors = Embedder.from_pretrained(path).embed_sentences(SENTENCES)
    reference = Embedder(allennlp_model).embed_sentences(SENTENCES)
    for got, want in zip(vectors, reference):
        np.testing.assert_array_equal(got, want)
    out = tmp_path / "out.hdf5"
    result = subprocess.run([*CLI, "embed", str(ALLENNLP / "sentences.json"), str(out), "--model", str(path)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_save_bilm_tf_round_trip(allennlp_model, tmp_path):
    options, weights = save_bilm_tf(allennlp_model, tmp_path / "model")
    for loaded in (load_bilm_tf(options, weights), load_model((options, weights)), load_model(tmp_path / "model")):
        assert loaded.config == allennlp_model.config
        assert_same_parameters(allennlp_model, loaded)
        same_layers(allennlp_model.eval(), loaded)


def test_config_and_vocabulary_round_trip(tmp_path):
    config = load_fixture_model("allennlp").config
    config.to_json(tmp_path / "options.json")
    assert BiLMConfig.from_json(tmp_path / "options.json") == config
    vocab = Vocabulary.from_file(VOCAB)
    vocab.save(tmp_path / "vocab.txt")
    assert Vocabulary.from_file(tmp_path / "vocab.txt").words == vocab.words


def test_trainer_checkpoint_round_trip(run_dir):
    run, trainer = run_dir
    newest = run / "checkpoints" / "step-000000010.pt"
    payload = load_train_checkpoint(newest)
    assert payload["format"] == TRAIN_FORMAT and payload["version"] == TRAIN_VERSION and payload["step"] == 10
    for key, value in trainer.model.state_dict().items():
        assert torch.equal(payload["model"][key], value.cpu()), key
    # The language model, from the run directory or the file, and its biLM through every loader.
    for source in (run, newest):
        model, vocab, origin = load_language_model_with_origin(source)
        assert_same_parameters(trainer.model, model)
        assert vocab.words == trainer.vocab.words and origin["step"] == 10
        assert_same_parameters(trainer.model.bilm, load_model(source))
    bilm, whole = load_checkpoint(newest)
    assert_same_parameters(trainer.model.bilm, bilm) and whole["step"] == 10


def test_export_language_model_and_save_softmax_round_trip(run_dir, tmp_path):
    _, trainer = run_dir
    export_language_model(trainer.model, trainer.vocab, tmp_path / "exported")
    model, vocab = load_language_model(tmp_path / "exported")
    assert_same_parameters(trainer.model, model)
    assert vocab.words == trainer.vocab.words
    assert_same_parameters(trainer.model.bilm, load_model(tmp_path / "exported"))
    save_softmax(trainer.model.softmax, tmp_path / "softmax.hdf5", dtype="float16")
    half = load_softmax(tmp_path / "softmax.hdf5", len(vocab), trainer.config.lstm.projection_dim)
    torch.testing.assert_close(half.weight, trainer.model.softmax.weight.cpu(), rtol=1e-3, atol=1e-3)


def test_vocab_cache_round_trip(allennlp_model, tmp_path):
    words = ["the", "cat", "sat", "the", ""]
    assert save_vocab_cache(allennlp_model, words, tmp_path / "cache.hdf5") == 3
    cache = load_vocab_cache(tmp_path / "cache.hdf5", allennlp_model)
    assert list(cache) == ["the", "cat", "sat"]
    with torch.no_grad():
        ids, _ = batch_to_char_ids([["cat"]])
        expected = allennlp_model.token_encoder(ids)[0, 0]
    torch.testing.assert_close(cache["cat"], expected, rtol=1e-5, atol=1e-5)


def test_warm_state_round_trip(allennlp_model, tmp_path):
    runtime = Runtime(allennlp_model)
    state = runtime.initial_state(1)
    key = warm_state_key(runtime)
    save_warm_state(state, key, tmp_path / "warm.npz")
    loaded = load_warm_state(tmp_path / "warm.npz", key)
    assert isinstance(loaded, BiLMState)
    assert torch.equal(loaded.c, state.c) and torch.equal(loaded.h, state.h)
    assert load_warm_state(tmp_path / "warm.npz", "another model's key") is None


def test_layer_cache_round_trip(allennlp_model, tmp_path, monkeypatch):
    embedder = Embedder(allennlp_model)
    first = load_or_compute(embedder, SENTENCES, tmp_path, "set", progress=False)
    monkeypatch.setattr(embedder, "embed_sentences", lambda *a, **k: pytest.fail("recomputed, not read"))
    again = load_or_compute(embedder, SENTENCES, tmp_path, "set", progress=False)
    for i in range(len(SENTENCES)):
        np.testing.assert_array_equal(again[i], first[i])


def test_embed_file_round_trip(allennlp_model, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("\n".join(" ".join(s) for s in SENTENCES) + "\n")
    embedder = Embedder(allennlp_model)
    assert embedder.embed_file(text, tmp_path / "out.hdf5").sentences == 2
    for got, want in zip(load_embeddings(tmp_path / "out.hdf5"), embedder.embed_sentences(SENTENCES)):
        np.testing.assert_array_equal(got, want)
    with h5py.File(tmp_path / "other.hdf5", "w") as f:
        f["vectors"] = np.zeros(3)
    with pytest.raises(ValueError, match="other.hdf5: not an elmo embed file"):
        load_embeddings(tmp_path / "other.hdf5")


# ------------------------------------------------------------------ the one reader's errors
class _Evil:
    def __reduce__(self):
        return (print, ("this must never run",))


def _bad_files(tmp_path, allennlp_model):
    """(file, what the one-line message must say) for each way a .pt can be wrong."""
    good = tmp_path / "good.pt"
    save_checkpoint(allennlp_model, good)
    cases = []
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    cases.append((truncated, "truncated.pt: not a readable elmo checkpoint: damaged or truncated"))
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00\x01 not a checkpoint at all")
    cases.append((garbage, "garbage.pt: not a readable elmo checkpoint: damaged or not a checkpoint"))
    evil = tmp_path / "evil.pt"
    torch.save({"format": NATIVE_FORMAT, "version": 1, "payload": _Evil()}, evil)
    cases.append((evil, "evil.pt: not a readable elmo checkpoint: it holds Python objects that elmo never runs (its pickle imports "
                        "builtins.print)"))
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    cases.append((foreign, "foreign.pt: not an elmo checkpoint (no format marker"))
    task = tmp_path / "best.pt"
    torch.save({"format": "elmo-task-1", "model": {}}, task)
    cases.append((task, "best.pt: a task model checkpoint (elmo task train), not a biLM checkpoint"))
    newer = tmp_path / "newer.pt"
    payload = torch.load(good, weights_only=True)
    torch.save({**payload, "version": 9}, newer)
    cases.append((newer, "newer.pt: elmo-bilm version 9 was written by a newer elmo; this one reads up to version 1"))
    incomplete = tmp_path / "incomplete.pt"
    torch.save({key: value for key, value in payload.items() if key != "state_dict"}, incomplete)
    cases.append((incomplete, "incomplete.pt: an incomplete checkpoint (no state_dict)"))
    misshaped = tmp_path / "misshaped.pt"
    torch.save({**payload, "state_dict": {**payload["state_dict"], "forward_layers.0.bias": torch.zeros(3)}}, misshaped)
    cases.append((misshaped, "misshaped.pt: state dict does not match its config"))
    return cases


def test_every_bad_file_is_a_one_line_weights_error(allennlp_model, tmp_path, capsys):
    for path, message in _bad_files(tmp_path, allennlp_model):
        for load in (load_checkpoint, load_model):
            with pytest.raises(WeightsError) as info:
                load(path)
            assert message in str(info.value) and "\n" not in str(info.value), (load, str(info.value))


def test_bad_checkpoints_are_one_line_errors_on_the_command_line(allennlp_model, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("a b\n")
    cases = _bad_files(tmp_path, allennlp_model)
    for path, message in (cases[0], cases[2], cases[5]):  # truncated, code, newer: one process each
        result = subprocess.run([*CLI, "embed", str(text), "--model", str(path)], capture_output=True, text=True)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith("elmo embed: error: ") and message in result.stderr, result.stderr


def test_the_reader_takes_only_the_formats_asked_for(allennlp_model, tmp_path):
    path = tmp_path / "model.pt"
    save_checkpoint(allennlp_model, path)
    assert read_checkpoint(path, {NATIVE_FORMAT: 1})["format"] == NATIVE_FORMAT
    with pytest.raises(WeightsError, match="a biLM checkpoint .elmo.save_checkpoint., not a training checkpoint"):
        load_train_checkpoint(path)
    with pytest.raises(WeightsError, match="not a readable task checkpoint"):
        read_checkpoint(_pickled(tmp_path), {"elmo-task-1": 1}, what="task checkpoint")
    older = tmp_path / "older.pt"  # a file from before version markers reads as version 1
    payload = torch.load(path, weights_only=True)
    del payload["version"]
    torch.save(payload, older)
    assert_same_parameters(allennlp_model, load_model(older))


def _pickled(tmp_path):
    path = tmp_path / "pickled.pt"
    with open(path, "wb") as f:
        pickle.dump({"format": "elmo-task-1", "thing": _Evil()}, f)
    return path


def test_a_language_model_needs_a_softmax(allennlp_model, tmp_path):
    path = tmp_path / "model.pt"
    save_checkpoint(allennlp_model, path)
    with pytest.raises(ValueError, match="model.pt: a biLM checkpoint .* holds no softmax or vocabulary"):
        load_language_model(path)
    save_bilm_tf(allennlp_model, tmp_path / "bilm")
    with pytest.raises(FileNotFoundError, match="missing softmax_weights.hdf5, vocab.txt"):
        load_language_model(tmp_path / "bilm")
    result = subprocess.run([*CLI, "finetune", str(path), "--train", str(CORPUS), "--output", str(tmp_path / "run")],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "holds no softmax or vocabulary" in result.stderr
    assert result.stderr.count("\n") == 1 and not (tmp_path / "run").exists()


def test_the_packaged_model_is_a_language_model_too():
    model, vocab, origin = load_language_model_with_origin("default")
    assert len(vocab) == 50_000 and model.softmax.weight.shape == (50_000, 128)
    assert origin == {"path": str(packaged_model_dir()), "source": "default"}
    assert_same_parameters(model.bilm, load_model())


# ------------------------------------------------------------------ code in a checkpoint, by class
class _System:
    def __reduce__(self):
        return (os.system, ("echo this must never run",))


@pytest.mark.parametrize("writer", ["torch zip", "torch legacy", "pickle protocol 2", "pickle protocol 5"])
@pytest.mark.parametrize("payload,name", [(_Evil, "builtins.print"), (_System, f"{os.system.__module__}.system")])
def test_a_checkpoint_that_would_run_code_is_named_by_elmos_own_check(tmp_path, writer, payload, name):
    """Whatever the serialisation and whatever torch's wording, one line saying the file holds
    Python objects elmo never runs and naming the first global; torch's advice to load it with
    weights_only off is never passed on."""
    path = tmp_path / "evil.pt"
    content = {"format": NATIVE_FORMAT, "version": 1, "payload": payload()}
    if writer.startswith("torch"):
        torch.save(content, path, _use_new_zipfile_serialization=writer == "torch zip")
    else:
        path.write_bytes(pickle.dumps(content, protocol=int(writer[-1])))
    with pytest.raises(WeightsError) as caught:
        load_checkpoint(path)
    assert str(caught.value) == (f"{path}: not a readable elmo checkpoint: it holds Python objects that elmo never "
                                 f"runs (its pickle imports {name}); a file elmo writes holds only tensors and plain "
                                 f"data")


def test_no_message_suggests_loading_with_weights_only_off():
    """Neither elmo's messages nor its docs pass on torch's advice (it would run the file's code)."""
    root = Path(__file__).resolve().parent.parent
    pattern = re.compile(r"weights_only\W{0,3}(=|set to|to)\W{0,3}False", re.IGNORECASE)
    offenders = [str(path.relative_to(root)) for folder in ("src", "docs") for path in (root / folder).rglob("*")
                 if path.suffix in (".py", ".md") and pattern.search(path.read_text(encoding="utf-8"))]
    offenders += [str(p.relative_to(root)) for p in root.glob("*.md") if pattern.search(p.read_text(encoding="utf-8"))]
    assert offenders == []
