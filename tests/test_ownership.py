"""One ownership rule for every command that writes, and OS errors in elmo's words.

The rule (elmo.fileio): a file or folder elmo did not write is never replaced or deleted without
--force; even with --force a folder elmo did not make keeps every file elmo would not write (it
is refused, naming them); an input is never overwritten; only elmo's own temporaries are cleaned.
Each writing verb is run in-process against a user's file or folder already at its output.

OS errors: every class (missing input, a folder given as input, a file where a folder of the
output path should be, a folder where the output file goes, a folder that cannot be written) is
one line naming the path the user gave, saying what was wrong and what to do, exit status 2; never
Python's "[Errno N]" nor a temporary name."""

import os
import shutil
from pathlib import Path

import h5py
import pytest
from conftest import ALLENNLP
from test_train import CORPUS, VOCAB

from elmo.cli.main import VERBS, main

MODEL = ["--options", str(ALLENNLP / "options.json"), "--weights", str(ALLENNLP / "lm_weights.hdf5")]
PRECIOUS = b"someone's own bytes\n"
# A user's file named like the temporaries of earlier versions (<name>.<pid>.<random>.tmp), with
# the id of no running process: it was deleted as stale.
BACKUP = "{}.4000000.backup.tmp"


@pytest.fixture
def world(tmp_path):
    """Inputs every verb of the table reads: a text file, a word list, a bilm-tf model folder
    without a vocabulary, a task run directory stand-in; and a folder the user works in."""
    (tmp_path / "in.txt").write_text("a few words\nand more words here\n")
    (tmp_path / "words.txt").write_text("the\ncat\n")
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(ALLENNLP / "options.json", model / "options.json")
    shutil.copy(ALLENNLP / "lm_weights.hdf5", model / "weights.hdf5")
    (tmp_path / "task.toml").write_text(f'task = "tagging"\nmetric = "span_f1"\noutput = "{tmp_path / "mine"}"\n'
                                        f'[data]\nkind = "conll2003"\ntrain = "{CORPUS}"\ndev = "{CORPUS}"\n'
                                        f'[elmo]\nenabled = false\n')
    work = tmp_path / "work"
    work.mkdir()
    return tmp_path


# Every command that writes: (label, argv given the folder of inputs and the output path, what the
# output is, whether --force then writes it: a file output is replaced, a folder elmo did not
# make never is). "{out}" is the user's file or folder already there.
FILE, FOLDER = "file", "folder"
WRITERS = [
    ("embed", lambda w, out: ["embed", f"{w}/in.txt", out, *MODEL], FILE),
    ("embed --shard", lambda w, out: ["embed", f"{w}/in.txt", out, *MODEL, "--shard", "0/2"], FOLDER),
    ("cache-vocab", lambda w, out: ["cache-vocab", f"{w}/words.txt", out, *MODEL], FILE),
    ("vocab", lambda w, out: ["vocab", str(CORPUS), "--output", out], FILE),
    ("evaluate --json", lambda w, out: ["evaluate", "default", "--data", str(CORPUS), "--json", out], FILE),
    ("evaluate --per-sentence",
     lambda w, out: ["evaluate", "default", "--data", str(CORPUS), "--per-sentence", out], FILE),
    ("task evaluate --json", lambda w, out: ["task", "evaluate", f"{w}/run", "--data", str(CORPUS), "--json", out],
     FILE),
    ("task evaluate --predictions",
     lambda w, out: ["task", "evaluate", f"{w}/run", "--data", str(CORPUS), "--predictions", out], FILE),
    ("convert --to elmo", lambda w, out: ["convert", f"{w}/model", out, "--to", "elmo"], FILE),
    ("convert", lambda w, out: ["convert", f"{w}/model", out], FOLDER),
    ("convert --to manylangs",
     lambda w, out: ["convert", str(Path(__file__).parent / "fixtures" / "manylangs" / "model"), out,
                     "--to", "manylangs"], FOLDER),
    ("prepare", lambda w, out: ["prepare", f"{w}/in.txt", "--output", out], FOLDER),
    ("export", lambda w, out: ["export", "default", "--output", out], FOLDER),
    ("train", lambda w, out: ["train", "--vocab", str(VOCAB), "--train", str(CORPUS), "--output", out,
                              "--config", "tiny", "--max-tokens", "100", "--no-progress"], FOLDER),
    ("finetune", lambda w, out: ["finetune", "default", "--train", str(CORPUS), "--output", out,
                                 "--max-tokens", "100", "--no-progress"], FOLDER),
    ("task train", lambda w, out: ["task", "train", f"{w}/task.toml", "--output", out, "--no-progress"], FOLDER),
]
# Verbs that write nothing a user names: serve answers requests; neighbours writes only its
# --vector-cache, files of elmo's own naming (a file there that elmo did not write is refused:
# test_layer_cache_never_replaces_a_file_it_did_not_write).
NOT_WRITERS = {"serve", "neighbours"}
# The user's files in their folder: names elmo writes there, and one it never does.
USER_FOLDER = {"options.json": b"{}", "weights.hdf5": PRECIOUS, "vocab.txt": b"mine\n", "prepare.json": b"{}",
               "notes.txt": PRECIOUS}


