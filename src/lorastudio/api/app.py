"""The FastAPI application: services on app.state, routers, error mapping, the built web UI.

`create_app(settings)` opens the run store (marking runs left live by a dead server as
interrupted), starts the job service and registers the generation pipeline with the GPU arbiter
when the app starts, and shuts them down when it stops. OpenAPI docs are at /docs (and /redoc,
/openapi.json), behind the token like every route, their viewers' files served by the studio
(api/docs_pages.py).
`serve(settings, host, port)` runs it with uvicorn, refusing a non-loopback address, allowed origins
or a root path (a reverse proxy's settings, api/proxy.py) without an API token, with `?token=`
values redacted from its logs.

Middleware, outermost first: AmbiguousFraming (a request sending both Transfer-Encoding and
Content-Length refused and its connection closed, whatever its Host: request smuggling;
api/framing.py), HostGuard (only loopback or configured Host headers are answered, anti-framing
headers on every response; api/hosts.py), ProxiedNeedsToken (a request through a
proxy refused without an API token) and RootPath (a proxy's sub-path; both api/proxy.py),
PathGuard (encoded traversal: 404; api/path_guard.py), SameOriginWrites (writes from another
origin or site refused, and another site's page's own reads; api/origin.py), HeadAsGet (a HEAD request answered as its GET, without a
body; api/downloads.py), BodyLimitAnswer (a body over its cap answered 413 in the JSON error
shape; api/body_limit.py). Request bodies are capped at settings.max_json_mb by FastAPI's
`max_body_size` given to every router (a declared Content-Length over it is a 413 before
anything is read, a chunked body is counted as it arrives); the upload route streams to disk
under its own cap.
Every route depends on the token check (api/deps.py: the bearer header; on a GET also `?token=`
for scripts or the web UI's browser session cookie, api/sessions.py, which keeps the token out
of the URLs the UI loads) and on `check_inputs` (api/body_checks.py:
a JSON route's body of another media type is a 415, a JSON key or a single-valued query
parameter given twice a 422).
"""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.staticfiles import StaticFiles

