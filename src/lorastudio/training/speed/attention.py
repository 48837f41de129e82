"""Which attention kernel the run uses (`attention_backend`).

Values: "auto" (default), "cudnn", "flash", "efficient", "math", "fa4".
- "cudnn" / "flash" / "efficient" put that torch SDPA backend first and keep the others as
  fallbacks for calls it cannot take (masks, head dims), except that only "cudnn" ever enables
  cuDNN. "math" is the reference (slow, memory-hungry) kernel only.
- "fa4" is FlashAttention-4 (flash_attn.cute, the optional extra `lorastudio[fa4]`) for the
  transformer families' attention (training/speed/attention_fa4.py: a traceable custom op; calls it
  cannot take, such as masked ones, run SDPA with flash first). Refused, with the reason, where
  flash_attn.cute is not importable or the GPU is not a Hopper / Blackwell one.
- "auto" on CUDA: for the transformer families (FLUX.1, Qwen-Image, Z-Image) a probe in a child
  process (the run's dtype, head count, head dim and token counts: image tokens + text tokens)
  runs cuDNN's and, where FA4 can run, FA4's forward and backward, compares each with flash
  attention and (when both are probed) times them: FA4 when it passed and is faster than cuDNN
  by FA4_MARGIN, else cuDNN when it passed, else flash, with the reason in the run's fallbacks.
  The probe runs in a child process because the failure it
  guards against is not an exception: the cuDNN backward of FLUX.1 at 4096 + 512 tokens hit an
  illegal memory access on an H200 with torch 2.11 (reference run; bench note 12), which poisons
  the whole CUDA context. That crash came from FLUX.1's model, not its shapes (the probe passed
  there): its single blocks hand the attention a sliced gradient. A run on cuDNN therefore
  gives every attention output a contiguous gradient (contiguous_attention_grads; bench note
  17: no crash since). On an H200 cuDNN gave FLUX.1 +24 % samples/s with fp8 (+19 % bf16), Qwen-Image
  +17 % and Z-Image at batch 2 +18 % over flash (bench notes 12, 17); FA4 against cuDNN: note 23.
  "auto" on a U-Net family (SDXL: many small attention calls) or without CUDA: torch's own choice
  with cuDNN off.
Names of the torch flags: torch.backends.cuda.enable_{cudnn,flash,mem_efficient,math}_sdp.
The probe child's environment is the run's without its secrets (`probe_environment`): no
child's /proc/PID/environ may show one (RELIABILITY 1011; a run from a hub id holds the hub
token in memory only since RELIABILITY 1120, jobs/childenv.give_hub_token: a second line).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from lorastudio import json_read
from lorastudio.config_host import ATTENTION_MIN_CAPABILITY, attention_device_problems
from lorastudio.errors import FieldProblem
from lorastudio.jobs.childenv import child_environment
from lorastudio.training.speed.attention_fa4 import fa4_unavailable, route_denoiser_to_fa4

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 180.0
FA4_MARGIN = 0.98  # auto takes FA4 over cuDNN when its probe time is at most this fraction of cuDNN's
_ORDER = {  # torch SDPBackend names, first = preferred
    "cudnn": ["CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH"],
    "flash": ["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH"],
    "efficient": ["EFFICIENT_ATTENTION", "FLASH_ATTENTION", "MATH"],
    "math": ["MATH"],
    "fa4": ["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH"],  # for the calls FA4 does not take
}
_FLAGS = {
    "CUDNN_ATTENTION": "cudnn",
    "FLASH_ATTENTION": "flash",
    "EFFICIENT_ATTENTION": "mem_efficient",
    "MATH": "math",
}


@dataclass(frozen=True)
class AttentionChoice:
    """The backend the run uses ("cudnn" | "fa4" | "flash" | "efficient" | "math" | "default" =
    torch's own choice with cuDNN off) and, when "auto" could not use a kernel it probed, why
    (else None)."""

    backend: str
    fallback_reason: str | None = None


@dataclass(frozen=True)
class KernelProbe:
    """One kernel's probe result: passed (forward and backward within the probe's tolerance of
    flash at every shape), why not, and the summed fwd + bwd milliseconds over the shapes (when
    the probe timed it)."""

    ok: bool
    reason: str | None = None
    ms: float | None = None


def attention_problems(backend: str, device: torch.device) -> list[FieldProblem]:
    """Why `backend` cannot be honoured on `device` (empty when it can): "cudnn" and "efficient"
    are CUDA kernels; "flash" needs CUDA or a CPU (torch has a CPU flash kernel), not MPS; on a
    GPU "cudnn" and "flash" need compute capability 8.0+ (config_host); "fa4" needs a Hopper /
    Blackwell GPU and flash_attn.cute (attention_fa4.fa4_unavailable)."""
    if backend == "fa4":
        reason = fa4_unavailable(device)
        if reason is not None:
            return [FieldProblem("attention_backend", f"'fa4' cannot run here: {reason}; use 'auto'")]
        return []
    if device.type == "cuda" and torch.cuda.is_available():  # the run's own card: cudnn / flash from sm80
        capability = torch.cuda.get_device_capability(device)
        return attention_device_problems(backend, "cuda", capability, torch.cuda.get_device_name(device))
    return attention_device_problems(backend, device.type)  # config_host: the host lists the same


def probe_shapes(
    denoiser_config: Mapping[str, Any], image_tokens: int, text_tokens: int, batch: int
) -> list[tuple[int, int, int, int]]:
    """The [batch, heads, tokens, head_dim] attention shapes of a transformer denoiser whose
    diffusers config is `denoiser_config` (FLUX.1 / Qwen-Image: num_attention_heads and
    attention_head_dim; Z-Image: n_heads and dim): joint image + text attention and image-only
    attention. Empty when the config names no heads (a U-Net: SDXL)."""
    heads = denoiser_config.get("num_attention_heads") or denoiser_config.get("n_heads")
    head_dim = denoiser_config.get("attention_head_dim")
    if not isinstance(head_dim, int) and heads and denoiser_config.get("dim"):
        head_dim = int(denoiser_config["dim"]) // int(heads)
    if not isinstance(heads, int) or not isinstance(head_dim, int):
        return []
    lengths = dict.fromkeys([image_tokens + text_tokens, image_tokens])
    return [(batch, heads, length, head_dim) for length in lengths]


def choose_attention(
    requested: str,
    device: torch.device,
    dtype: torch.dtype,
    shapes: list[tuple[int, int, int, int]],
    masked: bool = False,
) -> AttentionChoice:
    """The backend for a run that asked for `requested` (see the module docstring). "auto" on
    CUDA probes cuDNN (and FA4 where fa4_unavailable finds nothing against it) at `shapes` in a
    child process (<= PROBE_TIMEOUT_S); without CUDA or shapes (a U-Net) it keeps torch's default
    (cuDNN off); an explicit backend is returned as asked (attention_problems refused what
    cannot run). `masked`: the family's every attention call carries a text mask
    (FamilySpec.masked_attention): "auto" takes the efficient kernel without probing."""
    settled = settled_choice(requested, device, dtype, shapes, masked)
    if settled is not None:
        return settled
    return pick_kernel(probe_attention(device, dtype, shapes, probe_kernels(device)))


def settled_choice(
    requested: str,
    device: torch.device,
    dtype: torch.dtype,
    shapes: list[tuple[int, int, int, int]],
    masked: bool = False,
) -> AttentionChoice | None:
    """choose_attention's answer where it needs no probe (an explicit backend, no CUDA, no
    shapes, a masked family, a dtype cuDNN and flash cannot take or a GPU without either kernel
    (below sm80: a T4, an RTX 20xx): the efficient kernel); None when "auto" must probe."""
    if requested != "auto":
        return AttentionChoice(requested)
    if device.type != "cuda" or not shapes:
        return AttentionChoice("default")
    if masked:
        return AttentionChoice(
            "efficient",
            "attention: every call carries the text mask, which flash cannot take and cuDNN crashed "
            "on (bench note 24): the efficient kernel",
        )
    if dtype not in (torch.bfloat16, torch.float16):  # torch's flash kernel takes neither: it ran efficient
        return AttentionChoice(
            "efficient",
            f"attention: cuDNN and flash need bf16/fp16 compute (this run: {dtype}): the efficient kernel",
        )
    if (
        torch.cuda.is_available()
        and torch.cuda.get_device_capability(device) < ATTENTION_MIN_CAPABILITY["cudnn"]
    ):
        major, minor = torch.cuda.get_device_capability(device)
        return AttentionChoice(
            "efficient",
            f"attention: {torch.cuda.get_device_name(device)} (compute capability {major}.{minor}) has no cuDNN or"
            " flash kernel (8.0+): the efficient kernel",
        )
    return None


def probe_kernels(device: torch.device) -> list[str]:
    """The kernels auto probes on `device`: cuDNN, and FA4 where fa4_unavailable finds nothing
    against it."""
    fa4_reason = fa4_unavailable(device)
    if fa4_reason is not None:
        log.info("attention: FlashAttention-4 not probed: %s", fa4_reason)
    return ["cudnn"] if fa4_reason is not None else ["cudnn", "fa4"]


def pick_kernel(results: Mapping[str, KernelProbe]) -> AttentionChoice:
    """auto's choice from the probe's `results` (kernel name -> KernelProbe): FA4 when it passed
    and, if cuDNN passed too, took at most FA4_MARGIN of cuDNN's time; else cuDNN when it passed;
    else flash. A probed kernel that failed is named in the fallback reason."""
    cudnn, fa4 = results.get("cudnn"), results.get("fa4")
    failed = [f"{name}: {r.reason}" for name, r in results.items() if not r.ok]
    for name, r in results.items():
        log.info("attention probe: %s %s", name, f"{r.ms:.3f} ms" if r.ok and r.ms else r.reason or "passed")
    note = f"attention: not used ({'; '.join(failed)})" if failed else None
    if fa4 is not None and fa4.ok:
        if cudnn is None or not cudnn.ok:
            return AttentionChoice("fa4", note)
        if fa4.ms is not None and cudnn.ms is not None and fa4.ms <= FA4_MARGIN * cudnn.ms:
            return AttentionChoice("fa4", note)
    if cudnn is not None and cudnn.ok:
        return AttentionChoice("cudnn", note)
    log.warning("attention: no probed kernel passed: %s", "; ".join(failed))
    return AttentionChoice(
        "flash", f"attention: cuDNN not used ({'; '.join(failed)}); flash attention instead"
    )


def probe_environment() -> dict[str, str]:
    """The probe child's environment: this process's (FA4's cache variables, CUDA_VISIBLE_DEVICES
    ...) without its secrets (jobs/childenv.child_environment: any an embedding process left
    there), unbuffered so that its lines arrive as it writes them."""
    return child_environment(os.environ) | {"PYTHONUNBUFFERED": "1"}


def probe_attention(
    device: torch.device,
    dtype: torch.dtype,
    shapes: list[tuple[int, int, int, int]],
    kernels: list[str],
) -> dict[str, KernelProbe]:
    """Run each of `kernels` ("cudnn", "fa4") forward + backward at each shape in a child process
    on `device`, compare with flash attention and, when more than one kernel is asked for, time
    them. Returns a KernelProbe per kernel: one the child crashed on (or never reached) failed
    with the child's exit status and last error line."""
    spec = {
        "device": str(device),
        "dtype": str(dtype).removeprefix("torch."),
        "shapes": shapes,
        "kernels": kernels,
        "time": len(kernels) > 1,
    }
    env = probe_environment()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "lorastudio.training.speed.attention_probe", json.dumps(spec)],
            capture_output=True,
            encoding="utf-8",  # not the locale's (RELIABILITY 1029)
            errors="replace",
            timeout=PROBE_TIMEOUT_S,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {
            k: KernelProbe(False, f"the probe did not finish in {PROBE_TIMEOUT_S:.0f} s") for k in kernels
        }
    except OSError as err:
        return {k: KernelProbe(False, f"the probe could not start: {err}") for k in kernels}
    return read_probe_output(done.stdout, done.stderr, done.returncode, kernels)


