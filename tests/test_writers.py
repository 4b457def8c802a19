"""The one writer (elmo.fileio), under one battery: no output replaces an input, devices and
pipes are written through, and every OS error of a write names the output.

The battery walks the CLI's own parser: every verb, every output option (found by the rule of
elmo.cli.main.is_output_action, not listed here), each given each of its inputs as its output
(the input itself, a file inside an input folder, a symbolic link and a hard link to it), with
and without --force. A case passes only when the command exits non-zero with elmo's refusal and
every input is byte for byte what it was. A new verb joins by being in the parser: one with an
output and no base command below fails the test that checks the table against the parser."""

import argparse
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import ALLENNLP
from test_train import CORPUS, VOCAB, tiny_settings

from elmo.cli.main import build_parser, is_output_action, main
from elmo.fileio import atomic_path, atomic_write_text, input_conflict, os_error_message, writes_through

REFUSAL = "elmo never overwrites an input"
FORCE: dict[str, bool] = {}


def _writing_verbs() -> dict[str, list[argparse.Action]]:
    """Every verb of the parser (``task train`` for nested ones) with its output actions (and
    FORCE[verb]: whether it takes --force)."""
    found = {}

    def walk(parser, words):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*words, name])
        outputs = [a for a in parser._actions if is_output_action(a)]
        FORCE[" ".join(words)] = "--force" in parser._option_string_actions
        if words and not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
            found[" ".join(words)] = outputs

    walk(build_parser(), [])
    return found


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Inputs: a text file, a word list, a corpus and vocabulary, a model folder (M), a folder
    laid out as a training run (RUN: options, vocabulary, a checkpoint), a task run folder and a
    task config. The battery needs no real run: the refusal comes before anything is read."""
    w = tmp_path_factory.mktemp("writers")
    (w / "in.txt").write_text("a few words\nand more words here\n")
    (w / "words.txt").write_text("the\ncat\n")
    shutil.copy(CORPUS, w / "corpus.txt")
    shutil.copy(VOCAB, w / "vocab.txt")
    (w / "M").mkdir()
    shutil.copy(ALLENNLP / "options.json", w / "M" / "options.json")
    shutil.copy(ALLENNLP / "lm_weights.hdf5", w / "M" / "weights.hdf5")
    (w / "RUN" / "checkpoints").mkdir(parents=True)
    shutil.copy(ALLENNLP / "options.json", w / "RUN" / "options.json")
    shutil.copy(VOCAB, w / "RUN" / "vocab.txt")
    (w / "RUN" / "checkpoints" / "step-1.pt").write_bytes(b"a checkpoint's bytes")
    (w / "TASKRUN").mkdir()
    (w / "TASKRUN" / "config.json").write_text("{}")
    (w / "TASKRUN" / "best.pt").write_bytes(b"a task model's bytes")
    (w / "task.toml").write_text('task = "tagging"\nmetric = "span_f1"\n[data]\nkind = "conll2003"\n'
                                 f'train = "{CORPUS}"\ndev = "{CORPUS}"\n[elmo]\nenabled = false\n')
    (w / "links").mkdir()
    return w


OUT = "{out}"
# How each writing verb is run, its outputs left to the battery: "{out}" where a positional or
# required output goes; an optional output option is added by the battery. Several per verb where
# an option changes what is written (export's ONNX file, convert's checkpoint).
BASE = {
    "embed": [["embed", "{w}/in.txt", OUT, "--model", "{w}/M"]],
    "train": [["train", "--vocab", "{w}/vocab.txt", "--train", "{w}/corpus.txt", "--output", OUT, "--config", "tiny",
               "--no-progress"]],
    "finetune": [["finetune", "{w}/RUN", "--train", "{w}/corpus.txt", "--output", OUT, "--no-progress"]],
    "export": [["export", "{w}/RUN", "--output", OUT], ["export", "{w}/M", "--output", OUT, "--format", "onnx"]],
    "evaluate": [["evaluate", "{w}/RUN", "--data", "{w}/corpus.txt", "--no-progress"]],
    "prepare": [["prepare", "{w}/in.txt", "--output", OUT]],
    "vocab": [["vocab", "{w}/corpus.txt", "--output", OUT]],
    "cache-vocab": [["cache-vocab", "{w}/words.txt", OUT, "--model", "{w}/M"]],
    "task train": [["task", "train", "{w}/task.toml", "--output", OUT, "--no-progress"]],
    "task evaluate": [["task", "evaluate", "{w}/TASKRUN", "--data", "{w}/corpus.txt"]],
    "neighbours": [["neighbours", "the cat", "--word", "cat", "--corpus", "{w}/in.txt", "--model", "{w}/M"]],
    "convert": [["convert", "{w}/M", OUT], ["convert", "{w}/RUN", OUT, "--to", "elmo"]],
}


def _inputs_of(argv: list[str]) -> list[Path]:
    """The paths of ``argv`` that exist, each folder followed by every file in it."""
    found = []
    for word in argv:
        if word != OUT and os.path.lexists(word):
            found.append(Path(word))
            if os.path.isdir(word):
                found += sorted(p for p in Path(word).rglob("*") if p.is_file())
    return found


def _digest(paths) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for root in paths
            for p in ([root] if root.is_file() else sorted(root.rglob("*"))) if p.is_file()}


def _cases():
    verbs = _writing_verbs()
    for verb, outputs in verbs.items():
        for base in BASE.get(verb, []):
            for action in outputs:
                label = action.option_strings[-1] if action.option_strings else action.dest
                yield pytest.param(verb, base, label, id=f"{' '.join(base[:3 if verb.startswith('task') else 1])}"
                                                         f"{' ' + base[-1] if base[-1] in ('onnx', 'elmo') else ''}"
                                                         f" {label}")


def test_the_table_has_every_writing_verb_of_the_parser():
    verbs = _writing_verbs()
    writing = {verb for verb, outputs in verbs.items() if outputs}
    assert writing == set(BASE), f"verbs that write, without a base command here: {writing - set(BASE)}"
    assert {verb for verb, outputs in verbs.items() if not outputs} == {"serve"}
    # The rule finds the outputs users know, and nothing else (inputs are never outputs).
    assert {a.option_strings[-1] if a.option_strings else a.dest for a in verbs["evaluate"]} == {"--json",
                                                                                                  "--per-sentence"}
    assert {a.dest for a in verbs["embed"]} == {"output"} and {a.dest for a in verbs["neighbours"]} == {"vector_cache"}


def _argv(base: list[str], label: str, output: str, world: Path) -> list[str]:
    argv = [word.replace("{w}", str(world)) for word in base]
    if OUT in argv:
        return [output if word == OUT else word for word in argv]
    return [*argv, label, output]


@pytest.mark.parametrize("verb, base, label", list(_cases()))
def test_no_output_replaces_an_input(world, capsys, verb, base, label):
    argv = _argv(base, label, OUT, world)
    # An optional output beside a required one would need the base command to carry both.
    assert OUT in argv and argv.count(OUT) == 1
    inputs = _inputs_of(argv)
    assert inputs, argv
    before = _digest(inputs)
    links = world / "links"
    tried = 0
    for source in inputs:
        targets = [source, Path(os.path.relpath(source))]
        symlink = links / f"sym-{tried}"
        symlink.symlink_to(source)
        targets.append(symlink)
        if source.is_file():
            hard = links / f"hard-{tried}"
            os.link(source, hard)
            targets.append(hard)
        for target in targets:
            for force in ([], ["--force"]) if FORCE[verb] else ([],):
                tried += 1
                code = main([*[str(target) if w == OUT else w for w in argv], *force])
                err = capsys.readouterr().err
                assert code == 2 and REFUSAL in err and err.count("\n") == 1, (target, force, err)
                assert _digest(inputs) == before, (target, force)
        for link in links.iterdir():
            link.unlink()
    assert tried >= 4


# --------------------------------------------------- the cases found by hand, on real inputs
@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A real training run: its only checkpoint, vocabulary and options."""
    out = tmp_path_factory.mktemp("run") / "run"
    assert main(["train", "--vocab", str(VOCAB), "--train", str(CORPUS), "--output", str(out), "--config", "tiny",
                 "--batch-size", "4", "--unroll-steps", "5", "--max-tokens", "40", "--no-progress"]) == 0
    [checkpoint] = (out / "checkpoints").glob("*.pt")
    return out, checkpoint


