"""``elmo export --format onnx``: the biLM as one ONNX graph, run by onnxruntime on the CPU, gives
every layer of :class:`elmo.Embedder` within 1e-5, under each state policy, on sentences of every
kind (none, one token, 200 tokens, non-ASCII); the weights are stored once; past the size limit
they go to ONNX's external-data file. Skipped where onnx or onnxruntime is not installed (the
extra ``elmo[onnx]``; the ``test`` extra has it)."""

import numpy as np
import pytest
from conftest import FIXTURES, load_fixture_model

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from elmo import Embedder
from elmo.cli.main import main
from elmo.inference.onnx_export import build_onnx, export_onnx, onnx_char_ids, weight_bytes, weights_digest
from elmo.model.chars import word_to_char_ids

SENTENCES = [
    [],
    ["One"],
    "The quick brown fox jumps over the lazy dog .".split(),
    ["Zürich", "naïve", "日本語の文", "emoji🙂", "x" * 60],  # multibyte, and a token past 48 bytes
    [f"w{i}" for i in range(200)],
    ["<S>", "</S>", "a"],  # the boundary tokens' own strings, as elmo reads them
]
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def model():
    return load_fixture_model("allennlp")


def session(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def assert_same_layers(got_layers, got_mask, sentences, want):
    """``got_*``: one batch's graph outputs; ``want``: the Embedder's (L+1, n, dim) per sentence."""
    assert got_layers.shape[2] >= max(len(s) for s in sentences)
    for row, (sentence, expected) in enumerate(zip(sentences, want)):
        n = len(sentence)
        assert got_mask[row].tolist() == [True] * n + [False] * (got_mask.shape[1] - n)
        assert got_layers[row, :, :n].shape == expected.shape
        if n:
            assert np.abs(got_layers[row, :, :n] - expected).max() <= TOLERANCE, row
        assert not got_layers[row, :, n:].any()  # zero past the sentence's end


@pytest.mark.parametrize("state", ["warm", "reset"])
def test_every_layer_matches_the_embedder(model, tmp_path, state):
    path = tmp_path / "elmo.onnx"
    assert export_onnx(model, path, state=state) == [path]
    graph = session(path)
    assert [i.name for i in graph.get_inputs()] == ["char_ids"]
    assert [o.name for o in graph.get_outputs()] == ["layers", "mask"]
    # The 200 tokens once (the Embedder's per-step loop takes a second or two on a loaded CPU).
    sentences = SENTENCES if state == "reset" else [s for s in SENTENCES if len(s) < 200]
    want = Embedder(model, state=state).embed_sentences(sentences)
    layers, mask = graph.run(None, {"char_ids": onnx_char_ids(sentences)})
    assert layers.shape == (len(sentences), 3, max(map(len, sentences)), 32) and layers.dtype == np.float32
    assert_same_layers(layers, mask, sentences, want)
    # Alone, and padded longer than needed (rows of zeros past the </S> row): the same numbers (the
    # Embedder's vectors of a sentence do not depend on its batch under these policies).
    for index in (1, 2, 3):
        ids = np.concatenate([onnx_char_ids([SENTENCES[index]]), np.zeros((1, 7, 50), dtype=np.int64)], axis=1)
        alone, alone_mask = graph.run(None, {"char_ids": ids})
        assert alone.shape[2] == len(SENTENCES[index]) + 7
        assert_same_layers(alone, alone_mask, [SENTENCES[index]], [want[index]])
    # A batch of empty sentences only: layers of no tokens.
    empty, empty_mask = graph.run(None, {"char_ids": onnx_char_ids([[], []])})
    assert empty.shape == (2, 3, 0, 32) and empty_mask.shape == (2, 0)


def test_stateful_carries_state_through_explicit_inputs_and_outputs(model, tmp_path):
    path = tmp_path / "stateful.onnx"
    export_onnx(model, path, state="stateful")
    graph = session(path)
    assert [i.name for i in graph.get_inputs()] == ["char_ids", "initial_c", "initial_h"]
    assert [o.name for o in graph.get_outputs()] == ["layers", "mask", "final_c", "final_h"]
    embedder = Embedder(model, state="stateful", batch_size=3)
    c, h = np.zeros((2, 2, 3, 64), np.float32), np.zeros((2, 2, 3, 16), np.float32)
    for batch in ([["a", "b"], ["Hello", "world", "!"], []], [["x"], ["again", "here"], SENTENCES[3]]):
        layers, mask, c, h = graph.run(None, {"char_ids": onnx_char_ids(batch), "initial_c": c, "initial_h": h})
        assert_same_layers(layers, mask, batch, embedder.embed_sentences(batch))
    carried = embedder.runtime.carried_state
    assert np.abs(c - carried.c.numpy()).max() <= TOLERANCE and np.abs(h - carried.h.numpy()).max() <= TOLERANCE


def test_the_weights_are_stored_once(model, tmp_path):
    proto = build_onnx(model, "warm")
    parameters = sum(p.numel() for p in model.parameters()) * 4
    lstm = model.config.lstm
    warm_state = 2 * lstm.n_layers * (lstm.dim + lstm.projection_dim) * 4
    # The weights, the warm state and a few scalars and shapes: nothing twice.
    assert parameters + warm_state <= weight_bytes(proto) <= parameters + warm_state + 512
    names = [t.name for t in proto.graph.initializer]
    assert len(names) == len(set(names))
    path = tmp_path / "elmo.onnx"
    export_onnx(model, path)
    assert path.stat().st_size <= weight_bytes(proto) + 64 * 1024  # the graph itself: tens of kilobytes


def test_large_weights_go_to_the_external_data_file(model, tmp_path):
    path = tmp_path / "big.onnx"
    written = export_onnx(model, path, state="reset", external_data_bytes=1000)
    digest = weights_digest(build_onnx(model, "reset"))
    data = tmp_path / f"big.onnx.{digest[:16]}.data"
    assert written == [path, data] and sorted(p.name for p in tmp_path.iterdir()) == ["big.onnx", data.name]
    props = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
    assert props["weights_sha256"] == digest and props["state"] == "reset"
    parameters = sum(p.numel() for p in model.parameters()) * 4
    assert path.stat().st_size < 64 * 1024 and data.stat().st_size >= 0.95 * parameters  # tensors under 1 KiB stay in
    assert data.stat().st_mode & 0o777 == path.stat().st_mode & 0o777
    layers, mask = session(path).run(None, {"char_ids": onnx_char_ids(SENTENCES[:4])})
    assert_same_layers(layers, mask, SENTENCES[:4], Embedder(model, state="reset").embed_sentences(SENTENCES[:4]))


def test_a_kill_between_the_two_renames_never_pairs_an_old_graph_with_new_data(model, tmp_path, monkeypatch):
    """The data file was renamed over the old one, then the graph: killed in between, the old
    graph ran on the new weights (largest difference 38.4). Now the new data has a name of its
    own, the old graph keeps reading its own, and the next export cleans up after the dead one."""
    import copy
    import os
    import subprocess

    import torch

    import elmo.inference.onnx_export as onnx_export

    path = tmp_path / "big.onnx"
    export_onnx(model, path, state="reset", external_data_bytes=1000)
    ids = onnx_char_ids(SENTENCES[2:4])
    before = session(path).run(None, {"char_ids": ids})[0]
    other = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.mul_(1.5)
    # A kill after the data's rename: nothing after it runs (no rename of the graph, no cleanup).
    replace, renamed = os.replace, []

    def killed_after_the_first(source, target):
        if renamed:
            raise KeyboardInterrupt  # stands for SIGKILL: ...
        renamed.append(target)
        return replace(source, target)

    monkeypatch.setattr(onnx_export.os, "replace", killed_after_the_first)
    monkeypatch.setattr(onnx_export.shutil, "rmtree", lambda *a, **k: None)  # ... which cleans nothing up
    with pytest.raises(KeyboardInterrupt):
        export_onnx(other, path, state="reset", overwrite=True, external_data_bytes=1000)
    monkeypatch.undo()
    assert len(renamed) == 1 and renamed[0].name.endswith(".data")
    assert np.array_equal(session(path).run(None, {"char_ids": ids})[0], before)  # the old pair, intact
    # The killed process's folder, as the dead process it stands for would leave it.
    [left] = [p for p in tmp_path.iterdir() if p.name.startswith(".elmo-onnx-")]
    dead = subprocess.Popen(["true"])
    dead.wait()
    left.rename(tmp_path / left.name.replace(f"-{os.getpid()}-", f"-{dead.pid}-"))
    written = export_onnx(other, path, state="reset", overwrite=True, external_data_bytes=1000)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in written)
    after = session(path).run(None, {"char_ids": ids})[0]
    want = Embedder(other, state="reset").embed_sentences(SENTENCES[2:4])
    assert_same_layers(after, session(path).run(None, {"char_ids": ids})[1], SENTENCES[2:4], want)