def _place_user_output(work: Path, kind: str) -> Path:
    """The user's own file or folder where the command will write, and a backup named like an
    old elmo temporary beside it."""
    out = work / ("out.bin" if kind == FILE else "out")
    if kind == FILE:
        out.write_bytes(PRECIOUS)
    else:
        out.mkdir()
        for name, data in USER_FOLDER.items():
            (out / name).write_bytes(data)
    (work / BACKUP.format(out.name)).write_bytes(PRECIOUS)
    return out


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_error_line(capsys, verb: str) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    assert err[0].startswith(f"elmo {verb.split()[0]}: error: "), err[0]
    assert "Traceback" not in err[0] and "[Errno" not in err[0] and "elmo-tmp" not in err[0]
    return err[0]


@pytest.mark.parametrize("label, argv, kind", WRITERS, ids=[w[0] for w in WRITERS])
def test_a_users_output_is_refused_without_force(world, capsys, label, argv, kind):
    work = world / "work"
    out = _place_user_output(work, kind)
    before = _snapshot(work)
    assert main(argv(world, str(out))) == 2
    line = _one_error_line(capsys, label)
    assert str(out) in line, line
    assert "--force" in line or "elmo did not make" in line, line
    assert _snapshot(work) == before  # the user's bytes, and nothing left beside them


@pytest.mark.parametrize("label, argv, kind", [w for w in WRITERS if w[2] == FOLDER], ids=lambda w: w)
def test_force_never_takes_a_folder_elmo_did_not_make(world, capsys, label, argv, kind):
    work = world / "work"
    out = _place_user_output(work, kind)
    before = _snapshot(work)
    assert main([*argv(world, str(out)), "--force"]) == 2
    line = _one_error_line(capsys, label)
    assert str(out) in line and "elmo did not make" in line, line
    assert _snapshot(work) == before


CHEAP_FILE_WRITERS = [w for w in WRITERS if w[2] == FILE and not w[0].startswith(("task", "evaluate"))]


@pytest.mark.parametrize("label, argv, kind", CHEAP_FILE_WRITERS, ids=[w[0] for w in CHEAP_FILE_WRITERS])
def test_force_replaces_the_file_named_and_nothing_else(world, capsys, label, argv, kind):
    work = world / "work"
    out = _place_user_output(work, kind)
    assert main([*argv(world, str(out)), "--force"]) == 0, capsys.readouterr().err
    assert out.read_bytes() != PRECIOUS
    # The user's backup beside it, named like an old temporary of elmo's, is not elmo's to clean.
    assert (work / BACKUP.format(out.name)).read_bytes() == PRECIOUS
    assert sorted(os.listdir(work)) == sorted([out.name, BACKUP.format(out.name)])


