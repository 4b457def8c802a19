"""NLPL-style model archives (.zip) and folders through every entry point, and the archive checks."""

import gzip
import json
import os
import re
import shutil
import stat
import warnings
import zipfile
import zlib

import h5py
import numpy as np
import pytest
from conftest import ALLENNLP, FIXTURES, bounded_load, cache_files, zip_with_bomb

from elmo import BiLMConfig, ConfigError, Elmo, Embedder, WeightsError
from elmo.model.weights import load_bilm_tf
from elmo.cli.main import main
from elmo.hub import load_model
from elmo.hub.archives import ArchiveError, ModelFolder, read_model_vocabulary
from elmo.hub.resolve import load_model_folder

SENTENCES = [["The", "cat", "sat", "on", "the", "mat", "."], ["Über", "naïve", "résumés"], ["x"]]
VOCAB = FIXTURES / "bilm-tf" / "train" / "vocab.txt"  # holds <S>, </S>, <UNK>, as bilm-tf vocabularies do


def nlpl_zip(path, *, folder: str = "", weights_name: str = "model.hdf5", vocab: str | None = "vocab.txt.gz",
             stored: bool = False):
    """The AllenNLP fixture biLM zipped the NLPL way: options.json, model.hdf5, vocab.txt.gz and a
    meta.json, at the root or under ``folder``."""
    compression = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(path, "w", compression) as z:
        z.write(ALLENNLP / "options.json", f"{folder}options.json")
        z.write(ALLENNLP / "lm_weights.hdf5", f"{folder}{weights_name}")
        if vocab is not None:
            data = VOCAB.read_bytes()
            z.writestr(f"{folder}{vocab}", gzip.compress(data) if vocab.endswith(".gz") else data)
        z.writestr(f"{folder}meta.json", json.dumps({"id": 0, "corpus": "test"}))
    return path


