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
its own settings (WANDB_MODE, WANDB_PROJECT), logged in with the studio's `wandb_api_key` when
it has one (Settings: handed to wandb.init's settings, never to an environment: jobs/childenv.py),
else its own login (WANDB_API_KEY, ~/.netrc); a run with no key anywhere is refused before it
starts (tracker_login.py). A tracker that cannot start (an OSError, RuntimeError, ValueError or
the tracker's own error: wandb's UsageError / CommError) is the run's ConfigError naming report_to
(`start_failure`); one that fails while the run trains is closed with a warning in the log; the
training goes on.

A resumed session starts its trackers at its first step (`open(..., first_step)`): TensorBoard's
writer purges what an earlier session logged from that step on (`purge_step`), so the steps
between the checkpoint and a killed session's last step are drawn once, as this session logs
them (RELIABILITY 861).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from lorastudio.config_host import tracker_problems
from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.training.events import Event
from lorastudio.training.resume.folder_guard import check_folder
from lorastudio.training.resume.run_files import TENSORBOARD, parse_sample_name

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
    """The trackers of one run. `wrap(emit)` before training, `open(run_dir, config, first_step)`
    once the run folder is claimed (events before it are passed on only), `close()` at the end
    (also done by the Complete or Error event). `wandb_key`: the studio's W&B API key (None:
    wandb's own login); `wandb_identity_file`: the studio's W&B identity token file (used when
    there is no key). `writers`: name -> factory(run_dir, config, first_step, wandb_key) of each
    tracker's writer, wandb's also given `identity_file=` when there is one (WRITERS; a test may
    record what a factory is given)."""

    def __init__(
        self,
        report_to: list[str],
        wandb_key: SecretStr | None = None,
        writers: dict[str, Callable[..., Any]] | None = None,
        wandb_identity_file: Path | None = None,
    ):
        self.report_to = list(report_to)
        self._key = wandb_key
        self._identity_file = wandb_identity_file
        self._factories = writers if writers is not None else WRITERS
        self._writers: list[Any] = []
        self._run_dir: Path | None = None

    def wrap(self, emit: Callable[[Event], None]) -> Callable[[Event], None]:
        if not self.report_to:
            return emit

        def both(event: Event) -> None:
            emit(event)
            self.write(event)

        return both

    def open(self, run_dir: Path, config: dict[str, Any], first_step: int = 1) -> None:
        """Start each tracker; `first_step`: the first step this session logs (a resume's
        checkpoint step + 1). Raises ConfigError (report_to) when a package is missing or a
        tracker cannot start (`start_failure`)."""
        if not self.report_to:
            return
        problems = tracker_problems(self.report_to)
        if problems:
            raise ConfigError(problems)
        self._run_dir = run_dir
        check_folder(run_dir)  # a folder put at the run's path since it started takes no tracker folder
        for name in self.report_to:
            try:
                extra = (
                    {"identity_file": self._identity_file} if name == "wandb" and self._identity_file else {}
                )
                self._writers.append(self._factories[name](run_dir, config, first_step, self._key, **extra))
            except Exception as err:  # mapped below; anything else is raised as it is
                failure = start_failure(name, err, self._key)
                self.close()
                if failure is None:
                    raise
                raise failure from None  # from None: wandb's chain may quote its settings

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
            except (OSError, RuntimeError, ValueError, *tracker_errors()) as err:
                said = _hidden(str(err), self._key)
                log.warning("experiment tracker %s failed and is closed: %s", writer.name, said)
                self._writers.remove(writer)

    def close(self) -> None:
        for writer in self._writers:
            try:
                writer.close()
            except (OSError, RuntimeError, ValueError, *tracker_errors()) as err:
                said = _hidden(str(err), self._key)
                log.warning("experiment tracker %s did not close cleanly: %s", writer.name, said)
        self._writers = []


def tracker_errors() -> tuple[type[BaseException], ...]:
    """The trackers' own error classes among the loaded modules: wandb.errors.Error (its
    UsageError "No API key configured", its CommError / AuthenticationError of a server it cannot
    reach or that refuses the key), once wandb was imported; () before."""
    errors = sys.modules.get("wandb.errors")
    found = getattr(errors, "Error", None)
    return (found,) if isinstance(found, type) and issubclass(found, BaseException) else ()


def start_failure(name: str, err: BaseException, key: SecretStr | None = None) -> ConfigError | None:
    """The run's ConfigError (report_to) for tracker `name`'s failure to start `err`: an
    OSError, RuntimeError, ValueError or one of `tracker_errors()`; None for anything else (a
    defect, raised as it is). The message never shows the API key `key`."""
    if not isinstance(err, (OSError, RuntimeError, ValueError, *tracker_errors())):
        return None
    said = _hidden(str(err).strip() or type(err).__name__, key)
    return ConfigError([FieldProblem("report_to", f"{name} could not start: {said}")])


def _hidden(text: str, key: SecretStr | None) -> str:
    """`text` with the API key `key` (if any) shown as '**********'."""
    secret = key.get_secret_value() if key is not None else ""
    return text.replace(secret, "**********") if secret else text


def _prompt_indexed(paths: list[Path]) -> list[tuple[int, Path]]:
    """Each sample file with its prompt index, read from its name: a round may lack a prompt's
    file (its image was not finite, RELIABILITY 1651), so a position is not the prompt's index."""
    indexed = []
    for position, path in enumerate(paths):
        parsed = parse_sample_name(path.name)
        indexed.append((position if parsed is None else parsed[1], path))
    return indexed


def _pixels(path: Path) -> Any:
    """(H, W, 3) uint8 array of a sample PNG."""
    import numpy as np
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))  # (H, W, 3)


