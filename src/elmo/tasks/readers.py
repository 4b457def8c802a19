"""Readers for the downstream-task data sets: each returns a list of plain dataclasses.

==========================  ==========================  =====================================
reader                      data set                    record
==========================  ==========================  =====================================
``read_conll_ner``          CoNLL-2003, WNUT-17 (NER)   ``TaggedSentence`` (BIO tags)
``read_conllu_upos``        UD English-EWT (POS)        ``TaggedSentence`` (UPOS tags)
``read_conll2000_chunks``   CoNLL-2000 (chunking)       ``TaggedSentence`` (BIO tags)
``read_sst``                SST-5 (sentiment)           ``LabeledSentence`` ("0".."4")
``read_sick``               SICK (entailment)           ``SentencePair``
``read_snli_devtest``       SNLI dev/test (InferSent)   ``SentencePair``
``read_conll2012_srl``      PropBank (CoNLL-2012 SRL)   ``SrlInstance`` (one per predicate)
``read_ptb_sample_pos``     PTB WSJ sample (NLTK)       ``TaggedSentence`` (Penn POS tags)
``read_conll2012_coref``    CoNLL-2012 coreference      ``CorefDocument`` (sentences, clusters)
``read_litbank``            LitBank by split            ``CorefDocument``
``read_gap``                GAP (pronoun resolution)    ``GapExample`` (a document, no clusters)
``read_squad``              SQuAD v1.1 (JSON)           ``SquadQuestion`` (context, question, answers)
==========================  ==========================  =====================================

``read_dataset(kind, path, split)`` picks one of them by name.

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
  in SST stay), except for SICK, whose sentences are raw text: they are tokenized by the Moses
  tokenizer, as the 1B Word Benchmark that the published ELMo models were trained on was
  (``elmo.model.chars.tokenize`` is ``str.split`` and would leave ``"young,"`` in one token).
* Tagged data (NER, chunking) is returned in IOB2 (BIO): every span starts with ``B-``. Each
  sentence goes through :func:`iob1_to_iob2`, which turns IOB1 into IOB2 and leaves IOB2 as it
  is, so either scheme reads the same way (and a stray ``I-X`` that follows a span of another
  type starts a new span, as conlleval counts it).
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Union

from elmo.fileio import read_lines
from elmo.model.chars import tokenize as split_on_whitespace

PathLike = Union[str, os.PathLike]


@dataclass
class TaggedSentence:
    """A sentence with one tag per token (NER, chunking, POS)."""

    tokens: list[str]
    tags: list[str]


@dataclass
class LabeledSentence:
    """A sentence with one label (sentiment)."""

    tokens: list[str]
    label: str


@dataclass
class SentencePair:
    """A premise, a hypothesis and their relation (entailment)."""

    premise: list[str]
    hypothesis: list[str]
    label: str


@dataclass
class SrlInstance(TaggedSentence):
    """One predicate of a sentence and its arguments as BIO tags over the sentence (``B-ARG0``,
    ``I-ARG0``, ``B-V``, ``B-C-ARG1``, ``B-R-ARG0``, ... and ``O``). ``predicate`` is the index
    of the predicate's first token; ``sentence`` numbers the sentences of the file from 0, so
    that the instances of one sentence can share its biLM layers."""

    predicate: int = 0
    sentence: int = 0


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

def _numbered_lines(path: PathLike) -> Iterator[tuple[int, str]]:
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


def _zip_member_lines(zip_path: PathLike, member: str) -> Iterator[tuple[int, str]]:
    """Like ``_numbered_lines`` for one member of a zip archive."""
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
# Semantic roles: CoNLL-2012 columns

# Fixed columns before the argument columns: document, sentence, token, word, POS, parse bit,
# predicate lemma, roleset; then one bracketed argument column per predicate.
SRL_FIXED_COLUMNS = 8
_SRL_CELL = re.compile(r"(?:\(([^()*\s]+))?\*(\))?")


def srl_brackets_to_bio(cells: Sequence[str], lines: Sequence[int], where: PathLike, column: int) -> list[str]:
    """One predicate's bracketed argument column (``(ARG0*``, ``*``, ``*)``, ``(V*)``) as BIO tags.

    ``lines`` are the cells' line numbers, for errors: a cell that is not one of those forms, an
    argument opened inside another or closed when none is open, and one left open at the end of
    the sentence raise :class:`DatasetError` naming the line and the column (1-based).
    """
    tags, role, opened = [], None, 0
    for cell, number in zip(cells, lines):
        match = _SRL_CELL.fullmatch(cell)
        if match is None:
            raise DatasetError(where, number, f"column {column}: {cell!r} is not an argument bracket "
                                              f"like (ARG0*, *, *) or (V*)")
        label, closes = match.group(1), match.group(2) is not None
        if label is not None:
            if role is not None:
                raise DatasetError(where, number, f"column {column}: ({label} opens inside ({role} "
                                                  f"(opened on line {opened}), which is not closed")
            role, opened = label, number
            tags.append("B-" + label)
        elif role is not None:
            tags.append("I-" + role)
        else:
            tags.append("O")
        if closes:
            if role is None:
                raise DatasetError(where, number, f"column {column}: ')' closes an argument that was never opened")
            role = None
    if role is not None:
        raise DatasetError(where, opened, f"column {column}: ({role} is never closed before the sentence ends")
    return tags


def read_conll2012_srl(path: PathLike) -> list[SrlInstance]:
    """PropBank semantic roles in CoNLL-2012 columns: one :class:`SrlInstance` per predicate.

    Blank lines end sentences and ``#begin document`` / ``#end document`` lines are skipped.
    Every line of a sentence has the same number of columns: the eight fixed ones and one per
    predicate, whose rows are those with a roleset (column 8) other than ``-``. Each predicate's
    column has exactly one ``(V*)`` span; its first token is the instance's ``predicate``.
    Tokens are kept as they are (the ``[WORD]`` placeholders of some EWT sentences included). A
    sentence without predicates gives no instance but still takes a ``sentence`` number.
    """
    instances: list[SrlInstance] = []
    rows: list[list[str]] = []
    numbers: list[int] = []
    n_sentences = 0

    def finish() -> None:
        nonlocal n_sentences
        if not rows:
            return
        n_arguments = len(rows[0]) - SRL_FIXED_COLUMNS
        predicates = [i for i, row in enumerate(rows) if row[7] != "-"]
        if len(predicates) != n_arguments:
            raise DatasetError(path, numbers[0], f"the sentence has {len(predicates)} predicate(s) (rows with a "
                                                 f"roleset in column 8) but {n_arguments} argument column(s)")
        tokens = [row[3] for row in rows]
        for k in range(n_arguments):
            column = SRL_FIXED_COLUMNS + k + 1
            tags = srl_brackets_to_bio([row[SRL_FIXED_COLUMNS + k] for row in rows], numbers, path, column)
            verbs = [i for i, tag in enumerate(tags) if tag == "B-V"]
            if len(verbs) != 1:
                raise DatasetError(path, numbers[0], f"column {column}: the predicate's column has "
                                                     f"{len(verbs)} (V*) spans, expected 1")
            instances.append(SrlInstance(tokens=list(tokens), tags=tags, predicate=verbs[0], sentence=n_sentences))
        n_sentences += 1
        rows.clear()
        numbers.clear()

    for number, line in _numbered_lines(path):
        if line.startswith("#begin document") or line.startswith("#end document"):
            finish()
            continue
        if not line.strip():
            finish()
            continue
        columns = line.split()
        if len(columns) < SRL_FIXED_COLUMNS:
            raise DatasetError(path, number, f"{len(columns)} columns, expected at least {SRL_FIXED_COLUMNS} "
                                             f"(document, sentence, token, word, POS, parse, lemma, roleset)")
        if rows and len(columns) != len(rows[0]):
            raise DatasetError(path, number, f"{len(columns)} columns, but line {numbers[0]} of the same sentence "
                                             f"has {len(rows[0])}")
        rows.append(columns)
        numbers.append(number)
    finish()
    if not instances:
        raise DatasetError(path, 1, "no predicates")
    return instances


def srl_counts(instances: Sequence[SrlInstance]) -> dict:
    """What a SRL file holds: predicates, sentences with at least one, tokens of those sentences,
    and the role labels (without ``B-``/``I-``) with their number of arguments."""
    sentences = {}
    roles: dict[str, int] = {}
    for instance in instances:
        sentences[instance.sentence] = len(instance.tokens)
        for tag in instance.tags:
            if tag.startswith("B-"):
                roles[tag[2:]] = roles.get(tag[2:], 0) + 1
    return {"predicates": len(instances), "sentences": len(sentences), "tokens": sum(sentences.values()),
            "roles": dict(sorted(roles.items(), key=lambda item: (-item[1], item[0])))}


# ---------------------------------------------------------------------------------------------
# Column-tagged files: CoNLL-2003, WNUT-17, CoNLL-2000

_BIO_TAG = re.compile(r"O|[BI]-\S+")


def iob1_to_iob2(tags: Sequence[str]) -> list[str]:
    """The IOB2 (BIO) form of one sentence's tags, in which every span starts with ``B-``.

    An ``I-X`` that starts a span (first tag, after ``O``, or after a tag of another type)
    becomes ``B-X``; everything else is kept. IOB2 input comes back unchanged. Raises
    ``ValueError`` for a tag that is not ``O``, ``B-X`` or ``I-X``.
    """
    result = []
    previous = "O"
    for i, tag in enumerate(tags):
        if not _BIO_TAG.fullmatch(tag):
            raise ValueError(f"tag {i}: {tag!r} is not O, B-TYPE or I-TYPE")
        if tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:]):
            tag = "B-" + tag[2:]
        result.append(tag)
        previous = tag
    return result


def _read_column_tagged(lines: Iterator[tuple[int, str]], where: PathLike) -> list[TaggedSentence]:
    """Token per line, columns separated by tabs (if the line has any) or single spaces; first
    column the token, last the tag; blank lines end sentences; ``-DOCSTART-`` lines are skipped.
    Every token line must have as many columns as the file's first one."""
    sentences: list[TaggedSentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    n_columns = 0
    columns_line = 0

    def finish() -> None:
        if tokens:
            sentences.append(TaggedSentence(tokens=list(tokens), tags=iob1_to_iob2(tags)))
            tokens.clear()
            tags.clear()

    for number, line in lines:
        if not line.strip():
            finish()
            continue
        columns = line.split("\t") if "\t" in line else line.split(" ")
        if columns[0] == "-DOCSTART-":
            finish()
            continue
        if not n_columns:
            if len(columns) < 2:
                raise DatasetError(where, number, f"expected a token and a tag, found {len(columns)} column")
            n_columns, columns_line = len(columns), number
        elif len(columns) != n_columns:
            raise DatasetError(where, number, f"{len(columns)} columns, but line {columns_line} has {n_columns}")
        for i, column in enumerate(columns, start=1):
            if not column:
                raise DatasetError(where, number, f"column {i} is empty")
        tag = columns[-1]
        if not _BIO_TAG.fullmatch(tag):
            raise DatasetError(where, number, f"invalid tag {tag!r} (expected O, B-TYPE or I-TYPE)")
        tokens.append(columns[0])
        tags.append(tag)
    finish()
    if not sentences:
        raise DatasetError(where, 1, "no sentences")
    return sentences


def read_conll_ner(path: PathLike) -> list[TaggedSentence]:
    """CoNLL-2003 (``token POS chunk NER``) or WNUT-17 (``token<TAB>tag``) NER data.

    The first column is the token and the last the tag, returned in IOB2. Blank (or
    whitespace-only) lines separate sentences; ``-DOCSTART-`` lines are skipped.
    """
    return _read_column_tagged(_numbered_lines(path), path)


def read_conll2000_chunks(zip_path: PathLike, split: str) -> list[TaggedSentence]:
    """CoNLL-2000 chunking (``token POS chunk``), split ``"train"`` or ``"test"``, read from NLTK's
    ``conll2000.zip`` (members ``conll2000/train.txt``, ``conll2000/test.txt``) without NLTK.

    Tags are the chunk column, in IOB2. Errors name the member as ``{zip_path}/{member}``.
    """
    if split not in ("train", "test"):
        raise ValueError(f"conll2000: split must be 'train' or 'test', got {split!r}")
    member = f"conll2000/{split}.txt"
    return _read_column_tagged(_zip_member_lines(zip_path, member), f"{os.fspath(zip_path)}/{member}")


# ---------------------------------------------------------------------------------------------
# Coreference: CoNLL-2012 documents

@dataclass
class CorefDocument:
    """A document's sentences and its gold mention clusters. A mention is ``(start, end)``,
    inclusive token positions counted over the whole document; a cluster of one mention is a
    singleton. ``name`` is the ``#begin document`` name with its part."""

    name: str
    sentences: list[list[str]]
    clusters: list[list[tuple[int, int]]]

    @property
    def tokens(self) -> list[str]:
        return [t for sentence in self.sentences for t in sentence]


_COREF_PART = re.compile(r"\((\d+)\)|\((\d+)|(\d+)\)")


def read_conll2012_coref(path: PathLike) -> list[CorefDocument]:
    """CoNLL-2012 coreference documents: ``#begin document (NAME); part N`` ... ``#end
    document``, one token per line (the word in column 4, the coreference column last), blank
    lines between sentences. The coreference column is ``_`` or ``-`` for no mention, or
    ``|``-joined parts: ``(7)`` a one-token mention, ``(7`` a mention opening and ``7)`` one
    closing (the innermost open mention of that cluster), so nested and multi-token mentions
    of one cluster both work. Anything malformed (a part that is not one of those, a mention
    closed that was never opened or left open at the end of the document, a token outside a
    document, a line with fewer than 4 columns) raises :class:`DatasetError` with the line."""
    documents: list[CorefDocument] = []
    current: CorefDocument | None = None
    sentence: list[str] = []
    open_mentions: dict[int, list[tuple[int, int]]] = {}  # cluster -> [(start, line)] stack
    mentions: dict[int, list[tuple[int, int]]] = {}
    position = 0

    def end_sentence() -> None:
        if current is not None and sentence:
            current.sentences.append(list(sentence))
            sentence.clear()

    for number, line in _numbered_lines(path):
        if line.startswith("#begin document"):
            if current is not None:
                raise DatasetError(path, number, f"a document begins inside {current.name}, which has no #end document")
            match = re.match(r"#begin document \(?([^)]*)\)?;?\s*(?:part\s+(\d+))?", line)
            name = match.group(1) + (f"/part-{int(match.group(2))}" if match.group(2) else "")
            current, position, open_mentions, mentions = CorefDocument(name, [], []), 0, {}, {}
            continue
        if line.startswith("#end document"):
            if current is None:
                raise DatasetError(path, number, "#end document without #begin document")
            end_sentence()
            for cluster, stack in open_mentions.items():
                if stack:
                    raise DatasetError(path, stack[-1][1], f"a mention of cluster {cluster} opens here and is never "
                                                           f"closed before the end of {current.name}")
            current.clusters = [sorted(spans) for _, spans in sorted(mentions.items())]
            documents.append(current)
            current = None
            continue
        if not line.strip():
            end_sentence()
            continue
        if current is None:
            raise DatasetError(path, number, "a token line outside any #begin document ... #end document")
        columns = line.split()
        if len(columns) < 4:
            raise DatasetError(path, number, f"{len(columns)} columns, expected at least 4 (document, part, token "
                                             f"number, word, ..., coreference)")
        cell = columns[-1]
        if cell not in ("_", "-"):
            for part in cell.split("|"):
                match = _COREF_PART.fullmatch(part)
                if match is None:
                    raise DatasetError(path, number, f"coreference column: {part!r} is not (N), (N or N)")
                single, opening, closing = match.groups()
                if single is not None:
                    mentions.setdefault(int(single), []).append((position, position))
                elif opening is not None:
                    open_mentions.setdefault(int(opening), []).append((position, number))
                else:
                    stack = open_mentions.get(int(closing))
                    if not stack:
                        raise DatasetError(path, number, f"coreference column: cluster {closing} closes a mention "
                                                         f"that was never opened")
                    start, _ = stack.pop()
                    mentions.setdefault(int(closing), []).append((start, position))
        sentence.append(columns[3])
        position += 1
    if current is not None:
        raise DatasetError(path, number, f"{current.name} has no #end document")
    if not documents:
        raise DatasetError(path, 1, "no documents")
    return documents


def litbank_split(names: Sequence[str]) -> dict[str, list[str]]:
    """A fixed train/dev/test split of LitBank's files: sorted by name, the first 80% train, the
    next 10% dev, the last 10% test (80/10/10 of its 100 files). The same names always give the
    same split, whatever order they come in."""
    ordered = sorted(names)
    n_train, n_dev = round(0.8 * len(ordered)), round(0.1 * len(ordered))
    return {"train": ordered[:n_train], "dev": ordered[n_train:n_train + n_dev],
            "test": ordered[n_train + n_dev:]}


def read_litbank(folder: PathLike, split: str) -> list[CorefDocument]:
    """The documents of one split (``train``, ``dev`` or ``test``, by :func:`litbank_split`) of
    a folder of LitBank's ``*.conll`` files."""
    if split not in ("train", "dev", "test"):
        raise ValueError(f"litbank: split must be 'train', 'dev' or 'test', got {split!r}")
    if not os.path.isdir(folder):
        raise ValueError(f"litbank: {folder}: expected the folder of LitBank's *.conll files "
                         f"(for one file, use kind conll2012-coref)")
    names = [n for n in os.listdir(folder) if n.endswith(".conll")]
    if not names:
        raise FileNotFoundError(f"litbank: {folder}: no *.conll files")
    return [d for name in litbank_split(names)[split] for d in read_conll2012_coref(os.path.join(folder, name))]


@dataclass
class GapExample(CorefDocument):
    """One GAP example: its text as a document (no gold clusters), the token spans ``(start,
    end)`` (inclusive) of the pronoun and of the names A and B, whether each name corefers with
    the pronoun, and the pronoun's gender (``"M"`` or ``"F"``)."""

    pronoun: tuple[int, int] = (0, 0)
    a: tuple[int, int] = (0, 0)
    b: tuple[int, int] = (0, 0)
    a_coref: bool = False
    b_coref: bool = False
    gender: str = "M"


GAP_COLUMNS = ("ID", "Text", "Pronoun", "Pronoun-offset", "A", "A-offset", "A-coref", "B", "B-offset", "B-coref")
GAP_GENDERS = {"he": "M", "him": "M", "his": "M", "himself": "M", "she": "F", "her": "F", "hers": "F",
               "herself": "F"}
# Abbreviations after which Punkt's untrained parameters would wrongly end a sentence.
_GAP_ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "gen", "col", "lt", "sgt", "capt", "rev",
                      "hon", "gov", "sen", "rep", "vs", "no", "co", "inc", "ltd", "mt", "ft", "u.s", "e.g", "i.e"}


