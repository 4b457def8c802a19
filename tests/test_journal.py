"""Resumable embedding (elmo.inference.journal): kill -9 and resume give the uninterrupted output,
a cut frame costs its batch only, the stateful state carried across, other settings or input
refused, a foreign or damaged work file refused naming it, the input never overwritten, pipes
read once."""

import json
import os
import shutil
import signal
import struct
import subprocess
import threading
import time
import warnings

import h5py
import numpy as np
import pytest
from conftest import (
    EMBED_CLI,
    FIXTURE_MODEL_ARGS,
    Interrupt,
    assert_same,
    corpus,
    interrupt_after,
    load_fixture_model,
    write_lines,
)

from elmo import Embedder, open_embeddings
from elmo.cli.main import main
from elmo.inference import journal
from elmo.inference.journal import HEADER, WorkFolder


@pytest.fixture(scope="module")
def model():
    return load_fixture_model("allennlp")


@pytest.mark.exactness
def test_kill_9_mid_run_then_resume_gives_the_uninterrupted_output(tmp_path, capsys):
    n = 400
    src = write_lines(tmp_path / "in.txt", corpus(n))
    args = [str(src), "--layout", "packed", "--batch-size", "8", *FIXTURE_MODEL_ARGS]
    assert main(["embed", args[0], str(tmp_path / "ref.hdf5"), *args[1:]]) == 0
    out = tmp_path / "out.hdf5"
    work = WorkFolder(out)
    process = subprocess.Popen([*EMBED_CLI, args[0], str(out), *args[1:]], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        # Killed after about three batches, wherever it then is (most likely inside a batch).
        while not (os.path.exists(work.journal_path) and os.path.getsize(work.journal_path) > 100_000):
            assert process.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.002)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert not out.exists()  # the output appears only complete
    committed = sum(f.sentences for f in work.scan())
    assert 0 < committed < n
    capsys.readouterr()
    assert main(["embed", args[0], str(out), *args[1:], "--resume"]) == 0
    final = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"wrote {n} sentences" in final and f"{committed} of them from the interrupted run" in final
    with open_embeddings(tmp_path / "ref.hdf5") as ref, open_embeddings(out) as got:
        # Bit for bit: a word's vector does not depend on the words the memo held (row blocks).
        assert_same(ref, got)
        assert [got.text(i) for i in range(len(got))] == [ref.text(i) for i in range(len(ref))]
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "out.hdf5", "ref.hdf5"]  # the work file is gone


@pytest.mark.parametrize("state", ["warm", "reset"])
@pytest.mark.exactness
def test_resume_after_a_kill_at_any_batch_is_the_uninterrupted_output_bit_for_bit(tmp_path, monkeypatch, model,
                                                                                 state):
    """Issue 45: with the token memo on (the default), whichever batch the run stopped at, the
    resumed output is the uninterrupted one to the bit: the resumed process's memo starts empty
    and encodes words in other company, batches start at other lines, and none of it may show."""
    lines = corpus(90, seed=5, longest=30)
    src = write_lines(tmp_path / "in.txt", lines)
    kwargs = dict(layout="packed", chunk_sentences=16)
    Embedder(model, batch_size=5, state=state).embed_file(src, tmp_path / "ref.hdf5", **kwargs)
    for kill_at in (1, 4, 9, 13):
        out = tmp_path / f"out-{kill_at}.hdf5"
        with monkeypatch.context() as patch:
            interrupt_after(patch, kill_at)
            with pytest.raises(Interrupt):
                Embedder(model, batch_size=5, state=state).embed_file(src, out, **kwargs)
        report = Embedder(model, batch_size=5, state=state).embed_file(src, out, resume=True, **kwargs)
        assert 0 < report.resumed < len(lines), kill_at
        with open_embeddings(tmp_path / "ref.hdf5") as ref, open_embeddings(out) as got:
            assert_same(ref, got)


