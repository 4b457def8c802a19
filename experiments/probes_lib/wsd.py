"""Word-sense disambiguation by nearest sense centroid: what each biLM layer knows of meaning.

The paper's Table 5 (after Melamud et al. 2016): every sense-tagged token of SemCor 3.0 is
embedded with the biLM; the representation of a WordNet sense at layer ``l`` is the mean of
its tokens' layer-``l`` vectors. A test instance takes the sense whose centroid is nearest
(cosine) to its own layer-``l`` vector, among the senses of its lemma and part of speech that
SemCor has; a lemma with none of its senses in SemCor falls back to its first WordNet sense.
Scored as the unified evaluation framework's ``Scorer.java`` scores (Raganato et al. 2017).

Tokens here are the data's own, which may be several words (SemCor's ``Fulton_County_Grand_Jury``,
the framework's ``belong to``): the biLM reads their words, and the token's vector is the mean
of its words' vectors.

* :func:`read_semcor`, :func:`read_raganato`: the two data formats, as :class:`WsdSentence`.
* :class:`WordNetSenses`: the sense inventory, read from a WordNet 3.0 folder such as Debian's
  ``wordnet-base``.
* :func:`sense_centroids`, :func:`nearest_sense`: the method.
* :func:`wsd_scores`: precision, recall and F1 as ``Scorer.java`` computes them.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from elmo.tasks.readers import DatasetError, PathLike, numbered_lines

# Part of speech, as WordNet names it, of SemCor's Penn tags and the framework's universal tags.
WORDNET_POS = {"NN": "n", "NNS": "n", "NNP": "n", "NNPS": "n", "VB": "v", "VBD": "v", "VBG": "v", "VBN": "v",
               "VBP": "v", "VBZ": "v", "JJ": "a", "JJR": "a", "JJS": "a", "RB": "r", "RBR": "r", "RBS": "r",
               "NOUN": "n", "VERB": "v", "ADJ": "a", "ADV": "r"}


@dataclass
class WsdToken:
    """One token of a sense-annotated sentence. ``text`` may hold several words (joined by ``_``
    or spaces); ``keys`` are its gold WordNet sense keys (empty when not annotated); ``instance``
    is the evaluation framework's instance id (None elsewhere)."""

    text: str
    lemma: str | None = None
    pos: str | None = None  # n, v, a or r; None for other parts of speech
    keys: tuple[str, ...] = ()
    instance: str | None = None

    @property
    def words(self) -> list[str]:
        return [w for w in re.split(r"[_\s]+", self.text) if w]


@dataclass
class WsdSentence:
    id: str
    tokens: list[WsdToken] = field(default_factory=list)

    def words_and_spans(self) -> tuple[list[str], list[tuple[int, int]]]:
        """The sentence's words for the biLM, and each token's ``[start, end)`` among them."""
        words, spans = [], []
        for token in self.tokens:
            start = len(words)
            words.extend(token.words or [token.text])
            spans.append((start, len(words)))
        return words, spans


# ------------------------------------------------------------------------------------ readers
def read_semcor(path: PathLike) -> list[WsdSentence]:
    """SemCor 3.0 as one token per line, tab-separated: file, sentence number, word, Penn POS,
    lemma, sense key(s) and sense number(s) (several joined by ``;``; ``-`` when untagged); a
    blank line ends a sentence. Errors name the file and line."""
    sentences: list[WsdSentence] = []
    current: WsdSentence | None = None
    for number, line in numbered_lines(path):
        if not line.strip():
            current = None
            continue
        columns = line.split("\t")
        if len(columns) != 7:
            raise DatasetError(path, number, f"{len(columns)} tab-separated columns, expected 7 (file, sentence, "
                                             f"word, POS, lemma, sense keys, sense numbers)")
        source, sentence, word, tag, lemma, keys, _ = columns
        if not word:
            raise DatasetError(path, number, "column 3 (the word) is empty")
        if current is None:
            current = WsdSentence(f"{source}.s{sentence}")
            sentences.append(current)
        sense_keys = tuple(k for k in keys.split(";") if k) if keys != "-" else ()
        for key in sense_keys:
            if "%" not in key:
                raise DatasetError(path, number, f"{key!r} is not a WordNet sense key (lemma%ss_type:...)")
        current.tokens.append(WsdToken(word, lemma if lemma not in ("_", "-") else None, WORDNET_POS.get(tag),
                                       sense_keys))
    if not sentences:
        raise DatasetError(path, 1, "no sentences")
    return sentences