def test_a_runs_files_are_never_replaced(run, world, capsys, monkeypatch):
    """Each of these replaced its input with exit 0: the model's weights became an ONNX file, a
    checkpoint JSON, the run's vocabulary a TSV, a training checkpoint a native one."""
    out, checkpoint = run
    m = world / "M"
    cases = [["export", str(m), "--output", str(m / "weights.hdf5"), "--format", "onnx", "--force"],
             ["export", str(m), "--output", str(m / "options.json"), "--format", "onnx", "--force"],
             ["export", str(out), "--output", str(checkpoint), "--format", "onnx", "--force"],
             ["evaluate", str(out), "--data", str(CORPUS), "--json", str(checkpoint), "--force"],
             ["evaluate", str(out), "--data", str(CORPUS), "--per-sentence", str(out / "vocab.txt"), "--force"],
             ["convert", str(out), str(checkpoint), "--to", "elmo", "--force"]]
    before = _digest([out, m])
    for argv in cases:
        assert main(argv) == 2, argv
        assert REFUSAL in capsys.readouterr().err, argv
        assert _digest([out, m]) == before, argv
    monkeypatch.chdir(world)
    for output in ("words.txt", "./words.txt", str(world / "words.txt")):
        assert main(["cache-vocab", "words.txt", output, "--model", str(m), "--force"]) == 2
        assert REFUSAL in capsys.readouterr().err
    assert (world / "words.txt").read_text() == "the\ncat\n"


