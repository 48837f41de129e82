"""lora_targets / rank_pattern / alpha_pattern checked against the denoiser's real module names,
and init_lora's layers against the run's targets (the file's weights read), for the torch-free
API server (preflight and start).

Contract: `check_lora_targets(cfg)` returns a TargetAnswer: no problems and no note, without
starting anything, when the config sets none of the three fields (the family's own targets need
no check). Otherwise it runs the engine's own check (training/adapters/lora.planned_target_check, on the
meta device) in a short child process,
`python -m lorastudio.training.target_check` (torch and diffusers import there, never in the
server), with the hub offline (it reads the base's configs from disk only) and without the
server's secrets, and returns that check's problems as FieldProblems of those fields. Answers
are cached per (the base's denoiser config, family, adapter and the three fields' values), so a
start after its preflight does not spawn again; the first check of a config costs the child's
start (torch and diffusers imports: about 5 s of CPU, 20 s on a loaded 2-core host), which the
preflight pays (the Train page's Check) or, without one, the start route (kept there: a start
is once per run, and a refusal there costs no load; the route runs in a worker thread); one
child runs at a time (a racing request for the same answer waits and finds it cached; at most
MAX_WAITING requests wait, later ones leave the check to the start, so concurrent preflights
never hold the server's request threads) and at most CACHE_SIZE answers are kept. The base's
denoiser config is read bounded (a regular file inside its folder, jobs/caption_count.read_bounded):
one that is not leaves the check to the start.
A child that fails or runs past TIMEOUT_S gives no problems (logged; nothing is cached): the
run's own start still refuses such a config before any load, as it always did.
Whenever the check is left to the start (the waiting bound, a child out of time or failed, a
denoiser config not read here) the answer's `not_checked` says so and why: the preflight shows
it as a note (jobs/validation.ValidatedRun.notes); it is None whenever the check was made.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from lorastudio import json_read
from lorastudio.config import TrainConfig
from lorastudio.errors import FieldProblem
from lorastudio.jobs.caption_count import CannotCount, read_bounded
from lorastudio.jobs.childenv import child_environment

log = logging.getLogger("lorastudio.jobs")

TIMEOUT_S = 120.0
FIELDS = ("lora_targets", "rank_pattern", "alpha_pattern", "init_lora")


@dataclass(frozen=True)
class TargetAnswer:
    """The check's answer: its problems, or (`not_checked`) why it was not made now, in words
    for the preflight's notes ("lora_targets not checked now: ...; the run's start checks it")."""

    problems: tuple[FieldProblem, ...] = ()
    not_checked: str | None = None


CACHE_SIZE = 256  # answers kept, oldest dropped first
_cache: dict[str, TargetAnswer] = {}  # insertion-ordered: the oldest first
_lock = threading.Lock()  # guards _cache and spawned
_one_child = threading.Lock()  # one child at a time: a racing same request then finds the cache
MAX_WAITING = 2  # requests that may wait for the running child; more are answered at once
_slots = threading.BoundedSemaphore(1 + MAX_WAITING)  # the running child's request + the waiting
spawned = 0  # child processes started (tests read it)


def check_lora_targets(cfg: TrainConfig, timeout_s: float | None = None) -> TargetAnswer:
    """The engine's problems with a resolved cfg's lora_targets / rank_pattern / alpha_pattern
    (see the module docstring); none when it sets none of them. When the check is left to the
    run's start (MAX_WAITING requests already wait for the child; the child failed or ran out of
    `timeout_s`, TIMEOUT_S when None, read at the call; the base's denoiser config is not a
    regular file inside its folder, or not on this machine) there are no problems and
    `not_checked` says why."""
    global spawned
    timeout_s = TIMEOUT_S if timeout_s is None else timeout_s
    if not any(getattr(cfg, f) for f in FIELDS):
        return TargetAnswer()
    try:
        key = _key(cfg)
    except CannotCount as err:
        return _not_checked(cfg, f"the base's denoiser config is not read here ({err})")
    with _lock:
        if key in _cache:  # no wait behind another config's child
            return _cache[key]
    if not _slots.acquire(blocking=False):  # no pile-up of request threads behind the one child
        return _not_checked(cfg, f"{1 + MAX_WAITING} checks already running or waiting")
    try:
        with _one_child:
            with _lock:
                if key in _cache:  # a racing request for the same answer got it meanwhile
                    return _cache[key]
                spawned += 1
            answer = _ask_child(cfg, timeout_s)
            if isinstance(answer, str):  # no answer: why
                return _not_checked(cfg, answer)
            with _lock:
                _cache[key] = answer
                while len(_cache) > CACHE_SIZE:
                    del _cache[next(iter(_cache))]
            return answer
    finally:
        _slots.release()


