"""``elmo prepare``: raw text -> tokenized shards, on tiny corpora made here."""

import gzip
import json
import os
import re
import subprocess
import sys

import pytest

from elmo.cli.main import main
from elmo.fileio import OWNER_FILE, read_owner
from elmo.training import prepare
from elmo.training.prepare import ParagraphTokenizer, prepare_corpus, remove_citations


def tokenizer_for(*paragraphs: str) -> ParagraphTokenizer:
    tokenizer, _ = ParagraphTokenizer.train(paragraphs)
    return tokenizer


def write_articles(path, articles: list[list[str]]) -> None:
    """One paragraph per line, a blank line between articles (as the raw Wikipedia shards)."""
    text = "\n\n".join("\n".join(paragraphs) for paragraphs in articles) + "\n"
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")


def numbered_articles(n: int) -> list[list[str]]:
    """Articles whose every sentence carries its article's number, so a sentence's source is known."""
    return [[f"Article a{i} starts here with words. It has a second sentence about a{i}.",
             f"A later paragraph of a{i} follows! Does it end with a question about a{i}?"] for i in range(n)]


def read_split(root, split: str) -> list[str]:
    folder = root / split
    if not folder.is_dir():
        return []
    lines = []
    for name in sorted(os.listdir(folder)):
        lines += (folder / name).read_text(encoding="utf-8").splitlines()
    return lines


def tree(root) -> dict[str, bytes]:
    """The files of a prepared folder and their bytes; elmo's marker holds a random id, so only its kind."""
    files = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    files[OWNER_FILE] = read_owner(root)["kind"].encode()
    return files


def test_citation_markers_are_removed_and_prose_brackets_kept():
    text = ("Spirituality has expanded.[1][2][3][note 1] It aims at God[4] and the Spirit[web 1] "
            "and more,[nb 2] as said.[18]: 346–347 Then[16]: 68, 70–72 again.[22]: vi Also small[a] "
            "grains[citation needed] of who[who?] and that[dubious  – discuss] too.")
    assert remove_citations(text) == ("Spirituality has expanded. It aims at God and the Spirit and more, as said. "
                                      "Then again. Also small grains of who and that too.")
    kept = 'He wrote that "[t]he framers [sic] saw R[x] and [ˈnɛiˌmeːɣə(n)]", i.e.[3]: i.e. this.'
    assert remove_citations(kept) == 'He wrote that "[t]he framers [sic] saw R[x] and [ˈnɛiˌmeːɣə(n)]", i.e.: i.e. this.'


def test_paragraph_is_split_into_sentences_and_citations_dropped():
    paragraph = "The cat sat on the mat.[1] It was happy! Was the dog there? No, the dog was out."
    sentences = tokenizer_for(paragraph).tokenize(paragraph)
    assert sentences == [["The", "cat", "sat", "on", "the", "mat", "."], ["It", "was", "happy", "!"],
                         ["Was", "the", "dog", "there", "?"], ["No", ",", "the", "dog", "was", "out", "."]]


def test_moses_tokenization_as_in_the_1b_word_benchmark():
    # The 1B Word Benchmark (Moses tokenizer.perl) writes "Don 't !": the apostrophe stays with
    # the clitic, unlike the Penn Treebank's "do n't".
    paragraph = 'I don\'t live in the U.S. anymore, she said: "it\'s (really) over" & done.'
    [tokens] = tokenizer_for(paragraph).tokenize(paragraph)
    assert tokens == ["I", "don", "'t", "live", "in", "the", "U.S.", "anymore", ",", "she", "said", ":", '"',
                      "it", "'s", "(", "really", ")", "over", '"', "&", "done", "."]


def test_tokens_never_hold_whitespace():
    paragraph = "It is 10\u00a0km long and 5\u2009m wide,\u3000mostly\u200a flat."
    [tokens] = tokenizer_for(paragraph).tokenize(paragraph)
    assert all(len(t.split()) == 1 for t in tokens)
    assert " ".join(tokens).split() == tokens
    assert tokens[:4] == ["It", "is", "10", "km"]


