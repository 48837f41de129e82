"""Experiment trackers (TrainConfig.report_to): TensorBoard and Weights & Biases, fed from the
engine's own events, never needed for the studio's charts (the run store has the metrics).

A tracker is an event sink beside the caller's: `TrackerSink.wrap(emit)` passes every event on
and writes, per optimizer step (Progress), loss, average loss, learning rate, gradient norm,
samples/s and peak memory, each validation round's loss (Validated: validation/loss and
validation/best_loss, when the run has a validation_split) and each sample round's images
(SampleReady, read from the run folder). Both are optional extras
(`pip install 'lorastudio[tensorboard]'` / `'lorastudio[wandb]'`, pinned in pyproject.toml), off
by default; a run that asks for one whose package is missing is refused with the reason
(config_host.tracker_problems, called by the preflight and the job service). TensorBoard writes into
<run folder>/tensorboard/ (through torch.utils.tensorboard); W&B into <run folder>/wandb/ with
its own settings (WANDB_MODE, WANDB_PROJECT, its login). A tracker that fails while the run
trains is closed with a warning in the log; the training goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lorastudio.config_host import tracker_problems
from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.training.events import Event
from lorastudio.training.folder_guard import check_folder
from lorastudio.training.run_files import TENSORBOARD

log = logging.getLogger(__name__)

_SCALARS = (
    ("train/loss", "loss"),
    ("train/avg_loss", "avg_loss"),
    ("train/lr", "lr"),
    ("train/grad_norm", "grad_norm"),
    ("perf/samples_per_second", "samples_per_second"),
    ("perf/peak_memory_gb", "peak_memory_gb"),
)


class TrackerSink:
    """The trackers of one run. `wrap(emit)` before training, `open(run_dir, config)` once the run
    folder is claimed (events before it are passed on only), `close()` at the end (also done by
    the Complete or Error event)."""

    def __init__(self, report_to: list[str]):
        self.report_to = list(report_to)
        self._writers: list[Any] = []
        self._run_dir: Path | None = None

    def wrap(self, emit: Callable[[Event], None]) -> Callable[[Event], None]:
        if not self.report_to:
            return emit

        def both(event: Event) -> None:
            emit(event)
            self.write(event)

        return both

    def open(self, run_dir: Path, config: dict[str, Any]) -> None:
        """Start each tracker. Raises ConfigError (report_to) when a package is missing or a
        tracker cannot start."""
        if not self.report_to:
            return
        problems = tracker_problems(self.report_to)
        if problems:
            raise ConfigError(problems)
        self._run_dir = run_dir
        check_folder(run_dir)  # a folder put at the run's path since it started takes no tracker folder
        for name in self.report_to:
            try:
                self._writers.append(
                    _TensorBoard(run_dir) if name == "tensorboard" else _Wandb(run_dir, config)
                )
            except (OSError, RuntimeError, ValueError) as err:
                self.close()
                raise ConfigError([FieldProblem("report_to", f"{name} could not start: {err}")]) from err

    def write(self, event: Event) -> None:
        """Write one event to every open tracker; a tracker that fails is closed (logged)."""
        if event.type == "progress":
            values = {tag: getattr(event, key) for tag, key in _SCALARS if getattr(event, key) is not None}
            self._each(lambda w: w.scalars(values, event.step))  # type: ignore[attr-defined]
        elif event.type == "validation":
            values = {"validation/loss": event.loss, "validation/best_loss": event.best_loss}  # type: ignore[attr-defined]
            self._each(lambda w: w.scalars(values, event.step))  # type: ignore[attr-defined]
        elif event.type == "sample_ready" and self._run_dir is not None:
            paths = [self._run_dir / rel for rel in event.images]  # type: ignore[attr-defined]
            self._each(lambda w: w.images(paths, event.step))  # type: ignore[attr-defined]
        elif event.type in ("complete", "error"):
            self.close()

    def _each(self, action: Callable[[Any], None]) -> None:
        for writer in list(self._writers):
            try:
                action(writer)
            except (OSError, RuntimeError, ValueError) as err:
                log.warning("experiment tracker %s failed and is closed: %s", writer.name, err)
                self._writers.remove(writer)

    def close(self) -> None:
        for writer in self._writers:
            try:
                writer.close()
            except (OSError, RuntimeError, ValueError) as err:
                log.warning("experiment tracker %s did not close cleanly: %s", writer.name, err)
        self._writers = []


def _pixels(path: Path) -> Any:
    """(H, W, 3) uint8 array of a sample PNG."""
    import numpy as np
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))  # (H, W, 3)


class _TensorBoard:
    name = "tensorboard"

    def __init__(self, run_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(run_dir / TENSORBOARD))

    def scalars(self, values: dict[str, float], step: int) -> None:
        for tag, value in values.items():
            self._writer.add_scalar(tag, value, step)

    def images(self, paths: list[Path], step: int) -> None:
        for i, path in enumerate(paths):
            self._writer.add_image(f"samples/{i}", _pixels(path), step, dataformats="HWC")

    def close(self) -> None:
        self._writer.close()


class _Wandb:
    name = "wandb"

    def __init__(self, run_dir: Path, config: dict[str, Any]):
        import wandb

        self._wandb = wandb
        self._run = wandb.init(  # W&B writes under <dir>/wandb (run_files.WANDB)
            project="lorastudio", name=run_dir.name, dir=str(run_dir), config=config, reinit="create_new"
        )

    def scalars(self, values: dict[str, float], step: int) -> None:
        self._run.log(values, step=step)

    def images(self, paths: list[Path], step: int) -> None:
        self._run.log({f"samples/{i}": self._wandb.Image(str(p)) for i, p in enumerate(paths)}, step=step)

    def close(self) -> None:
        self._run.finish()