def test_a_resumed_run_given_its_own_files_back_still_resumes(run, capsys):
    """--vocab RUN/vocab.txt and --config RUN/options.json on --resume: inputs, so never written
    over; the run has them already."""
    out, _ = run
    vocab = (out / "vocab.txt").read_bytes()
    assert main(["train", "--vocab", str(out / "vocab.txt"), "--train", str(CORPUS), "--output", str(out),
                 "--config", str(out / "options.json"), "--batch-size", "4", "--unroll-steps", "5",
                 "--max-tokens", "60", "--no-progress", "--resume"]) == 0, capsys.readouterr().err
    assert (out / "vocab.txt").read_bytes() == vocab


def test_the_library_writers_refuse_declared_inputs(tmp_path):
    from elmo.fileio import reading_inputs

    source = tmp_path / "in.txt"
    source.write_text("mine\n")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "weights.hdf5").write_bytes(b"weights")
    os.link(tmp_path / "model" / "weights.hdf5", tmp_path / "hard")
    with reading_inputs([source, tmp_path / "model" / "weights.hdf5"]):
        for output in (source, tmp_path / "model" / "weights.hdf5", tmp_path / "hard"):
            with pytest.raises(FileExistsError, match=REFUSAL):
                atomic_write_text(output, "new")
        atomic_write_text(tmp_path / "model" / "new.txt", "a new file beside the inputs is fine")
    assert source.read_text() == "mine\n" and (tmp_path / "model" / "weights.hdf5").read_bytes() == b"weights"
    # A folder named as an input stands for its files where a user names an output (the command
    # line's check); elmo's own files inside it (a run's predictions, a cache) may be written.
    assert "in the folder" in input_conflict(tmp_path / "model" / "weights.hdf5", [tmp_path / "model"])
    assert "is a link to" in input_conflict(tmp_path / "hard", [tmp_path / "model"])
    with reading_inputs([tmp_path / "model"]):
        atomic_write_text(tmp_path / "model" / "new.txt", "elmo's own file, written again")
    assert "holds the input" in input_conflict(tmp_path, [source])
    assert input_conflict(tmp_path, [source], holds=False) is None


