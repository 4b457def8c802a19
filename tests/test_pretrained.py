"""Published models by name: downloaded from a (local) server into the cache, verified, reused."""

import dataclasses
import shutil

import numpy as np
import pytest

from conftest import ALLENNLP, serve_directory
from elmo import Elmo, Embedder, load_bilm_tf
from elmo.cli.main import main
from elmo.download import DownloadError
from elmo import pretrained


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    """A local server laid out like the published bucket, serving the fixture model as "small"."""
    spec = pretrained.PUBLISHED["small"]
    served = tmp_path / "served" / spec.folder
    served.mkdir(parents=True)
    shutil.copy(ALLENNLP / "options.json", served / spec.options_name)
    shutil.copy(ALLENNLP / "lm_weights.hdf5", served / spec.weights_name)
    cache = tmp_path / "cache"
    monkeypatch.setenv("ELMO_CACHE", str(cache))
    with serve_directory(tmp_path / "served") as (base, requests):
        monkeypatch.setenv("ELMO_MODELS_URL", base)
        yield requests, cache, spec


def test_from_pretrained_downloads_once_and_reuses_the_cache(mirror):
    requests, cache, spec = mirror
    elmo = Elmo.from_pretrained("small", progress=False, dropout=0.0)
    assert requests == [f"/{spec.folder}/{spec.options_name}", f"/{spec.folder}/{spec.weights_name}"]
    assert (cache / "small" / spec.weights_name).read_bytes() == (ALLENNLP / "lm_weights.hdf5").read_bytes()
    assert (cache / "small" / f"{spec.weights_name}.sha256").exists()
    reference = load_bilm_tf(ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5")
    for got, want in zip(elmo.bilm.parameters(), reference.parameters()):
        assert np.array_equal(got.detach().numpy(), want.detach().numpy())
    Embedder.from_pretrained("small", progress=False)
    assert len(requests) == 2  # the second load came from the cache


def test_cli_model_flag_downloads_and_embeds(mirror, tmp_path):
    requests, _, _ = mirror
    src = tmp_path / "in.txt"
    src.write_text("Hello world .\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    assert main(["embed", str(src), str(out), "--model", "small"]) == 0
    import h5py
    with h5py.File(out, "r") as f:
        assert f["0"].shape == (3, 3, 32)  # the fixture model's dimension
    assert len(requests) == 2


def test_pinned_checksum_mismatch_is_refused(mirror, monkeypatch):
    _, cache, spec = mirror
    wrong = dataclasses.replace(spec, weights_sha256="0" * 64)
    monkeypatch.setitem(pretrained.PUBLISHED, "small", wrong)
    with pytest.raises(DownloadError, match="expected sha256 0{64}, got [0-9a-f]{64}"):
        pretrained.model_files("small", progress=False)
    assert not (cache / "small" / spec.weights_name).exists()


def test_offline_error_says_where_to_put_the_files(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ELMO_MODELS_URL", "http://127.0.0.1:9")  # the discard port: nothing listens
    src = tmp_path / "in.txt"
    src.write_text("x\n", encoding="utf-8")
    assert main(["embed", str(src), "--model", "medium"]) == 2
    err = capsys.readouterr().err
    spec = pretrained.PUBLISHED["medium"]
    assert f"could not download http://127.0.0.1:9/{spec.folder}/{spec.options_name}" in err
    assert f"copy it to {tmp_path / 'cache' / 'medium' / spec.options_name}" in err


def test_every_published_name_has_a_distinct_url():
    urls = {(s.folder, s.weights_name) for s in pretrained.PUBLISHED.values()}
    assert len(urls) == len(pretrained.PUBLISHED) == 4
    assert pretrained.model_names() == ["default", "small", "medium", "original", "original-5.5b"]
