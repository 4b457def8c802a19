"""The experiment runner's reuse of identical runs (experiments/task_experiments.py)."""

import json
import os

import pytest
from conftest import load_experiment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def experiments():
    return load_experiment("task_experiments")


def _run(folder, settings, finished=True):
    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(settings, f)
    if finished:
        with open(os.path.join(folder, "metrics.json"), "w") as f:
            json.dump({"dev": 0.5, "seconds": 1.0}, f)


def test_identical_run_ignores_output_and_matches_everything_else(experiments, tmp_path):
    runs = str(tmp_path)
    settings = {"output": "x", "elmo": {"l2": 0.001, "layers": "mix"}, "train": {"seed": 1, "epochs": 6}}
    earlier = os.path.join(runs, "main", "ner", "elmo", "seed-1")
    _run(earlier, {**settings, "output": earlier})
    wanted = {**settings, "output": os.path.join(runs, "layers", "ner", "mix-l2-0.001", "seed-1")}
    assert experiments.identical_run(runs, "ner", 1, wanted) == earlier
    # Any other difference (here lambda, or the epoch cap) means a new run.
    assert experiments.identical_run(runs, "ner", 1, {**wanted, "elmo": {"l2": 1.0, "layers": "mix"}}) is None
    assert experiments.identical_run(runs, "ner", 1, {**wanted, "train": {"seed": 1, "epochs": 20}}) is None
    # A different seed folder or task name is never matched.
    assert experiments.identical_run(runs, "ner", 2, wanted) is None
    assert experiments.identical_run(runs, "pos", 1, wanted) is None


def test_identical_run_skips_unfinished_runs_and_the_run_itself(experiments, tmp_path):
    runs = str(tmp_path)
    settings = {"elmo": {"l2": 0.001}}
    unfinished = os.path.join(runs, "main", "ner", "elmo", "seed-1")
    _run(unfinished, {**settings, "output": unfinished}, finished=False)
    assert experiments.identical_run(runs, "ner", 1, {**settings, "output": "elsewhere"}) is None
    itself = os.path.join(runs, "layers", "ner", "top", "seed-1")
    _run(itself, {**settings, "output": itself})
    assert experiments.identical_run(runs, "ner", 1, {**settings, "output": itself}) is None


def test_a_finished_run_with_other_settings_in_the_planned_folder_is_an_error(experiments, tmp_path):
    """The domain experiment's "fine-tuned" runs live in one folder whatever biLM they read: runs of
    another fine-tuned biLM there are not results of this one, and must not be taken for them."""
    args = _args(tmp_path, seeds=[1])
    planned = experiments.variant_config(args, "domain", args.configs[0], "fine-tuned",
                                         {"bilm": {"model": "/models/ft-new"}}, 1)
    _run(planned.output, {**planned.to_dict(), "bilm": {**planned.to_dict()["bilm"], "model": "/models/ft-old"}})
    with pytest.raises(SystemExit, match=r"seed-1: holds a finished run with other settings.*"
                                         r"bilm.model: the run's '/models/ft-old', wanted '/models/ft-new'"):
        experiments.finished_run(args, "coref-litbank", planned)
    # The same settings are the run's own result; where the layer cache lives does not matter.
    same = experiments.variant_config(args, "domain", args.configs[0], "fine-tuned", {"bilm": {"model": "/models/ft-old"}}, 1)
    with open(os.path.join(same.output, "config.json"), "w") as f:
        json.dump({**same.to_dict(), "cache_dir": "elsewhere"}, f)
    assert experiments.finished_run(args, "coref-litbank", same) == (same.output, False)


def _args(tmp_path, **extra):
    import argparse

    values = dict(runs=str(tmp_path), cache=str(tmp_path / "cache"), epochs=None, bilm=None, seeds=[1, 2],
                  configs=[os.path.join(ROOT, "configs", "tasks", "coref-litbank.toml")], variants=None, trained=[],
                  evaluated=[], reused=0, untimed=0, quiet=True, gap=str(tmp_path / "gap"),
                  data_root=str(tmp_path / "data"))
    values.update(extra)
    return argparse.Namespace(**values)


def _keep_gap(folder, f1=0.5):
    """The GAP evaluations that a finished main run of the coref config keeps beside it."""
    for name in ("development", "test"):
        details = {"overall": {"f1": f1}, "M": {"f1": f1 + 0.05}, "F": {"f1": f1 - 0.05}, "bias": 0.8}
        with open(os.path.join(folder, f"gap-{name}.json"), "w") as f:
            json.dump({"score": f1, "details": details, "seconds": 5.0}, f)


