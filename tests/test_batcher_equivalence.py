"""The vectorised batcher and character ids build exactly the batches of the old per-token code
(kept verbatim in benchmarks/legacy_batcher.py), including the resume state that checkpoints save."""

import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from elmo.model.chars import CharIdTable, batch_to_char_ids, word_to_char_ids
from elmo.model.vocab import Vocabulary
from elmo.training.data import LMBatcher, SentenceStream

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from legacy_batcher import (  # noqa: E402
    LegacyLMBatcher,
    LegacySentenceStream,
    legacy_batch_to_char_ids,
)

WORDS = ["the", "a", "cat", "Zürich", "東京", "naïve", "😀", "x" * 60, "é" * 30, "<S>", "</S>", "<s>", "z", "<UNK>"]


def _corpus(tmp_path, n_shards=3, seed=0):
    rng = random.Random(seed)
    paths = []
    for k in range(n_shards):
        lines = []
        for _ in range(rng.randint(5, 25)):
            n = rng.choice([0, 1, 1, 2, 3, 5, 8, 13, 30])
            lines.append(" ".join(rng.choice(WORDS + [f"w{k}_{rng.randint(0, 40)}"]) for _ in range(n)))
        path = tmp_path / f"shard{k}.txt"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(str(path))
    return paths


VOCAB = Vocabulary(["<S>", "</S>", "<UNK>", "the", "a", "cat", "東京", "z", "w0_1", "w1_2"])


def _assert_same(new, old, where):
    if old is None:
        assert new is None, where
        return
    assert new is not None and new.keys() == old.keys(), where
    for key in old:
        assert new[key].dtype == old[key].dtype and new[key].shape == old[key].shape, (where, key)
        assert torch.equal(new[key], old[key]), (where, key)


@pytest.mark.parametrize("batch_size, unroll, rows", [(1, 1, None), (3, 5, None), (7, 20, None), (6, 4, slice(2, 5)),
                                                     (5, 3, slice(0, 5, 2))])
@pytest.mark.parametrize("reverse", [False, True])
def test_endless_stream_batches_and_states_equal_the_old_code(tmp_path, batch_size, unroll, rows, reverse):
    paths = _corpus(tmp_path)
    new = LMBatcher(SentenceStream(paths, seed=5, reverse=reverse), VOCAB, batch_size, unroll, rows=rows)
    old = LegacyLMBatcher(SentenceStream(paths, seed=5, reverse=reverse), VOCAB, batch_size, unroll, rows=rows)
    assert new.state_dict() == old.state_dict()
    for step in range(60):  # across shard and pass boundaries
        _assert_same(new.next_batch(), old.next_batch(), step)
        assert new.state_dict() == old.state_dict(), step


@pytest.mark.parametrize("batch_size, unroll, rows", [(1, 7, None), (4, 6, None), (4, 5, slice(1, 3))])
def test_finite_stream_ends_exactly_like_the_old_code(tmp_path, batch_size, unroll, rows):
    paths = _corpus(tmp_path, seed=1)
    new = LMBatcher(SentenceStream(paths, shuffle=False, reverse=True), VOCAB, batch_size, unroll, rows=rows)
    old = LegacyLMBatcher(SentenceStream(paths, shuffle=False, reverse=True), VOCAB, batch_size, unroll, rows=rows)
    step, partial_seen = 0, False
    while True:
        a, b = new.next_batch(), old.next_batch()
        _assert_same(a, b, step)
        if b is None:
            break
        partial_seen |= not bool(b["mask"].all())
        step += 1
    assert step > 3 and partial_seen  # the end of the stream, with its masked rows, was compared
    assert new.next_batch() is None


def test_resume_across_old_and_new_batchers(tmp_path):
    """A checkpoint's batcher state is the same dictionary either way: a run checkpointed by the
    old code resumes exactly with the new, and the other way round."""
    paths = _corpus(tmp_path, seed=2)
    def make(cls):
        return cls(SentenceStream(paths, seed=9), VOCAB, 5, 7)
    old, new = make(LegacyLMBatcher), make(LMBatcher)
    for _ in range(7):
        _assert_same(new.next_batch(), old.next_batch(), "before")
    resumed_new, resumed_old = make(LMBatcher), make(LegacyLMBatcher)
    resumed_new.load_state_dict(old.state_dict())  # old checkpoint -> new code
    resumed_old.load_state_dict(new.state_dict())  # new checkpoint -> old code
    for step in range(30):
        expected = old.next_batch()
        new.next_batch()
        _assert_same(resumed_new.next_batch(), expected, step)
        _assert_same(resumed_old.next_batch(), expected, step)
        assert resumed_new.state_dict() == old.state_dict()