from lorastudio import __version__
from lorastudio.api.body_checks import check_inputs
from lorastudio.api.body_limit import BodyLimitAnswer
from lorastudio.api.contract import declare_answers
from lorastudio.api.deps import require_token
from lorastudio.api.docs_pages import add_docs
from lorastudio.api.downloads import HeadAsGet
from lorastudio.api.errors import JSONOut, install_error_handlers
from lorastudio.api.framing import AmbiguousFraming
from lorastudio.api.host_wait import no_probe_waits
from lorastudio.api.hosts import HostGuard, HostPolicy, is_loopback
from lorastudio.api.origin import SameOriginWrites, install_log_redaction
from lorastudio.api.path_guard import PathGuard
from lorastudio.api.proxy import ProxiedNeedsToken, RootPath
from lorastudio.api.routes import (
    cache,
    captions,
    config_import,
    dataset_thumbnails,
    datasets,
    generate,
    generations,
    info,
    loras,
    models,
    run_files,
    runs,
    session,
    train,
)
from lorastudio.api.server_log import install_quiet_repeats, install_server_logging, uvicorn_log_config
from lorastudio.api.sessions import SessionStore
from lorastudio.api.token_gate import TokenGate
from lorastudio.api.web_build import WebBuildStamp
from lorastudio.api.web_mount import AllowTable, WebMount
from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.jobs.caption_records import settle as settle_caption_records
from lorastudio.jobs.childenv import drop_process_secrets
from lorastudio.jobs.generation import GenerationService
from lorastudio.jobs.generation_process import GenerationTarget
from lorastudio.jobs.generation_worker import generation_worker_main
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.homelock import HomeLock
from lorastudio.jobs.leftovers import start_cache_prune, start_leftover_cleanup
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
    generation_target: GenerationTarget = generation_worker_main,
    home_lock: HomeLock | None = None,
) -> FastAPI:
    """Build the app. Services start with the app's lifespan (uvicorn, or TestClient as a
    context manager). `timeouts`/`worker_target`/`generation_target` are for tests of the job
    service's and the generation worker's edges.
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
            start_cache_prune(settings)  # the encode cache to its cap (entries no run holds)
            async with _services(app, settings, timeouts, worker_target, generation_target):
                yield
        finally:
            if home_lock is None:
                lock.release()

    app = FastAPI(
        default_response_class=JSONOut,  # lone surrogates in echoed text are escaped (api/errors.py)
        title="lorastudio",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,  # served below, behind the token
        redoc_url=None,
        openapi_url=None,
    )
    app.state.settings = settings
    app.state.sessions = SessionStore()  # browser sessions: the token out of URLs (api/sessions.py)
    install_error_handlers(app)
    # add_middleware puts each one outside the ones added before it
    # the served UI's build id on /api answers; a stale page's settings writes refused (409)
    app.add_middleware(WebBuildStamp, web_dist=web_dist)  # api/web_build.py
    app.add_middleware(TokenGate)  # a write without the token: 401, its body unread (api/token_gate.py)
    app.add_middleware(BodyLimitAnswer, json_cap_mb=settings.max_json_mb)  # 413 as JSON (api/body_limit.py)
    app.add_middleware(HeadAsGet)  # HEAD answered as GET without a body (api/downloads.py)
    # cross-site writes refused (403); no CORS headers
    app.add_middleware(SameOriginWrites, allowed_origins=frozenset(settings.allowed_origins))
    app.add_middleware(PathGuard)  # an encoded separator or dot segment in a path: 404 (api/path_guard.py)
    app.add_middleware(RootPath, root=settings.root_path)  # a proxy's sub-path kept (api/proxy.py)
    # a request through a proxy needs a token (403); api/proxy.py
    app.add_middleware(ProxiedNeedsToken, token_set=bool(settings.api_token))
    app.add_middleware(HostGuard, policy=HostPolicy.from_settings(settings))  # DNS rebinding: 421
    # outermost: no answer may come before it (the Host guard's 421 left the connection open, and
    # the bytes after a chunked end were answered as a second request; RELIABILITY 1883)
    app.add_middleware(AmbiguousFraming)  # Transfer-Encoding with Content-Length: 400 (api/framing.py)
    guarded = [Depends(no_probe_waits), Depends(require_token), Depends(check_inputs)]
    add_docs(app, guarded, web_dist)  # /openapi.json, /docs, /redoc; no CDN (api/docs_pages.py)
    modules = (
        train,
        runs,
        run_files,
        datasets,
        dataset_thumbnails,
        captions,
        loras,
        generate,
        generations,
        info,
        models,
        cache,
        session,
        config_import,
    )
    # a 405's Allow names every method of the path (api/web_mount.py)
    app.state.allow = AllowTable([*app.router.routes, *(r for m in modules for r in m.router.routes)])
    for module in modules:
        # 413 past the cap (the upload routes set their own); a router's cap, not the app's: an
        # app-wide one answers from outside the middleware (api/body_limit.py)
        declare_answers(module.router)  # each route's statuses (api/contract.py, api/route_errors.py)
        app.include_router(
            module.router,
            dependencies=guarded,
            max_body_size=settings.max_json_mb * 2**20,
        )
    if web_dist.is_dir():
        # the UI's files; never a path of the server's own (api/web_mount.py)
        app.router.routes.append(WebMount("/", StaticFiles(directory=web_dist, html=True), name="web"))
    return app


@asynccontextmanager
async def _services(
    app: FastAPI,
    settings: Settings,
    timeouts: Timeouts | None,
    worker_target: WorkerTarget,
    generation_target: GenerationTarget,
) -> AsyncIterator[None]:
    """The run store, GPU arbiter, job service and generation service on app.state for the
    app's life."""
    store = RunStore.open(settings.db_path)
    settle_caption_records(settings.home)  # caption jobs a dead server left running: interrupted
    arbiter = GpuArbiter()
    service = JobService(settings, store, arbiter, timeouts=timeouts, worker_target=worker_target).start()
    # before the priority drop: its spawner thread (which starts the generation worker) keeps it
    app.state.generation = GenerationService(settings, arbiter, generation_target)
    lower_serving_priority(settings.server_nice)  # after the dispatcher thread exists: not inherited
    app.state.serving_thread = threading.get_native_id()
    app.state.store = store
    app.state.arbiter = arbiter
    app.state.service = service
    try:
        yield
    finally:
        service.shutdown()
        fetches = getattr(app.state, "fetches", None)
        if fetches is not None:
            fetches.shutdown()
        captioning = getattr(app.state, "captions", None)  # created on first use (api/routes/captions.py)
        if captioning is not None:
            captioning.shutdown()
        app.state.generation.shutdown()
        store.close()


