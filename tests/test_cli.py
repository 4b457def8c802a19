"""``elmo embed`` end to end, as a user runs it; and what every writing command does with what is
in the way of its output (folders it did not make, folders and devices where a file goes), and
the command line's own checks (torchrun's variables, --shard values)."""

import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest
from conftest import ALLENNLP, FIXTURES, fixture_batches, load_fixture_model, top_as_fixture

from elmo import Embedder
from elmo.cli.main import main

MODEL_ARGS = ["--options", str(ALLENNLP / "options.json"), "--weights", str(ALLENNLP / "lm_weights.hdf5")]


def test_stateful_cli_reproduces_fixture_and_layout(tmp_path):
    batches = fixture_batches("allennlp")
    lines = [" ".join(tokens) for batch, _ in batches for tokens in batch]
    expected = [e for _, exp in batches for e in exp]
    src = tmp_path / "input.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    # A real subprocess through the installed console script's module.
    result = subprocess.run([sys.executable, "-m", "elmo.cli.main", "embed", str(src), str(out), *MODEL_ARGS,
                             "--layers", "all", "--batch-size", "3", "--state", "stateful"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    with h5py.File(out, "r") as f:
        assert sorted(f.keys(), key=lambda k: (len(k), k)) == [str(i) for i in range(30)] + ["sentence_to_index"]
        index = json.loads(f["sentence_to_index"][0])
        assert f["sentence_to_index"].shape == (1,)
        for i, line in enumerate(lines):
            assert index[line] == str(i)
            data = f[str(i)]
            assert data.dtype == np.float32 and data.shape == (3, len(line.split()), 32)
            np.testing.assert_allclose(top_as_fixture(data[...]), expected[i], atol=1e-5, rtol=0)
    assert os.listdir(tmp_path) == ["input.txt", "out.hdf5"] or sorted(os.listdir(tmp_path)) == ["input.txt", "out.hdf5"]


@pytest.mark.parametrize("layers", ["top", "average"])
def test_single_vector_layers_and_empty_line(tmp_path, layers):
    src = tmp_path / "in.txt"
    src.write_text("a short line\n\nanother one here .\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    assert main(["embed", str(src), str(out), *MODEL_ARGS, "--layers", layers]) == 0
    with h5py.File(out, "r") as f:
        assert f["0"].shape == (3, 32)
        assert f["1"].shape == (0, 32)
        assert f["2"].shape == (4, 32)
        assert json.loads(f["sentence_to_index"][0]) == {"a short line": "0", "": "1", "another one here .": "2"}


def test_gzip_input(tmp_path):
    import gzip
    src = tmp_path / "in.txt.gz"
    with gzip.open(src, "wt", encoding="utf-8") as f:
        f.write("compressed input works\n")
    out = tmp_path / "out.hdf5"
    assert main(["embed", str(src), str(out), *MODEL_ARGS]) == 0
    with h5py.File(out, "r") as f:
        assert f["0"].shape == (3, 3, 32)


def test_invalid_utf8_names_the_line_and_writes_nothing(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_bytes(b"fine line\nanother fine line\nbroken \xff\xfe line\n")
    out = tmp_path / "out.hdf5"
    assert main(["embed", str(src), str(out), *MODEL_ARGS]) == 2
    err = capsys.readouterr().err
    assert f"{src}:3: not valid UTF-8" in err
    assert sorted(os.listdir(tmp_path)) == ["in.txt"]  # no output, no temporary left behind


def test_existing_output_survives_a_failed_run(tmp_path):
    src = tmp_path / "in.txt"
    src.write_bytes(b"ok\n\xff\n")
    out = tmp_path / "out.hdf5"
    out.write_bytes(b"previous results")
    assert main(["embed", str(src), str(out), *MODEL_ARGS]) == 2
    assert out.read_bytes() == b"previous results"


def test_bad_model_files_are_reported(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("x\n")
    bad_options = tmp_path / "options.json"
    bad_options.write_text('{"lstm": {"dim": 8, "projection_dim": 4, "n_layers": 1}, "char_cnn": {}}')
    code = main(["embed", str(src), str(tmp_path / "o.hdf5"), "--options", str(bad_options),
                 "--weights", str(ALLENNLP / "lm_weights.hdf5")])
    assert code == 2
    assert "options.json: char_cnn.embedding: missing" in capsys.readouterr().err
    code = main(["embed", str(tmp_path / "missing.txt"), str(tmp_path / "o.hdf5"), *MODEL_ARGS])
    assert code == 2
    assert "missing.txt" in capsys.readouterr().err


def test_batch_size_must_be_positive(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("x\n")
    assert main(["embed", str(src), str(tmp_path / "o.hdf5"), *MODEL_ARGS, "--batch-size", "0"]) == 2
    assert "--batch-size" in capsys.readouterr().err


def test_cache_vocab_then_embed_with_it(tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("the\ncat\nsat\n")
    cache = tmp_path / "cache.hdf5"
    assert main(["cache-vocab", str(words), str(cache), *MODEL_ARGS]) == 0
    src = tmp_path / "in.txt"
    src.write_text("the cat sat on a mat\n")
    plain, cached = tmp_path / "plain.hdf5", tmp_path / "cached.hdf5"
    assert main(["embed", str(src), str(plain), *MODEL_ARGS]) == 0
    assert main(["embed", str(src), str(cached), *MODEL_ARGS, "--vocab-cache", str(cache),
                 "--precision", "float32", "--max-tokens", "64"]) == 0
    with h5py.File(plain, "r") as a, h5py.File(cached, "r") as b:
        np.testing.assert_allclose(a["0"][...], b["0"][...], atol=1e-5, rtol=0)
    assert main(["embed", str(src), str(tmp_path / "bf.hdf5"), *MODEL_ARGS, "--precision", "bfloat16"]) == 0


def test_absurd_or_binary_options_get_one_line(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("a b\n")
    options = json.loads((ALLENNLP / "options.json").read_text())
    options["lstm"]["dim"] = 10**9
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps(options))
    weights = str(ALLENNLP / "lm_weights.hdf5")
    assert main(["embed", str(src), "--options", str(huge), "--weights", weights]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "huge.json: lstm.dim: 1000000000 makes a biLM of" in err and "GiB" in err
    assert main(["embed", str(src), "--options", weights, "--weights", weights]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "lm_weights.hdf5: not an options.json: this is an HDF5 file" in err


# ----------------------------------------------------------- what is in the way of an output
def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_embed_refuses_a_folder_or_a_device_as_output_before_embedding(tmp_path, capsys, monkeypatch):
    src = tmp_path / "in.txt"
    src.write_text("a few words\nand more\n")
    (tmp_path / "out").mkdir()
    os.mkfifo(tmp_path / "fifo.hdf5")
    import elmo.inference.embed_file

    def no_embedding(*args, **kwargs):
        raise AssertionError("embedded before the output was checked")

    monkeypatch.setattr(elmo.inference.embed_file.FileEmbedder, "_embed_into_journal", no_embedding)
    for flags in ([], ["--force"]):
        assert main(["embed", str(src), str(tmp_path / "out"), *MODEL_ARGS, *flags]) == 2
        line = _one_line(capsys)
        assert f"{tmp_path / 'out'}: a folder is in the way of the output file" in line, line
        assert main(["embed", str(src), str(tmp_path / "fifo.hdf5"), *MODEL_ARGS, *flags]) == 2
        line = _one_line(capsys)
        assert "fifo.hdf5: a device, a pipe or a name under /dev or /proc, where this output must be a file" in line, line
    # The same through the Python API, which the command goes through.
    with pytest.raises(IsADirectoryError, match="a folder is in the way"):
        Embedder(load_fixture_model("allennlp")).embed_file(src, tmp_path / "out", overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["fifo.hdf5", "in.txt", "out"]  # no .partial left behind
    assert os.listdir(tmp_path / "out") == []


def test_sharded_embed_writes_only_into_a_folder_it_made(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("one\ntwo\nthree\n")
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep me")
    assert main(["embed", str(src), str(user), *MODEL_ARGS, "--shard", "0/2"]) == 2
    line = _one_line(capsys)
    assert f"{user}: a folder elmo did not make (it holds notes.txt" in line and "choose another output" in line, line
    assert os.listdir(user) == ["notes.txt"]
    out = tmp_path / "shards"
    for rank in (0, 1):
        assert main(["embed", str(src), str(out), *MODEL_ARGS, "--shard", f"{rank}/2"]) == 0
    assert sorted(os.listdir(out)) == [".elmo-owner", "manifest.json", "shard-00000-of-00002.hdf5",
                                       "shard-00001-of-00002.hdf5"]


def test_torchrun_variables_half_set_are_refused(tmp_path, capsys, monkeypatch):
    src = tmp_path / "in.txt"
    src.write_text("x\n")
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["embed", str(src), str(tmp_path / "o.hdf5"), *MODEL_ARGS]) == 2
    assert _one_line(capsys) == ("elmo embed: error: WORLD_SIZE=2 is set but RANK is not: torchrun sets both for each "
                                 "process; set RANK too, or unset WORLD_SIZE to run one process")
    monkeypatch.setenv("WORLD_SIZE", "1")  # one process, whatever else: as without torchrun
    assert main(["embed", str(src), str(tmp_path / "o.hdf5"), *MODEL_ARGS]) == 0
    assert not (tmp_path / "o.hdf5.partial").exists()


@pytest.mark.parametrize("shard, message", [("-1/2", "--shard: rank -1 of 2: expected 0 <= RANK < WORLD"),
                                            ("-0/2x", "--shard: expected RANK/WORLD (e.g. 0/4), got '-0/2x'")])
def test_a_shard_value_starting_with_a_dash_gets_the_shard_check(tmp_path, capsys, shard, message):
    src = tmp_path / "in.txt"
    src.write_text("x\n")
    assert main(["embed", str(src), str(tmp_path / "out"), *MODEL_ARGS, "--shard", shard]) == 2
    assert _one_line(capsys) == f"elmo embed: error: {message}"


def test_cache_vocab_replaces_a_file_only_with_force_and_never_a_folder(tmp_path, capsys):
    words = tmp_path / "words.txt"
    words.write_text("the\ncat\n")
    cache = tmp_path / "cache.hdf5"
    cache.write_bytes(b"someone's file")
    assert main(["cache-vocab", str(words), str(cache), *MODEL_ARGS]) == 2
    assert f"{cache}: already exists; pass --force" in _one_line(capsys)
    assert cache.read_bytes() == b"someone's file"
    assert main(["cache-vocab", str(words), str(cache), *MODEL_ARGS, "--force"]) == 0
    assert h5py.is_hdf5(cache)
    capsys.readouterr()
    (tmp_path / "folder").mkdir()
    assert main(["cache-vocab", str(words), str(tmp_path / "folder"), *MODEL_ARGS, "--force"]) == 2
    assert f"{tmp_path / 'folder'}: a folder is in the way of the output file" in _one_line(capsys)


@pytest.mark.parametrize("to", ["bilm-tf", "manylangs"])
def test_convert_force_never_replaces_a_folder_holding_a_users_file(tmp_path, capsys, to):
    if to == "bilm-tf":
        source = tmp_path / "model"
        source.mkdir()
        shutil.copy(ALLENNLP / "options.json", source / "options.json")
        shutil.copy(ALLENNLP / "lm_weights.hdf5", source / "weights.hdf5")
    else:
        source = FIXTURES / "manylangs" / "model"
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    argv = ["convert", str(source), str(out), "--to", to, "--force"]
    assert main(argv) == 2
    line = _one_line(capsys)
    assert line.startswith(f"elmo convert: error: {out}: a folder elmo did not make (it holds notes.txt"), line
    assert os.listdir(out) == ["notes.txt"]
    os.remove(out / "notes.txt")
    assert main(argv) == 0  # an empty folder: nothing to lose
    capsys.readouterr()
    written = sorted(os.listdir(out))
    assert ".elmo-owner" in written
    assert main(argv[:-1]) == 2 and "already exists; pass --force" in _one_line(capsys)
    assert main(argv) == 0  # one elmo made: replaced
    capsys.readouterr()
    assert sorted(os.listdir(out)) == written
    # ... but not once it holds anything else.
    (out / "notes.txt").write_text("keep me")
    assert main(argv) == 2
    assert f"{out}: holds notes.txt, which elmo did not write there" in _one_line(capsys)
    assert (out / "notes.txt").read_text() == "keep me"
    # A folder written before the marker existed, holding only what elmo writes there: recognised.
    os.remove(out / "notes.txt")
    os.remove(out / ".elmo-owner")
    assert main(argv) == 0
    capsys.readouterr()
    assert sorted(os.listdir(out)) == written
    # A native checkpoint is a file: a folder in its place is refused, before the model loads.
    assert main(["convert", str(source), str(out), "--to", "elmo", "--force"]) == 2
    assert f"{out}: a folder is in the way of the checkpoint file" in _one_line(capsys)


@pytest.mark.parametrize("verb, function, options", [
    ("prepare", "elmo.training.prepare:prepare_corpus",
     {"heldout_fraction": "heldout_fraction", "sentences_per_shard": "sentences_per_shard", "lang": "lang",
      "min_tokens": "min_tokens"}),
    ("convert", "elmo.hub.convert:convert_model", {"to": "to", "dtype": "dtype"}),
    ("vocab", "elmo.model.vocab:build_vocabulary", {"min_count": "min_count", "max_size": "max_size"}),
    ("neighbours", "elmo.inference.neighbours:contextual_neighbours", {"k": "k"}),
    ("embed", "elmo.inference.embed_file:FileEmbedder",
     {"layers": "layers", "layout": "layout", "dtype": "dtype", "compression": "compression",
      "max_line_tokens": "max_line_tokens"}),
    ("embed", "elmo.inference.embed:Embedder", {"batch_size": "batch_size", "max_tokens": "max_tokens",
                                                "state": "state", "precision": "precision"}),
])
def test_an_options_default_is_the_librarys(verb, function, options):
    """One source for every default: each option takes the default of the argument it stands for."""
    import argparse
    import importlib
    import inspect

    from elmo.cli.main import VERBS

    module_name, name = function.split(":")
    signature = inspect.signature(getattr(importlib.import_module(module_name), name))
    parser = argparse.ArgumentParser()
    importlib.import_module(f"elmo.cli.{VERBS[verb]}").add_parser(parser)
    for option, argument in options.items():
        assert parser.get_default(option) == signature.parameters[argument].default, (verb, option)


def test_task_models_default_to_their_settings():
    """A task model built without arguments has its [model] settings' defaults (SRL's layers,
    BiDAF's and the sentence classifier's dropout included)."""
    import dataclasses
    import inspect

    from elmo.tasks.base import ModelSettings
    from elmo.tasks.classification import SentenceClassifier
    from elmo.tasks.coref import CorefModel, CorefSettings
    from elmo.tasks.entailment import ESIM
    from elmo.tasks.qa import BiDAF, QaSettings
    from elmo.tasks.relatedness import RelatednessESIM
    from elmo.tasks.srl import SrlSettings, SrlTagger
    from elmo.tasks.tagging import Tagger, TaggingSettings

    for model, settings in [(SentenceClassifier, ModelSettings), (ESIM, ModelSettings),
                            (RelatednessESIM, ModelSettings), (BiDAF, QaSettings), (SrlTagger, SrlSettings),
                            (Tagger, TaggingSettings), (CorefModel, CorefSettings)]:
        defaults = {f.name: f.default for f in dataclasses.fields(settings)}
        parameters = inspect.signature(model).parameters
        shared = [name for name in parameters if name in defaults]
        assert {"hidden", "dropout"} <= set(shared), model
        for name in shared:
            assert parameters[name].default == defaults[name], (model.__name__, name)
    assert inspect.signature(SrlTagger).parameters["layers"].default == 1
    assert inspect.signature(BiDAF).parameters["dropout"].default == 0.5


BLOCKED_IMPORT = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # as if the optional extra were not installed
from elmo.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("blocked,argv,extra", [
    ("nltk,sacremoses", ["prepare", "examples/sentences.txt", "--output", "OUT"], "train"),
    ("scorch,seqeval,conllu", ["task", "train", "configs/tasks/ner.toml"], "tasks"),
])
def test_a_verb_without_its_extra_names_the_extra(tmp_path, blocked, argv, extra):
    """The core install embeds; the task and text-preparation packages come with extras, and a
    verb that needs a missing one says which to install, in one line (exit status 2)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    done = subprocess.run([sys.executable, "-c", BLOCKED_IMPORT, blocked, *argv], capture_output=True, text=True,
                          cwd=root)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().endswith(f"pip install 'elmo-embeddings[{extra}]'"), done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_bfloat16_hint_is_one_line_only_where_it_applies(tmp_path, capsys, monkeypatch):
    """On a CPU with bfloat16 instructions, a long input embedded in float32 with the progress
    output on gets one line telling of --precision bfloat16; not with bfloat16 asked for, not
    without the progress output, not on a short input, not on a CPU without the instructions."""
    import elmo.cli.embed as embed_cli

    monkeypatch.setattr(embed_cli, "BFLOAT16_HINT_BYTES", 200)
    flags = {"avx512f", "avx512_bf16"}
    monkeypatch.setattr(embed_cli, "cpu_flags", lambda: flags)
    long_input, short_input = tmp_path / "long.txt", tmp_path / "short.txt"
    long_input.write_text("the cat sat on the mat .\n" * 10)  # 250 bytes
    short_input.write_text("the cat sat\n")

    def hints(src, *extra):
        assert main(["embed", str(src), str(tmp_path / "out.hdf5"), "--force", *MODEL_ARGS, *extra]) == 0
        return [line for line in capsys.readouterr().err.splitlines() if "--precision bfloat16" in line]

    (line,) = hints(long_input, "--progress")
    assert "avx512_bf16" in line and "cosine" in line and "float32, the default, is exact" in line
    assert hints(long_input, "--progress", "--precision", "float32")  # asked for explicitly: still told
    assert not hints(long_input, "--progress", "--precision", "bfloat16")
    assert not hints(long_input, "--no-progress")
    assert not hints(short_input, "--progress")
    flags.clear()  # a CPU without bfloat16 instructions
    assert not hints(long_input, "--progress")


GC_AFTER_IMPORT = """
import gc, sys
if sys.argv[1] == "off":
    gc.disable()
mine = [[] for _ in range(1000)]
if sys.argv[1] == "frozen":
    gc.freeze()
frozen_before = gc.get_freeze_count()
import elmo
elmo.Embedder  # the API, and PyTorch with it, loads on first use
print(gc.isenabled(), frozen_before, gc.get_freeze_count(), gc.get_count()[0])
"""


@pytest.mark.parametrize("collector", ["on", "off", "frozen"])
def test_importing_elmo_leaves_the_collector_as_it_was_and_freezes_nothing(collector):
    """The first use of elmo's API holds the cyclic collector off while PyTorch loads, then puts what the
    imports made in the oldest generation: the collector is on or off as the program had it,
    nothing stays frozen, and no young collection is left to walk the imports' objects. What the
    program froze itself stays frozen."""
    done = subprocess.run([sys.executable, "-c", GC_AFTER_IMPORT, collector], capture_output=True, text=True,
                          check=True)
    enabled, frozen_before, frozen, young = done.stdout.split()
    assert enabled == str(collector != "off")
    if collector == "frozen":
        # Nothing of the program's was unfrozen (a few frozen objects are freed by the imports).
        assert int(frozen) > int(frozen_before) // 2 > 0
    else:
        assert frozen == "0"
        assert int(young) < 1000, young  # a million objects were made: none are waiting in the youngest generation


def test_the_command_line_freezes_its_imports_but_a_call_from_python_does_not(tmp_path):
    import gc

    text = tmp_path / "words.txt"
    text.write_text("a b c\n", encoding="utf-8")
    before = gc.get_freeze_count()
    assert main(["vocab", str(text), "--output", str(tmp_path / "vocab.txt")]) == 0
    assert gc.get_freeze_count() == before
    script = ("import gc, sys; from elmo.cli.main import main; sys.argv = ['elmo', 'vocab', sys.argv[1], "
              "'--output', sys.argv[2]]; code = main(); print(code, gc.get_freeze_count() > 0)")
    done = subprocess.run([sys.executable, "-c", script, str(text), str(tmp_path / "vocab2.txt")],
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["0", "True"]


def test_a_refusal_on_the_command_line_names_options_not_python_arguments(tmp_path, capsys):
    """The library's message says "--force (overwrite=True)"; the command says "--force" alone."""
    words = tmp_path / "words.txt"
    words.write_text("the\ncat\n")
    cache = tmp_path / "cache.hdf5"
    cache.write_bytes(b"someone's file")
    assert main(["cache-vocab", str(words), str(cache), *MODEL_ARGS]) == 2
    line = _one_line(capsys)
    assert line.endswith(f"{cache}: already exists; pass --force to replace it"), line
    assert "overwrite=" not in line
    from elmo.cli.main import command_line_words

    assert command_line_words("use --resume (resume=True), or start over with --force (overwrite=True)") == \
        "use --resume, or start over with --force"


@pytest.mark.parametrize("argv, hint", [
    (["embed", "-", "--batchsize", "4"], "(--batchsize: did you mean --batch-size?)"),
    (["embed", "-", "--frce"], "(--frce: did you mean --force?)"),
    (["vocab", "x.txt", "--output", "v.txt", "--max-sise=5"], "(--max-sise: did you mean --max-size?)"),
    (["embed", "-", "--zzzzzzzz"], None),
])
def test_a_mistyped_option_gets_the_verbs_usage_and_the_closest_option(argv, hint, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: elmo {argv[0]} "), err  # the verb's usage, not the top-level one
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"elmo {argv[0]}: error: unrecognized arguments: "), last
    if hint is None:
        assert "did you mean" not in last
    else:
        assert last.endswith(hint), last


def test_importing_a_submodule_first_loads_the_api_under_the_collector_hold():
    """``import elmo`` is light, but importing any heavier module of it first loads the API with
    the collector held, as ``import elmo`` did before it became lazy: nothing waits in the youngest
    generation afterwards, and the API's names are there."""
    code = ("import gc, sys; from elmo.inference.embed import Embedder; import elmo; "
            "print('Embedder' in vars(elmo), gc.get_count()[0] < 1000, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True", "True"]
