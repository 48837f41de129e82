"""How long each phase of a finished run took, kept per machine for the preflight's wall-time
forecast (jobs/time_forecast.py). No torch: the engine writes these records, the job service reads them.

`PhaseClock` wraps a run's event sink and stamps every event with the time since the run began;
`phase_seconds` turns the stamped events into phases:

    process_start     the process's start (the OS's) -> train(): Python, torch and the CLI's or
                      job worker's imports; they pass `process_started_at()` in (0 for a train()
                      called in a process that was already running)
    weights_load      sum of ModelLoadCompleted.seconds (text encoders, VAE, denoiser); of a load
                      that ran beside other work (the denoiser's beside phases 1-2:
                      training/speed/denoiser_early.py) its waited_s, the part the run waited for, so
                      that the phases do not count the overlapped time twice
    caption_encoding  text encoders loaded -> the last Preparing("conditioning")
    latent_cache      VAE loaded -> the last Preparing("latents")
    probe_plan        Preparing("denoiser", 0) -> Preparing("denoiser", 1): the attention probe,
                      the plan event (a memory budget's trials run before the denoiser loads and
                      land in `other`)
    first_step        Preparing("denoiser", 1) -> the first Progress: compile, the first step
    steps             steady s/step (median of the step-to-step intervals with nothing else in
                      them) x (steps - 1)
    sample_rounds     each Progress(k) -> SampleReady(k); the last step's from the run's LoRA
                      written (the FINAL_LORA_SAVED mark: the engine saves it before that round)
    checkpoints       what else the loop spent beyond its steady steps and sample rounds
                      (checkpoints, validation rounds, LoRA snapshots)
    export            the last step -> the run's end, less its sample round (its validation
                      round, the LoRA written, memory freed, a CPU run's rate probe: the
                      record is written just before Complete, which ends the run)
    other             the rest of the total: preflight of the engine, freeing, gaps

`run_signature` names what a run's time depends on (family, base model and its size, device,
plan, resolution, batch); the same function describes a planned run in the preflight, so a
finished run's record matches the runs that would take the same time. Records are one JSON file
per finished run under `<home>/run_timings/` (staged, then renamed), outside the run folder so
that `--overwrite` of a run keeps its history.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, get_args

from lorastudio import json_read
from lorastudio.host_clock import host_now
from lorastudio.staged_files import staging_path

RECORD_VERSION = 1
HISTORY_DIR = "run_timings"
MAX_RECORDS = 200  # the newest kept; older records are removed when a run adds one

PhaseName = Literal[
    "process_start",
    "weights_load",
    "caption_encoding",
    "latent_cache",
    "probe_plan",
    "first_step",
    "steps",
    "sample_rounds",
    "checkpoints",
    "export",
    "other",
]
PHASES: tuple[PhaseName, ...] = get_args(PhaseName)  # in the order a run passes them


def process_started_at() -> float | None:
    """When this process started, on the host's clock (host_clock.host_now: never the wall
    clock, which a time sync moves between this call and the run's first event), from the OS:
    Linux's /proc/self/stat start time against the boot clock (10 ms ticks). None where that
    cannot be read."""
    try:
        stat = Path("/proc/self/stat").read_text(encoding="utf-8", errors="replace")  # a name: any bytes
        after_name = stat.rsplit(")", 1)[1].split()
        ticks = int(after_name[19])  # field 22, starttime: clock ticks after boot
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return host_now() - max(age, 0.0)


def host_load() -> dict[str, float | int] | None:
    """{"load_1min": the host's 1-minute load average, "cores": the CPUs this process may run on}
    (the run record's `host_load`: how many runnable threads shared those cores as the run
    started); None where the OS does not say."""
    try:
        load = os.getloadavg()[0]
        cores = len(os.sched_getaffinity(0))
    except (OSError, AttributeError):
        return None
    return {"load_1min": round(load, 2), "cores": cores}


FINAL_LORA_SAVED = "final_lora_saved"  # the mark of the run's LoRA written (before the final samples)


class PhaseClock:
    """The event sink wrapper that stamps each event (seconds since the clock was made).
    `started_at`: when the process started on the host's clock (process_started_at(), a
    standby's hand-over: host_clock.host_now()), None: not counted.
    `marks`: named moments that are no event (FINAL_LORA_SAVED), same time base."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        started_at: float | None = None,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        self._clock = clock
        self._start = clock()
        self.before = max(host_now() - started_at, 0.0) if started_at is not None else 0.0
        self.stamped: list[tuple[float, dict[str, Any]]] = []
        self.marks: dict[str, float] = {}
        # the same stamps on the process's CPU clock (all its threads): what each phase cost in
        # work, whatever else the host ran (`cpu_before`: the process's CPU before train(), its
        # imports; 0 where process_start is not counted)
        self._cpu_clock = cpu_clock
        self._cpu_start = cpu_clock()
        self.cpu_before = self._cpu_start if started_at is not None else 0.0
        self.cpu_stamped: list[tuple[float, dict[str, Any]]] = []
        self.cpu_marks: dict[str, float] = {}
        self.load_at_start = host_load()  # the others' load the run starts under (its record's `host_load`)

    def wrap(self, emit: Callable[[Any], None]) -> Callable[[Any], None]:
        """`emit` with every event stamped here first (the wall clock's and the CPU clock's)."""

        def stamped(event: Any) -> None:
            data = event.model_dump(mode="json")
            self.stamped.append((self._clock() - self._start, data))
            self.cpu_stamped.append((self._cpu_clock() - self._cpu_start, data))
            emit(event)

        return stamped

    def cpu_elapsed(self) -> float:
        """CPU seconds of the process since the clock was made."""
        return self._cpu_clock() - self._cpu_start

    def elapsed(self) -> float:
        """Seconds since the clock was made."""
        return self._clock() - self._start

    def mark(self, name: str) -> None:
        """Remember now as `name` (the latest call wins)."""
        self.marks[name] = self.elapsed()
        self.cpu_marks[name] = self.cpu_elapsed()


def phase_seconds(
    stamped: list[tuple[float, dict[str, Any]]],
    save_every: int | None,
    end: float | None = None,
    before: float = 0.0,
    lora_saved: float | None = None,
    loads_by_stamps: bool = False,
) -> dict[str, Any]:
    """The phases (module docstring) of a run's stamped events (up to its Complete, which the
    engine emits right after writing the record); `end`: the run's end (its memory freed, just
    before Complete; default: the last event's time); `before`: the process's
    seconds before train() (the process_start phase, part of the total); `lora_saved`: when the
    run's LoRA was written (PhaseClock.marks[FINAL_LORA_SAVED]; None: after the samples);
    `loads_by_stamps`: the weights load from the stamps of each load's start and end rather than
    the wall seconds its events carry (`stamped` on the CPU clock: PhaseClock.cpu_stamped; a load
    beside other work keeps its waited_s, its CPU being in the phases it ran beside).

    Returns {"phases": {PHASES: seconds}, "total_s", "s_per_step" (None under 2 steps), "steps":
    steps run, "texts" / "latents": the last Preparing totals (0 when none), "sample_rounds",
    "checkpoints": steps at which a checkpoint was due (`save_every`), "to_first_read_s" /
    "to_first_step_s": seconds from the process's start (`before` counted) to the first
    ModelLoadStarted / the first step's end (None without one): issue 31's time to the first
    step, against phases.weights_load}."""
    total = max(end or 0.0, stamped[-1][0] if stamped else 0.0)

    def last(pred: Callable[[dict[str, Any]], bool]) -> tuple[float, dict[str, Any]] | None:
        return next(((t, e) for t, e in reversed(stamped) if pred(e)), None)

    def loaded(component: str) -> float | None:
        hit = last(lambda e: e["type"] == "model_load_completed" and e["component"] == component)
        return hit[0] if hit else None

    def prepared(phase: str, done: int | None = None) -> tuple[float, dict[str, Any]] | None:
        return last(
            lambda e: e["type"] == "preparing" and e["phase"] == phase and (done is None or e["done"] == done)
        )

    phases = dict.fromkeys(PHASES, 0.0)
    phases["weights_load"] = sum(
        e["seconds"] if e.get("waited_s") is None else e["waited_s"]  # a load beside other work: its wait
        for _, e in stamped
        if e["type"] == "model_load_completed"
    )
    if loads_by_stamps:  # another clock's stamps (the CPU's): a load from its start's stamp to its end's
        phases["weights_load"] = _loads_by_stamps(stamped)
    counts = {"texts": 0, "latents": 0}
    for phase, component, key, name in (
        ("conditioning", "text_encoders", "caption_encoding", "texts"),
        ("latents", "vae", "latent_cache", "latents"),
    ):
        end, start = prepared(phase), loaded(component)
        if end is not None:
            phases[key] = max(end[0] - (start if start is not None and start <= end[0] else end[0]), 0.0)
            counts[name] = int(end[1]["total"])
    built, ready = prepared("denoiser", 0), prepared("denoiser", 1)
    if built and ready:
        phases["probe_plan"] = ready[0] - built[0]
    progress = [(t, e) for t, e in stamped if e["type"] == "progress"]
    samples = {e["step"]: t for t, e in stamped if e["type"] == "sample_ready"}
    busy = {e["step"] for _, e in stamped if e["type"] in ("sample_ready", "validation")}
    due = {
        e["step"] for _, e in progress[:-1] if save_every and e["step"] % save_every == 0
    }  # a checkpoint follows
    s_per_step = None
    if progress:
        phases["first_step"] = progress[0][0] - (ready[0] if ready else progress[0][0])
        clean = [
            b[0] - a[0]
            for a, b in zip(progress, progress[1:], strict=False)
            if a[1]["step"] not in busy | due
        ]
        s_per_step = statistics.median(clean) if clean else None
        loop = progress[-1][0] - progress[0][0]
        inner = sum(samples[e["step"]] - t for t, e in progress[:-1] if e["step"] in samples)
        last_t, last_step = progress[-1][0], progress[-1][1]["step"]
        final_round = 0.0
        if last_step in samples:  # from the LoRA's save when that came between (the engine's order)
            saved = (
                lora_saved if lora_saved is not None and last_t <= lora_saved <= samples[last_step] else None
            )
            final_round = samples[last_step] - (last_t if saved is None else saved)
        phases["sample_rounds"] = inner + final_round
        phases["steps"] = (s_per_step or 0.0) * (len(progress) - 1)
        phases["checkpoints"] = max(loop - phases["steps"] - inner, 0.0)
        phases["export"] = max(total - last_t - final_round, 0.0)
    phases["other"] = max(total - sum(v for k, v in phases.items() if k != "other"), 0.0)
    phases["process_start"] = before
    first_read = next((t for t, e in stamped if e["type"] == "model_load_started"), None)
    return {
        "phases": {k: round(v, 3) for k, v in phases.items()},
        "total_s": round(total + before, 3),
        "s_per_step": None if s_per_step is None else round(s_per_step, 5),
        "steps": len(progress),
        **counts,
        "sample_rounds": len(samples),
        "checkpoints": len(due),
        "to_first_read_s": None if first_read is None else round(first_read + before, 3),
        "to_first_step_s": round(progress[0][0] + before, 3) if progress else None,
    }


def _loads_by_stamps(stamped: list[tuple[float, dict[str, Any]]]) -> float:
    """Each sequential load's span between its ModelLoadStarted and ModelLoadCompleted stamps
    (a load beside other work: its waited_s)."""
    total, started = 0.0, {}
    for t, e in stamped:
        if e["type"] == "model_load_started":
            started[e.get("component")] = t
        elif e["type"] == "model_load_completed":
            begun = started.pop(e.get("component"), None)
            waited = e.get("waited_s")
            total += waited if waited is not None else (t - begun if begun is not None else e["seconds"])
    return total


def run_signature(
    *,
    family: str,
    base_model: str,
    denoiser: str,
    device_name: str,
    plan: dict[str, Any],
    compiled: bool,
    attention_backend: str,
    buckets: dict[str, int],
    batch_size: int,
    grad_accum: int,
    lora_rank: int | None,
    preservation: bool = False,
    adapter: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What a run's time depends on, the same for a finished run and a planned one. `plan`: the
    four plan settings (base_precision resolved: fp32 / bf16 / ...); `buckets`: "WxH" -> images.
    `denoiser_bytes` (the denoiser's safetensors, 0 for a hub id) tells two bases apart;
    `pixels`: the mean pixels of a sample, which the time of a step scales with; `preservation`:
    differential output preservation on (its pass makes a step ~2.3x the plain one); `adapter`:
    adapter_signature()'s (None: a plain LoRA's, as records before it are read)."""
    folder = Path(base_model) / denoiser
    size = sum(f.stat().st_size for f in folder.glob("*.safetensors")) if folder.is_dir() else 0
    sizes = [(int(k.split("x")[0]) * int(k.split("x")[1]), n) for k, n in buckets.items()]
    images = sum(n for _, n in sizes)
    return {
        "family": family,
        "base_model": base_model,
        "denoiser_bytes": size,
        "device_name": device_name,
        "plan": {
            k: plan[k]
            for k in ("base_precision", "gradient_checkpointing", "offload_blocks", "micro_batch_size")
        },
        "compiled": compiled,
        "attention_backend": attention_backend,
        "pixels": round(sum(p * n for p, n in sizes) / images) if images else 0,
        "batch_size": batch_size,
        "grad_accum": grad_accum,
        "lora_rank": lora_rank,
        "preservation": preservation,
        "adapter": adapter if adapter is not None else dict(PLAIN_ADAPTER),
    }


PLAIN_ADAPTER: dict[str, Any] = {"kind": "lora"}  # a record's `adapter` before it was kept (RELIABILITY 1861)


def adapter_signature(
    adapter: str, lokr_factor: int | None, lokr_decompose_both: bool | None
) -> dict[str, Any]:
    """The adapter part of a run's signature: its kind (lora / dora / loha / lokr: each layer's
    work differs at one rank) and a LoKr's block shape (`lokr_factor`, None = -1: as square as
    possible; `lokr_decompose_both`, None = off), which set its factors' sizes."""
    if adapter != "lokr":
        return {"kind": adapter}
    factor = -1 if lokr_factor is None else lokr_factor
    return {"kind": "lokr", "lokr_factor": factor, "lokr_decompose_both": bool(lokr_decompose_both)}