def _not_checked(cfg: TrainConfig, why: str) -> TargetAnswer:
    """The answer of a check left to the run's start, naming the fields cfg sets (logged too)."""
    named = [f for f in FIELDS if getattr(cfg, f)]
    note = f"{' / '.join(named)} not checked now: {why}; the run's start checks {'it' if len(named) == 1 else 'them'}"
    log.warning("%s", note)
    return TargetAnswer(not_checked=note)


def _ask_child(cfg: TrainConfig, timeout_s: float) -> TargetAnswer | str:
    """The child's answer (for a denoiser config it cannot read: not checked, cached like any
    answer: the key changes once the config is on this machine); why there is none (a str) when
    it gave none in time or failed (nothing cached)."""
    env = child_environment(os.environ)
    env["HF_HUB_OFFLINE"] = "1"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "lorastudio.training.target_check"],
            input=cfg.model_dump_json(),
            capture_output=True,
            encoding="utf-8",  # the child reads its stdin's bytes as UTF-8 (RELIABILITY 1029)
            errors="replace",
            timeout=timeout_s,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"the check took longer than {timeout_s:g} s"
    except OSError as err:
        return f"the check could not start ({err})"
    try:
        answer = json_read.loads(done.stdout.strip().splitlines()[-1])
        problems = tuple(FieldProblem(p["field"], p["message"]) for p in answer["problems"])
        checked = answer["checked"]
    except (ValueError, IndexError, KeyError, TypeError):
        log.warning("lora target check failed (code %s): %s", done.returncode, done.stderr.strip()[-2000:])
        return f"the check failed (exit code {done.returncode})"
    if checked is not True:
        return _not_checked(cfg, "the base's denoiser config cannot be read on this machine")
    return TargetAnswer(problems)


def _init_version(cfg: TrainConfig) -> str | None:
    """The version (file_version.version_of: device, inode, size, times) of cfg.init_lora's file,
    None without one or when it is not found (the header's check says so)."""
    if cfg.init_lora is None:
        return None
    from lorastudio.errors import LorastudioError
    from lorastudio.file_version import version_of
    from lorastudio.settings import get_settings
    from lorastudio.training.adapters.init_lora_rules import init_lora_path

    try:
        return str(version_of(os.stat(init_lora_path(cfg.init_lora, get_settings()))))
    except (LorastudioError, OSError):
        return None


def _key(cfg: TrainConfig) -> str:
    """The cache key (a SHA-256: a request body of megabytes is not kept CACHE_SIZE times): the base's denoiser config (its content where it is on this machine, else
    the source and revision), the family, adapter and the three fields' values."""
    from lorastudio import families

    spec = families.get(cfg.family).spec
    where = (
        cfg.base_config if cfg.base_config is not None and Path(cfg.base_model).is_file() else cfg.base_model
    )
    base = f"{where}@{cfg.revision}"
    folder = Path(where).expanduser()
    if not folder.is_dir():
        from lorastudio.basemodels.hubcache import cached_snapshot, is_hub_id

        folder = cached_snapshot(where, cfg.revision) if is_hub_id(where) else None
    if folder is not None:  # read bounded: a FIFO or /dev/zero there must not hold the server
        root = folder.parent.parent if folder.parent.name == "snapshots" else folder  # a hub snapshot's blobs
        with contextlib.suppress(FileNotFoundError, PermissionError, NotADirectoryError):
            base = hashlib.sha256(read_bounded(folder / spec.denoiser / "config.json", root)).hexdigest()
    values = {f: getattr(cfg, f) for f in FIELDS}
    init = _init_version(cfg)  # the init file as it is now: a rewrite in place asks again
    whole = json.dumps(
        [base, cfg.family, cfg.adapter, values, init, cfg.lora_format, cfg.train_text_encoder, cfg.lora_rank],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(whole.encode()).hexdigest()  # 64 bytes kept, whatever the values' size
