"""Raw text -> training shards in the layout of the 1B Word Benchmark, which the published ELMo
models were trained on: one tokenized sentence per line, tokens separated by single spaces.

The input is plain or ``.gz`` UTF-8 text with one paragraph per line and a blank line between
articles (documents). Each paragraph loses its Wikipedia citation markers, is split into
sentences by NLTK's Punkt, trained unsupervised on the first ~2.5 M characters of the input
itself (works for any language, needs no downloaded model), and each sentence is tokenized by the
Moses tokenizer, as the 1B Word Benchmark was. Whole articles go to a held-out split by a
stable hash of their text, so train and held-out never share an article. Everything streams:
memory does not grow with the input, and the same input and options give byte-identical output.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import warnings
from collections.abc import Iterable, Iterator, Sequence
from importlib.metadata import version
from typing import TYPE_CHECKING


from elmo.checks import check_count, check_number
from elmo.jsonio import read_json
from elmo.fileio import (
    atomic_folder,
    atomic_path,
    atomic_write_text,
    check_folder,
    check_input_file,
    read_lines,
    temporary_target,
)
from elmo.progress import progress_bar

# NLTK and sacremoses come with an optional extra: they are imported where they run, so that this
# module (and elmo prepare --help, which takes its defaults from prepare_corpus) loads without them.
if TYPE_CHECKING:
    from nltk.tokenize.punkt import PunktParameters

# Wikipedia's inline citation and maintenance markers are not prose, and the language model
# should not learn to predict them. Removed: numbered notes "[12]" and named note groups
# "[note 3]", "[nb 2]", "[web 1]", each with an optional page reference as Wikipedia's {{rp}}
# renders it ("[18]: 346–347", "[3]: 12, 15", "[22]: vi"); lettered notes "[a]" (but not the
# editorial "[t]he" inside a word, nor "R[x]" in mathematics); and maintenance tags such as
# "[citation needed]", "[who?]", "[dubious – discuss]", "[update]". Brackets in prose ("[sic]",
# "[the]", "[ˈnɛiˌmeːɣə(n)]") stay. Consecutive markers ("[1][2][note 1]") each match.
CITATION_MARKERS = re.compile(r"""
      \[ (?: \d+ | [A-Za-z]{1,6}\.?\ \d+ ) \]
      (?: :\s? (?: p\.\s? )? (?: \d+ (?: [–-]\d+ )? (?: ,\s?\d+ (?: [–-]\d+ )? )* | [ivx]+ (?=\s|$) ) )?
    | (?<![A-Z]) \[ [a-z] \] (?![A-Za-z])
    | \[ (?: (?: [a-z][^\[\]]{0,40}? )? (?: needed | \? | –\ discuss )
           | update | needs\ update | vague | quantify | specify | ambiguous | failed\ verification
           | (?: permanent\ )? dead\ link | verify | need\ quotation\ to\ verify | self-published\ source ) \]