def test_evaluate_force_replaces_its_outputs(world, capsys):
    out, per_sentence = world / "work" / "result.json", world / "work" / "sentences.tsv"
    out.write_bytes(PRECIOUS)
    per_sentence.write_bytes(PRECIOUS)
    argv = ["evaluate", "default", "--data", str(CORPUS), "--max-targets", "20", "--no-progress",
            "--json", str(out), "--per-sentence", str(per_sentence)]
    assert main(argv) == 2 and "already exists; pass --force" in _one_error_line(capsys, "evaluate")
    assert main([*argv, "--force"]) == 0, capsys.readouterr().err
    assert out.read_bytes().startswith(b"{") and per_sentence.read_bytes().startswith(b"sentence\t")
    # One file for both, or an input as the output: refused whatever the flags.
    assert main([*argv[:-2], "--per-sentence", str(out), "--force"]) == 2
    assert "both name" in _one_error_line(capsys, "evaluate")
    assert main([*argv[:-4], "--json", str(CORPUS), "--force"]) == 2
    assert "elmo never overwrites an input" in _one_error_line(capsys, "evaluate")


def test_every_writing_verb_is_in_the_table_and_takes_force(capsys):
    assert {label.split()[0] for label, _, _ in WRITERS} == set(VERBS) - NOT_WRITERS
    for words in [[verb] for verb in set(VERBS) - NOT_WRITERS - {"task"}] + [["task", "train"], ["task", "evaluate"]]:
        with pytest.raises(SystemExit):
            main([*words, "--help"])
        assert "--force" in capsys.readouterr().out, words


def test_convert_force_keeps_a_users_vocabulary_it_does_not_write(world, capsys):
    """A user's bilm-tf folder (no marker) holding a vocab.txt: converting a source without a
    vocabulary onto it with --force replaced the two model files and deleted the vocab.txt."""
    out = world / "work" / "bilm"
    out.mkdir()
    shutil.copy(ALLENNLP / "options.json", out / "options.json")
    shutil.copy(ALLENNLP / "lm_weights.hdf5", out / "weights.hdf5")
    (out / "vocab.txt").write_bytes(b"<S>\n</S>\n<UNK>\nmine\n")
    before = _snapshot(out)
    assert main(["convert", str(world / "model"), str(out), "--force"]) == 2
    line = _one_error_line(capsys, "convert")
    assert f"{out}: holds vocab.txt, which this model folder does not hold" in line and "move them away" in line
    assert _snapshot(out) == before
    # Once nothing but what the conversion writes is there, --force replaces it (as before).
    os.remove(out / "vocab.txt")
    assert main(["convert", str(world / "model"), str(out), "--force"]) == 0
    assert sorted(os.listdir(out)) == [".elmo-owner", "options.json", "weights.hdf5"]


