"""A folder ready to upload to the Hugging Face Hub: an exported model plus its ``README.md``
model card, whose YAML front matter is the Hub's metadata (``library_name: elmo``, ``license``,
``language``, ``datasets``, a ``model-index`` with the held-out perplexity where a training run
logged one) and whose text says what the model is, how it was made and how to load it
(``hf://OWNER/NAME``).

:func:`export_for_hub` does the work; ``elmo export --hub-card`` only parses its arguments. What
the card says of training comes from the run the model was exported from: its
``train_settings.json`` (the corpus, the settings) and ``metrics.csv`` (the held-out perplexity
logged at or before the exported step). A model from elsewhere (an exported folder, a Hub
model) is named by what a run records of it: a Hub id pinned to its commit.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path

from elmo.hub.checkpoints import CARD_MARK, export_language_model
from elmo.hub.resolve import ModelSource, load_language_model_with_origin
from elmo.jsonio import field as json_field, read_json
from elmo.model.vocab import Vocabulary
from elmo.model.weights import STORAGE_DTYPES
from elmo.lm.model import LanguageModel

# A training run's files (elmo.training.train writes them; read here as files, not imported,
# so that the hub package stays below training).
RUN_SETTINGS_FILE = "train_settings.json"
RUN_METRICS_FILE = "metrics.csv"
# What the Hub accepts as a license id, a language code and a dataset id (checked here, so that a
# typo is refused before the weights are written rather than by the Hub after the upload).
_LICENSE = re.compile(r"^[a-z0-9][a-z0-9.+-]*$")
_LANGUAGE = re.compile(r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$")
_DATASET = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


def _checked(field: str, values: Sequence[str], pattern: re.Pattern, what: str) -> list[str]:
    for value in values:
        if not isinstance(value, str) or not pattern.match(value):
            raise ValueError(f"{field}: {value!r} is not {what}")
    return list(values)


def check_card_fields(license: str, languages: Sequence[str], datasets: Sequence[str]) -> tuple[list, list]:
    """``(languages, datasets)`` as lists, once each value is one the Hub reads; ValueError naming
    the field and value otherwise."""
    _checked("license", [license], _LICENSE, "a Hub license id (such as apache-2.0, cc-by-sa-4.0 or other)")
    return (_checked("language", languages, _LANGUAGE, "a language code (ISO 639-1 or -3, such as en or nob)"),
            _checked("dataset", datasets, _DATASET, "a Hub dataset id (NAME or OWNER/NAME)"))


def run_of(origin: dict) -> Path | None:
    """The training run directory a language model was read from (its origin names a checkpoint
    under ``RUN/checkpoints/``), or None."""
    path = Path(origin["path"])
    if "step" in origin and path.parent.name == "checkpoints":
        return path.parent.parent
    return None


def heldout_perplexity(run: Path, step: int) -> tuple[float, int] | None:
    """``(perplexity, step)``: the last held-out perplexity ``run``'s ``metrics.csv`` logged at or
    before ``step``, or None when it logged none (no held-out text, no file)."""
    found = None
    try:
        with open(run / RUN_METRICS_FILE, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                try:
                    at, value = int(row.get("step") or ""), float(row.get("heldout_perplexity") or "")
                except ValueError:  # a row without one, or cut short by a kill
                    continue
                if at <= step and math.isfinite(value):
                    found = (value, at)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    return found


def _run_settings(run: Path) -> dict | None:
    """The run's ``train_settings.json`` (None without one). A file that is not one is refused
    (:class:`elmo.jsonio.JSONFileError`, naming the file and field): a card never shows settings
    it cannot vouch for, and never guesses them."""
    path = run / RUN_SETTINGS_FILE
    try:
        settings = read_json(path)
    except FileNotFoundError:
        return None
    json_field(settings, "init_from", (str, type(None)), os.fspath(path), required=False)
    return settings


def _yaml(value) -> str:
    """A YAML scalar: strings double-quoted as JSON writes them (a JSON string is a YAML one)."""
    return json.dumps(value, ensure_ascii=False)


def model_card(model: LanguageModel, vocab: Vocabulary, origin: dict, *, name: str, license: str,
               languages: Sequence[str] = (), datasets: Sequence[str] = (), command: str | None = None,
               perplexity: tuple[float, int] | None = None, settings: dict | None = None) -> str:
    """The text of a ``README.md`` model card for the Hub. ``origin``: where the model was read
    from (:func:`elmo.hub.load_language_model_with_origin`); ``perplexity``: ``(value, step)``,
    held-out; ``settings``: the training run's ``train_settings.json``; ``command``: the command
    that made the folder. ValueError naming the field for a license, language or dataset the Hub
    would not read."""
    languages, datasets = check_card_fields(license, languages, datasets)
    lines = ["---", "library_name: elmo", f"license: {_yaml(license)}"]
    for key, values in (("language", languages), ("datasets", datasets)):
        if values:
            lines += [f"{key}:", *(f"- {_yaml(v)}" for v in values)]
    lines += ["tags:", "- elmo", "- feature-extraction", "pipeline_tag: feature-extraction"]
    if perplexity is not None:
        value, step = perplexity
        lines += ["model-index:", f"- name: {_yaml(name)}", "  results:", "  - task:",
                  "      type: text-generation", "      name: Language modeling", "    dataset:",
                  f"      type: {_yaml(datasets[0] if datasets else 'text')}",
                  "      name: Held-out text", "    metrics:", "    - type: perplexity",
                  f"      value: {round(value, 3)}", f"      name: {_yaml(f'Held-out perplexity (step {step})')}"]
    lines += ["---", CARD_MARK, ""]

    config = model.bilm.config
    lstm = config.lstm
    # A repository id (OWNER/NAME) fills the examples; any other title leaves them to the reader.
    repo = name if _REPO_ID.match(name) else "OWNER/NAME"
    intro = "With `OWNER/NAME` this repository's id (`pip install 'elmo-embeddings[hub]'`):" if repo == "OWNER/NAME" \
        else "With `pip install 'elmo-embeddings[hub]'`:"
    lines += [f"# {name}", "",
              "An ELMo biLM (Peters et al., 2018) for the `elmo` library, in the bilm-tf/AllenNLP layout "
              "(`options.json` + `weights.hdf5`) that AllenNLP and bilm-tf read too, with its softmax "
              "(`softmax_weights.hdf5`) and vocabulary (`vocab.txt`), which make it a language model for "
              "perplexity and `elmo finetune`.", "",
              "## Use", "", intro, "",
              "```python", "from elmo import Embedder", "",
              f'vectors = Embedder.from_pretrained("hf://{repo}").embed_sentence("A sentence .".split())',
              "```", "", "```sh", f"elmo embed sentences.txt vectors.hdf5 --model hf://{repo}", "```", "",
              "## Model", "",
              f"- biLM: {lstm.n_layers} LSTM layers of {lstm.dim} cells each way, projected to "
              f"{lstm.projection_dim}; ELMo layers of {2 * lstm.projection_dim} dimensions "
              f"({config.n_output_layers} of them).",
              f"- Parameters: {config.parameter_count():,} in the biLM; the softmax over {len(vocab):,} words "
              f"adds {sum(p.numel() for p in model.softmax.parameters()):,}.",
              f"- Exported from: `{origin['source']}`"
              + (f", step {origin['step']:,} ({origin['tokens']:,} tokens)" if "step" in origin else "") + "."]
    if perplexity is not None:
        lines.append(f"- Held-out perplexity: {perplexity[0]:.3f} at step {perplexity[1]:,} (the run's "
                     f"`{RUN_METRICS_FILE}`).")
    if settings is not None:
        verb = "elmo finetune" if settings.get("init_from") else "elmo train"
        lines += ["", "## Training", "",
                  f"Trained by `{verb}` on the files below, with these settings (the run's `{RUN_SETTINGS_FILE}`):",
                  "", "```json", json.dumps(settings, indent=1, ensure_ascii=False), "```"]
    if command:
        lines += ["", "## How this folder was made", "", "```sh", command, "```"]
    return "\n".join(lines) + "\n"


def card_name(origin: dict, name: str | None = None) -> str:
    """The card's title: ``name`` where given (the repository id it will be uploaded to, or any
    title), else the id of the Hub repository the model came from (without its pinned commit),
    else the name of the training run or model folder it was read from (not the output folder,
    a local name the Hub never sees)."""
    if name:
        return name
    source = str(origin.get("source", ""))
    from elmo.hub.hf import is_hub_id, parse_hub_id

    if is_hub_id(source):
        hub = parse_hub_id(source)
        return "/".join(filter(None, (hub.repo_id, hub.subfolder)))
    run = run_of(origin)
    if run is not None:
        return run.name
    path = Path(origin.get("path") or source)
    return path.stem if path.is_file() else path.name or "ELMo"


def export_for_hub(source: ModelSource, output: str | os.PathLike, *, license: str, languages: Sequence[str] = (),
                   datasets: Sequence[str] = (), command: str | None = None, dtype: str = STORAGE_DTYPES[0],
                   overwrite: bool = False, name: str | None = None, make_parents: bool = False) -> str:
    """Write the language model ``source`` names (a training run, its checkpoint, an exported
    folder, ``default``, a Hub model) into the folder ``output``, ready to upload to the Hub:
    :func:`~elmo.hub.checkpoints.export_language_model`'s files plus ``README.md``, the card of
    :func:`model_card` (its perplexity and settings from the run, where it is one). The folder
    appears complete or not at all. Returns the card's text. ``command``: the command that made
    it, for the card; ``name``: its title (:func:`card_name`). A bad license, language or dataset
    is refused before the model loads."""
    check_card_fields(license, languages, datasets)
    model, vocab, origin = load_language_model_with_origin(source)
    run = run_of(origin)
    card = model_card(model, vocab, origin, name=card_name(origin, name), license=license,
                      languages=languages, datasets=datasets, command=command,
                      perplexity=heldout_perplexity(run, origin["step"]) if run is not None else None,
                      settings=_run_settings(run) if run is not None else None)
    export_language_model(model, vocab, output, dtype=dtype, overwrite=overwrite, card=card, make_parents=make_parents)
    return card


__all__ = ["card_name", "check_card_fields", "export_for_hub", "heldout_perplexity", "model_card", "run_of"]
