"""`lorastudio cache ls|clear`: the on-disk encode cache (data/disk_cache.py) of latent_cache = "disk"."""

from __future__ import annotations

import typer

from lorastudio.cli.tables import print_table

cache_app = typer.Typer(
    help="The on-disk encode cache (latents and caption embeddings; latent_cache = disk, or auto over "
    "its RAM budget): list and clear it.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def register(app: typer.Typer) -> None:
    app.add_typer(cache_app, name="cache")


def _gb(n: int) -> str:
    return f"{n / 1e9:.3f} GB"


@cache_app.command("ls")
def ls_cmd() -> None:
    """List the cache: per kind and encoder fingerprint (one per base model's VAE), shards and size."""
    from lorastudio.data.disk_cache import cache_root, cache_stats
    from lorastudio.settings import get_settings

    root = cache_root(get_settings())
    stats = cache_stats(root)
    typer.echo(f"cache: {root}")
    print_table(
        ("kind", "model", "shards", "size"), [[s.kind, s.model, s.files, _gb(s.bytes)] for s in stats]
    )
    typer.echo(f"total: {sum(s.files for s in stats)} shards, {_gb(sum(s.bytes for s in stats))}")


@cache_app.command("clear")
def clear_cmd(
    model: str | None = typer.Option(None, "--model", help="Only this encoder fingerprint (see `cache ls`)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask."),
) -> None:
    """Remove cached shards (all, or one model's); the next run encodes again. Refused while a
    server or a `lorastudio train` uses the studio home (a run may be reading them: use the
    server's DELETE /api/cache, which refuses while a job is live)."""
    from lorastudio.data.disk_cache import cache_root, cache_stats, clear_cache
    from lorastudio.errors import HomeInUse, NotFound
    from lorastudio.jobs.homelock import HomeLock
    from lorastudio.settings import get_settings

    settings = get_settings()
    root = cache_root(settings)
    if model is not None and not any(s.model == model for s in cache_stats(root)):
        raise NotFound(f"no cached model {model!r} in {root} (see `lorastudio cache ls`)")
    try:
        lock = HomeLock.for_server(settings.ensure_dirs().home, None)  # no server, no run meanwhile
    except HomeInUse as err:
        typer.echo(f"cache not cleared: {err}", err=True)
        raise typer.Exit(1) from None
    with lock:
        if not yes:
            typer.confirm(
                f"remove the cached {'shards of ' + model if model else 'shards'} in {root}?", abort=True
            )
        freed = clear_cache(root, model=model)
    typer.echo(f"freed {_gb(freed)}")