def test_prepare_replaces_only_its_own_folder(world, capsys):
    out = world / "work" / "corpus"
    argv = ["prepare", str(world / "in.txt"), "--output", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    first = _snapshot(out)
    assert main(argv) == 2 and f"{out}: already exists; pass --force" in _one_error_line(capsys, "prepare")
    assert main([*argv, "--force"]) == 0 and _snapshot(out).keys() == first.keys()
    capsys.readouterr()
    (out / "train" / "my-notes.txt").write_bytes(PRECIOUS)  # a user's file inside elmo's folder
    assert main([*argv, "--force"]) == 2
    assert "holds train/my-notes.txt, which elmo did not write there" in _one_error_line(capsys, "prepare")
    assert (out / "train" / "my-notes.txt").read_bytes() == PRECIOUS
    # An input inside the folder would be replaced by what was read from it.
    os.remove(out / "train" / "my-notes.txt")
    assert main(["prepare", str(out / "train" / "shard-00000.txt"), "--output", str(out), "--force"]) == 2
    assert "holds the input" in _one_error_line(capsys, "prepare")


def test_train_force_starts_over_only_in_a_run_elmo_made(world, capsys):
    out = world / "work" / "run"
    argv = ["train", "--vocab", str(VOCAB), "--train", str(CORPUS), "--output", str(out), "--config", "tiny",
            "--batch-size", "4", "--unroll-steps", "5", "--max-tokens", "40", "--no-progress"]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(argv) == 2 and "already holds checkpoints; pass --resume" in _one_error_line(capsys, "train")
    assert main([*argv, "--force"]) == 0
    capsys.readouterr()
    assert main([*argv, "--force", "--resume"]) == 2 and "give one" in _one_error_line(capsys, "train")
    (out / "notes.txt").write_bytes(PRECIOUS)
    assert main([*argv, "--force"]) == 2
    assert f"{out}: holds notes.txt, which elmo did not write there" in _one_error_line(capsys, "train")
    assert (out / "notes.txt").read_bytes() == PRECIOUS and (out / "checkpoints").is_dir()


def test_layer_cache_never_replaces_a_file_it_did_not_write(world, capsys):
    cache = world / "work" / "cache"
    argv = ["neighbours", "the cat sat", "--word", "cat", "--corpus", str(world / "in.txt"),
            "--vector-cache", str(cache), *MODEL, "--no-progress", "--any"]
    assert main(argv) == 0
    [written] = list(cache.iterdir())
    written.write_bytes(PRECIOUS)  # now someone else's file under the cache's name
    assert main(argv) == 2
    assert f"{written}: in the cache folder" in _one_error_line(capsys, "neighbours")
    assert written.read_bytes() == PRECIOUS


# ----------------------------------------------------------------------------- OS errors
def _unwritable_folder(tmp_path: Path) -> Path:
    """A folder the user cannot write into: their own, read-only; as root (who may write
    anywhere), /sys, where no one may create a file."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    if not os.path.isdir("/sys"):
        pytest.skip("no folder here that root cannot write")
    return Path("/sys")


# (verb, class, argv given the inputs' folder, the unwritable folder; the path the message names)
OS_ERRORS = [
    ("embed", "missing input", lambda w, ro: ["embed", f"{w}/nope.txt", f"{w}/o.hdf5", *MODEL], "{w}/nope.txt"),
    ("vocab", "missing input", lambda w, ro: ["vocab", f"{w}/nope.txt", "--output", f"{w}/v.txt"], "{w}/nope.txt"),
    ("prepare", "missing input", lambda w, ro: ["prepare", f"{w}/nope.txt", "--output", f"{w}/p"], "{w}/nope.txt"),
    ("cache-vocab", "missing input", lambda w, ro: ["cache-vocab", f"{w}/nope.txt", f"{w}/c.hdf5", *MODEL],
     "{w}/nope.txt"),
    ("embed", "input is a folder", lambda w, ro: ["embed", f"{w}/work", f"{w}/o.hdf5", *MODEL], "{w}/work"),
    ("vocab", "input is a folder", lambda w, ro: ["vocab", f"{w}/work", "--output", f"{w}/v.txt"], "{w}/work"),
    ("prepare", "input is a folder", lambda w, ro: ["prepare", f"{w}/work", "--output", f"{w}/p"], "{w}/work"),
    ("cache-vocab", "input is a folder", lambda w, ro: ["cache-vocab", f"{w}/work", f"{w}/c.hdf5", *MODEL],
     "{w}/work"),
    ("embed", "output's folder is a file", lambda w, ro: ["embed", f"{w}/in.txt", f"{w}/in.txt/o.hdf5", *MODEL],
     "{w}/in.txt/o.hdf5"),
    ("vocab", "output's folder is a file", lambda w, ro: ["vocab", str(CORPUS), "--output", f"{w}/in.txt/v.txt"],
     "{w}/in.txt/v.txt"),
    ("prepare", "output's folder is a file", lambda w, ro: ["prepare", f"{w}/in.txt", "--output", f"{w}/in.txt/p"],
     "{w}/in.txt/p"),
    ("convert", "output's folder is a file", lambda w, ro: ["convert", f"{w}/model", f"{w}/in.txt/m"],
     "{w}/in.txt/m"),
    ("embed", "output is a folder", lambda w, ro: ["embed", f"{w}/in.txt", f"{w}/work", *MODEL], "{w}/work"),
    ("vocab", "output is a folder", lambda w, ro: ["vocab", str(CORPUS), "--output", f"{w}/work"], "{w}/work"),
    ("evaluate", "output is a folder",
     lambda w, ro: ["evaluate", "default", "--data", str(CORPUS), "--json", f"{w}/work"], "{w}/work"),
    ("convert", "output is a folder", lambda w, ro: ["convert", f"{w}/model", f"{w}/work", "--to", "elmo"],
     "{w}/work"),
    ("embed", "unwritable", lambda w, ro: ["embed", f"{w}/in.txt", f"{ro}/o.hdf5", *MODEL], "{ro}/o.hdf5"),
    ("vocab", "unwritable", lambda w, ro: ["vocab", str(CORPUS), "--output", f"{ro}/v.txt"], "{ro}/v.txt"),
    ("prepare", "unwritable", lambda w, ro: ["prepare", f"{w}/in.txt", "--output", f"{ro}/p"], "{ro}/p"),
    ("convert", "unwritable", lambda w, ro: ["convert", f"{w}/model", f"{ro}/m"], "{ro}/m"),
    ("cache-vocab", "unwritable", lambda w, ro: ["cache-vocab", f"{w}/words.txt", f"{ro}/c.hdf5", *MODEL],
     "{ro}/c.hdf5"),
]
# What each class says was wrong (one of these phrases).
SAYS = {"missing input": ["no such file"], "input is a folder": ["a folder, where a file was expected"],
        "output's folder is a file": ["is a file, not a folder"],
        "output is a folder": ["a folder is in the way"],
        "unwritable": ["not writable", "permission denied", "not permitted"]}


@pytest.mark.parametrize("verb, kind, argv, named", OS_ERRORS, ids=[f"{v}-{k}" for v, k, _, _ in OS_ERRORS])
def test_os_errors_are_one_line_in_elmos_words(world, capsys, verb, kind, argv, named):
    read_only = _unwritable_folder(world)
    before = sorted(os.listdir(world))
    try:
        assert main(argv(world, read_only)) == 2
    finally:
        if read_only != Path("/sys"):
            read_only.chmod(0o755)
    line = _one_error_line(capsys, verb)
    assert named.format(w=world, ro=read_only) in line, line
    assert any(phrase in line for phrase in SAYS[kind]), line
    assert ";" in line, f"no advice in: {line}"  # what was wrong; what to do
    assert sorted(os.listdir(world)) == before  # nothing left behind, no temporary


def test_an_os_error_while_writing_names_the_output_not_the_temporary(tmp_path, monkeypatch):
    """An error from the operating system met while the temporary file is written (a full
    disk) or renamed (a folder put in the output's place meanwhile) names the output."""
    import errno

    from elmo.fileio import atomic_path, atomic_write_text, os_error_message

    target = tmp_path / "out.txt"
    with pytest.raises(OSError) as info:
        with atomic_path(target) as tmp:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), tmp)
    assert os_error_message(info.value) == f"{target}: no space left on the device; free some space, or write elsewhere"
    with pytest.raises(IsADirectoryError) as info:
        with atomic_path(target) as tmp:
            target.mkdir()
    assert str(info.value) == f"{target}: a folder is in the way of the output file; give a file name"
    assert os.listdir(tmp_path) == ["out.txt"]
    # h5py names the file only inside its message: that name is what is reported.
    with pytest.raises(OSError) as info:
        h5py.File(tmp_path / "nope.h5", "r")
    assert os_error_message(info.value).startswith(f"{tmp_path / 'nope.h5'}: no such file or folder; ")
    # An error elmo raised itself already speaks for itself.
    with pytest.raises(FileNotFoundError) as info:
        atomic_write_text(tmp_path / "typo" / "x.txt", "x")
    assert os_error_message(info.value) == str(info.value)
