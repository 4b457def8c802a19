"""Resumable embedding (elmo.inference.journal): kill -9 and resume give the uninterrupted output,
a cut frame costs its batch only, the stateful state carried across, other settings or input
refused, a foreign or damaged work file refused naming it, the input never overwritten, pipes
read once."""

import os
import shutil
import signal
import subprocess
import threading
import time

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
        # Not always bitwise: the token memo encodes a word in another group of words after the resume.
        assert_same(ref, got, exact=False)
        assert [got.text(i) for i in range(len(got))] == [ref.text(i) for i in range(len(ref))]
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "out.hdf5", "ref.hdf5"]  # the work file is gone


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
    # Its journal damaged before the point known to be on disk: refused, and the journal kept as it was.
    shutil.rmtree(work.path)
    shutil.copytree(saved, work.path)
    frames = work.scan()
    assert len(frames) == 4 and int(open(work.synced_path).read()) == frames[-1].end
    with open(work.journal_path, "r+b") as f:
        f.seek(frames[2].offset)
        f.write(b"XXXX")  # the third frame's magic
    size = os.path.getsize(work.journal_path)
    line = one_error_line(capsys, argv + ["--resume"])
    assert f"{work.journal_path}: damaged at byte {frames[2].offset:,}, before the {frames[-1].end:,} bytes " \
           f"known to be on disk; remove {work.path} (or pass --force)" in line, line
    assert os.path.getsize(work.journal_path) == size
    # --force starts over from a damaged work file of ours.
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
            assert f"{output}: the output file is the input file; choose another output" in line, line
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