""", re.VERBOSE)

# Text for Punkt to learn the input's abbreviations, collocations and sentence starters from;
# bounded because training holds it all (2.5 M characters: ~4.5 s and ~0.1 GB).
PUNKT_SAMPLE_CHARS = 2_500_000

# An article's split is decided by a hash of its first paragraphs up to this many characters
# (the whole article, for nearly all), so an input without blank lines still streams.
ARTICLE_KEY_CHARS = 1 << 16

SPLITS = ("train", "heldout")
SHARD_NAME = re.compile(r"shard-\d{5}\.txt")
STATS_FILE = "prepare.json"


def remove_citations(text: str) -> str:
    """``text`` without Wikipedia citation and maintenance markers (see ``CITATION_MARKERS``)."""
    return CITATION_MARKERS.sub("", text)


def _check_lang(lang: str) -> None:
    from sacremoses.corpus import NonbreakingPrefixes

    known = sorted(set(NonbreakingPrefixes().available_langs.values()))
    if lang not in known:
        raise ValueError(f"lang: the Moses tokenizer has no rules for {lang!r}; known: {', '.join(known)}")


class ParagraphTokenizer:
    """One paragraph of raw text -> its sentences, each a list of tokens.

    Citation markers are removed, sentences are split by Punkt with ``punkt`` parameters, and
    words by the Moses tokenizer for ``lang`` (no XML escaping: ``&`` stays ``&``).
    """

    def __init__(self, punkt: PunktParameters, lang: str = "en"):
        from nltk.tokenize.punkt import PunktSentenceTokenizer
        from sacremoses import MosesTokenizer

        _check_lang(lang)
        self.lang = lang
        self._sentences = PunktSentenceTokenizer(punkt)
        self._moses = MosesTokenizer(lang)

    @classmethod
    def train(cls, paragraphs: Iterable[str], lang: str = "en",
              sample_chars: int = PUNKT_SAMPLE_CHARS) -> tuple[ParagraphTokenizer, int]:
        """Train Punkt unsupervised on paragraphs (citations removed) until ``sample_chars``
        characters are read; returns the tokenizer and the number of characters it learned from.
        Reads no further than that, so ``paragraphs`` may be an endless stream."""
        from nltk.tokenize.punkt import PunktTrainer

        _check_lang(lang)  # before the slow training
        sample: list[str] = []
        size = 0
        for paragraph in paragraphs:
            if size >= sample_chars:
                break
            paragraph = remove_citations(paragraph).strip()
            if paragraph:
                sample.append(paragraph)
                size += len(paragraph)
        trainer = PunktTrainer()
        trainer.train("\n\n".join(sample), finalize=True)
        return cls(trainer.get_params(), lang), size

    def tokenize(self, paragraph: str) -> list[list[str]]:
        """The sentences of ``paragraph`` as token lists (empty sentences left out)."""
        result = []
        for sentence in self._sentences.tokenize(remove_citations(paragraph)):
            # Moses returns str.split() of its output: no token holds whitespace that a reader
            # splitting the shard line on whitespace would cut.
            tokens = self._moses.tokenize(sentence, escape=False)
            if tokens:
                result.append(tokens)
        return result


class _ShardWriter:
    """Writes lines to ``directory/shard-00000.txt``, ``shard-00001.txt``, ... with
    ``per_shard`` lines each; every shard appears under its name only once complete."""

    def __init__(self, directory: str, per_shard: int):
        self.directory, self.per_shard = directory, per_shard
        self.shards = 0
        self._lines = 0
        self._stack: contextlib.ExitStack | None = None
        self._file = None

    def write(self, line: str) -> None:
        if self._stack is None:
            self._stack = contextlib.ExitStack()
            tmp = self._stack.enter_context(atomic_path(os.path.join(self.directory, f"shard-{self.shards:05d}.txt"), make_parents=True))
            self._file = self._stack.enter_context(open(tmp, "w", encoding="utf-8", newline="\n"))
        self._file.write(line + "\n")
        self._lines += 1
        if self._lines == self.per_shard:
            self._finish(None, None, None)

    def _finish(self, exc_type, exc, tb) -> None:
        # Closes the file, then renames it into place, or on an exception deletes it.
        if self._stack is not None:
            stack, self._stack, self._file = self._stack, None, None
            stack.__exit__(exc_type, exc, tb)
            if exc_type is None:
                self.shards += 1
                self._lines = 0

    def __enter__(self) -> _ShardWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._finish(exc_type, exc, tb)


def _is_heldout(paragraphs: Sequence[str], fraction: float) -> bool:
    """Whether the article starting with ``paragraphs`` goes to held-out: a hash of its text read
    as a number in [0, 1), below ``fraction``. Stable across runs, machines and Python versions."""
    if fraction <= 0.0:
        return False
    digest = hashlib.blake2b("\n".join(paragraphs).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64 < fraction


def _assign_articles(lines: Iterable[str], heldout_fraction: float) -> Iterator[tuple[str, str, bool]]:
    """``(split, paragraph, first of its article)`` for each paragraph of one file's ``lines``.

    Paragraphs wait until their article's split is decided: at the blank line ending it, or once
    ``ARTICLE_KEY_CHARS`` characters are waiting, so memory stays bounded even without blank lines.
    """
    split: str | None = None  # of the current article, once decided
    pending: list[str] = []  # its first paragraphs, while the split is undecided
    pending_chars = 0
    # A None after the last line ends the file's last article.
    for line in itertools.chain(lines, [None]):
        blank = line is None or not line.strip()
        if not blank and split is not None:
            yield split, line, False  # the rest of a very long article
            continue
        if not blank:
            pending.append(line)
            pending_chars += len(line)
        if pending and (blank or pending_chars >= ARTICLE_KEY_CHARS):
            split = "heldout" if _is_heldout(pending, heldout_fraction) else "train"
            for i, paragraph in enumerate(pending):
                yield split, paragraph, i == 0
            pending, pending_chars = [], 0
        if blank:
            split = None


# A wrapped "paragraph" longer than this (text without blank lines) is passed on in pieces, so
# memory stays bounded; the sentence at each cut may be split.
MAX_WRAPPED_PARAGRAPH_CHARS = 100_000


def unwrap(lines: Iterable[str]) -> Iterator[str]:
    """Hard-wrapped text (Project Gutenberg's: a paragraph's lines run on until a blank line, and
    two or more blank lines end a document) in the layout :func:`prepare_corpus` reads: each
    paragraph joined into one line, a blank line between documents."""
    paragraph: list[str] = []
    blanks = chars = 0
    for line in itertools.chain(lines, [None]):
        if line is None or not line.strip():
            if paragraph:
                yield " ".join(paragraph)
                paragraph, chars = [], 0
            blanks += 1
            continue
        if blanks >= 2:
            yield ""
        blanks = 0
        paragraph.append(line.strip())
        chars += len(paragraph[-1])
        if chars >= MAX_WRAPPED_PARAGRAPH_CHARS:  # text without blank lines still streams
            yield " ".join(paragraph)
            paragraph, chars = [], 0


def _paragraphs(paths: Sequence[str], wrapped: bool = False) -> Iterator[str]:
    """The paragraphs of the files, in order (each non-blank line, or each unwrapped paragraph)."""
    for path in paths:
        for line in unwrap(read_lines(path)) if wrapped else read_lines(path):
            if line.strip():
                yield line


def _warn_empty_split(counts: dict, heldout_fraction: float, output_dir: str) -> None:
    """Say when a held-out fraction was asked for but one split got no sentence: articles go
    whole to one split, so a corpus of one article (no blank lines) has no held-out part, and
    ``elmo evaluate --data 'OUT/heldout/*.txt'`` would match no file."""
    articles = sum(counts[split]["articles"] for split in SPLITS)
    for split, other in (("heldout", "train"), ("train", "heldout")):
        if not counts[split]["sentences"]:
            warnings.warn(f"heldout_fraction (--heldout-fraction) {heldout_fraction}: every sentence went to {other} "
                          f"and {os.path.join(output_dir, split)}/ has no shard: articles go whole to one split "
                          f"(by a hash of their text), and the input has {articles} article(s); separate articles "
                          f"with a blank line, or change the fraction", stacklevel=6)


PREPARED_KIND = "prepared corpus"  # the kind in the marker of the folder elmo prepare writes


def _prepared_entry(name: str) -> bool:
    """Whether ``name`` (relative to a prepared corpus folder) is something elmo prepare writes
    there: prepare.json, the split folders and their shards (or a shard's temporary file)."""
    split, _, rest = name.partition("/")
    if not rest:
        return name == STATS_FILE or name in SPLITS
    return split in SPLITS and (SHARD_NAME.fullmatch(rest) is not None
                                or SHARD_NAME.fullmatch(temporary_target(rest) or "") is not None)


def _is_prepared_from_before_markers(folder: str) -> bool:
    """Whether ``folder``, without elmo's marker, is one elmo prepare wrote before it marked its
    folders: a prepare.json of elmo's (its options and tools) and nothing elmo prepare does not write."""
    try:
        stats = read_json(os.path.join(folder, STATS_FILE))
    except (OSError, ValueError):
        return False
    return isinstance(stats, dict) and {"options", "tools", "inputs"} <= stats.keys()


def check_prepared_folder(output_dir: str | os.PathLike, overwrite: bool = False,
                          inputs: Sequence[str | os.PathLike] = ()) -> None:
    """Refuse, before any work, what :func:`prepare_corpus` would: an output that elmo prepare
    did not write (a file, a non-empty folder without its marker, or one holding files it does
    not write: even with ``overwrite``), an existing prepared corpus without ``overwrite``, and
    an output folder holding one of the ``inputs`` (never replaced)."""
    output_dir = os.fspath(output_dir)
    target = os.path.realpath(output_dir)
    for path in inputs:
        if os.path.realpath(path) == target or os.path.realpath(path).startswith(target + os.sep):
            raise ValueError(f"{output_dir}: holds the input {os.fspath(path)}, which elmo never replaces; "
                             "choose another output folder")
    if check_folder(output_dir, PREPARED_KIND, recognise=_is_prepared_from_before_markers, allowed=_prepared_entry,
                    option="--output") and not overwrite:
        raise FileExistsError(f"{output_dir}: already exists; pass --force (overwrite=True) to replace it")


def prepare_corpus(inputs: Sequence[str | os.PathLike], output_dir: str | os.PathLike,
                   heldout_fraction: float = 0.0, sentences_per_shard: int = 100_000, lang: str = "en",
                   min_tokens: int = 1, progress: bool | None = False, wrapped: bool = False,
                   overwrite: bool = False) -> dict:
    """Tokenize raw text files (plain or ``.gz``; one paragraph per line, a blank line between
    articles; with ``wrapped``, hard-wrapped text as :func:`unwrap` reads it) into
    ``output_dir/train/shard-00000.txt``, ... and, with ``heldout_fraction`` > 0,
    ``output_dir/heldout/shard-00000.txt``, ...: one sentence per line, tokens separated by
    single spaces, ``sentences_per_shard`` sentences per shard. Each article goes to held-out with
    probability ``heldout_fraction``, decided by a hash of their text. Sentences with fewer than
    ``min_tokens`` tokens are dropped. ``progress``: progress over input lines, by :mod:`elmo.progress`'s rule (None as True).

    Writes and returns the statistics (``output_dir/prepare.json``): the options, and per split
    the articles, paragraphs, sentences, tokens and shards written and the sentences dropped.
    Raises ValueError naming the file and line of input that is not UTF-8. The folder is written
    beside ``output_dir`` with elmo's marker and renamed into place (complete or not at all); an
    existing one is replaced only with ``overwrite``, and only when elmo prepare wrote it and it
    holds nothing else (:func:`check_prepared_folder`): a mix of two runs would be silently wrong.
    """
    inputs = [os.fspath(p) for p in inputs]
    output_dir = os.fspath(output_dir)
    if not inputs:
        raise ValueError("no input files given")
    if heldout_fraction != 1.0:  # 1: everything held out, the one value at the top that makes sense
        check_number(heldout_fraction, "heldout_fraction", 0.0, below=1.0)
    check_count(sentences_per_shard, "sentences_per_shard")
    check_count(min_tokens, "min_tokens")
    _check_lang(lang)
    for path in inputs:
        check_input_file(path)
    check_prepared_folder(output_dir, overwrite, inputs)
    stats: dict = {}

    def write(folder) -> None:
        stats.update(_prepare_into(inputs, os.fspath(folder), output_dir, heldout_fraction, sentences_per_shard,
                                   lang, min_tokens, progress, wrapped))

    atomic_folder(output_dir, write, overwrite, kind=PREPARED_KIND, allowed=_prepared_entry,
                  recognise=_is_prepared_from_before_markers, option="--output", make_parents=True)
    return stats


def _prepare_into(inputs: list[str], folder: str, output_dir: str, heldout_fraction: float, sentences_per_shard: int,
                  lang: str, min_tokens: int, progress: bool | None, wrapped: bool) -> dict:
    """Write the shards and prepare.json of :func:`prepare_corpus` into ``folder`` (the new
    folder, before it is renamed to ``output_dir``, which messages name); returns the statistics."""
    with contextlib.closing(_paragraphs(inputs, wrapped)) as paragraphs:  # closes the file it stopped in
        try:
            tokenizer, sample_chars = ParagraphTokenizer.train(paragraphs, lang)
        except TimeoutError as e:  # NLTK's guard on its regular expressions
            raise ValueError(f"{', '.join(inputs)}: the sentence splitter's training gave up on the first "
                             f"paragraphs ({str(e).split(';')[0]}); split very long lines into shorter ones"
                             ) from None
    counts = {split: dict(articles=0, paragraphs=0, sentences=0, tokens=0, dropped_sentences=0) for split in SPLITS}

    with contextlib.ExitStack() as stack:
        writers = {split: stack.enter_context(_ShardWriter(os.path.join(folder, split), sentences_per_shard))
                   for split in SPLITS}
        bar = stack.enter_context(progress_bar(progress, unit=" lines", desc="prepare"))

        lines_read = [0]  # a disabled tqdm counts nothing, so keep our own count

        def counted(lines: Iterable[str]) -> Iterator[str]:
            for line in lines:
                bar.update()
                lines_read[0] += 1
                yield line

        def write(split: str, paragraph: str, path: str, line: int) -> None:
            split_counts = counts[split]
            split_counts["paragraphs"] += 1
            try:
                sentences = tokenizer.tokenize(paragraph)
            except TimeoutError as e:  # NLTK's guard on its regular expressions: name where it was
                raise ValueError(f"{path}:{line}: the sentence splitter gave up on this paragraph of "
                                 f"{len(paragraph):,} characters ({str(e).split(';')[0]}); split it into "
                                 "shorter lines") from None
            for tokens in sentences:
                if len(tokens) < min_tokens:
                    split_counts["dropped_sentences"] += 1
                    continue
                writers[split].write(" ".join(tokens))
                split_counts["sentences"] += 1
                split_counts["tokens"] += len(tokens)

        for path in inputs:
            before = lines_read[0]
            lines = counted(read_lines(path))
            for split, paragraph, first in _assign_articles(unwrap(lines) if wrapped else lines, heldout_fraction):
                counts[split]["articles"] += first
                write(split, paragraph, path, lines_read[0] - before)
            if lines_read[0] == before:
                warnings.warn(f"{path}: empty file, nothing taken from it", stacklevel=5)
        if not any(counts[split]["sentences"] for split in SPLITS):
            raise ValueError(f"{', '.join(inputs)}: no sentence to write (empty input, or every sentence shorter "
                             f"than --min-tokens {min_tokens}); nothing was written")
        if heldout_fraction > 0:
            _warn_empty_split(counts, heldout_fraction, output_dir)

    stats = {
        "inputs": inputs,
        "options": {"heldout_fraction": heldout_fraction, "sentences_per_shard": sentences_per_shard,
                    "lang": lang, "min_tokens": min_tokens, "wrapped": wrapped},
        "tools": {"nltk": version("nltk"), "sacremoses": version("sacremoses")},
        "punkt_sample_chars": sample_chars,
        **{split: {**counts[split], "shards": writers[split].shards} for split in SPLITS},
    }
    atomic_write_text(os.path.join(folder, STATS_FILE), json.dumps(stats, indent=2, ensure_ascii=False) + "\n")
    return stats