_FALLBACK_TOKEN = re.compile(r"\w+|[^\w\s]")


@lru_cache(maxsize=1)
def _gap_tokenizers():
    from nltk.tokenize import TreebankWordTokenizer
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    parameters = PunktParameters()
    parameters.abbrev_types = set(_GAP_ABBREVIATIONS)
    return PunktSentenceTokenizer(parameters), TreebankWordTokenizer()


def tokenize_with_offsets(text: str) -> list[list[tuple[int, int]]]:
    """Raw text as sentences (NLTK Punkt) of Penn Treebank tokens (NLTK's Treebank tokenizer,
    the tokenization of the CoNLL-2012 data; words and punctuation where it cannot align its
    tokens to the text), each token as its ``(start, end)`` character offsets in ``text``
    (``text[start:end]`` is the token)."""
    sentencer, tokenizer = _gap_tokenizers()
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


def read_gap(path: PathLike) -> list[GapExample]:
    """GAP's tab-separated file (header ``ID, Text, Pronoun, Pronoun-offset, A, A-offset,
    A-coref, B, B-offset, B-coref, URL``): each text tokenized by :func:`tokenize_with_offsets`,
    and the pronoun and names located by their character offsets. A name is the tokens that
    overlap its characters. A missing column, an offset that is not a number or does not point
    at the text it names, or a coref value other than TRUE/FALSE is an error naming the line and
    column."""
    lines = _numbered_lines(path)
    try:
        _, header = next(lines)
    except StopIteration:
        raise DatasetError(path, 1, "empty file; expected GAP's header") from None
    names = header.rstrip("\n").split("\t")
    missing = [c for c in GAP_COLUMNS if c not in names]
    if missing:
        raise DatasetError(path, 1, f"header lacks column(s) {', '.join(missing)}")
    column = {c: names.index(c) for c in GAP_COLUMNS}
    examples = []
    for number, line in lines:
        if not line.strip():
            continue
        cells = line.rstrip("\n").split("\t")
        if len(cells) < len(names):
            raise DatasetError(path, number, f"{len(cells)} columns, expected {len(names)}")
        cell = {c: cells[i] for c, i in column.items()}
        text = cell["Text"]
        sentences = tokenize_with_offsets(text)
        flat = [t for sentence in sentences for t in sentence]

        def locate(name: str) -> tuple[int, int]:
            try:
                offset = int(cell[f"{name}-offset"])
            except ValueError:
                raise DatasetError(path, number, f"{name}-offset: {cell[name + '-offset']!r} is not a number") from None
            surface = cell[name]
            if text[offset:offset + len(surface)] != surface:
                raise DatasetError(path, number, f"{name}-offset: {offset} does not point at {surface!r} in Text")
            covered = [i for i, (a, b) in enumerate(flat) if a < offset + len(surface) and b > offset]
            if not covered:
                raise DatasetError(path, number, f"{name}: no token covers {surface!r} at {offset}")
            return covered[0], covered[-1]

        def coref(name: str) -> bool:
            value = cell[f"{name}-coref"].strip().upper()
            if value not in ("TRUE", "FALSE"):
                raise DatasetError(path, number, f"{name}-coref: expected TRUE or FALSE, got {cell[name + '-coref']!r}")
            return value == "TRUE"

        pronoun = cell["Pronoun"].strip().lower()
        if pronoun not in GAP_GENDERS:
            raise DatasetError(path, number, f"Pronoun: {cell['Pronoun']!r} is not a gendered third-person pronoun")
        examples.append(GapExample(
            name=cell["ID"], sentences=[[text[a:b] for a, b in sentence] for sentence in sentences], clusters=[],
            pronoun=locate("Pronoun"), a=locate("A"), b=locate("B"), a_coref=coref("A"), b_coref=coref("B"),
            gender=GAP_GENDERS[pronoun]))
    if not examples:
        raise DatasetError(path, 1, "no examples")
    return examples