def _finished_main_runs(experiments, args, tests):
    """Fake finished main-experiment runs of the coref config: {variant: [test score per seed]}."""
    folders = {}
    for variant, scores in tests.items():
        for seed, score in zip(args.seeds, scores):
            config = experiments.variant_config(args, "main", args.configs[0], variant, experiments.VARIANTS["main"][variant], seed)
            _run(config.output, config.to_dict())
            with open(os.path.join(config.output, "metrics.json"), "w") as f:
                json.dump({"dev": score, "test": score, "seconds": 60.0}, f)
            with open(os.path.join(config.output, "test-eval.json"), "w") as f:
                json.dump({"score": score, "seconds": 2.0}, f)
            _keep_gap(config.output)
            folders[variant, seed] = config.output
    return folders


def test_variants_pick_part_of_an_experiment(experiments, tmp_path):
    args = _args(tmp_path, variants=["elmo"])
    _finished_main_runs(experiments, args, {"elmo": [0.6, 0.62]})
    lines = experiments.table(args, "main", experiments.VARIANTS["main"])
    assert lines[0] == "| task | metric | split | elmo |" and "61.00 ± 1.41" in lines[2]
    assert len(lines) == 3  # no error-reduction table without the baseline
    with pytest.raises(SystemExit, match="nope"):
        experiments.table(_args(tmp_path, variants=["nope"]), "main", experiments.VARIANTS["main"])
    # the whole experiment later finds both variants' runs
    _finished_main_runs(experiments, args, {"baseline": [0.5, 0.5]})
    full = experiments.table(_args(tmp_path), "main", experiments.VARIANTS["main"])
    assert "| coref-litbank | +11.00 | 22.0% |" in full


def test_layer_table_is_the_papers_table_2_and_reuses_the_main_runs(experiments, tmp_path, monkeypatch):
    """Without --variants the layer table has the paper's columns (no ELMo, top layer, lambda 1,
    lambda 0.001) and no "average"; its baseline and lambda-0.001 columns are the main table's runs,
    found by their settings, so only "top" and "mix-l2-1" would train."""
    args = _args(tmp_path)
    _finished_main_runs(experiments, args, {"baseline": [0.5, 0.52], "elmo": [0.6, 0.62]})
    trained = []

    def fake_train(config, resume, progress):
        trained.append(os.path.relpath(config.output, str(tmp_path)))
        _run(config.output, config.to_dict())
        return {"dev": 0.7, "test": 0.7, "seconds": 1.0}

    monkeypatch.setattr(experiments, "train_task", fake_train)
    monkeypatch.setattr(experiments, "with_evaluated_test", lambda args, folder, config, metrics: metrics)
    lines = experiments.table(args, "layers", experiments.VARIANTS["layers"])
    assert lines[0] == "| task | metric | split | baseline | top | mix-l2-1 | mix-l2-0.001 |"
    assert lines[2] == "| coref-litbank | coref_f1 | test | 51.00 ± 1.41 | 70.00 ± 0.00 | 70.00 ± 0.00 | 61.00 ± 1.41 |"
    assert sorted(trained) == [os.path.join("layers", "coref-litbank", variant, f"seed-{seed}")
                               for variant in ("mix-l2-1", "top") for seed in (1, 2)]
    assert args.reused == 4
    # "average" is still there when asked for
    average = experiments.table(_args(tmp_path, variants=["average"]), "layers", experiments.VARIANTS["layers"])
    assert average[0] == "| task | metric | split | average |"