def check_bind(host: str, settings: Settings) -> None:
    """Refuse to listen beyond loopback, or to be reached through a proxy (allowed origins, a
    root path), without an API token (ConfigError naming each). A blank or whitespace-only
    LORASTUDIO_API_TOKEN is no token (settings.py drops it)."""
    if (settings.api_token or "").strip():
        return
    problems = []
    if not is_loopback(host):
        problems.append(
            FieldProblem(
                "host",
                f"refusing to listen on {host} without an API token; set LORASTUDIO_API_TOKEN "
                "(a blank or whitespace-only value counts as none) or bind 127.0.0.1",
            )
        )
    for field, value in (("allowed_origins", settings.allowed_origins), ("root_path", settings.root_path)):
        if value:
            problems.append(
                FieldProblem(
                    field,
                    f"LORASTUDIO_{field.upper()} says the studio is reached through a proxy or from"
                    " another site, where everyone who reaches it would use it as if on this machine;"
                    " set LORASTUDIO_API_TOKEN too",
                )
            )
    if problems:
        raise ConfigError(problems)


# Idle keep-alive connections are closed after this long (uvicorn's default is 5 s). Pollers reuse
# their connection every 0.25-1 s; under CPU contention a client's next request could otherwise
# cross the server's close of an idle connection and fail with a read error.
KEEP_ALIVE_S = 30


def serve(settings: Settings, host: str, port: int, home_lock: HomeLock | None = None) -> None:
    """Run the server until interrupted (blocking), owning the studio home (`home_lock`, taken
    here when None). Raises ConfigError for an unsafe bind, HomeInUse when another server or a
    CLI run holds the home."""
    import uvicorn

    from lorastudio.processes import start_resource_tracker_deaf_to_hangup

    check_bind(host, settings)
    settings = settings.model_copy(update={"host": host})  # the Host policy allows a public bind address
    lock = home_lock or HomeLock.for_server(settings.ensure_dirs().home, port)
    settings = drop_process_secrets(settings)  # before any child exists: none inherits a secret
    install_log_redaction()  # the access log prints paths: hide ?token= values
    install_quiet_repeats()  # then a poll's line at most once a minute (api/server_log.py)
    install_server_logging()  # the server's own lines (GPU facts, standby worker, recoveries) on its console
    start_resource_tracker_deaf_to_hangup()  # before any worker: a hangup must not end it
    # Open event streams never end on their own: give them 5 s before a shutdown cuts them.
    config = uvicorn.Config(
        create_app(settings, home_lock=lock),
        host=host,
        port=port,
        log_level="info",
        log_config=uvicorn_log_config(),  # each line with its time, as the server's own (api/server_log.py)
        timeout_graceful_shutdown=5,
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    try:
        _stopping_server(config).run()
    finally:
        lock.release()


def _stopping_server(config: Any) -> Any:
    """A uvicorn.Server for `config` that, after the graceful shutdown a Ctrl-C, SIGTERM or SIGHUP starts, returns from
    run() instead of raising the signal again. uvicorn re-raises it (>= 0.29) so that the process
    dies of it; here that only turned into KeyboardInterrupt inside the event loop and a
    traceback of the cancelled lifespan task on every Ctrl-C. The shutdown itself (the job
    service stops its worker: the run is marked interrupted, resumable) is unchanged; `serve`
    returns and the CLI exits 0."""
    import contextlib
    import signal
    import threading

    import uvicorn
    from uvicorn.server import HANDLED_SIGNALS

    class StoppingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            # generations in flight answer (503) within the graceful wait, not a 500 after it;
            # from a thread: a signal handler must not take a lock the interrupted loop may hold
            threading.Thread(target=stop_generations, args=(self.config.app,), daemon=True).start()

        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[no-untyped-def]
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            # SIGHUP: the terminal that started `serve` closed; by default it ended the server at
            # once, no shutdown: its run unsaved, its workers' semaphores leaked
            stopping = {*HANDLED_SIGNALS, signal.SIGHUP}
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in stopping}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return StoppingServer(config)


def stop_generations(app: Any) -> None:
    """The server is stopping: cancel the generations in flight (GenerationService.stopping), so
    that their POSTs answer ServerStopping (503) while uvicorn waits for open requests; before,
    the wait ran out and cancelled them: a 500 with a traceback in the log."""
    service = getattr(getattr(app, "state", None), "generation", None)
    if service is not None:
        service.stopping()


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
