"""Readers for the downstream-task data sets: hand-written fixtures in each real format, malformed
inputs, and (when the shared data is present) the real files' sizes and label sets."""

import gzip
import pickle
import re
import shutil
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from elmo.tasks.catalog import DATASET_KINDS, read_dataset
from elmo.tasks.classification import LabeledSentence, parse_sst_tree, read_sst
from elmo.tasks.entailment import SentencePair, read_sick, read_snli_devtest
from elmo.tasks.readers import DatasetError
from elmo.tasks.tagging import (
    TaggedSentence,
    iob1_to_iob2,
    read_conll2000_chunks,
    read_conll_ner,
    read_conllu_upos,
)

FIXTURES = Path(__file__).parent / "fixtures" / "tasks"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_shared = pytest.mark.skipif(not SHARED.exists(), reason=f"no shared data at {SHARED}")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return path


def raises_at(path, line: int):
    """pytest.raises for a DatasetError whose message starts with "{path}:{line}: "."""
    return pytest.raises(DatasetError, match="^" + re.escape(f"{path}:{line}: "))


@pytest.fixture
def conll2000_zip(tmp_path):
    path = tmp_path / "conll2000.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("conll2000/", "")
        for split in ("train", "test"):
            z.write(FIXTURES / f"conll2000_{split}.txt", f"conll2000/{split}.txt")
    return path


# ---------------------------------------------------------------------------------------------
# IOB1 -> IOB2

@pytest.mark.parametrize("tags, expected", [
    ([], []),
    (["O", "O"], ["O", "O"]),
    (["I-PER", "I-PER", "O"], ["B-PER", "I-PER", "O"]),                 # span at the start
    (["O", "I-LOC"], ["O", "B-LOC"]),                                   # span after O
    (["I-PER", "I-ORG", "I-ORG"], ["B-PER", "B-ORG", "I-ORG"]),         # type change
    (["I-PER", "B-PER", "I-PER"], ["B-PER", "B-PER", "I-PER"]),         # IOB1's B- between same-type spans
    (["B-MISC", "I-MISC", "O", "B-MISC"], ["B-MISC", "I-MISC", "O", "B-MISC"]),  # IOB2 unchanged
    (["I-creative-work", "I-creative-work"], ["B-creative-work", "I-creative-work"]),
])
def test_iob1_to_iob2(tags, expected):
    assert iob1_to_iob2(tags) == expected
    assert iob1_to_iob2(expected) == expected  # idempotent


@pytest.mark.parametrize("bad", ["S-PER", "B-", "I", "o", "B PER", ""])
def test_iob1_to_iob2_rejects_other_tags(bad):
    with pytest.raises(ValueError, match="tag 1"):
        iob1_to_iob2(["O", bad])


# ---------------------------------------------------------------------------------------------
# CoNLL-2003 / WNUT-17

def test_conll2003_fixture():
    sentences = read_conll_ner(FIXTURES / "conll2003.txt")
    assert sentences == [
        TaggedSentence(["Anna", "Berg", "visited", "Oslo", "."], ["B-PER", "I-PER", "O", "B-LOC", "O"]),
        TaggedSentence(["OSLO", "1997-03-04"], ["B-LOC", "O"]),
        TaggedSentence(["The", "Nordic", "Paper", "Board", "met", "Swedish", "buyers", "."],
                       ["O", "B-ORG", "I-ORG", "I-ORG", "O", "B-MISC", "O", "O"]),
    ]


def test_wnut17_fixture():
    sentences = read_conll_ner(str(FIXTURES / "wnut17.conll"))
    assert [s.tokens for s in sentences] == [
        ["@mira_k", "Love", "the", "new", "PixelBook", "!"],
        ["Going", "to", "Central", "Park", "with", "Jo"],
        ["so", "tired"],
    ]
    assert sentences[0].tags == ["O", "O", "O", "O", "B-product", "O"]
    assert sentences[1].tags == ["O", "O", "B-location", "I-location", "O", "B-person"]
    assert sentences[2].tags == ["O", "O"]


def test_conll_iob1_file_is_returned_as_iob2(tmp_path):
    path = write(tmp_path, "iob1.txt",
                 "-DOCSTART- -X- O O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP O\nGerman JJ I-NP I-MISC\n"
                 "Peter NNP I-NP I-PER\nPaul NNP I-NP B-PER\n")
    [sentence] = read_conll_ner(path)
    assert sentence.tags == ["B-ORG", "O", "B-MISC", "B-PER", "B-PER"]


