"""The vectorised batcher and character ids build exactly the batches of the old per-token code,
including the resume state that checkpoints save.

The old code's batches are recorded in ``tests/fixtures/legacy/`` (made by
``tests/fixtures/legacy/make_fixtures.py`` from the pre-issue-37 batcher, see
``tests/fixtures/README.md``). They are integers (character ids, word ids, masks, sentence
indices) and plain resume states, so they are compared exactly on any machine."""

import gzip
import json
import random
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch

from elmo.model.chars import CharIdTable, batch_to_char_ids, word_to_char_ids
from elmo.model.vocab import Vocabulary
from elmo.training.data import LMBatcher, SentenceStream

# The numbers' promises: CI runs these again with the CPU kernels held to AVX2.
pytestmark = pytest.mark.exactness

LEGACY = Path(__file__).resolve().parent / "fixtures" / "legacy"
WORDS = ["the", "a", "cat", "Zürich", "東京", "naïve", "😀", "x" * 60, "é" * 30, "<S>", "</S>", "<s>", "z", "<UNK>"]
BATCH_KEYS = ("char_ids", "targets", "mask", "sentence_ids")


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

# (batch size, unroll steps, rows) of the recorded runs: endless streams (corpus seed 0, stream
# seed 5, 60 batches, both reading directions) and finite ones (corpus seed 1, file order,
# backward, to the end).
ENDLESS = [(1, 1, None), (3, 5, None), (7, 20, None), (6, 4, slice(2, 5)), (5, 3, slice(0, 5, 2))]
ENDLESS_STEPS = 60
FINITE = [(1, 7, None), (4, 6, None), (4, 5, slice(1, 3))]
# Resume: corpus seed 2, stream seed 9, batch 5 x 7, checkpointed after 7 batches, 30 more.
RESUME = dict(seed=9, batch_size=5, unroll=7, before=7, after=30)
# Shards kept or not between passes: corpus of 4 shards (seed 7), stream seed 2, batch 4 x 6, 80 batches.
KEPT = dict(seed=2, batch_size=4, unroll=6, steps=80)
# batch_to_char_ids: 30 random batches of WORDS drawn with random.Random(3).
CHAR_ID_BATCHES = 30


def case_name(kind, batch_size, unroll, rows, reverse=False):
    """The fixture's name of one recorded batcher run."""
    span = "all" if rows is None else f"{rows.start}-{rows.stop}-{rows.step or 1}"
    return f"{kind}-b{batch_size}-u{unroll}-r{span}-{'backward' if reverse else 'forward'}"


def char_id_batches():
    """The batches of tokens whose character ids the old code recorded (empty ones included)."""
    rng = random.Random(3)
    return [[[rng.choice(WORDS) for _ in range(rng.choice([0, 1, 4, 9]))] for _ in range(rng.randint(0, 6))]
            for _ in range(CHAR_ID_BATCHES)]


@lru_cache(maxsize=None)
def _recordings():
    with gzip.open(LEGACY / "batcher.json.gz", "rt", encoding="utf-8") as f:
        meta = json.load(f)
    with np.load(LEGACY / "batcher.npz") as arrays:
        return meta, {name: arrays[name] for name in arrays.files}


def recorded_run(name):
    """The old batcher's run ``name``: its batches (dicts of tensors with the old dtypes; the
    run ends with None if the recording saw the stream end) and its state after each batch
    (``states[0]`` before the first)."""
    meta, arrays = _recordings()
    run = meta["runs"][name]
    batches = [{key: torch.from_numpy(arrays[f"{name}/{key}"][step].astype(run["dtypes"][key]))
                for key in BATCH_KEYS} for step in range(run["batches"])]
    if run["ended"]:
        batches.append(None)
    return batches, run["states"]


def recorded_char_ids():
    """The old ``batch_to_char_ids`` of each of :func:`char_id_batches`: ``(ids, mask)`` tensors."""
    meta, arrays = _recordings()
    record = meta["char_ids"]
    ids = np.split(arrays["char_ids/ids"], np.cumsum([np.prod(s) for s in record["ids_shapes"]])[:-1])
    masks = np.split(arrays["char_ids/mask"], np.cumsum([np.prod(s) for s in record["mask_shapes"]])[:-1])
    return [(torch.from_numpy(i.reshape(si).astype(record["ids_dtype"])),
             torch.from_numpy(m.reshape(sm).astype(record["mask_dtype"])))
            for i, m, si, sm in zip(ids, masks, record["ids_shapes"], record["mask_shapes"])]


def _assert_same(new, old, where):
    if old is None:
        assert new is None, where
        return
    assert new is not None and new.keys() == old.keys(), where
    for key in old:
        assert new[key].dtype == old[key].dtype and new[key].shape == old[key].shape, (where, key)
        assert torch.equal(new[key], old[key]), (where, key)