def read_gold_keys(path: PathLike) -> dict[str, tuple[str, ...]]:
    """A key file of the evaluation framework: ``instance_id key [key ...]`` per line."""
    gold: dict[str, tuple[str, ...]] = {}
    for number, line in numbered_lines(path):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) < 2:
            raise DatasetError(path, number, f"expected an instance id and at least one sense key, got {line!r}")
        if parts[0] in gold:
            raise DatasetError(path, number, f"instance {parts[0]} is listed twice")
        gold[parts[0]] = tuple(parts[1:])
    return gold


def read_raganato(data_xml: PathLike, gold_keys: PathLike | None = None) -> list[WsdSentence]:
    """One data set of the unified evaluation framework: its ``*.data.xml`` (``<sentence>`` of
    ``<wf>`` and ``<instance>``), with the gold keys of ``*.gold.key.txt`` (by default the file
    beside it) on its instances. An instance without a gold key, or a key for no instance, is
    an error naming the file."""
    data_xml = Path(data_xml)
    if gold_keys is None:
        gold_keys = data_xml.with_name(data_xml.name.replace(".data.xml", ".gold.key.txt"))
    gold = read_gold_keys(gold_keys)
    try:
        root = ElementTree.parse(data_xml).getroot()
    except ElementTree.ParseError as e:
        line = e.position[0] if e.position else 1
        raise DatasetError(data_xml, line, f"not well-formed XML ({e})") from None
    sentences = []
    seen = set()
    for element in root.iter("sentence"):
        sentence = WsdSentence(element.get("id", f"s{len(sentences)}"))
        for child in element:
            text = (child.text or "").strip()
            if child.tag == "wf":
                sentence.tokens.append(WsdToken(text, child.get("lemma"), WORDNET_POS.get(child.get("pos", ""))))
            elif child.tag == "instance":
                instance = child.get("id")
                if instance not in gold:
                    raise DatasetError(gold_keys, 1, f"no gold key for instance {instance} of {data_xml}")
                seen.add(instance)
                sentence.tokens.append(WsdToken(text, child.get("lemma"), WORDNET_POS.get(child.get("pos", "")),
                                                gold[instance], instance))
        sentences.append(sentence)
    extra = sorted(set(gold) - seen)
    if extra:
        raise DatasetError(gold_keys, 1, f"{len(extra)} key(s) for instances not in {data_xml}, e.g. {extra[0]}")
    if not sentences:
        raise DatasetError(data_xml, 1, "no sentences")
    return sentences


# ------------------------------------------------------------------------------------ WordNet
DEFAULT_WORDNET = "/usr/share/wordnet"  # Debian's wordnet-base (WordNet 3.0)

WORDNET_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
SS_TYPE_NUMBER = {"n": 1, "v": 2, "a": 3, "r": 4, "s": 5}


