"""Embedding big corpora: resumable after kill -9, the packed layout and the reader over every
layout, sharded runs (by hand and under torchrun), and lines too long for one batch."""

import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

import h5py
import numpy as np
import pytest
from conftest import ALLENNLP, load_fixture_model

from elmo import Embedder, open_embeddings
from elmo.cli.main import main
from elmo.fileio import count_lines, read_lines
from elmo.inference import journal
from elmo.inference.journal import HEADER, WorkFolder
from elmo.inference.outputs import CHUNK_BYTES

CLI = [sys.executable, "-m", "elmo.cli.main", "embed"]
MODEL = ["--options", str(ALLENNLP / "options.json"), "--weights", str(ALLENNLP / "lm_weights.hdf5")]
WORDS = ("the cat sat on mat . , bank river raised rates we and of to in is was naïve café über "
         "Zürich 東京 a-b 3.14 'quoted' (x)").split()


def corpus(n: int, seed: int = 0, longest: int = 25) -> list[str]:
    """``n`` lines of varied length, with empty lines and repeats."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, longest))) for _ in range(n)]
    for i in range(0, n, 17):
        lines[i] = lines[i // 2]  # repeated lines
    return lines


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def model():
    return load_fixture_model("allennlp")


def assert_same(a, b, exact=True):
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.shape == y.shape, i
        if exact:
            assert np.array_equal(x, y), f"sentence {i} differs"
        else:
            np.testing.assert_allclose(x, y, rtol=0, atol=1e-6, err_msg=f"sentence {i}")


# -------------------------------------------------------------------------------- resuming
def test_kill_9_mid_run_then_resume_gives_the_uninterrupted_output(tmp_path, capsys):
    n = 400
    src = write_lines(tmp_path / "in.txt", corpus(n))
    args = [str(src), "--layout", "packed", "--batch-size", "8", *MODEL]
    assert main(["embed", args[0], str(tmp_path / "ref.hdf5"), *args[1:]]) == 0
    out = tmp_path / "out.hdf5"
    work = WorkFolder(out)
    process = subprocess.Popen([*CLI, args[0], str(out), *args[1:]], stderr=subprocess.DEVNULL)
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


class Interrupt(Exception):
    pass


def interrupt_after(monkeypatch, frames: int):
    """Make the journal stop (as a kill would) once ``frames`` batches are in it."""
    original = journal.JournalAppender.append
    count = [0]

    def append(self, **kwargs):
        if count[0] == frames:
            raise Interrupt
        count[0] += 1
        return original(self, **kwargs)

    monkeypatch.setattr(journal.JournalAppender, "append", append)


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
        code = subprocess.run([*CLI, str(src), str(out), *MODEL, "--resume"], capture_output=True, text=True)
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
    """Run the CLI in this process; it must fail with exit code 2 and one line on stderr."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_foreign_or_damaged_work_file_is_refused_in_one_line_naming_it(tmp_path, capsys, model):
    src = write_lines(tmp_path / "in.txt", corpus(30, seed=10))
    out = tmp_path / "out.hdf5"
    work = WorkFolder(out)
    argv = ["embed", str(src), str(out), *MODEL, "--layout", "packed", "--batch-size", "4"]
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
            line = one_error_line(capsys, ["embed", str(src), str(output), *MODEL, *flags])
            assert f"{output}: the output file is the input file; choose another output" in line, line
            assert not os.path.exists(f"{output}.partial")
    assert src.read_bytes() == before
    # An existing file that is not a finished output of the same run is not replaced without --force.
    (tmp_path / "other.hdf5").write_bytes(b"precious")
    for flags in ([], ["--resume"]):
        line = one_error_line(capsys, ["embed", str(src), str(tmp_path / "other.hdf5"), *MODEL, *flags])
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
    piped = subprocess.run([*CLI, "-", str(tmp_path / "stdin.hdf5"), *MODEL, "--layout", "packed", "--progress"],
                           input=data, capture_output=True, timeout=600)
    assert piped.returncode == 0, piped.stderr.decode()[-2000:]
    assert b"wrote 60 sentences" in piped.stderr
    # A named pipe, opened for writing once: a second read would wait for a writer for ever.
    os.mkfifo(tmp_path / "fifo")
    feeder = feed_fifo(tmp_path / "fifo", data)
    named = subprocess.run([*CLI, str(tmp_path / "fifo"), str(tmp_path / "fifo.hdf5"), *MODEL, "--layout", "packed",
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
    result = subprocess.run([*CLI, str(src), str(tmp_path / "o.hdf5"), *MODEL, "--progress", "--layout", "packed"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "30/30" in result.stderr and "sent/s" in result.stderr  # the bar knew the total
    tokens = sum(len(line.split()) for line in corpus(30))
    size = os.path.getsize(tmp_path / "o.hdf5")
    assert result.stderr.strip().splitlines()[-1] == (
        f"elmo embed: wrote 30 sentences, {tokens:,} tokens, {size:,} bytes ({size / 2**20:,.1f} MiB) to "
        f"{tmp_path / 'o.hdf5'}")


# ------------------------------------------------------------------------- layouts and reader
@pytest.mark.parametrize("layout", ["allennlp", "packed"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("layers", ["all", "top", "average", 1])
def test_reader_over_every_layout(tmp_path, model, layout, dtype, layers):
    lines = corpus(25, seed=4)
    src = write_lines(tmp_path / "in.txt", lines)
    embedder = Embedder(model, batch_size=4)
    compression = {"float32": "gzip", "float16": "lzf"}[dtype] if layers == "all" else "none"
    report = embedder.embed_file(src, tmp_path / "out.hdf5", layers=layers, layout=layout, dtype=dtype,
                                 compression=compression)
    expected = embedder.embed_sentences(lines, layers=layers)
    assert report.tokens == sum(len(line.split()) for line in lines)
    with open_embeddings(tmp_path / "out.hdf5") as vectors:
        assert len(vectors) == 25 and vectors.layers == layers
        assert vectors.dtype == np.dtype(dtype)
        assert vectors.token_shape == ((3, 32) if layers == "all" else (32,))
        for i, (got, want) in enumerate(zip(vectors, expected)):  # in order
            assert got.shape == want.shape and vectors.n_tokens(i) == len(lines[i].split())
            if dtype == "float32":
                assert np.array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want.astype(np.float16), rtol=0, atol=0)
        np.testing.assert_array_equal(vectors[-1], vectors[24])  # by index, any order
        np.testing.assert_array_equal(vectors[3], vectors[2:5][1])
        with pytest.raises(IndexError, match="sentence 25 out of range"):
            vectors[25]
        texts = [vectors.text(i) for i in range(25)]
    if layout == "packed":
        assert texts == lines
    else:  # sentence_to_index keeps a repeated line's last index only
        assert all(t is None or t == line for t, line in zip(texts, lines))
        assert texts[-1] == lines[-1]
    if layout == "allennlp":  # still readable as allennlp elmo wrote it
        with h5py.File(tmp_path / "out.hdf5") as f:
            assert sorted(f.keys(), key=lambda k: (len(k), k)) == [str(i) for i in range(25)] + ["sentence_to_index"]
            assert json.loads(f["sentence_to_index"][0])[lines[-1]] == "24"


def test_reader_opens_a_plain_allennlp_file_and_a_list_of_files(tmp_path, model):
    # As allennlp elmo itself wrote it: no attributes of ours.
    with h5py.File(tmp_path / "old.hdf5", "w") as f:
        f["0"] = np.ones((3, 2, 4), dtype=np.float32)
        f["1"] = np.zeros((3, 0, 4), dtype=np.float32)
        f.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())[0] = json.dumps({"a b": "0", "": "1"})
    src = write_lines(tmp_path / "in.txt", corpus(5))
    Embedder(model).embed_file(src, tmp_path / "new.hdf5", layout="packed")
    with open_embeddings(tmp_path / "old.hdf5") as old:
        assert len(old) == 2 and old.token_shape == (3, 4) and old.text(0) == "a b" and old[1].shape == (3, 0, 4)
    with open_embeddings([tmp_path / "new.hdf5", tmp_path / "new.hdf5"]) as both:
        assert len(both) == 10
        np.testing.assert_array_equal(both[7], both[2])
    with pytest.raises(ValueError, match="differ from the first file"):
        open_embeddings([tmp_path / "new.hdf5", tmp_path / "old.hdf5"])
    (tmp_path / "junk.hdf5").write_bytes(b"not hdf5")
    with pytest.raises(ValueError, match="junk.hdf5: not a readable HDF5 file"):
        open_embeddings(tmp_path / "junk.hdf5")


def test_packed_float16_is_a_quarter_of_allennlp_float32_or_less(tmp_path, model):
    src = write_lines(tmp_path / "in.txt", corpus(200, longest=40))
    embedder = Embedder(model)
    big = embedder.embed_file(src, tmp_path / "a.hdf5")
    small = embedder.embed_file(src, tmp_path / "p.hdf5", layout="packed", dtype="float16")
    # 3 x 32 values per token: 384 bytes in float32, 192 in float16; the packed layout adds its
    # text, offsets and at most one partly filled chunk, allennlp a dataset per line.
    assert small.bytes < small.tokens * 192 + CHUNK_BYTES + 100_000
    assert big.bytes > big.tokens * 384 + 200 * 400


# ----------------------------------------------------------------------------------- shards
@pytest.mark.parametrize("layout", ["allennlp", "packed"])
def test_shards_read_back_as_the_one_process_output(tmp_path, model, layout):
    lines = corpus(45, seed=5)
    src = write_lines(tmp_path / "in.txt", lines)
    embedder = Embedder(model, batch_size=4)
    embedder.embed_file(src, tmp_path / "one.hdf5", layout=layout)
    out = tmp_path / "sharded"
    reports = [embedder.embed_file(src, out, layout=layout, shard=(rank, 3)) for rank in (2, 0)]
    assert [r.sentences for r in reports] == [15, 15]
    with pytest.raises(FileNotFoundError, match=r"shard-00001-of-00003.hdf5 missing.*--resume"):
        open_embeddings(out)
    # Shards resume one by one: rank 1 interrupted, then continued alone.
    with pytest.MonkeyPatch.context() as patch:
        interrupt_after(patch, 2)
        with pytest.raises(Interrupt):
            embedder.embed_file(src, out, layout=layout, shard=(1, 3))
    assert os.path.isdir(out / "shard-00001-of-00003.hdf5.partial")
    with pytest.raises(FileNotFoundError, match=r"shard-00001-of-00003.hdf5 missing"):
        open_embeddings(out)
    resumed = embedder.embed_file(src, out, layout=layout, shard=(1, 3), resume=True)
    assert resumed.resumed == 8 and resumed.sentences == 15
    assert sorted(os.listdir(out)) == ["manifest.json"] + [f"shard-0000{r}-of-00003.hdf5" for r in range(3)]
    with open_embeddings(tmp_path / "one.hdf5") as one, open_embeddings(out) as sharded:
        assert_same(one, sharded, exact=False)  # other batches: the token memo's last bits
        assert list(iter(sharded))[44].shape == one[44].shape
        if layout == "packed":
            assert [sharded.text(i) for i in range(45)] == lines


def test_torchrun_two_processes_equal_one(tmp_path, model, layout="packed"):
    lines = corpus(40, seed=6)
    src = write_lines(tmp_path / "in.txt", lines)
    Embedder(model).embed_file(src, tmp_path / "one.hdf5", layout=layout)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "elmo.cli.main", "embed", str(src), str(tmp_path / "out"), *MODEL, "--layout", layout]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("elmo embed: wrote 20 sentences") == 2
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["world_size"] == 2 and manifest["layout"] == layout
    with open_embeddings(tmp_path / "one.hdf5") as one, open_embeddings(tmp_path / "out") as both:
        assert_same(one, both, exact=False)
    # Resuming a finished sharded run does nothing, rank by rank.
    result = subprocess.run(command + ["--resume"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stderr.count("already complete: 20 sentences") == 2


def test_sharding_refuses_standard_input_and_stateful(tmp_path, model):
    src = write_lines(tmp_path / "in.txt", corpus(5))
    result = subprocess.run([*CLI, "-", str(tmp_path / "out"), *MODEL, "--shard", "0/2"], input="a b\n",
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "standard input or a pipe can be read only once" in result.stderr
    result = subprocess.run([*CLI, str(src), str(tmp_path / "out"), *MODEL, "--shard", "1/2", "--state", "stateful"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "stateful policy" in result.stderr and "cannot be sharded" in result.stderr and "--state warm" in result.stderr
    assert main(["embed", str(src), str(tmp_path / "out"), *MODEL, "--shard", "2/2"]) == 2
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------- long lines
def test_a_long_sentence_in_windows_equals_it_whole(model):
    rng = random.Random(7)
    sentence = [rng.choice(WORDS) for _ in range(300)]
    whole = Embedder(model, max_tokens=10_000).embed_sentence(sentence)
    windowed = Embedder(model, max_tokens=128).embed_sentence(sentence)  # 3 windows
    np.testing.assert_allclose(windowed, whole, rtol=0, atol=1e-5)
    reset = Embedder(model, max_tokens=10_000, state="reset").embed_sentence(sentence)
    np.testing.assert_allclose(Embedder(model, max_tokens=200, state="reset").embed_sentence(sentence), reset,
                               rtol=0, atol=1e-5)


@pytest.mark.parametrize("layout", ["allennlp", "packed"])
def test_a_file_with_a_long_line_streams_it_in_windows(tmp_path, model, layout):
    lines = corpus(12, seed=8)
    rng = random.Random(9)
    lines[5] = " ".join(rng.choice(WORDS) for _ in range(300))
    src = write_lines(tmp_path / "in.txt", lines)
    Embedder(model, max_tokens=128).embed_file(src, tmp_path / "out.hdf5", layout=layout, layers="all")
    expected = Embedder(model, max_tokens=10_000).embed_sentences(lines)
    with open_embeddings(tmp_path / "out.hdf5") as got:
        assert got[5].shape == (3, 300, 32)
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


def test_too_long_lines_are_refused_with_their_line_number(tmp_path, model):
    lines = ["short one", "a b c d e f", "ok"]
    src = write_lines(tmp_path / "in.txt", lines)
    embedder = Embedder(model, max_tokens=4)
    with pytest.raises(ValueError, match=r"in.txt:2: 6 tokens, more than the limit of 5 for one line"):
        embedder.embed_file(src, tmp_path / "out.hdf5", max_line_tokens=5)
    src.write_text("x\n" + "y" * 1000 + "\n")  # refused before it is split: 64 bytes per token allowed
    with pytest.raises(ValueError, match=r"in.txt:2: the line is longer than 320 bytes"):
        embedder.embed_file(src, tmp_path / "out.hdf5", max_line_tokens=5, overwrite=True)
    write_lines(src, lines)
    with pytest.raises(ValueError, match=r"in.txt:2: 6 tokens; stateful mode .* --state warm or reset"):
        Embedder(model, max_tokens=4, state="stateful").embed_file(src, tmp_path / "out.hdf5", overwrite=True)
    assert not (tmp_path / "out.hdf5").exists()
    result = subprocess.run([*CLI, str(src), str(tmp_path / "o.hdf5"), *MODEL, "--max-line-tokens", "3"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "in.txt:2: 6 tokens, more than the limit of 3" in result.stderr


# ------------------------------------------------------------------------------------ fileio
def test_count_lines_only_where_a_second_read_is_possible(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"one\ntwo\nthree")
    assert count_lines(tmp_path / "a.txt") == 3 == len(list(read_lines(tmp_path / "a.txt")))
    with gzip.open(tmp_path / "b.txt.gz", "wb") as f:
        f.write(b"x\n" * 5)
    assert count_lines(tmp_path / "b.txt.gz") == 5
    (tmp_path / "empty.txt").write_bytes(b"")
    assert count_lines(tmp_path / "empty.txt") == 0
    os.mkfifo(tmp_path / "fifo")
    assert count_lines(tmp_path / "fifo") is None and count_lines("-") is None