@pytest.fixture(scope="module")
def reference():
    model = load_bilm_tf(ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5")
    return Embedder(model, state="reset").embed_sentences(SENTENCES)


def assert_same(vectors, reference):
    assert len(vectors) == len(reference)
    for got, want in zip(vectors, reference):
        assert np.array_equal(got, want)  # the same weights: the same numbers, bit for bit


@pytest.mark.parametrize("layout", [
    {},                                                            # files at the root, deflated
    {"folder": "elmo-model/"},                                     # inside one folder
    {"weights_name": "weights.hdf5", "vocab": "vocab.txt", "stored": True},
    {"weights_name": "elmo_tiny_weights.hdf5", "vocab": None},    # AllenNLP's file naming
])
def test_zip_gives_exactly_the_unpacked_files_numbers(tmp_path, reference, layout):
    archive = nlpl_zip(tmp_path / "model.zip", **layout)
    assert_same(Embedder.from_pretrained(archive, state="reset").embed_sentences(SENTENCES), reference)


def test_random_weight_model_zipped_the_nlpl_way(tmp_path):
    """The issue's case: random weights, written as bilm-tf does, zipped as NLPL does."""
    import torch

    from elmo import BiLM, BiLMConfig, save_bilm_tf

    torch.manual_seed(5)
    options, weights = save_bilm_tf(BiLM(BiLMConfig()), tmp_path / "unpacked", weights_name="model.hdf5")
    archive = tmp_path / "209.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(options, "options.json")
        z.write(weights, "model.hdf5")
        z.writestr("vocab.txt.gz", gzip.compress(VOCAB.read_bytes()))
        z.writestr("meta.json", "{}")
    want = Embedder(load_bilm_tf(options, weights)).embed_sentences(SENTENCES)
    assert_same(Embedder.from_pretrained(str(archive)).embed_sentences(SENTENCES), want)


def test_folder_of_the_same_files(tmp_path, reference):
    folder = tmp_path / "nlpl"
    with zipfile.ZipFile(nlpl_zip(tmp_path / "model.zip")) as z:
        z.extractall(folder)
    assert_same(Embedder.from_pretrained(str(folder), state="reset").embed_sentences(SENTENCES), reference)
    assert read_model_vocabulary(folder)[0][:3] == ["<S>", "</S>", "<UNK>"]


def test_weights_extracted_once_under_a_content_fingerprint(tmp_path):
    first = nlpl_zip(tmp_path / "a.zip")
    second = nlpl_zip(tmp_path / "b.zip", folder="inner/", stored=True)  # same weights, another archive
    with ModelFolder(first) as a, ModelFolder(second) as b:
        path_a, path_b = a.local_file("model.hdf5"), b.local_file("model.hdf5")
        assert path_a == path_b and path_a.read_bytes() == (ALLENNLP / "lm_weights.hdf5").read_bytes()
        mtime = path_a.stat().st_mtime_ns
        assert a.local_file("model.hdf5").stat().st_mtime_ns == mtime  # reused, not written again
    # Other weights under the same member name: another fingerprint, another file.
    other = tmp_path / "c.zip"
    with zipfile.ZipFile(other, "w") as z:
        z.write(ALLENNLP / "options.json", "options.json")
        z.write(FIXTURES / "bilm-tf" / "model" / "lm_weights.hdf5", "model.hdf5")
    with ModelFolder(other) as c:
        assert c.local_file("model.hdf5") != path_a


@pytest.mark.exactness
def test_every_entry_point_takes_an_archive(tmp_path, reference):
    from elmo.allennlp import ElmoEmbedder
    from elmo.hub import locate
    from elmo.tasks.config import BiLMSource, check_task_paths, task_config_from_dict

    archive = nlpl_zip(tmp_path / "model.zip")
    assert locate(str(archive)).kind == "archive"  # the one resolver names it, reading nothing
    elmo = Elmo.from_pretrained(str(archive), state="reset", dropout=0.0)
    assert elmo.bilm.config.lstm.dim == 64
    # AllenNLP's ElmoEmbedder with the archive alone: its first batch starts from zero state.
    embedder = ElmoEmbedder(str(archive))
    assert np.array_equal(embedder.embed_sentence(SENTENCES[0]), reference[0])
    # A task config naming the archive passes the path check and loads.
    config = task_config_from_dict({"task": "tagging", "metric": "accuracy", "output": str(tmp_path / "run"),
                                    "data": {"kind": "conll2003", "train": str(VOCAB), "dev_fraction": 0.1},
                                    "bilm": {"model": str(archive)}}, where="t.toml")
    assert isinstance(config.bilm, BiLMSource)
    check_task_paths(config, where="t.toml")
    assert load_model(config.bilm.model).config.lstm.dim == 64


def test_cli_embed_vocab_cache_and_convert(tmp_path, reference):
    archive = nlpl_zip(tmp_path / "model.zip")
    text = tmp_path / "in.txt"
    text.write_text("\n".join(" ".join(s) for s in SENTENCES) + "\n", encoding="utf-8")
    assert main(["embed", str(text), str(tmp_path / "a.hdf5"), "--model", str(archive), "--state", "reset"]) == 0
    with h5py.File(tmp_path / "a.hdf5", "r") as f:
        assert_same([f[str(i)][...] for i in range(3)], reference)
    # The archive's own vocabulary makes the vocabulary cache; embedding with it changes nothing.
    cache = tmp_path / "cache.hdf5"
    assert main(["cache-vocab", str(archive), str(cache), "--model", str(archive)]) == 0
    with h5py.File(cache, "r") as f:
        assert f["embedding"].shape == (32, 16)
    assert main(["embed", str(text), str(tmp_path / "b.hdf5"), "--model", str(archive), "--state", "reset",
                 "--vocab-cache", str(cache)]) == 0
    with h5py.File(tmp_path / "b.hdf5", "r") as f:
        for i in range(3):
            np.testing.assert_allclose(f[str(i)][...], reference[i], atol=1e-5)
    # elmo convert writes the archive out as a plain bilm-tf folder, vocabulary included.
    assert main(["convert", str(archive), str(tmp_path / "plain")]) == 0
    assert sorted(os.listdir(tmp_path / "plain")) == [".elmo-owner", "options.json", "vocab.txt", "weights.hdf5"]
    assert_same(Embedder.from_pretrained(str(tmp_path / "plain"), state="reset").embed_sentences(SENTENCES), reference)


def test_fine_tuning_starts_from_an_archive_with_a_fresh_softmax(tmp_path):
    from elmo.hub import load_language_model

    archive = nlpl_zip(tmp_path / "model.zip")
    with pytest.warns(UserWarning, match="softmax.*random"):
        model, vocab = load_language_model(str(archive))
    assert len(vocab) == 32 and model.softmax.weight.shape == (32, 16)
    unpacked = load_bilm_tf(ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5")
    for (name, a), b in zip(model.bilm.state_dict().items(), unpacked.state_dict().values()):
        assert np.array_equal(a.numpy(), b.numpy()), name
    # The same files unpacked, weights named weights.hdf5 (a plain bilm-tf folder plus a vocabulary).
    folder = tmp_path / "unpacked"
    with zipfile.ZipFile(nlpl_zip(tmp_path / "w.zip", weights_name="weights.hdf5")) as z:
        z.extractall(folder)
    with pytest.warns(UserWarning, match="softmax.*random"):
        model, vocab = load_language_model(str(folder))
    assert len(vocab) == 32 and model.softmax.weight.shape == (32, 16)
    no_vocab = nlpl_zip(tmp_path / "novocab.zip", vocab=None)
    with pytest.raises(FileNotFoundError, match="vocab.txt"):
        load_language_model(str(no_vocab))


# ------------------------------------------------------------------------------------ malformed
def zip_with(path, members: dict[str, bytes], symlink: str | None = None):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
        if symlink is not None:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(info, "/etc/passwd")
    return path


def good_members():
    return {"options.json": (ALLENNLP / "options.json").read_bytes(),
            "model.hdf5": (ALLENNLP / "lm_weights.hdf5").read_bytes()}


@pytest.mark.parametrize("member", ["../escape.txt", "/etc/cron.d/evil", "model/../../up.txt", "C:/windows/x.dll",
                                    "..\\evil.txt"])
def test_path_escaping_member_refuses_the_archive(tmp_path, member):
    archive = zip_with(tmp_path / "evil.zip", {**good_members(), member: b"x"})
    with pytest.raises(ArchiveError) as caught:
        load_model(str(archive))
    message = str(caught.value)
    assert str(archive) in message and repr(member) in message and "outside" in message
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path.parent / "up.txt").exists()


def test_symbolic_link_member_is_refused(tmp_path):
    archive = zip_with(tmp_path / "link.zip", good_members(), symlink="vocab.txt")
    with pytest.raises(ArchiveError, match=r"link\.zip: member 'vocab\.txt' is a symbolic link"):
        load_model(str(archive))


def test_zip_bomb_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    # 64 MB of zeros compress to 64 KB; with the bound at 16 MB the archive is refused.
    monkeypatch.setenv("ELMO_MAX_ARCHIVE_BYTES", str(16 * 2**20))
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("options.json", (ALLENNLP / "options.json").read_bytes())
        with z.open("model.hdf5", "w", force_zip64=True) as f:
            for _ in range(64):
                f.write(bytes(2**20))
    assert archive.stat().st_size < 2**20
    cache = tmp_path / "cache"
    monkeypatch.setenv("ELMO_CACHE", str(cache))
    with pytest.raises(ArchiveError) as caught:
        load_model(str(archive))
    assert "bomb.zip" in str(caught.value) and "'model.hdf5'" in str(caught.value) and "zip bomb" in str(caught.value)
    assert not cache.exists()


def test_a_damaged_member_fails_its_crc(tmp_path, monkeypatch):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))  # nothing extracted before
    archive = zip_with(tmp_path / "bad.zip", good_members())
    data = bytearray(archive.read_bytes())
    # Flip a byte inside model.hdf5's compressed data: zipfile's CRC check catches it on reading.
    with zipfile.ZipFile(archive) as z:
        info = z.getinfo("model.hdf5")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra) + 100
    data[start] ^= 0xFF
    archive.write_bytes(bytes(data))
    with pytest.raises((ArchiveError, WeightsError)) as caught:
        load_model(str(archive))
    assert "bad.zip:model.hdf5" in str(caught.value)


