"""Embedding outputs (elmo.inference.outputs): the reader over every layout, dtype and layer
choice, the packed float16 size, and sharded runs (by hand and under torchrun) reading back as
the one-process output."""

import json
import os
import subprocess
import sys

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
from elmo.inference.outputs import CHUNK_BYTES


@pytest.fixture(scope="module")
def model():
    return load_fixture_model("allennlp")


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


@pytest.mark.parametrize("layout", ["allennlp", "packed"])
@pytest.mark.exactness
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
    shards = [f"shard-0000{r}-of-00003.hdf5" for r in range(3)]
    assert sorted(os.listdir(out)) == [".elmo-owner", "manifest.json", *shards]
    with open_embeddings(tmp_path / "one.hdf5") as one, open_embeddings(out) as sharded:
        assert_same(one, sharded, exact=False)  # other batches: the token memo's last bits
        assert list(iter(sharded))[44].shape == one[44].shape
        if layout == "packed":
            assert [sharded.text(i) for i in range(45)] == lines


@pytest.mark.slow  # several processes: CI runs it in its slow pass
def test_torchrun_two_processes_equal_one(tmp_path, model, layout="packed"):
    lines = corpus(40, seed=6)
    src = write_lines(tmp_path / "in.txt", lines)
    Embedder(model).embed_file(src, tmp_path / "one.hdf5", layout=layout)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "elmo.cli.main", "embed", str(src), str(tmp_path / "out"), *FIXTURE_MODEL_ARGS, "--layout", layout]
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
    result = subprocess.run([*EMBED_CLI, "-", str(tmp_path / "out"), *FIXTURE_MODEL_ARGS, "--shard", "0/2"], input="a b\n",
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "standard input or a pipe can be read only once" in result.stderr
    result = subprocess.run([*EMBED_CLI, str(src), str(tmp_path / "out"), *FIXTURE_MODEL_ARGS, "--shard", "1/2", "--state", "stateful"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "stateful policy" in result.stderr and "cannot be sharded" in result.stderr and "--state warm" in result.stderr
    assert main(["embed", str(src), str(tmp_path / "out"), *FIXTURE_MODEL_ARGS, "--shard", "2/2"]) == 2
    assert not (tmp_path / "out").exists()