def test_status_lists_each_planned_run_and_estimates_the_rest(experiments, tmp_path, capsys):
    """--status trains nothing: it says which runs are done, reused from another experiment, partly
    trained (epochs in last.pt) or not started, and estimates the rest from finished runs' times."""
    import torch

    args = _args(tmp_path, seeds=[1, 2, 3])
    plan = {(v, s): experiments.variant_config(args, "main", args.configs[0], v, experiments.VARIANTS["main"][v], s)
            for v in ("baseline", "elmo") for s in (1, 2, 3)}
    for seed, seconds in ((1, 60.0), (2, 120.0)):
        config = plan["baseline", seed]
        _run(config.output, config.to_dict())
        with open(os.path.join(config.output, "metrics.json"), "w") as f:
            json.dump({"dev": 0.5, "seconds": seconds, "best_epoch": 3, "history": [{}] * 5}, f)
        _keep_gap(config.output)
    partial = plan["baseline", 3]
    _run(partial.output, partial.to_dict(), finished=False)
    torch.save({"epoch": 2, "best_epoch": 1}, os.path.join(partial.output, "last.pt"))
    elsewhere = os.path.join(str(tmp_path), "placement", "coref-litbank", "input", "seed-1")
    _run(elsewhere, {**plan["elmo", 1].to_dict(), "output": elsewhere})

    argv = ["main", "--status", "--runs", str(tmp_path), "--configs", args.configs[0], "--cache", args.cache,
            "--data-root", args.data_root]
    assert experiments.main(argv) == 0
    out = capsys.readouterr().out
    assert "| main | coref-litbank | baseline | 2 | done | 5/8 (3) | 2.0 |" in out
    assert "| main | coref-litbank | baseline | 3 | partial | 2/8 (1) |  |" in out
    assert "| main | coref-litbank | elmo | 1 | reused |" in out
    assert "| main | coref-litbank | elmo | 3 | pending | 0/8 |  |" in out
    assert "6 runs: 2 done (3.0 CPU-minutes), 1 reused, 1 partly trained, 2 not started." in out
    # baseline seed 3 has 6 of 8 epochs left at the mean 90 s of its finished seeds; +ELMo has no time yet.
    assert "Left: about 1 CPU-minutes for 1 runs" in out and "2 more runs have no finished run" in out
    assert not os.path.exists(os.path.join(plan["elmo", 2].output, "config.json"))
    assert not os.path.exists(os.path.join(str(tmp_path), "docs"))
    with pytest.raises(SystemExit):
        experiments.main(["weights", "--status", "--runs", str(tmp_path)])


def test_the_time_line_says_when_a_run_was_timed_only_after_a_resume(experiments, tmp_path):
    args = _args(tmp_path, seeds=[1], experiment="main")
    config = experiments.variant_config(args, "main", args.configs[0], "baseline", {"elmo": {"enabled": False}}, 1)
    _run(config.output, config.to_dict())
    with open(os.path.join(config.output, "metrics.json"), "w") as f:
        json.dump({"dev": 0.5, "seconds": 30.0, "seconds_counted_from_epoch": 4}, f)
    with open(os.path.join(config.output, "test-eval.json"), "w") as f:
        json.dump({"score": 0.5, "seconds": 2.0}, f)
    _keep_gap(config.output)
    experiments.run_variant(args, "main", args.configs[0], "baseline", {"elmo": {"enabled": False}}, 1)
    experiments.write_markdown(args, str(tmp_path / "t.md"), "T", "cmd", ["| x |"])
    text = (tmp_path / "t.md").read_text()
    assert "Training time: 0.5 minutes over the 1 runs" in text
    assert "1 of the runs were resumed from a checkpoint that did not record the time" in text


def test_gap_table_from_kept_results(experiments, tmp_path):
    args = _args(tmp_path)
    folders = _finished_main_runs(experiments, args, {"baseline": [0.5, 0.5], "elmo": [0.6, 0.6]})
    for (variant, seed), folder in folders.items():
        _keep_gap(folder, {"baseline": 0.4, "elmo": 0.5}[variant] + 0.02 * seed)
    lines = experiments.gap_transfer(args)
    assert lines[2] == "| development | baseline | 43.00 ± 1.41 | 48.00 ± 1.41 | 38.00 ± 1.41 | 0.80 ± 0.00 |"
    assert lines[5] == "| test | +ELMo | 53.00 ± 1.41 | 58.00 ± 1.41 | 48.00 ± 1.41 | 0.80 ± 0.00 |"
    assert sum(args.trained) == 8 * 5.0