def test_conll_byte_order_marks_and_crlf(tmp_path):
    # A BOM at the start, a stray U+FEFF in a token and a line holding only U+FEFF (as in
    # WNUT-17 dev) are removed; CRLF endings are accepted.
    path = write(tmp_path, "bom.conll", "\ufeffHi\tO\r\nBob\ufeff\tB-person\r\n\ufeff\r\n\r\nyo\tO\r\n")
    assert read_conll_ner(path) == [TaggedSentence(["Hi", "Bob"], ["O", "B-person"]),
                                    TaggedSentence(["yo"], ["O"])]


@pytest.mark.parametrize("text, line, what", [
    ("a DT B-NP O\nb NN I-NP O\nc NN O\n", 3, "3 columns, but line 1 has 4"),
    ("a DT B-NP O\n\nb NN I-NP O X\n", 3, "5 columns, but line 1 has 4"),
    ("a\tO\nb\tB-X\tO\n", 2, "3 columns, but line 1 has 2"),
    ("word\n", 1, "expected a token and a tag"),
    ("a\tO\nb\tB-PER\nc\tE-PER\n", 3, "invalid tag 'E-PER'"),
    ("a\tO\nb\tPER\n", 2, "invalid tag 'PER'"),
    ("a\tO\nb\t\n", 2, "column 2 is empty"),
    (b"a\tO\n\xff\tO\n", 2, "not valid UTF-8 (invalid start byte at byte 0)"),
    ("", 1, "no sentences"),
    ("-DOCSTART- -X- -X- O\n\n\n", 1, "no sentences"),
])
def test_conll_malformed(tmp_path, text, line, what):
    path = tmp_path / "bad.txt"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    with raises_at(path, line) as info:
        read_conll_ner(path)
    assert what in str(info.value)
    assert info.value.path == str(path) and info.value.line == line


def test_dataset_error_is_a_picklable_value_error():
    error = DatasetError("a/b.txt", 7, "broken")
    assert isinstance(error, ValueError)
    assert str(error) == "a/b.txt:7: broken"
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.path, copy.line, copy.what) == ("a/b.txt:7: broken", "a/b.txt", 7, "broken")


# ---------------------------------------------------------------------------------------------
# CoNLL-U

EXPECTED_EWT = [
    TaggedSentence(["I", "ca", "n't", "swim", "."], ["PRON", "AUX", "PART", "VERB", "PUNCT"]),
    TaggedSentence(["Sue", "likes", "tea", "and", "Tom", "coffee"],
                   ["PROPN", "VERB", "NOUN", "CCONJ", "PROPN", "NOUN"]),
]


def test_conllu_fixture_skips_ranges_and_empty_nodes():
    assert read_conllu_upos(FIXTURES / "en_ewt-sample.conllu") == EXPECTED_EWT


def test_conllu_gz(tmp_path):
    path = tmp_path / "en_ewt-ud-sample.conllu.gz"
    with open(FIXTURES / "en_ewt-sample.conllu", "rb") as src, gzip.open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert read_conllu_upos(path) == EXPECTED_EWT
    assert read_conllu_upos(str(path)) == EXPECTED_EWT


CONLLU_WORD = "1\tHi\thi\tINTJ\tUH\t_\t0\troot\t0:root\t_"


@pytest.mark.parametrize("lines, line, what", [
    (["# text = Hi", "1\tHi\thi\tINTJ"], 2, "expected 10 tab-separated columns, found 4"),
    (["# text = Hi", CONLLU_WORD.replace("\t", "  ", 1)], 2, "expected 10 tab-separated columns"),
    ([CONLLU_WORD.replace("1", "x", 1)], 1, "invalid ID 'x'"),
    ([CONLLU_WORD.replace("1", "_", 1)], 1, "invalid ID '_'"),
    ([CONLLU_WORD, CONLLU_WORD], 2, "word ID 1, expected 2"),
    ([CONLLU_WORD, "", CONLLU_WORD.replace("1", "2", 1)], 3, "word ID 2, expected 1"),
    ([CONLLU_WORD.replace("INTJ", "INTERJ")], 1, "UPOS 'INTERJ' is not a universal POS tag"),
    ([CONLLU_WORD.replace("INTJ", "_")], 1, "UPOS '_'"),
    ([CONLLU_WORD.replace("Hi", "", 1)], 1, "empty FORM"),
    (["# only a comment", ""], 1, "no sentences"),
])
def test_conllu_malformed(tmp_path, lines, line, what):
    path = write(tmp_path, "bad.conllu", "\n".join(lines) + "\n\n")
    with raises_at(path, line) as info:
        read_conllu_upos(path)
    assert what in str(info.value)