class WordNetSenses:
    """The WordNet 3.0 sense keys of a lemma and part of speech, in WordNet's sense order (the
    first is the most frequent sense), read from a WordNet ``dict`` folder (its ``index.*`` and
    ``data.*`` files, as Debian's ``wordnet-base`` installs them; no ``index.sense`` needed).

    A sense key is ``lemma%ss_type:lex_filenum:lex_id:head_word:head_id``; for an adjective
    satellite (ss_type 5) the head is the first word of the cluster's head synset, reached by
    the satellite's similar-to (``&``) pointer (WordNet's ``senseidx(5WN)``).
    """

    def __init__(self, root: PathLike = DEFAULT_WORDNET):
        self.root = Path(root)
        missing = [f"{name}.{WORDNET_FILES[pos]}" for name in ("index", "data") for pos in WORDNET_FILES
                   if not (self.root / f"{name}.{WORDNET_FILES[pos]}").is_file()]
        if missing:
            raise FileNotFoundError(f"{self.root}: not a WordNet 3.0 dict folder (missing {', '.join(missing)}); on "
                                    f"Debian or Ubuntu, apt-get install wordnet-base puts one in {DEFAULT_WORDNET}")
        self._index: dict[str, dict[str, list[int]]] = {}
        self._cache: dict[tuple[str, str], list[str]] = {}

    def _offsets(self, lemma: str, pos: str) -> list[int]:
        if pos not in self._index:
            table: dict[str, list[int]] = {}
            with open(self.root / f"index.{WORDNET_FILES[pos]}", encoding="utf-8") as f:
                for line in f:
                    if line.startswith("  "):  # the license header
                        continue
                    fields = line.split()
                    n_synsets, n_pointers = int(fields[2]), int(fields[3])
                    table[fields[0]] = [int(o) for o in fields[6 + n_pointers:6 + n_pointers + n_synsets]]
            self._index[pos] = table
        return self._index[pos].get(lemma, [])

    def _synset(self, pos: str, offset: int) -> tuple[int, str, list[tuple[str, int]], list[tuple[str, int, str]]]:
        """``(lex_filenum, ss_type, [(word, lex_id)], [(pointer, offset, pos)])`` of a synset."""
        with open(self.root / f"data.{WORDNET_FILES[pos]}", "rb") as f:
            f.seek(offset)
            fields = f.readline().decode("utf-8").split()
        lex_filenum, ss_type, n_words = int(fields[1]), fields[2], int(fields[3], 16)
        words = [(re.sub(r"\(\w+\)$", "", fields[4 + 2 * i]).lower(), int(fields[5 + 2 * i], 16))
                 for i in range(n_words)]
        at = 4 + 2 * n_words
        pointers = [(fields[at + 1 + 4 * i], int(fields[at + 2 + 4 * i]), fields[at + 3 + 4 * i])
                    for i in range(int(fields[at]))]
        return lex_filenum, ss_type, words, pointers

    def senses(self, lemma: str, pos: str) -> list[str]:
        """Sense keys of ``lemma`` (``_`` or spaces between words, any case) as ``pos`` (n, v,
        a, r), first sense first; adjective satellites count as adjectives. Empty for a lemma
        WordNet lacks."""
        if pos not in WORDNET_FILES:
            raise ValueError(f"pos: expected one of n, v, a, r, got {pos!r}")
        name = re.sub(r"\s+", "_", lemma.strip().lower())
        if (name, pos) not in self._cache:
            keys = []
            for offset in self._offsets(name, pos):
                lex_filenum, ss_type, words, pointers = self._synset(pos, offset)
                lex_id = next((i for w, i in words if w == name), None)
                if lex_id is None:
                    continue
                head = ":"  # head_word:head_id, empty but for adjective satellites
                if ss_type == "s":
                    head_offset = next((o for symbol, o, p in pointers if symbol == "&"), None)
                    if head_offset is not None:
                        head_word, head_id = self._synset("a", head_offset)[2][0]
                        head = f"{head_word}:{head_id:02d}"
                keys.append(f"{name}%{SS_TYPE_NUMBER[ss_type]}:{lex_filenum:02d}:{lex_id:02d}:{head}")
            self._cache[(name, pos)] = keys
        return self._cache[(name, pos)]

    def first_sense(self, lemma: str, pos: str) -> str | None:
        senses = self.senses(lemma, pos)
        return senses[0] if senses else None