def test_heldout_split_is_by_article_disjoint_and_near_the_fraction(tmp_path):
    raw = tmp_path / "raw.txt"
    write_articles(raw, numbered_articles(400))
    stats = prepare_corpus([raw], tmp_path / "out", heldout_fraction=0.25)
    where: dict[str, set[str]] = {}
    for split in ("train", "heldout"):
        for line in read_split(tmp_path / "out", split):
            article = next(t for t in line.split() if t.startswith("a") and t[1:].isdigit())
            where.setdefault(article, set()).add(split)
    assert len(where) == 400
    assert all(len(splits) == 1 for splits in where.values())  # no article in both
    heldout = {a for a, s in where.items() if s == {"heldout"}}
    assert 0.18 < len(heldout) / 400 < 0.32
    assert stats["heldout"]["articles"] == len(heldout) and stats["train"]["articles"] == 400 - len(heldout)
    # Every article gave its 4 sentences to one split.
    assert stats["heldout"]["sentences"] == 4 * len(heldout)
    assert stats["train"]["paragraphs"] + stats["heldout"]["paragraphs"] == 800
    # The assignment depends on the article's text only: the same articles in another order and
    # file land in the same splits.
    reordered = tmp_path / "reordered.txt"
    write_articles(reordered, numbered_articles(400)[::-1])
    prepare_corpus([reordered], tmp_path / "again", heldout_fraction=0.25)
    assert sorted(read_split(tmp_path / "again", "heldout")) == sorted(read_split(tmp_path / "out", "heldout"))


def test_no_heldout_without_fraction(tmp_path):
    raw = tmp_path / "raw.txt"
    write_articles(raw, numbered_articles(20))
    stats = prepare_corpus([raw], tmp_path / "out")
    assert not (tmp_path / "out" / "heldout").exists()
    assert stats["heldout"]["sentences"] == 0 and stats["train"]["sentences"] == 80
    assert len(read_split(tmp_path / "out", "train")) == 80


def test_same_input_gives_byte_identical_output_in_another_process(tmp_path):
    raw = tmp_path / "raw.txt"
    write_articles(raw, numbered_articles(60))
    prepare_corpus([raw], tmp_path / "one", heldout_fraction=0.3, sentences_per_shard=50)
    # A fresh interpreter with another hash seed: nothing may depend on set or dict hashing order.
    code = ("import sys; from elmo.training.prepare import prepare_corpus; "
            "prepare_corpus([sys.argv[1]], sys.argv[2], heldout_fraction=0.3, sentences_per_shard=50)")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", code, str(raw), str(tmp_path / "two")], check=True, env=env)
    one, two = tree(tmp_path / "one"), tree(tmp_path / "two")
    assert len(one) >= 4 and one == two


def test_gzip_input_gives_the_same_shards(tmp_path):
    articles = numbered_articles(10)
    write_articles(tmp_path / "raw.txt", articles)
    write_articles(tmp_path / "raw.txt.gz", articles)
    prepare_corpus([tmp_path / "raw.txt"], tmp_path / "plain")
    prepare_corpus([tmp_path / "raw.txt.gz"], tmp_path / "gz")
    plain = read_split(tmp_path / "plain", "train")
    assert len(plain) == 40 and plain == read_split(tmp_path / "gz", "train")


def test_shards_rotate_at_sentences_per_shard(tmp_path):
    raw = tmp_path / "raw.txt"
    write_articles(raw, numbered_articles(3))  # 12 sentences
    stats = prepare_corpus([raw], tmp_path / "out", sentences_per_shard=5)
    names = sorted(os.listdir(tmp_path / "out" / "train"))
    assert names == ["shard-00000.txt", "shard-00001.txt", "shard-00002.txt"]  # no temporary files left
    sizes = [len((tmp_path / "out" / "train" / n).read_text().splitlines()) for n in names]
    assert sizes == [5, 5, 2] and stats["train"]["shards"] == 3
    lines = read_split(tmp_path / "out", "train")
    assert lines[0] == "Article a0 starts here with words ." and lines[-1].endswith("a2 ?")
    # Tokens separated by single spaces, as in the 1B Word Benchmark.
    assert all(line == " ".join(line.split()) for line in lines)


def test_long_article_without_blank_lines_streams_to_one_split(tmp_path, monkeypatch):
    monkeypatch.setattr(prepare, "ARTICLE_KEY_CHARS", 200)  # decide after ~3 paragraphs
    paragraphs = [f"Paragraph number p{i} of one long article. It goes on." for i in range(40)]
    raw = tmp_path / "raw.txt"
    write_articles(raw, [paragraphs])
    with pytest.warns(UserWarning, match="has no shard"):  # one article: the other split is empty
        stats = prepare_corpus([raw], tmp_path / "out", heldout_fraction=0.5)
    split = "train" if stats["train"]["articles"] else "heldout"
    assert stats[split]["articles"] == 1 and stats[split]["paragraphs"] == 40
    lines = read_split(tmp_path / "out", split)
    assert len(lines) == 80 and lines[0].startswith("Paragraph number p0 ")  # order kept


def test_min_tokens_drops_short_sentences(tmp_path):
    raw = tmp_path / "raw.txt"
    write_articles(raw, [["Yes. This sentence is long enough. No!"]])
    stats = prepare_corpus([raw], tmp_path / "out", min_tokens=3)
    assert read_split(tmp_path / "out", "train") == ["This sentence is long enough ."]
    assert stats["train"]["dropped_sentences"] == 2 and stats["train"]["sentences"] == 1