def test_a_frame_cut_anywhere_costs_that_batch_only(tmp_path, monkeypatch, model):
    lines = corpus(60, seed=1)
    src = write_lines(tmp_path / "in.txt", lines)
    embedder = Embedder(model, batch_size=4)
    kwargs = dict(layout="packed", chunk_sentences=16)
    embedder.embed_file(src, tmp_path / "ref.hdf5", **kwargs)
    out = tmp_path / "out.hdf5"
    work = WorkFolder(out)
    with monkeypatch.context() as patch:
        interrupt_after(patch, 6)
        with pytest.raises(Interrupt):
            embedder.embed_file(src, out, **kwargs)
    frames = work.scan()
    assert [(f.chunk, f.batch) for f in frames] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]
    saved = tmp_path / "saved.partial"
    shutil.copytree(work.path, saved)
    sixth = frames[5]
    five = sum(f.sentences for f in frames[:5])
    cuts = [HEADER.size - 1, (sixth.vector_offset - sixth.offset) + 7, sixth.end - sixth.offset - 1]
    for cut in cuts:
        shutil.rmtree(work.path, ignore_errors=True)
        shutil.copytree(saved, work.path)
        os.truncate(work.journal_path, sixth.offset + cut)  # killed while writing the sixth batch,
        journal.atomic_write_text(work.synced_path, str(sixth.offset))  # so synced before it at most
        report = embedder.embed_file(src, out, resume=True, **kwargs)
        assert report.resumed == five, cut
        with open_embeddings(tmp_path / "ref.hdf5") as ref, open_embeddings(out) as got:
            assert_same(ref, got)
        out.unlink()
    # A power loss: zeros after the last whole frame, and a damaged byte past the synced mark.
    for damage in ("zeros", "flip"):
        shutil.rmtree(work.path, ignore_errors=True)
        shutil.copytree(saved, work.path)
        with open(work.journal_path, "r+b") as f:
            if damage == "zeros":
                f.seek(0, os.SEEK_END)
                f.write(bytes(5000))
            else:  # the sixth frame had not reached the disk when the power went
                journal.atomic_write_text(work.synced_path, str(sixth.offset))
                f.seek(sixth.vector_offset + 3)
                byte = f.read(1)
                f.seek(sixth.vector_offset + 3)
                f.write(bytes([byte[0] ^ 0xFF]))
        report = embedder.embed_file(src, out, resume=True, **kwargs)
        assert report.resumed == (five + sixth.sentences if damage == "zeros" else five)
        with open_embeddings(tmp_path / "ref.hdf5") as ref, open_embeddings(out) as got:
            assert_same(ref, got)
        out.unlink()


# Garbled frames: where the bytes go in the sixth frame (chunk 1, batch 1) of an interrupted run
# whose every frame is known to be on disk (synced), and what is written there. Each would have
# been copied (or refused without need) before frames were verified ahead of reuse.
GARBLES = {
    "magic": lambda f: (f.offset, b"XXXX"),
    "chunk and batch": lambda f: (f.offset + 4, struct.pack("<QI", 7, 3)),
    "vector length": lambda f: (f.offset + 32, struct.pack("<Q", 1 << 40)),
    "line number": lambda f: (f.meta_offset, struct.pack("<q", 0)),
    "text": lambda f: (f.text_offset, b"ZZZZZZZZ"),
    "vectors": lambda f: (f.vector_offset + 64, np.full(4, 1e30, dtype="<f4").tobytes()),
    "crc": lambda f: (f.end - 8, b"\x00\x11\x22\x33"),
    "end marker": lambda f: (f.end - 4, b"XXXX"),
}


def garble(path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        assert f.read(len(data)) != data, "the garbling must change the bytes"
        f.seek(offset)
        f.write(data)


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory, model):
    """An uninterrupted output of 60 lines (batches of 4, chunks of 16) in both layouts, and the
    work file of a run of each stopped after 10 of its 15 batches, everything synced."""
    root = tmp_path_factory.mktemp("garbled")
    src = write_lines(root / "in.txt", corpus(60, seed=20))
    saved = {}
    for layout in ("packed", "allennlp"):
        embedder = Embedder(model, batch_size=4, token_memo=0)
        embedder.embed_file(src, root / f"ref-{layout}.hdf5", layout=layout, chunk_sentences=16)
        out = root / "out.hdf5"
        with pytest.MonkeyPatch.context() as patch:
            interrupt_after(patch, 10)
            with pytest.raises(Interrupt):
                embedder.embed_file(src, out, layout=layout, chunk_sentences=16)
        shutil.move(WorkFolder(out).path, root / f"saved-{layout}.partial")
        saved[layout] = root / f"saved-{layout}.partial"
    return src, root, saved