@pytest.mark.parametrize("case,expected", [
    ("no weights", r"no\.zip: not a model: no weights file"),
    ("no options", r"no\.zip: not a model: no options file"),
    ("binary options", r"no\.zip:options\.json: not an options\.json: this is an HDF5 file"),
    ("bad options", r"no\.zip:options\.json: lstm\.dim: must be at least 1"),
    ("wrong shape", r"no\.zip:model\.hdf5: dataset 'CNN/W_cnn_0' has shape \(1, 1, 4, 5\), but .*no\.zip:options\.json needs"),
    ("two weights", r"no\.zip: 2 candidate weights files"),
    ("weights not hdf5", r"no\.zip:model\.hdf5: not an HDF5 file \(it starts with b'\\x80\\x02 a pic'\)"),
    ("options not json", r"no\.zip:options\.json: not valid JSON \(line 1, column 21\)"),
    ("nan weights", r"no\.zip:model\.hdf5: dataset 'CNN/W_cnn_0' .*NaN"),
    ("not a zip", r"no\.zip: not a readable zip archive"),
])
def test_malformed_archives_name_archive_and_member(tmp_path, case, expected):
    members = good_members()
    if case == "no weights":
        del members["model.hdf5"]
    elif case == "no options":
        del members["options.json"]
    elif case == "binary options":
        members["options.json"] = members["model.hdf5"]
    elif case == "bad options":
        options = json.loads(members["options.json"])
        options["lstm"]["dim"] = 0
        members["options.json"] = json.dumps(options).encode()
    elif case == "wrong shape":
        broken = tmp_path / "w.hdf5"
        shutil.copy(ALLENNLP / "lm_weights.hdf5", broken)
        with h5py.File(broken, "r+") as f:
            del f["CNN/W_cnn_0"]
            f["CNN/W_cnn_0"] = np.zeros((1, 1, 4, 5), np.float32)
        members["model.hdf5"] = broken.read_bytes()
    elif case == "weights not hdf5":
        members["model.hdf5"] = b"\x80\x02 a pickle, say"
    elif case == "options not json":
        members["options.json"] = b'{"lstm": {"dim": 64,'
    elif case == "nan weights":
        broken = tmp_path / "w.hdf5"
        shutil.copy(ALLENNLP / "lm_weights.hdf5", broken)
        with h5py.File(broken, "r+") as f:
            f["CNN/W_cnn_0"][0, 0, 0, 0] = np.nan
        members["model.hdf5"] = broken.read_bytes()
    elif case == "two weights":
        members = {"options.json": members["options.json"], "a_weights.hdf5": b"x", "b_weights.hdf5": b"y"}
    archive = tmp_path / "no.zip"
    if case == "not a zip":
        archive.write_bytes(b"PK\x03\x04 but not really a zip")
    else:
        zip_with(archive, members)
    with pytest.raises((ArchiveError, ConfigError, WeightsError), match=expected):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            load_model_folder(archive)


