"""The root `lorastudio` command. Command modules register themselves here, one line each."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
from typing import NoReturn

import typer

from lorastudio import __version__
from lorastudio.cgroup_limits import follow_cpu_limit
from lorastudio.cli.process_end import end_process
from lorastudio.cli.safe_output import escaped_output
from lorastudio.cli.termination import COULD_NOT_STATUS, INTERRUPTED_STATUS, refusal_status, sigterm_exits
from lorastudio.cli.utf8_mode import ensure_utf8_mode
from lorastudio.errors import LorastudioError, NoSpaceLeft, is_no_space, os_error_text
from lorastudio.import_freeze import is_standalone, mark_standalone

app = typer.Typer(
    name="lorastudio",
    help="Train LoRA adapters for image diffusion models (every family: `lorastudio families`) and generate "
    "with them.",
    no_args_is_help=True,
    epilog="Exit statuses (every command): 0 done; 1 could not (the studio home held by a server or a"
    ' run, a write the file system refused, a "no" to a question); 2 refused (an error line naming'
    " the file or field) or a usage error; 3 `datasets caption` found the dataset busy or `serve`"
    " cannot listen; 130 Ctrl-C; 143 SIGTERM (`train`: 130, after stopping and saving). Settings:"
    " LORASTUDIO_HOME (the studio home), LORASTUDIO_HF_TOKEN (gated models, `lora push`); a command's"
    " own option wins over its LORASTUDIO_* variable.",
    add_completion=True,
    # click's plain help: a flag shows no value type (typer's rich help labels every flag
    # "<bool>", --help too); every sub-app (runs, models, ...) sets the same.
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"lorastudio {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version."
    ),
) -> None:
    """lorastudio: a self-hosted LoRA studio."""


def _register() -> None:
    """Attach every command module (one line each). Idempotent: once attached, a later call
    (main() again in the same process, a test) adds nothing (typer would append a second copy of
    every command and group, and each invocation would then build every copy)."""
    if app.registered_commands or app.registered_groups:
        return
    from lorastudio.cli import info_cmd, tiny_cmd

    info_cmd.register(app)
    tiny_cmd.register(app)
    from lorastudio.cli import demo_cmd, generate_cmd, train_cmd

    train_cmd.register(app)
    demo_cmd.register(app)
    generate_cmd.register(app)
    from lorastudio.cli import datasets_cmd, runs_cmd, serve_cmd

    serve_cmd.register(app)
    runs_cmd.register(app)
    datasets_cmd.register(app)
    from lorastudio.cli import caption_cmd, dataset_edit_cmd

    dataset_edit_cmd.register(datasets_cmd.datasets_app)
    caption_cmd.register(datasets_cmd.datasets_app)
    from lorastudio.cli import models_cmd

    models_cmd.register(app)
    from lorastudio.cli import lora_cmd

    lora_cmd.register(app)
    from lorastudio.cli import cache_cmd

    cache_cmd.register(app)
    from lorastudio.cli import config_cmd

    config_cmd.register(app)


def main() -> None:
    """Console entry point: runs the app; a domain error prints its message and exits 2 (1 for a
    studio home another process holds: termination.refusal_status). A name
    that is not UTF-8 (a file of an old archive: Python holds its bytes as lone surrogates) is
    printed as a \\udcXX escape: under a UTF-8 locale Python's strict stdout raised instead.
    A SIGTERM unwinds the command through its cleanup and exits 143 (cli/termination.py); a
    Ctrl-C exits 130, also while the commands' modules still import (before typer's own mapping
    of it: a traceback of whichever import it cut). An OSError that reaches here (a read-only
    file system, permission denied, an I/O error while a command reads or writes) prints its
    reason and path on one line and exits 1, the status of an unexpected error (a traceback
    before); a full disk prints NoSpaceLeft's message and exits 2. Output into a pipe whose
    reader is gone (`| head -1`) ends it by SIGPIPE, quietly (die_of_sigpipe: 141 in a shell).
    Every control character of what it prints (a name's ESC, CR, bidi override) is escaped
    visibly (cli/safe_output.py). The console program then ends without the interpreter's
    teardown (cli/process_end.py: seconds after a run, once torch is imported). Under a locale
    whose encoding is not UTF-8 the console program first starts itself again in Python's UTF-8
    mode (cli/utf8_mode.py). Where a cgroup's CPU quota leaves fewer CPUs than the affinity mask,
    torch's threads and Inductor's compile workers follow the quota (cgroup_limits.follow_cpu_limit)."""
    mark_standalone()  # a training command may freeze its imports (import_freeze.py)
    if is_standalone():  # file names and pipes in UTF-8 under any locale (cli/utf8_mode.py)
        ensure_utf8_mode()
        follow_cpu_limit()  # a container's CPU quota, before torch imports (cgroup_limits.py)
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # absent on a replaced stream
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    with escaped_output():  # a name's control characters escaped in every line (safe_output)
        try:
            _run()
        except SystemExit as end:
            if _output_closed():
                die_of_sigpipe()
            if is_standalone():  # the console program: no interpreter teardown (cli/process_end.py)
                end_process(end.code)
            raise
        if _output_closed():
            die_of_sigpipe()
        if is_standalone():
            end_process(0)


def _run() -> None:
    """main's body: the app under main's handlers, every way it ends a SystemExit."""
    if not _working_folder_exists():
        _error(
            "the current folder no longer exists (deleted or moved away after the shell entered it):"
            " cd to a folder that exists (relative paths are taken against it, and torch cannot load"
            " in a deleted one)"
        )
        sys.exit(COULD_NOT_STATUS)
    try:
        with sigterm_exits():
            _register()
            app(color=False if no_color() else None)  # None: colour on a terminal only (click)
    except LorastudioError as err:
        _error(str(err))
        sys.exit(refusal_status(err))
    except KeyboardInterrupt:
        sys.exit(INTERRUPTED_STATUS)
    except MemoryError as err:
        _error(f"out of memory: {err or 'MemoryError'}{address_space_note()}")
        sys.exit(COULD_NOT_STATUS)
    except ImportError as err:
        if "failed to map segment" not in str(err):  # a library's code could not be mapped
            raise
        _error(f"a library could not be loaded (out of memory): {err}{address_space_note()}")
        sys.exit(COULD_NOT_STATUS)
    except OSError as err:  # the file system refused a read or write: its words, not a traceback
        if err.errno == errno.EPIPE:
            die_of_sigpipe()
        if is_no_space(err):
            _error(str(NoSpaceLeft("a write failed", err.filename)))
            sys.exit(2)
        _error(os_error_text(err))
        sys.exit(1)


def address_space_note() -> str:
    """Where this process runs under an address-space limit (`ulimit -v`, RLIMIT_AS), what it is,
    for an out-of-memory error's line (a traceback of MemoryError or of torch's "failed to map
    segment from shared object" before); "" where there is none."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return ""
    return (
        f" (this process may use at most {soft / 2**20:,.0f} MiB of address space: the limit"
        " `ulimit -v` sets)"
    )


def _working_folder_exists() -> bool:
    """Whether the process's working folder still exists. In a deleted one `train` died
    importing torch ("Intel oneMKL FATAL ERROR: Cannot load .../libtorch_cpu.so"), a relative
    LORASTUDIO_HOME was a bare "No such file or directory", and a relative path named nothing."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return False
    return True


def _output_closed() -> bool:
    """Whether stdout's reader is gone: click met EPIPE in a command (it then swaps stdout for its
    PacifyFlushWrapper and exits 1) or what is still buffered cannot be written (EPIPE now)."""
    # click's or typer's own copy of click; click 8.5+ names it _PacifyFlushWrapper
    if type(sys.stdout).__name__.endswith("PacifyFlushWrapper"):
        return True
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return True
    except (OSError, ValueError):  # another failure (a closed stream): not a pipe's reader gone
        return False
    return False


def die_of_sigpipe() -> NoReturn:
    """End the process as coreutils do when their output pipe's reader is gone
    (`lorastudio runs list | head -1`): killed by SIGPIPE's default action (status 141 in a
    shell), quietly. Python ignores SIGPIPE (its writes then fail with EPIPE), and click turned
    that into a bare exit 1, which a `set -o pipefail` script reads as a failure of ours. The
    default action is restored only here, at the end: a server's socket writes keep SIGPIPE
    ignored for their whole life. What is still buffered for stdout is dropped (it has no reader)."""
    with contextlib.suppress(OSError, ValueError):  # stderr may be the same closed pipe (2>&1)
        sys.stderr.flush()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
    sys.exit(128 + signal.SIGPIPE)  # not reached: the signal ends the process first


def no_color() -> bool:
    """Whether NO_COLOR asks for no colour (https://no-color.org: set and not empty). rich's
    consoles (progress, tables) honour it themselves; click's styled lines (every "error:" and
    "warning:" line) were red and yellow on a terminal regardless: main passes color=False to the
    app, whose context click's echo reads."""
    return bool(os.environ.get("NO_COLOR"))


def _error(text: str) -> None:
    """An "error: ..." line on stderr, red on a terminal unless NO_COLOR."""
    typer.secho(f"error: {text}", fg=typer.colors.RED, err=True, color=False if no_color() else None)