def read_probe_output(
    stdout: str, stderr: str, returncode: int, kernels: list[str]
) -> dict[str, KernelProbe]:
    """Each kernel's KernelProbe from the probe child's output (training/speed/attention_probe.py): its
    result line; a kernel without one passed when the child checked it and crashed later on
    another ("checked" line: passed, untimed), else failed with the exit status and the child's
    last error line."""
    results: dict[str, KernelProbe] = {}
    checked: set[str] = set()
    for line in stdout.splitlines():
        if line.startswith("{"):
            row = json_read.loads(line)
            if row.get("checked"):
                checked.add(row["kernel"])
            elif "kernel" in row:
                results[row["kernel"]] = KernelProbe(bool(row["ok"]), row.get("reason"), row.get("ms"))
    tail = (stderr.strip().splitlines() or ["no output"])[-1]
    missing = [k for k in kernels if k not in results]
    blamed = next((k for k in missing if k not in checked), missing[0] if missing else None)
    for kernel in missing:
        if kernel in checked and kernel != blamed:
            results[kernel] = KernelProbe(True)
        else:
            results[kernel] = KernelProbe(False, f"the probe exited with {returncode}: {tail[:300]}")
    return results


def probe_cudnn(
    device: torch.device, dtype: torch.dtype, shapes: list[tuple[int, int, int, int]]
) -> str | None:
    """The cuDNN probe alone (probe_attention): None when every shape passed, else the reason."""
    result = probe_attention(device, dtype, shapes, ["cudnn"])["cudnn"]
    return None if result.ok else str(result.reason or "failed")


