"""Which model: the one resolver every entry point uses (``--model``, ``Embedder.from_pretrained``,
``Elmo.from_*``, ``elmo.allennlp``, the task configs' ``bilm.model``, ``elmo finetune``,
``elmo evaluate``, ``elmo export``).

A model source is any of:

* ``None`` or ``"default"``: the model shipped in the package (with its softmax and vocabulary);
* a published name (``"small"``, ``"medium"``, ``"original"``, ``"original-5.5b"``), or the URL
  of a published model's options file, weights file or folder, whatever the host: downloaded once
  into the cache and held to its pins (:mod:`elmo.hub.pretrained`);
* an ``(options.json, weights.hdf5)`` pair of paths, of URLs (a contributed model's, say: any
  ``https://`` URL, downloaded once into the cache and trusted on first use,
  :func:`elmo.hub.download.fetch_url`), or one of each;
* the URL of a model archive (``.zip``) or checkpoint (``.pt``), downloaded the same way;
* a folder holding ``options.json`` + ``weights.hdf5`` (``elmo export`` writes one, adding
  ``softmax_weights.hdf5`` and ``vocab.txt``, which make it a language model too);
* a training run directory (``elmo train`` writes one): its newest readable checkpoint;
* a checkpoint file (``.pt``): :func:`elmo.save_checkpoint`'s ``elmo-bilm`` or a training run's
  ``elmo-train`` (:mod:`elmo.hub.checkpoints`);
* a model archive (``.zip``) or folder in another tool's layout: the NLPL repository's ELMo
  archives (bilm-tf layout: ``model.hdf5``, ``options.json``, ``vocab.txt.gz``) and
  ELMoForManyLangs models (:mod:`elmo.hub.archives`, :mod:`elmo.hub.manylangs`);
* a Hugging Face Hub id, ``hf://OWNER/NAME[@REVISION][/SUBFOLDER]``, naming any of the layouts
  above in a repository (:mod:`elmo.hub.hf`, with the optional ``huggingface_hub``).

Resolving is two steps. :func:`locate` says what a source names without reading or downloading
anything (so a config can be checked before a run starts); :func:`load_model` and
:func:`load_language_model` then read it. To add a source, add one branch to :func:`locate`
that returns a :class:`Location` of an existing kind (a format that is a bilm-tf folder once
unpacked can unpack in :func:`_local`, one more branch there).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from elmo.hub.archives import (
    ModelFolder,
    is_manylangs,
    language_model_of_folder,
    load_bilm_tf_folder,
    looks_like_model,
)
from elmo.hub.checkpoints import (
    NATIVE_FORMAT,
    NATIVE_VERSION,
    SOFTMAX_FILE,
    TRAIN_FORMAT,
    TRAIN_VERSION,
    VOCAB_FILE,
    bilm_of_payload,
    check_train_payload,
    language_model_of_payload,
    load_exported_language_model,
    load_latest_train_checkpoint,
    read_checkpoint,
)
from elmo.hub.hf import is_hub_id, parse_hub_id
from elmo.hub.manylangs import load_manylangs
from elmo.hub.pretrained import (
    DEFAULT_MODEL,
    PUBLISHED,
    model_files,
    model_names,
    packaged_model_dir,
    published_match,
    published_name_of_url,
)
from elmo.model.network import BiLM
from elmo.model.vocab import Vocabulary
from elmo.model.weights import load_bilm_tf
from elmo.lm.model import LanguageModel

ModelSource = str | os.PathLike | tuple[str | os.PathLike, str | os.PathLike] | None
URL_SCHEMES = ("https://", "http://", "s3://")
# The .pt formats a model source may be, and the newest version of each this library reads.
MODEL_FORMATS = {NATIVE_FORMAT: NATIVE_VERSION, TRAIN_FORMAT: TRAIN_VERSION}


@dataclass(frozen=True)
class Location:
    """What a model source names. ``kind`` is one of:

    * ``"published"``: ``name`` is a published model, to download (or find in the cache);
    * ``"files"``: ``path`` is ``options.json`` and ``weights`` its ``weights.hdf5``; ``folder``, when
      they came as a folder, may also hold the softmax and vocabulary of a language model;
    * ``"run"``: ``path`` is a training run directory;
    * ``"checkpoint"``: ``path`` is a checkpoint file, and ``payload`` its contents once read;
    * ``"archive"``: ``path`` is a model archive (``.zip``) or folder in another tool's layout (an
      NLPL archive, an ELMoForManyLangs model), read by :mod:`elmo.hub.archives`;
    * ``"url"``: ``urls`` are files to download first (any URL, trusted on first use): an
      ``(options, weights)`` pair, either of which may be a local path, or one ``.zip`` or ``.pt``;
    * ``"hub"``: ``name`` is a Hugging Face Hub id, to fetch into the Hub's cache first.
    """

    kind: str
    source: str  # the source as given, for messages
    name: str | None = None
    path: Path | None = None
    weights: Path | None = None
    folder: Path | None = None
    payload: dict | None = field(default=None, repr=False, compare=False)
    urls: tuple[str, ...] = ()
    # Once read: the source that names exactly these files again (a Hub id pinned to the commit it
    # resolved to), and the published model a Hub copy is, where its files match that model's pins.
    resolved: str | None = None
    published: str | None = None

    @property
    def record(self) -> str:
        """What a run records as the model it used: :attr:`resolved`, else the source as given."""
        return self.resolved or self.source


# What one URL alone may name (a pair names options + weights): the formats a file holds whole.
SINGLE_FILE_SUFFIXES = (".zip", ".pt")


def _is_url(text: str) -> bool:
    return text.startswith(URL_SCHEMES)


def _url_suffix(url: str) -> str:
    from urllib.parse import urlsplit

    return Path(urlsplit(url).path).suffix.lower()


def locate(source: ModelSource = None) -> Location:
    """What ``source`` names (see the module's list), checked without reading a model file or
    touching the network. Raises ValueError naming the source when it names no model."""
    if source is None:
        source = DEFAULT_MODEL
    if isinstance(source, tuple):
        options, weights = (os.fspath(part) for part in source)
        if _is_url(options) or _is_url(weights):
            names = {published_name_of_url(options), published_name_of_url(weights)}
            if _is_url(options) and _is_url(weights) and len(names) == 1 and None not in names:
                return Location("published", f"{options} + {weights}", name=names.pop())
            # Any other pair (a contributed model's files, a mirror's): downloaded, trusted on first use.
            for role, part in (("options", options), ("weights", weights)):
                if not _is_url(part) and not os.path.isfile(part):
                    raise FileNotFoundError(f"{part}: no such {role} file")
            return Location("url", f"{options} + {weights}", urls=(options, weights))
        for role, part in (("options", options), ("weights", weights)):
            if not os.path.isfile(part):
                raise FileNotFoundError(f"{part}: no such {role} file")
        return Location("files", f"{options} + {weights}", path=Path(options), weights=Path(weights))
    text = os.fspath(source)
    if is_hub_id(text):
        parse_hub_id(text)  # the form is checked here; the Hub is asked when the model is read
        return Location("hub", text, name=text)
    if text == DEFAULT_MODEL:
        folder = packaged_model_dir()
        return Location("files", text, path=folder / "options.json", weights=folder / "weights.hdf5", folder=folder)
    if text in PUBLISHED:
        return Location("published", text, name=text)
    if _is_url(text):
        name = published_name_of_url(text)
        if name is not None:
            return Location("published", text, name=name)
        if _url_suffix(text) in SINGLE_FILE_SUFFIXES:
            return Location("url", text, urls=(text,))
        raise ValueError(f"{text}: not the URL of a published model ({', '.join(PUBLISHED)}), a model archive "
                         f"(.zip) or a checkpoint (.pt); pass the URLs of its options and weights files as a pair")
    path = Path(text)
    if path.is_dir() and (path / "options.json").is_file() and (path / "weights.hdf5").is_file():
        return Location("files", text, path=path / "options.json", weights=path / "weights.hdf5", folder=path)
    if path.is_dir() and (path / "checkpoints").is_dir():
        return Location("run", text, path=path)
    if path.is_file() and path.suffix == ".pt":
        return Location("checkpoint", text, path=path)
    if looks_like_model(path):
        return Location("archive", text, path=path)
    if path.exists():
        raise ValueError(f"{text}: not a model: expected a folder with options.json and weights.hdf5 (or a zip "
                         f"archive of one, as the NLPL repository's), an ELMoForManyLangs model, a training run "
                         f"directory (with checkpoints/) or a checkpoint .pt file")
    raise ValueError(f"{text}: neither a model name ({', '.join(model_names())}) nor an existing path")


def _local(location: Location, cache_dir: str | os.PathLike | None, progress: bool) -> Location:
    """``location`` with its files on this machine: a published model downloaded into the cache
    (``"files"``), a run directory's newest readable checkpoint read (``"checkpoint"``, skipping a
    damaged newer one with a warning), a checkpoint file read."""
    if location.kind == "published":
        options, weights = model_files(location.name, cache_dir=cache_dir, progress=progress)
        return Location("files", location.source, path=options, weights=weights)
    if location.kind == "hub":
        from elmo.hub.hf import model_in, resolve_snapshot

        folder, pinned = resolve_snapshot(location.name, progress=progress)
        found = _local(dataclasses.replace(locate(model_in(folder, location.name)), source=location.source),
                       cache_dir, progress)
        published = published_match(found.path, found.weights) if found.kind == "files" else None
        return dataclasses.replace(found, resolved=pinned, published=published)
    if location.kind == "url":
        from elmo.hub.download import RemoteFile, fetch_all, url_cache_folder, url_filename

        # Every file to download at once: offline, one error names each and the folder it goes to.
        remote = [(RemoteFile(part, url_filename(part)), url_cache_folder(part, cache_dir))
                  for part in location.urls if _is_url(part)]
        fetched = iter(fetch_all(remote, progress=progress))
        paths = [next(fetched) if _is_url(part) else Path(part) for part in location.urls]
        if len(paths) == 2:
            return Location("files", location.source, path=paths[0], weights=paths[1])
        kind = "checkpoint" if paths[0].suffix == ".pt" else "archive"
        return _local(Location(kind, location.source, path=paths[0]), cache_dir, progress)
    if location.kind == "run":
        found = load_latest_train_checkpoint(location.path)
        if found is None:
            raise ValueError(f"{location.path}: a training run directory with no checkpoint yet")
        return Location("checkpoint", location.source, path=Path(found[0]), payload=found[1])
    if location.kind == "checkpoint" and location.payload is None:
        payload = read_checkpoint(location.path, MODEL_FORMATS)
        if payload["format"] == TRAIN_FORMAT:
            check_train_payload(location.path, payload)
        return Location("checkpoint", location.source, path=location.path, payload=payload)
    return location


def load_model_folder(path: str | os.PathLike) -> BiLM:
    """The biLM of a model archive (``.zip``) or folder in another tool's layout, in eval mode: an
    NLPL archive (bilm-tf layout) or an ELMoForManyLangs model. Errors name the archive or folder
    and the member at fault."""
    with ModelFolder(path) as folder:
        if is_manylangs(folder):
            return load_manylangs(folder).eval()
        return load_bilm_tf_folder(folder)


def _origin(location: Location, path: str | os.PathLike) -> dict:
    """Where a model came from: ``path`` (absolute) and ``source``, what a run records as the model
    it used (:attr:`Location.record`: a Hub id pinned to its commit); ``published``, the published
    model a Hub copy is, where its files match that model's pins."""
    origin = {"path": os.path.abspath(path), "source": location.record}
    if location.published is not None:
        origin["published"] = location.published
    return origin


