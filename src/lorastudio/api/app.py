"""The FastAPI application: services on app.state, routers, error mapping, the built web UI.

`create_app(settings)` opens the run store (marking runs left live by a dead server as
interrupted), starts the job service and registers the generation pipeline with the GPU arbiter
when the app starts, and shuts them down when it stops. OpenAPI docs are at /docs.
`serve(settings, host, port)` runs it with uvicorn, refusing a non-loopback address without an
API token, with `?token=` values redacted from its logs. Writes from another origin are refused
(api/origin.py).
"""

from __future__ import annotations

import ipaddress
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import Depends, FastAPI
from fastapi.staticfiles import StaticFiles

from lorastudio import __version__
from lorastudio.api.deps import require_token
from lorastudio.api.errors import install_error_handlers
from lorastudio.api.origin import SameOriginWrites, install_log_redaction
from lorastudio.api.routes import datasets, generate, info, loras, models, runs, train
from lorastudio.api.schemas import ERROR_RESPONSES
from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.jobs.childenv import drop_process_secrets
from lorastudio.jobs.generation import GenerationService
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.homelock import HomeLock
from lorastudio.jobs.leftovers import start_leftover_cleanup
from lorastudio.jobs.process import WorkerTarget
from lorastudio.jobs.service import JobService, Timeouts
from lorastudio.jobs.store import RunStore
from lorastudio.jobs.worker import worker_main
from lorastudio.settings import Settings, get_settings

WEB_DIST = Path(__file__).resolve().parent.parent / "web_dist"


def create_app(
    settings: Settings | None = None,
    *,
    timeouts: Timeouts | None = None,
    worker_target: WorkerTarget = worker_main,
    web_dist: Path = WEB_DIST,
    home_lock: HomeLock | None = None,
) -> FastAPI:
    """Build the app. Services start with the app's lifespan (uvicorn, or TestClient as a
    context manager). `timeouts`/`worker_target` are for tests of the job service's edges.
    `home_lock`: the studio home's lock, taken by `serve` (None: the lifespan takes it, port
    unknown, and frees it at the end). The start raises HomeInUse while another server or a
    CLI run holds the home; holding it, it removes crash leftovers (jobs/leftovers.py)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.ensure_dirs()
        lock = home_lock or HomeLock.for_server(settings.home, port=None)
        try:
            start_leftover_cleanup(settings)  # the home is ours: no live process owns them
            async with _services(app, settings, timeouts, worker_target):
                yield
        finally:
            if home_lock is None:
                lock.release()

    app = FastAPI(title="lorastudio", version=__version__, lifespan=lifespan)
    app.state.settings = settings
    install_error_handlers(app)
    app.add_middleware(SameOriginWrites)  # cross-site writes refused (403); no CORS headers
    guarded = [Depends(require_token)]
    for module in (train, runs, datasets, loras, generate, info, models):
        app.include_router(module.router, dependencies=guarded, responses=ERROR_RESPONSES)
    if web_dist.is_dir():
        app.mount("/", StaticFiles(directory=web_dist, html=True), name="web")
    return app


@asynccontextmanager
async def _services(
    app: FastAPI, settings: Settings, timeouts: Timeouts | None, worker_target: WorkerTarget
) -> AsyncIterator[None]:
    """The run store, GPU arbiter, job service and generation service on app.state for the
    app's life."""
    store = RunStore.open(settings.db_path)
    arbiter = GpuArbiter()
    service = JobService(settings, store, arbiter, timeouts=timeouts, worker_target=worker_target).start()
    lower_serving_priority(settings.server_nice)  # after the dispatcher thread exists: not inherited
    app.state.serving_thread = threading.get_native_id()
    app.state.store = store
    app.state.arbiter = arbiter
    app.state.service = service
    app.state.generation = GenerationService(settings, arbiter)
    try:
        yield
    finally:
        service.shutdown()
        fetches = getattr(app.state, "fetches", None)
        if fetches is not None:
            fetches.shutdown()
        app.state.generation.release()
        store.close()


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, settings: Settings) -> None:
    """Refuse to listen beyond loopback without an API token (ConfigError)."""
    if not is_loopback(host) and not settings.api_token:
        raise ConfigError(
            [
                FieldProblem(
                    "host",
                    f"refusing to listen on {host} without an API token; set LORASTUDIO_API_TOKEN "
                    "or bind 127.0.0.1",
                )
            ]
        )


# Idle keep-alive connections are closed after this long (uvicorn's default is 5 s). Pollers reuse
# their connection every 0.25-1 s; under CPU contention a client's next request could otherwise
# cross the server's close of an idle connection and fail with a read error.
KEEP_ALIVE_S = 30


def serve(settings: Settings, host: str, port: int, home_lock: HomeLock | None = None) -> None:
    """Run the server until interrupted (blocking), owning the studio home (`home_lock`, taken
    here when None). Raises ConfigError for an unsafe bind, HomeInUse when another server or a
    CLI run holds the home."""
    import uvicorn

    check_bind(host, settings)
    lock = home_lock or HomeLock.for_server(settings.ensure_dirs().home, port)
    settings = drop_process_secrets(settings)  # before any child exists: none inherits a secret
    install_log_redaction()  # the access log prints paths: hide ?token= values
    # Open event streams never end on their own: give them 5 s before a shutdown cuts them.
    try:
        uvicorn.run(
            create_app(settings, home_lock=lock),
            host=host,
            port=port,
            log_level="info",
            timeout_graceful_shutdown=5,
            timeout_keep_alive=KEEP_ALIVE_S,
        )
    finally:
        lock.release()


def lower_serving_priority(nice: int) -> int:
    """Add `nice` to the niceness of the calling thread (the server's event loop, when called from
    the lifespan); threads it starts later (the request thread pool) inherit it, threads started
    before (the job dispatcher, which spawns the training workers) do not. Linux schedules
    niceness per thread. Returns the thread's niceness afterwards (unchanged when nice is 0 or the
    platform has no per-thread priority)."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return os.getpriority(os.PRIO_PROCESS, 0) if hasattr(os, "getpriority") else 0
    tid = threading.get_native_id()
    current = os.getpriority(os.PRIO_PROCESS, tid)
    target = min(19, current + nice)
    os.setpriority(os.PRIO_PROCESS, tid, target)
    return target