def adapter_words(adapter: dict[str, Any]) -> str:
    """A signature's adapter in words: "lora", "dora", "loha", "lokr (factor -1)", "lokr (factor 4,
    both decomposed)"."""
    if adapter.get("kind") != "lokr":
        return str(adapter.get("kind"))
    both = ", both decomposed" if adapter.get("lokr_decompose_both") else ""
    return f"lokr (factor {adapter.get('lokr_factor')}{both})"


def write_record(home: Path, name: str, record: dict[str, Any]) -> Path:
    """Write `record` as <home>/run_timings/<n>_<UTC stamp>-<name>.json (staged, then renamed),
    `n` one more than the highest number there, and keep the MAX_RECORDS newest (record_order:
    by `n`, never by the wall clock's stamp, which a clock set back or a host booted in 1970
    puts below older records). Returns the path."""
    folder = home / HISTORY_DIR
    folder.mkdir(parents=True, exist_ok=True)
    n = max((record_order(p)[1] for p in folder.glob("*.json")), default=0) + 1
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S%f")
    path = folder / f"{n:08d}_{stamp}-{name}.json"
    staged = staging_path(path)  # staged_files.py: a killed writer's is removed at a server start
    try:
        staged.write_text(json.dumps({"version": RECORD_VERSION, **record}, indent=1))
        os.replace(staged, path)
    finally:  # a failed write (a full disk, the file-size limit) leaves nothing beside the records
        staged.unlink(missing_ok=True)
    for old in sorted(folder.glob("*.json"), key=record_order)[:-MAX_RECORDS]:
        old.unlink(missing_ok=True)
    return path


