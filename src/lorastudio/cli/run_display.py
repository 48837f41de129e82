"""How a run shows itself on the console (`lorastudio train`, `lorastudio demo`): the progress
display of train()'s events, the plan line, the Ctrl-C stop handler, the run's own warnings
as `warning:` lines (WarningLines) and quieting the libraries' own progress bars.

On a terminal the display is live bars (one per preparation phase, then training with loss,
average loss, LR, samples/s, peak memory and ETA). A narrow terminal (below WIDE_COLUMNS) drops
the bar's elapsed time and draws a shorter bar, and the step's figures drop the least important
ones first (lr, memory, average loss, then speed) so that the line is never cut: loss, the step
count and the ETA always show. When stderr is not a terminal (a log file,
nohup, CI) live bars would end up as one truncated line, so the display prints plain log lines
instead: each preparation phase when it completes and at least once a minute (the run's decode
scan of new images also when it begins), and the training step with the same figures
on the first step, every `every` steps (default a tenth of the run), at least once a minute, and
on the last step.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from lorastudio.cli.safe_output import live_display, plain_console
from lorastudio.training.events import Event, PlanChosen, Preparing, StopRequest
from lorastudio.training.events import Progress as ProgressEvent

PLAIN_LINE_MAX_GAP_S = 60.0
# A plain line's ETA: the pace of the steps of about the last minute (RELIABILITY 1311: since the
# first step, a run whose steps got slower was forecast at its old pace for most of the run).
PACE_WINDOW_S = 60.0
WIDE_COLUMNS = 120  # a terminal at least this wide shows every column of the live bar
# The narrow live bar's columns other than the figures: "training " (9), a 10-wide bar, "N/M"
# (up to 13), "eta H:MM:SS" (11), rich's separators (1 each).
_NARROW_FIXED = 9 + 10 + 13 + 11 + 5


class WarningLines(logging.Handler):
    """While installed (a context manager), lorastudio's own warning records (the run's dataset
    warnings: data/scan_warnings.py, the captions its text encoder cuts; a tracker closed ...) are
    the command's `warning:` lines on stderr, yellow on a terminal unless NO_COLOR, as every other
    warning it prints (`warning (rank N):` from a rank other than 0); an error record an `error:`
    line. Without it they were bare lines (Python's last-resort handler). They go on to any other
    handler as before (a test's caplog)."""

    def __init__(self, rank: int = 0):
        super().__init__(logging.WARNING)
        self.rank = rank
        self._logger = logging.getLogger("lorastudio")

    def emit(self, record: logging.LogRecord) -> None:
        import typer

        from lorastudio.cli.app import no_color

        error = record.levelno >= logging.ERROR
        kind = "error" if error else "warning"
        prefix = kind if self.rank == 0 else f"{kind} (rank {self.rank})"
        colour = typer.colors.RED if error else typer.colors.YELLOW
        try:
            text = record.getMessage()
        except (TypeError, ValueError):  # a record whose arguments do not format
            text = str(record.msg)
        typer.secho(f"{prefix}: {text}", fg=colour, err=True, color=False if no_color() else None)

    def __enter__(self) -> WarningLines:
        self._logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)


def quiet_libraries() -> None:
    """Silence diffusers' and transformers' own progress bars and info logs (our display shows
    progress); warnings and errors still print."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    for library in (diffusers_logging, transformers_logging):
        library.set_verbosity_error()
        library.disable_progress_bar()


def step_stats(event: ProgressEvent, width: int | None = None) -> str:
    """The figures of one training step: "loss 0.1234 avg 0.1300 lr 1.0e-04 2.50 img/s mem 41.2 GB"
    (samples/s "-" until there is a steady-state figure; memory only when the run reports it).
    With `width`, the least important figures are left out until the text fits (lr, memory,
    average loss, speed); the loss and skipped steps always stay."""
    sps = f"{event.samples_per_second:.2f}" if event.samples_per_second is not None else "-"
    parts = {  # in display order; _DROP_ORDER says which go first
        "loss": f"loss {event.loss:.4f}",
        "avg": f"avg {event.avg_loss:.4f}",
        "lr": f"lr {event.lr:.1e}",
        "speed": f"{sps} img/s",
    }
    if event.peak_memory_gb is not None:
        parts["mem"] = f"mem {event.peak_memory_gb:.1f} GB"
    if event.skipped_steps:
        parts["skipped"] = f"skipped {event.skipped_steps}"
    for name in _DROP_ORDER:
        if width is None or len(" ".join(parts.values())) <= width:
            break
        parts.pop(name, None)
    return " ".join(parts.values())


_DROP_ORDER = ("lr", "mem", "avg", "speed")


def _clock_text(seconds: float) -> str:
    whole = int(round(seconds))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


class ProgressDisplay:
    """Renders training events on `console` (live bars on a terminal, plain lines otherwise; see
    the module docstring). Use as a context manager; pass `emit` to train(). `every`: plain mode's
    step interval (None: a tenth of the run); `clock`: seconds, for the ETA and the minute gap."""

    def __init__(
        self,
        console: Console | None = None,
        every: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.console = console or plain_console(stderr=True, log_path=False)
        self.live = self.console.is_terminal
        self.wide = self.console.width >= WIDE_COLUMNS
        columns = [TextColumn("[bold]{task.description:<12}" if self.wide else "[bold]{task.description}")]
        columns.append(BarColumn(bar_width=16 if self.wide else 10))
        columns.append(MofNCompleteColumn())
        if self.wide:
            columns.append(TimeElapsedColumn())
        columns += [TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[stats]}")]
        self.progress = Progress(*columns, console=self.console)
        self._redraws = live_display()
        self.tasks: dict[str, TaskID] = {}
        self.last_error: str | None = None
        self.warnings: list[str] = []  # the run's warning events: repeated in the closing summary
        self.every = every
        self.clock = clock
        self._first: tuple[int, float] | None = None  # (step, time) of the first progress event
        self._paces: list[tuple[int, float]] = []  # (step, time) of the ETA's window (PACE_WINDOW_S)
        self._last_line_at: float | None = None
        self._phase_line_at: dict[str, float] = {}  # plain mode: a phase's last line (or start)

    def __enter__(self) -> ProgressDisplay:
        if self.live:
            self._redraws.__enter__()  # its cursor moves pass the terminal's escaping (safe_output)
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            try:
                self.progress.stop()
            finally:
                self._redraws.__exit__(None, None, None)

    def say(self, text: str) -> None:
        """One timestamped line: rich's log layout on a terminal; in a log file the whole line
        unwrapped and unpadded ("[HH:MM:SS] text"), so that it greps and tails well."""
        if self.live:
            self.console.log(text, markup=False, emoji=False)  # names in it are text, never markup
        else:
            stamp = time.strftime("%H:%M:%S")
            self.console.print(
                f"[{stamp}] {text}", soft_wrap=True, markup=False, emoji=False, highlight=False
            )

    def _task(self, key: str, title: str, total: int) -> TaskID:
        if key not in self.tasks:
            self.tasks[key] = self.progress.add_task(title, total=total, stats="")
        return self.tasks[key]

    def emit(self, event: Event) -> None:
        """The train() event sink."""
        if event.type == "model_load_started":
            self.say(f"loading {event.component}")
        elif event.type == "model_load_completed":
            self.say(f"loaded {event.component} in {event.seconds:.1f} s")
        elif event.type == "preparing":
            if self.live:
                task = self._task(event.phase, event.phase, event.total)
                self.progress.update(task, completed=event.done, total=event.total)
            else:
                self._plain_phase(event)
        elif event.type == "progress":
            if self.live:
                task = self._task("train", "training", event.total_steps)
                room = None if self.wide else max(11, self.console.width - _NARROW_FIXED)
                self.progress.update(task, completed=event.step, stats=step_stats(event, room))
            else:
                self._plain_step(event)
        elif event.type == "plan_chosen":
            self.say(plan_line(event))
        elif event.type == "sample_ready":
            self.say(f"samples of step {event.step}: {', '.join(event.images)}")
        elif event.type == "validation":
            self.say(
                f"validation loss of step {event.step}: {event.loss:.5g} over {event.images} held-out "
                f"image(s) (best {event.best_loss:.5g} at step {event.best_step})"
            )
        elif event.type == "warning":
            self.warnings.append(event.message)
            self.say(f"warning: {event.message}")
        elif event.type == "error":
            self.last_error = event.message

    def _plain_phase(self, event: Preparing) -> None:
        """A preparation phase in a log: one line when it completes; a long one also at least
        once a minute, and the run's decode scan (minutes on a large new dataset, before any
        model loads) also when it begins."""
        if event.done >= event.total:
            self.say(f"{event.phase} {event.done}/{event.total} ready")
            return
        now = self.clock()
        last = self._phase_line_at.get(event.phase)
        if last is None and event.phase == "decoding":
            self.say(
                f"decoding every pixel of {event.total} image(s) no check has seen yet, once, "
                "before the models load"
            )
        elif last is not None and now - last >= PLAIN_LINE_MAX_GAP_S:
            self.say(f"{event.phase} {event.done}/{event.total}")
        elif last is not None:
            return
        self._phase_line_at[event.phase] = now

    def _plain_step(self, event: ProgressEvent) -> None:
        now = self.clock()
        if self._first is None:
            self._first = (event.step, now)
        if not self._paces or event.step > self._paces[-1][0]:
            self._paces.append((event.step, now))
            while len(self._paces) > 2 and now - self._paces[1][1] >= PACE_WINDOW_S:
                self._paces.pop(0)  # the window's start: the newest step at least that old
        every = self.every or max(1, event.total_steps // 10)
        due = (
            event.step == self._first[0]
            or event.step % every == 0
            or event.step >= event.total_steps
            or (self._last_line_at is not None and now - self._last_line_at >= PLAIN_LINE_MAX_GAP_S)
        )
        if not due:
            return
        self._last_line_at = now
        line = f"step {event.step}/{event.total_steps} {step_stats(event)}"
        first_step, started = self._paces[0]
        if event.step > first_step and event.step < event.total_steps:
            per_step = (now - started) / (event.step - first_step)
            line += f" eta {_clock_text(per_step * (event.total_steps - event.step))}"
        self.say(line)


class StopOnInterrupt:
    """Ctrl-C handler for a run: the first SIGINT asks the run to stop and save, the second
    raises KeyboardInterrupt. With `sigterm`, a SIGTERM (`kill`, a service manager's stop) does
    the same (by default it ends Python at once, leaving a fresh run's folder behind: a rank of
    a multi-GPU launch leaves SIGTERM to torchrun). `quiet`: say nothing (a rank other than 0 of
    a launch: rank 0 says it once, RELIABILITY 395). `check` is the train() StopCheck."""

    def __init__(self, console: Console | None = None, sigterm: bool = False, quiet: bool = False):
        self.console = console or plain_console(stderr=True, log_path=False)
        self.quiet = quiet
        self.requested = False
        self._signals = [signal.SIGINT, signal.SIGTERM] if sigterm else [signal.SIGINT]
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopOnInterrupt:
        self._previous = {sig: signal.signal(sig, self._handle) for sig in self._signals}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        again = "Ctrl-C" if signum == signal.SIGINT else "another SIGTERM or Ctrl-C"
        if not self.quiet:
            self.console.print(
                f"stopping after this step and saving ({again} to abort)", style="yellow", markup=False
            )

    def check(self) -> StopRequest | None:
        return StopRequest(save=True) if self.requested else None


def plan_line(event: PlanChosen) -> str:
    """The PlanChosen event as one readable line: how the denoiser phase runs and why."""
    parts = [
        f"base {event.base_precision}",
        f"checkpointing {event.gradient_checkpointing}",
        f"offload {event.offload_blocks} block{'' if event.offload_blocks == 1 else 's'}",
        f"micro-batch {event.micro_batch_size}",
        f"compile {(event.compile_regions or 'on') if event.compile else 'off'}",
        f"attention {event.attention_backend}",
    ]
    if event.fused_projections:
        parts.append(f"{event.fused_projections} fused projection groups")
    how = f"set by the {'checkpoint' if event.decided_by == 'checkpoint' else 'settings'}"
    if event.decided_by == "measured":
        how = f"measured ({len(event.trials)} trial{'' if len(event.trials) == 1 else 's'})"
    if event.memory_budget_gb is not None:
        how += f", budget {event.memory_budget_gb:g} GB"
    line = f"plan: {', '.join(parts)}; {how}"
    if event.fallbacks:
        line += f"; fallbacks: {'; '.join(event.fallbacks)}"
    return line


LOADER_NAMES = {
    "comfyui": "ComfyUI",
    "diffusers": "diffusers' load_lora_weights",
    "a1111_forge": "A1111 / Forge",
}


def loader_warnings(loaders: dict[str, Any]) -> list[str]:
    """One line per loader whose save-time check (the sidecar's `loaders`, lora/portability.py)
    found that it would not load the written file as trained, naming the first keys of each
    finding (unconsumed, mismatched, ...), the error its conversion raised (`error`: diffusers'
    reader refusing the file) and the check's `reason` (A1111 / Forge: the layout it reads); never
    an empty "()" (RELIABILITY 681, 784); [] when every checked loader loads it."""
    lines = []
    for key, check in loaders.items():
        if not isinstance(check, dict) or not check.get("checked") or check.get("ok") is not False:
            continue
        found = [
            f"{what} {len(keys)} key(s): {', '.join(map(str, keys[:2]))}{', ...' if len(keys) > 2 else ''}"
            for what, keys in check.items()
            if isinstance(keys, list) and keys
        ]
        if check.get("error"):  # its reader refused the file: no keys to name (it was "()")
            found.append(f"its reader failed: {check['error']}")
        if check.get("reason"):  # a layout it does not read (it was "()" too)
            found.append(str(check["reason"]))
        why = f" ({'; '.join(found)})" if found else ""
        lines.append(
            f"{LOADER_NAMES.get(key, key)} would not load this file as trained{why}: see the sidecar's loaders"
        )
    return lines