def test_reported_test_scores_come_from_evaluating_the_test_file(experiments, tmp_path, monkeypatch, capsys):
    """The tables report what elmo task evaluate gives on the test file (kept as test-eval.json and
    not computed twice), and say so when the training's own test score differs."""
    import elmo.tasks.training

    args = _args(tmp_path, seeds=[1])
    config = experiments.variant_config(args, "main", args.configs[0], "elmo", {}, 1)
    _run(config.output, config.to_dict())
    with open(os.path.join(config.output, "metrics.json"), "w") as f:
        json.dump({"dev": 0.5, "test": 0.61, "seconds": 60.0}, f)
    _keep_gap(config.output)
    calls = []

    def fake_evaluate(folder, path, split, **kwargs):
        calls.append((folder, path, split))
        return {"score": 0.6, "metric": "coref_f1"}

    monkeypatch.setattr(elmo.tasks.training, "evaluate_task", fake_evaluate)
    for _ in range(2):
        metrics = experiments.run_variant(args, "main", args.configs[0], "elmo", {}, 1)
        assert metrics["test"] == 0.6 and metrics["dev"] == 0.5
    assert calls == [(config.output, config.data.test.path, "test")]
    with open(os.path.join(config.output, "test-eval.json")) as f:
        assert json.load(f)["score"] == 0.6
    assert "elmo task evaluate gives test 0.600000, training gave 0.610000" in capsys.readouterr().err
    assert len(args.evaluated) == 2


def test_diagnose_tables_curves_classes_and_weights(experiments, tmp_path):
    """The diagnosis of a pair task from kept results: mean curves over the seeds that trained an
    epoch, per-class recall and precision, summed confusions, layer weights, and the plot."""
    args = _args(tmp_path, configs=[os.path.join(ROOT, "configs", "tasks", "sick.toml")],
                 png=str(tmp_path / "curves.png"))
    confusion = {"a": {"a": 3, "b": 1}, "b": {"a": 2, "b": 4}}
    for variant in ("baseline", "elmo"):
        for seed, epochs in zip(args.seeds, (2, 3)):
            config = experiments.variant_config(args, "main", args.configs[0], variant,
                                                experiments.VARIANTS["main"][variant], seed)
            _run(config.output, config.to_dict())
            history = [{"epoch": e, "dev": 0.5 + 0.1 * e + (0.05 if variant == "elmo" else 0), "train_loss": 1.0 / e}
                       for e in range(1, epochs + 1)]
            weights = {"input": [0.2, 0.3, 0.5], "output": [0.6, 0.2, 0.2]} if variant == "elmo" else {}
            with open(os.path.join(config.output, "metrics.json"), "w") as f:
                json.dump({"dev": history[-1]["dev"], "best_epoch": epochs, "history": history,
                           "layer_weights": weights, "seconds": 1.0}, f)
            classes = {"a": {"gold": 4, "recall": 0.75, "precision": 0.6}, "b": {"gold": 6, "recall": 4 / 6, "precision": 0.8}}
            with open(os.path.join(config.output, "test-eval.json"), "w") as f:
                json.dump({"details": {"classes": classes, "confusion": confusion}, "seconds": 3.0}, f)
    lines = experiments.diagnose(args)
    text = "\n".join(lines)
    assert "| 1 | 60.00 (2) | 1.0000 | 65.00 (2) | 1.0000 |" in text
    assert "| 3 | 80.00 (1) | 0.3333 | 85.00 (1) | 0.3333 |" in text
    assert "| best epoch by seed | [2, 3] |  | [2, 3] |  |" in text
    assert "| a | 4 | 75.00 ± 0.00 | 60.00 ± 0.00 | 75.00 ± 0.00 | 60.00 ± 0.00 |" in text
    assert "| b | 4 | 8 |" in text  # confusion summed over the two seeds
    assert "| input | 0.200 ± 0.000 | 0.300 ± 0.000 | 0.500 ± 0.000 |" in text
    assert os.path.getsize(tmp_path / "curves.png") > 1000
    assert len(args.evaluated) == 4


def _fake_evaluations(monkeypatch, calls):
    import elmo.tasks.training

    def fake_evaluate(folder, path, split, **kwargs):
        calls.append((os.path.basename(path), split, kwargs.get("kind")))
        return {"score": 0.7, "details": {"overall": {"f1": 0.7}}}

    monkeypatch.setattr(elmo.tasks.training, "evaluate_task", fake_evaluate)


