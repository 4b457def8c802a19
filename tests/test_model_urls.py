"""Any model URL (a contributed model's, as flair's ``pt`` and ``pubmed``), downloaded once into
the cache and trusted on first use, from a server on loopback: no network."""

import hashlib
import json
import shutil
import zipfile

import pytest
import torch
from conftest import ALLENNLP, serve_directory

from elmo.allennlp import Elmo, batch_to_ids
from elmo.hub import load_model, locate
from elmo.hub.download import DownloadError, url_cache_folder
from elmo.hub.resolve import Location

OPTIONS, WEIGHTS = ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5"
# flair's "pubmed" layout: an options file named as the published "original" one, beside weights
# that are not published under any name.
PUBMED = "allennlp/models/elmo/contributed/pubmed/"
PUBMED_OPTIONS = PUBMED + "elmo_2x4096_512_2048cnn_2xhighway_options.json"
PUBMED_WEIGHTS = PUBMED + "elmo_2x4096_512_2048cnn_2xhighway_weights_PubMed_only.hdf5"
SENTENCES = [["Aspirin", "inhibits", "COX-1", "."], ["Fever"]]


@pytest.fixture
def served(tmp_path, monkeypatch):
    """The fixture model served on 127.0.0.1 under flair's pubmed paths; the cache in tmp_path."""
    root = tmp_path / "served"
    (root / PUBMED).mkdir(parents=True)
    shutil.copy(OPTIONS, root / PUBMED_OPTIONS)
    shutil.copy(WEIGHTS, root / PUBMED_WEIGHTS)
    monkeypatch.setenv("ELMO_ALLOW_HTTP", "1")  # the loopback server speaks plain http://
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    with serve_directory(root) as (base, requests):
        yield root, base, requests, tmp_path / "cache"


def test_a_contributed_pair_loads_through_the_cache_trusted_on_first_use(served):
    root, base, requests, cache = served
    options_url, weights_url = f"{base}/{PUBMED_OPTIONS}", f"{base}/{PUBMED_WEIGHTS}"
    assert locate((options_url, weights_url)) == Location("url", f"{options_url} + {weights_url}",
                                                         urls=(options_url, weights_url))
    ids = batch_to_ids(SENTENCES)
    got = Elmo(options_url, weights_url, 1, dropout=0.0, state="reset")(ids)["elmo_representations"][0]
    want = Elmo(str(OPTIONS), str(WEIGHTS), 1, dropout=0.0, state="reset")(ids)["elmo_representations"][0]
    assert torch.equal(got, want)
    assert requests == ["/" + PUBMED_OPTIONS, "/" + PUBMED_WEIGHTS]

    cached = url_cache_folder(weights_url, cache) / "elmo_2x4096_512_2048cnn_2xhighway_weights_PubMed_only.hdf5"
    record = json.loads(cached.with_name(cached.name + ".sha256").read_text())
    assert record == {"sha256": hashlib.sha256(WEIGHTS.read_bytes()).hexdigest(), "size": WEIGHTS.stat().st_size,
                      "url": weights_url}
    load_model((options_url, weights_url), progress=False)
    assert len(requests) == 2  # from the cache, checked against the record

    # The file on the server changes: a re-download is held to what the first one fetched.
    (root / PUBMED_WEIGHTS).write_bytes(WEIGHTS.read_bytes()[:-1] + b"\0")
    cached.unlink()
    with pytest.raises(DownloadError, match=r"expected sha256 .* \(recorded in .*PubMed_only\.hdf5\.sha256"):
        load_model((options_url, weights_url), progress=False)
    assert not cached.exists()


def test_a_damaged_cached_copy_is_downloaded_again(served):
    root, base, requests, cache = served
    pair = (f"{base}/{PUBMED_OPTIONS}", f"{base}/{PUBMED_WEIGHTS}")
    load_model(pair, progress=False)
    cached = url_cache_folder(pair[1], cache) / "elmo_2x4096_512_2048cnn_2xhighway_weights_PubMed_only.hdf5"
    data = bytearray(cached.read_bytes())
    data[-1] ^= 0xFF
    cached.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="is damaged"):
        load_model(pair, progress=False)
    assert cached.read_bytes() == WEIGHTS.read_bytes() and len(requests) == 3


def test_one_url_of_a_zip_archive_or_a_checkpoint(served, tmp_path):
    root, base, requests, cache = served
    with zipfile.ZipFile(root / "model.zip", "w") as z:
        z.write(OPTIONS, "options.json")
        z.write(WEIGHTS, "model.hdf5")
    reference = load_model((OPTIONS, WEIGHTS))
    from elmo.hub.checkpoints import save_checkpoint

    save_checkpoint(reference, root / "model.pt")
    for name in ("model.zip", "model.pt"):
        model = load_model(f"{base}/{name}", progress=False)
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reference.state_dict().values()))
    assert requests == ["/model.zip", "/model.pt"]


def test_an_http_url_needs_the_opt_in_and_a_missing_file_is_named(served, monkeypatch):
    root, base, requests, cache = served
    monkeypatch.delenv("ELMO_ALLOW_HTTP")
    with pytest.raises(DownloadError, match="refusing to download http://127.0.0.1"):
        load_model(f"{base}/model.zip", progress=False)
    monkeypatch.setenv("ELMO_ALLOW_HTTP", "1")
    with pytest.raises(DownloadError, match=r"could not download .*/absent\.zip: HTTP 404"):
        load_model(f"{base}/absent.zip", progress=False)
    assert requests == ["/absent.zip"]
