"""Training refuses what it cannot do, in one line naming the option and the value: bad settings
(before any file is written), on --resume any setting that would change the run, and an output
folder elmo did not make (train, finetune, export)."""

import argparse
import os
import shutil

import pytest
import torch
from test_train import CORPUS, VOCAB, final_parameters, tiny_settings

from elmo.cli.main import build_parser, main
from elmo.training.train import Trainer, TrainSettings, train

STEPS = 10  # the shared run's length: 4 rows x 10 tokens per step


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A 10-step run (checkpoints at 5 and 10) of tiny_settings: seed 1, batch 4, unroll 10."""
    run = tmp_path_factory.mktemp("finished") / "run"
    train(tiny_settings(run, max_tokens=4 * 10 * STEPS))
    return run


def _cli(capsys, *args) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().err


# ------------------------------------------------------------------------- bad settings
BAD_VALUES = [
    (["--device", "banana"], "--device", "banana"),
    (["--checkpoint-every", "0"], "--checkpoint-every", "0"),
    (["--checkpoint-every", "-3"], "--checkpoint-every", "-3"),
    (["--log-every", "0"], "--log-every", "0"),
    (["--log-every", "-1"], "--log-every", "-1"),
    (["--max-tokens", "0"], "--max-tokens", "0"),
    (["--max-tokens", "-100"], "--max-tokens", "-100"),
    (["--epochs", "-1"], "--epochs", "-1"),
    (["--epochs", "0"], "--epochs", "0"),
    (["--batch-size", "0"], "--batch-size", "0"),
    (["--keep-checkpoints", "0"], "--keep-checkpoints", "0"),
    (["--unroll-steps", "0"], "--unroll-steps", "0"),
    (["--dropout", "1.5"], "--dropout", "1.5"),
    (["--learning-rate", "0"], "--learning-rate", "0"),
    (["--eval-every", "10"], "--heldout", "10"),
    (["--processes", "0"], "--processes", "0"),
    (["--gpus", "0,x"], "--gpus", "0,x"),
]


@pytest.mark.parametrize("verb", ["train", "finetune"])
@pytest.mark.parametrize("extra, option, value", BAD_VALUES, ids=[" ".join(b[0]) for b in BAD_VALUES])
def test_bad_values_are_one_line_errors_and_leave_no_run_directory(verb, extra, option, value, finished_run,
                                                                   tmp_path, capsys):
    output = tmp_path / "run"
    source = ["--vocab", str(VOCAB)] if verb == "train" else [str(finished_run)]
    code, err = _cli(capsys, verb, *source, "--train", str(CORPUS), "--output", str(output), "--no-progress", *extra)
    assert code == 2, err
    assert err.startswith(f"elmo {verb}: error: ") and err.count("\n") == 1, err
    assert option in err and value in err, err
    assert not output.exists()


@pytest.mark.parametrize("verb", ["train", "finetune"])
def test_cuda_device_without_cuda_is_refused(verb, finished_run, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # --gpus sets it in this process; undone after the test
    source = ["--vocab", str(VOCAB)] if verb == "train" else [str(finished_run)]
    common = [verb, *source, "--train", str(CORPUS), "--output", str(tmp_path / "run")]
    code, err = _cli(capsys, *common, "--device", "cuda")
    assert code == 2 and "--device cuda: CUDA is not available" in err and err.count("\n") == 1, err
    code, err = _cli(capsys, *common, "--gpus", "0")
    assert code == 2 and "--gpus 0: CUDA is not available" in err, err
    assert not (tmp_path / "run").exists()


def test_unknown_config_names_the_presets(tmp_path, capsys):
    code, err = _cli(capsys, "train", "--vocab", str(VOCAB), "--train", str(CORPUS), "--output", str(tmp_path / "run"),
                     "--config", "tinyy")
    assert code == 2, err
    assert "--config: 'tinyy' is neither a preset (tiny, small, medium, original) nor an options.json file that exists" in err
    assert not (tmp_path / "run").exists()


def test_the_python_api_validates_too(tmp_path):
    for bad, match in [(dict(checkpoint_every=0), "--checkpoint-every: must be at least 1, got 0"),
                       (dict(log_every=-2), "--log-every: must be at least 1, got -2"),
                       (dict(epochs=0.0, max_tokens=None), "--epochs: must be above 0, got 0"),
                       (dict(keep_checkpoints=0), "--keep-checkpoints: must be at least 1, got 0"),
                       (dict(device="banana"), "--device: 'banana' is not a device"),
                       (dict(config="tinyy"), "neither a preset"),
                       (dict(epochs=1.0), "--max-tokens 800 and --epochs 1.0: give one, not both")]:
        settings = tiny_settings(tmp_path / "run", **bad)
        with pytest.raises(ValueError, match=match):
            settings.validate()
        with pytest.raises(ValueError, match=match):
            train(settings)
        assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------- help states defaults
@pytest.mark.parametrize("verb", ["train", "finetune", "evaluate", "export"])
def test_every_option_help_states_its_default(verb):
    parser = build_parser([verb])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[verb]
    for action in sub._actions:
        if not action.option_strings or action.required or action.nargs == 0 or action.help == argparse.SUPPRESS:
            continue  # positionals, required options and on/off flags have no default to state
        assert "default" in (action.help or "").lower(), (verb, action.option_strings, action.help)


# ----------------------------------------------------------------- resume keeps the run
def _copy(run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    return copy


CHANGES = [(dict(config="small"), "--config: the run's is tiny (LSTM 2x256_64", "got small (LSTM 2x1024_128"),
           (dict(batch_size=8), "--batch-size: the run's is 4, got 8", None),
           (dict(unroll_steps=5), "--unroll-steps: the run's is 10, got 5", None),
           (dict(learning_rate=0.1), "--learning-rate: the run's is 0.2, got 0.1", None),
           (dict(optimizer="adamw"), "--optimizer: the run's is adagrad, got adamw", None),
           (dict(dropout=0.3), "--dropout: the run's is 0.1, got 0.3", None),
           (dict(n_negative_samples=0), "--negative-samples: the run's is 2048, got 0", None),
           (dict(warmup_steps=3), "--warmup-steps: the run's is unset", "got 3"),
           (dict(seed=2), "--seed: the run's is 1, got 2", None),
           (dict(vocab=None), "--vocab", "(word 3 is"),  # replaced below by a different vocabulary
           (dict(train=None), "--train", "training tokens, the run's shards held 139")]


@pytest.mark.parametrize("change, expected, also", CHANGES, ids=[next(iter(c[0])) for c in CHANGES])
def test_resume_refuses_a_changed_setting(change, expected, also, finished_run, tmp_path):
    run = _copy(finished_run, tmp_path)
    change = dict(change)
    if "vocab" in change:
        words = VOCAB.read_text().splitlines()
        (tmp_path / "vocab.txt").write_text("\n".join(words[:3] + words[4:5] + words[3:4] + words[5:]) + "\n")
        change["vocab"] = str(tmp_path / "vocab.txt")
    if "train" in change:
        (tmp_path / "more.txt").write_text(CORPUS.read_text() + "one more sentence .\n")
        change["train"] = [str(tmp_path / "more.txt")]
    before = sorted(p.name for p in run.rglob("*"))
    with pytest.raises(ValueError, match="--resume continues the run as it was started") as error:
        Trainer(tiny_settings(run, resume=True, max_tokens=4 * 10 * STEPS, **change))
    message = str(error.value)
    assert expected in message and (also is None or also in message), message
    assert "\n" not in message
    assert sorted(p.name for p in run.rglob("*")) == before  # nothing written


def test_resume_refusal_on_the_command_line(finished_run, tmp_path, capsys):
    run = _copy(finished_run, tmp_path)
    code, err = _cli(capsys, "train", "--vocab", str(VOCAB), "--train", str(CORPUS), "--output", str(run), "--resume",
                     "--batch-size", "8", "--learning-rate", "0.5")
    assert code == 2 and err.count("\n") == 1, err
    assert "--batch-size: the run's is 4, got 8; --learning-rate: the run's is 0.2, got 0.5" in err


def test_resume_with_nothing_given_continues_with_the_runs_settings(finished_run, tmp_path):
    run = _copy(finished_run, tmp_path)
    (run / "checkpoints" / "step-000000010.pt").unlink()  # as if killed between the two checkpoints
    # No config, seed, batch size, unroll steps or length: every one is the run's (seed 1, not
    # the default 0; 10 steps, not one epoch), so the result is the uninterrupted run's.
    train(TrainSettings(train=[str(CORPUS)], vocab=str(VOCAB), output=str(run), resume=True, progress=False))
    whole, resumed = final_parameters(finished_run), final_parameters(run)
    for key in whole:
        assert torch.equal(whole[key], resumed[key]), key
    # Settings that may change do not stop a resume; giving the run's own values is no change either.
    Trainer(tiny_settings(run, resume=True, checkpoint_every=7, log_every=3, keep_checkpoints=1, eval_every=0))


def test_resume_may_lengthen_an_adagrad_run_but_not_an_adamw_one(finished_run, tmp_path):
    run = _copy(finished_run, tmp_path)
    result = train(tiny_settings(run, resume=True, max_tokens=4 * 10 * 12))
    assert result["step"] == 12
    adamw = tmp_path / "adamw"
    train(tiny_settings(adamw, optimizer="adamw", max_tokens=4 * 10 * 5))
    with pytest.raises(ValueError, match=r"--max-tokens 800: the run's length is 5 steps, this gives 20"):
        Trainer(tiny_settings(adamw, optimizer="adamw", resume=True, max_tokens=800))
    with pytest.raises(ValueError, match="--max-tokens 120: gives 3 steps, but the run is already at step 12"):
        Trainer(tiny_settings(run, resume=True, max_tokens=120))


def test_resume_before_the_first_checkpoint_keeps_the_started_settings(tmp_path):
    Trainer(tiny_settings(tmp_path / "run", unroll_steps=5))  # writes the run files; killed before training
    assert not (tmp_path / "run" / "checkpoints").exists()
    with pytest.raises(ValueError, match="--unroll-steps: the run's is 5, got 10"):
        Trainer(tiny_settings(tmp_path / "run", resume=True))
    resumed = Trainer(TrainSettings(train=[str(CORPUS)], vocab=str(VOCAB), output=str(tmp_path / "run"), resume=True))
    assert (resumed.unroll_steps, resumed.batch_size, resumed.seed, resumed.max_steps) == (5, 4, 1, 40)


# ------------------------------------------------------------ only into folders elmo made
def _user_folder(tmp_path):
    """A folder of a user's own files, two of them with names a run directory also has."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "options.json").write_text('{"my": "options"}')
    (folder / "metrics.csv").write_text("my,own,header\n1,2,3\n")
    return folder, {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize("verb", ["train", "finetune"])
@pytest.mark.parametrize("resume", [False, True])
def test_a_folder_that_is_not_a_run_is_refused_as_output(verb, resume, finished_run, tmp_path, capsys):
    """Issue 45: train --output into an existing folder overwrote the user's options.json and
    appended rows under their own metrics.csv header."""
    folder, before = _user_folder(tmp_path)
    source = ["--vocab", str(VOCAB)] if verb == "train" else [str(finished_run)]
    code, err = _cli(capsys, verb, *source, "--train", str(CORPUS), "--output", str(folder), "--no-progress",
                     "--batch-size", "4", "--max-tokens", "40", *(["--resume"] if resume else []))
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"elmo {verb}: error: {folder}: a folder elmo did not make (it holds metrics.csv, "
                          "options.json and no .elmo-owner of elmo's) is in the way of the training run"), err
    assert "choose another --output" in err
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_a_run_directory_is_marked_and_one_from_before_the_marker_still_resumes(finished_run, tmp_path):
    assert (finished_run / ".elmo-owner").is_file()
    run = _copy(finished_run, tmp_path)
    (run / ".elmo-owner").unlink()  # a run made before runs were marked: recognised by its train_settings.json
    (run / "checkpoints" / "step-000000010.pt").unlink()
    train(tiny_settings(run, resume=True, max_tokens=4 * 10 * STEPS))
    for key, value in final_parameters(finished_run).items():
        assert torch.equal(value, final_parameters(run)[key]), key
    assert (run / ".elmo-owner").is_file()  # marked now
    # An empty folder is nothing to lose: a new run goes there.
    (tmp_path / "empty").mkdir()
    Trainer(tiny_settings(tmp_path / "empty"))
    assert (tmp_path / "empty" / ".elmo-owner").is_file()