def load_model_with_origin(source: ModelSource | Location = None, *, cache_dir: str | os.PathLike | None = None,
                           progress: bool = True) -> tuple[BiLM, dict]:
    """:func:`load_model`'s biLM, and where it came from (``{"path", "source"[, "published"]}``:
    the file or folder read, and what a run records as the model it used, a Hub id pinned to the
    commit it resolved to)."""
    location = _local(source if isinstance(source, Location) else locate(source), cache_dir, progress)
    if location.kind == "checkpoint":
        return bilm_of_payload(location.path, location.payload).eval(), _origin(location, location.path)
    if location.kind == "archive":
        return load_model_folder(location.path), _origin(location, location.path)
    return load_bilm_tf(location.path, location.weights).eval(), _origin(location, location.folder or location.path)


def load_model(source: ModelSource | Location = None, *, cache_dir: str | os.PathLike | None = None,
               progress: bool = True) -> BiLM:
    """The biLM that ``source`` names (see the module's list), in eval mode, float32.

    ``cache_dir`` and ``progress`` concern downloads of published models. Errors are one line
    naming the source: ValueError (a source that names no model), :class:`~elmo.WeightsError`
    (a damaged, foreign or newer file), :class:`~elmo.hub.download.DownloadError`."""
    return load_model_with_origin(source, cache_dir=cache_dir, progress=progress)[0]