# ---------------------------------------------------------------------------------------------
# Reading comprehension: SQuAD v1.1

@dataclass
class SquadContext:
    """A paragraph, tokenized once: ``tokens[i]`` is ``text[offsets[i][0]:offsets[i][1]]``."""

    text: str
    tokens: list[str]
    offsets: list[tuple[int, int]]

    def answer_text(self, start: int, end: int) -> str:
        """The exact context substring of the token span ``start..end`` (inclusive)."""
        return self.text[self.offsets[start][0]:self.offsets[end][1]]

    def token_span(self, char_start: int, char_end: int) -> tuple[int, int] | None:
        """The tokens that overlap the characters ``char_start..char_end`` (exclusive end), or None."""
        covered = [i for i, (a, b) in enumerate(self.offsets) if a < char_end and b > char_start]
        return (covered[0], covered[-1]) if covered else None


@dataclass
class SquadQuestion:
    """One question on a context (the context object is shared by its ~5 questions).

    ``answers``: the gold ``(text, char_start)`` pairs, every one kept for evaluation; ``span``:
    the token span ``(start, end)`` (inclusive) training uses, from the first answer, or None when
    it maps to no tokens; ``mapping``: how that span was found: ``"offset"`` (the text is at its
    ``answer_start``), ``"searched"`` (it is not, but occurs once elsewhere in the context),
    ``"ambiguous"`` (it is not at its offset and occurs more than once: the first occurrence was
    chosen), or ``"unmapped"`` (it is nowhere in the context)."""

    id: str
    context: SquadContext
    question: list[str]
    answers: list[tuple[str, int]]
    span: tuple[int, int] | None
    mapping: str = "offset"

    @property
    def tokens(self) -> list[str]:
        return self.question