# ----------------------------------------------------------------- devices and pipes: through
def test_a_name_under_proc_is_written_through_never_renamed_over(tmp_path, capsys):
    """An output reached through /proc/self/fd/N (what /dev/stdout is) with --force: the link was
    replaced by a regular file and the descriptor's file got nothing; now the bytes go through."""
    target = tmp_path / "stdout.txt"
    target.write_text("already printed\n")
    fd = os.open(target, os.O_WRONLY | os.O_APPEND)
    try:
        link = tmp_path / "out"
        link.symlink_to(f"/proc/self/fd/{fd}")
        assert writes_through(link) and writes_through("/dev/stdout") and writes_through("/dev/null")
        assert not writes_through(tmp_path / "plain.txt")
        assert main(["vocab", str(CORPUS), "--output", str(link), "--force"]) == 0, capsys.readouterr().err
        assert link.is_symlink()
        lines = target.read_text().splitlines()
        assert lines[0] == "already printed" and lines[1:4] == ["<S>", "</S>", "<UNK>"]
    finally:
        os.close(fd)
    assert not [n for n in os.listdir(tmp_path) if "elmo-tmp" in n]


def test_a_fifo_and_dev_null_are_written_through(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    assert main(["vocab", str(CORPUS), "--output", str(fifo)]) == 0, capsys.readouterr().err
    reader.join(10)
    assert received and received[0].startswith(b"<S>\n</S>\n<UNK>\n") and fifo.is_fifo()
    assert main(["vocab", str(CORPUS), "--output", "/dev/null"]) == 0
    assert Path("/dev/null").is_char_device()
    # embed keeps its work folder beside its output: a device there is refused, in one line.
    assert main(["embed", str(CORPUS), "/dev/null", "--options", str(ALLENNLP / "options.json"), "--weights",
                 str(ALLENNLP / "lm_weights.hdf5")]) == 2
    assert "/dev/null: a device, a pipe or a name under /dev or /proc" in capsys.readouterr().err


def test_a_full_device_names_the_output(capsys):
    """/dev/full answers every write with ENOSPC: the one real full disk a test can have."""
    assert main(["vocab", str(CORPUS), "--output", "/dev/full"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("elmo vocab: error: /dev/full: no space left on the device; free some space, "
                           "or write elsewhere")


# What each file writer's output starts with, written through a link to a descriptor.
_FILE_WRITERS_THROUGH = {"convert --to elmo": b"PK", "cache-vocab": b"\x89HDF", "vocab": b"<S>\n</S>\n<UNK>\n",
                         "export --format onnx": b"\x08", "evaluate --json": b"{", "allennlp elmo": b"\x89HDF"}


@pytest.mark.parametrize("label", list(_FILE_WRITERS_THROUGH))
def test_every_file_writer_writes_through_a_link_to_a_descriptor(writer_inputs, tmp_path, capsys, label):
    """What `/dev/stdout` is (a link to /proc/self/fd/1), as every writer of one file's output,
    with --force: the link stays a link and the descriptor's file gets the whole output. (embed
    keeps its work beside its output, so it refuses a device: the test above.)"""
    from elmo.allennlp.command import main as allennlp_main

    target = tmp_path / "received"
    target.write_bytes(b"")
    fd = os.open(target, os.O_WRONLY)
    try:
        link = tmp_path / "out"
        link.symlink_to(f"/proc/self/fd/{fd}")
        argv = _writers(writer_inputs, tmp_path)[label]
        argv[argv.index(_written_by(argv))] = str(link)
        code = allennlp_main(argv[1:]) if argv[0] == "allennlp" else main([*argv, "--force"])
        assert code == 0, capsys.readouterr().err
    finally:
        os.close(fd)
    assert link.is_symlink() and os.readlink(link) == f"/proc/self/fd/{fd}"
    assert target.read_bytes().startswith(_FILE_WRITERS_THROUGH[label]) and target.stat().st_size > 100
    assert not [n for n in os.listdir(tmp_path) if "elmo-tmp" in n]


# --------------------------------------------------------------------- OS errors name the output
_WRITERS_UNDER_A_LIMIT = r"""
import json, os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # as a shell's `ulimit -f` with the signal ignored: EFBIG
from elmo.cli.main import main, _quiet_unraisable
from elmo.allennlp.command import main as allennlp_main
sys.unraisablehook = _quiet_unraisable  # as the command line sets it
cases, limit = json.loads(sys.argv[1]), int(sys.argv[2])
if limit:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
for argv in cases:
    code = allennlp_main(argv[1:]) if argv[0] == "allennlp" else main(argv)
    print("exit:", json.dumps([argv, code]), flush=True)  # beside what the commands print
"""
MODEL = ["--options", str(ALLENNLP / "options.json"), "--weights", str(ALLENNLP / "lm_weights.hdf5")]


def _written_by(argv: list[str]) -> str:
    option = next((o for o in ("--output", "--json") if o in argv), None)
    return argv[argv.index(option) + 1] if option else argv[2 + (argv[0] == "allennlp")]


@pytest.fixture(scope="module")
def writer_inputs(tmp_path_factory):
    """What the writers read: a word list, 300 lines, a model folder and a tiny training run."""
    from elmo.training.train import Trainer

    w = tmp_path_factory.mktemp("writer-inputs")
    (w / "words.txt").write_text("".join(f"w{i}\n" for i in range(2000)))
    (w / "lines.txt").write_text("".join(f"the cat number {i} sat on the mat .\n" for i in range(300)))
    (w / "M").mkdir()
    shutil.copy(ALLENNLP / "options.json", w / "M" / "options.json")
    shutil.copy(ALLENNLP / "lm_weights.hdf5", w / "M" / "weights.hdf5")
    Trainer(tiny_settings(w / "run", max_tokens=4 * 10 * 5)).run()
    return w


def _writers(w: Path, o: Path) -> dict[str, list[str]]:
    """Every kind of writer (PyTorch's, HDF5's, a model folder, a text file, an ONNX file, the
    journal of embed, the AllenNLP command's, shards, a JSON report, a training run), its outputs
    in ``o``."""
    lines = str(w / "lines.txt")
    return {"convert --to elmo": ["convert", str(w / "M"), str(o / "m.pt"), "--to", "elmo"],
            "convert": ["convert", str(w / "M"), str(o / "bilm")],
            "cache-vocab": ["cache-vocab", str(w / "words.txt"), str(o / "c.hdf5"), *MODEL],
            "vocab": ["vocab", str(w / "words.txt"), "--output", str(o / "v.txt"), "--min-count", "1"],
            "export": ["export", str(w / "run"), "--output", str(o / "exported")],
            "export --format onnx": ["export", str(w / "M"), "--format", "onnx", "--output", str(o / "m.onnx")],
            "embed": ["embed", lines, str(o / "e.hdf5"), *MODEL],
            "prepare": ["prepare", lines, "--output", str(o / "shards"), "--no-progress"],
            "evaluate --json": ["evaluate", str(w / "run"), "--data", str(CORPUS), "--json", str(o / "ev.json"),
                                "--no-progress"],
            "train": ["train", "--vocab", str(VOCAB), "--train", str(CORPUS), "--output", str(o / "run"), "--config",
                      "tiny", "--batch-size", "4", "--unroll-steps", "10", "--max-tokens", "800", "--checkpoint-every",
                      "5", "--no-progress"],
            "allennlp elmo": ["allennlp", "elmo", lines, str(o / "a.hdf5"), "--all", "--options-file",
                              str(ALLENNLP / "options.json"), "--weight-file", str(ALLENNLP / "lm_weights.hdf5")]}


def _every_writer_names_its_output(w: Path, folder: Path, failing: set[str], words: str, limit: int = 0) -> None:
    """Run every writer into ``folder`` in one process (under ``ulimit -f limit`` if given): none may
    crash the process; each in ``failing``, and any other that fails, exits 2 with one line that
    names its output and says ``words``; no temporary file and no failed output is left."""
    import json

    cases = _writers(w, folder)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src"), "OMP_NUM_THREADS": "1"}
    process = subprocess.run([sys.executable, "-c", _WRITERS_UNDER_A_LIMIT, json.dumps(list(cases.values())),
                              str(limit)], capture_output=True, text=True, env=env, timeout=180)
    assert process.returncode == 0, process.stderr[-3000:]  # no crash: every command returned
    codes = dict(zip(cases, (json.loads(line[len("exit:"):])[1] for line in process.stdout.splitlines()
                             if line.startswith("exit:"))))
    errors = iter(line for line in process.stderr.splitlines() if ": error: " in line)
    assert len(codes) == len(cases), process.stderr[-3000:]
    for label, argv in cases.items():
        if codes[label] == 0 and label not in failing:
            continue
        line = next(errors)
        assert codes[label] == 2 and words in line and _written_by(argv) in line and "elmo-tmp" not in line, \
            (limit, label, line)
    assert next(errors, None) is None
    # What a resumed run continues from: embed's work file, a training run's folder.
    shutil.rmtree(folder / "e.hdf5.partial", ignore_errors=True)
    shutil.rmtree(folder / "run", ignore_errors=True)
    kept = set(os.listdir(folder))
    assert not any("elmo-tmp" in n for n in kept), kept  # no temporary left
    assert not kept & {os.path.basename(_written_by(cases[label])) for label in failing}


@pytest.mark.slow  # processes that import PyTorch: about 20 s on 2 busy cores
def test_a_file_size_limit_names_the_output_in_every_writer(writer_inputs, tmp_path):
    """``ulimit -f``: PyTorch's writer said "unexpected pos 576 vs 534" (a traceback), Python's
    file writes "File too large" naming nothing, and HDF5's own driver crashed the process (a
    segfault in the next file it opened). Every writer names its output now, all in one process,
    with a limit the first block meets and one that HDF5's outputs (embed's and the AllenNLP
    command's, about 1.1 MB each) meet midway, after HDF5 wrote its metadata."""
    small = {"prepare", "evaluate --json"}  # outputs under 4 KiB: written
    every = set(_writers(writer_inputs, tmp_path)) - small
    for limit, failing in {4096: every, 300_000: {"embed", "allennlp elmo"}}.items():
        folder = tmp_path / f"under-{limit}"
        folder.mkdir()
        _every_writer_names_its_output(writer_inputs, folder, failing, "ulimit -f", limit)


@contextlib.contextmanager
def _small_file_system(path: Path, size: str):
    """A tmpfs of ``size`` at ``path`` (root only; skips where mounting is not allowed)."""
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"a small file system for a real full disk needs mount (as root): {mounted.stderr.decode()[:200]}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


@pytest.mark.slow  # processes that import PyTorch: about 20 s on 2 busy cores
def test_a_full_disk_names_the_output_in_every_writer(writer_inputs, tmp_path):
    """A real full disk (ENOSPC from a file system, not /dev/full's first write): a disk with no
    block free, where every writer fails, and one with 300 KB free, where HDF5's outputs fail
    midway and HDF5 then read back metadata that never reached the disk ("bad heap index")."""
    words = "no space left on the device"
    cases = _writers(writer_inputs, tmp_path)
    with _small_file_system(tmp_path / "full", "1m") as full:
        (full / "out").mkdir()
        with pytest.raises(OSError), open(full / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        _every_writer_names_its_output(writer_inputs, full / "out", set(cases), words)
    with _small_file_system(tmp_path / "small", "300k") as small:
        _every_writer_names_its_output(writer_inputs, small, {"embed", "allennlp elmo"}, words)


def test_a_write_error_without_a_name_is_the_outputs(tmp_path):
    import errno

    with pytest.raises(OSError) as raised:
        with atomic_path(tmp_path / "out.json") as tmp, open(tmp, "w"):
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
    assert os_error_message(raised.value) == (f"{tmp_path / 'out.json'}: over the disk quota; free some space, "
                                              "or write elsewhere")
    assert os.listdir(tmp_path) == []
