"""cli/run_display.py: what a run prints when stderr is a log file rather than a terminal, and the
figures every step line carries (memory included)."""

from __future__ import annotations

import io
import re
from typing import Any

from rich.console import Console

from lorastudio.cli.run_display import ProgressDisplay, step_stats
from lorastudio.training.events import Preparing, Progress


def _step(step: int, total: int = 30, memory: float | None = 1.25, skipped: int = 0) -> Progress:
    return Progress(
        step=step, total_steps=total, epoch=0, loss=0.5, avg_loss=0.6, lr=1e-4, grad_norm=0.1,
        samples_per_second=None if step == 1 else 2.5, peak_memory_gb=memory, skipped_steps=skipped,
    )  # fmt: skip


def _plain_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=60, log_path=False), out  # narrow: no wrapping


def _lines(out: io.StringIO) -> list[str]:
    """The printed lines without their "[HH:MM:SS] " stamps (each line must have one)."""
    lines = out.getvalue().splitlines()
    assert all(re.fullmatch(r"\[\d\d:\d\d:\d\d\] \S.*", line) for line in lines), lines
    return [line[11:] for line in lines]


def test_step_figures_carry_loss_lr_speed_and_memory():
    assert step_stats(_step(1)) == "loss 0.5000 avg 0.6000 lr 1.0e-04 - img/s mem 1.2 GB"
    assert (
        step_stats(_step(2, memory=None, skipped=3))
        == "loss 0.5000 avg 0.6000 lr 1.0e-04 2.50 img/s skipped 3"
    )


def test_a_log_file_gets_whole_lines_on_the_first_every_tenth_and_the_last_step():
    console, out = _plain_console()
    seconds = iter(float(i) for i in range(100))  # one second per step
    with ProgressDisplay(console, clock=lambda: next(seconds)) as display:
        assert not display.live
        for done in range(9):
            display.emit(Preparing(phase="latents", done=done, total=8))
        for step in range(1, 31):
            display.emit(_step(step))
    lines = _lines(out)
    assert lines[0] == "latents 8/8 ready"  # phases: one line when complete, not one per item
    steps = [line.split()[1] for line in lines[1:]]
    assert steps == [
        "1/30",
        "3/30",
        "6/30",
        "9/30",
        "12/30",
        "15/30",
        "18/30",
        "21/30",
        "24/30",
        "27/30",
        "30/30",
    ]
    assert lines[2] == "step 3/30 loss 0.5000 avg 0.6000 lr 1.0e-04 2.50 img/s mem 1.2 GB eta 0:00:27"
    assert "eta" not in lines[1] and "eta" not in lines[-1]  # no rate yet / nothing left


def test_a_log_file_hears_of_the_decode_scan_when_it_begins_once_a_minute_and_at_its_end():
    console, out = _plain_console()
    seconds = iter(float(i * 20) for i in range(100))  # 20 s between counts
    with ProgressDisplay(console, clock=lambda: next(seconds)) as display:
        for done in range(0, 9000, 1000):
            display.emit(Preparing(phase="decoding", done=done, total=10_000))
        display.emit(Preparing(phase="decoding", done=10_000, total=10_000))
    assert _lines(out) == [
        "decoding every pixel of 10000 image(s) no check has seen yet, once, before the models load",
        "decoding 3000/10000",  # 60 s after the first line
        "decoding 6000/10000",
        "decoding 10000/10000 ready",
    ]


def test_a_slow_run_still_logs_at_least_once_a_minute():
    console, out = _plain_console()
    seconds = iter(float(i * 45) for i in range(100))  # 45 s a step
    with ProgressDisplay(console, every=1000, clock=lambda: next(seconds)) as display:
        for step in range(1, 6):
            display.emit(_step(step, total=1000))
    steps = [line.split()[1] for line in _lines(out)]
    assert steps == ["1/1000", "3/1000", "5/1000"]  # 90 s after the previous line each time


def test_a_terminal_gets_live_bars_not_lines():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200, log_path=False)
    with ProgressDisplay(console) as display:
        assert display.live
        display.emit(_step(1))
        assert display.tasks  # the training bar exists


def test_figures_drop_the_least_important_first_to_fit():
    event = _step(2, total=2000)
    assert step_stats(event, 200) == step_stats(event)
    assert step_stats(event, 40) == "loss 0.5000 avg 0.6000 2.50 img/s"  # no lr, no memory
    assert step_stats(event, 25) == "loss 0.5000 2.50 img/s"
    assert step_stats(event, 5) == "loss 0.5000"  # the loss always shows
    assert step_stats(_step(2, skipped=3), 5) == "loss 0.5000 skipped 3"


def test_the_live_bar_at_80_columns_shows_loss_and_eta_uncut():
    """At 80 columns the live bar keeps its figures readable: no "…", the loss and the step
    count whole, and an ETA (issue 30: it collapsed to "training ━ … eta loss…")."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80, log_path=False, color_system=None)
    with ProgressDisplay(console) as display:
        display.emit(_step(1, total=2000))
        display.emit(_step(20, total=2000))
        display.progress.refresh()
    text = out.getvalue()
    last = [line for line in re.split(r"[\r\n]|\x1b\[[0-9;]*[A-Za-z]", text) if "training" in line][-1]
    assert "…" not in last, last
    assert "loss 0.5000" in last and "20/2000" in last and "eta" in last and "img/s" in last, last
    assert len(last) <= 80


def test_a_log_files_eta_follows_a_run_whose_steps_got_slower():
    """The plain line's ETA is the pace of about the last minute's steps (RELIABILITY 1311): 100
    steps at 1 s, then 4 s a step; 2 minutes into the slow steps the ETA is at 4 s a step, where
    the pace since the first step said 1.69 s."""
    console, out = _plain_console()
    times = [float(s) for s in range(1, 101)] + [100.0 + 4 * (s - 100) for s in range(101, 131)]
    seconds = iter(times)
    with ProgressDisplay(console, every=10, clock=lambda: next(seconds)) as display:
        for step in range(1, 131):
            display.emit(_step(step, total=1130))
    last = _lines(out)[-1]
    assert last.startswith("step 130/1130") and last.endswith("eta 1:06:40"), last  # 1000 x 4 s


def _warning_shown(make: Any, message: str) -> None:
    """`message` as a run's warning on a live terminal display of a console `make` makes: printed
    as the text it is, no hyperlink made."""
    from lorastudio.training.events import RunWarning

    out = io.StringIO()
    console = make(file=out, force_terminal=True, width=200, log_path=False)
    with ProgressDisplay(console=console) as display:
        assert display.live
        display.emit(RunWarning(step=1, message=message))
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # the terminal's styling
    assert f"warning: {message}" in text, text
    assert "\x1b]8;id" not in out.getvalue()  # no hyperlink made


def test_a_warning_naming_a_file_is_printed_as_text_not_markup():
    """A run's warning (a file name, a sample's error) printed on a terminal was read as rich
    markup: `[/x]` raised MarkupError out of the display (the `train` command's end), `[bold]`
    was eaten, `[link=...]` made a hyperlink, `:warning:` an emoji (RELIABILITY 2232). The
    CLI's own Console (plain_console) takes no markup anywhere."""
    hostile = "sample of [/x].png and [bold]b[/bold] [link=http://evil.example]here[/link] :warning:"
    _warning_shown(Console, hostile)  # any console the display is given

    from lorastudio.cli.safe_output import plain_console

    _warning_shown(plain_console, hostile)
    out = io.StringIO()
    plain_console(file=out, width=200).print(f"[/{hostile}]", style="yellow")
    assert f"[/{hostile}]" in out.getvalue()
