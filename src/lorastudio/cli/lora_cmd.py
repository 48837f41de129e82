"""`lorastudio lora convert IN OUT --to kohya|diffusers [--family F]`: rewrite a LoRA file in the
other key layout (diffusers/peft <-> kohya/ComfyUI), keeping its training metadata.
`lorastudio lora list RUN`: a run's LoRAs by step (snapshots under loras/, then the final file).
`lorastudio lora merge A:0.7 B:0.3 --out M` and `lorastudio lora resize IN --rank r --out OUT`
(lorastudio.lora.ops). `lorastudio lora push RUN --repo ID [--create] [--private]`: upload the
run's LoRA, sidecar, model card and newest samples to a hub repo (lorastudio.lora.hub_push)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from lorastudio.cli.user_path_args import user_path
from lorastudio.user_paths import expand_user, is_dir

lora_app = typer.Typer(
    help="LoRA files: list a run's LoRAs by step, convert between diffusers and kohya/ComfyUI layouts, "
    "merge, resize, push to the hub.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def register(app: typer.Typer) -> None:
    app.add_typer(lora_app, name="lora")


@lora_app.command("convert")
def convert_cmd(
    src: Path = typer.Argument(..., callback=user_path, help="the LoRA .safetensors to read"),
    dst: Path = typer.Argument(
        ..., callback=user_path, help="the .safetensors to write (must not exist unless --force)"
    ),
    to: str = typer.Option(..., "--to", help="target layout: kohya or diffusers"),
    family: str | None = typer.Option(None, "--family", help="model family (default: from the file header)"),
    force: bool = typer.Option(False, "--force", help="replace DST if it exists"),
) -> None:
    """Convert a LoRA file between the diffusers and kohya/ComfyUI key layouts (lossless)."""
    from lorastudio.lora.files import convert_file

    source = convert_file(  # a SIGTERM mid-write removes the staging file (cli/termination.py)
        src, dst, to, family, overwrite=force
    )  # type: ignore[arg-type]
    typer.echo(f"{src} ({source}) -> {dst} ({to})")


@lora_app.command("list")
def list_cmd(
    run: str = typer.Argument(..., help="a run folder, or a run name under the studio's outputs/"),
) -> None:
    """A run's LoRA files by step: the snapshots (every checkpoint, every save_lora_every; with
    EMA each checkpoint's EMA file too), then the final LoRA (with EMA: the raw file, then the EMA
    one), each saying which weights it holds; validation losses and best / last mark the raw
    files measured."""
    from lorastudio.lora.snapshots import run_loras
    from lorastudio.settings import get_settings
    from lorastudio.training.validation_file import mark_loras, read_validation

    run_dir = expand_user(run)  # `~/runs/x` typed where no shell expands it (cli/user_path_args.py)
    if not is_dir(run_dir):  # user_paths: never raises for a name over the file system's limits
        run_dir = get_settings().outputs_dir / run
    if not is_dir(run_dir):
        typer.echo(f"no run folder {run} (nor {run_dir})", err=True)
        raise typer.Exit(2)
    typer.echo("step  file")
    rows = mark_loras(run_loras(run_dir), read_validation(run_dir))
    if not rows:  # a run yet to write one, or a folder of LoRA files that is no run's: said, not blank
        others = sorted(p.name for p in run_dir.glob("*.safetensors"))
        held = (
            f"; its {len(others)} .safetensors file(s) ({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}) are not a run's LoRAs"
            if others
            else ""
        )
        typer.echo(
            f"no LoRA file of a run in {run_dir} (a run writes loras/<name>-step-N.safetensors and"
            f" {run_dir.name}.safetensors){held}",
            err=True,
        )
    ema_run = any(item["weights"] == "ema" for item in rows)  # else every file holds the raw weights
    for item in rows:
        step = "?" if item["step"] is None else str(item["step"])
        notes = [
            *(["final"] if item["final"] else []),
            *([f"{item['weights']} weights"] if ema_run else []),
            *([f"val {item['validation_loss']:.5g}"] if item["validation_loss"] is not None else []),
            *([mark for mark in ("best", "last") if item[mark]]),
        ]
        shown = "  (" + ", ".join(notes) + ")" if notes else ""
        typer.echo(f"{step:<5} {item['path']}{shown}")


@lora_app.command("merge")
def merge_cmd(
    loras: list[str] = typer.Argument(..., help="FILE:WEIGHT (weight 1.0 when left out), two or more"),
    out: Path = typer.Option(..., "--out", callback=user_path, help="the merged .safetensors to write"),
    family: str | None = typer.Option(None, "--family", help="model family (default: from the headers)"),
    force: bool = typer.Option(False, "--force", help="replace OUT if it exists"),
) -> None:
    """Merge LoRAs of one family and layout: the result applies sum of WEIGHT x each LoRA's
    change exactly (ranks concatenated; resize it afterwards to shrink it)."""
    from lorastudio.cli.lora_args import parse_lora_arg
    from lorastudio.lora.ops import merge_files

    inputs = [parse_lora_arg(value, "LORAS", "weight") for value in loras]
    merge_files(inputs, out, family, overwrite=force)
    typer.echo(" + ".join(f"{w:g} x {p}" for p, w in inputs) + f" -> {out}")


@lora_app.command("resize")
def resize_cmd(
    src: Path = typer.Argument(..., callback=user_path, help="the LoRA .safetensors to read"),
    rank: int = typer.Option(..., "--rank", min=1, help="the new (smaller) rank"),
    out: Path = typer.Option(..., "--out", callback=user_path, help="the .safetensors to write"),
    family: str | None = typer.Option(None, "--family", help="model family (default: from the header)"),
    force: bool = typer.Option(False, "--force", help="replace OUT if it exists"),
) -> None:
    """Reduce a LoRA's rank by SVD (per layer, the best rank-r approximation of its change)."""
    from lorastudio.lora.ops import resize_file

    resized = resize_file(src, out, rank, family, overwrite=force)
    worst = min(resized.kept_energy.values(), default=1.0)
    typer.echo(f"{src} -> {out} (rank {rank}; energy kept: worst layer {worst:.1%})")


