"""`lorastudio train CONFIG [--set key=value ...]`: one training run in this process, with a
live progress bar. Ctrl-C once stops and saves the LoRA of the steps run (and a checkpoint);
twice aborts, saying what the run left on disk. Exit codes: 0 done, 2 refused (every problem
listed), 130 stopped by Ctrl-C (what was saved is printed), 1 an unexpected error. `lorastudio train --resume RUN_FOLDER_OR_CHECKPOINT [--set save_every=N ...]`
continues a run from its newest (or the given) checkpoint with the checkpoint's settings; with a
CONFIG too, the config must match the checkpoint's identity. `--set steps=N` (N above the run's
total) trains a stopped or finished run longer (training/extend.py: the schedule of a fresh
N-step run from there on); a finished run resumed without it is refused.

`--gpus N` (or num_gpus = N in the config) runs data-parallel: this command launches itself
through torchrun, one process per GPU (`--device cpu`: N gloo processes on the CPU, for testing),
the same way the job service does (jobs/agent.py: torchrun bound to this process's lifetime).
Rank 0 shows the progress and writes the files; Ctrl-C reaches every rank through torchrun, and
rank 0's stop-and-save is what every rank does.

A step loop silent past the job service's hang allowance is stopped as the service stops a
hung job (cli/self_watch.py in this process; a launch's: cli/launch_hang.py), exit 1.

The run is recorded in the studio's run store (jobs/cli_record.py, marked as a CLI run), so it
is listed under Runs by the server, the UI and `runs list`.

A server owns its studio home: on a home whose server is live this command is refused (train
through the server, or use another LORASTUDIO_HOME); see jobs/homelock.py. `--check` reads only
(it trains and writes nothing), so it runs beside a server.

Config file loading and --set overrides are in cli/config_file.py; the progress display and the
Ctrl-C stop handler in cli/run_display.py; the torchrun launch of `--gpus N` in cli/train_launch.py; what it trains (config or checkpoint) in cli/train_source.py.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from lorastudio import json_read
from lorastudio.cli.config_file import apply_overrides, load_config_file, localize_paths, split_overrides
from lorastudio.cli.run_display import (
    ProgressDisplay,
    StopOnInterrupt,
    WarningLines,
    loader_warnings,
    quiet_libraries,
)
from lorastudio.cli.safe_output import plain_console
from lorastudio.cli.self_watch import EXIT_HUNG, hang_watch
from lorastudio.cli.setting_flags import SettingFlagsCommand
from lorastudio.cli.termination import Terminated, refusal_status
from lorastudio.cli.train_abort import interruption, report_abort
from lorastudio.cli.train_launch import bind_to_agent, check_launch, launch
from lorastudio.cli.train_source import default_named as _default_named
from lorastudio.cli.train_source import resume_folder, run_config
from lorastudio.cli.user_path_args import user_path
from lorastudio.errors import ConfigError, FieldProblem, LorastudioError
from lorastudio.hub_token import hold_studio_hub_token
from lorastudio.jobs.dataset_claims import claim_cli_run
from lorastudio.jobs.launch_report import RUN_ID_ENV, note_rank_failure, note_rank_state
from lorastudio.training.events import Event

if TYPE_CHECKING:
    from lorastudio.jobs.prefetch import WeightPrefetch

EXIT_INTERRUPTED = 130  # stopped by Ctrl-C or SIGTERM (saved or not: the command says what it kept)


def register(app: typer.Typer) -> None:
    app.command("train", cls=SettingFlagsCommand)(train_cmd)  # `--steps 3`: its --set named


def train_cmd(
    config: Path | None = typer.Argument(
        None, callback=user_path, help="training config (.json or .toml); optional with --resume"
    ),
    overrides: list[str] = typer.Option(  # noqa: B006 (typer needs a list default)
        [],
        "--set",
        help="override a setting: key=value (value parsed as JSON when possible; a text setting keeps "
        "the text typed: trigger_word=123; a dotted key sets inside a list or table: datasets.0.repeats=4; "
        "given twice, the last wins)",
    ),
    device: str | None = typer.Option(
        None, "--device", help="cpu, cuda or cuda:N (default: CUDA if available)"
    ),
    resume: Path | None = typer.Option(
        None,
        "--resume",
        callback=user_path,
        help="continue a run: its output folder (newest checkpoint), a run's name under outputs/, or "
        "a checkpoint folder; --set steps=N (above its total) trains it longer; --set base_model=NAME "
        "(base_config, data_dir) names a base or dataset that moved (a moved studio home), its content compared",
    ),
    gpus: int | None = typer.Option(
        None,
        "--gpus",
        min=1,
        max=64,
        help="data-parallel processes, one per GPU, launched through torchrun (sets num_gpus; "
        "with --device cpu: gloo processes on the CPU)",
    ),
    check: bool = typer.Option(
        False,
        "--check",
        help="print the preflight report (settings, dataset, schedule, plan, warnings) and exit "
        "without training: 0 when the run would start, 2 with every problem when not. Like the "
        "web preflight it decodes new images for at most 30 s (a warning names those left; the "
        "run decodes them before its models load)",
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="replace the outputs of a previous run of the same output_name"
    ),
) -> None:
    """Train a LoRA from a config file (every setting of TrainConfig; unknown keys are errors),
    or resume one from a checkpoint. Ctrl-C (or SIGTERM) once stops and saves, twice aborts.
    Exits 0 when done, 2 when refused (every problem listed), 130 when stopped by Ctrl-C or
    SIGTERM, 1 when a server or another run holds the studio home, its step loop hung past the
    job service's allowance (LORASTUDIO_WORKER_TIMEOUT_SCALE) or on an unexpected error."""
    console = plain_console(stderr=True, log_path=False)
    rank = int(os.environ.get("RANK", "0"))
    launched = "WORLD_SIZE" in os.environ
    if launched:
        bind_to_agent()
        note_rank_state(rank, "started")  # a launch's command names a rank that never ended
    home_lock = claim = None
    prefetch: WeightPrefetch | None = None
    cfg = None
    record = watch = None
    stopper: StopOnInterrupt | None = None  # the run's own Ctrl-C / SIGTERM handler, once installed
    ranks = 0  # the processes of a --gpus launch, once started (a SIGTERM then ends them)
    name_hold = None  # a defaulted output name's reservation (name_reserve.py), held to the end
    try:
        hold_studio_hub_token()  # LORASTUDIO_HF_TOKEN for the preflight's and the loaders' hub calls
        resume = resume_folder(resume) if resume is not None else None
        settings = [*overrides, f"num_gpus={gpus}"] if gpus is not None else overrides
        if (
            check and not launched and config is not None and resume is None
        ):  # reads only: beside a server too
            _check_fresh_run(config, settings, device, check=True, overwrite=overwrite)  # exits
        if not launched and not check:  # a launch's ranks load what this process warms
            prefetch = _start_prefetch(config, settings)
        home_lock = _share_home()  # shared with the ranks of a launch and other CLI runs
        if not launched and not check:
            _remove_abandoned_runs()
            from lorastudio.cli.datasets_cmd import remove_killed_staging

            remove_killed_staging()  # a killed import's datasets/.uploads staging (data/staging_owner.py)
        if not launched and config is not None and resume is None:
            _check_fresh_run(config, settings, device, check=check, overwrite=overwrite)
        elif (check or overwrite) and resume is not None:  # without either: run_config asks for one
            flag = "--check" if check else "--overwrite"
            raise ConfigError([FieldProblem(flag, "applies to a fresh run's config file, not to a --resume")])
        cfg, checkpoint = run_config(config, settings, resume)
        if checkpoint is None and cfg.output_name is None and not launched:  # an abort says where
            cfg, name_hold = _default_named(cfg)
            settings = [*settings, f"output_name={cfg.output_name}"]  # a launch's ranks: this one name
        if prefetch is None and config is None and not launched:  # a --resume: its checkpoint's base
            from lorastudio.jobs.prefetch import start_prefetch
            from lorastudio.settings import get_settings

            prefetch = start_prefetch(cfg.model_dump(), get_settings())
        if checkpoint is not None:  # refused before it is recorded, as a fresh run's preflight is
            from lorastudio.training.session import resume_problems

            if problems := resume_problems(cfg, checkpoint):
                raise ConfigError(problems)
        claim = claim_cli_run(cfg)  # no caption writer meanwhile (jobs/dataset_claims.py)
        if cfg.num_gpus > 1 and not launched:
            check_launch(cfg, device)
            ranks = cfg.num_gpus
            code = launch(cfg.num_gpus, config, settings, device, resume, console)
            if code != 0:  # a rank failed (torchrun stopped the others): no empty run folder stays
                _remove_abandoned_runs()
            raise typer.Exit(code)
        from lorastudio.import_freeze import freeze_if_standalone
        from lorastudio.jobs.cli_record import open_cli_record
        from lorastudio.timings import process_started_at
        from lorastudio.training.loop import train

        freeze_if_standalone()  # the collections after each dropped model skip the libraries (import_freeze)
        for note in _flavour_notes(cfg):
            typer.secho(f"note: {note}", fg=typer.colors.YELLOW, err=True)
        quiet_libraries()
        display = ProgressDisplay(console) if rank == 0 else None
        # listed under Runs like a server's run (a launch's: under the id its command chose)
        record = open_cli_record(cfg, run_id=os.environ.get(RUN_ID_ENV)) if rank == 0 else None
        if record is not None and checkpoint is not None:  # the history of the run it continues
            from lorastudio.training.checkpoint import read_checkpoint_info

            record.carry_over(int(read_checkpoint_info(checkpoint)["step"]))
        stopper = StopOnInterrupt(console, sigterm=not launched, quiet=rank != 0)
        check = stopper.check
        run_id = record.run_id if record is not None else None  # in a fresh run's mark
        watch = hang_watch(launched, rank, cfg, run_id, console)  # the service's step watch
        with stopper, display or nullcontext(), WarningLines(rank):  # its warnings as `warning:` lines
            emit = display.emit if display is not None else _ignore
            emit = record.wrap(emit) if record is not None else emit
            emit = prefetch.wrap(emit) if prefetch is not None else emit  # follows the loads
            if watch is not None:  # its steps and busy work (cli/self_watch.py, cli/launch_hang.py)
                emit, check = watch.wrap_emit(emit), watch.wrap_check(check)
            started = process_started_at()  # the run's wall-time record counts the CLI's start
            result = train(
                cfg, emit, check, device=device, resume=checkpoint, started_at=started, run_id=run_id
            )
        if record is not None:
            record.end(result.stopped, result.steps_run, result.lora_path)
        hung = watch.answered() if watch is not None else None  # a hang stop it answered: saved
    except LorastudioError as err:
        if record is not None:
            record.fail(str(err))
        note_rank_failure(rank, str(err))  # a launch's command names the failed rank (no-op alone)
        prefix = "error" if rank == 0 else f"error (rank {rank})"
        typer.secho(f"{prefix}: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(refusal_status(err)) from None
    except (KeyboardInterrupt, Terminated) as stop:  # a second Ctrl-C, or a signal before the handler
        how = interruption(stop, stopper, ranks)
        if record is not None:
            record.abort(how)
        if rank == 0:
            report_abort(how, run_dir_of_cfg(cfg) if cfg is not None else None)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Exception as err:
        if record is not None:
            record.fail(f"{type(err).__name__}: {err}")
        note_rank_failure(rank, f"{type(err).__name__}: {err}")
        raise
    finally:
        if watch is not None:
            watch.close()
        if prefetch is not None:
            prefetch.stop()
        if record is not None:
            record.close()
        if claim is not None:
            claim.release()
        if home_lock is not None:
            home_lock.release()
        if name_hold is not None:
            name_hold.release()
        if launched:
            note_rank_state(rank, "ended")
    if rank != 0:
        return  # rank 0 reports the run
    if result.resumed_from is not None:
        typer.echo(f"resumed from step {result.resumed_from}")
    if result.lora_path is None:
        typer.echo(f"stopped after {result.steps_run} step(s); nothing saved")
        raise typer.Exit(EXIT_HUNG if hung else EXIT_INTERRUPTED if result.stopped and not launched else 0)
    state = "stopped early, saved" if result.stopped else "done"
    warned = display.warnings if display is not None else []
    typer.echo(f"{state}: {result.steps_run} step(s)" + (f", {len(warned)} warning(s)" if warned else ""))
    for line in warned:  # the run completed; what failed without failing it (exit code 0)
        typer.secho(f"warning: {line}", fg=typer.colors.YELLOW, err=True)
    typer.echo(f"LoRA     {result.lora_path}")
    sidecar = result.lora_path.with_suffix(".json")
    typer.echo(f"sidecar  {sidecar}")
    for line in loader_warnings(json_read.loads(sidecar.read_text()).get("loaders", {})):
        typer.secho(f"warning: {line}", fg=typer.colors.YELLOW, err=True)
    if result.stopped and not launched:  # a rank exits 0: torchrun takes any other code for a failure
        raise typer.Exit(EXIT_HUNG if hung else EXIT_INTERRUPTED)


def _start_prefetch(config: Path | None, overrides: list[str]) -> WeightPrefetch | None:
    """The page-cache prefetch of the run's weight files (jobs/prefetch.py), started before the
    checks and imports it overlaps, from the config file as given. None without a config file
    (a --resume starts it once the checkpoint's settings are read) or one that cannot be read
    (the checks that follow say why)."""
    from lorastudio.jobs.prefetch import start_prefetch
    from lorastudio.settings import get_settings

    if config is None:
        return None
    try:
        data = localize_paths(apply_overrides(load_config_file(config), overrides))
    except (LorastudioError, OSError, ValueError):
        return None
    return start_prefetch(data, get_settings())


def run_dir_of_cfg(cfg: Any) -> Path | None:
    """outputs/<output_name> of a run's config (None without a name)."""
    from lorastudio.settings import get_settings

    return get_settings().outputs_dir / cfg.output_name if cfg.output_name else None


def _check_fresh_run(
    config: Path, overrides: list[str], device: str | None, *, check: bool, overwrite: bool
) -> None:
    """Validate a fresh run like the job service (every problem at once: cli/train_check.py).
    With `check`, print the preflight report and exit 0, or exit 2 (HostMemoryShort, as the run
    would be refused) where the host RAM check before loading refuses it; with `overwrite`,
    remove the previous run's outputs of that name. Raises ConfigError."""
    from lorastudio.cli.train_check import check_run, print_report, replace_outputs
    from lorastudio.jobs.hardware import host_for_device, probe_in_this_process
    from lorastudio.jobs.host_memory import refuse_if_short
    from lorastudio.jobs.preflight import preflight_report
    from lorastudio.settings import get_settings

    probe_in_this_process()  # the run imports torch here anyway: no child imports it a second time
    settings = get_settings()
    data, malformed = split_overrides(load_config_file(config), overrides)
    try:  # a malformed --set is listed with the settings' problems, not alone
        run = check_run(localize_paths(data), settings, overwrite=overwrite, device=device)
    except ConfigError as err:
        raise ConfigError(malformed + err.problems) from None
    if malformed:
        raise ConfigError(malformed)
    host = host_for_device(device, run.config.num_gpus)  # `--device cpu` on a GPU host: the CPU's forecast
    if check:
        print_report(preflight_report(run, host, home=settings.home))
        refuse_if_short(run, host)  # the run's own check: a certain forecast over the memory exits 2
        raise typer.Exit(0)
    warning = refuse_if_short(run, host)  # HostMemoryShort before any model loads
    if warning:
        typer.secho(f"warning: {warning}", fg=typer.colors.YELLOW, err=True)
    if overwrite and (removed := replace_outputs(str(run.config.output_name), settings)) is not None:
        typer.echo(f"replaced the previous outputs in {removed}", err=True)


def _remove_abandoned_runs() -> None:
    """What killed runs left in the output folders no live run holds (jobs/leftovers.py: staging,
    what a fresh run killed before its first checkpoint or LoRA wrote, and its folder), as a
    server start removes it: a CLI-only user's names are free again. Printed: the removed paths,
    or for a killed fresh run's files one line (leftovers.removal_note), which also goes to that
    run's record (jobs/killed_notes.py: `runs show` shows it). And the name reservations killed
    namers left (name_reserve.sweep_stale_reservations: never one a live run holds)."""
    from lorastudio.jobs.killed_notes import record_note
    from lorastudio.jobs.leftovers import clear_abandoned_runs, removal_note
    from lorastudio.name_reserve import sweep_stale_reservations
    from lorastudio.settings import get_settings

    settings = get_settings()
    for path in sweep_stale_reservations(settings.outputs_dir):
        typer.echo(f"removed the name reservation a killed run left: {path}", err=True)
    for cleared in clear_abandoned_runs(settings):
        note = removal_note(cleared.run, cleared.removed)  # a killed fresh run's files: one line
        for line in [note] if note else cleared.removed:
            typer.echo(f"removed what a killed run left: {line}", err=True)
        if note is not None:
            record_note(settings, cleared.run, cleared.run_id, note)


def _flavour_notes(cfg: Any) -> list[str]:
    """What training the base model's flavour means (FamilySpec.variants: e.g. a step-distilled
    FLUX.2 klein), for a base model in a local folder (a path or a name under models/)."""
    from lorastudio import families
    from lorastudio.settings import get_settings

    folder = Path(cfg.base_model).expanduser()
    if not folder.is_absolute():
        folder = get_settings().models_dir / cfg.base_model
    row = families.get(cfg.family).folder_variant(folder) if folder.is_dir() else None
    return [row.note] if row is not None and row.note else []


def _share_home() -> Any:
    """The studio home's lock, shared with other CLI runs for this command's life (released when
    the process ends). Raises HomeInUse while a server owns the home: its job service, run store
    and start-up cleanup assume that nothing else writes there."""
    from lorastudio.jobs.homelock import HomeLock
    from lorastudio.settings import get_settings

    return HomeLock.for_cli_run(get_settings().home)


def _ignore(event: Event) -> None:
    """The event sink of ranks other than 0 (the engine sends them nothing anyway)."""
