"""ELMoForManyLangs models, natively: the numbers of their reference implementation, their output
layers, conversion, and every way their files can be malformed."""

import io
import json
import pickle
import re
import shutil
import warnings
import zipfile

import h5py
import numpy as np
import pytest
import torch
from conftest import FIXTURES, assert_gradients_close, bounded_load, cache_files, zip_with_bomb

from elmo import BiLM, BiLMConfig, CharCNNConfig, Embedder, LSTMConfig, save_checkpoint
from elmo.cli.main import main
from elmo.hub import load_model
from elmo.hub.archives import ArchiveError
from elmo.hub.checkpoints import load_checkpoint
from elmo.hub.convert import ConversionError, convert_model, to_byte_scheme
from elmo.hub.manylangs import ManyLangsError, load_manylangs, save_manylangs
from elmo.inference.vocab_cache import load_vocab_cache, save_vocab_cache
from elmo.model.dictionary import (
    STRIPPED_TOKEN,
    CharacterDictionary,
    DictionaryError,
    parse_dictionary,
)

MANYLANGS = FIXTURES / "manylangs"
MODEL = MANYLANGS / "model"
SENTENCES = json.loads((MANYLANGS / "sentences.json").read_text(encoding="utf-8"))
# Their LSTM and highway are written differently (gate order, forget bias, the highway's gate on
# the input): float32 rounding differs, by at most 6e-6 on these vectors (values up to 9.6).
ATOL = 2e-5


def expected(kind: str = "layers"):
    with h5py.File(MANYLANGS / "expected.hdf5", "r") as f:
        return [f[f"{kind}/{i}"][...] for i in range(len(SENTENCES))]


@pytest.fixture(scope="module")
def model():
    return load_manylangs(MODEL)


def assert_close(got, want, atol=ATOL):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=0, atol=atol)


def copy_model(tmp_path, name="model"):
    target = tmp_path / name
    shutil.copytree(MODEL, target)
    return target


# -------------------------------------------------------------------------------- their numbers
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
def test_reproduces_their_implementation(model, fast):
    """Their Embedder's first batch starts from zero state: ``state="reset"``."""
    model.fast = fast
    try:
        assert_close(Embedder(model, state="reset").embed_sentences(SENTENCES), expected())
    finally:
        model.fast = True


def test_their_output_layers(model):
    embedder = Embedder(model, state="reset", batch_size=2)  # batching does not matter here
    layers = expected()
    for index in (0, 1, 2):  # their output_layer 0, 1, 2
        assert_close(embedder.embed_sentences(SENTENCES, layers=index), [a[index] for a in layers])
    # their output_layer -1, the average of the three
    assert_close(embedder.embed_sentences(SENTENCES, layers="average"), expected("average"))


def test_zip_and_released_layout(tmp_path):
    # Zipped inside a folder, as downloads often are.
    archive = tmp_path / "144.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for path in MODEL.iterdir():
            z.write(path, f"en.model/{path.name}")
    assert_close(Embedder.from_pretrained(str(archive), state="reset").embed_sentences(SENTENCES), expected())
    # The released models: config_path names a file on their authors' machine, and no
    # architecture file comes with them. The sizes come from the weights.
    folder = copy_model(tmp_path, "released")
    (folder / "cnn_tiny.json").unlink()
    run = json.loads((folder / "config.json").read_text())
    run["config_path"] = "/users4/conll18st/elmo/src/configs/cnn_50_100_512_4096_sample.json"
    (folder / "config.json").write_text(json.dumps(run))
    with pytest.warns(UserWarning, match="config_path .* is neither a file relative to the model"):
        released = load_model(str(folder))
    assert_close(Embedder(released, state="reset").embed_sentences(SENTENCES), expected())


