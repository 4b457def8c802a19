"""Named pretrained biLMs: the model shipped inside the package and the AllenNLP-published ones.

``"default"`` is the small English model trained for this library on Wikipedia (see
``resources/model/MODEL_CARD.md``); it is part of the package and needs no network.
``"small"``, ``"medium"``, ``"original"`` and ``"original-5.5b"`` are the models AllenNLP
published; their ``options.json`` + ``weights.hdf5`` are downloaded once into a cache directory
(:func:`elmo.fileio.default_cache_dir`, or ``$ELMO_CACHE``) and reused from there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from elmo.model.config import published_config

DEFAULT_MODEL = "default"

# Where the published files live; ``$ELMO_MODELS_URL`` points elsewhere (a mirror, or a local
# server in the tests). Each model's files sit under ``<base>/<folder>/``.
PUBLISHED_BASE_URL = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo"


@dataclass(frozen=True)
class PublishedModel:
    """One AllenNLP-published biLM: its architecture (a preset of :mod:`elmo.model.config`, the
    one place its sizes are written down), what it was trained on, and its download pins.

    The folder and file names under the base URL follow from the architecture, as AllenNLP named
    them: ``2x4096_512_2048cnn_2xhighway`` plus ``suffix``, and ``elmo_<that>_options.json`` /
    ``elmo_<that>_weights.hdf5``.

    ``*_size`` / ``*_sha256`` pin the expected files where a public record gives them (the source
    is named beside each value in :data:`PUBLISHED`); a download that does not match a pin is an
    error and leaves nothing in the cache, and a cached file that no longer matches is downloaded
    again. Where they are ``None`` the file is trusted on first use: the download records the
    SHA-256 and size of what it fetched in a sidecar, and every later use of the cache (and any
    re-download) is checked against that record.
    """

    size: str  # the preset that is its architecture: "small", "medium" or "original"
    corpus: str
    suffix: str = ""
    options_size: int | None = None
    options_sha256: str | None = None
    weights_size: int | None = None
    weights_sha256: str | None = None

    @property
    def folder(self) -> str:
        config = published_config(self.size)
        lstm, cnn = config.lstm, config.char_cnn
        return (f"{lstm.n_layers}x{lstm.dim}_{lstm.projection_dim}_{cnn.n_filters}cnn_{cnn.n_highway}xhighway"
                f"{self.suffix}")

    @property
    def options_name(self) -> str:
        return f"elmo_{self.folder}_options.json"

    @property
    def weights_name(self) -> str:
        return f"elmo_{self.folder}_weights.hdf5"

    @property
    def description(self) -> str:
        lstm = published_config(self.size).lstm
        return f"{lstm.n_layers}x{lstm.dim}_{lstm.projection_dim}, {self.corpus}"


# "small", "medium" and "original-5.5b" have no pins: no public record of their byte sizes or
# SHA-256 was found, so they are trusted on first use (see PublishedModel). Add a pin only with a
# citable source beside it.
PUBLISHED: dict[str, PublishedModel] = {
    "small": PublishedModel("small", "1B Word Benchmark"),
    "medium": PublishedModel("medium", "1B Word Benchmark"),
    "original": PublishedModel(
        "original", "1B Word Benchmark (the paper's model)",
        # Sources: (a) the Content-Length that AllenNLP's downloader showed for both files at their
        # S3 URLs (allennlp.s3.amazonaws.com host), in a notebook run of 2019-06-30 kept in
        # github.com/mohcinemadkour/mohcineblog, "Draft/Scritps/Transfer learning in NLP Part 2 -
        # Context vectors.md" (commit a2584cab): "336/336" and "374434792/374434792";
        # (b) the copy of both files a Hugging Face engineer put at huggingface.co/lysandre/elmo:
        # options.json 336 bytes (tree 7a5f7d2), and the Git LFS pointer of
        # elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5 in commit
        # e96602c873f90782c21402b8d8d1ff1327318678 ("Contribute ELMO", 2021-03-04):
        # "oid sha256:a6b92b9ccbb13fe489faacd2221c795d4bebe84b75f8aded9d85ea464fa5c994",
        # "size 374434792". The sizes are pinned: two independent records agree to the byte. That
        # SHA-256 is only the copy's, and AllenNLP never published one, so it is not enforced
        # (a wrong pin would lock every user out): both hashes are trusted on first use.
        options_size=336,
        weights_size=374434792,
    ),
    "original-5.5b": PublishedModel("original", "Wikipedia + WMT news crawl (5.5B tokens)", suffix="_5.5B"),
}


def model_names() -> list[str]:
    """Every name :func:`model_files` accepts."""
    return [DEFAULT_MODEL, *PUBLISHED]


def packaged_model_dir() -> Path:
    """Folder of the shipped default model: ``options.json``, ``weights.hdf5``,
    ``softmax_weights.hdf5``, ``vocab.txt`` and ``MODEL_CARD.md``."""
    return Path(str(resources.files("elmo") / "resources" / "model"))


def model_files(name: str = DEFAULT_MODEL, *, cache_dir: str | os.PathLike | None = None,
                progress: bool = True) -> tuple[Path, Path]:
    """``(options.json, weights.hdf5)`` of the named model, downloading a published one if needed.

    Raises ValueError for an unknown name and :class:`elmo.hub.download.DownloadError` when a published
    model is not cached and cannot be fetched (the message says where to put the files by hand),
    when what is fetched does not match its pins or its sidecar record, or when ``$ELMO_MODELS_URL``
    is a plain ``http://`` mirror and ``$ELMO_ALLOW_HTTP`` is not ``1``.
    """
    if name == DEFAULT_MODEL:
        folder = packaged_model_dir()
        options, weights = folder / "options.json", folder / "weights.hdf5"
        if not weights.is_file():
            raise FileNotFoundError(f"{weights}: the packaged default model is missing; reinstall elmo")
        return options, weights
    if name not in PUBLISHED:
        raise ValueError(f"model: unknown name {name!r}; expected one of {', '.join(model_names())}")
    from elmo.fileio import default_cache_dir
    from elmo.hub.download import DownloadError, RemoteFile, fetch_all

    spec = PUBLISHED[name]
    base = os.environ.get("ELMO_MODELS_URL", PUBLISHED_BASE_URL).rstrip("/")
    folder = Path(cache_dir if cache_dir is not None else default_cache_dir()) / name
    try:
        # Offline, one error names both files and where each goes (not one per run).
        options, weights = fetch_all(
            [(RemoteFile(f"{base}/{spec.folder}/{spec.options_name}", spec.options_name, spec.options_size,
                         spec.options_sha256), folder),
             (RemoteFile(f"{base}/{spec.folder}/{spec.weights_name}", spec.weights_name, spec.weights_size,
                         spec.weights_sha256), folder)], progress=progress)
    except DownloadError as e:
        error = DownloadError(f"{e}\n{hub_pointer(name)}")
        error.missing = e.missing
        raise error from e
    return options, weights


def hub_pointer(name: str) -> str:
    """Where else a published model's files may be: copies on the Hugging Face Hub, and what such
    a copy counts as (one line, for a failed download's error)."""
    return (f"Copies of published ELMo models are on the Hugging Face Hub (https://huggingface.co/models?search=elmo): "
            f"name one as hf://OWNER/NAME[@REVISION]; it counts as {name!r} only where its files match the published "
            f"SHA-256 pins, and is otherwise a model of its own (docs/other-models.md).")


def published_match(options: str | os.PathLike | None, weights: str | os.PathLike | None) -> str | None:
    """The published model whose pins ``options`` and ``weights`` (a copy from elsewhere, the Hub's)
    match, or None. Both files need a SHA-256 pin, matched along with any size pin: a size alone
    cannot tell a copy from an altered file, and a file trusted on first use has nothing to match.
    Sizes are compared first, so a file of another size is never read."""
    if options is None or weights is None:
        return None
    from elmo.hub.download import file_sha256

    sizes = (os.path.getsize(options), os.path.getsize(weights))
    for name, spec in PUBLISHED.items():
        pins = ((spec.options_size, spec.options_sha256), (spec.weights_size, spec.weights_sha256))
        if any(sha256 is None or size not in (None, actual) for (size, sha256), actual in zip(pins, sizes)):
            continue
        if (file_sha256(options), file_sha256(weights)) == (spec.options_sha256.lower(), spec.weights_sha256.lower()):
            return name
    return None


def published_name_of_url(url: str) -> str | None:
    """The published model a URL names, if any: the URL of its options or weights file, or of its
    folder, under any host (AllenNLP's URLs, the S3 ones, a mirror's)."""
    base = url.rstrip("/").rsplit("/", 1)[-1]
    for name, spec in PUBLISHED.items():
        if base in (spec.options_name, spec.weights_name, spec.folder):
            return name
    return None


__all__ = ["DEFAULT_MODEL", "PUBLISHED", "PublishedModel", "hub_pointer", "model_files", "model_names",
           "packaged_model_dir", "published_match", "published_name_of_url"]
