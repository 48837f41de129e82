"""`lorastudio models list|fetch ID|rm ID|add PATH|forget ID`: the base-model catalogue, read and
changed directly on disk (with or without a server). The hub token is LORASTUDIO_HF_TOKEN (else
huggingface_hub's own login); it is never printed."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from lorastudio.cli.confirm import confirm_or_stop
from lorastudio.cli.json_out import JsonCommand, json_errors, print_json
from lorastudio.cli.tables import print_table

if TYPE_CHECKING:
    from lorastudio.basemodels import ModelEntry

models_app = typer.Typer(
    help="Base models and captioning models: list, fetch from the hub, delete.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def register(app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"


@models_app.command("list", cls=JsonCommand)
def list_cmd(
    as_json: bool = typer.Option(False, "--json", help="print the catalogue as JSON"),
    trainable_only: bool = typer.Option(False, "--trainable", help="only models lorastudio can train"),
    no_hub_cache: bool = typer.Option(False, "--no-hub-cache", help="leave out the Hugging Face cache"),
) -> None:
    """List base models on disk (family, trainable or why not, size, source), then the
    captioning models (for `datasets caption --model ID`): fetched, or what fetches them."""
    from lorastudio.basemodels import hub_offline, list_models
    from lorastudio.settings import get_settings

    with json_errors(as_json):  # with --json, an error is JSON on stdout too
        listed = list_models(get_settings(), hub_cache=not no_hub_cache)
    entries = [e for e in listed if e.trainable or not trainable_only]
    if as_json:
        print_json([e.public() for e in entries])
        return
    if hub_offline():
        typer.echo("offline mode (HF_HUB_OFFLINE=1): showing what is on disk; nothing can be fetched")
    captioners = [e for e in entries if e.kind == "captioner"]
    entries = [e for e in entries if e.kind != "captioner"]
    if not entries:
        typer.echo(
            "no base models yet: `lorastudio models fetch OWNER/NAME`, `lorastudio models add PATH` or "
            "`lorastudio tiny model --family FAMILY`"
        )
    else:
        _print_bases(entries)
    _print_captioners(captioners)


def _print_bases(entries: list[ModelEntry]) -> None:
    rows = [
        [
            e.id,
            e.family or "-",
            "yes" if e.trainable else "no",
            _size(e.size_bytes),
            e.source,
            e.reason or e.checkpoint or ("step-distilled" if e.distilled else ""),
        ]
        for e in entries
    ]
    print_table(("id", "family", "trainable", "size", "source", "notes"), rows, keep=("id",))


def _print_captioners(entries: list[ModelEntry]) -> None:
    """The captioning models: id (what `datasets caption --model` takes once fetched), state,
    size, licence."""
    if not entries:
        return
    rows = [
        [
            e.id,
            e.repo_id or e.name,
            "to fetch" if e.source == "catalogue" else ("ready" if e.complete else "incomplete"),
            ("~" if e.source == "catalogue" else "") + _size(e.size_bytes),
            e.licence or "-",
        ]
        for e in entries
    ]
    typer.echo(
        "\ncaptioning models (`lorastudio datasets caption NAME --model ID`; fetch: `models fetch REPO`):"
    )
    print_table(("id", "repo", "state", "size", "licence"), rows, keep=("id",))


@models_app.command("fetch")
def fetch_cmd(
    repo_id: str = typer.Argument(..., help="hub model id, owner/name"),
    revision: str | None = typer.Option(None, "--revision", help="branch, tag or commit (default: main)"),
) -> None:
    """Download the files training needs from a hub repo into models/ (resumable: run it again
    after an interruption); a captioning model (Qwen2.5-VL, Florence-2, ...: `models list`)
    likewise. Refuses gated/private repos without access, GGUF and other inference-only repos
    and families lorastudio cannot train before downloading anything."""
    from lorastudio.basemodels import plan_fetch, run_fetch
    from lorastudio.basemodels.events import FetchEvent
    from lorastudio.cli.termination import INTERRUPTED_STATUS, TERMINATED_STATUS, Terminated
    from lorastudio.settings import get_settings

    settings = get_settings().ensure_dirs()
    plan = plan_fetch(settings, repo_id, revision)
    if plan.present is not None:
        where = "the hub cache (offline mode)" if plan.offline else "models/"
        typer.echo(f"{repo_id} is already on disk in {where}: {plan.present}")
        return
    what = plan.family or f"captioner {plan.captioner}"
    typer.echo(f"{repo_id} ({what}, commit {str(plan.commit)[:12]}): {len(plan.files or {})} files")
    cancel = threading.Event()
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task(f"fetch {repo_id}", total=plan.bytes_total)

        def show(event: FetchEvent) -> None:
            if event.type == "fetch_progress":
                bar.update(
                    task,
                    completed=event.bytes_done,
                    description=f"{event.files_done}/{event.files_total} files",
                )

        try:
            outcome = run_fetch(settings, plan, emit=show, cancel=cancel)
        except (KeyboardInterrupt, Terminated) as stop:  # Ctrl-C or SIGTERM: the threads stop too
            cancel.set()
            typer.echo("interrupted: the files downloaded so far are kept; run the same command to resume")
            code = TERMINATED_STATUS if isinstance(stop, Terminated) else INTERRUPTED_STATUS
            raise typer.Exit(code) from None
    typer.echo(f"fetched {repo_id} -> {outcome.path} (id {outcome.model_id})")


@models_app.command("rm")
def rm_cmd(
    model_id: str = typer.Argument(..., help="the model id (see `lorastudio models list`)"),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask for confirmation"),
) -> None:
    """Delete a model lorastudio downloaded or created (never the hub cache or your folders).
    The command holds the studio home exclusively meanwhile, so it is refused while a server
    owns the home (delete through it: the Models page or DELETE /api/models/ID, which refuses
    while a job, a generation or a fetch uses the model) or a `lorastudio train` runs."""
    from lorastudio.basemodels import delete_model, get_model
    from lorastudio.cli.exclusive_home import exclusive_home
    from lorastudio.settings import get_settings

    settings = get_settings()
    entry = get_model(settings, model_id)
    lock = exclusive_home(
        settings.ensure_dirs().home, "models rm", f"{model_id} not deleted"
    )  # no server, no run
    with lock:
        if not yes and entry.deletable:
            confirm_or_stop(f"delete {entry.path} ({_size(entry.size_bytes)})?", f"{entry.path} not deleted")
        delete_model(settings, model_id)
    typer.echo(f"deleted {entry.path}")


@models_app.command("add")
def add_cmd(
    path: str = typer.Argument(
        ..., help="a folder or .safetensors checkpoint to list (a relative path: from the current folder)"
    ),
) -> None:
    """List a folder or single-file checkpoint of yours in the catalogue (never written to or deleted)."""
    from lorastudio.basemodels import add_folder, get_model
    from lorastudio.basemodels.added import added_id
    from lorastudio.settings import get_settings
    from lorastudio.user_paths import expand_user

    given = expand_user(path)
    if not given.is_absolute():  # the API's rule ("give an absolute folder path") is the server's:
        path = str(given.absolute())  # a command has a current folder, as for a config's paths
    settings = get_settings()
    entry = get_model(settings, added_id(add_folder(settings, path)))
    state = f"trainable ({entry.family})" if entry.trainable else f"not trainable: {entry.reason}"
    typer.echo(f"added {entry.path} as {entry.id}: {state}")


@models_app.command("forget")
def forget_cmd(model_id: str = typer.Argument(..., help="id of an added folder (added:...)")) -> None:
    """Remove an added folder from the catalogue (its files are left alone)."""
    from lorastudio.basemodels import forget_folder
    from lorastudio.settings import get_settings

    typer.echo(f"forgot {forget_folder(get_settings(), model_id)}")