def test_conllu_malformed_gz_names_the_gz_file(tmp_path):
    path = tmp_path / "bad.conllu.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(f"{CONLLU_WORD}\n2\tthere\n\n")
    with raises_at(path, 2):
        read_conllu_upos(path)


# ---------------------------------------------------------------------------------------------
# CoNLL-2000 (NLTK zip)

def test_conll2000_fixture(conll2000_zip):
    train = read_conll2000_chunks(conll2000_zip, "train")
    assert train == [
        TaggedSentence(["Prices", "rose", "sharply", "in", "March", "."],
                       ["B-NP", "B-VP", "B-ADVP", "B-PP", "B-NP", "O"]),
        TaggedSentence(["He", "has", "been", "selling", "shares", "."],
                       ["B-NP", "B-VP", "I-VP", "I-VP", "B-NP", "O"]),
    ]
    assert read_conll2000_chunks(str(conll2000_zip), "test") == [
        TaggedSentence(["The", "old", "mill", "closed", "."], ["B-NP", "I-NP", "I-NP", "B-VP", "O"]),
    ]
    with pytest.raises(ValueError, match="split must be 'train' or 'test'"):
        read_conll2000_chunks(conll2000_zip, "dev")


def test_conll2000_errors_name_the_member(tmp_path):
    path = tmp_path / "conll2000.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("conll2000/train.txt", "a DT B-NP\nb NN I-NP\n\nc NN\n")
    with raises_at(f"{path}/conll2000/train.txt", 4) as info:
        read_conll2000_chunks(path, "train")
    assert "2 columns, but line 1 has 3" in str(info.value)
    with pytest.raises(FileNotFoundError, match="conll2000/test.txt"):
        read_conll2000_chunks(path, "test")


# ---------------------------------------------------------------------------------------------
# SST-5

def test_sst_fixture():
    assert read_sst(FIXTURES / "sst5.txt") == [
        LabeledSentence(["The", "film", "is", "quietly", "moving", "."], "3"),
        LabeledSentence(["-LRB-", "Not", "-RRB-", "a", "dull", "moment", "..."], "1"),
        # Only spaces separate atoms: the no-break space stays inside its leaf; escapes are kept.
        LabeledSentence(["It", "'s", "like", "8\u00a01\\/2", "."], "2"),
        LabeledSentence(["Awful", "."], "0"),
    ]


@pytest.mark.parametrize("text, expected", [
    ("(4 great)", ("4", ["great"])),
    ("  (2   (1 a)\t(3 b) )  ", ("2", ["a", "b"])),
    ("(0 (1 (2 (3 (4 deep)))))", ("0", ["deep"])),
    ("(2 (2 a) (2 b) (2 c))", ("2", ["a", "b", "c"])),  # not only binary trees
])
def test_parse_sst_tree(text, expected):
    assert parse_sst_tree(text) == expected


@pytest.mark.parametrize("text, what", [
    ("(3 (2 It) (4 works)", "column 20: unbalanced parentheses: 1 node(s) not closed"),
    ("(3 (2 It) (4 works)))", "column 21: unbalanced parentheses: ')' closes nothing"),
    ("(3 (2 It) (4 works)) (2 x)", "column 22: text after the end of the tree"),
    ("( (2 It) (4 works))", "column 1: node without a label"),
    ("(3 (2 It) ((4 works)))", "column 11: node without a label"),
    ("(3 (It) (4 works))", "label 'It' is not one of 0-4"),
    ("(5 (2 It) (4 works))", "column 2: label '5' is not one of 0-4"),
    ("(3 (2) (4 works))", "column 4: node with label 2 is empty"),
    ("(3 (2 It is) (4 works))", "column 10: a node holds more than one word"),
    ("(3 (2 It) works)", "column 11: a node holds both a word and subtrees"),
    ("(3 It (4 works))", "column 7: a node holds both a word and subtrees"),
    ("3 (2 It)", "column 1: expected '(', found '3'"),
    ("", "no tree"),
])
def test_parse_sst_tree_malformed(text, what):
    with pytest.raises(ValueError) as info:
        parse_sst_tree(text)
    assert what in str(info.value)