@lora_app.command("push")
def push_cmd(
    run: str = typer.Argument(..., help="the run's name (its folder under outputs/)"),
    repo: str = typer.Option(..., "--repo", help="hub model repo id, e.g. me/my-lora"),
    create: bool = typer.Option(False, "--create", help="create the repo first if it does not exist"),
    private: bool = typer.Option(False, "--private", help="with --create: make the new repo private"),
) -> None:
    """Upload a run's LoRA with its sidecar (each local base or dataset path named by its last
    part), a model card and its newest samples to a hub repo (HF_ENDPOINT's hub when set), with
    the studio's hub token (LORASTUDIO_HF_TOKEN, else huggingface_hub's login)."""
    from lorastudio.cli.termination import COULD_NOT_STATUS, refusal_status
    from lorastudio.errors import JobActive, LorastudioError
    from lorastudio.lora.hub_push import push_lora
    from lorastudio.settings import get_settings

    try:
        settings = get_settings()
        writer = _live_writer(settings.db_path, run)
        if writer is not None:  # its LoRA and sidecar may be renamed in mid-upload (RELIABILITY 2031)
            typer.secho(f"error: {writer}: push it when that run ends", fg=typer.colors.RED, err=True)
            raise typer.Exit(COULD_NOT_STATUS)
        result = push_lora(settings, run, repo, create=create, private=private)
    except JobActive as err:  # its LoRA and sidecar of two writes: a run rewrites them (2042)
        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(COULD_NOT_STATUS) from None
    except LorastudioError as err:  # no token, refused, repo missing: say which
        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(refusal_status(err)) from None
    typer.echo(f"pushed to {result.url} (commit {result.commit}):")
    for name in result.files:
        typer.echo(f"  {name}")


def _live_writer(db_path: Path, output_name: str) -> str | None:
    """What writes outputs/<output_name> now, in words: a live run of the run store (a server's
    job, or a `lorastudio train` in another shell) whose owner is alive (dead owners settled
    first); None for none, or no run store yet. The server refuses its own push of such a run
    (fix 1923); a push here checks the same store, so it also sees a server beside it. Raises
    StoreUnreadable naming the file when the store cannot be read."""
    from lorastudio.cli.runs_cmd import store_action

    if not db_path.exists():
        return None

    def writers(store: Any) -> list[dict[str, Any]]:
        store.settle_dead_owners()
        return store.live_writers(output_name)

    live = store_action(db_path, writers)
    if not live:
        return None
    run = live[-1]
    who = "a server's job" if run["source"] == "service" else "a `lorastudio train` run"
    pid = f", process {run['owner_pid']}" if run["owner_pid"] is not None else ""
    return f"run {run['id']} ({who}{pid}, {run['status']}) writes {output_name!r} now (its LoRA and sidecar)"
