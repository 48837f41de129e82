"""A worker target that injects file-system faults into the real engine, for the reliability
suite only. It runs the real `worker_main` in a real spawned child; before that it wraps the two
writers of run files (a checkpoint's state.pt: snapshot.save_torch_file; safetensors' save_file)
according to $LORASTUDIO_TEST_FAULT (inherited from the test process; the
production worker never reads it):

- "slow_checkpoint": every checkpoint's state.pt is written in two halves with 0.3 s between
  them, so a kill can land with a half-written file inside the checkpoint's staging folder;
- "enospc_checkpoint:N": the N-th checkpoint write (1-based) writes half of state.pt, then fails
  with OSError(ENOSPC), as a full disk would;
- "enospc_lora": the final LoRA file write (not a step's snapshot under loras/) writes half, then
  fails with OSError(ENOSPC);
- "final_samples": the final sample round (the run's last step) raises RuntimeError, as a
  sampler that runs out of memory or breaks would.
"""

from __future__ import annotations

import errno
import io
import os
import time
from pathlib import Path
from typing import Any

from lorastudio.jobs.worker import WorkerArgs, worker_main
from lorastudio.lora.snapshots import LORAS

FAULT_ENV = "LORASTUDIO_TEST_FAULT"
SLOW_WRITE_PAUSE_S = 0.3


def _half_write(path: Path, data: bytes, then: str) -> None:
    """Write the first half of `data` to `path`, then pause and finish ("pause") or fail ("enospc")."""
    with open(path, "wb") as out:
        out.write(data[: len(data) // 2])
        out.flush()
        os.fsync(out.fileno())
        if then == "enospc":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        time.sleep(SLOW_WRITE_PAUSE_S)
        out.write(data[len(data) // 2 :])


def _install(fault: str) -> None:
    import safetensors.torch
    import torch

    from lorastudio.training.resume import snapshot

    real_save_file = safetensors.torch.save_file
    calls = {"checkpoint": 0}
    kind, _, arg = fault.partition(":")

    def save_torch_file(obj: Any, path: Path) -> None:  # a checkpoint's state.pt (checkpoint_writes.py)
        calls["checkpoint"] += 1
        buf = io.BytesIO()
        torch.save(obj, buf)
        if kind == "slow_checkpoint":
            _half_write(Path(path), buf.getvalue(), "pause")
        elif kind == "enospc_checkpoint" and calls["checkpoint"] == int(arg):
            _half_write(Path(path), buf.getvalue(), "enospc")
        else:
            Path(path).write_bytes(buf.getvalue())

    def save_file(tensors: Any, filename: str, metadata: Any = None) -> None:
        name = Path(filename).name
        snapshot = LORAS in Path(filename).parts  # a step's LoRA snapshot, not the final file
        if kind == "enospc_lora" and name.startswith(".") and name.endswith(".staging") and not snapshot:
            data = safetensors.torch.save(tensors, metadata=metadata)
            _half_write(Path(filename), data, "enospc")
        real_save_file(tensors, filename, metadata=metadata)

    snapshot.save_torch_file = save_torch_file
    safetensors.torch.save_file = save_file


def _break_final_samples() -> None:
    from lorastudio.training.samples import SamplePreviews

    real = SamplePreviews.render

    def render(self: SamplePreviews, denoiser: Any, step: int, vae: Any = None) -> list[str]:
        if step >= int(self.run.cfg.steps):
            raise RuntimeError("the final sampler broke")
        return real(self, denoiser, step, vae=vae)

    SamplePreviews.render = render  # type: ignore[method-assign]


def faulty_worker(args: WorkerArgs, events: Any, stop_event: Any, stop_save: Any) -> None:
    """`worker_main` with the fault named by $LORASTUDIO_TEST_FAULT installed first."""
    fault = os.environ.get(FAULT_ENV, "")
    if fault == "final_samples":
        _break_final_samples()
    elif fault:
        _install(fault)
    worker_main(args, events, stop_event, stop_save)