def resume_garbled(tmp_path, model, interrupted, layout: str, damage: dict[int, str], synced_at: int | None = None):
    """Resume the interrupted run after garbling frames (index -> kind of GARBLES); returns the
    report, the warnings, the frames as they were and the output's path."""
    src, root, saved = interrupted
    out = tmp_path / "out.hdf5"
    work = WorkFolder(out)
    shutil.copytree(saved[layout], work.path)
    frames = work.scan()
    assert [(f.chunk, f.batch) for f in frames] == [(c, b) for c in range(3) for b in range(4)][:10]
    assert int(open(work.synced_path).read()) == frames[-1].end
    for index, kind in damage.items():
        garble(work.journal_path, *GARBLES[kind](frames[index]))
    if synced_at is not None:
        journal.atomic_write_text(work.synced_path, str(synced_at))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = Embedder(model, batch_size=4, token_memo=0).embed_file(src, out, layout=layout, chunk_sentences=16,
                                                                        resume=True)
    return report, [str(w.message) for w in caught], frames, out


def assert_uninterrupted(root, out, layout: str) -> None:
    """The resumed output is the uninterrupted one: vectors bit for bit (no token memo), texts,
    and in the allennlp layout its sentence_to_index."""
    with open_embeddings(root / f"ref-{layout}.hdf5") as ref, open_embeddings(out) as got:
        assert_same(ref, got)
        assert [got.text(i) for i in range(len(got))] == [ref.text(i) for i in range(len(ref))]
    if layout == "allennlp":
        with h5py.File(root / f"ref-{layout}.hdf5", "r") as ref, h5py.File(out, "r") as got:
            assert json.loads(got["sentence_to_index"][0]) == json.loads(ref["sentence_to_index"][0])


@pytest.mark.parametrize("kind", sorted(GARBLES))
def test_a_garbled_frame_before_the_synced_mark_is_embedded_again_never_copied(tmp_path, model, interrupted, kind):
    report, caught, frames, out = resume_garbled(tmp_path, model, interrupted, "packed", {5: kind})
    assert_uninterrupted(interrupted[1], out, "packed")
    sixth = frames[5]
    committed = sum(f.sentences for f in frames)
    # Only the garbled frame's lines are embedded again (the frames after it are still used), and
    # the user is told, in one line naming where.
    assert report.sentences == 60 and len(caught) == 1, caught
    assert caught[0].startswith(f"{WorkFolder(out).journal_path}: bytes {sixth.offset:,}..") and \
        f"{sixth.sentences} sentences embedded again from the input" in caught[0], caught[0]
    assert report.resumed == committed - sixth.sentences and report.reembedded == sixth.sentences


@pytest.mark.parametrize("kind", ["text", "line number"])
def test_garbled_text_never_reaches_the_sentence_to_index(tmp_path, model, interrupted, kind):
    report, caught, frames, out = resume_garbled(tmp_path, model, interrupted, "allennlp", {2: kind})
    assert_uninterrupted(interrupted[1], out, "allennlp")
    assert report.reembedded == frames[2].sentences and len(caught) == 1, caught


def test_garbled_frames_past_the_synced_mark_in_the_last_frame_and_in_two_places(tmp_path, model, interrupted):
    # Past the synced mark (a power loss): the frame is embedded again, and the whole frames after
    # it are kept (they used to be cut off and embedded again too).
    first_frames = WorkFolder(interrupted[1] / "saved-packed").scan()
    committed = sum(f.sentences for f in first_frames)
    report, caught, frames, out = resume_garbled(tmp_path, model, interrupted, "packed", {5: "vectors"},
                                                 synced_at=first_frames[5].offset)
    assert report.resumed == committed - frames[5].sentences and report.reembedded == frames[5].sentences
    assert_uninterrupted(interrupted[1], out, "packed")
    out.unlink()
    # The last frame (nothing whole after it), and two frames at once.
    for damage in ({9: "vectors"}, {9: "magic"}, {2: "text", 7: "chunk and batch"}):
        report, caught, frames, out = resume_garbled(tmp_path, model, interrupted, "packed", damage)
        lost = sum(frames[i].sentences for i in damage)
        assert report.resumed == committed - lost and report.reembedded == lost, damage
        assert len(caught) == 1 and f"{lost} sentences embedded again" in caught[0], caught
        assert_uninterrupted(interrupted[1], out, "packed")
        out.unlink()


