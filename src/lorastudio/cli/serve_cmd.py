"""`lorastudio serve`: the web UI and JSON API (loopback by default)."""

from __future__ import annotations

import os
from pathlib import Path

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
    root_path: str | None = typer.Option(
        None,
        "--root-path",
        help=(
            "sub-path a reverse proxy that keeps it serves the studio under, e.g. /studio (default:"
            " LORASTUDIO_ROOT_PATH; a proxy that strips it needs none); needs LORASTUDIO_API_TOKEN"
        ),
    ),
) -> None:
    """Run the studio server. Listening beyond loopback needs LORASTUDIO_API_TOKEN; requests are
    answered only for loopback Host names and those in LORASTUDIO_ALLOWED_HOSTS. One server per
    studio home: a second one on the same home is refused, naming the first's pid and port."""
    from lorastudio.api.app import WEB_DIST, check_bind, serve
    from lorastudio.cli.container_notes import serve_notes
    from lorastudio.errors import ConfigError, FieldProblem
    from lorastudio.jobs.homelock import HomeLock
    from lorastudio.remote_access import root_path_entry
    from lorastudio.settings import get_settings

    settings = get_settings()
    if root_path is not None:
        try:
            settings = settings.model_copy(update={"root_path": root_path_entry(root_path)})
        except ValueError as err:
            raise ConfigError([FieldProblem("root_path", str(err))]) from None
    raw_token = os.environ.get("LORASTUDIO_API_TOKEN")
    if raw_token is not None and not raw_token.strip():
        typer.echo("note: LORASTUDIO_API_TOKEN is blank; a blank token counts as no token", err=True)
    bind_host = host or settings.host
    bind_port = port or settings.port
    check_bind(bind_host, settings)
    if note := short_token_note(bind_host, settings.api_token):
        typer.echo(note, err=True)
    lock = HomeLock.for_server(settings.ensure_dirs().home, bind_port)  # one server per home
    shown = f"[{bind_host}]" if ":" in bind_host else bind_host
    if why := listen_problem(bind_host, bind_port):  # before it says it serves, and starts its jobs
        lock.release()
        typer.secho(
            f"error: cannot listen on http://{shown}:{bind_port}/: {why}", fg=typer.colors.RED, err=True
        )
        raise typer.Exit(EXIT_CANNOT_LISTEN)
    under = f" (and under {settings.root_path}/ for a proxy)" if settings.root_path else ""
    typer.echo(
        f"lorastudio serving on http://{shown}:{bind_port}/{under}  (API docs: /docs, home: {settings.home})"
    )
    if not (WEB_DIST / "index.html").is_file():
        typer.echo(no_web_ui_note(WEB_DIST), err=True)
    for note in serve_notes(bind_host):  # PID 1, loopback in a container, a CPU quota
        typer.echo(note, err=True)
    serve(settings, bind_host, bind_port, home_lock=lock)


MIN_REMOTE_TOKEN = 16  # characters; README's `openssl rand -hex 24` makes 48


def short_token_note(host: str, token: str | None) -> str | None:
    """The note `serve` prints when it listens beyond loopback (`host`) with an API token of
    fewer than MIN_REMOTE_TOKEN characters: the server answers every wrong token at once, with
    no limit on how many, so a short one is found by trying (a 1-character token was taken in
    silence, RELIABILITY 2235); None otherwise. A note, not a refusal: a server that ran with
    such a token still starts."""
    from lorastudio.api.hosts import is_loopback

    length = len((token or "").strip())
    if not length or length >= MIN_REMOTE_TOKEN or is_loopback(host):
        return None
    return (
        f"note: LORASTUDIO_API_TOKEN is {length} character(s) and the server listens on {host}: every"
        " wrong token is answered at once, with no limit on tries, so a short one can be guessed; use"
        f" {MIN_REMOTE_TOKEN} or more random characters (openssl rand -hex 24)"
    )


EXIT_CANNOT_LISTEN = 3  # README's status of a `serve` that cannot listen (uvicorn's too, where it finds it)


def listen_problem(host: str, port: int) -> str | None:
    """Why `serve` cannot listen on (host, port), in words that say what to do: the port in use,
    an address that is not this machine's, a host name that does not resolve, a port below 1024
    without the right; None when a socket binds at each address the server would (asyncio's
    create_server binds every address getaddrinfo gives, as here; closed at once). Asked before
    the server prints that it serves and starts its job service: uvicorn's own refusal came after
    both, a bare "[Errno 98] error while attempting to bind on address ('127.0.0.1', 7860):
    address already in use" log line. A program that takes the port between this check and
    uvicorn's bind still gets uvicorn's line and the same status (3)."""
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as err:
        reason = err.strerror if isinstance(err, socket.gaierror) else str(err)
        return (
            f"the host name {host!r} does not resolve ({reason}); pass --host (or set"
            " LORASTUDIO_HOST) with an address of this machine: 127.0.0.1, or 0.0.0.0 for every one"
        )
    for family, kind, proto, _, address in dict.fromkeys(infos):
        try:
            sock = socket.socket(family, kind, proto)
        except OSError:  # an address family this host lacks (no IPv6): asyncio skips it too
            continue
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # as asyncio: the IPv6 socket takes no IPv4 traffic
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as err:
                if err.errno == errno.EADDRINUSE:
                    return (
                        f"port {port} is in use (another `lorastudio serve` or another program listens"
                        " there); pass --port with a free port (or set LORASTUDIO_PORT), or stop that program"
                    )
                if err.errno == errno.EADDRNOTAVAIL:
                    return (
                        f"{address[0]} is not an address of this machine; pass --host (or set LORASTUDIO_HOST)"
                        " with one of its addresses: 127.0.0.1, or 0.0.0.0 for every one"
                    )
                if err.errno == errno.EACCES and port < 1024:
                    return (
                        f"port {port} is below 1024, which only root (or a program with the"
                        " CAP_NET_BIND_SERVICE capability) may listen on; pass --port 1024 or above"
                    )
                return f"{address[0]} port {port}: {err.strerror or err}"
    return None


def no_web_ui_note(web_dist: Path) -> str:
    """The line `serve` prints when the install holds no built web UI (`/` then answers 404): a
    package built from a checkout before scripts/build_web.sh ran (build_backend refuses that
    unless LORASTUDIO_BUILD_WITHOUT_UI=1), or a checkout whose UI was never built."""
    return (
        f"note: this install has no web UI ({web_dist / 'index.html'} is missing): / answers 404,"
        " the API and /docs are served; build it with `bash scripts/build_web.sh` in the checkout"
        " (then reinstall a wheel built from it)"
    )
