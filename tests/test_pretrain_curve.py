"""experiments/pretrain_curve.py: a run drawn after the run it continues or branched off."""

import csv
import json

import pytest
from conftest import load_experiment

curve_script = load_experiment("pretrain_curve")

FIELDS = ["step", "tokens", "loss", "forward_perplexity", "backward_perplexity", "learning_rate",
          "tokens_per_second", "elapsed_seconds", "heldout_forward_perplexity", "heldout_backward_perplexity",
          "heldout_perplexity"]


def write_run(folder, evaluations, tokens_per_step=640, rate=1000.0):
    """A run directory with an options.json and a metrics.csv holding ``evaluations``:
    ``(step, heldout_perplexity)`` pairs (with a metric row without evaluation between them)."""
    folder.mkdir()
    (folder / "options.json").write_text(json.dumps({"batch_size": tokens_per_step // 20, "unroll_steps": 20}))
    with open(folder / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        for step, perplexity in evaluations:
            tokens = step * tokens_per_step
            common = {"loss": 4.0, "forward_perplexity": 50, "backward_perplexity": 50, "learning_rate": 0.05,
                      "tokens_per_second": rate}
            writer.writerow({**common, "step": step - 1, "tokens": tokens - tokens_per_step,
                             "elapsed_seconds": (tokens - tokens_per_step) / rate})
            writer.writerow({**common, "step": step, "tokens": tokens, "elapsed_seconds": tokens / rate,
                             "heldout_forward_perplexity": perplexity, "heldout_backward_perplexity": perplexity,
                             "heldout_perplexity": perplexity})
    return folder


def read_curve(folder):
    with open(folder / "curve.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_a_branch_drops_the_earlier_runs_evaluations_after_it(tmp_path):
    first = write_run(tmp_path / "C", [(1000, 150.0), (2000, 140.0), (3000, 135.0)])
    assert curve_script.main([str(first), "--output", str(tmp_path / "c-curve")]) == 0
    branch = write_run(tmp_path / "anneal", [(500, 120.0), (1000, 118.0)])
    # Branched off C at step 2500 (1.6M tokens): C's evaluation at 3000 is not on its way.
    assert curve_script.main([str(branch), "--continues", str(tmp_path / "c-curve" / "curve.csv"),
                              "--continues-at", str(2500 * 640), "--output", str(tmp_path / "out")]) == 0
    rows = read_curve(tmp_path / "out")
    assert [(r["run"], int(r["step"]), int(r["tokens"]), float(r["heldout_average"])) for r in rows] == [
        ("C", 1000, 640_000, 150.0), ("C", 2000, 1_280_000, 140.0),
        ("anneal", 3000, 1_920_000, 120.0), ("anneal", 3500, 2_240_000, 118.0)]
    # Hours go on from C's last kept evaluation plus the 500 steps before the branch.
    assert float(rows[2]["busy_hours"]) == pytest.approx((2500 + 500) * 640 / 1000 / 3600, abs=1e-3)
    assert (tmp_path / "out" / "curve.png").stat().st_size > 0


def test_without_a_branch_point_the_run_continues_the_last_evaluation(tmp_path):
    first = write_run(tmp_path / "C", [(1000, 150.0), (2000, 140.0)])
    curve_script.main([str(first), "--output", str(tmp_path / "c-curve")])
    more = write_run(tmp_path / "D", [(1000, 130.0), (2000, 125.0)])
    curve_script.main([str(more), "--continues", str(tmp_path / "c-curve" / "curve.csv"), "--output",
                       str(tmp_path / "out")])
    assert [int(r["tokens"]) for r in read_curve(tmp_path / "out")] == [640_000, 1_280_000, 1_920_000, 2_560_000]


def test_a_branch_point_before_the_first_evaluation_is_refused(tmp_path, capsys):
    first = write_run(tmp_path / "C", [(1000, 150.0), (2000, 140.0)])
    curve_script.main([str(first), "--output", str(tmp_path / "c-curve")])
    branch = write_run(tmp_path / "E", [(500, 120.0), (1000, 118.0)])
    with pytest.raises(SystemExit):
        curve_script.main([str(branch), "--continues", str(tmp_path / "c-curve" / "curve.csv"),
                           "--continues-at", "1000", "--output", str(tmp_path / "out")])
    assert "before the first evaluation" in capsys.readouterr().err


def test_a_curve_that_stopped_falling_forecasts_nothing(tmp_path, capsys):
    run = write_run(tmp_path / "flat", [(1000, 150.0), (2000, 120.0), (3000, 110.0), (4000, 110.5), (5000, 110.4),
                                        (6000, 110.6)])
    assert curve_script.main([str(run), "--output", str(tmp_path / "out")]) == 0
    forecast = json.loads((tmp_path / "out" / "forecast.json").read_text())
    assert forecast["tokens_at_target"] is None and forecast["busy_hours_at_target"] is None
    assert "no forecast" in capsys.readouterr().out
    # A falling curve does forecast.
    falling = write_run(tmp_path / "falling", [(1000, 150.0), (2000, 130.0), (3000, 120.0), (4000, 112.0)])
    curve_script.main([str(falling), "--output", str(tmp_path / "out2")])
    assert json.loads((tmp_path / "out2" / "forecast.json").read_text())["tokens_at_target"] > 4000 * 640


def test_the_figure_goes_where_a_page_shows_it_and_the_numbers_stay_in_the_output(tmp_path):
    run = write_run(tmp_path / "B", [(1000, 150.0), (2000, 140.0)])
    figure = tmp_path / "docs" / "curve.png"
    figure.parent.mkdir()
    assert curve_script.main([str(run), "--output", str(tmp_path / "results"), "--figure", str(figure)]) == 0
    assert figure.stat().st_size > 0
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["curve.csv", "forecast.json"]