def test_the_character_ids_follow_the_documented_rule():
    ids = onnx_char_ids([["é"], []])
    assert ids.shape == (2, 3, 50) and ids.dtype == np.int64
    # <S>, é (UTF-8 c3 a9), </S>: begin-of-word 259, bytes + 1, end-of-word 260, padding 261.
    assert ids[0, 0].tolist() == [259, 257, 260] + [261] * 47
    assert ids[0, 1].tolist() == [259, 0xC3 + 1, 0xA9 + 1, 260] + [261] * 46
    assert ids[0, 2].tolist() == [259, 258, 260] + [261] * 47
    assert ids[1, 0].tolist() == ids[0, 0].tolist() and ids[1, 1].tolist() == ids[0, 2].tolist()
    assert not ids[1, 2].any()
    with pytest.raises(ValueError, match="sentences: none to embed"):
        onnx_char_ids([])
    assert (ids[0, 1] == word_to_char_ids("é")).all()


def test_the_command_line_writes_one_file_and_refuses_what_it_cannot_hold(tmp_path, capsys):
    out = tmp_path / "default.onnx"
    assert main(["export", "default", "--output", str(out), "--format", "onnx", "--state", "reset"]) == 0
    assert "exported to" in capsys.readouterr().err
    layers, _ = session(out).run(None, {"char_ids": onnx_char_ids([["A", "test", "."]])})
    want = Embedder(state="reset").embed_sentences([["A", "test", "."]])[0]
    assert np.abs(layers[0] - want).max() <= TOLERANCE
    for argv, message in (
            ([], f"--output {out}: "),  # exists: --force replaces it
            (["--dtype", "float16", "--force"], "--dtype: the ONNX graph holds float32 weights"),
            (["--hub-card", "--license", "mit", "--force"], "--format onnx writes one file"),
            (["--force", "--state", "bogus"], None)):
        if message is None:
            with pytest.raises(SystemExit):
                main(["export", "default", "--output", str(out), "--format", "onnx", *argv])
            capsys.readouterr()
            continue
        assert main(["export", "default", "--output", str(out), "--format", "onnx", *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert main(["export", "default", "--output", str(tmp_path / "x"), "--state", "reset"]) == 2
    assert "--state: the state policy goes into an ONNX graph; add --format onnx" in capsys.readouterr().err
    # ELMoForManyLangs' dictionary ids are not bilm-tf's: refused in one line, nothing written.
    manylangs = tmp_path / "manylangs.onnx"
    assert main(["export", str(FIXTURES / "manylangs" / "model"), "--output", str(manylangs), "--format", "onnx"]) == 2
    err = capsys.readouterr().err
    assert "the ONNX export takes bilm-tf's character ids" in err and len(err.strip().splitlines()) == 1, err
    assert not manylangs.exists()


def test_the_python_client_without_the_library_writes_what_elmo_embed_writes(model, tmp_path):
    """examples/onnx_embed.py: the character-id rule written out again (numpy only), run by
    onnxruntime, in the HDF5 layout elmo embed writes by default."""
    import subprocess
    import sys
    from pathlib import Path

    import h5py

    path = tmp_path / "elmo.onnx"
    export_onnx(model, path, state="reset")
    sentences = [s for s in SENTENCES if s and len(s) < 200] + [["lonely"]]
    text = tmp_path / "in.txt"
    text.write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
    client = Path(__file__).resolve().parent.parent / "examples" / "onnx_embed.py"
    done = subprocess.run([sys.executable, str(client), str(path), str(text), str(tmp_path / "out.hdf5"),
                           "--batch-size", "2"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    want = Embedder(model, state="reset").embed_sentences(sentences)
    with h5py.File(tmp_path / "out.hdf5") as f:
        assert sorted(k for k in f if k != "sentence_to_index") == [str(i) for i in range(len(sentences))]
        for i, expected in enumerate(want):
            assert f[str(i)].shape == expected.shape and np.abs(f[str(i)][...] - expected).max() <= TOLERANCE
