"""The one progress rule of the long verbs (elmo.progress): a bar on a terminal, a plain line per
interval elsewhere (never the same line twice, nothing for a short run), none with --no-progress;
and every long verb's --help says so."""

import io

import pytest

import elmo.progress as progress
from elmo.cli.main import main
from elmo.progress import LogLines, progress_bar


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(progress.time, "monotonic", fake)
    return fake


def test_a_short_run_in_a_log_prints_nothing(clock):
    log = io.StringIO()
    with progress_bar(None, file=log, total=100, unit="sent") as bar:
        assert isinstance(bar, LogLines)
        for _ in range(100):
            clock.now += 0.1  # 10 s in all, under the interval
            bar.update(1)
    assert log.getvalue() == ""


def test_asked_for_the_bar_is_drawn_in_a_log_too(clock):
    """``--progress`` (True) is a user asking for the bar: it is drawn wherever standard error
    goes, as before the rule; the default (None) follows the rule."""
    log = io.StringIO()
    with progress_bar(True, file=log, total=3) as bar:
        assert not isinstance(bar, LogLines)
        bar.update(3)
    assert "3/3" in log.getvalue()


def test_a_long_run_in_a_log_prints_a_line_per_interval_and_its_end_once(clock, monkeypatch):
    monkeypatch.setattr(progress, "LOG_INTERVAL", 30.0)
    log = io.StringIO()
    bar = progress_bar(None, file=log, total=100, unit="step")
    for step in range(100):
        clock.now += 1.0  # 100 s: lines at 30, 60, 90 s, and the end
        bar.update(1)
        bar.set_postfix(loss=f"{step / 10:.1f}", refresh=True)
    bar.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert len(lines) == 4, lines
    assert lines[0].startswith(" 30%") or "30/100" in lines[0], lines[0]
    assert "100/100" in lines[-1] and "loss=9.9" in lines[-1], lines[-1]
    assert len(set(lines)) == len(lines)


def test_the_last_line_is_written_once_even_when_refreshed_again(clock):
    log = io.StringIO()
    bar = LogLines(file=log, total=2, interval=0.0)
    bar.update(2)
    bar.refresh()
    bar.set_postfix(loss="1.0", refresh=False)
    bar.close()
    finals = [line for line in log.getvalue().splitlines() if "2/2" in line]
    assert len(finals) == len(set(finals)), log.getvalue()


def test_on_a_terminal_a_bar_and_with_no_progress_nothing(clock):
    screen = Terminal()
    with progress_bar(None, file=screen, total=3) as bar:
        bar.update(3)
    assert "\r" in screen.getvalue() and "3/3" in screen.getvalue()
    quiet = Terminal()
    with progress_bar(False, file=quiet, total=3) as bar:
        bar.update(3)
    assert quiet.getvalue() == ""


@pytest.mark.parametrize("argv", [["embed"], ["train"], ["finetune"], ["evaluate"], ["neighbours"], ["prepare"],
                                  ["task", "train"]])
def test_every_long_verb_has_the_rules_option(argv, capsys):
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    text = " ".join(capsys.readouterr().out.split()).replace("--no- progress", "--no-progress")
    assert "--progress, --no-progress" in text
    assert "default: a bar on a terminal, and elsewhere, a log or a pipe, one line every 30 s" in text
    assert "--progress: the bar wherever standard error goes; --no-progress: none" in text


def test_train_in_a_log_writes_plain_lines_each_once(tmp_path, capsys, monkeypatch):
    """elmo train with standard error in a log (pytest's capture is not a terminal), a line at
    every step (interval 0): no carriage-return redraws, and no line twice (its last line was
    written three times before the rule)."""
    from conftest import FIXTURES

    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    corpus = FIXTURES / "bilm-tf" / "train"
    assert main(["train", "--train", str(corpus / "data.txt"), "--vocab", str(corpus / "vocab.txt"), "--config", "tiny",
                 "--batch-size", "4", "--unroll-steps", "10", "--max-tokens", "400", "--output",
                 str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = [line for line in err.splitlines() if "step" in line and "|" in line]
    assert any("10/10" in line for line in lines), err
    assert len(lines) == len(set(lines)), err
    assert sum("loss=" in line and "10/10" in line for line in lines) == 1, err