def tensorboard_arguments(run_dir: Path, first_step: int) -> dict[str, Any]:
    """SummaryWriter's arguments for a session whose first logged step is `first_step`: from
    a resume (first_step > 1) it purges the events an earlier session wrote at that step and
    after (`purge_step`: a killed session logged past its last checkpoint)."""
    return {"log_dir": str(run_dir / TENSORBOARD), "purge_step": first_step if first_step > 1 else None}


class _TensorBoard:
    name = "tensorboard"

    def __init__(self, run_dir: Path, config: dict[str, Any], first_step: int, key: SecretStr | None):
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(**tensorboard_arguments(run_dir, first_step))

    def scalars(self, values: dict[str, float], step: int) -> None:
        for tag, value in values.items():
            self._writer.add_scalar(tag, value, step)

    def images(self, paths: list[Path], step: int) -> None:
        for i, path in _prompt_indexed(paths):
            self._writer.add_image(f"samples/{i}", _pixels(path), step, dataformats="HWC")

    def close(self) -> None:
        self._writer.close()


class _Wandb:
    name = "wandb"

    def __init__(
        self,
        run_dir: Path,
        config: dict[str, Any],
        first_step: int,
        key: SecretStr | None,
        identity_file: Path | None = None,
    ):
        import wandb

        self._wandb = wandb
        # the studio's key in wandb.init's settings (sent to its wandb-core service over its
        # socket), never in an environment; None: wandb's own login (WANDB_API_KEY, ~/.netrc)
        settings = wandb.Settings(api_key=key.get_secret_value()) if key is not None else None
        if key is None and identity_file is not None:
            # wandb 0.31's login reads an identity token file from WANDB_IDENTITY_TOKEN_FILE or
            # from the session's credentials, which wandb.setup's settings set (wandb.init's are
            # not read for it): the path, never an environment
            wandb.setup(settings=wandb.Settings(identity_token_file=str(identity_file)))
        self._run = wandb.init(  # W&B writes under <dir>/wandb (run_files.WANDB)
            project="lorastudio", name=run_dir.name, dir=str(run_dir), config=config,
            reinit="create_new", settings=settings,
        )  # fmt: skip

    def scalars(self, values: dict[str, float], step: int) -> None:
        self._run.log(values, step=step)

    def images(self, paths: list[Path], step: int) -> None:
        self._run.log(
            {f"samples/{i}": self._wandb.Image(str(p)) for i, p in _prompt_indexed(paths)}, step=step
        )

    def close(self) -> None:
        self._run.finish()


WRITERS: dict[str, Callable[..., Any]] = {"tensorboard": _TensorBoard, "wandb": _Wandb}