def test_a_resume_interrupted_after_refilling_a_garbled_frame_resumes_again(tmp_path, model, interrupted):
    # The garbled bytes stay in the journal, skipped; the batch's new frame lies at its end.
    src, root, saved = interrupted
    out = tmp_path / "out.hdf5"
    work = WorkFolder(out)
    shutil.copytree(saved["packed"], work.path)
    frames = work.scan()
    garble(work.journal_path, *GARBLES["vectors"](frames[5]))
    embedder = Embedder(model, batch_size=4, token_memo=0)
    with pytest.MonkeyPatch.context() as patch:
        interrupt_after(patch, 2)  # the garbled batch again, and the next new one
        with pytest.raises(Interrupt):
            embedder.embed_file(src, out, layout="packed", chunk_sentences=16, resume=True)
    assert [(f.chunk, f.batch) for f in work.scan()] == sorted({(f.chunk, f.batch) for f in frames} | {(2, 2)})
    assert len(work.damage) == 1 and work.damage[0].offset == frames[5].offset
    with pytest.warns(UserWarning, match=rf"bytes {frames[5].offset:,}\.\..*their sentences were embedded again "
                                         "by an earlier resume"):
        report = embedder.embed_file(src, out, layout="packed", chunk_sentences=16, resume=True)
    assert report.reembedded == 0 and report.resumed == sum(f.sentences for f in frames) + 4
    assert_uninterrupted(root, out, "packed")


def test_stateful_a_garbled_frame_is_embedded_again_with_every_batch_after_it(tmp_path, model):
    # Each batch carries on from the state the one before ended in, so what follows a garbled
    # frame is embedded again too, from the state the last good frame carries: bit for bit.
    src = write_lines(tmp_path / "in.txt", corpus(40, seed=21))
    kwargs = dict(layout="packed", chunk_sentences=8)

    def fresh():
        return Embedder(model, batch_size=4, state="stateful", token_memo=0)

    fresh().embed_file(src, tmp_path / "ref.hdf5", **kwargs)
    out = tmp_path / "out.hdf5"
    work = WorkFolder(out)
    with pytest.MonkeyPatch.context() as patch:
        interrupt_after(patch, 7)
        with pytest.raises(Interrupt):
            fresh().embed_file(src, out, **kwargs)
    saved = tmp_path / "saved.partial"
    shutil.copytree(work.path, saved)
    frames = work.scan()
    assert len(frames) == 7 and all(f.sentences == 4 and f.state_bytes > 0 for f in frames)
    # The fourth frame's vectors (three whole frames after it), and the state the last frame hands on.
    for frame, offset, again in ((frames[3], frames[3].vector_offset + 64, 16),
                                 (frames[6], frames[6].state_offset + 8, 4)):
        shutil.rmtree(work.path, ignore_errors=True)
        shutil.copytree(saved, work.path)
        garble(work.journal_path, offset, np.full(4, 1e30, dtype="<f4").tobytes())
        with pytest.warns(UserWarning, match=rf"bytes {frame.offset:,}\.\..* {again} sentences embedded again"):
            report = fresh().embed_file(src, out, resume=True, **kwargs)
        with open_embeddings(tmp_path / "ref.hdf5") as ref, open_embeddings(out) as got:
            assert_same(ref, got)
        assert report.resumed == 28 - again and report.reembedded == again
        out.unlink()