def apply_attention(choice: AttentionChoice) -> None:
    """Set torch's process-wide SDPA flags (and preference order, where torch has one) for
    `choice`. Call inside precision.run_numerics, which restores every flag on exit."""
    if choice.backend == "default":
        return  # run_numerics already turned cuDNN off on CUDA; torch chooses among the rest
    order = _ORDER[choice.backend]
    for name, flag in _FLAGS.items():
        getattr(torch.backends.cuda, f"enable_{flag}_sdp")(name in order)
    set_order = getattr(torch._C, "_set_sdp_priority_order", None)
    if set_order is not None:
        from torch.nn.attention import SDPBackend

        preferred = [int(getattr(SDPBackend, name)) for name in order]
        rest = [int(b) for b in torch._C._get_sdp_priority_order() if int(b) not in preferred]
        set_order(preferred + rest)


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward hands on a contiguous gradient (a no-op when it already is)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()


def _contiguous_grad_hook(module: torch.nn.Module, args: Any, output: Any) -> Any:
    return _ContiguousGrad.apply(output) if isinstance(output, torch.Tensor) else output


def contiguous_attention_grads(denoiser: torch.nn.Module) -> int:
    """Give every attention module of `denoiser` (diffusers' Attention / *Attention classes) a
    forward hook so that the gradient reaching its tensor output is contiguous, as the cuDNN
    SDPA backward needs: FLUX.1's single blocks concatenate [attention | MLP] and hand back a
    slice of that gradient. Call before the first (compiled) forward. Returns the module count."""
    count = 0
    for module in denoiser.modules():
        if type(module).__name__.endswith("Attention"):
            module.register_forward_hook(_contiguous_grad_hook)
            count += 1
    return count