def test_sst_malformed_line_names_file_and_line(tmp_path):
    path = write(tmp_path, "train.txt", "(3 (2 a) (3 b))\n\n(1 (2 c) (1 d)\n")
    with raises_at(path, 3) as info:
        read_sst(path)
    assert "unbalanced parentheses" in str(info.value)
    empty = write(tmp_path, "empty.txt", "\n")
    with raises_at(empty, 1) as info:
        read_sst(empty)
    assert "no trees" in str(info.value)


# ---------------------------------------------------------------------------------------------
# SICK

def test_sick_fixture():
    path = FIXTURES / "SICK.txt"
    assert read_sick(path, "train") == [
        SentencePair(["A", "man", "is", "playing", "a", "guitar"],
                     ["A", "person", "is", "playing", "an", "instrument"], "entailment"),
        # Moses tokenization, as in the 1B Word Benchmark: punctuation and clitics split off.
        SentencePair(["A", "young", ",", "happy", "child", "isn", "'t", "sleeping"],
                     ["The", "child", "is", "asleep"], "contradiction"),
    ]
    assert read_sick(path, "trial") == [
        SentencePair(["Two", "dogs", "are", "running", "on", "the", "beach"],
                     ["The", "woman", "'s", "cat", "is", "eating"], "neutral"),
    ]
    assert read_sick(str(path), "test") == [
        SentencePair(["A", "boy", "is", "riding", "a", "bike"],
                     ["A", "boy", "is", "riding", "a", "t-shirt-shaped", "bike"], "neutral"),
    ]
    with pytest.raises(ValueError, match="split must be one of train, trial, test"):
        read_sick(path, "dev")


SICK_HEADER = "pair_ID\tsentence_A\tsentence_B\tentailment_label\trelatedness_score\tSemEval_set"


@pytest.mark.parametrize("rows, line, what", [
    (["1\tA b\tC d\tENTAILMENT\t4.0\tTRAIN", "2\tA b\tC d\tMAYBE\t4.0\tTRAIN"], 3,
     "unknown entailment_label 'MAYBE'"),
    (["1\tA b\tC d\tentailment\t4.0\tTRAIN"], 2, "unknown entailment_label 'entailment'"),
    (["1\tA b\tC d\tNEUTRAL\t4.0\tDEV"], 2, "unknown SemEval_set 'DEV'"),
    (["1\tA b\tC d\tNEUTRAL\t4.0"], 2, "5 columns, but the header has 6"),
    (["1\tA b\t \tNEUTRAL\t4.0\tTRAIN"], 2, "empty sentence_B"),
    (["1\tA b\tC d\tNEUTRAL\t4.0\tTEST"], 1, "no pairs with SemEval_set TRAIN"),
])
def test_sick_malformed(tmp_path, rows, line, what):
    path = write(tmp_path, "SICK.txt", "\r\n".join([SICK_HEADER] + rows))
    with raises_at(path, line) as info:
        read_sick(path, "train")
    assert what in str(info.value)


def test_sick_header_and_empty_file(tmp_path):
    path = write(tmp_path, "SICK.txt", SICK_HEADER.replace("\tentailment_label", "\tlabel") + "\n")
    with raises_at(path, 1) as info:
        read_sick(path, "train")
    assert "the header has no column entailment_label" in str(info.value)
    empty = write(tmp_path, "empty.txt", "")
    with raises_at(empty, 1) as info:
        read_sick(empty, "test")
    assert "empty file" in str(info.value)


# ---------------------------------------------------------------------------------------------
# SNLI (InferSent / e-SNLI layout)

def test_snli_fixture():
    assert read_snli_devtest(FIXTURES / "snli", "dev") == [
        SentencePair(["A", "man", "in", "a", "red", "shirt", "is", "cooking", "."],
                     ["A", "person", "is", "making", "food", "."], "entailment"),
        SentencePair(["A", "man", "in", "a", "red", "shirt", "is", "cooking", "."],
                     ["The", "man", "is", "asleep", "."], "contradiction"),
        SentencePair(["Kids", "play", "soccer", "on", "grass", "."],
                     ["Children", "are", "n't", "outside", "."], "contradiction"),
    ]
    with pytest.raises(ValueError, match="split must be one of"):
        read_snli_devtest(FIXTURES / "snli", "valid")
    with pytest.raises(FileNotFoundError):
        read_snli_devtest(FIXTURES / "snli", "test")


def make_snli(tmp_path, s1, s2, labels):
    for name, text in (("s1", s1), ("s2", s2), ("labels", labels)):
        write(tmp_path, f"{name}.dev", text)
    return tmp_path