def test_batch_to_char_ids_equals_the_old_code():
    rng = random.Random(3)
    for _ in range(30):
        batch = [[rng.choice(WORDS) for _ in range(rng.choice([0, 1, 4, 9]))] for _ in range(rng.randint(0, 6))]
        new_ids, new_mask = batch_to_char_ids(batch)
        old_ids, old_mask = legacy_batch_to_char_ids(batch)
        assert new_ids.dtype == old_ids.dtype and new_mask.dtype == old_mask.dtype
        assert torch.equal(new_ids, old_ids) and torch.equal(new_mask, old_mask)


def test_char_id_table_starts_again_when_full_and_stays_exact():
    table = CharIdTable(max_words=4)
    # (words, then the table's size): a lookup that would pass the bound starts from empty; one
    # with more distinct words than the bound holds them all for that lookup.
    for words, size in ((["a", "b"], 2), (["c", "d", "e"], 3), (["d"] * 3, 3), (WORDS, 14), (WORDS[:2], 14),
                        (["q", "a"], 2)):
        expected = np.stack([word_to_char_ids(w) for w in words])
        np.testing.assert_array_equal(table.lookup(words), expected)
        assert len(table) == size, words


AWKWARD = [
    "plain words here\r\nwindows line end\r\n",
    "\n\n  \t \nafter blank lines\n   leading and trailing   \n",
    "no final newline",
    "ideographic\u3000space and\xa0no-break\u2028line separator \x1cfile separator\x0bvt\x0cff\n",
    "\ufeffbom at the start\n<S> literal </S> markers\n",
    "a nul\x00inside keeps the line path\nsecond line\n",
    "",
]


@pytest.mark.parametrize("text", AWKWARD)
@pytest.mark.parametrize("reverse", [False, True])
def test_awkward_shards_read_exactly_as_before(tmp_path, text, reverse):
    from legacy_batcher import LegacySentenceStream

    shard = tmp_path / "s.txt"
    shard.write_bytes(text.encode("utf-8"))
    new = SentenceStream([str(shard)], shuffle=False, reverse=reverse)
    old = LegacySentenceStream([str(shard)], shuffle=False, reverse=reverse)
    while True:
        a, b = new.next(), old.next()
        assert a == b
        if b is None:
            break
        assert new.state_dict() == old.state_dict()


def test_a_shard_that_is_not_utf8_names_its_line(tmp_path):
    shard = tmp_path / "s.txt"
    shard.write_bytes(b"fine\nalso fine\nbad \xff byte\n")
    with pytest.raises(ValueError, match=r"s\.txt:3: not valid UTF-8"):
        SentenceStream([str(shard)], shuffle=False).next()


@pytest.mark.parametrize("kept", ["none", "some", "all"])
def test_shards_kept_between_passes_or_not_give_the_same_batches(tmp_path, monkeypatch, kept):
    """None, some or all shards kept encoded for the next passes: the old code's batches."""
    from elmo.training.data import read_encoded

    paths = _corpus(tmp_path, n_shards=4, seed=7)
    sizes = sorted(len(read_encoded(p).tokens) for p in paths)
    bound = {"none": 0, "some": sizes[0] + sizes[1], "all": sum(sizes)}[kept]
    monkeypatch.setattr(SentenceStream, "CACHED_TOKENS", bound)
    new = LMBatcher(SentenceStream(paths, seed=2), VOCAB, 4, 6)
    old = LegacyLMBatcher(LegacySentenceStream(paths, seed=2), VOCAB, 4, 6)
    for step in range(80):  # several passes
        _assert_same(new.next_batch(), old.next_batch(), step)
    assert new.stream.pass_index >= 2
    cached = [len(t.tokens) for t in new.stream._cache.values()]
    assert sum(cached) <= bound and len(cached) in {"none": [0], "some": [1, 2, 3], "all": [4]}[kept]
