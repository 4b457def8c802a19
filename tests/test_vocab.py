"""The bilm-tf vocabulary: building, saving, reading, and ``elmo vocab``."""

import gzip
import re
from collections import Counter

import pytest

from elmo.cli.main import main
from elmo.model.vocab import Vocabulary, build_vocabulary

SHARD_1 = "c b a c\nb c a\n"
SHARD_2 = "c d c\nb a\n"  # c 5, b 3, a 3, d 1


@pytest.fixture
def shards(tmp_path):
    (tmp_path / "shard-00000.txt").write_text(SHARD_1, encoding="utf-8")
    (tmp_path / "shard-00001.txt").write_text(SHARD_2, encoding="utf-8")
    return [tmp_path / "shard-00000.txt", tmp_path / "shard-00001.txt"]


def test_specials_first_then_descending_count_ties_alphabetical(shards):
    vocab, counts = build_vocabulary(shards)
    assert vocab.words == ["<S>", "</S>", "<UNK>", "c", "a", "b", "d"]
    assert counts == Counter({"c": 5, "a": 3, "b": 3, "d": 1})
    assert (vocab.bos, vocab.eos, vocab.unk) == (0, 1, 2)


def test_literal_specials_in_text_are_listed_once(tmp_path):
    shard = tmp_path / "s.txt"
    shard.write_text("x <UNK> y <UNK>\n<S> x </S>\n", encoding="utf-8")
    vocab, counts = build_vocabulary([shard])
    assert vocab.words == ["<S>", "</S>", "<UNK>", "x", "y"]
    assert counts["<UNK>"] == 2  # the counts are those of the text


def test_min_count_and_max_size(shards):
    assert build_vocabulary(shards, min_count=3)[0].words == ["<S>", "</S>", "<UNK>", "c", "a", "b"]
    # max_size counts the three specials.
    assert build_vocabulary(shards, max_size=5)[0].words == ["<S>", "</S>", "<UNK>", "c", "a"]
    assert build_vocabulary(shards, max_size=3)[0].words == ["<S>", "</S>", "<UNK>"]
    with pytest.raises(ValueError, match="max_size: must be at least 3"):
        build_vocabulary(shards, max_size=2)
    with pytest.raises(ValueError, match="min_count: must be at least 1"):
        build_vocabulary(shards, min_count=0)


def test_gzip_shards_count_the_same(tmp_path, shards):
    gz = tmp_path / "shard.txt.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        f.write(SHARD_1 + SHARD_2)
    assert build_vocabulary([gz])[0] == build_vocabulary(shards)[0]


def test_round_trip_and_lookups(tmp_path, shards):
    vocab, _ = build_vocabulary(shards)
    path = tmp_path / "vocab.txt"
    vocab.save(path)
    assert path.read_text(encoding="utf-8") == "<S>\n</S>\n<UNK>\nc\na\nb\nd\n"
    loaded = Vocabulary.from_file(path)
    assert loaded == vocab and len(loaded) == 7
    assert loaded.word_to_id("a") == 4 and loaded.word_to_id("never-seen") == loaded.unk == 2
    assert loaded.id_to_word(3) == "c"
    assert loaded.encode(["c", "zzz", "d", "<S>"]) == [3, 2, 6, 0]
    with pytest.raises(IndexError, match="word id 7 out of range"):
        loaded.id_to_word(7)
    with pytest.raises(IndexError):
        loaded.id_to_word(-1)


def test_specials_anywhere_in_the_file_like_bilm_tf(tmp_path):
    path = tmp_path / "vocab.txt"
    # bilm-tf accepts the specials at any position, and skips lm_1b's end sentinel.
    path.write_text("the\n<UNK>\nof\n</S>\n<S>\n!!!MAXTERMID\n", encoding="utf-8")
    vocab = Vocabulary.from_file(path)
    assert vocab.words == ["the", "<UNK>", "of", "</S>", "<S>"]
    assert (vocab.bos, vocab.eos, vocab.unk) == (4, 3, 1)
    assert vocab.encode(["of", "unknown"]) == [2, 1]


@pytest.mark.parametrize("text, message", [
    ("<S>\n</S>\n<UNK>\nthe\nof\nthe\n", r":6: duplicate word 'the' \(first at .*vocab\.txt:4\)"),
    ("<S>\n</S>\n<UNK>\nthe\n\nof\n", r":5: empty word"),
    ("<S>\n</S>\n<UNK>\nnew york\n", r":4: word 'new york' contains whitespace"),
    ("<S>\n</S>\nthe\n", r": missing the special word\(s\) <UNK>"),
])
def test_malformed_file_errors_name_file_and_line(tmp_path, text, message):
    path = tmp_path / "vocab.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match="^" + re.escape(str(path)) + message):
        Vocabulary.from_file(path)


def test_constructor_checks_words():
    with pytest.raises(ValueError, match="word 4: duplicate word 'a'"):
        Vocabulary(["<S>", "</S>", "<UNK>", "a", "a"])
    with pytest.raises(ValueError, match="missing the special word"):
        Vocabulary(["a", "b"])


def test_bad_utf8_shard_names_file_and_line(tmp_path):
    shard = tmp_path / "s.txt"
    shard.write_bytes(b"ok line\nbad \xff\n")
    with pytest.raises(ValueError, match=re.escape(f"{shard}:2: not valid UTF-8")):
        build_vocabulary([shard])


def test_cli_expands_quoted_glob(tmp_path, shards, capsys):
    out = tmp_path / "vocab.txt"
    assert main(["vocab", str(tmp_path / "shard-*.txt"), "--output", str(out), "--max-size", "6"]) == 0
    assert Vocabulary.from_file(out).words == ["<S>", "</S>", "<UNK>", "c", "a", "b"]
    assert "wrote 6 words" in capsys.readouterr().err


def test_cli_takes_shell_expanded_paths(tmp_path, shards):
    out = tmp_path / "vocab.txt"
    assert main(["vocab", *map(str, shards), "--output", str(out), "--min-count", "2"]) == 0
    assert out.read_text(encoding="utf-8").split() == ["<S>", "</S>", "<UNK>", "c", "a", "b"]


def test_cli_glob_without_match_is_an_error(tmp_path, capsys):
    out = tmp_path / "vocab.txt"
    assert main(["vocab", str(tmp_path / "nothing-*.txt"), "--output", str(out)]) == 2
    assert f"elmo vocab: error: {tmp_path / 'nothing-*.txt'}: matches no file" in capsys.readouterr().err
    assert not out.exists()