def test_export_replaces_only_an_export_elmo_made(finished_run, tmp_path, capsys):
    out = tmp_path / "model"
    out.mkdir()
    (out / "weights.hdf5").write_bytes(b"the user's weights")
    (out / "README.md").write_text("the user's notes")
    for flags in ([], ["--force"]):
        code, err = _cli(capsys, "export", str(finished_run), "--output", str(out), *flags)
        assert code == 2 and err.count("\n") == 1, err
        assert f"{out}: a folder elmo did not make (it holds README.md, weights.hdf5" in err
    assert (out / "weights.hdf5").read_bytes() == b"the user's weights"
    fresh = tmp_path / "fresh"
    assert _cli(capsys, "export", str(finished_run), "--output", str(fresh))[0] == 0
    assert sorted(os.listdir(fresh)) == [".elmo-owner", "options.json", "softmax_weights.hdf5", "vocab.txt",
                                         "weights.hdf5"]
    code, err = _cli(capsys, "export", str(finished_run), "--output", str(fresh))
    assert code == 2 and f"{fresh}: already exists; pass --force" in err
    assert _cli(capsys, "export", str(finished_run), "--output", str(fresh), "--force")[0] == 0


def test_export_makes_the_folders_its_output_goes_in(finished_run, tmp_path, capsys):
    """As train and prepare do with their --output: the README's `elmo export runs/tiny --output
    models/tiny` works where models/ does not exist yet; a file in the way is still refused."""
    nested = tmp_path / "models" / "2026" / "tiny"
    assert _cli(capsys, "export", str(finished_run), "--output", str(nested))[0] == 0
    assert (nested / "weights.hdf5").is_file()
    (tmp_path / "afile").write_text("mine")
    code, err = _cli(capsys, "export", str(finished_run), "--output", str(tmp_path / "afile" / "tiny"))
    assert code == 2 and "is a file, not a folder" in err, err
    assert (tmp_path / "afile").read_text() == "mine"