def test_snli_line_counts_must_agree(tmp_path):
    directory = make_snli(tmp_path, "a b .\nc d .\n", "e f .\ng h .\n", "neutral\n")
    with raises_at(tmp_path / "s1.dev", 2) as info:
        read_snli_devtest(directory, "dev")
    message = str(info.value)
    for name in ("s1.dev has 2", "s2.dev has 2", "labels.dev has 1"):
        assert name in message


@pytest.mark.parametrize("s1, s2, labels, name, line, what", [
    ("a .\nb .\n", "c .\nd .\n", "neutral\nunknown\n", "labels.dev", 2, "unknown label 'unknown'"),
    ("a .\nb .\n", "c .\nd .\n", "neutral\nNEUTRAL\n", "labels.dev", 2, "unknown label 'NEUTRAL'"),
    ("a .\n \n", "c .\nd .\n", "neutral\nneutral\n", "s1.dev", 2, "empty sentence"),
    ("a .\n", "\n", "neutral\n", "s2.dev", 1, "empty sentence"),
    ("", "", "", "s1.dev", 1, "empty file"),
])
def test_snli_malformed(tmp_path, s1, s2, labels, name, line, what):
    directory = make_snli(tmp_path, s1, s2, labels)
    with raises_at(tmp_path / name, line) as info:
        read_snli_devtest(directory, "dev")
    assert what in str(info.value)


# ---------------------------------------------------------------------------------------------
# read_dataset

def test_read_dataset_dispatch(conll2000_zip):
    # by task family (elmo.tasks.catalog.TASKS), each family's kinds in its own order
    assert DATASET_KINDS == ("conll2003", "wnut17", "ud-ewt", "conll2000", "ptb-sample", "sst5", "sick", "snli",
                             "sick-relatedness", "conll2012-srl", "conll2012-coref", "litbank", "gap", "squad")
    assert read_dataset("conll2003", FIXTURES / "conll2003.txt") == read_conll_ner(FIXTURES / "conll2003.txt")
    assert read_dataset("wnut17", str(FIXTURES / "wnut17.conll"))[2].tokens == ["so", "tired"]
    assert read_dataset("ud-ewt", FIXTURES / "en_ewt-sample.conllu") == EXPECTED_EWT
    assert read_dataset("sst5", FIXTURES / "sst5.txt")[3].label == "0"
    assert len(read_dataset("conll2000", conll2000_zip, "train")) == 2
    assert read_dataset("sick", FIXTURES / "SICK.txt", "trial")[0].label == "neutral"
    assert len(read_dataset("snli", FIXTURES / "snli", "dev")) == 3


def test_read_dataset_errors():
    with pytest.raises(ValueError, match="unknown dataset kind 'conll2012'; known: conll2003, wnut17"):
        read_dataset("conll2012", "x")
    with pytest.raises(ValueError, match="sick: a split is required"):
        read_dataset("sick", FIXTURES / "SICK.txt")
    with pytest.raises(ValueError, match="sst5: pass the split's file as path"):
        read_dataset("sst5", FIXTURES / "sst5.txt", "train")


# ---------------------------------------------------------------------------------------------
# The real data sets (sizes measured on the files in shared/data)

CONLL2003_TYPES = {"PER", "LOC", "ORG", "MISC"}
WNUT17_TYPES = {"person", "location", "corporation", "group", "product", "creative-work"}
CONLL2000_TYPES = {"NP", "VP", "PP", "ADVP", "ADJP", "SBAR", "PRT", "CONJP", "INTJ", "LST", "UCP"}


def bio_tags(types):
    return {"O"} | {f"{p}-{t}" for t in types for p in "BI"}


def is_iob2(sentences):
    return all(iob1_to_iob2(s.tags) == s.tags for s in sentences)


@needs_shared
@pytest.mark.parametrize("split, n_sentences, n_tokens", [("train", 14041, 203621), ("valid", 3250, 51362)])
def test_real_conll2003(split, n_sentences, n_tokens):
    sentences = read_conll_ner(SHARED / "ner" / "conll2003" / f"{split}.txt")
    assert (len(sentences), sum(len(s.tokens) for s in sentences)) == (n_sentences, n_tokens)
    assert {t for s in sentences for t in s.tags} == bio_tags(CONLL2003_TYPES)
    assert all(len(s.tokens) == len(s.tags) for s in sentences)
    # This copy is already IOB2 (the original CoNLL-2003 release is IOB1): nothing is converted.
    raw = (SHARED / "ner" / "conll2003" / f"{split}.txt").read_text().split("\n")
    raw_tags = [line.split(" ")[-1] for line in raw if line and not line.startswith("-DOCSTART-")]
    assert raw_tags == [t for s in sentences for t in s.tags]