# ------------------------------------------------------------------------------------ method
def token_vectors(layers: np.ndarray, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """Each token's vector at every layer ``(n_tokens, L+1, dim)``: the mean over its words of
    a sentence's ``layers`` ``(L+1, n_words, dim)``."""
    return np.stack([layers[:, start:end].mean(axis=1) for start, end in spans])


def sense_centroids(tagged: Iterable[tuple[Sequence[str], np.ndarray]]) -> tuple[list[str], np.ndarray]:
    """Per sense key, the mean vector of its tokens at every layer.

    ``tagged``: ``(keys, vectors)`` per annotated token, ``vectors`` ``(L+1, dim)``; a token with
    several gold keys counts for each. Returns the keys and their centroids ``(n_keys, L+1, dim)``.
    """
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    for keys, vectors in tagged:
        for key in keys:
            if key in sums:
                sums[key] += vectors
            else:
                sums[key] = vectors.astype(np.float64).copy()
            counts[key] = counts.get(key, 0) + 1
    names = sorted(sums)
    centroids = np.stack([sums[k] / counts[k] for k in names]) if names else np.zeros((0, 0, 0))
    return names, centroids.astype(np.float32)


def nearest_sense(vector: np.ndarray, candidates: Sequence[str], index: dict[str, int],
                  centroids: np.ndarray) -> str | None:
    """The candidate sense whose centroid (``centroids[index[key]]``, ``(dim,)`` at the layer
    in use) has the highest cosine with ``vector`` ``(dim,)``; None when no candidate has one.
    Ties go to the earlier candidate (WordNet's order)."""
    known = [k for k in candidates if k in index]
    if not known:
        return None
    rows = centroids[[index[k] for k in known]]
    cosines = rows @ vector / (np.linalg.norm(rows, axis=1) * np.linalg.norm(vector) + 1e-12)
    return known[int(np.argmax(cosines))]


def annotated_token_vectors(embedder, sentences: Sequence[WsdSentence], chunk: int = 512
                            ) -> Iterator[tuple[WsdToken, np.ndarray]]:
    """``(token, vectors (L+1, dim))`` for every token with gold keys or an instance id, the
    sentences embedded ``chunk`` at a time by ``embedder`` (an :class:`~elmo.inference.embed.Embedder`),
    so memory stays bounded on all of SemCor."""
    for start in range(0, len(sentences), chunk):
        part = sentences[start:start + chunk]
        words_and_spans = [s.words_and_spans() for s in part]
        layers = embedder.embed_sentences([words for words, _ in words_and_spans], layers="all")
        for sentence, (_, spans), array in zip(part, words_and_spans, layers):
            vectors = token_vectors(array, spans)
            for token, vector in zip(sentence.tokens, vectors):
                if token.keys or token.instance:
                    yield token, vector


def disambiguate(instances: Sequence[tuple[WsdToken, np.ndarray]], senses: WordNetSenses, keys: Sequence[str],
                 centroids: np.ndarray, layer: int) -> tuple[dict[str, str], int]:
    """The predicted sense key of each instance at ``layer``: the nearest SemCor centroid among
    its lemma's senses, or WordNet's first sense when SemCor has none of them (no answer when
    WordNet has no sense either). Returns the predictions and how many fell back."""
    index = {key: i for i, key in enumerate(keys)}
    at_layer = centroids[:, layer] if len(keys) else centroids
    predicted, fallbacks = {}, 0
    for token, vectors in instances:
        candidates = senses.senses(token.lemma or token.text, token.pos) if token.pos else []
        choice = nearest_sense(vectors[layer], candidates, index, at_layer) if len(keys) else None
        if choice is None:
            choice = candidates[0] if candidates else None
            fallbacks += 1
        if choice is not None:
            predicted[token.instance] = choice
    return predicted, fallbacks


def first_sense_predictions(instances: Iterable[WsdToken], senses: WordNetSenses) -> dict[str, str]:
    """WordNet's first sense of each instance's lemma and part of speech: the baseline."""
    predicted = {}
    for token in instances:
        first = senses.first_sense(token.lemma or token.text, token.pos) if token.pos else None
        if first is not None:
            predicted[token.instance] = first
    return predicted


def wsd_scores(gold: dict[str, Sequence[str]], predicted: dict[str, Sequence[str] | str]) -> dict:
    """Precision, recall and F1 as the framework's ``Scorer.java`` computes them.

    An answer for an instance that is not in ``gold`` is ignored. An instance with several
    answers scores the fraction of them that are gold keys. Precision divides by the answered
    instances and recall by all gold instances, so an unanswered instance lowers recall only.
    """
    ok = wrong = 0.0
    for instance, answers in predicted.items():
        if instance not in gold:
            continue
        answers = {answers} if isinstance(answers, str) else set(answers)
        if not answers:
            continue
        right = sum(a in gold[instance] for a in answers)
        ok += right / len(answers)
        wrong += (len(answers) - right) / len(answers)
    precision = ok / (ok + wrong) if ok + wrong else 0.0
    recall = ok / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "answered": int(round(ok + wrong)),
            "instances": len(gold)}


__all__ = ["WORDNET_POS", "WordNetSenses", "WsdSentence", "WsdToken", "annotated_token_vectors", "disambiguate",
           "first_sense_predictions", "nearest_sense", "read_gold_keys", "read_raganato", "read_semcor",
           "sense_centroids", "token_vectors", "wsd_scores"]