def test_a_finished_run_keeps_the_transfer_evaluations_while_its_model_is_there(experiments, tmp_path, monkeypatch):
    """The GAP scores of the main coref runs are made next to the run while best.pt is on disk
    (before the test evaluation, which marks the run as kept), and read back afterwards."""
    args = _args(tmp_path, seeds=[1])
    config = experiments.variant_config(args, "main", args.configs[0], "elmo", {}, 1)
    _run(config.output, config.to_dict())
    with open(os.path.join(config.output, "metrics.json"), "w") as f:
        json.dump({"dev": 0.5, "test": 0.7, "seconds": 60.0}, f)
    open(os.path.join(config.output, "best.pt"), "wb").close()
    calls = []
    _fake_evaluations(monkeypatch, calls)
    for _ in range(2):
        assert experiments.run_variant(args, "main", args.configs[0], "elmo", {}, 1)["test"] == 0.7
    assert calls == [("gap-development.tsv", None, "gap"), ("gap-test.tsv", None, "gap"),
                     (os.path.basename(config.data.test.path), "test", None)]
    for label in ("gap-development", "gap-test", "test-eval"):
        assert os.path.isfile(os.path.join(config.output, f"{label}.json"))
    # Other experiments' runs, and tasks no transfer table reads, have nothing more to keep.
    assert experiments.later_evaluations(args, "placement", "coref-litbank") == []
    assert experiments.later_evaluations(args, "main", "ner-conll2003") == []
    assert [label for label, *_ in experiments.later_evaluations(_args(tmp_path, snli="x"), "main", "sick")] \
        == ["snli-dev", "snli-test"]


def test_a_finished_run_whose_model_is_gone_trains_again(experiments, tmp_path, monkeypatch, capsys):
    """Kept from another machine as JSON files only, a main coref run without its GAP scores is
    listed as 'retrain', then trained again (its old metrics kept aside, its old test score dropped),
    and the new model is evaluated on GAP and on the test file."""
    args = _args(tmp_path, seeds=[1])
    config = experiments.variant_config(args, "main", args.configs[0], "baseline", {"elmo": {"enabled": False}}, 1)
    _run(config.output, config.to_dict())
    with open(os.path.join(config.output, "metrics.json"), "w") as f:
        json.dump({"dev": 0.5, "test": 0.61, "seconds": 120.0, "history": [{}] * 8, "best_epoch": 8}, f)
    with open(os.path.join(config.output, "test-eval.json"), "w") as f:
        json.dump({"score": 0.61, "seconds": 2.0}, f)

    argv = ["main", "--status", "--runs", str(tmp_path), "--configs", args.configs[0], "--cache", args.cache,
            "--seeds", "1", "--variants", "baseline", "--data-root", args.data_root]
    assert experiments.main(argv) == 0
    out = capsys.readouterr().out
    assert "| main | coref-litbank | baseline | 1 | retrain | 8/8 (8) | 2.0 |" in out
    assert "1 to train again" in out and "Left: about 2 CPU-minutes for 1 runs" in out

    trained = []

    def fake_train(cfg, resume, progress):
        trained.append(cfg.output)
        assert not os.path.exists(os.path.join(cfg.output, "metrics.json"))
        assert not os.path.exists(os.path.join(cfg.output, "test-eval.json"))
        open(os.path.join(cfg.output, "best.pt"), "wb").close()
        metrics = {"dev": 0.52, "test": 0.7, "seconds": 100.0}
        with open(os.path.join(cfg.output, "metrics.json"), "w") as f:
            json.dump(metrics, f)
        return metrics

    monkeypatch.setattr(experiments, "train_task", fake_train)
    calls = []
    _fake_evaluations(monkeypatch, calls)
    metrics = experiments.run_variant(args, "main", args.configs[0], "baseline", {"elmo": {"enabled": False}}, 1)
    assert trained == [config.output] and metrics["test"] == 0.7 and args.trained == [100.0]
    assert [c[0] for c in calls] == ["gap-development.tsv", "gap-test.tsv", os.path.basename(config.data.test.path)]
    with open(os.path.join(config.output, "first-training-metrics.json")) as f:
        assert json.load(f)["dev"] == 0.5
    with open(os.path.join(config.output, "test-eval.json")) as f:
        assert json.load(f)["score"] == 0.7
    assert "training again, for gap-development, gap-test" in capsys.readouterr().err
    # Now kept with its GAP scores, it is done: nothing trains again.
    experiments.run_variant(args, "main", args.configs[0], "baseline", {"elmo": {"enabled": False}}, 1)
    assert trained == [config.output]


