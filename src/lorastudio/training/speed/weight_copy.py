"""The two copies of a CPU-built denoiser's weights that training/speed/denoiser_early.py runs in its
thread beside phases 1-2, each stopping at the next tensor when asked (`Stopped`):

- `ring_to_device`: straight to the device through two reused page-locked chunks (RING_BYTES
  each): the CPU fills one chunk while the other's DMA runs on a stream of the copy's own, so the
  read of the weights' pages and the host-to-device copy overlap. Each tensor's device memory is
  allocated on the thread's default stream, and the copy stream waits for that stream first: a
  block the main thread freed with its kernels still queued is not written before they ran;
- `HostBuffer`: one host buffer holding every tensor, page-locked (cudaHostRegister) once full,
  for a device that has no room for the denoiser beside the text encoders: the device copy then
  runs after phase 2, from page-locked memory.
Written here because neither diffusers (`from_pretrained(device_map=...)` copies each tensor
pageable from the file's mapping) nor safetensors (`safe_open(device="cuda")`: the same) stages a
copy through page-locked memory, nor runs it beside other work.
"""

from __future__ import annotations

import contextlib
import logging
import threading

import torch

log = logging.getLogger(__name__)

RING_BYTES = 64 * 2**20  # one chunk of the ring (two of them)
_ALIGN = 64  # each tensor's offset in the host buffer: any dtype's alignment


class Stopped(Exception):
    """The copy saw its stop event: it ends without a result."""


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's storage as flat bytes: [numel x element size] uint8."""
    return t.reshape(-1).view(torch.uint8)


def ring_to_device(
    tensors: list[torch.Tensor],
    device: torch.device,
    stop: threading.Event,
    pin: bool,
    out: dict[int, torch.Tensor] | None = None,
) -> dict[int, torch.Tensor]:
    """Copies of the contiguous CPU `tensors` on `device` through the ring (module docstring);
    `pin`: page-locked chunks (CUDA). Returns `out` (a new dict by default): id(tensor) -> its
    copy, complete, for each tensor copied, so that a caller's `out` keeps the copies made before
    an error. Raises Stopped when `stop` is set, torch.OutOfMemoryError."""
    cuda = device.type == "cuda"
    stream = torch.cuda.Stream(device) if cuda else None
    chunks = [torch.empty(RING_BYTES, dtype=torch.uint8, pin_memory=pin) for _ in range(2)]  # [bytes]
    done: list[torch.cuda.Event | None] = [None, None]  # a chunk's last copy
    out = {} if out is None else out
    k = 0
    try:
        for t in tensors:
            if stop.is_set():
                raise Stopped
            copy = torch.empty(t.shape, dtype=t.dtype, device=device)  # allocated on the default stream
            if stream is not None:
                stream.wait_stream(torch.cuda.current_stream(device))  # after what last used its block
            src, dst = _bytes(t), _bytes(copy)
            for offset in range(0, src.numel(), RING_BYTES):
                n = min(RING_BYTES, src.numel() - offset)
                slot = k % 2
                if done[slot] is not None:
                    done[slot].synchronize()  # type: ignore[union-attr]  # its previous DMA has read it
                chunk = chunks[slot][:n]
                chunk.copy_(src[offset : offset + n])
                with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                    dst[offset : offset + n].copy_(chunk, non_blocking=cuda)
                    if stream is not None:
                        done[slot] = torch.cuda.Event()
                        done[slot].record(stream)  # type: ignore[union-attr]
                k += 1
            out[id(t)] = copy
    finally:
        if stream is not None:
            stream.synchronize()  # the chunks are free to go; the copies complete
    return out


class HostBuffer:
    """One host buffer holding every tensor of a list (module docstring). `views` maps id(tensor)
    -> its copy in the buffer; `pinned`: page-locked (the device copy is a DMA)."""

    def __init__(self) -> None:
        self.buffer: torch.Tensor | None = None  # [bytes] uint8
        self.views: dict[int, torch.Tensor] = {}
        self.pinned = False

    def fill(self, tensors: list[torch.Tensor], stop: threading.Event, pin: bool) -> None:
        """Copy the contiguous CPU `tensors` in, then page-lock the buffer when `pin` (after the
        copy: its pages are there to lock; a host that refuses, e.g. a locked-memory limit, leaves
        it pageable, logged). Raises Stopped when `stop` is set."""
        offsets, total = [], 0
        for t in tensors:
            offsets.append(total)
            total += -(-t.numel() * t.element_size() // _ALIGN) * _ALIGN
        self.buffer = buffer = torch.empty(total, dtype=torch.uint8)  # [bytes]
        views = {}
        for t, offset in zip(tensors, offsets, strict=True):
            if stop.is_set():
                raise Stopped
            n = t.numel() * t.element_size()
            view = buffer[offset : offset + n].view(t.dtype).view(t.shape)
            view.copy_(t)
            views[id(t)] = view
        if pin and total and not stop.is_set():
            code = int(
                torch.cuda.cudart().cudaHostRegister(buffer.data_ptr(), total, 0)
            )  # 0: the default flags
            self.pinned = code == 0
            if code != 0:  # a locked-memory limit: the device copy is pageable, as before
                log.warning("denoiser load: its host buffer could not be page-locked (CUDA error %d)", code)
        self.views = views

    def release(self) -> None:
        """Unlock and drop the buffer (idempotent)."""
        self.views = {}
        if self.pinned and self.buffer is not None:
            torch.cuda.cudart().cudaHostUnregister(self.buffer.data_ptr())
            self.pinned = False
        self.buffer = None
