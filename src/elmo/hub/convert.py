"""Writing a model in another tool's format: ``elmo convert`` is a thin layer on :func:`convert_model`.

Formats:

* ``"bilm-tf"``: ``options.json`` + ``weights.hdf5``, what bilm-tf, AllenNLP, simple_elmo and
  every tool built on them read. An ELMoForManyLangs model fits only without a word embedding
  and with a character dictionary inside ASCII (then it is rewritten into the byte scheme, with
  identical vectors for ASCII text); otherwise the error lists every reason.
* ``"elmo"``: this library's native checkpoint (``.pt``, read with ``weights_only=True``), which
  holds any model it loads, dictionaries included.
* ``"manylangs"``: the ELMoForManyLangs format, for dictionary models (their ``Embedder`` reads it).

The other way round, a byte-scheme (bilm-tf) model has no ELMoForManyLangs form: their scheme
reads one id per Unicode character, bilm-tf's one per UTF-8 byte.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from elmo.fileio import OWNER_FILE, atomic_write_text, check_output_file
from elmo.model.chars import BOS_CHAR, BOW_CHAR, EOS_CHAR, EOW_CHAR, MAX_CHARS, PAD_CHAR
from elmo.model.config import BiLMConfig, CharCNNConfig
from elmo.model.dictionary import SPECIAL_CHARS
from elmo.model.network import BiLM

FORMATS = ("bilm-tf", "elmo", "manylangs")


class ConversionError(ValueError):
    """The model has no exact place in the asked format; the message lists every reason."""


@dataclass
class Conversion:
    """What :func:`convert_model` wrote: the paths and notes the user should read (where the
    result differs from the source, which readers cannot load it)."""

    paths: list[str]
    notes: list[str] = field(default_factory=list)


def byte_scheme_problems(model: BiLM) -> list[str]:
    """Why a dictionary (ELMoForManyLangs) model cannot be rewritten into the byte scheme of
    bilm-tf; empty when it can. Each reason names the part and what bilm-tf/AllenNLP have instead."""
    from elmo.model.weights import bilm_tf_problems

    cnn, lstm = model.config.char_cnn, model.config.lstm
    problems = [p for p in bilm_tf_problems(model) if not p.startswith("characters:")]
    chars = model.characters.chars
    beyond = sorted(c for c in chars if c not in SPECIAL_CHARS and (len(c) != 1 or ord(c) >= 128))
    if beyond:
        shown = " ".join(repr(c) for c in beyond[:8]) + (" ..." if len(beyond) > 8 else "")
        problems.append(f"characters: char.dic holds {len(beyond)} of its {len(chars)} entries outside ASCII ({shown}); "
                        f"bilm-tf and AllenNLP read UTF-8 bytes (ids 0-261), where such a character is 2 to 4 ids "
                        f"and has no embedding row of its own")
    if cnn.max_characters_per_token != MAX_CHARS:
        problems.append(f"max_characters_per_token: {cnn.max_characters_per_token}; bilm-tf's byte ids have "
                        f"{MAX_CHARS} slots (AllenNLP's ELMoCharacterMapper fixes them)")
    if cnn.n_filters + cnn.word_dim == lstm.projection_dim:
        problems.append(f"projection: ELMoForManyLangs always projects the token vector, but bilm-tf has no projection "
                        f"when the CNN's {cnn.n_filters} filters already match projection_dim={lstm.projection_dim}")
    return problems


@torch.no_grad()
def to_byte_scheme(model: BiLM) -> BiLM:
    """A byte-scheme model with the same weights as the dictionary model ``model``: the same
    vectors for ASCII text (except the tokens ``<bos>``/``<eos>``, markers in their scheme, and
    ``<S>``/``</S>``, markers in bilm-tf's). Raises :class:`ConversionError` with every reason
    where that model does not exist."""
    problems = byte_scheme_problems(model)
    if problems:
        raise ConversionError("this ELMoForManyLangs model has no place in the bilm-tf layout: " + "; ".join(problems))
    cnn = model.config.char_cnn
    config = BiLMConfig(char_cnn=CharCNNConfig(embedding_dim=cnn.embedding_dim, filters=list(cnn.filters),
                                               n_highway=cnn.n_highway, activation=cnn.activation),
                        lstm=model.config.lstm, training=dict(model.config.training))
    out = BiLM(config)
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("token_encoder.char_embedding")}
    out.load_state_dict(state, strict=False)
    chars, source = model.characters.chars, model.token_encoder.char_embedding.weight
    # Their first in-word marker is the id of <eow> and the last that of <bow> (see elmo.model.dictionary).
    markers = {BOS_CHAR: "<bos>", EOS_CHAR: "<eos>", BOW_CHAR: "<eow>", EOW_CHAR: "<bow>", PAD_CHAR: "<pad>"}
    target = out.token_encoder.char_embedding.weight
    target.zero_()
    for byte in range(PAD_CHAR + 1):
        if byte in markers:
            token = markers[byte]
        else:
            token = chr(byte) if byte < 128 and chr(byte) in chars else "<oov>"
        target[byte + 1] = source[chars[token] + 1]
    return out.eval()


BILM_TF_FILES = ("options.json", "weights.hdf5")  # what save_bilm_tf writes into a folder


def convert_model(source, output: str | os.PathLike, *, to: str = "bilm-tf", overwrite: bool = False,
                  dtype: str = "float32") -> Conversion:
    """Write the model ``source`` names (anything :func:`elmo.hub.load_model` takes)
    in format ``to`` (see :data:`FORMATS`) at ``output``: a folder for ``bilm-tf`` and
    ``manylangs``, a ``.pt`` file for ``elmo``. The output appears complete or not at all, and an
    existing one is replaced only with ``overwrite``, and a folder only when elmo made it and it
    holds nothing else (:func:`elmo.hub.checkpoints.write_model_folder`). ``dtype`` (``float16``
    halves the file) applies to ``bilm-tf``. Raises :class:`ConversionError` listing why the model
    does not fit."""
    from elmo.hub.checkpoints import check_model_folder, save_checkpoint, write_model_folder
    from elmo.hub.manylangs import (
        ManyLangsError,
        manylangs_problems,
        save_manylangs,
    )
    from elmo.hub.resolve import load_model
    from elmo.model.weights import bilm_tf_reader_notes, save_bilm_tf

    if to not in FORMATS:
        raise ValueError(f"to: expected one of {', '.join(FORMATS)}, got {to!r}")
    output = Path(output)
    _refuse_replacing_the_source(source, output)
    # What is in the way is refused before the model loads (and checked again when it is written).
    if to == "elmo":
        if output.is_dir():
            raise IsADirectoryError(f"{output}: a folder is in the way of the checkpoint file; give a file name")
        check_output_file(output, overwrite)
    # A bilm-tf folder without elmo's marker (a user's, or one from before the marker) is replaced
    # only when it holds nothing but what this conversion writes: a vocab.txt there that the
    # source does not carry would otherwise be deleted.
    vocab = _source_vocabulary(source) if to == "bilm-tf" else None
    if to == "bilm-tf":
        check_model_folder(output, overwrite, writes=BILM_TF_FILES + (("vocab.txt",) if vocab is not None else ()))
    elif to != "elmo":
        check_model_folder(output, overwrite)
    model = load_model(source)
    notes: list[str] = []
    if to == "elmo":
        save_checkpoint(model, output)
        return Conversion([str(output)], notes)
    if to == "manylangs":
        problems = manylangs_problems(model)
        if problems:
            raise ConversionError("this model has no place in the ELMoForManyLangs format: " + "; ".join(problems))
        try:
            write_model_folder(output, lambda folder: save_manylangs(model, folder), overwrite)
        except ManyLangsError as e:
            raise ConversionError(str(e)) from None
        return Conversion(_written(output), notes)
    if model.config.char_cnn.characters == "dictionary":
        model = to_byte_scheme(model)
        notes.append("identical vectors for ASCII text; a character outside ASCII is one <oov> slot in "
                     "ELMoForManyLangs and one slot per UTF-8 byte here, and the tokens <bos>/<eos> (markers there) "
                     "and <S>/</S> (markers here) differ")

    def write(folder: Path) -> None:
        save_bilm_tf(model, folder, dtype=dtype)
        if vocab is not None:
            atomic_write_text(folder / "vocab.txt", "".join(w + "\n" for w in vocab))

    write_model_folder(output, write, overwrite)
    notes.extend(bilm_tf_reader_notes(model.config))
    return Conversion(_written(output), notes)


def _written(folder: Path) -> list[str]:
    """The files of a model folder just written (not elmo's marker)."""
    return sorted(str(p) for p in folder.iterdir() if p.name != OWNER_FILE)


def _refuse_replacing_the_source(source, output: Path) -> None:
    """An output that is the source, or a folder holding it, would be replaced (with ``overwrite``)
    by what was read from it: never overwrite an input."""
    if not isinstance(source, (str, os.PathLike)) or not os.path.exists(source):
        return
    source_path, target = Path(source).resolve(), output.resolve()
    if source_path == target or target in source_path.parents:
        raise ValueError(f"{output}: this is (or holds) the model being converted, {source}; write elsewhere")


def _source_vocabulary(source) -> list[str] | None:
    """The ``vocab.txt`` of a model archive or folder, to carry along; None for other sources."""
    from elmo.hub.archives import looks_like_model, read_model_vocabulary

    if isinstance(source, (str, os.PathLike)) and looks_like_model(source):
        found = read_model_vocabulary(source)
        return found[0] if found else None
    return None


__all__ = ["Conversion", "ConversionError", "FORMATS", "byte_scheme_problems", "convert_model", "to_byte_scheme"]
