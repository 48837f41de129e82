"""The GPU arbiter: one owner of the accelerator at a time.

Two kinds of workload register here:
- a training job (exclusive: at most one; while it holds the GPU, generation is refused). It
  reserves `devices` GPUs (a data-parallel job: one per rank); with one training job at a time
  the reservation is the first `devices` GPUs visible to the server, indices 0..devices-1;
- resident workloads (the generation pipeline, a GPU caption job) that keep weights on the GPU
  between uses and can be asked to free them (`release`). A resident may say it can stay
  (`stays(devices)`: it runs on a GPU the training did not reserve, or fits beside it:
  jobs/caption_gpu.py); it is then left running when training starts.

`begin_training` is called only after a job passed validation: it marks training active (new
generation requests are refused from then on), waits for generations in flight to finish, then
asks every resident that cannot stay to free its memory. The job service calls `end_training` as soon as the job
is final (its worker may still be exiting; the service itself waits for that process before it
starts the next training job). No torch here: residents free themselves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from lorastudio.errors import JobActive

Release = Callable[[], None]
Stays = Callable[[tuple[int, ...]], bool]


def device_words() -> str:
    """The accelerator as messages name it: "the GPU" on a CUDA host, "the CPU" otherwise (a CPU
    host trains and generates on the CPU, one workload at a time all the same); "the GPU" while
    the host's GPU facts are not known yet: a refusal's wording never waits for the GPU probe
    (jobs/hardware.py; a request thread may be the one refusing, RELIABILITY 190)."""
    from lorastudio.jobs.hardware import known_host_info

    host = known_host_info()
    return "the CPU" if host is not None and host.device != "cuda" else "the GPU"


class GpuArbiter:
    """Thread-safe arbiter between the training job and resident GPU workloads."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._training: str | None = None
        self._devices: tuple[int, ...] = ()
        self._generations = 0
        self._residents: dict[str, tuple[Release, Stays | None]] = {}

    @property
    def training_job(self) -> str | None:
        """Id of the training job holding the GPU, or None."""
        with self._cond:
            return self._training

    @property
    def reserved_devices(self) -> tuple[int, ...]:
        """Indices (among the GPUs visible to the server) reserved by the training job; () when
        none holds the GPU."""
        with self._cond:
            return self._devices

    def register_resident(self, name: str, release: Release, stays: Stays | None = None) -> None:
        """Register a resident workload; `release()` must free its GPU memory (idempotent);
        `stays(devices)` (optional) says it may keep running beside a training job that reserves
        GPUs `devices` (called without the arbiter's lock held)."""
        with self._cond:
            self._residents[name] = (release, stays)

    def admit_resident(
        self, name: str, release: Release, stays: Stays | None, *, training: str | None
    ) -> None:
        """Register a resident as `register_resident`, atomically with the check that the
        training job holding the GPU is still `training` (None: none), the state its caller
        decided on. Raises JobActive when it changed meanwhile."""
        with self._cond:
            if self._training != training:
                now = f"training job {self._training} took the GPU" if self._training else "training ended"
                raise JobActive(f"{now} while this was decided; try again")
            self._residents[name] = (release, stays)

    def unregister_resident(self, name: str) -> None:
        with self._cond:
            self._residents.pop(name, None)

    def begin_training(self, job_id: str, wait_s: float = 600.0, devices: int = 1) -> tuple[int, ...]:
        """Give the GPU(s) to training job `job_id`: refuse new generations, wait up to `wait_s`
        for those in flight, then release every resident. Returns the reserved device indices
        (0..devices-1 of the GPUs visible to the server; a data-parallel job's ranks run on
        them). Raises JobActive if another training job holds the GPU or a generation did not
        finish in time (the GPU is then left as it was); ValueError if devices < 1."""
        if devices < 1:
            raise ValueError(f"a training job reserves at least one device, not {devices}")
        with self._cond:
            if self._training is not None and self._training != job_id:
                raise JobActive(f"training job {self._training} is using {device_words()}")
            self._training = job_id
            self._devices = tuple(range(devices))  # known from now on (jobs/caption_gpu.py reads it)
            if not self._cond.wait_for(lambda: self._generations == 0, timeout=wait_s):
                self._training = None
                self._devices = ()
                self._cond.notify_all()
                raise JobActive(
                    f"a generation is still running on {device_words()}; try again when it finishes"
                )
            residents = list(self._residents.values())
        for release, stays in residents:
            if stays is None or not stays(tuple(range(devices))):
                release()
        return tuple(range(devices))

    def end_training(self, job_id: str) -> None:
        """Free the GPU(s) held by `job_id` (no-op if it does not hold them)."""
        with self._cond:
            if self._training == job_id:
                self._training = None
                self._devices = ()
                self._cond.notify_all()

    @contextmanager
    def generation(self) -> Iterator[None]:
        """Hold the GPU for one generation (load + run). Raises JobActive while training is active."""
        with self._cond:
            if self._training is not None:
                raise JobActive(
                    f"training job {self._training} is using {device_words()}; generation is available "
                    "when it ends"
                )
            self._generations += 1
        try:
            yield
        finally:
            with self._cond:
                self._generations -= 1
                self._cond.notify_all()
