"""What the task readers share: errors that name the file and line, line reading, tokenizers.

Each task family's readers live in its own module (:mod:`elmo.tasks.tagging` reads CoNLL-2003,
WNUT-17, CoNLL-2000, UD and the PTB sample; :mod:`elmo.tasks.srl` PropBank; ...), and
:func:`elmo.tasks.catalog.read_dataset` picks one by dataset kind. What several of them use is
here:

* :class:`DatasetError`, :func:`numbered_lines`, :func:`zip_member_lines`: reading lines of plain,
  ``.gz`` and zipped files with errors that name ``{path}:{line}``;
* :func:`conll2012_blocks`: files in CoNLL-2012 columns as documents and sentences of token lines
  (PropBank for SRL, OntoNotes and LitBank for coreference);
* :func:`tokenize_text` (the Moses tokenizer: SICK for entailment and for relatedness) and
  :func:`tokenize_with_offsets` (NLTK's Punkt and Treebank tokenizers, keeping character
  offsets: GAP for coreference and SQuAD for reading comprehension);
* :func:`sick_rows`: the rows of SICK's table, which entailment and relatedness read for
  different columns.

Conventions shared by all readers:

* Files are UTF-8, plain or ``.gz`` (read by :func:`elmo.fileio.read_lines`; ``\\n`` or
  ``\\r\\n`` endings). Every U+FEFF (a byte-order mark, or a stray zero-width no-break space
  inside a line, as in WNUT-17's dev set) is removed before parsing: it is invisible and carries
  no meaning in any of these formats.
* Anything malformed raises :class:`DatasetError` (a ``ValueError``) whose message starts with
  ``"{path}:{line}: "``; problems with a whole file (empty, no records, a header lacking a
  column) are reported at line 1. Bad arguments (an unknown split or kind) raise a plain
  ``ValueError``; missing files raise ``FileNotFoundError``.
* Tokens are kept exactly as the data set spells them (PTB escapes such as ``-LRB-`` and ``\\/``
  in SST stay), except for raw text (SICK, GAP, SQuAD), which the tokenizers here split.
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Union

from elmo.fileio import read_lines

PathLike = Union[str, os.PathLike]


class DatasetError(ValueError):
    """A malformed data file: the message is ``"{path}:{line}: {what}"``, or ``"{path}: {what}"``
    where lines mean nothing (a field of a JSON document, which ``what`` then names)."""

    def __init__(self, path: PathLike, line: int | None, what: str):
        self.path = os.fspath(path)
        self.line = line
        self.what = what
        super().__init__(f"{self.path}:{line}: {what}" if line is not None else f"{self.path}: {what}")

    def __reduce__(self):
        return type(self), (self.path, self.line, self.what)


# ---------------------------------------------------------------------------------------------
# Lines

def numbered_lines(path: PathLike) -> Iterator[tuple[int, str]]:
    """``(1-based line number, line)`` of a plain or ``.gz`` UTF-8 file, U+FEFF removed."""
    lines = read_lines(path)
    number = 0
    while True:
        try:
            line = next(lines)
        except StopIteration:
            return
        except ValueError as e:  # read_lines: "{path}:{n}: not valid UTF-8 (...)"
            prefix = f"{path}:{number + 1}: "
            message = str(e)
            raise DatasetError(path, number + 1, message.removeprefix(prefix)) from None
        number += 1
        yield number, line.replace("\ufeff", "")


def zip_member_lines(zip_path: PathLike, member: str) -> Iterator[tuple[int, str]]:
    """Like :func:`numbered_lines` for one member of a zip archive."""
    where = f"{os.fspath(zip_path)}/{member}"
    with zipfile.ZipFile(zip_path) as archive:
        try:
            f = archive.open(member)
        except KeyError:
            raise FileNotFoundError(f"{os.fspath(zip_path)}: the archive has no member {member}") from None
        with f:
            for number, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DatasetError(where, number, f"not valid UTF-8 ({e.reason} at byte {e.start})") from None
                yield number, line.rstrip("\r\n").replace("\ufeff", "")


# ---------------------------------------------------------------------------------------------
# CoNLL-2012 columns: read by semantic roles (PropBank) and coreference (OntoNotes, LitBank)

def conll2012_blocks(path: PathLike) -> Iterator[tuple[str, int, list[tuple[int, list[str]]] | str | None]]:
    """A file in CoNLL-2012 columns (one token per line, columns split on whitespace, blank lines
    between sentences, ``#begin document (NAME); part N`` and ``#end document`` around documents)
    as it is read, in order:

    * ``("begin", line number, the line)`` and ``("end", line number, the line)`` for the
      document marks;
    * ``("sentence", first line number, [(line number, columns), ...])`` for the token lines
      between two blank lines or marks;
    * last, ``("eof", the last line's number, None)``.

    What the columns mean, and which of them must be there, is the caller's: SRL reads argument
    brackets, coreference the last column's mentions."""
    rows: list[tuple[int, list[str]]] = []
    number = 0
    for number, line in numbered_lines(path):
        mark = "begin" if line.startswith("#begin document") else "end" if line.startswith("#end document") else None
        if mark is not None or not line.strip():
            if rows:
                yield "sentence", rows[0][0], rows
                rows = []
            if mark is not None:
                yield mark, number, line
            continue
        rows.append((number, line.split()))
    if rows:
        yield "sentence", rows[0][0], rows
    yield "eof", number, None


# ---------------------------------------------------------------------------------------------
# Tokenizers of raw text

@lru_cache(maxsize=1)
def _moses():
    from sacremoses import MosesTokenizer

    return MosesTokenizer("en")


def tokenize_text(text: str) -> list[str]:
    """Raw English text -> tokens, by the Moses tokenizer (no XML escaping), like the 1B Word
    Benchmark that the published ELMo models were trained on: ``"The man's t-shirt isn't red."``
    -> ``The man 's t-shirt isn 't red .`` (``elmo.model.chars.tokenize`` is ``str.split`` and
    would leave ``"young,"`` in one token)."""
    return _moses().tokenize(text, escape=False)


# Abbreviations after which Punkt's untrained parameters would wrongly end a sentence.
_ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "gen", "col", "lt", "sgt", "capt", "rev",
                  "hon", "gov", "sen", "rep", "vs", "no", "co", "inc", "ltd", "mt", "ft", "u.s", "e.g", "i.e"}
_FALLBACK_TOKEN = re.compile(r"\w+|[^\w\s]")


@lru_cache(maxsize=1)
def _treebank_tokenizers():
    from nltk.tokenize import TreebankWordTokenizer
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    parameters = PunktParameters()
    parameters.abbrev_types = set(_ABBREVIATIONS)
    return PunktSentenceTokenizer(parameters), TreebankWordTokenizer()


def tokenize_with_offsets(text: str) -> list[list[tuple[int, int]]]:
    """Raw text as sentences (NLTK Punkt) of Penn Treebank tokens (NLTK's Treebank tokenizer,
    the tokenization of the CoNLL-2012 data; words and punctuation where it cannot align its
    tokens to the text), each token as its ``(start, end)`` character offsets in ``text``
    (``text[start:end]`` is the token)."""
    sentencer, tokenizer = _treebank_tokenizers()
    out = []
    for s_start, s_end in sentencer.span_tokenize(text):
        try:
            spans = list(tokenizer.span_tokenize(text[s_start:s_end]))
        except ValueError:  # a sentence whose tokens the Treebank tokenizer cannot align to it
            spans = [m.span() for m in _FALLBACK_TOKEN.finditer(text[s_start:s_end])]
        tokens = [(s_start + a, s_start + b) for a, b in spans]
        if tokens:
            out.append(tokens)
    return out


# ---------------------------------------------------------------------------------------------
# SICK's table: read by entailment (its labels) and relatedness (its scores)

SICK_SPLITS = {"train": "TRAIN", "trial": "TRIAL", "test": "TEST"}


def sick_rows(path: PathLike, split: str, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, str], bool]]:
    """``(line number, {column: value}, in split)`` of every row of ``SICK.txt``.

    The file is tab-separated with a header naming the columns, which are read by name:
    ``columns`` and ``SemEval_set`` must be among them. Every row is yielded (so that a caller
    checks them all), with whether its ``SemEval_set`` is ``split``'s (``"train"``, ``"trial"`` or
    ``"test"``). A row with another number of columns than the header, or an unknown
    ``SemEval_set``, raises :class:`DatasetError` naming the line.
    """
    if split not in SICK_SPLITS:
        raise ValueError(f"sick: split must be one of {', '.join(SICK_SPLITS)}, got {split!r}")
    wanted = SICK_SPLITS[split]
    lines = numbered_lines(path)
    first = next(lines, None)
    if first is None or not first[1].strip():
        raise DatasetError(path, 1, "empty file" if first is None else "empty header line")
    header = first[1].split("\t")
    missing = [name for name in (*columns, "SemEval_set") if name not in header]
    if missing:
        raise DatasetError(path, 1, f"the header has no column {', '.join(missing)}")
    index = {name: header.index(name) for name in (*columns, "SemEval_set")}
    for number, line in lines:
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(header):
            raise DatasetError(path, number, f"{len(fields)} columns, but the header has {len(header)}")
        values = {name: fields[i] for name, i in index.items()}
        if values["SemEval_set"] not in SICK_SPLITS.values():
            raise DatasetError(path, number, f"unknown SemEval_set {values['SemEval_set']!r}")
        yield number, values, values["SemEval_set"] == wanted


def sick_sentences(path: PathLike, number: int, fields: dict[str, str]) -> tuple[list[str], list[str]]:
    """The two sentences of a row of :func:`sick_rows` (``sentence_A``, ``sentence_B``), tokenized
    by :func:`tokenize_text`; an empty one raises :class:`DatasetError` naming the line."""
    premise, hypothesis = tokenize_text(fields["sentence_A"]), tokenize_text(fields["sentence_B"])
    for name, tokens in (("sentence_A", premise), ("sentence_B", hypothesis)):
        if not tokens:
            raise DatasetError(path, number, f"empty {name}")
    return premise, hypothesis


__all__ = ["DatasetError", "PathLike", "SICK_SPLITS", "conll2012_blocks", "numbered_lines", "sick_rows", "tokenize_text",
           "tokenize_with_offsets", "zip_member_lines"]