@needs_shared
@pytest.mark.parametrize("split, n_sentences, n_tokens", [
    ("train", 3394, 62730), ("dev", 1009, 15733), ("test", 1287, 23394),
])
def test_real_wnut17(split, n_sentences, n_tokens):
    sentences = read_conll_ner(SHARED / "ner" / "wnut17" / f"{split}.conll")
    assert (len(sentences), sum(len(s.tokens) for s in sentences)) == (n_sentences, n_tokens)
    assert {t for s in sentences for t in s.tags} == bio_tags(WNUT17_TYPES)
    assert not any("\ufeff" in t for s in sentences for t in s.tokens)
    if split == "dev":
        # The one inconsistent span in the data: I-creative-work right after I-person.
        [sentence] = [s for s in sentences if "Sly-" in s.tokens]
        assert sentence.tags[:4] == ["B-person", "I-person", "B-creative-work", "I-creative-work"]


@needs_shared
@pytest.mark.parametrize("split, n_sentences, n_words", [
    ("train", 12544, 204577), ("dev", 2001, 25147), ("test", 2077, 25094),
])
def test_real_ud_ewt(split, n_sentences, n_words):
    sentences = read_conllu_upos(SHARED / "pos" / "ud-english-ewt" / f"en_ewt-ud-{split}.conllu.gz")
    assert (len(sentences), sum(len(s.tokens) for s in sentences)) == (n_sentences, n_words)
    assert {t for s in sentences for t in s.tags} == {
        "ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN",
        "PUNCT", "SCONJ", "SYM", "VERB", "X"}


@needs_shared
@pytest.mark.parametrize("split, n_sentences, n_tokens, absent", [
    # Rare tags: train has no I-LST; test has no UCP chunks, no I-PRT and no I-INTJ.
    ("train", 8936, 211727, {"I-LST"}), ("test", 2012, 47377, {"B-UCP", "I-UCP", "I-PRT", "I-INTJ"}),
])
def test_real_conll2000(split, n_sentences, n_tokens, absent):
    sentences = read_conll2000_chunks(SHARED / "nltk" / "conll2000.zip", split)
    assert (len(sentences), sum(len(s.tokens) for s in sentences)) == (n_sentences, n_tokens)
    assert {t for s in sentences for t in s.tags} == bio_tags(CONLL2000_TYPES) - absent
    assert is_iob2(sentences)


@needs_shared
@pytest.mark.parametrize("split, counts", [
    ("train", {"0": 1092, "1": 2218, "2": 1624, "3": 2322, "4": 1288}),
    ("dev", {"0": 139, "1": 289, "2": 229, "3": 279, "4": 165}),
])
def test_real_sst5(split, counts):
    sentences = read_sst(SHARED / "sentiment" / "sst5" / f"{split}.txt")
    assert dict(Counter(s.label for s in sentences)) == counts
    # Three train leaves hold a no-break space ("8 1\/2", "2 1\/2" twice); they stay one token.
    assert sum("\u00a0" in t for s in sentences for t in s.tokens) == (3 if split == "train" else 0)


@needs_shared
@pytest.mark.parametrize("split, counts", [
    ("train", {"entailment": 1274, "neutral": 2524, "contradiction": 641}),
    ("trial", {"entailment": 143, "neutral": 281, "contradiction": 71}),
    ("test", {"entailment": 1404, "neutral": 2790, "contradiction": 712}),
])
def test_real_sick(split, counts):
    pairs = read_sick(SHARED / "nli" / "sick" / "SICK.txt", split)
    assert dict(Counter(p.label for p in pairs)) == counts  # 4439 / 495 / 4906 pairs


@needs_shared
@pytest.mark.parametrize("split, counts", [
    ("dev", {"entailment": 3329, "neutral": 3235, "contradiction": 3278}),
    ("test", {"entailment": 3368, "neutral": 3219, "contradiction": 3237}),
])
def test_real_snli(split, counts):
    pairs = read_snli_devtest(SHARED / "nli" / "snli-devtest", split)
    assert dict(Counter(p.label for p in pairs)) == counts  # 9842 / 9824 pairs
    assert all(p.premise and p.hypothesis for p in pairs)
