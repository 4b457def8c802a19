"""Reading comprehension on SQuAD v1.1: BiDAF (Seo et al. 2017) and the official EM/F1.

Data: SQuAD v1.1's JSON (dataset kind ``squad``, :func:`read_squad`): every question with its
context, tokenized once with character offsets (:func:`tokenize_squad`), so that a predicted
token span maps back to the exact context substring.

The model, in a size that trains on a laptop CPU, for a question ``q`` about a context ``c``
(see :class:`SquadQuestion`)::

    both: [word vector; char CNN; ELMo_input] -> dropout -> shared BiLSTM -> [h; ELMo_output]
    similarity S_tj = w . [h_t; u_j; h_t * u_j]
    context-to-query: u~_t = sum_j softmax_j(S_tj) u_j
    query-to-context: h~ = sum_t softmax_t(max_j S_tj) h_t, the same for every t
    G = [h; u~; h * u~; h * h~] -> modelling BiLSTM -> M
    start = w1 . [G; M],  end = w2 . [G; BiLSTM(M)]
    loss: cross entropy of the gold start plus that of the gold end

Decoding picks the span ``(i, j)`` with ``i <= j < i + max_answer_length`` that maximises
``log p_start(i) + log p_end(j)``. ELMo goes to the input and/or the output of the contextual
BiLSTM, before the attention, as the paper did for SQuAD. The self-attention layer of Clark and
Gardner (2017), which the paper's baseline had, is not here (see docs/tasks.md).

The metric is the official one (``evaluate-v1.1.py``): answers are normalised (lower case, no
punctuation, no articles ``a``/``an``/``the``, single spaces), exact match and token F1 are taken
as the maximum over the gold answers, and both are averaged over the questions.
"""


from __future__ import annotations

import os
import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from elmo import jsonio
from elmo.checks import check_count
from elmo.fileio import open_text
from elmo.model.dropout import Dropout
from elmo.tasks.base import (
    Evaluation,
    ModelSettings,
    Prepared,
    Split,
    Task,
    TokenBatch,
    first_uses,
    token_batch,
)
from elmo.tasks.features import TokenFeatures, WordVocab
from elmo.tasks.integration import TaskElmo, concat
from elmo.tasks.masked import encode, masked_softmax
from elmo.tasks.readers import DatasetError, PathLike, tokenize_with_offsets


# ------------------------------------------------------------------------------ reader
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
# The largest SQuAD file read: SQuAD v1.1's training set is 30 MB, v2.0's 40 MB.
MAX_SQUAD_BYTES = 1 << 30
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
    with open_text(path) as f:
        raw = f.read(MAX_SQUAD_BYTES + 1)
    try:
        document = jsonio.loads(raw, os.fspath(path), max_bytes=MAX_SQUAD_BYTES)
    except jsonio.JSONFileError as e:
        if e.reason.startswith("its JSON is nested too deeply"):  # SQuAD is six levels deep
            raise DatasetError(path, None, "not a SQuAD file: its JSON is nested too deeply to read") from None
        raise DatasetError(path, e.line, e.reason) from None

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



# ------------------------------------------------------------------------------ metric
def normalize_answer(text: str) -> str:
    """The official normalisation: lower case, punctuation removed, the articles a/an/the
    removed, whitespace collapsed to single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    """F1 of the normalised tokens of a prediction against one gold answer (bags of tokens)."""
    predicted, wanted = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(predicted) & Counter(wanted)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(wanted)
    return 2 * precision * recall / (precision + recall)


def squad_scores(gold: Sequence[Sequence[str]], predicted: Sequence[str]) -> dict:
    """``{"exact_match", "f1"}`` (fractions) of predicted answer texts against each question's
    gold answer texts, each the maximum over the gold answers, averaged over the questions."""
    if len(gold) != len(predicted):
        raise ValueError(f"squad_scores: {len(gold)} questions but {len(predicted)} predictions")
    if not gold:
        return {"exact_match": 0.0, "f1": 0.0}
    em = sum(max((exact_match(p, g) for g in answers), default=0.0) for answers, p in zip(gold, predicted))
    f1 = sum(max((token_f1(p, g) for g in answers), default=0.0) for answers, p in zip(gold, predicted))
    return {"exact_match": em / len(gold), "f1": f1 / len(gold)}


# ------------------------------------------------------------------------------ decoding
def best_spans(start_logits: torch.Tensor, end_logits: torch.Tensor, mask: torch.Tensor,
               max_answer_length: int) -> list[tuple[int, int]]:
    """The best ``(start, end)`` of each row: ``start <= end < start + max_answer_length``, both
    real tokens, maximising ``log_softmax(start)[start] + log_softmax(end)[end]``.
    ``start_logits``/``end_logits``: ``(batch, time)``; ``mask``: ``(batch, time)``."""
    very_negative = torch.finfo(start_logits.dtype).min
    start = torch.log_softmax(start_logits.masked_fill(~mask, very_negative), dim=-1)
    end = torch.log_softmax(end_logits.masked_fill(~mask, very_negative), dim=-1)
    time = start.shape[1]
    scores = start.unsqueeze(2) + end.unsqueeze(1)  # (batch, start, end)
    positions = torch.arange(time)
    width = positions.view(1, -1) - positions.view(-1, 1)
    allowed = (width >= 0) & (width < max_answer_length)
    allowed = allowed.unsqueeze(0) & mask.unsqueeze(2) & mask.unsqueeze(1)
    best = scores.masked_fill(~allowed, -torch.inf).view(len(scores), -1).argmax(dim=1)
    return [(int(b) // time, int(b) % time) for b in best]


# ------------------------------------------------------------------------------ model
@dataclass
class QaBatch:
    """Questions on contexts: ``context`` and ``question`` (each a
    :class:`~elmo.tasks.base.TokenBatch`, row ``i`` of both one question) and ``span`` ``(batch,
    2)`` long, the gold answer's first and last context token."""

    context: TokenBatch
    question: TokenBatch
    span: torch.Tensor | None = None