def test_cli_a_garbled_frame_is_one_warning_line_and_a_second_frame_for_a_batch_is_refused(tmp_path, capsys, model):
    src = write_lines(tmp_path / "in.txt", corpus(30, seed=22))
    out = tmp_path / "out.hdf5"
    work = WorkFolder(out)
    argv = ["embed", str(src), str(out), *FIXTURE_MODEL_ARGS, "--layout", "packed", "--batch-size", "4"]
    with pytest.MonkeyPatch.context() as patch:
        interrupt_after(patch, 4)
        with pytest.raises(Interrupt):
            Embedder(model, batch_size=4).embed_file(src, out, layout="packed")
    saved = tmp_path / "saved.partial"
    shutil.copytree(work.path, saved)
    frames = work.scan()
    garble(work.journal_path, *GARBLES["vectors"](frames[1]))
    capsys.readouterr()
    assert main(argv + ["--resume"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == (f"elmo embed: warning: {work.journal_path}: bytes {frames[1].offset:,}..{frames[1].end:,} are "
                      f"damaged (they fail the journal's CRC-32 check) and were not copied; {frames[1].sentences} "
                      "sentences embedded again from the input"), err
    assert err[-1].startswith("elmo embed: wrote 30 sentences") and len(err) == 2, err
    out.unlink()
    # A second whole frame for a batch the journal already holds: which one is right cannot be
    # told, so the resume is refused naming the byte, and the journal is left as it was.
    shutil.copytree(saved, work.path)
    with open(work.journal_path, "r+b") as f:
        f.seek(frames[1].offset)
        copy = f.read(frames[1].end - frames[1].offset)
        f.seek(0, os.SEEK_END)
        f.write(copy)
    size = os.path.getsize(work.journal_path)
    line = one_error_line(capsys, argv + ["--resume"])
    assert f"{work.journal_path}: damaged at byte {frames[-1].end:,}: a second frame for batch 1 of chunk 0" in line \
        and "--force" in line, line
    assert os.path.getsize(work.journal_path) == size and not out.exists()


def test_stateful_resume_carries_the_state_across_the_interruption(tmp_path, monkeypatch, model):
    lines = corpus(40, seed=2)
    src = write_lines(tmp_path / "in.txt", lines)
    kwargs = dict(layout="packed", chunk_sentences=8)

    def fresh():  # a new process, as after a kill; without the token memo, whose history a resume changes
        return Embedder(model, batch_size=4, state="stateful", token_memo=0)

    fresh().embed_file(src, tmp_path / "ref.hdf5", **kwargs)
    out = tmp_path / "out.hdf5"
    with monkeypatch.context() as patch:
        interrupt_after(patch, 5)
        with pytest.raises(Interrupt):
            fresh().embed_file(src, out, **kwargs)
    report = fresh().embed_file(src, out, resume=True, **kwargs)
    assert report.resumed == 20
    with open_embeddings(tmp_path / "ref.hdf5") as ref, open_embeddings(out) as got:
        assert_same(ref, got)  # the same batches from the same states: bit for bit
    # Without the carried state, the rows after the interruption would differ.
    with open_embeddings(out) as got:
        restarted = fresh().embed_sentences(lines[20:])
        assert not np.allclose(got[20], restarted[0], atol=1e-4)


def test_resume_refuses_other_settings_and_other_input(tmp_path, monkeypatch, model):
    lines = corpus(40, seed=3)
    src = write_lines(tmp_path / "in.txt", lines)
    out = tmp_path / "out.hdf5"
    embedder = Embedder(model, batch_size=4)
    with monkeypatch.context() as patch:
        interrupt_after(patch, 3)
        with pytest.raises(Interrupt):
            embedder.embed_file(src, out, chunk_sentences=16)
    with pytest.raises(ValueError, match=r"dtype: the interrupted run had 'float32', this one has 'float16'"):
        embedder.embed_file(src, out, chunk_sentences=16, dtype="float16", resume=True)
    with pytest.raises(FileExistsError, match="interrupted run.*--resume.*--force"):
        embedder.embed_file(src, out, chunk_sentences=16)
    changed = write_lines(tmp_path / "changed.txt", lines[:5] + ["a different line"] + lines[6:])
    with pytest.raises(ValueError, match=r"changed.txt: lines 1\.\.16 differ from those the interrupted run embedded"):
        embedder.embed_file(changed, out, chunk_sentences=16, resume=True)
    # Another process holding the work file: refused, not shared.
    holder = WorkFolder(out)
    holder.lock()
    try:
        code = subprocess.run([*EMBED_CLI, str(src), str(out), *FIXTURE_MODEL_ARGS, "--resume"], capture_output=True, text=True)
        assert code.returncode == 2 and "another elmo embed is writing this output" in code.stderr
    finally:
        holder.release()
    # --force starts over; the finished output then makes --resume a no-op.
    report = embedder.embed_file(src, out, chunk_sentences=16, overwrite=True)
    assert report.resumed == 0 and report.sentences == 40
    again = embedder.embed_file(src, out, chunk_sentences=16, resume=True)
    assert again.already_complete and again.sentences == 40
    with pytest.raises(FileExistsError, match="not the finished output of a run with these settings"):
        embedder.embed_file(src, out, chunk_sentences=16, resume=True, dtype="float16")


@pytest.mark.parametrize("other", ["layers", "weights"])
def test_frames_of_another_run_are_embedded_again_never_copied(tmp_path, monkeypatch, model, other):
    """Issue 60: another run's journal put in this work file (its work.json left as it was):
    before, its frames were copied into the output, 336 sentences of the wrong vectors. Every
    frame carries its run's identity; a frame of another run is embedded again."""
    lines = corpus(40, seed=4)
    src = write_lines(tmp_path / "in.txt", lines)
    embedder = Embedder(model, batch_size=4)
    embedder.embed_file(src, tmp_path / "ref.hdf5", chunk_sentences=16, layout="packed")
    if other == "layers":
        stranger, stranger_layers = embedder, "top"
    else:
        torch = pytest.importorskip("torch")
        changed = load_fixture_model("allennlp")
        with torch.no_grad():
            changed.forward_layers[0].projection.mul_(0.5)
        stranger, stranger_layers = Embedder(changed, batch_size=4), "all"
    for out, who, layers in ((tmp_path / "out.hdf5", embedder, "all"), (tmp_path / "b.hdf5", stranger, stranger_layers)):
        with monkeypatch.context() as patch:
            interrupt_after(patch, 6)
            with pytest.raises(Interrupt):
                who.embed_file(src, out, layers=layers, chunk_sentences=16, layout="packed")
    work = WorkFolder(tmp_path / "out.hdf5")
    shutil.copyfile(WorkFolder(tmp_path / "b.hdf5").journal_path, work.journal_path)
    assert work.scan() == [] and len(work.damage) == 1 and work.damage[0].foreign, work.damage  # none counts
    shutil.copyfile(WorkFolder(tmp_path / "b.hdf5").journal_path, work.journal_path)  # (scan cut it off)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = embedder.embed_file(src, tmp_path / "out.hdf5", chunk_sentences=16, layout="packed", resume=True)
    assert report.resumed == 0 and report.sentences == 40
    assert len(caught) == 1 and "hold frames of another run" in str(caught[0].message), caught
    with open_embeddings(tmp_path / "ref.hdf5") as ref, open_embeddings(tmp_path / "out.hdf5") as got:
        assert_same(ref, got)


def one_error_line(capsys, argv) -> str:
    """Run the EMBED_CLI in this process; it must fail with exit code 2 and one line on stderr."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_foreign_or_damaged_work_file_is_refused_in_one_line_naming_it(tmp_path, capsys, model):
    src = write_lines(tmp_path / "in.txt", corpus(30, seed=10))
    out = tmp_path / "out.hdf5"
    work = WorkFolder(out)
    argv = ["embed", str(src), str(out), *FIXTURE_MODEL_ARGS, "--layout", "packed", "--batch-size", "4"]
    # A plain file with the work file's name: never removed, whatever the flags.
    (tmp_path / "out.hdf5.partial").write_text("my notes\n")
    for flags in ([], ["--resume"], ["--force"]):
        line = one_error_line(capsys, argv + flags)
        assert f"{work.path}: in the way of this run's work file; move it away" in line, line
    assert (tmp_path / "out.hdf5.partial").read_text() == "my notes\n"
    os.remove(work.path)
    # A folder of someone else's: neither taken over nor deleted (not even by --force).
    os.mkdir(work.path)
    (tmp_path / "out.hdf5.partial" / "notes.txt").write_text("keep me\n")
    for flags in ([], ["--resume"], ["--force"]):
        line = one_error_line(capsys, argv + flags)
        assert f"{work.path}: in the way of the work file of {out}, and not an elmo embed work file " \
               "(it holds notes.txt); move it away" in line, line
    assert os.listdir(work.path) == ["notes.txt"]
    os.remove(os.path.join(work.path, "notes.txt"))
    # Another program's work.json.
    (tmp_path / "out.hdf5.partial" / "work.json").write_text('{"format": "something-else"}')
    for flags in ([], ["--resume"], ["--force"]):
        line = one_error_line(capsys, argv + flags)
        assert f"{work.path}: in the way of the work file of {out}" in line and "another program's" in line, line
    assert os.listdir(work.path) == ["work.json"]
    shutil.rmtree(work.path)
    assert not out.exists()

    # One of ours, damaged: its work.json unreadable.
    embedder = Embedder(model, batch_size=4)
    with pytest.MonkeyPatch.context() as patch:
        interrupt_after(patch, 4)
        with pytest.raises(Interrupt):
            embedder.embed_file(src, out, layout="packed")
    saved = tmp_path / "saved.partial"
    shutil.copytree(work.path, saved)
    with open(work.info_path, "r+b") as f:
        f.truncate(20)
    line = one_error_line(capsys, argv + ["--resume"])
    assert line.startswith(f"elmo embed: error: {work.path}: not a readable work file (") and "--force" in line
    # Its journal damaged before the point known to be on disk: the damaged frame is embedded
    # again, with one warning line (see the garbled-frame tests below for every part of a frame).
    shutil.rmtree(work.path)
    shutil.copytree(saved, work.path)
    frames = work.scan()
    assert len(frames) == 4 and int(open(work.synced_path).read()) == frames[-1].end
    with open(work.journal_path, "r+b") as f:
        f.seek(frames[2].offset)
        f.write(b"XXXX")  # the third frame's magic
    capsys.readouterr()
    assert main(argv + ["--resume"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith(f"elmo embed: warning: {work.journal_path}: bytes "
                                               f"{frames[2].offset:,}..{frames[3].offset:,} are damaged"), err
    assert f"{frames[2].sentences} sentences embedded again" in err[0], err
    with open_embeddings(out) as got:
        assert_same(got, embedder.embed_sentences(corpus(30, seed=10)), exact=False)
    out.unlink()
    # A damaged work file of ours that cannot be continued: --force starts over from it.
    shutil.copytree(saved, work.path)
    with open(work.info_path, "r+b") as f:
        f.truncate(20)
    capsys.readouterr()
    assert main(argv + ["--force"]) == 0
    assert not os.path.exists(work.path)
    reference = embedder.embed_sentences(corpus(30, seed=10))
    with open_embeddings(out) as got:
        assert_same(got, reference, exact=False)


def test_the_input_is_never_overwritten(tmp_path, capsys):
    src = write_lines(tmp_path / "in.txt", corpus(10, seed=11))
    before = src.read_bytes()
    os.symlink(src, tmp_path / "link.txt")
    os.link(src, tmp_path / "hard.txt")
    for output in (src, tmp_path / "link.txt", tmp_path / "hard.txt"):
        for flags in ([], ["--force"], ["--resume"]):
            line = one_error_line(capsys, ["embed", str(src), str(output), *FIXTURE_MODEL_ARGS, *flags])
            assert f"{output}: this is an input of the command ({src}); elmo never overwrites an input" in line, line
            assert not os.path.exists(f"{output}.partial")
    assert src.read_bytes() == before
    # An existing file that is not a finished output of the same run is not replaced without --force.
    (tmp_path / "other.hdf5").write_bytes(b"precious")
    for flags in ([], ["--resume"]):
        line = one_error_line(capsys, ["embed", str(src), str(tmp_path / "other.hdf5"), *FIXTURE_MODEL_ARGS, *flags])
        assert f"{tmp_path / 'other.hdf5'}: already exists" in line and "--force" in line, line
    assert (tmp_path / "other.hdf5").read_bytes() == b"precious"
    assert sorted(os.listdir(tmp_path)) == ["hard.txt", "in.txt", "link.txt", "other.hdf5"]


def feed_fifo(path, data: bytes) -> threading.Thread:
    """Open the FIFO ``path`` for writing once, write ``data`` and close it (in a thread)."""
    def feed():
        try:
            with open(path, "wb") as f:
                f.write(data)
        except BrokenPipeError:  # the reader stopped early (an interrupted run)
            pass

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return thread


def test_pipes_are_read_once_and_a_piped_run_resumes(tmp_path, model):
    lines = corpus(60, seed=12)
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    src = write_lines(tmp_path / "in.txt", lines)
    Embedder(model, batch_size=4).embed_file(src, tmp_path / "ref.hdf5", layout="packed", chunk_sentences=16)
    # Standard input, with the bar on (which counts lines only where a second read is possible).
    piped = subprocess.run([*EMBED_CLI, "-", str(tmp_path / "stdin.hdf5"), *FIXTURE_MODEL_ARGS, "--layout", "packed", "--progress"],
                           input=data, capture_output=True, timeout=600)
    assert piped.returncode == 0, piped.stderr.decode()[-2000:]
    assert b"wrote 60 sentences" in piped.stderr
    # A named pipe, opened for writing once: a second read would wait for a writer for ever.
    os.mkfifo(tmp_path / "fifo")
    feeder = feed_fifo(tmp_path / "fifo", data)
    named = subprocess.run([*EMBED_CLI, str(tmp_path / "fifo"), str(tmp_path / "fifo.hdf5"), *FIXTURE_MODEL_ARGS, "--layout", "packed",
                            "--progress"], capture_output=True, timeout=600)
    feeder.join(timeout=10)
    assert named.returncode == 0, named.stderr.decode()[-2000:]
    with open_embeddings(tmp_path / "ref.hdf5") as ref:
        for name in ("stdin.hdf5", "fifo.hdf5"):
            with open_embeddings(tmp_path / name) as got:
                assert_same(ref, got, exact=False)
                assert [got.text(i) for i in range(60)] == lines
    # Interrupted while reading a pipe, resumed from the same stream given again.
    out = tmp_path / "out.hdf5"
    embedder = Embedder(model, batch_size=4, token_memo=0)
    kwargs = dict(layout="packed", chunk_sentences=16)
    with pytest.MonkeyPatch.context() as patch:
        interrupt_after(patch, 6)
        feeder = feed_fifo(tmp_path / "fifo", data)
        with pytest.raises(Interrupt):
            embedder.embed_file(tmp_path / "fifo", out, **kwargs)
    feeder.join(timeout=10)
    feeder = feed_fifo(tmp_path / "fifo", data)
    report = embedder.embed_file(tmp_path / "fifo", out, resume=True, **kwargs)
    feeder.join(timeout=10)
    assert 0 < report.resumed < 60 and report.sentences == 60
    Embedder(model, batch_size=4, token_memo=0).embed_file(src, tmp_path / "exact.hdf5", **kwargs)
    with open_embeddings(tmp_path / "exact.hdf5") as ref, open_embeddings(out) as got:
        assert_same(ref, got)  # without the token memo: bit for bit


def test_cli_progress_and_final_line(tmp_path):
    src = write_lines(tmp_path / "in.txt", corpus(30))
    result = subprocess.run([*EMBED_CLI, str(src), str(tmp_path / "o.hdf5"), *FIXTURE_MODEL_ARGS, "--progress", "--layout", "packed"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "30/30" in result.stderr and "sent/s" in result.stderr  # the bar knew the total
    tokens = sum(len(line.split()) for line in corpus(30))
    size = os.path.getsize(tmp_path / "o.hdf5")
    assert result.stderr.strip().splitlines()[-1] == (
        f"elmo embed: wrote 30 sentences, {tokens:,} tokens, {size:,} bytes ({size / 2**20:,.1f} MiB) to "
        f"{tmp_path / 'o.hdf5'}")


def test_force_never_deletes_a_partial_folder_elmo_cannot_show_it_made(tmp_path, capsys, model):
    """Issue 45: --force removed a foreign OUT.partial/ holding only a user's journal.bin, or only
    a work.json that is not JSON (names elmo's work file also uses). Only a folder with elmo's
    marker, or one made before the marker whose work.json says it is elmo's, is taken over or
    deleted."""
    src = write_lines(tmp_path / "in.txt", corpus(12, seed=13))
    out = tmp_path / "out.hdf5"
    work = WorkFolder(out)
    argv = ["embed", str(src), str(out), *FIXTURE_MODEL_ARGS, "--batch-size", "4"]
    for name, content in (("journal.bin", b"the user's own journal"), ("work.json", b"not json {")):
        os.mkdir(work.path)
        (tmp_path / "out.hdf5.partial" / name).write_bytes(content)
        for flags in (["--force"], ["--resume"], []):
            line = one_error_line(capsys, argv + flags)
            assert line.startswith(f"elmo embed: error: {work.path}: in the way of the work file of {out}, and not an "
                                   f"elmo embed work file (it holds {name}, without elmo's marker"), line
        assert os.listdir(work.path) == [name] and (tmp_path / "out.hdf5.partial" / name).read_bytes() == content
        shutil.rmtree(work.path)
    assert not out.exists()
    # An empty one has nothing to lose: not resumable, but started over by --force.
    os.mkdir(work.path)
    assert "not a readable work file" in one_error_line(capsys, argv + ["--resume"])
    assert main(argv + ["--force"]) == 0 and not os.path.exists(work.path)
    os.remove(out)
    # A work file of ours carries the marker (with a random id) from the moment it exists ...
    embedder = Embedder(model, batch_size=4)
    with pytest.MonkeyPatch.context() as patch:
        interrupt_after(patch, 1)
        with pytest.raises(Interrupt):
            embedder.embed_file(src, out)
    assert sorted(os.listdir(work.path)) == [".elmo-owner", "journal.bin", "lock", "synced", "work.json"]
    # ... and one made before the marker existed is still recognised, by its work.json: resumed.
    os.remove(os.path.join(work.path, ".elmo-owner"))
    capsys.readouterr()
    assert main(argv + ["--resume"]) == 0, capsys.readouterr().err
    assert not os.path.exists(work.path)
    with open_embeddings(out) as got:
        assert_same(got, embedder.embed_sentences(corpus(12, seed=13)), exact=False)