def test_stats_file_records_options_and_counts(tmp_path):
    raw = tmp_path / "raw.txt"
    write_articles(raw, numbered_articles(5))
    stats = prepare_corpus([raw], tmp_path / "out", sentences_per_shard=7, min_tokens=2)
    saved = json.loads((tmp_path / "out" / "prepare.json").read_text())
    assert saved == stats
    assert saved["options"] == {"heldout_fraction": 0.0, "sentences_per_shard": 7, "lang": "en", "min_tokens": 2,
                                "wrapped": False}
    assert saved["train"]["tokens"] == sum(len(line.split()) for line in read_split(tmp_path / "out", "train"))
    assert saved["punkt_sample_chars"] > 0 and saved["inputs"] == [str(raw)]


def test_bad_utf8_names_file_and_line(tmp_path):
    raw = tmp_path / "raw.txt"
    raw.write_bytes(b"A good first paragraph.\n\nAnother good one.\nBad \xff byte here.\n")
    with pytest.raises(ValueError, match=re.escape(f"{raw}:4: not valid UTF-8")):
        prepare_corpus([raw], tmp_path / "out")


def test_replaces_its_own_output_only_with_overwrite(tmp_path):
    raw = tmp_path / "raw.txt"
    write_articles(raw, numbered_articles(2))
    prepare_corpus([raw], tmp_path / "out")
    before = tree(tmp_path / "out")
    with pytest.raises(FileExistsError, match="out: already exists; pass --force"):
        prepare_corpus([raw], tmp_path / "out")
    write_articles(raw, numbered_articles(3))
    prepare_corpus([raw], tmp_path / "out", overwrite=True)  # a whole new corpus, no shard of the old one left
    assert tree(tmp_path / "out") != before and tree(tmp_path / "out").keys() == before.keys()
    assert sorted(os.listdir(tmp_path)) == ["out", "raw.txt"]  # no temporary folder left beside it


def test_bad_options_are_refused(tmp_path):
    raw = tmp_path / "raw.txt"
    write_articles(raw, numbered_articles(1))
    with pytest.raises(ValueError, match="heldout_fraction"):
        prepare_corpus([raw], tmp_path / "out", heldout_fraction=1.5)
    with pytest.raises(ValueError, match="no rules for 'xx'"):
        prepare_corpus([raw], tmp_path / "out", lang="xx")
    with pytest.raises(FileNotFoundError, match="missing.txt: no such file"):
        prepare_corpus([raw, tmp_path / "missing.txt"], tmp_path / "out")


def test_cli_end_to_end(tmp_path, capsys):
    raw = tmp_path / "raw.txt.gz"
    write_articles(raw, numbered_articles(40))
    out = tmp_path / "out"
    assert main(["prepare", str(raw), "--output", str(out), "--heldout-fraction", "0.5",
                 "--sentences-per-shard", "30", "--min-tokens", "2"]) == 0
    assert "sentences" in capsys.readouterr().err
    stats = json.loads((out / "prepare.json").read_text())
    assert stats["options"] == {"heldout_fraction": 0.5, "sentences_per_shard": 30, "lang": "en", "min_tokens": 2,
                                "wrapped": False}
    assert stats["train"]["sentences"] + stats["heldout"]["sentences"] == 160
    assert len(read_split(out, "train")) == stats["train"]["sentences"] > 0
    assert (out / "train" / "shard-00000.txt").is_file() and (out / "heldout" / "shard-00000.txt").is_file()


def test_cli_reports_bad_input_in_one_line(tmp_path, capsys):
    raw = tmp_path / "raw.txt"
    raw.write_bytes(b"Fine.\n\xc3\x28 broken\n")
    assert main(["prepare", str(raw), "--output", str(tmp_path / "out")]) == 2
    assert f"elmo prepare: error: {raw}:2: not valid UTF-8" in capsys.readouterr().err


def test_unwrap_joins_hard_wrapped_lines_into_paragraphs_and_documents():
    lines = ["", "", "CHAPTER I", "", "It was a dark and", "stormy night.  The rain", "fell.", "",
             "Then it stopped.", "", "", "", "A second book", "begins here.", ""]
    assert list(prepare.unwrap(lines)) == ["", "CHAPTER I", "It was a dark and stormy night.  The rain fell.",
                                           "Then it stopped.", "", "A second book begins here."]