@dataclass
class QaSettings(ModelSettings):
    """``[model]`` of a reading-comprehension run: ``modelling_layers`` of the modelling BiLSTM,
    ``max_answer_length``: the longest answer decoding returns, in tokens."""

    modelling_layers: int = 1
    max_answer_length: int = 30

    def __post_init__(self):
        super().__post_init__()
        check_count(self.modelling_layers, "model.modelling_layers")
        check_count(self.max_answer_length, "model.max_answer_length")


class BiDAF(nn.Module):
    """BiDAF with optional ELMo at the input and/or the contextual encoder's output.

    ``hidden``: LSTM size per direction; ``modelling_layers``: layers of the modelling BiLSTM;
    ``max_answer_length``: the longest span decoding returns, in tokens.

    A batch is a :class:`QaBatch`: the contexts and the questions, each a
    :class:`~elmo.tasks.base.TokenBatch`, and ``span`` ``(batch, 2)`` (the gold start and end
    token), needed by the loss only.
    """

    def __init__(self, features: TokenFeatures, elmo: TaskElmo, *, hidden: int = QaSettings.hidden,
                 dropout: float = QaSettings.dropout, modelling_layers: int = QaSettings.modelling_layers,
                 max_answer_length: int = QaSettings.max_answer_length):
        super().__init__()
        check_count(modelling_layers, "modelling_layers")
        check_count(max_answer_length, "max_answer_length")
        self.features = features
        self.elmo = elmo
        self.max_answer_length = max_answer_length
        self.dropout = Dropout(dropout)
        input_dim = features.output_dim + elmo.input_dim
        self.contextual = nn.LSTM(input_dim, hidden, bidirectional=True, batch_first=True)
        d = 2 * hidden + elmo.output_dim
        self.similarity = nn.Linear(3 * d, 1)
        self.modelling = nn.LSTM(4 * d, hidden, num_layers=modelling_layers, bidirectional=True, batch_first=True,
                                 dropout=dropout if modelling_layers > 1 else 0.0)
        self.end_encoder = nn.LSTM(2 * hidden, hidden, bidirectional=True, batch_first=True)
        self.start_scorer = nn.Linear(4 * d + 2 * hidden, 1)
        self.end_scorer = nn.Linear(4 * d + 2 * hidden, 1)

    def encode_side(self, side: TokenBatch) -> torch.Tensor:
        """The contextual states ``(batch, time, d)`` of one side (context or question)."""
        mask = side.mask.bool()
        layers = side.elmo
        inputs = self.dropout(concat(self.features(side.words, side.chars), self.elmo.for_input(layers, mask)))
        return self.dropout(concat(encode(self.contextual, inputs, mask), self.elmo.for_output(layers, mask)))

    def attention(self, h: torch.Tensor, u: torch.Tensor, c_mask: torch.Tensor, q_mask: torch.Tensor) -> torch.Tensor:
        """``G`` ``(batch, c_time, 4d)`` from context states ``h`` ``(batch, c_time, d)`` and
        question states ``u`` ``(batch, q_time, d)``."""
        d = h.shape[-1]
        w_h, w_u, w_hu = self.similarity.weight[0].split(d)
        # w . [h; u; h * u] for every (t, j), without building the (t, j, 3d) tensor
        similarity = ((h @ w_h).unsqueeze(2) + (u @ w_u).unsqueeze(1) + (h * w_hu) @ u.transpose(1, 2)
                      + self.similarity.bias)
        c2q = masked_softmax(similarity, q_mask.unsqueeze(1)) @ u
        very_negative = torch.finfo(similarity.dtype).min
        best = similarity.masked_fill(~q_mask.unsqueeze(1), very_negative).max(dim=2).values
        q2c = (masked_softmax(best, c_mask).unsqueeze(1) @ h).expand_as(h)
        return torch.cat([h, c2q, h * c2q, h * q2c], dim=-1)

    def logits(self, batch: QaBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Start and end scores ``(batch, c_time)`` (unnormalised, padding included)."""
        c_mask, q_mask = batch.context.mask.bool(), batch.question.mask.bool()
        h, u = self.encode_side(batch.context), self.encode_side(batch.question)
        g = self.attention(h, u, c_mask, q_mask)
        m = self.dropout(encode(self.modelling, g, c_mask))
        m2 = self.dropout(encode(self.end_encoder, m, c_mask))
        return (self.start_scorer(torch.cat([g, m], -1)).squeeze(-1),
                self.end_scorer(torch.cat([g, m2], -1)).squeeze(-1))

    def loss(self, batch: QaBatch) -> torch.Tensor:
        """Mean over questions of the start and end cross entropies, plus the ELMo mixes' L2 penalty."""
        mask = batch.context.mask.bool()
        start, end = self.logits(batch)
        very_negative = torch.finfo(start.dtype).min
        loss = (nn.functional.cross_entropy(start.masked_fill(~mask, very_negative), batch.span[:, 0])
                + nn.functional.cross_entropy(end.masked_fill(~mask, very_negative), batch.span[:, 1]))
        return loss + self.elmo.l2_penalty()

    @torch.no_grad()
    def predict(self, batch: QaBatch) -> list[tuple[int, int]]:
        """The best answer span ``(start, end)`` (context tokens, inclusive) of each question.
        Call ``eval()`` first for deterministic output."""
        start, end = self.logits(batch)
        return best_spans(start, end, batch.context.mask.bool(), self.max_answer_length)


# ------------------------------------------------------------------------------ the task
class ReadingComprehension(Task):
    """Reading comprehension: the answer span of each question in its context, scored by the
    official SQuAD F1 (exact match in the details)."""

    name = "qa"
    metrics = ("squad_f1",)
    Settings = QaSettings
    readers = {"squad": (read_squad, False)}

    def prepare_training(self, examples: list[SquadQuestion]) -> Prepared:
        """Training needs a gold span: questions whose answer maps to no tokens are left out (and
        counted); evaluation keeps every question and all its answers."""
        mapping = answer_mapping_counts(examples)
        return Prepared([q for q in examples if q.span is not None], {"train_answer_mapping": mapping},
                        f"training answers: {mapping}; {mapping['unmapped']} question(s) without a span skipped "
                        f"in training")

    def split(self, examples: list[SquadQuestion]) -> Split:
        """Each distinct context once (the reader shares one context object per paragraph), then
        every question; ``rows``: the row of each question's context, and the number of contexts
        (the row of question ``i`` is that number plus ``i``)."""
        index = first_uses(id(e.context) for e in examples)
        contexts = {id(e.context): e.context for e in examples}.values()
        sentences = [list(c.tokens) for c in contexts] + [list(e.question) for e in examples]
        return Split(examples, sentences, ([index[id(e.context)] for e in examples], len(index)))

    def batch(self, split: Split, indices: Sequence[int], vocab: WordVocab, labels: dict[str, int]) -> QaBatch:
        examples = [split.examples[i] for i in indices]
        context_rows, questions = split.rows  # the contexts come first, numbered from 0
        context = token_batch([e.context.tokens for e in examples], vocab, split.layers,
                              [context_rows[i] for i in indices])
        question = token_batch([e.question for e in examples], vocab, split.layers, [questions + i for i in indices])
        return QaBatch(context, question, torch.tensor([e.span or (0, 0) for e in examples], dtype=torch.long))

    def build_model(self, features: TokenFeatures, elmo: TaskElmo, labels: Sequence[str]) -> BiDAF:
        s = self.settings
        return BiDAF(features, elmo, hidden=s.hidden, dropout=s.dropout, modelling_layers=s.modelling_layers,
                     max_answer_length=s.max_answer_length)

    def decode(self, predicted: list[tuple[int, int]], split: Split, indices: Sequence[int],
               names: Sequence[str]) -> list[str]:
        """Each predicted span as the exact text of its context."""
        return [split.examples[i].context.answer_text(*span) for i, span in zip(indices, predicted)]

    def evaluate(self, examples: Sequence[SquadQuestion], predictions: list[str]) -> Evaluation:
        """The official F1, ``details`` the exact match too, and the prediction file's content
        (question id -> answer text)."""
        scores = squad_scores([[text for text, _ in e.answers] for e in examples], predictions)
        return Evaluation(self.metric, scores["f1"], scores, {e.id: p for e, p in zip(examples, predictions)})

    def report(self, result: dict) -> list[str]:
        details = result["details"]
        return [f"  exact match {100 * details['exact_match']:.2f} f1 {100 * details['f1']:.2f}",
                f"predictions (question id -> answer) written to {result['predictions']}"]


__all__ = ["BiDAF", "QaBatch", "QaSettings", "ReadingComprehension", "SquadContext", "SquadQuestion",
           "answer_mapping_counts", "best_spans", "exact_match", "normalize_answer", "read_squad", "squad_scores",
           "token_f1", "tokenize_squad"]
