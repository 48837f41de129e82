"""`lorastudio cache ls|clear|prune`: the on-disk encode cache (data/disk_cache.py) of latent_cache =
"disk"; prune: data/cache_prune.py."""

from __future__ import annotations

from pathlib import Path

import typer

from lorastudio.cli.confirm import confirm_or_stop
from lorastudio.cli.tables import print_table

cache_app = typer.Typer(
    help="The on-disk encode cache (latents and caption embeddings; latent_cache = disk, or auto over "
    "its RAM budget): list, clear and prune it.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def register(app: typer.Typer) -> None:
    app.add_typer(cache_app, name="cache")


def _gb(n: int) -> str:
    return f"{n / 1e9:.3f} GB"


def _when(stamp: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp)) if stamp > 0 else "unknown"


@cache_app.command("ls")
def ls_cmd() -> None:
    """List the cache: per kind and encoder fingerprint (one per base model's VAE), shards and size."""
    from lorastudio.data.disk_cache import cache_root, cache_stats
    from lorastudio.settings import get_settings

    root = cache_root(get_settings())
    stats = cache_stats(root)
    typer.echo(f"cache: {root}")
    print_table(
        ("kind", "model", "shards", "size", "last used"),
        [[s.kind, s.model, s.files, _gb(s.bytes), _when(s.last_used)] for s in stats],
    )
    typer.echo(f"total: {sum(s.files for s in stats)} shards, {_gb(sum(s.bytes for s in stats))}")


@cache_app.command("clear")
def clear_cmd(
    model: str | None = typer.Option(None, "--model", help="Only this encoder fingerprint (see `cache ls`)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask."),
) -> None:
    """Remove cached shards (all, or one model's); the next run encodes again. Refused while a
    server or a `lorastudio train` uses the studio home (a run may be reading them: use the
    server's DELETE /api/cache, which refuses while a job is live), and when a folder to clear
    holds anything the cache did not write (listed; nothing is removed)."""
    from lorastudio.cli.exclusive_home import exclusive_home
    from lorastudio.data.disk_cache import cache_root, cache_stats, clear_cache
    from lorastudio.errors import CacheError, NotFound
    from lorastudio.settings import get_settings

    settings = get_settings()
    root = cache_root(settings)
    if model is not None and not any(s.model == model for s in cache_stats(root)):
        raise NotFound(f"no cached model {model!r} in {root} (see `lorastudio cache ls`)")
    lock = exclusive_home(
        settings.ensure_dirs().home, "cache clear", "cache not cleared"
    )  # no server, no run
    with lock:
        if not yes:
            what = "shards of " + model if model else "shards"
            confirm_or_stop(f"remove the cached {what} in {root}?", "cache not cleared")
        try:
            freed = clear_cache(root, model=model)
        except CacheError as err:  # links or files the cache did not write: nothing removed
            typer.echo(f"cache not cleared: {err}", err=True)
            raise typer.Exit(1) from None
    typer.echo(f"freed {_gb(freed)}")


@cache_app.command("prune")
def prune_cmd(
    max_gb: float | None = typer.Option(
        None,
        "--max-gb",
        min=0,
        max=1_000_000,  # LORASTUDIO_CACHE_MAX_GB's bound; `inf` was an OverflowError traceback
        help="Prune to this many GB (default: LORASTUDIO_CACHE_MAX_GB, else its default cap).",
    ),
) -> None:
    """Remove whole cache entries (one encoder's shards), least recently used first, until the
    cache fits its cap: LORASTUDIO_CACHE_MAX_GB, else 50 GB or half of the cache plus its disk's
    free space, whichever is smaller. Entries a run reads are kept; a later run re-encodes what
    was removed. Refused while a server or a `lorastudio train` uses the studio home (use the
    server's POST /api/cache/prune); runs prune by themselves at their end. Then removes the saved
    Dynamo graphs (lorastudio-dynamo/<key>/) no run used for 30 days, never a key a live run holds."""
    from lorastudio.cli.exclusive_home import exclusive_home
    from lorastudio.data.cache_prune import prune_to_cap
    from lorastudio.errors import CacheError
    from lorastudio.settings import get_settings

    settings = get_settings()
    lock = exclusive_home(settings.ensure_dirs().home, "cache prune", "cache not pruned")  # as `cache clear`
    with lock:
        try:
            result = prune_to_cap(settings, max_gb)
        except CacheError as err:
            typer.echo(f"cache not pruned: {err}", err=True)
            raise typer.Exit(1) from None
    for entry in result.removed:
        typer.echo(
            f"removed {entry.kind} {entry.model} ({_gb(entry.bytes)}, last used {_when(entry.last_used)})"
        )
    for entry in result.in_use:
        typer.echo(f"kept {entry.kind} {entry.model}: a run reads it")
    for entry in result.foreign:
        typer.echo(
            f"kept {entry.kind} {entry.model}: it holds files the cache did not write (see `cache clear`)"
        )
    typer.echo(
        f"freed {_gb(result.freed_bytes)}; the cache holds {_gb(result.after_bytes)} (cap {_gb(result.cap_bytes)})"
    )
    _prune_dynamo(settings.home)


def _prune_dynamo(home: Path) -> None:
    """Remove the saved Dynamo graphs no run used for KEEP_DAYS days, saying what (torch-free;
    training/speed/precompile_prune.py)."""
    from lorastudio.training.speed.precompile_prune import KEEP_DAYS, dynamo_root, prune_keys

    done = prune_keys(dynamo_root(home))
    for gone in done.removed:
        typer.echo(f"removed saved graphs {gone.path} ({_gb(gone.bytes)}, last used {_when(gone.last_used)})")
    for kept in done.in_use:
        typer.echo(f"kept saved graphs {kept}: a live run uses them")
    for staged in done.staging:
        typer.echo(f"removed {staged}: a killed save's staging file")
    if not (done.removed or done.in_use or done.staging):
        typer.echo(f"saved graphs: none unused for {KEEP_DAYS} days")
