"""What cut a `lorastudio train` command short (cli/train_cmd.py) and what its run left on disk:
the words of a second Ctrl-C or SIGTERM, of a signal before the run's own stop handler was installed
or after it was removed, and of a `--gpus` launch's processes stopped (`interruption`), then the
LoRA, snapshots and checkpoints kept, or "nothing saved" (`report_abort`). Split from
cli/train_cmd.py to keep it short; no torch at import.
"""

from __future__ import annotations

from pathlib import Path

import typer

from lorastudio.cli.run_display import StopOnInterrupt
from lorastudio.cli.termination import Terminated


def interruption(stop: BaseException, stopper: StopOnInterrupt | None, ranks: int) -> str:
    """What cut the command short, for its record and its closing lines: a second Ctrl-C (or
    SIGTERM) while the run stopped; a SIGTERM of a `--gpus` launch (`ranks` processes: killed
    with their agent, as when this process died of it before); or one signal that came before the
    run's own handler was installed (while the config was checked, a model prefetched, the
    modules imported) or after it was removed (the run had ended)."""
    if stopper is not None and stopper.requested:
        return "aborted by a second Ctrl-C or SIGTERM"
    by = "SIGTERM" if isinstance(stop, Terminated) else "Ctrl-C"
    if ranks:
        return f"interrupted by {by}: the {ranks} processes of the launch were stopped"
    return f"interrupted by {by} before training began" if stopper is None else f"interrupted by {by}"


def report_abort(how: str, run_dir: Path | None) -> None:
    """After a second Ctrl-C, or a signal outside the run's handler: say what cut the command
    short (`how`) and what the run left on disk (its LoRA, snapshots, checkpoints to --resume
    from) or that nothing was kept."""
    from lorastudio.lora.snapshots import LORAS
    from lorastudio.training.resume.checkpoint import list_checkpoints

    typer.secho(how, fg=typer.colors.YELLOW, err=True)
    kept = []
    if run_dir is not None and run_dir.is_dir():
        final = run_dir / f"{run_dir.name}.safetensors"
        kept += [f"LoRA        {final}"] if final.is_file() else []
        kept += [f"snapshot    {p}" for p in sorted((run_dir / LORAS).glob("*.safetensors"))]
        kept += [f"checkpoint  {p} (lorastudio train --resume {run_dir})" for p in list_checkpoints(run_dir)]
    for line in kept:
        typer.echo(line)
    if not kept:
        typer.echo("nothing saved")
