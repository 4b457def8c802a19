"""Published models by name: downloaded from a (local) server into the cache, verified, reused."""

import dataclasses
import re
import shutil

import numpy as np
import pytest
from conftest import ALLENNLP, serve_directory

from elmo import Elmo, Embedder
from elmo.model.weights import load_bilm_tf
from elmo.cli.main import main
from elmo.hub import pretrained
from elmo.hub.download import DownloadError


@pytest.fixture(autouse=True)
def allow_http(monkeypatch):
    """The local mirror speaks plain http://, which downloads refuse unless opted in."""
    monkeypatch.setenv("ELMO_ALLOW_HTTP", "1")


def unpinned(spec: pretrained.PublishedModel) -> pretrained.PublishedModel:
    return dataclasses.replace(spec, options_size=None, options_sha256=None, weights_size=None,
                               weights_sha256=None)


def serve_fixture_as(root, spec: pretrained.PublishedModel) -> None:
    """Lay the fixture model out under ``root`` as the published files of ``spec``."""
    served = root / spec.folder
    served.mkdir(parents=True)
    shutil.copy(ALLENNLP / "options.json", served / spec.options_name)
    shutil.copy(ALLENNLP / "lm_weights.hdf5", served / spec.weights_name)


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    """A local server laid out like the published bucket, serving the fixture model as "small"
    (with "small" unpinned: the fixture is not the published file)."""
    spec = unpinned(pretrained.PUBLISHED["small"])
    monkeypatch.setitem(pretrained.PUBLISHED, "small", spec)
    serve_fixture_as(tmp_path / "served", spec)
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
    # Where else to look: the Hub, and what a copy there counts as.
    assert "name one as hf://OWNER/NAME[@REVISION]; it counts as 'medium' only where its files match the published " \
           "SHA-256 pins" in err


def test_every_published_name_has_a_distinct_url():
    urls = {(s.folder, s.weights_name) for s in pretrained.PUBLISHED.values()}
    assert len(urls) == len(pretrained.PUBLISHED) == 4
    assert pretrained.model_names() == ["default", "small", "medium", "original", "original-5.5b"]


def test_published_names_follow_from_the_presets_as_allennlp_named_them():
    """The published sizes are written once, in the presets; the download names derived from
    them are exactly AllenNLP's."""
    names = {name: (spec.folder, spec.options_name, spec.weights_name) for name, spec in pretrained.PUBLISHED.items()}
    stem = {"small": "2x1024_128_2048cnn_1xhighway", "medium": "2x2048_256_2048cnn_1xhighway",
            "original": "2x4096_512_2048cnn_2xhighway", "original-5.5b": "2x4096_512_2048cnn_2xhighway_5.5B"}
    assert names == {name: (s, f"elmo_{s}_options.json", f"elmo_{s}_weights.hdf5") for name, s in stem.items()}
    assert pretrained.PUBLISHED["medium"].description.startswith("2x2048_256, 1B Word Benchmark")


def test_published_pins_are_checked_on_download(tmp_path, monkeypatch):
    """The real pins of "original": a mirror serving other files is refused, and nothing is cached."""
    spec = pretrained.PUBLISHED["original"]
    assert spec.options_size is not None and spec.weights_size is not None
    serve_fixture_as(tmp_path / "served", spec)
    cache = tmp_path / "cache"
    monkeypatch.setenv("ELMO_CACHE", str(cache))
    with serve_directory(tmp_path / "served") as (base, requests):
        monkeypatch.setenv("ELMO_MODELS_URL", base)
        with pytest.raises(DownloadError) as info:
            pretrained.model_files("original", progress=False)
    url = f"{base}/{spec.folder}/{spec.options_name}"
    assert f"{url} is not the expected file: expected size {spec.options_size} bytes" in str(info.value)
    assert list((cache / "original").iterdir()) == []  # neither file, sidecar nor temporary
    # The weights' pins hold too, once the options file passes.
    monkeypatch.setitem(pretrained.PUBLISHED, "original", dataclasses.replace(spec, options_size=None))
    with serve_directory(tmp_path / "served") as (base, requests):
        monkeypatch.setenv("ELMO_MODELS_URL", base)
        with pytest.raises(DownloadError, match=f"expected size {spec.weights_size} bytes"):
            pretrained.model_files("original", progress=False)
    assert sorted(p.name for p in (cache / "original").iterdir()) == sorted(
        [spec.options_name, f"{spec.options_name}.sha256"])


def test_pins_are_well_formed():
    for name, spec in pretrained.PUBLISHED.items():
        for size in (spec.options_size, spec.weights_size):
            assert size is None or (isinstance(size, int) and size > 0), name
        for digest in (spec.options_sha256, spec.weights_sha256):
            assert digest is None or re.fullmatch(r"[0-9a-f]{64}", digest), name


def test_http_mirror_needs_opt_in(mirror, monkeypatch):
    requests, cache, spec = mirror
    monkeypatch.delenv("ELMO_ALLOW_HTTP")
    with pytest.raises(DownloadError, match=r"refusing to download http://127\.0\.0\.1:\d+/.*ELMO_ALLOW_HTTP=1"):
        pretrained.model_files("small", progress=False)
    assert requests == []


def test_offline_one_error_names_every_missing_file_and_its_path(tmp_path, monkeypatch, capsys):
    """Issue 62: offline, a model of two files named only the first; the user copied it, ran
    again, and only then learnt of the second (for URLs, in another urls/<hash>/ folder)."""
    from elmo.hub import load_model
    from elmo.hub.download import url_cache_folder

    cache = tmp_path / "cache"
    monkeypatch.setenv("ELMO_CACHE", str(cache))
    monkeypatch.setenv("ELMO_MODELS_URL", "http://127.0.0.1:9")  # the discard port: nothing listens
    src = tmp_path / "in.txt"
    src.write_text("x\n", encoding="utf-8")
    assert main(["embed", str(src), "--model", "medium"]) == 2
    err = capsys.readouterr().err
    spec = pretrained.PUBLISHED["medium"]
    for name in (spec.options_name, spec.weights_name):
        assert f"download http://127.0.0.1:9/{spec.folder}/{name} and copy it to {cache / 'medium' / name}" in err
    assert "To install these 2 files by hand" in err and len(err.strip().splitlines()) == 3, err
    # A contributed model's pair of URLs (as flair passes them): each file's own folder, both named.
    urls = ("http://127.0.0.1:9/pubmed/options.json", "http://127.0.0.1:9/pubmed/weights.hdf5")
    with pytest.raises(DownloadError) as error:
        load_model(urls, progress=False)
    message = str(error.value)
    for url, name in zip(urls, ("options.json", "weights.hdf5")):
        assert f"download {url} and copy it to {url_cache_folder(url) / name}" in message
    assert [m[0] for m in error.value.missing] == list(urls)
    # Once one file is in place, only the other is named.
    small = pretrained.PUBLISHED["small"]
    (cache / "small").mkdir(parents=True)
    shutil.copy(ALLENNLP / "options.json", cache / "small" / small.options_name)
    assert main(["embed", str(src), "--model", "small"]) == 2
    one = capsys.readouterr().err
    assert "To install it by hand" in one and small.weights_name in one and small.options_name not in one, one