def test_cli_reports_a_bad_archive_in_one_line(tmp_path, capsys):
    archive = zip_with(tmp_path / "evil.zip", {**good_members(), "../x": b""})
    text = tmp_path / "in.txt"
    text.write_text("a b\n")
    assert main(["embed", str(text), "--model", str(archive)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "evil.zip" in err and "'../x'" in err


def test_finetune_runs_from_an_archive(tmp_path):
    """elmo finetune on an NLPL archive: its vocabulary, its biLM, a softmax learned from scratch."""
    from elmo.hub import load_language_model
    from elmo.training.train import TrainSettings, train

    archive = nlpl_zip(tmp_path / "model.zip")
    corpus = FIXTURES / "bilm-tf" / "train" / "data.txt"
    settings = TrainSettings(train=[str(corpus)], output=str(tmp_path / "ft"), init_from=str(archive), batch_size=2,
                             unroll_steps=5, max_tokens=60, checkpoint_every=100, log_every=100, progress=False)
    with pytest.warns(UserWarning, match="softmax"):
        train(settings)
    tuned, vocab = load_language_model(tmp_path / "ft")
    assert vocab.words == [w for w in VOCAB.read_text().split("\n") if w]
    assert tuned.config.lstm == load_bilm_tf(ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5").config.lstm


# ------------------------------------------------------------------------ extraction into the cache
def fingerprint_folder_files(cache):
    root = cache / "archives"
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_reopening_reuses_the_extraction(tmp_path, monkeypatch, reference):
    """A second load of the archive (a fresh reader, as in a new process) reads the extracted
    weights without unpacking them again."""
    import elmo.hub.archives as archives

    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    archive = nlpl_zip(tmp_path / "model.zip")
    copies = []
    real_copy = archives.shutil.copyfileobj
    monkeypatch.setattr(archives.shutil, "copyfileobj", lambda *a: (copies.append(1), real_copy(*a)))
    first = Embedder.from_pretrained(str(archive), state="reset").embed_sentences(SENTENCES)
    second = Embedder.from_pretrained(str(archive), state="reset").embed_sentences(SENTENCES)
    assert len(copies) == 1
    assert_same(first, reference)
    assert_same(second, reference)
    assert [name.split("/")[1] for name in fingerprint_folder_files(tmp_path / "cache")] == ["model.hdf5"]


def test_a_truncated_cached_copy_is_extracted_again(tmp_path, monkeypatch, reference):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    archive = nlpl_zip(tmp_path / "model.zip")
    with ModelFolder(archive) as folder:
        extracted = folder.local_file("model.hdf5")
    extracted.write_bytes(extracted.read_bytes()[:1000])  # a disk filled up, a copy cut short by hand
    assert_same(Embedder.from_pretrained(str(archive), state="reset").embed_sentences(SENTENCES), reference)
    assert extracted.read_bytes() == (ALLENNLP / "lm_weights.hdf5").read_bytes()


def test_an_interrupted_extraction_leaves_no_half_file(tmp_path, monkeypatch, reference):
    import elmo.hub.archives as archives

    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    archive = nlpl_zip(tmp_path / "model.zip")

    def interrupted(src, dst, length):
        dst.write(src.read(4096))  # part of the file is on disk when the user presses Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(archives.shutil, "copyfileobj", interrupted)
    with pytest.raises(KeyboardInterrupt):
        load_model(str(archive))
    assert fingerprint_folder_files(tmp_path / "cache") == []  # neither the target nor a temporary
    monkeypatch.undo()
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    assert_same(Embedder.from_pretrained(str(archive), state="reset").embed_sentences(SENTENCES), reference)


KILLED_MID_EXTRACTION = """
import os, signal, sys
import elmo.hub.archives as archives
from elmo.hub import load_model

def killed(src, dst, length):
    dst.write(src.read(4096))
    dst.flush()
    os.kill(os.getpid(), signal.SIGKILL)

archives.shutil.copyfileobj = killed
load_model(sys.argv[1])
"""


def test_a_killed_extraction_is_cleaned_up_by_the_next_load(tmp_path, reference):
    """SIGKILL mid-extraction: the weights file never appears half-written under its name, and the
    next load removes the dead process's temporary and extracts the whole member."""
    import subprocess
    import sys

    cache = tmp_path / "cache"
    archive = nlpl_zip(tmp_path / "model.zip")
    env = {**os.environ, "ELMO_CACHE": str(cache)}
    done = subprocess.run([sys.executable, "-c", KILLED_MID_EXTRACTION, str(archive)], env=env, capture_output=True)
    assert done.returncode == -9, done.stderr.decode()
    left = fingerprint_folder_files(cache)
    assert len(left) == 1 and left[0].endswith(".tmp") and "/model.hdf5." in left[0]
    os.environ["ELMO_CACHE"], old = str(cache), os.environ["ELMO_CACHE"]
    try:
        vectors = Embedder.from_pretrained(str(archive), state="reset").embed_sentences(SENTENCES)
    finally:
        os.environ["ELMO_CACHE"] = old
    assert_same(vectors, reference)
    assert [name.split("/")[1] for name in fingerprint_folder_files(cache)] == ["model.hdf5"]


def test_a_member_that_lies_about_its_size_is_refused(tmp_path, monkeypatch):
    """A member whose directory entry declares a few bytes but whose data expands to more (the
    size check alone would pass it): reading stops at the declared size and the CRC fails."""
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    archive = zip_with(tmp_path / "liar.zip", {"options.json": good_members()["options.json"],
                                               "model.hdf5": bytes(2**20)})
    data = bytearray(archive.read_bytes())
    first = data.index(b"PK\x01\x02")  # the central directory's entries: options.json, then model.hdf5
    entry = data.index(b"PK\x01\x02", first + 1)
    assert data[entry + 46:entry + 46 + 10] == b"model.hdf5"
    data[entry + 24:entry + 28] = (100).to_bytes(4, "little")  # declared uncompressed size: 100 bytes
    archive.write_bytes(bytes(data))
    with pytest.raises(ArchiveError, match=r"liar\.zip:model\.hdf5: cannot be read from the archive \(Bad CRC"):
        load_model(str(archive))
    assert fingerprint_folder_files(tmp_path / "cache") == []


def test_the_extraction_bound_does_not_come_from_the_archives_options(monkeypatch):
    """Issue 60: options may declare a biLM of 4.8e9 parameters (under elmo's 32 GiB ceiling);
    its weights member was allowed 19 GB, the old 16 GiB whole-archive cap. Now no member may
    write more than the default bound, which the largest published ELMo fits ten times over."""
    from elmo.hub.archives import MAX_ARCHIVE_BYTES, member_bound

    monkeypatch.delenv("ELMO_MAX_ARCHIVE_BYTES", raising=False)
    options = json.loads((ALLENNLP / "options.json").read_text())
    options["lstm"].update(dim=16384, projection_dim=8192, n_layers=2)
    claimed = BiLMConfig.from_dict(options).parameter_count()
    assert claimed > 4 * 10**9 and 4 * claimed * 1.25 > 16 * 10**9
    assert member_bound(claimed) == MAX_ARCHIVE_BYTES == 4 * 2**30
    original = 93_600_000  # the largest published ELMo's parameters
    assert member_bound(original) < MAX_ARCHIVE_BYTES / 8


def test_an_extraction_the_disk_has_no_room_for_is_refused_before_writing(tmp_path, monkeypatch):
    import collections

    import elmo.hub.archives as archives

    cache = tmp_path / "cache"
    monkeypatch.setenv("ELMO_CACHE", str(cache))
    archive = zip_with(tmp_path / "model.zip", good_members())
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(archives.shutil, "disk_usage", lambda path: usage(2**40, 2**40 - 2**20, 2**20))
    with pytest.raises(ArchiveError) as caught:
        load_model(str(archive))
    message = str(caught.value)
    assert message.startswith(f"{archive}:model.hdf5: extracting it needs") and "1 MiB free" in message \
        and "$ELMO_CACHE" in message, message
    assert cache_files(cache) == []


def test_a_bad_archive_bound_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("ELMO_MAX_ARCHIVE_BYTES", "16G")
    with pytest.raises(ArchiveError, match=r"\$ELMO_MAX_ARCHIVE_BYTES: expected a number of bytes, got '16G'"):
        load_model(str(nlpl_zip(tmp_path / "model.zip")))


@pytest.mark.parametrize("members,expected", [
    ({}, r"empty\.zip: not a model: no options file .* among no files"),
    ({"a/options.json": b"{}", "b/model.hdf5": b""}, r"empty\.zip: not a model: no options file"),
    ({"options.json": b"{}", "__MACOSX/._model.hdf5": b"junk"}, r"empty\.zip: not a model: no weights file"),
])
def test_archives_without_a_model_at_their_root(tmp_path, members, expected):
    archive = zip_with(tmp_path / "empty.zip", members)
    with pytest.raises(ArchiveError, match=expected):
        load_model(str(archive))


def test_cache_vocab_of_an_archive_without_a_vocabulary(tmp_path, capsys):
    archive = nlpl_zip(tmp_path / "novocab.zip", vocab=None)
    assert main(["cache-vocab", str(archive), str(tmp_path / "c.hdf5"), "--model", str(archive)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "novocab.zip" in err and "vocab.txt" in err
    assert not (tmp_path / "c.hdf5").exists()


def test_a_damaged_gzip_vocabulary_is_named(tmp_path):
    archive = zip_with(tmp_path / "v.zip", {**good_members(), "vocab.txt.gz": b"\x1f\x8b\x08 not gzip"})
    with pytest.raises(ArchiveError, match=r"v\.zip:vocab\.txt\.gz: not a readable gzip file"):
        read_model_vocabulary(archive)


def test_convert_never_replaces_its_source(tmp_path, capsys):
    models = tmp_path / "models"
    models.mkdir()
    archive = nlpl_zip(models / "model.zip")
    before = archive.read_bytes()
    for output in (archive, models, tmp_path):
        assert main(["convert", str(archive), str(output), "--force", "--to", "elmo"]) == 2
        err = capsys.readouterr().err.strip()
        # The command line's one refusal of an input as output (elmo.fileio.input_conflict).
        assert err.count("\n") == 0 and "elmo never overwrites an input" in err and str(output) in err
    assert archive.read_bytes() == before


def test_allennlp_elmo_module_takes_an_archive_as_both_files(tmp_path):
    """AllenNLP's Elmo(options_file, weight_file, ...) with the archive in both places (its two
    arguments are required there); a dictionary model is refused, naming it."""
    import torch

    from elmo.allennlp import Elmo as AllenElmo
    from elmo.allennlp import batch_to_ids

    archive = str(nlpl_zip(tmp_path / "model.zip"))
    unpacked = AllenElmo(str(ALLENNLP / "options.json"), str(ALLENNLP / "lm_weights.hdf5"), 1, dropout=0.0)
    packed = AllenElmo(archive, archive, 1, dropout=0.0)
    ids = batch_to_ids(SENTENCES)
    with torch.no_grad():
        want, got = unpacked(ids)["elmo_representations"][0], packed(ids)["elmo_representations"][0]
    assert got.shape == (3, 7, 32) and torch.equal(got, want)
    manylangs = str(FIXTURES / "manylangs" / "model")
    with pytest.raises(ValueError, match=r"manylangs/model: this model reads its own character dictionary"):
        AllenElmo(manylangs, manylangs, 1)


# ------------------------------------------------------------------------------ hostile archives
def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        table.append(c)
    return table


def force_crc(data: bytes, offset: int, target: int) -> bytes:
    """``data`` with its 4 bytes at ``offset`` chosen so that its CRC-32 is ``target`` (CRC-32 is
    linear: anyone can do this, which is why it cannot name content)."""
    table = _crc_table()
    by_top = {entry >> 24: i for i, entry in enumerate(table)}  # the top bytes are all different
    # The register the CRC must hold after the 4 bytes: run it backwards from the target over the rest.
    reg = target ^ 0xFFFFFFFF
    for byte in reversed(data[offset + 4:]):
        j = by_top[reg >> 24]
        reg = (((reg ^ table[j]) << 8) & 0xFFFFFFFF) | ((j ^ byte) & 0xFF)
    picks = []  # the table entry each of the 4 bytes must select to get there
    for _ in range(4):
        j = by_top[reg >> 24]
        picks.append(j)
        reg = ((reg ^ table[j]) << 8) & 0xFFFFFFFF
    reg = zlib.crc32(data[:offset]) ^ 0xFFFFFFFF
    patch = bytearray()
    for j in reversed(picks):
        patch.append((reg ^ j) & 0xFF)
        reg = (reg >> 8) ^ table[j]
    return data[:offset] + bytes(patch) + data[offset + 4:]


def forged_weights(tmp_path) -> bytes:
    """The fixture's weights with every value changed (+1), then 4 bytes of one weight chosen so
    that the file has the genuine file's CRC-32 and size."""
    genuine = (ALLENNLP / "lm_weights.hdf5").read_bytes()
    path = tmp_path / "forged.hdf5"
    shutil.copy(ALLENNLP / "lm_weights.hdf5", path)
    with h5py.File(path, "r+") as f:
        names = []
        f.visititems(lambda name, item: names.append(name) if isinstance(item, h5py.Dataset) else None)
        for name in names:
            f[name][...] = f[name][...] + 1.0
        start = f["CNN_high_1/W_transform"].id.get_offset()  # contiguous float32 data, near the end
    data = path.read_bytes()
    for offset in range(start, start + 4 * 124 * 124, 4):  # a patch that reads as a modest float
        forged = force_crc(data, offset, zlib.crc32(genuine))
        value = np.frombuffer(forged[offset:offset + 4], np.float32)[0]
        if np.isfinite(value) and abs(value) < 4:
            break
    assert len(forged) == len(genuine) and zlib.crc32(forged) == zlib.crc32(genuine) and forged != genuine
    return forged


def test_a_member_forged_to_another_archives_crc_and_size_never_stands_in_for_it(tmp_path, monkeypatch, reference):
    """The attack of issue 45: an archive whose weights have the genuine member's CRC-32 and size
    (every weight different) is loaded first in a shared cache; the genuine archive still gives
    the genuine numbers, because the cache is addressed by SHA-256."""
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    forged = zip_with(tmp_path / "crafted.zip", {"options.json": good_members()["options.json"],
                                                  "model.hdf5": forged_weights(tmp_path)})
    genuine = nlpl_zip(tmp_path / "genuine.zip")
    with zipfile.ZipFile(forged) as a, zipfile.ZipFile(genuine) as b:
        assert (a.getinfo("model.hdf5").CRC, a.getinfo("model.hdf5").file_size) == \
            (b.getinfo("model.hdf5").CRC, b.getinfo("model.hdf5").file_size)
    crafted = Embedder.from_pretrained(str(forged), state="reset").embed_sentences(SENTENCES)
    assert not np.allclose(crafted[0], reference[0])  # the forged weights do load, and differ
    assert_same(Embedder.from_pretrained(str(genuine), state="reset").embed_sentences(SENTENCES), reference)
    assert len(fingerprint_folder_files(tmp_path / "cache")) == 2  # one extraction each


def test_an_extraction_keyed_by_crc_is_never_trusted(tmp_path, monkeypatch, reference):
    """Caches written before the SHA-256 keys held weights under a key of CRC-32 and size: forged
    weights planted there (a crafted archive loaded by an older elmo) are never read."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("ELMO_CACHE", str(cache))
    genuine = nlpl_zip(tmp_path / "genuine.zip")
    with zipfile.ZipFile(genuine) as z:
        info = z.getinfo("model.hdf5")
    import hashlib

    old_key = hashlib.sha256(f"{info.CRC:08x}:{info.file_size}".encode()).hexdigest()[:24]
    planted = cache / "archives" / old_key / "model.hdf5"
    planted.parent.mkdir(parents=True)
    planted.write_bytes(forged_weights(tmp_path))
    assert_same(Embedder.from_pretrained(str(genuine), state="reset").embed_sentences(SENTENCES), reference)
    assert planted.read_bytes() != (ALLENNLP / "lm_weights.hdf5").read_bytes()  # left alone, and unused


OPTIONS_PARAMETERS = 105_124  # the AllenNLP fixture's options: a biLM of this many parameters


def test_weights_past_what_the_options_need_are_refused_before_a_byte_is_written(tmp_path, monkeypatch):
    import elmo.hub.archives as archives

    assert BiLMConfig.from_json(ALLENNLP / "options.json").parameter_count() == OPTIONS_PARAMETERS
    monkeypatch.setattr(archives, "BOUND_MARGIN", 2**16)  # the bound: 4 bytes x 1.25 a parameter + 64 KiB
    cache = tmp_path / "cache"
    monkeypatch.setenv("ELMO_CACHE", str(cache))
    bomb = zip_with_bomb(tmp_path / "bomb.zip", {"options.json": good_members()["options.json"]}, "model.hdf5",
                         archives.HDF5_SIGNATURE, 64 * 2**20)
    with pytest.raises(ArchiveError) as caught:
        load_model(str(bomb))
    bound = int(4 * OPTIONS_PARAMETERS * 1.25) + 2**16
    assert str(caught.value) == (f"{bomb}:model.hdf5: declares {64 * 2**20:,} bytes, more than the {bound:,} that a "
                                 f"model of {bomb}:options.json can need ({OPTIONS_PARAMETERS:,} parameters); "
                                 f"refusing it as a possible zip bomb")
    assert cache_files(cache) == []
    # The genuine weights are far inside the same bound.
    assert_same(Embedder.from_pretrained(str(nlpl_zip(tmp_path / "m.zip")), state="reset").embed_sentences(SENTENCES),
                Embedder(load_bilm_tf(ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5"),
                         state="reset").embed_sentences(SENTENCES))


def test_weights_that_are_not_hdf5_are_refused_at_their_first_bytes(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("ELMO_CACHE", str(cache))
    archive = zip_with_bomb(tmp_path / "magic.zip", {"options.json": good_members()["options.json"]}, "model.hdf5",
                            b"\x80\x02 a pickle", 8 * 2**20)
    with pytest.raises(ArchiveError, match=r"magic\.zip:model\.hdf5: not an HDF5 file \(it starts with "
                                           r"b'\\x80\\x02 a pic'\); refusing it before reading further"):
        load_model(str(archive))
    assert cache_files(cache) == []


def test_a_bomb_at_the_bound_is_bounded_on_disk_and_in_memory_and_leaves_nothing(tmp_path):
    """In a process whose files cannot grow past the bound: a member past it is refused without
    writing (no 'File too large'), one exactly at it is extracted, refused by h5py and removed;
    neither raises the peak memory by more than a few MB."""
    margin = 4 * 2**20
    bound = int(4 * OPTIONS_PARAMETERS * 1.25) + margin
    options = {"options.json": good_members()["options.json"]}
    warm = nlpl_zip(tmp_path / "warm.zip")
    for size, expected in ((64 * 2**20, "ArchiveError: .*bomb.zip:model.hdf5: declares 67,108,864 bytes, more than "
                                        f"the {bound:,} that a model of"),
                           (bound, "WeightsError: .*bomb.zip:model.hdf5: cannot open as HDF5")):
        bomb = zip_with_bomb(tmp_path / "bomb.zip", options, "model.hdf5", b"\x89HDF\r\n\x1a\n", size)
        cache = tmp_path / f"cache-{size}"
        result = bounded_load(warm, bomb, cache, margin, fsize=bound)
        assert re.match(expected, result["error"]), result
        assert result["peak_growth"] < 16 * 2**20, result
        assert cache_files(cache) == []