def test_weights_average_the_both_runs_over_seeds_and_table_them(experiments, tmp_path):
    """Figure 2 reads every finished seed of the placement experiment's "both" runs: the plot shows
    the mean, the Markdown table mean ± std, and a seed that has not finished is left out."""
    args = _args(tmp_path, seeds=[1, 2, 3])
    weights = {1: {"input": [0.2, 0.5, 0.3], "output": [0.3, 0.3, 0.4]},
               2: {"input": [0.4, 0.3, 0.3], "output": [0.3, 0.3, 0.4]}}
    for seed in (1, 2, 3):
        config = experiments.variant_config(args, "placement", args.configs[0], "both",
                                            experiments.VARIANTS["placement"]["both"], seed)
        _run(config.output, config.to_dict(), finished=seed in weights)
        if seed in weights:
            with open(os.path.join(config.output, "metrics.json"), "w") as f:
                json.dump({"dev": 0.5, "seconds": 1.0, "layer_weights": weights[seed]}, f)
    png, output = tmp_path / "docs" / "w.png", tmp_path / "docs" / "w.md"
    argv = ["weights", "--runs", str(tmp_path), "--configs", args.configs[0], "--png", str(png), "--output", str(output),
            "--data-root", args.data_root]
    assert experiments.main(argv) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = output.read_text()
    assert "| coref-litbank | input | 2 | 0.30 ± 0.14 | 0.40 ± 0.14 | 0.30 ± 0.00 |" in text
    assert "| coref-litbank | output | 2 | 0.30 ± 0.00 | 0.30 ± 0.00 | 0.40 ± 0.00 |" in text
    assert "Weights sum to 1 over a mix's layers" in text and "trains nothing" in text
    assert not list((tmp_path / "docs").glob("*.partial.png"))
    assert "lambda 1 against lambda 0.001" not in text  # no layer-table runs yet
    # Once the layer table's two mixes have finished, their input weights are tabled side by side.
    for variant, weight in (("mix-l2-1", [0.34, 0.33, 0.33]), ("mix-l2-0.001", [0.1, 0.6, 0.3])):
        config = experiments.variant_config(args, "layers", args.configs[0], variant,
                                            experiments.VARIANTS["layers"][variant], 1)
        _run(config.output, config.to_dict())
        with open(os.path.join(config.output, "metrics.json"), "w") as f:
            json.dump({"dev": 0.5, "seconds": 1.0, "layer_weights": {"input": weight}}, f)
    assert experiments.main(argv) == 0
    text = output.read_text()
    assert "| coref-litbank | 1 | 1 | 0.34 | 0.33 | 0.33 |" in text
    assert "| coref-litbank | 0.001 | 1 | 0.10 | 0.60 | 0.30 |" in text


def test_precision_table_pairs_seeds_reuses_main_runs_and_refuses_a_fallen_back_run(experiments, tmp_path,
                                                                                   monkeypatch):
    """The float32 column is the main table's +ELMo runs (same settings); the bfloat16 and int8
    runs train, and each seed's scores get their differences from float32. A run whose config
    records that float32 ran (no bfloat16 instructions) stops the table."""
    args = _args(tmp_path)
    _finished_main_runs(experiments, args, {"elmo": [0.60, 0.62]})
    fall_back = []  # the precisions that run float32 instead

    def fake_train(config, resume, progress):
        settings = config.to_dict()
        if config.bilm.precision in fall_back:
            settings["bilm"] = {**settings["bilm"], "precision": "float32"}
        _run(config.output, settings)
        metrics = {"dev": 0.61, "test": 0.61, "seconds": 1.0}
        with open(os.path.join(config.output, "metrics.json"), "w") as f:
            json.dump(metrics, f)
        return metrics

    monkeypatch.setattr(experiments, "train_task", fake_train)
    monkeypatch.setattr(experiments, "with_evaluated_test", lambda args, folder, config, metrics: metrics)
    lines = experiments.precision_table(args)
    assert lines[0] == "| task | metric | split | float32 | bfloat16 | int8 |"
    assert "| coref-litbank | 1 | 60.00 | 61.00 | +1.00 | 61.00 | +1.00 |" in lines
    assert "| coref-litbank | 2 | 62.00 | 61.00 | -1.00 | 61.00 | -1.00 |" in lines
    assert args.reused == 2
    only = experiments.precision_table(_args(tmp_path, variants=["bfloat16"]))
    assert only[0] == "| task | metric | split | bfloat16 |" and len(only) == 3  # no pairs without float32
    fall_back.append("bfloat16")
    with pytest.raises(SystemExit, match="asked for a bfloat16 biLM, ran float32"):
        experiments.precision_table(_args(tmp_path / "other"))
