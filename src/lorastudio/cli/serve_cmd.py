"""`lorastudio serve`: the web UI and JSON API (loopback by default)."""

from __future__ import annotations

import os

import typer


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_cmd)


def serve_cmd(
    host: str | None = typer.Option(
        None, "--host", help="address to listen on (default: LORASTUDIO_HOST, else 127.0.0.1)"
    ),
    port: int | None = typer.Option(
        None, "--port", min=1, max=65535, help="port (default: LORASTUDIO_PORT, else 7860)"
    ),
) -> None:
    """Run the studio server. Listening beyond loopback needs LORASTUDIO_API_TOKEN; requests are
    answered only for loopback Host names and those in LORASTUDIO_ALLOWED_HOSTS. One server per
    studio home: a second one on the same home is refused, naming the first's pid and port."""
    from lorastudio.api.app import check_bind, serve
    from lorastudio.jobs.homelock import HomeLock
    from lorastudio.settings import get_settings

    settings = get_settings()
    raw_token = os.environ.get("LORASTUDIO_API_TOKEN")
    if raw_token is not None and not raw_token.strip():
        typer.echo("note: LORASTUDIO_API_TOKEN is blank; a blank token counts as no token", err=True)
    bind_host = host or settings.host
    bind_port = port or settings.port
    check_bind(bind_host, settings)
    lock = HomeLock.for_server(settings.ensure_dirs().home, bind_port)  # one server per home
    shown = f"[{bind_host}]" if ":" in bind_host else bind_host
    typer.echo(f"lorastudio serving on http://{shown}:{bind_port}/  (API docs: /docs, home: {settings.home})")
    serve(settings, bind_host, bind_port, home_lock=lock)