def prepare_denoiser_attention(denoiser: torch.nn.Module, choice: AttentionChoice) -> int:
    """What `choice` needs of the denoiser itself, before its first (compiled) forward: cuDNN
    gets contiguous output gradients (contiguous_attention_grads), FA4 gets the attention
    processors routed to it (attention_fa4.route_denoiser_to_fa4). Returns the modules changed."""
    if choice.backend == "cudnn":
        return contiguous_attention_grads(denoiser)
    if choice.backend == "fa4":
        return route_denoiser_to_fa4(denoiser)
    return 0


def saved_attention_state() -> dict[str, Any]:
    """Every SDPA flag and the preference order, for restore_attention_state."""
    state: dict[str, Any] = {
        flag: getattr(torch.backends.cuda, f"{flag}_sdp_enabled")() for flag in _FLAGS.values()
    }
    get_order = getattr(torch._C, "_get_sdp_priority_order", None)
    state["order"] = [int(b) for b in get_order()] if get_order is not None else None
    return state


def restore_attention_state(state: dict[str, Any]) -> None:
    """Put back what saved_attention_state returned."""
    for flag in _FLAGS.values():
        getattr(torch.backends.cuda, f"enable_{flag}_sdp")(state[flag])
    if state["order"] is not None:
        torch._C._set_sdp_priority_order(state["order"])