# Split tokens further at these characters (kept as tokens of their own), as BiDAF's SQuAD
# tokenizer does: answers often start or end inside "1990-91", "Paris/Lyon" or "45°".
_SQUAD_SPLIT = re.compile("[-\u2010-\u2015/~\u2212\u00b0\u2018\u2019\u201c\u201d]")


def tokenize_squad(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """Tokens of a paragraph with their character offsets: :func:`tokenize_with_offsets`'s
    sentences and Penn Treebank tokens, flattened, each token further split at hyphens, dashes,
    slashes, tildes, degree signs and curly quotes."""
    offsets: list[tuple[int, int]] = []
    for sentence in tokenize_with_offsets(text):
        for a, b in sentence:
            start = a
            for match in _SQUAD_SPLIT.finditer(text, a, b):
                if match.start() > start:
                    offsets.append((start, match.start()))
                offsets.append(match.span())
                start = match.end()
            if start < b:
                offsets.append((start, b))
    return [text[a:b] for a, b in offsets], offsets


def read_squad(path: PathLike) -> list[SquadQuestion]:
    """Every question of a SQuAD v1.1 JSON file (``{"data": [{"title", "paragraphs": [{"context",
    "qas": [{"id", "question", "answers": [{"text", "answer_start"}]}]}]}]}``, plain or ``.gz``).
    Each context is tokenized once (:func:`tokenize_squad`), keeping character offsets, so that a
    predicted token span maps back to the exact context substring. Invalid JSON is an error with
    its line and column; a missing or mistyped field is one naming the field, e.g.
    ``data[3].paragraphs[0].qas[2].answers[0].answer_start``."""
    import json

    from elmo.fileio import open_text

    with open_text(path) as f:
        raw = f.read()
    try:
        document = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise DatasetError(path, raw[:e.start].count(b"\n") + 1, f"not valid UTF-8 ({e.reason})") from None
    except json.JSONDecodeError as e:
        raise DatasetError(path, e.lineno, f"not valid JSON: {e.msg} (column {e.colno})") from None

    def field(value, name: str, kind: type, where: str):
        if not isinstance(value, dict) or name not in value:
            raise DatasetError(path, None, f"{where}.{name}: missing")
        if not isinstance(value[name], kind) or (kind is int and isinstance(value[name], bool)):
            raise DatasetError(path, None, f"{where}.{name}: expected {kind.__name__}, got {type(value[name]).__name__}")
        return value[name]

    questions: list[SquadQuestion] = []
    for a, article in enumerate(field(document, "data", list, "(top level)")):
        for p, paragraph in enumerate(field(article, "paragraphs", list, f"data[{a}]")):
            where = f"data[{a}].paragraphs[{p}]"
            text = field(paragraph, "context", str, where)
            tokens, offsets = tokenize_squad(text)
            context = SquadContext(text, tokens, offsets)
            for q, qa in enumerate(field(paragraph, "qas", list, where)):
                at = f"{where}.qas[{q}]"
                answers = []
                for n, answer in enumerate(field(qa, "answers", list, at)):
                    answers.append((field(answer, "text", str, f"{at}.answers[{n}]"),
                                    field(answer, "answer_start", int, f"{at}.answers[{n}]")))
                question_tokens, _ = tokenize_squad(field(qa, "question", str, at))
                span, mapping = None, "unmapped"
                if answers:
                    span, mapping = _answer_span(context, *answers[0])
                questions.append(SquadQuestion(field(qa, "id", str, at), context, question_tokens, answers, span,
                                               mapping))
    if not questions:
        raise DatasetError(path, None, "no questions")
    return questions


def _answer_span(context: SquadContext, text: str, start: int) -> tuple[tuple[int, int] | None, str]:
    """The token span of an answer and how it was found (see :class:`SquadQuestion`)."""
    if text and context.text[start:start + len(text)] == text:
        return context.token_span(start, start + len(text)), "offset"
    found = [m.start() for m in re.finditer(re.escape(text), context.text)] if text else []
    if not found:
        return None, "unmapped"
    return context.token_span(found[0], found[0] + len(text)), "searched" if len(found) == 1 else "ambiguous"


def answer_mapping_counts(questions: Sequence[SquadQuestion]) -> dict[str, int]:
    """How many questions' training spans were found each way (``offset``, ``searched``,
    ``ambiguous``, ``unmapped``), and how many answers occur more than once in their context
    although the text is at its offset (``repeated``: for the reconstructed training file, whose
    offsets are each text's first occurrence, those are where the span may be the wrong one)."""
    counts = {"offset": 0, "searched": 0, "ambiguous": 0, "unmapped": 0, "repeated": 0}
    for q in questions:
        counts[q.mapping] += 1
        if q.mapping == "offset" and q.answers and q.context.text.count(q.answers[0][0]) > 1:
            counts["repeated"] += 1
    return counts


# ---------------------------------------------------------------------------------------------
# Penn Treebank POS: NLTK's 10% sample of the WSJ

# NLTK's sample has files wsj_0001 .. wsj_0199 (3,914 sentences). A fixed split by file, at the
# file boundaries nearest 80% and 90% of the sentences: wsj_0001-0142 for training (3,167
# sentences), wsj_0143-0172 for development (358), wsj_0173-0199 for test (389).
PTB_SAMPLE_SPLITS = {"train": range(1, 143), "dev": range(143, 173), "test": range(173, 200)}
_PREterminal = re.compile(r"\(([^\s()]+) ([^\s()]+)\)")


def _ptb_sentences(lines: Iterator[tuple[int, str]], where: str) -> Iterator[tuple[int, list[tuple[str, str]]]]:
    """``(first line, [(word, tag)])`` of each top-level tree of a bracketed ``.mrg`` file."""
    depth, start, text = 0, 0, []
    for number, line in lines:
        if not line.strip():
            continue
        if depth == 0:
            start, text = number, []
        text.append(line)
        depth += line.count("(") - line.count(")")
        if depth < 0:
            raise DatasetError(where, number, "')' closes more brackets than were opened")
        if depth == 0:
            yield start, _PREterminal.findall(" ".join(text))
    if depth:
        raise DatasetError(where, start, "a tree is not closed before the end of the file")


def read_ptb_sample_pos(zip_path: PathLike, split: str) -> list[TaggedSentence]:
    """Part-of-speech tags of NLTK's Penn Treebank sample (``treebank.zip``, the WSJ files'
    ``combined/*.mrg`` trees), split ``"train"``, ``"dev"`` or ``"test"`` by file
    (:data:`PTB_SAMPLE_SPLITS`). Empty elements (tag ``-NONE-``: traces, null complementisers)
    are not words and are left out. Errors name ``{zip_path}/{member}`` and the line."""
    if split not in PTB_SAMPLE_SPLITS:
        raise ValueError(f"ptb-sample: split must be one of {', '.join(PTB_SAMPLE_SPLITS)}, got {split!r}")
    sentences = []
    for number in PTB_SAMPLE_SPLITS[split]:
        member = f"treebank/combined/wsj_{number:04d}.mrg"
        where = f"{os.fspath(zip_path)}/{member}"
        for line, leaves in _ptb_sentences(_zip_member_lines(zip_path, member), where):
            words = [(word, tag) for tag, word in leaves if tag != "-NONE-"]
            if not words:
                raise DatasetError(where, line, "a tree without words")
            sentences.append(TaggedSentence(tokens=[w for w, _ in words], tags=[t for _, t in words]))
    return sentences


# ---------------------------------------------------------------------------------------------
# CoNLL-U: UD English-EWT

UPOS_TAGS = frozenset({
    "ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN",
    "PUNCT", "SCONJ", "SYM", "VERB", "X",
})


def read_conllu_upos(path: PathLike) -> list[TaggedSentence]:
    """Words and UPOS tags of a CoNLL-U file (plain or ``.gz``).

    Multiword-token ranges (``3-4``) and empty nodes (``3.1``) are skipped, so the tokens are
    the syntactic words. Lines are split on tabs only, as the CoNLL-U spec says (UD v2 allows
    spaces inside FORM); the ID column is parsed by the ``conllu`` library. Word IDs must run
    1, 2, 3, ... in each sentence, and UPOS must be one of the 17 universal tags.
    """
    from conllu.exceptions import ParseException
    from conllu.parser import parse_id_value

    sentences: list[TaggedSentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    for number, line in _numbered_lines(path):
        if not line.strip():
            if tokens:
                sentences.append(TaggedSentence(tokens=tokens, tags=tags))
                tokens, tags = [], []
            continue
        if line.startswith("#"):
            continue
        columns = line.split("\t")
        if len(columns) != 10:
            raise DatasetError(path, number, f"expected 10 tab-separated columns, found {len(columns)}")
        try:
            token_id = parse_id_value(columns[0])
        except ParseException:
            token_id = None
        if token_id is None:
            raise DatasetError(path, number, f"invalid ID {columns[0]!r}")
        if isinstance(token_id, tuple):  # (3, "-", 4): multiword token; (3, ".", 1): empty node
            continue
        if token_id != len(tokens) + 1:
            raise DatasetError(path, number, f"word ID {token_id}, expected {len(tokens) + 1}")
        form, upos = columns[1], columns[3]
        if not form:
            raise DatasetError(path, number, "empty FORM")
        if upos not in UPOS_TAGS:
            raise DatasetError(path, number, f"UPOS {upos!r} is not a universal POS tag")
        tokens.append(form)
        tags.append(upos)
    if tokens:
        sentences.append(TaggedSentence(tokens=tokens, tags=tags))
    if not sentences:
        raise DatasetError(path, 1, "no sentences")
    return sentences


# ---------------------------------------------------------------------------------------------
# PTB-format trees: SST-5

SST_LABELS = ("0", "1", "2", "3", "4")
_TREE_ATOM = re.compile(r"[^ \t()]+")  # a label or a word; only ASCII space and tab separate


@dataclass
class _Node:
    label: str
    column: int
    words: int = 0
    subtrees: int = 0


def parse_sst_tree(text: str) -> tuple[str, list[str]]:
    """The root label and the leaves (words) of one SST tree such as ``(3 (2 It) (4 works))``.

    Every node is ``(LABEL WORD)`` or ``(LABEL SUBTREE...)`` with LABEL one of ``0``..``4``.
    Only spaces and tabs separate atoms, so a word may hold other whitespace (SST's
    ``8<NBSP>1\\/2`` is one word). Raises ``ValueError`` saying what is wrong and at which
    (1-based) column.
    """
    stack: list[_Node] = []
    leaves: list[str] = []
    root: str | None = None
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char in " \t":
            i += 1
            continue
        if root is not None and char != ")":
            raise ValueError(f"column {i + 1}: text after the end of the tree")
        if char == "(":
            j = i + 1
            while j < n and text[j] in " \t":
                j += 1
            label = _TREE_ATOM.match(text, j)
            if label is None:
                raise ValueError(f"column {i + 1}: node without a label")
            if label.group() not in SST_LABELS:
                raise ValueError(f"column {j + 1}: label {label.group()!r} is not one of 0-4")
            if stack:
                parent = stack[-1]
                if parent.words:
                    raise ValueError(f"column {i + 1}: a node holds both a word and subtrees")
                parent.subtrees += 1
            stack.append(_Node(label.group(), i + 1))
            i = label.end()
        elif char == ")":
            if not stack:
                raise ValueError(f"column {i + 1}: unbalanced parentheses: ')' closes nothing")
            node = stack.pop()
            if not node.words and not node.subtrees:
                raise ValueError(f"column {node.column}: node with label {node.label} is empty")
            if not stack:
                root = node.label
            i += 1
        else:
            word = _TREE_ATOM.match(text, i)
            assert word is not None
            if not stack:
                raise ValueError(f"column {i + 1}: expected '(', found {word.group()!r}")
            node = stack[-1]
            if node.words:
                raise ValueError(f"column {i + 1}: a node holds more than one word")
            if node.subtrees:
                raise ValueError(f"column {i + 1}: a node holds both a word and subtrees")
            node.words = 1
            leaves.append(word.group())
            i = word.end()
    if stack:
        raise ValueError(f"column {n + 1}: unbalanced parentheses: {len(stack)} node(s) not closed")
    if root is None:
        raise ValueError("no tree")
    return root, leaves


def read_sst(path: PathLike) -> list[LabeledSentence]:
    """SST-5 trees, one per line: tokens are the leaves, the label the root's ("0".."4").

    Blank lines are skipped.
    """
    sentences: list[LabeledSentence] = []
    for number, line in _numbered_lines(path):
        if not line.strip():
            continue
        try:
            label, tokens = parse_sst_tree(line)
        except ValueError as e:
            raise DatasetError(path, number, str(e)) from None
        sentences.append(LabeledSentence(tokens=tokens, label=label))
    if not sentences:
        raise DatasetError(path, 1, "no trees")
    return sentences


# ---------------------------------------------------------------------------------------------
# Sentence pairs: SICK, SNLI

SICK_LABELS = ("ENTAILMENT", "NEUTRAL", "CONTRADICTION")
SICK_SPLITS = {"train": "TRAIN", "trial": "TRIAL", "test": "TEST"}
_SICK_COLUMNS = ("sentence_A", "sentence_B", "entailment_label", "SemEval_set")


@lru_cache(maxsize=1)
def _moses():
    from sacremoses import MosesTokenizer

    return MosesTokenizer("en")


def _tokenize_text(text: str) -> list[str]:
    """Raw English text -> tokens, by the Moses tokenizer (no XML escaping), like the 1B Word
    Benchmark: ``"The man's t-shirt isn't red."`` -> ``The man 's t-shirt isn 't red .``"""
    return _moses().tokenize(text, escape=False)


def read_sick(path: PathLike, split: str) -> list[SentencePair]:
    """The pairs of SICK's ``split`` (``"train"``, ``"trial"`` or ``"test"``, by ``SemEval_set``).

    ``SICK.txt`` is tab-separated with a header naming the columns (read by name);
    premise = ``sentence_A``, hypothesis = ``sentence_B`` (raw text, Moses-tokenized), label =
    ``entailment_label``, lower-cased like SNLI's (``entailment``, ``neutral``, ``contradiction``).
    Every row is checked, not only those of ``split``.
    """
    if split not in SICK_SPLITS:
        raise ValueError(f"sick: split must be one of {', '.join(SICK_SPLITS)}, got {split!r}")
    wanted = SICK_SPLITS[split]
    lines = _numbered_lines(path)
    first = next(lines, None)
    if first is None or not first[1].strip():
        raise DatasetError(path, 1, "empty file" if first is None else "empty header line")
    header = first[1].split("\t")
    missing = [name for name in _SICK_COLUMNS if name not in header]
    if missing:
        raise DatasetError(path, 1, f"the header has no column {', '.join(missing)}")
    a, b, lab, semeval = (header.index(name) for name in _SICK_COLUMNS)
    pairs: list[SentencePair] = []
    for number, line in lines:
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(header):
            raise DatasetError(path, number, f"{len(fields)} columns, but the header has {len(header)}")
        if fields[semeval] not in SICK_SPLITS.values():
            raise DatasetError(path, number, f"unknown SemEval_set {fields[semeval]!r}")
        if fields[lab] not in SICK_LABELS:
            raise DatasetError(path, number, f"unknown entailment_label {fields[lab]!r}")
        if fields[semeval] != wanted:
            continue
        premise, hypothesis = _tokenize_text(fields[a]), _tokenize_text(fields[b])
        for name, tokens in (("sentence_A", premise), ("sentence_B", hypothesis)):
            if not tokens:
                raise DatasetError(path, number, f"empty {name}")
        # SNLI's lower-case spelling, so that a SICK model can be scored on SNLI.
        pairs.append(SentencePair(premise=premise, hypothesis=hypothesis, label=fields[lab].lower()))
    if not pairs:
        raise DatasetError(path, 1, f"no pairs with SemEval_set {wanted}")
    return pairs


SNLI_LABELS = ("entailment", "neutral", "contradiction")
SNLI_SPLITS = ("train", "dev", "test")


def read_snli_devtest(directory: PathLike, split: str) -> list[SentencePair]:
    """SNLI pairs in the InferSent / e-SNLI layout: ``s1.{split}`` (premises), ``s2.{split}``
    (hypotheses), ``labels.{split}`` (``entailment``/``neutral``/``contradiction``), one pair per
    line. Sentences are already tokenized (split on whitespace). The three files must have the
    same number of lines.
    """
    if split not in SNLI_SPLITS:
        raise ValueError(f"snli: split must be one of {', '.join(SNLI_SPLITS)}, got {split!r}")
    paths = [os.path.join(os.fspath(directory), f"{name}.{split}") for name in ("s1", "s2", "labels")]
    premises, hypotheses, labels = ([line for _, line in _numbered_lines(p)] for p in paths)
    counts = [len(premises), len(hypotheses), len(labels)]
    if len(set(counts)) > 1:
        longest = max(range(3), key=counts.__getitem__)
        summary = ", ".join(f"{p} has {c}" for p, c in zip(paths, counts))
        raise DatasetError(paths[longest], min(counts) + 1,
                           f"line counts differ ({summary}); they must have one line per pair")
    if not counts[0]:
        raise DatasetError(paths[0], 1, "empty file")
    pairs: list[SentencePair] = []
    for i, (s1, s2, label) in enumerate(zip(premises, hypotheses, labels)):
        label = label.strip()
        if label not in SNLI_LABELS:
            raise DatasetError(paths[2], i + 1, f"unknown label {label!r}")
        premise, hypothesis = split_on_whitespace(s1), split_on_whitespace(s2)
        for path, tokens in ((paths[0], premise), (paths[1], hypothesis)):
            if not tokens:
                raise DatasetError(path, i + 1, "empty sentence")
        pairs.append(SentencePair(premise=premise, hypothesis=hypothesis, label=label))
    return pairs


# ---------------------------------------------------------------------------------------------
# By name

_FILE_READERS: dict[str, Callable[[PathLike], list]] = {
    "conll2003": read_conll_ner,
    "wnut17": read_conll_ner,
    "ud-ewt": read_conllu_upos,
    "sst5": read_sst,
    "conll2012-srl": read_conll2012_srl,
    "conll2012-coref": read_conll2012_coref,
    "gap": read_gap,
    "squad": read_squad,
}
_SPLIT_READERS: dict[str, Callable[[PathLike, str], list]] = {
    "conll2000": read_conll2000_chunks,
    "ptb-sample": read_ptb_sample_pos,
    "sick": read_sick,
    "snli": read_snli_devtest,
    "litbank": read_litbank,
}
DATASET_KINDS = tuple(_FILE_READERS) + tuple(_SPLIT_READERS)


def read_dataset(kind: str, path: PathLike, split: str | None = None
                 ) -> list[TaggedSentence] | list[LabeledSentence] | list[SentencePair]:
    """Read a data set by kind.

    ``conll2003``, ``wnut17``, ``ud-ewt``, ``sst5`` and ``conll2012-srl``: ``path`` is the split's file and
    ``split`` must be None. ``conll2000`` (``path`` = ``conll2000.zip``; train/test), ``sick``
    (``path`` = ``SICK.txt``; train/trial/test) and ``snli`` (``path`` = the directory;
    dev/test): ``split`` is required.
    """
    if kind in _FILE_READERS:
        if split is not None:
            raise ValueError(f"{kind}: pass the split's file as path and no split (got split={split!r})")
        return _FILE_READERS[kind](path)
    if kind in _SPLIT_READERS:
        if split is None:
            raise ValueError(f"{kind}: a split is required")
        return _SPLIT_READERS[kind](path, split)
    raise ValueError(f"unknown dataset kind {kind!r}; known: {', '.join(DATASET_KINDS)}")