def load_language_model_with_origin(source: ModelSource | Location = None, *,
                                    cache_dir: str | os.PathLike | None = None,
                                    progress: bool = True) -> tuple[LanguageModel, Vocabulary, dict]:
    """The language model (biLM + softmax) and vocabulary that ``source`` names, and where the
    weights came from: ``{"path": ...}`` naming the checkpoint file that was read (a run directory
    names its newest readable one) or the folder, ``source``, what a run records as the model it
    started from (the source as given; a Hub id pinned to the commit it resolved to), and for a
    training checkpoint its ``step``, ``tokens`` and ``elapsed_seconds``, so that a run started
    from it can say at which point of the earlier run it branched off.

    A language model is a training run or checkpoint, an exported folder, or the packaged model;
    a source without a softmax (a published model, an ``options.json`` + ``weights.hdf5`` pair, a
    biLM checkpoint) is an error saying so."""
    location = _local(source if isinstance(source, Location) else locate(source), cache_dir, progress)
    model, vocab, origin = _language_model(location)
    return model, vocab, {**origin, **_origin(location, origin["path"])}


def _language_model(location: Location) -> tuple[LanguageModel, Vocabulary, dict]:
    """:func:`load_language_model_with_origin` of a location on this machine, its origin without ``source``."""
    if location.kind == "checkpoint":
        if location.payload["format"] != TRAIN_FORMAT:
            raise ValueError(f"{location.path}: a biLM checkpoint (elmo.save_checkpoint) holds no softmax or "
                             f"vocabulary; a language model is a training run or checkpoint, or an exported folder")
        return language_model_of_payload(location.path, location.payload)
    if location.kind == "archive":
        return language_model_of_folder(location.path)
    folder = location.folder
    if folder is None:
        raise ValueError(f"{location.source}: a biLM without its softmax and vocabulary; a language model is a "
                         f"training run or checkpoint, or an exported folder (elmo export)")
    missing = [name for name in (SOFTMAX_FILE, VOCAB_FILE) if not (folder / name).is_file()]
    if missing == [SOFTMAX_FILE] or (SOFTMAX_FILE in missing and (folder / "vocab.txt.gz").is_file()):
        # A vocabulary without a softmax: an NLPL model unpacked (or AllenNLP's files beside their
        # vocabulary); the softmax starts from random weights, as for the archive itself.
        return language_model_of_folder(folder)
    if missing:
        raise FileNotFoundError(f"{folder}: neither a run directory with checkpoints nor an exported model "
                                f"(missing {', '.join(missing)})")
    model, vocab = load_exported_language_model(location.path, location.weights, folder / SOFTMAX_FILE,
                                                folder / VOCAB_FILE)
    return model, vocab, {"path": os.path.abspath(folder)}


def load_language_model(source: ModelSource | Location = None, **options) -> tuple[LanguageModel, Vocabulary]:
    """:func:`load_language_model_with_origin` without the origin."""
    model, vocab, _ = load_language_model_with_origin(source, **options)
    return model, vocab


__all__ = ["Location", "MODEL_FORMATS", "ModelSource", "load_language_model", "load_language_model_with_origin",
           "load_model", "load_model_folder", "load_model_with_origin", "locate"]