_NUMBERED = re.compile(r"^(\d{1,18})_")  # write_record's `<n>_`; an older record's name is `<stamp>-`


def record_order(path: Path) -> tuple[int, int, str]:
    """The sort key of a record file, oldest first: the numbered ones (write_record) by their
    number, above every record written before the numbering (`<stamp>-<name>.json`, by name as
    before); two writers that took one number at once, by name (their stamps)."""
    numbered = _NUMBERED.match(path.name)
    return (1, int(numbered.group(1)), path.name) if numbered else (0, 0, path.name)


def record_run(file_name: str) -> str:
    """The run (output folder) name of a record file named `file_name` (write_record's
    `<n>_<stamp>-<name>.json`, or an older `<stamp>-<name>.json`: the stamp has no "-")."""
    return file_name.removesuffix(".json").partition("-")[2]


def read_records(home: Path) -> list[dict[str, Any]]:
    """Every readable record of this version under <home>/run_timings/, newest first
    (record_order; a file that is not one is skipped), each with "file": its file's name."""
    out = []
    folder = home / HISTORY_DIR
    for path in sorted(folder.glob("*.json"), key=record_order, reverse=True) if folder.is_dir() else []:
        try:
            record = json_read.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("version") == RECORD_VERSION:
            out.append({**record, "file": path.name})
    return out