def test_world_size_without_rank_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    code, err = _cli(capsys, "train", "--vocab", str(VOCAB), "--train", str(CORPUS), "--output", str(tmp_path / "r"),
                     "--no-progress")
    assert code == 2 and err == ("elmo train: error: WORLD_SIZE=2 is set but RANK is not: torchrun sets both for each "
                                 "process; set RANK too, or unset WORLD_SIZE to run one process\n")
    assert not (tmp_path / "r").exists()


HOSTILE_SETTINGS = {"deep": ("[" * 100_000 + "]" * 100_000).encode(), "not UTF-8": b'{"train": ["caf\xe9"]}',
                    "truncated": b'{"train": ["a.txt"], "outp', "seed a string": b'{"seed": "1"}'}


@pytest.mark.parametrize("case", HOSTILE_SETTINGS)
def test_resume_refuses_a_hostile_settings_file_naming_it(case, finished_run, tmp_path, capsys):
    """train_settings.json nested 100,000 deep gave a traceback; not UTF-8 or truncated, a message
    without the file."""
    run = _copy(finished_run, tmp_path)
    (run / "train_settings.json").write_bytes(HOSTILE_SETTINGS[case])
    before = sorted(p.name for p in run.rglob("*"))
    code, err = _cli(capsys, "train", "--vocab", str(VOCAB), "--train", str(CORPUS), "--output", str(run), "--resume")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{run / 'train_settings.json'}: " in err, err
    assert sorted(p.name for p in run.rglob("*")) == before


@pytest.mark.parametrize("case", HOSTILE_SETTINGS)
def test_a_hub_card_refuses_a_hostile_settings_file_naming_it(case, finished_run, tmp_path, capsys):
    run = _copy(finished_run, tmp_path)
    (run / "train_settings.json").write_bytes(HOSTILE_SETTINGS[case])
    out = tmp_path / "card"
    code, err = _cli(capsys, "export", str(run), "--output", str(out), "--hub-card", "--license", "mit")
    if case == "seed a string":  # the card reads only what it shows: the settings are shown as they are
        assert code == 0, err
        return
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{run / 'train_settings.json'}: " in err and not out.exists(), err