def test_cli_embed_their_layers(tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("\n".join(" ".join(s) for s in SENTENCES[:3]) + "\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    assert main(["embed", str(text), str(out), "--model", str(MODEL), "--state", "reset", "--layers", "0"]) == 0
    with h5py.File(out, "r") as f:
        assert_close([f[str(i)][...] for i in range(3)], [a[0] for a in expected()[:3]])
    assert main(["embed", str(text), str(out), "--force", "--model", str(MODEL), "--state", "reset",
                 "--layers", "average"]) == 0
    with h5py.File(out, "r") as f:
        assert_close([f[str(i)][...] for i in range(3)], expected("average")[:3])
    with pytest.raises(SystemExit):
        main(["embed", str(text), str(out), "--model", str(MODEL), "--layers", "-1"])


def test_token_memo_vocab_cache_and_elmo(tmp_path, model):
    """The runtime's shortcuts see the model's own scheme: a literal "<S>" is a word here, and
    the vocabulary cache is tied to the dictionaries as well as the weights."""
    sentences = [["<S>", "cat", "</S>"], ["cat", "<bos>"]]
    plain = Embedder(model, state="reset", token_memo=0).embed_sentences(sentences)
    memo = Embedder(model, state="reset")
    memo.embed_sentences(SENTENCES)  # fills the memo with other words first
    assert_close(memo.embed_sentences(sentences), plain, atol=1e-5)  # other batches: rounding only
    cache = tmp_path / "cache.hdf5"
    save_vocab_cache(model, ["cat", "<S>", "mat"], cache)
    cached = Embedder(model, state="reset", vocab_cache=cache).embed_sentences(sentences)
    assert_close(cached, plain, atol=1e-5)
    swapped = dict(model.characters.chars)
    swapped["c"], swapped["a"] = swapped["a"], swapped["c"]
    other = CharacterDictionary(swapped, model.characters.words, model.characters.max_chars)
    with pytest.raises(ValueError, match="different model"):
        load_vocab_cache(cache, BiLM(model.config, characters=other))
    from elmo import Elmo

    elmo = Elmo(model, state="reset", dropout=0.0)
    out = elmo.embed(SENTENCES[:2])
    assert out.representations[0].shape == (2, 7, 16)


# ---------------------------------------------------------------------------- formats both ways
def test_native_checkpoint_and_their_format_round_trip(tmp_path, model):
    reference = Embedder(model, state="reset").embed_sentences(SENTENCES)
    save_checkpoint(model, tmp_path / "m.pt")
    again, _ = load_checkpoint(tmp_path / "m.pt")
    assert again.characters == model.characters
    assert_close(Embedder(again, state="reset").embed_sentences(SENTENCES), reference, atol=0)
    assert_close(Embedder.from_pretrained(str(tmp_path / "m.pt"), state="reset").embed_sentences(SENTENCES),
                 reference, atol=0)
    save_manylangs(model, tmp_path / "theirs")
    assert_close(Embedder(load_manylangs(tmp_path / "theirs"), state="reset").embed_sentences(SENTENCES),
                 reference, atol=1e-6)
    # Their files are plain state dicts in PyTorch 0.4's serialisation, and their reader parses
    # the dictionaries back to the same entries.
    assert not zipfile.is_zipfile(tmp_path / "theirs" / "encoder.pkl")
    original = parse_dictionary((MODEL / "char.dic").read_text(encoding="utf-8"), "a")
    assert parse_dictionary((tmp_path / "theirs" / "char.dic").read_text(encoding="utf-8"), "b") == original


def test_convert_to_bilm_tf_says_why_not(tmp_path, capsys):
    with pytest.raises(ConversionError) as caught:
        convert_model(str(MODEL), tmp_path / "out")
    message = str(caught.value)
    assert "word embedding: each token's input to the projection is a 6-dim word vector (30 words)" in message
    assert "Linear(18, 8)" in message  # what AllenNLP builds in its place
    assert "characters: char.dic holds" in message and "outside ASCII" in message
    assert not (tmp_path / "out").exists()
    assert main(["convert", str(MODEL), str(tmp_path / "out")]) == 2
    assert "word embedding" in capsys.readouterr().err
    # A bilm-tf model has no ELMoForManyLangs form.
    with pytest.raises(ConversionError, match="UTF-8 bytes"):
        convert_model("default", tmp_path / "theirs", to="manylangs")
    # The native checkpoint holds it.
    assert main(["convert", str(MODEL), str(tmp_path / "m.pt"), "--to", "elmo"]) == 0
    assert load_model(str(tmp_path / "m.pt")).characters == load_manylangs(MODEL).characters


def ascii_dictionary_model(word_dim: int = 0, filters=((1, 4), (2, 6), (3, 8))) -> BiLM:
    """A random ELMoForManyLangs-style model whose character dictionary is ASCII (their special
    tokens spread between the characters, as their training orders them)."""
    chars = {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz.,!? ")}
    chars = {k: v for k, v in chars.items() if k != " "}
    for special in ("<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>"):
        chars[special] = len(chars)
    words = {"<oov>": 0, "<bos>": 1, "<eos>": 2, "<pad>": 3, "the": 4} if word_dim else None
    config = BiLMConfig(char_cnn=CharCNNConfig(embedding_dim=5, filters=list(filters), n_highway=2,
                                               n_characters=len(chars), characters="dictionary", word_dim=word_dim,
                                               n_words=len(words) if words else 0),
                        lstm=LSTMConfig(dim=16, projection_dim=8, n_layers=2, cell_clip=3, proj_clip=3))
    torch.manual_seed(3)
    model = BiLM(config, characters=CharacterDictionary(chars, words, 50)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    return model


def test_convert_where_the_architecture_fits(tmp_path):
    """No word embedding and an ASCII dictionary: the same numbers in the bilm-tf layout, for
    ASCII text (characters the dictionary lacks included)."""
    source = ascii_dictionary_model()
    save_manylangs(source, tmp_path / "theirs")
    result = convert_model(str(tmp_path / "theirs"), tmp_path / "bilmtf")
    assert any("identical vectors for ASCII text" in note for note in result.notes)
    converted = load_model(str(tmp_path / "bilmtf"))
    assert converted.config.char_cnn.characters == "bytes"
    text = [["the", "cat", "sat", "."], ["Zebra", "QUIZ", "x" * 60], ["hello", "world", "!", "?", "~"]]
    want = Embedder(source, state="reset").embed_sentences(text)
    assert_close(Embedder(converted, state="reset").embed_sentences(text), want, atol=1e-6)
    # Outside ASCII the two schemes part: one <oov> slot there, one per UTF-8 byte here.
    differ = Embedder(converted, state="reset").embed_sentence(["naïve"])
    assert not np.allclose(differ, Embedder(source, state="reset").embed_sentence(["naïve"]), atol=1e-4)
    # What does not fit is named.
    with pytest.raises(ConversionError, match="projection: ELMoForManyLangs always projects"):
        to_byte_scheme(ascii_dictionary_model(filters=((1, 4), (2, 4))))
    with pytest.raises(ConversionError, match="word embedding"):
        to_byte_scheme(ascii_dictionary_model(word_dim=3))


# ---------------------------------------------------------------------------------- dictionaries
def test_dictionary_reader_follows_theirs():
    text = "a\t0\n \t1\nb\t2\u2028c\t3\n"  # a stripped space becomes U+3000; U+2028 ends a line
    assert parse_dictionary(text, "x") == {"a": 0, STRIPPED_TOKEN: 1, "b": 2, "c": 3}
    with pytest.raises(DictionaryError, match=r"char\.dic:2: the id 'x' is not an integer"):
        parse_dictionary("a\t0\nb\tx\n", "char.dic")
    with pytest.raises(DictionaryError, match=r"char\.dic:1: expected 'token<TAB>id'"):
        parse_dictionary("a\tb\t0\n", "char.dic")


def test_token_ids_follow_their_batcher(model):
    chars = model.characters
    ids = chars.token_ids("x" * 60)
    word = "x" * 48  # cut to max_chars - 2 before the word lookup and the characters
    assert ids[0] == chars.words.get(word, chars.words["<oov>"]) + 1
    assert ids[1] == chars.chars["<eow>"] + 1 and ids[50] == chars.chars["<bow>"] + 1  # their marker order
    assert (chars.token_ids("<eos>") == chars.eos_ids).all()  # a literal <eos> is their marker
    assert chars.token_ids("a\u3000b")[3] == chars.chars[STRIPPED_TOKEN] + 1
    assert chars.token_ids("a b")[3] == chars.chars["<oov>"] + 1  # the space itself became U+3000


# -------------------------------------------------------------------------------------- malformed
class Boom:
    """A pickle payload that would run code if unpickled."""

    def __reduce__(self):
        return (exec, ("open('PWNED', 'w').write('x')",))


@pytest.mark.parametrize("case,expected", [
    ("code", r"token_embedder\.pkl: holds Python objects that elmo never runs \(its pickle imports builtins\.exec\)"),
    ("not a dict", r"token_embedder\.pkl: expected a state dict .*got list"),
    ("not torch", r"encoder\.pkl: not a PyTorch file \(it starts with b'\\x89HDF"),
    ("truncated", r"encoder\.pkl: not a readable PyTorch file: damaged or truncated \(EOFError"),
    ("truncated new format", r"encoder\.pkl: not a readable PyTorch file: damaged or truncated"),
    ("binary config", r"config\.json: not UTF-8 text"),
    ("no word.dic", r"word\.dic: missing; the model has a word embedding"),
    ("missing tensor", r"encoder\.pkl: tensor 'backward_layer_1\.state_projection\.weight' is missing"),
    ("wrong shape", r"token_embedder\.pkl: tensor 'projection\.weight' has shape \(8, 23\), expected \(8, 24\)"),
    ("extra tensor", r"token_embedder\.pkl: unexpected tensor 'char_lstm\.weight_ih_l0'"),
    ("nan", r"encoder\.pkl: tensor 'forward_layer_0\.input_linearity\.weight' holds 1 NaN"),
    ("missing member", r"model/encoder\.pkl: missing"),
    ("bad dictionary", r"char\.dic:3: the id 'three' is not an integer"),
    ("dictionary id too large", r"char\.dic: id 99 of 'q' is outside the character embedding"),
    ("no pad", r"char\.dic: missing the special character\(s\) <pad>"),
    ("lstm embedder", r"token_embedder\.name is 'lstm': only their 'cnn' token embedder"),
    ("lstm encoder", r"encoder\.name is 'lstm': only their 'elmo' encoder"),
    ("size mismatch", r"dim is 32, but the weights have 16"),
    ("bad json", r"config\.json: not valid JSON"),
    ("deep json", r"config\.json: its JSON is nested too deeply to read"),  # issue 60
])
def test_malformed_models_name_file_and_entry(tmp_path, monkeypatch, case, expected):
    folder = copy_model(tmp_path)
    monkeypatch.chdir(tmp_path)

    def tensors(name):
        return torch.load(folder / name, weights_only=True)

    def save(name, payload):
        torch.save(payload, folder / name)

    def edit_architecture(section, key, value):
        arch = json.loads((folder / "cnn_tiny.json").read_text())
        arch[section][key] = value
        (folder / "cnn_tiny.json").write_text(json.dumps(arch))

    if case == "code":
        # Protocol 2, as PyTorch 0.4 wrote (a newer protocol is refused at its first opcode)
        (folder / "token_embedder.pkl").write_bytes(pickle.dumps({"w": Boom()}, protocol=2))
    elif case == "not a dict":
        save("token_embedder.pkl", list(tensors("token_embedder.pkl").values()))
    elif case == "not torch":
        (folder / "encoder.pkl").write_bytes(b"\x89HDF\r\n\x1a\nnot a pickle")
    elif case == "truncated":
        (folder / "encoder.pkl").write_bytes((MODEL / "encoder.pkl").read_bytes()[:3000])
    elif case == "truncated new format":
        buffer = io.BytesIO()
        torch.save(tensors("encoder.pkl"), buffer)  # PyTorch's zip serialisation, cut short
        (folder / "encoder.pkl").write_bytes(buffer.getvalue()[:3000])
    elif case == "binary config":
        (folder / "config.json").write_bytes(b"\x89HDF\r\n\x1a\n\xff\xfe")
    elif case == "no word.dic":
        (folder / "word.dic").unlink()
    elif case == "missing tensor":
        t = tensors("encoder.pkl")
        del t["backward_layer_1.state_projection.weight"]
        save("encoder.pkl", t)
    elif case == "wrong shape":
        t = tensors("token_embedder.pkl")
        t["projection.weight"] = t["projection.weight"][:, 1:]
        save("token_embedder.pkl", t)
    elif case == "extra tensor":
        t = tensors("token_embedder.pkl")
        t["char_lstm.weight_ih_l0"] = torch.zeros(2, 2)
        save("token_embedder.pkl", t)
    elif case == "nan":
        t = tensors("encoder.pkl")
        t["forward_layer_0.input_linearity.weight"][0, 0] = float("nan")
        save("encoder.pkl", t)
    elif case == "missing member":
        (folder / "encoder.pkl").unlink()
    elif case == "bad dictionary":
        lines = (folder / "char.dic").read_text(encoding="utf-8").splitlines()
        lines[2] = "e\tthree"
        (folder / "char.dic").write_text("\n".join(lines) + "\n", encoding="utf-8")
    elif case == "dictionary id too large":
        with open(folder / "char.dic", "a", encoding="utf-8") as f:
            f.write("q\t99\n")
    elif case == "no pad":
        text = (folder / "char.dic").read_text(encoding="utf-8")
        (folder / "char.dic").write_text(text.replace("<pad>\t", "<pud>\t"), encoding="utf-8")
    elif case == "lstm embedder":
        edit_architecture("token_embedder", "name", "lstm")
    elif case == "lstm encoder":
        edit_architecture("encoder", "name", "lstm")
    elif case == "size mismatch":
        edit_architecture("encoder", "dim", 32)
    elif case == "bad json":
        (folder / "config.json").write_text("{not json")
    elif case == "deep json":
        (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises((ManyLangsError, ArchiveError, DictionaryError, ValueError), match=expected):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            load_model(str(folder))
    assert not (tmp_path / "PWNED").exists()


def zipped_model(archive, replace: dict | None = None):
    """The fixture model's files zipped flat into ``archive``, those named in ``replace`` (name ->
    contents) replaced."""
    replace = replace or {}
    with zipfile.ZipFile(archive, "w") as z:
        for path in MODEL.iterdir():
            if path.name not in replace:
                z.write(path, path.name)
        for name, contents in replace.items():
            z.writestr(name, contents)
    return archive


def test_code_in_a_zipped_pickle_is_refused_too(tmp_path):
    buffer = io.BytesIO()
    pickle.dump({"w": Boom()}, buffer)
    archive = zipped_model(tmp_path / "m.zip", {"encoder.pkl": buffer.getvalue()})
    with pytest.raises(ManyLangsError, match=r"m\.zip:encoder\.pkl: holds Python objects that elmo never runs \(its pickle imports builtins\.exec\)"):
        load_model(str(archive))


def test_a_native_checkpoint_without_its_dictionary_is_named(tmp_path, model):
    from elmo import WeightsError, save_checkpoint

    save_checkpoint(model, tmp_path / "m.pt")
    payload = torch.load(tmp_path / "m.pt", weights_only=True)
    del payload["characters"]
    torch.save(payload, tmp_path / "m.pt")
    with pytest.raises(WeightsError, match=r"m\.pt: the character dictionary is missing or malformed"):
        load_model(str(tmp_path / "m.pt"))


def test_allennlp_embedder_runs_their_model(tmp_path):
    """AllenNLP's ElmoEmbedder with their folder alone (or zipped) computes with their character
    dictionary; its first call starts from zero state, as their Embedder's batch does."""
    from elmo.allennlp import ElmoEmbedder

    want = expected()
    assert_close([ElmoEmbedder(str(MODEL)).embed_sentence(SENTENCES[0])], want[:1])
    archive = zipped_model(tmp_path / "m.zip")
    embedder = ElmoEmbedder(str(archive), state="reset")
    assert_close(list(embedder.embed_sentences(SENTENCES)), want)


@pytest.mark.parametrize("word_dim", [0, 3])
def test_training_encoder_over_distinct_words_equals_the_encoder_for_dictionary_models(word_dim):
    """The training path's token encoder (distinct words grouped by length, only the slots their
    characters reach) on a dictionary model's ids, with and without the word-id column: the plain
    encoder's values and gradients."""
    from elmo.kernels.encoder import distinct_words, encode_distinct

    model = ascii_dictionary_model(word_dim=word_dim)
    encoder = model.token_encoder
    ids, _ = model.characters.batch([["the", "cat", "x" * 60, "sat"], ["a", "", "zebra", "the"]])
    ids = torch.stack([ids, ids.flip(1)])  # two directions, as the language model stacks them
    words = distinct_words(ids, encoder.pad_id, word_dim > 0)
    assert words.groups[-1][0] == len(words.distinct) and len(words.groups) >= 2
    plain = encoder(ids.view(-1, *ids.shape[2:])).view(*ids.shape[:3], -1)
    grouped = encode_distinct(encoder, ids, words)
    torch.testing.assert_close(grouped, plain, rtol=0, atol=1e-5)
    torch.testing.assert_close(encode_distinct(encoder, ids), plain, rtol=0, atol=1e-5)  # words found here
    assert_gradients_close(grouped, plain, list(encoder.parameters()), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------- hostile archives
def test_member_parameters_are_what_the_state_dicts_hold():
    from elmo.hub.manylangs import member_parameters

    arch = json.loads((MODEL / "cnn_tiny.json").read_text())
    rows = {name: max(parse_dictionary((MODEL / name).read_text(encoding="utf-8"), name).values()) + 1
            for name in ("char.dic", "word.dic")}
    counts = member_parameters(arch, rows["char.dic"], rows["word.dic"])
    for name in ("token_embedder.pkl", "encoder.pkl"):
        assert counts[name] == sum(t.numel() for t in torch.load(MODEL / name, weights_only=True).values()), name


def released_zip(path, replace: dict[str, bytes] | None = None):
    """The fixture model zipped, its members replaced by ``replace``."""
    replace = replace or {}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for member in sorted(MODEL.iterdir()):
            if member.name not in replace:
                z.write(member, member.name)
        for name, data in replace.items():
            z.writestr(name, data)
    return path


class Evil:
    """Pickles as a call of print: pickling it runs nothing, unpickling it would print."""

    def __reduce__(self):
        return (print, ("this must never run",))


@pytest.mark.parametrize("zip_format", [True, False])
def test_code_in_a_state_dict_is_named_by_elmos_own_check(tmp_path, zip_format):
    buffer = io.BytesIO()
    torch.save({"w": torch.zeros(2), "evil": Evil()}, buffer, _use_new_zipfile_serialization=zip_format)
    archive = released_zip(tmp_path / "m.zip", {"token_embedder.pkl": buffer.getvalue()})
    with pytest.raises(ManyLangsError) as caught:
        load_model(str(archive))
    message = str(caught.value)
    assert message.startswith(f"{archive}:token_embedder.pkl: holds Python objects that elmo never runs (its pickle "
                              f"imports builtins.print)")
    assert "\n" not in message and "weights_only" not in message and "safe_globals" not in message


@pytest.mark.parametrize("case", ["past the bound", "at the bound", "not a pickle"])
def test_a_state_dict_bomb_is_read_from_a_bounded_stream(tmp_path, case):
    """A zipped .pkl member past what the architecture and dictionaries need is refused before it
    is read; one at the bound is read (memory: at most twice the bound) and refused as damaged;
    one that does not start as a pickle is refused at its first bytes."""
    margin = 16 * 2**20
    parameters = sum(t.numel() for t in torch.load(MODEL / "encoder.pkl", weights_only=True).values())
    bound = int(4 * parameters * 1.25) + margin
    size, head = {"past the bound": (512 * 2**20, b"\x80\x02"), "at the bound": (bound, b"\x80\x02"),
                  "not a pickle": (bound, b"\x89HDF\r\n\x1a\n")}[case]
    members = {p.name: p.read_bytes() for p in MODEL.iterdir() if p.name != "encoder.pkl"}
    bomb = zip_with_bomb(tmp_path / "bomb.zip", members, "encoder.pkl", head, size)
    result = bounded_load(MODEL, bomb, tmp_path / "cache", margin, fsize=2**30)
    expected = {"past the bound": rf"ArchiveError: .*bomb\.zip:encoder\.pkl: declares 536,870,912 bytes, more than "
                                  rf"the {bound:,} that encoder\.pkl of the architecture in .* can need",
                "at the bound": r"ManyLangsError: .*bomb\.zip:encoder\.pkl: not a readable PyTorch file: damaged",
                "not a pickle": r"ArchiveError: .*bomb\.zip:encoder\.pkl: not a PyTorch file \(it starts with "
                                r"b'\\x89HDF"}[case]
    assert re.match(expected, result["error"]), result
    assert "weights_only" not in result["error"]
    assert result["peak_growth"] < (2 * bound + 16 * 2**20 if case == "at the bound" else 16 * 2**20), result
    assert cache_files(tmp_path / "cache") == []


# ------------------------------------------------------------------------- config_path, as theirs
def tanh_model(tmp_path, name, config_path, where=None):
    """A copy of the fixture whose architecture (tanh: numbers unlike the published fallback's
    relu) sits at ``where`` (default: ``config_path`` under the model folder)."""
    folder = copy_model(tmp_path, name)
    arch = json.loads((folder / "cnn_tiny.json").read_text())
    arch["token_embedder"]["activation"] = "tanh"
    (folder / "cnn_tiny.json").unlink()
    target = where if where is not None else folder / config_path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(arch))
    run = json.loads((folder / "config.json").read_text())
    run["config_path"] = str(config_path)
    (folder / "config.json").write_text(json.dumps(run))
    return folder


def test_config_path_is_found_relative_to_the_model_or_absolute_as_their_loader_does(tmp_path):
    reference = Embedder(load_model(tanh_model(tmp_path, "root", "cnn_tiny.json")), state="reset")
    want = reference.embed_sentences(SENTENCES)
    elsewhere = tmp_path / "elsewhere" / "configs" / "cnn_tiny.json"
    folders = {
        "relative": tanh_model(tmp_path, "relative", "configs/cnn_tiny.json"),
        "absolute": tanh_model(tmp_path, "absolute", elsewhere, where=elsewhere),
    }
    archive = tmp_path / "relative.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for path in folders["relative"].rglob("*"):
            if path.is_file():
                z.write(path, f"en.model/{path.relative_to(folders['relative']).as_posix()}")
    folders["relative, zipped"] = archive
    for kind, source in folders.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # found: no fallback warning
            got = Embedder(load_model(str(source)), state="reset").embed_sentences(SENTENCES)
        assert_close(got, want, atol=0)
    # Where it is not there, the published (relu) architecture stands in, with the warning, and
    # the numbers are other ones: the lookup above is what made them right.
    missing = tanh_model(tmp_path, "missing", tmp_path / "nowhere" / "cnn_tiny.json",
                         where=tmp_path / "away" / "cnn_tiny.json")
    with pytest.warns(UserWarning, match="config_path .* is neither a file relative to the model nor an absolute"):
        fallback = Embedder(load_model(str(missing)), state="reset").embed_sentences(SENTENCES)
    assert max(float(np.abs(a - b).max()) for a, b in zip(fallback, want)) > 1e-2


def test_config_path_in_an_archive_never_leaves_it(tmp_path):
    archive = zipped_model(tmp_path / "escape.zip", {"config.json": json.dumps({"config_path": "../cnn_tiny.json"})})
    (tmp_path / "cnn_tiny.json").write_text("{not json")  # beside the archive: never read
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = load_model(str(archive))  # the base name at the archive's root is what it finds
    assert_close(Embedder(model, state="reset").embed_sentences(SENTENCES), expected())