def test_wrapped_text_keeps_its_sentences_whole(tmp_path):
    """Gutenberg-style text: read line by line, a sentence wrapped over two lines is cut in two;
    with --wrapped it stays whole, and two blank lines separate the documents."""
    book = tmp_path / "book.txt"
    book.write_text("It was the best of times, it was the worst\nof times, said the narrator.  Nobody\n"
                    "answered him.\n\nThe next day came.\n\n\nAnother book starts here and\nends here.\n")
    stats = prepare_corpus([book], tmp_path / "wrapped", wrapped=True)
    sentences = (tmp_path / "wrapped" / "train" / "shard-00000.txt").read_text().splitlines()
    assert sentences == ["It was the best of times , it was the worst of times , said the narrator .",
                         "Nobody answered him .", "The next day came .", "Another book starts here and ends here ."]
    assert stats["train"]["articles"] == 2 and stats["options"]["wrapped"] is True
    assert main(["prepare", str(book), "--output", str(tmp_path / "cli"), "--wrapped"]) == 0
    assert (tmp_path / "cli" / "train" / "shard-00000.txt").read_text().splitlines() == sentences
    prepare_corpus([book], tmp_path / "plain")
    assert "of times , said the narrator ." in (tmp_path / "plain" / "train" / "shard-00000.txt").read_text()


def test_unwrap_streams_text_without_blank_lines(monkeypatch):
    monkeypatch.setattr(prepare, "MAX_WRAPPED_PARAGRAPH_CHARS", 10)
    assert list(prepare.unwrap(["abcd", "efgh", "ijkl", "mn", "", "op"])) == ["abcd efgh ijkl", "mn", "op"]


def test_a_heldout_fraction_that_gives_no_heldout_shard_is_said(tmp_path, capsys):
    """Issue 45: a single-article corpus made no held-out shard and said nothing, so the README's
    next command (elmo evaluate --data 'OUT/heldout/*.txt') matched no file."""
    raw = tmp_path / "raw.txt"
    raw.write_text("One article only. It has two sentences.\nAnd a second paragraph here.\n")
    fraction = next(f for f in (0.02, 0.2, 0.5) if not prepare._is_heldout(
        ["One article only. It has two sentences.", "And a second paragraph here."], f))
    assert main(["prepare", str(raw), "--output", str(tmp_path / "out"), "--heldout-fraction", str(fraction)]) == 0
    err = capsys.readouterr().err
    assert (f"elmo prepare: warning: heldout_fraction (--heldout-fraction) {fraction}: every sentence went to train "
            f"and {tmp_path / 'out' / 'heldout'}/ has no shard: articles go whole to one split (by a hash of their "
            "text), and the input has 1 article(s); separate articles with a blank line") in err, err
    assert not list((tmp_path / "out").glob("heldout/*.txt")) and list((tmp_path / "out").glob("train/*.txt"))
    # No fraction asked for: nothing to say.
    assert main(["prepare", str(raw), "--output", str(tmp_path / "plain")]) == 0
    assert "warning" not in capsys.readouterr().err


_NLTK_TIMEOUT = "regular-expression match exceeded its 5.0s time limit; the text may be hostile"


def test_the_splitters_time_limit_in_training_names_the_inputs(tmp_path, monkeypatch):
    """NLTK bounds its regular expressions in time (TimeoutError): the training's refusal names the inputs."""
    src = tmp_path / "raw.txt"
    write_articles(src, numbered_articles(2))

    def gives_up(cls, paragraphs, lang="en", **kwargs):
        next(iter(paragraphs))
        raise TimeoutError(_NLTK_TIMEOUT)

    monkeypatch.setattr(ParagraphTokenizer, "train", classmethod(gives_up))
    with pytest.raises(ValueError) as refused:
        prepare_corpus([src], tmp_path / "out")
    message = str(refused.value)
    assert message.startswith(f"{src}: the sentence splitter's training gave up") and "5.0s time limit" in message
    assert "hostile" not in message and "\n" not in message and not (tmp_path / "out").exists()


def test_the_splitters_time_limit_on_a_paragraph_names_its_file_and_line(tmp_path, monkeypatch):
    src = tmp_path / "raw.txt"
    write_articles(src, [["A first paragraph. It is fine."], ["Then this one, on line 3, is too hard."]])
    real = ParagraphTokenizer.tokenize

    def hard_on_line_3(self, paragraph):
        if "line 3" in paragraph:
            raise TimeoutError(_NLTK_TIMEOUT)
        return real(self, paragraph)

    monkeypatch.setattr(ParagraphTokenizer, "tokenize", hard_on_line_3)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(src))}:3: the sentence splitter gave up on this paragraph "
                                         r"of 38 characters \(regular-expression match exceeded its 5.0s time limit\)"):
        prepare_corpus([src], tmp_path / "out")
    assert not (tmp_path / "out").exists()