def test_the_recordings_are_what_the_tests_read():
    """Each run the tests compare against is recorded, with a batch per step and a state per batch."""
    meta, arrays = _recordings()
    expected = {case_name("endless", *case, reverse) for case in ENDLESS for reverse in (False, True)}
    expected |= {case_name("finite", *case, True) for case in FINITE}
    expected |= {case_name("resume", RESUME["batch_size"], RESUME["unroll"], None),
                 case_name("kept", KEPT["batch_size"], KEPT["unroll"], None)}
    assert set(meta["runs"]) == expected
    for name, run in meta["runs"].items():
        assert len(run["states"]) == run["batches"] + 1, name
        assert all(arrays[f"{name}/{key}"].shape[0] == run["batches"] for key in BATCH_KEYS), name
    assert len(recorded_char_ids()) == CHAR_ID_BATCHES


@pytest.mark.parametrize("batch_size, unroll, rows", ENDLESS)
@pytest.mark.parametrize("reverse", [False, True])
def test_endless_stream_batches_and_states_equal_the_old_code(tmp_path, batch_size, unroll, rows, reverse):
    paths = _corpus(tmp_path)
    batches, states = recorded_run(case_name("endless", batch_size, unroll, rows, reverse))
    assert len(batches) == ENDLESS_STEPS
    new = LMBatcher(SentenceStream(paths, seed=5, reverse=reverse), VOCAB, batch_size, unroll, rows=rows)
    assert new.state_dict() == states[0]
    for step, expected in enumerate(batches):  # across shard and pass boundaries
        _assert_same(new.next_batch(), expected, step)
        assert new.state_dict() == states[step + 1], step


@pytest.mark.parametrize("batch_size, unroll, rows", FINITE)
def test_finite_stream_ends_exactly_like_the_old_code(tmp_path, batch_size, unroll, rows):
    paths = _corpus(tmp_path, seed=1)
    batches, _ = recorded_run(case_name("finite", batch_size, unroll, rows, True))
    new = LMBatcher(SentenceStream(paths, shuffle=False, reverse=True), VOCAB, batch_size, unroll, rows=rows)
    partial_seen = False
    for step, expected in enumerate(batches):
        _assert_same(new.next_batch(), expected, step)
        partial_seen |= expected is not None and not bool(expected["mask"].all())
    assert batches[-1] is None and len(batches) > 4 and partial_seen  # the end, with its masked rows, was compared
    assert new.next_batch() is None


def test_resume_across_old_and_new_batchers(tmp_path):
    """A checkpoint's batcher state is the same dictionary either way: a run checkpointed by the
    old code resumes exactly with the new, and the new code checkpoints the very dictionary the old
    code saved at that point (the old ``load_state_dict`` only copied its fields, so the old code
    resumes from it as from its own)."""
    paths = _corpus(tmp_path, seed=2)
    batches, states = recorded_run(case_name("resume", RESUME["batch_size"], RESUME["unroll"], None))
    before = RESUME["before"]
    assert len(batches) == before + RESUME["after"]

    def make():
        return LMBatcher(SentenceStream(paths, seed=RESUME["seed"]), VOCAB, RESUME["batch_size"], RESUME["unroll"])

    new = make()
    for step in range(before):
        _assert_same(new.next_batch(), batches[step], step)
    assert new.state_dict() == states[before]  # new checkpoint == the old code's checkpoint
    resumed = make()
    resumed.load_state_dict(states[before])  # old checkpoint -> new code
    for step in range(before, len(batches)):
        _assert_same(resumed.next_batch(), batches[step], step)
        assert resumed.state_dict() == states[step + 1], step


def test_batch_to_char_ids_equals_the_old_code():
    for batch, (old_ids, old_mask) in zip(char_id_batches(), recorded_char_ids(), strict=True):
        new_ids, new_mask = batch_to_char_ids(batch)
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


@pytest.mark.parametrize("index", range(len(AWKWARD)))
@pytest.mark.parametrize("reverse", [False, True])
def test_awkward_shards_read_exactly_as_before(tmp_path, index, reverse):
    shard = tmp_path / "s.txt"
    shard.write_bytes(AWKWARD[index].encode("utf-8"))
    meta, _ = _recordings()
    record = meta["streams"][f"awkward-{index}-{'backward' if reverse else 'forward'}"]
    assert record["text"] == AWKWARD[index]
    new = SentenceStream([str(shard)], shuffle=False, reverse=reverse)
    for expected, state in zip(record["sentences"], record["states"], strict=True):
        assert new.next() == expected
        assert new.state_dict() == state
    assert new.next() is None  # the old stream ended here too


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
    batches, states = recorded_run(case_name("kept", KEPT["batch_size"], KEPT["unroll"], None))
    assert len(batches) == KEPT["steps"]
    new = LMBatcher(SentenceStream(paths, seed=KEPT["seed"]), VOCAB, KEPT["batch_size"], KEPT["unroll"])
    for step, expected in enumerate(batches):  # several passes
        _assert_same(new.next_batch(), expected, step)
        assert new.state_dict() == states[step + 1], step
    assert new.stream.pass_index >= 2
    cached = [len(t.tokens) for t in new.stream._cache.values()]
    assert sum(cached) <= bound and len(cached) in {"none": [0], "some": [1, 2, 3], "all": [4]}[kept]
