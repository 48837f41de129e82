"""Helpers of the reliability suite: a real uvicorn server in a thread, a real `lorastudio serve`
process, waiting on the job service, scanning output folders for visible partial files, and
latency statistics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from live_server import CLIENT_TIMEOUT_S, LiveServer, live_server, worker_timeout  # noqa: F401 (re-exported)
from lorastudio.processes import process_alive  # noqa: F401 (re-exported for the tests)
from lorastudio.settings import Settings
from ports import start_listening

FINAL = {"completed", "stopped", "cancelled", "failed", "interrupted"}
FIGURES_ENV = "LORASTUDIO_FIGURES_DIR"  # where record_figure writes (unset: print only)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, poll: float = 0.005) -> Any:
    """Poll `predicate` until it returns a truthy value (returned); AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(poll)


def served_client(
    port: int, timeout: float = CLIENT_TIMEOUT_S, transport: httpx.BaseTransport | None = None
) -> httpx.Client:
    """The client of a served studio on 127.0.0.1:`port`: `timeout` for every request, but at the
    default (CLIENT_TIMEOUT_S) a POST that starts or waits on a worker reads its answer for
    live_server.WORKER_TIMEOUT_S (live_server.worker_timeout): a cold generation worker on a
    loaded 2-core host took past 30 s. `transport`: a test's stand-in for the network."""
    return httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        timeout=timeout,
        event_hooks={"request": [worker_timeout]},
        transport=transport,
    )


@contextmanager
def serve_process(
    settings: Settings,
    env: Mapping[str, str] | None = None,
    client_timeout: float = CLIENT_TIMEOUT_S,
    log: Path | None = None,
    own_session: bool = False,
) -> Iterator[tuple[subprocess.Popen[bytes], httpx.Client]]:
    """A real `lorastudio serve` process on a free loopback port, with settings.home as its home
    and `env` added to its environment, waited for until /api/info answers. Yields (process,
    client: served_client's, `client_timeout` for every request but a worker's start); the process
    is terminated (then killed) and reaped when the block ends. Its
    standard output goes to the file `log` (None: discarded). `own_session`: the server leads its
    own session and process group, like a server started in a terminal (its stderr joins `log`),
    so a signal to the group reaches its children as a terminal's Ctrl-C does."""
    full_env = {**os.environ, "LORASTUDIO_HOME": str(settings.home), **(env or {})}
    cmd = [sys.executable, "-c", "from lorastudio.cli.app import main; main()", "serve", "--port"]
    if log is not None:
        log.write_bytes(b"")

    def start(port: int) -> subprocess.Popen[bytes]:
        with open(log or os.devnull, "ab") as out:
            return subprocess.Popen(
                [*cmd, str(port)],
                env=full_env,
                stdout=out,
                stderr=subprocess.STDOUT if own_session else subprocess.DEVNULL,
                start_new_session=own_session,
            )

    proc, port = start_listening(start)  # its own port: not one another server took meanwhile
    try:
        with served_client(port, client_timeout) as client:

            def up() -> bool:
                try:
                    return client.get("/api/info").status_code == 200
                except httpx.TransportError:
                    return False

            wait_for(up, 60, "the server", poll=0.1)
            yield proc, client
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def visible_files(root: Path) -> list[Path]:
    """Every file under `root` with no hidden (dot-prefixed) component below `root`."""
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def partial_files(run_dir: Path) -> list[str]:
    """Visible files of a run folder that are not complete: a checkpoint folder missing a file,
    a safetensors file that does not load, a JSON file that does not parse, a state.pt that
    torch cannot read. Returns descriptions (empty: everything visible is complete)."""
    import torch
    from safetensors.torch import load_file

    from lorastudio.training.resume.checkpoint import CHECKPOINT_FILES, CHECKPOINTS

    problems = []
    ckpts = run_dir / CHECKPOINTS
    if ckpts.is_dir():
        for folder in ckpts.iterdir():
            if folder.name.startswith("."):
                continue
            missing = [f for f in CHECKPOINT_FILES if not (folder / f).is_file()]
            if missing:
                problems.append(f"{folder.name} lacks {missing}")
    for path in visible_files(run_dir):
        try:
            if path.suffix == ".safetensors":
                load_file(str(path))
            elif path.suffix == ".json":
                json.loads(path.read_text(encoding="utf-8"))
            elif path.suffix == ".pt":
                torch.load(path, weights_only=False)
        except Exception as err:  # noqa: BLE001 - any failure to read means a partial file
            problems.append(f"{path.relative_to(run_dir)}: {type(err).__name__}: {err}")
    return problems


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100, nearest rank) of `values`."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def record_figure(name: str, data: dict[str, Any]) -> None:
    """Print one figure set (shown with `pytest -s`) and, when $LORASTUDIO_FIGURES_DIR is set,
    write it to <that folder>/<name>.json (the source of RELIABILITY.md's table)."""
    text = json.dumps(data, indent=2)
    print(f"\n[figures] {name}: {text}")
    folder = os.environ.get(FIGURES_ENV)
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{name}.json").write_text(text + "\n", encoding="utf-8")


def cli_output(settings: Settings, *args: str) -> str:
    """Output of `lorastudio ARGS` run in this process (exit code 0 asserted) on the studio home
    of `settings`."""
    from typer.testing import CliRunner

    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    done = CliRunner().invoke(app, list(args), env={"LORASTUDIO_HOME": str(settings.home)})
    assert done.exit_code == 0, done.output
    return done.output


def writing_config(flux_config: Callable[..., dict], name: str, **over: object) -> dict:
    """A long run that samples and writes a LoRA snapshot every step (its folder fills at once)."""
    return flux_config(
        output_name=name,
        steps=5000,
        sample_every=1,
        sample_prompts=["a red square"],
        sample_steps=2,
        save_lora_every=1,
        **over,
    )
