"""Models on the Hugging Face Hub: ``hf://OWNER/NAME[@REVISION][/SUBFOLDER]``.

A Hub id names a repository (at a branch, tag or commit; ``main`` by default), or a folder in it,
holding a model in any layout the resolver knows: ``options.json`` + ``weights.hdf5`` (or
AllenNLP's ``elmo_..._options.json`` + ``elmo_..._weights.hdf5``), one NLPL-style ``.zip``, an
ELMoForManyLangs model, a folder ``elmo export`` wrote. Its files come through
``huggingface_hub`` (the optional extra ``elmo-embeddings[hub]``) into the Hub's own cache, so its
settings hold: ``HF_HUB_CACHE``, ``HF_HUB_OFFLINE=1``, ``HF_TOKEN`` for a private repository.
The snapshot folder a model is read from is named by the commit it resolved to, so what a run
records of a Hub model is its id pinned to that commit (:func:`pinned_id`): ``hf://OWNER/NAME@<40
hex digits>[/SUBFOLDER]``, which names the same files whatever the branch holds later.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from elmo.version import install_hint

SCHEME = "hf://"
_ID = re.compile(r"^hf://(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[^/]+))?"
                 r"(?:/(?P<subfolder>.+?))?/?$")
FORM = "hf://OWNER/NAME[@REVISION][/SUBFOLDER]"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class HubExtraMissing(ImportError, ValueError):
    """``huggingface_hub`` is not installed. A ValueError too, so that the command line reports
    it as the one-line error of a model source it cannot read."""


@dataclass(frozen=True)
class HubId:
    """A parsed Hub id: repository, revision (None: the default branch) and subfolder (or None)."""

    repo_id: str
    revision: str | None = None
    subfolder: str | None = None


def is_hub_id(text: str) -> bool:
    return text.startswith(SCHEME)


def parse_hub_id(text: str) -> HubId:
    """The parts of ``text``; ValueError naming it where it is not of the form :data:`FORM`."""
    match = _ID.match(text)
    subfolder = match["subfolder"] if match else None
    if match is None or (subfolder is not None and ".." in subfolder.split("/")):
        raise ValueError(f"{text}: not a Hugging Face Hub id; expected {FORM} (a revision with '/' in it: "
                         f"use its commit hash)")
    return HubId(match["repo"], match["revision"], subfolder)


def format_hub_id(hub: HubId) -> str:
    """The id text of ``hub`` (the inverse of :func:`parse_hub_id`)."""
    revision = f"@{hub.revision}" if hub.revision else ""
    subfolder = f"/{hub.subfolder}" if hub.subfolder else ""
    return f"{SCHEME}{hub.repo_id}{revision}{subfolder}"


def pinned_id(text: str, snapshot_root: Path) -> str:
    """The Hub id ``text`` pinned to the commit its snapshot resolved to: the Hub cache names a
    snapshot folder by its commit hash, so ``snapshot_root`` (``.../snapshots/<commit>``) says
    which. ``text`` unchanged where the folder is not named by a commit (nothing to pin to)."""
    commit = Path(snapshot_root).name
    if not _COMMIT.match(commit):
        return text
    hub = parse_hub_id(text)
    return format_hub_id(HubId(hub.repo_id, commit, hub.subfolder))


def snapshot(text: str, *, progress: bool = True) -> Path:
    """:func:`resolve_snapshot`'s folder alone."""
    return resolve_snapshot(text, progress=progress)[0]


def resolve_snapshot(text: str, *, progress: bool = True) -> tuple[Path, str]:
    """The local folder holding what the Hub id ``text`` names (its subfolder, if it names one),
    downloaded into the Hub's cache if not there already. Raises :class:`HubExtraMissing` (an
    ImportError, one line: install ``elmo-embeddings[hub]``) without ``huggingface_hub``, and :class:`~elmo.hub.download.DownloadError`
    naming the id when the Hub (or, offline, its cache) does not have it. Second, the id pinned
    to the commit it resolved to (:func:`pinned_id`)."""
    hub = parse_hub_id(text)
    try:
        import huggingface_hub
    except ImportError:
        raise HubExtraMissing(f"{text}: models on the Hugging Face Hub need huggingface_hub: "
                              f"{install_hint('hub')}") from None
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    from elmo.hub.download import DownloadError

    patterns = [f"{hub.subfolder}/*"] if hub.subfolder else None
    if not progress:
        disable_progress_bars()
    try:
        folder = Path(huggingface_hub.snapshot_download(hub.repo_id, revision=hub.revision, allow_patterns=patterns,
                                                        library_name="elmo"))
    except Exception as e:  # the Hub's errors (offline, not found, refused, a network failure): one line
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise DownloadError(f"{text}: could not get it from the Hugging Face Hub ({type(e).__name__}: {reason})"
                            ) from e
    finally:
        if not progress:
            enable_progress_bars()
    pinned = pinned_id(text, folder)
    if hub.subfolder:
        folder = folder / hub.subfolder
        if not folder.is_dir():
            raise ValueError(f"{text}: the repository has no folder {hub.subfolder!r}")
    return folder, pinned


def _holds_model(folder: Path) -> bool:
    """Whether :func:`model_in` would find a model in ``folder`` (nothing is read)."""
    from elmo.hub.archives import looks_like_model

    return (looks_like_model(folder) or (folder / "checkpoints").is_dir()
            or any(p.suffix.lower() in (".zip", ".pt") and p.is_file() for p in folder.iterdir()))


def model_in(folder: Path, text: str) -> Path:
    """The model source in a Hub snapshot ``folder``: the folder itself where the resolver reads
    it as one (options + weights under either naming, an ELMoForManyLangs model, an exported
    folder, a run directory), else its one ``.zip`` archive or ``.pt`` checkpoint. ValueError
    naming the id and what the folder holds when it is none of these."""
    from elmo.hub.archives import looks_like_model

    if looks_like_model(folder) or (folder / "checkpoints").is_dir():
        return folder
    files = sorted(p for p in folder.iterdir() if p.is_file())
    for suffix in (".zip", ".pt"):
        found = [p for p in files if p.suffix.lower() == suffix]
        if len(found) == 1:
            return found[0]
    # A repository of several models keeps each in a folder (en/, de/): name them to choose from.
    models = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".") and _holds_model(p))
    if models:
        hub = parse_hub_id(text)
        choices = ", ".join(format_hub_id(HubId(hub.repo_id, hub.revision, "/".join(filter(None, (hub.subfolder, m)))))
                            for m in models)
        raise ValueError(f"{text}: no model at this level; it holds models in the folders {', '.join(models)}: "
                         f"choose one ({choices})")
    names = ", ".join(p.name for p in files) or "no files"
    raise ValueError(f"{text}: no model there: expected options.json + weights.hdf5, one NLPL .zip or .pt "
                     f"checkpoint, an ELMoForManyLangs model or an exported folder (it holds {names})")


__all__ = ["FORM", "HubExtraMissing", "HubId", "format_hub_id", "is_hub_id", "model_in", "parse_hub_id", "pinned_id",
           "resolve_snapshot", "snapshot"]
