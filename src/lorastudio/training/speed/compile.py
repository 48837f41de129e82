"""Regional torch.compile of a denoiser's repeated blocks, selectable and never fatal.

The four denoisers declare their repeated blocks in diffusers' `_repeated_blocks`
(FluxTransformerBlock + FluxSingleTransformerBlock, QwenImageTransformerBlock,
ZImageTransformerBlock, the U-Net's BasicTransformerBlock). Each instance is compiled with
`nn.Module.compile` (one compiled code object shared by the instances of a class), so compile
time is that of one or two blocks, not of the whole model.

Modes (TrainConfig.compile): "off" = eager; "auto" = compile on CUDA, eager elsewhere; "on" =
compile, and refused on a device without CUDA (a GPU speed feature: on the CPU it would only
add compile time); "wide" = compile the wider regions the family declares
(FamilySpec.wide_compile_blocks: for SDXL's U-Net its Transformer2DModels, ResNet blocks and
up/down samplers, so the eager glue around the attention blocks is compiled too) with static
shapes and CUDA graphs (Inductor's "reduce-overhead": the U-Net's step is bound by kernel
launches; measured 2.14x the plain diffusers step at batch 4 on an H200, bench/RESULTS.md
note 15). Each new shape (aspect bucket) compiles and records its own graphs (~2 min cold on the
H200, seconds from Inductor's cache). CUDA only, refused for families without such regions and
together with block swap (config_rules); with activation checkpointing, gradient accumulation or
data parallelism the regions are compiled without CUDA graphs (see `compile_request`).
A module inside a compiled region counts as compiled (`runs_compiled`): training/planning/memory.py
checkpoints it in full.
Compilation is lazy, so a compiler failure shows only at the first forward or
backward: `run_compiled` catches it, restores the eager blocks, puts the gradients back as they
were before the failed call and runs the call again eagerly, logging the reason. Errors that are
not the compiler's (out of memory, bad inputs) pass through unchanged.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch

from lorastudio.compile_cache import chosen_compile_cache, note_studio_cache
from lorastudio.config_host import compile_device_problems, compile_runs
from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.training.speed.compile_inputs import with_stable_inputs
from lorastudio.training.speed.compile_trace import pin_processor_signatures
from lorastudio.training.speed.precompile import saved_functions, through_saved

log = logging.getLogger(__name__)

INSIDE_ATTR = "_lorastudio_inside_compiled_region"  # set on the modules inside a compiled block
T = TypeVar("T")
RECOMPILE_LIMIT = 64  # per block class: shapes (buckets, batch sizes) x grad variants
# static shapes (compile "wide"): one entry per (block input shape, bucket, batch size); SDXL's
# ResnetBlock2D alone has ~13 input shapes per batch shape, so 64 would cover ~4 batch shapes
STATIC_RECOMPILE_LIMIT = 512
CUDA_GRAPHS = "reduce-overhead"  # the torch.compile mode that records CUDA graphs


@dataclass
class RegionalCompile:
    """The compiled state of one denoiser: which blocks are compiled (empty once reverted), the
    trainable parameters whose gradients a failed call must not leave half-accumulated, and why
    compilation was skipped or abandoned (None while it is active)."""

    blocks: list[torch.nn.Module] = field(default_factory=list)
    params: list[torch.nn.Parameter] = field(default_factory=list)
    fallback_reason: str | None = None
    swapped: list[tuple[torch.nn.Module, type]] = field(default_factory=list)  # (block, its class)
    cuda_graphs: bool = False  # compiled with CUDA graphs: each call starts a new graph generation

    @property
    def active(self) -> bool:
        return bool(self.blocks)


# denoiser -> its RegionalCompile (weak: dropping the denoiser drops its entry)
_STATES: weakref.WeakKeyDictionary[torch.nn.Module, RegionalCompile] = weakref.WeakKeyDictionary()


def device_capability(device: torch.device) -> tuple[int, int] | None:
    """`device`'s CUDA compute capability (None off CUDA or without a usable CUDA)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]


def compile_problems(mode: str, device: torch.device) -> list[FieldProblem]:
    """Why `mode` cannot be honoured on `device` (empty when it can): "on" and "wide" need CUDA,
    on a GPU of compute capability 7.0+ (config_host.compile_device_problems: Triton's)."""
    capability = device_capability(device)
    name = torch.cuda.get_device_name(device) if capability is not None else "this GPU"
    return compile_device_problems(mode, device.type, capability, name)


def wants_compile(mode: str, device: torch.device) -> bool:
    """Whether `mode` compiles on `device`: "on" / "wide" yes, "off" no, "auto" only on a CUDA GPU
    of compute capability 7.0+. Raises ConfigError when "on" / "wide" cannot be honoured (see
    compile_problems)."""
    problems = compile_problems(mode, device)
    if problems:
        raise ConfigError(problems)
    return compile_runs(mode, device.type, device_capability(device))


@dataclass(frozen=True)
class CompileRequest:
    """How compile_denoiser compiles a run's denoiser: the block classes (None: the model's
    repeated blocks), `dynamic` (None: dynamic after a shape change), the torch.compile mode
    (CUDA_GRAPHS or None) and, when CUDA graphs were wanted but are off, why."""

    classes: tuple[str, ...] | None = None
    dynamic: bool | None = None
    mode: str | None = None
    note: str | None = None


def compile_request(
    compile_mode: str,
    wide_blocks: tuple[str, ...],
    checkpointing: str,
    device: torch.device,
    *,
    accumulates: bool = False,
    distributed: bool = False,
) -> CompileRequest:
    """The CompileRequest of TrainConfig.compile `compile_mode` for a family whose
    wide_compile_blocks are `wide_blocks`, a plan checkpointing `checkpointing` ("off", "full",
    "selective"), the training `device`, whether a step accumulates gradients over several
    backward passes (grad_accum > 1, micro-batches, or differential output preservation's
    second backward per micro-batch) and whether the run is data-parallel.
    "on" / "auto": the repeated blocks, as before. "wide": the wide blocks with static shapes
    and CUDA graphs, except where graphs are unsafe or unproven, where they are left off and
    `note` says why: on the CPU (none), with activation checkpointing (the checkpoint recomputes
    the compiled regions inside the backward), with gradient accumulation (the first backward's
    gradients are taken over from the graph's memory pool and the next replay overwrites them:
    wrong gradients without an error, pytorch/pytorch#96693) and data-parallel (DDP's gradient
    hooks with graphs were not measured)."""
    if compile_mode != "wide":
        return CompileRequest()
    wide = tuple(wide_blocks)
    if device.type != "cuda":
        return CompileRequest(wide, False)
    why = None
    if checkpointing != "off":
        why = f"{checkpointing} activation checkpointing recomputes the compiled regions inside the backward"
    elif accumulates:
        why = "gradient accumulation over several backward passes (graph replays overwrite earlier gradients)"
    elif distributed:
        why = "data-parallel runs (DDP's gradient hooks with CUDA graphs are not measured)"
    if why:
        return CompileRequest(
            wide, False, None, f"CUDA graphs off: {why}; the wide regions are compiled without graphs"
        )
    return CompileRequest(wide, False, CUDA_GRAPHS)


def keep_compile_cache(cache_dir: Path) -> Path:
    """Point Inductor's on-disk cache at `cache_dir` unless the user chose one (TORCHINDUCTOR_CACHE_DIR;
    not Inductor's own default nor an earlier call's: lorastudio/compile_cache.py), so that it
    survives a cleared /tmp and a later run reuses the compiles (SDXL "wide", H200: first step
    134 s cold, 13 s cached). Process-wide; call before the first compile. Returns the folder."""
    chosen = chosen_compile_cache()
    if chosen is not None:
        return chosen
    cache_dir.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)
    note_studio_cache(str(cache_dir))  # also forgets Triton's folder under the old one (1012)
    return cache_dir


def runs_compiled(module: torch.nn.Module) -> bool:
    """Whether `module` runs compiled: a compiled block (`nn.Module.compile`) or inside one (marked
    by compile_denoiser, cleared by revert_to_eager); a plain attribute, constant under Dynamo."""
    return getattr(module, "_compiled_call_impl", None) is not None or getattr(module, INSIDE_ATTR, False)


def repeated_blocks(
    denoiser: torch.nn.Module, classes: Collection[str] | None = None
) -> list[torch.nn.Module]:
    """The instances of the classes named in `classes` (None: the model's own diffusers
    `_repeated_blocks`), in module order; empty when there are none."""
    names = set(classes if classes is not None else getattr(denoiser, "_repeated_blocks", None) or ())
    return [m for m in denoiser.modules() if type(m).__name__ in names]


def compile_denoiser(
    denoiser: torch.nn.Module,
    params: list[torch.nn.Parameter],
    *,
    backend: str | Callable[..., Any] = "inductor",
    dynamic: bool | None = None,
    classes: Collection[str] | None = None,
    mode: str | None = None,
) -> RegionalCompile:
    """Compile each repeated block of `denoiser` in place (lazy: nothing is compiled until the
    first call) and register the state `run_compiled` uses.

    Takes: the denoiser (LoRA already added), its trainable parameters, the torch.compile
    backend, `dynamic` (None: static first, dynamic after a shape change, e.g. a new bucket) and
    the block classes to compile (None: the model's `_repeated_blocks`; "wide" passes the
    family's wide_compile_blocks) and the torch.compile `mode` (CUDA_GRAPHS: `run_compiled`
    then starts a new graph generation per call). Blocks nested in another selected block are
    not compiled twice: the outer one holds them, and they are marked as inside a compiled region.
    With a backend of precompile.SAVED_BACKENDS and no `mode`, each class's first call goes
    through Dynamo's output saved by an earlier run, or saves it (training/speed/precompile.py).
    Returns: the RegionalCompile; when the model has none of those blocks it is inactive with
    the reason set (and logged), and the denoiser stays eager. Never raises for a model without
    blocks; torch.compile's own argument errors propagate.
    """
    state = RegionalCompile(params=list(params))
    blocks = _outermost(repeated_blocks(denoiser, classes))
    _allow_recompiles(STATIC_RECOMPILE_LIMIT if dynamic is False else RECOMPILE_LIMIT)
    _cache_autograd_functions()
    if not blocks:
        state.fallback_reason = f"{type(denoiser).__name__} declares no repeated blocks to compile"
        log.warning("compile: staying eager: %s", state.fallback_reason)
    # Dynamo's saved output per block class (training/speed/precompile.py), not for quantised blocks
    saved = (
        saved_functions(backend, dynamic, mode, classes is None, _device_type(denoiser)) if blocks else None
    )
    for block in blocks:
        call_saved = saved
        if _holds_tensor_subclass(block):
            state.swapped.append((block, type(block)))
            block.__class__ = _unaliased_class(type(block))
            call_saved = None
        block.compile(backend=backend, dynamic=dynamic, **({"mode": mode} if mode else {}))
        impl = through_saved(block, block._compiled_call_impl, call_saved)
        block._compiled_call_impl = with_stable_inputs(impl, promote=classes is None)
        for inner in list(block.modules())[1:]:
            setattr(inner, INSIDE_ATTR, True)
    pin_processor_signatures(blocks)  # less for Dynamo to trace, the same graphs (compile_trace.py)
    state.blocks = blocks
    state.cuda_graphs = bool(blocks) and mode == CUDA_GRAPHS
    _STATES[denoiser] = state
    if blocks:
        kinds = sorted({type(b).__name__ for b in blocks})
        log.info("compile: %d repeated blocks (%s) compiled with %s", len(blocks), ", ".join(kinds), backend)
    return state


def _outermost(blocks: list[torch.nn.Module]) -> list[torch.nn.Module]:
    """`blocks` without those nested inside another of them (module order kept)."""
    nested = {id(inner) for block in blocks for inner in list(block.modules())[1:]}
    return [b for b in blocks if id(b) not in nested]


def _device_type(denoiser: torch.nn.Module) -> str:
    """The device type of the denoiser's first parameter ("cpu" for one without parameters)."""
    first = next(denoiser.parameters(), None)
    return first.device.type if first is not None else "cpu"


def _holds_tensor_subclass(block: torch.nn.Module) -> bool:
    """Whether a parameter of `block` is a tensor subclass (torchao's Int8Tensor / NF4Tensor)."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    return any(is_traceable_wrapper_subclass(p) for p in block.parameters())


_UNALIASED: dict[type, type] = {}


def _unaliased_class(cls: type) -> type:
    """A subclass of block class `cls` (same name, so `repeated_blocks` still finds it) whose
    forward returns fresh copies of a tuple output's tensors. AOTAutograd refuses a graph whose
    outputs alias one another when an input is a tensor subclass (FLUX.1's single block returns
    two slices of one tensor; with an int8 / nf4 base its compile failed with "torch.compile is
    currently being used with tensor subclass inputs"). The copy is inside the compiled graph
    (a forward hook is not: Dynamo traced it as a graph of its own); it costs one write of the
    block's outputs, and only blocks holding quantised weights get it. One subclass per class,
    so the blocks of a class still share one compiled code object."""
    if cls not in _UNALIASED:

        class Unaliased(cls):  # type: ignore[valid-type,misc]
            def forward(self, *args: Any, **kwargs: Any) -> Any:
                output = super().forward(*args, **kwargs)
                if isinstance(output, tuple):
                    return tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in output)
                return output

        Unaliased.__name__, Unaliased.__qualname__ = cls.__name__, cls.__qualname__
        _UNALIASED[cls] = Unaliased
    return _UNALIASED[cls]


def _allow_recompiles(limit: int) -> None:
    """Raise Dynamo's per-code-object recompile limit (process-wide, never lowered). The blocks of
    one class share a code object, and every (shape, requires_grad) variant of their inputs is a
    cache entry: Z-Image's refiner and main blocks at two batch sizes passed the default 8, after
    which Dynamo silently ran those blocks eagerly (measured: 0.31 -> 0.88 s/step)."""
    import torch._dynamo.config as dynamo_config

    dynamo_config.recompile_limit = max(int(dynamo_config.recompile_limit), limit)
    dynamo_config.accumulated_recompile_limit = max(int(dynamo_config.accumulated_recompile_limit), 4 * limit)


def _cache_autograd_functions() -> None:
    """Let AOTAutograd's on-disk cache keep graphs holding a torch.autograd.Function (process-wide;
    torch's `TORCHINDUCTOR_AUTOGRAD_CACHE_ALLOW_CUSTOM_AUTOGRAD`): FLUX.1's single block holds the
    cuDNN path's contiguous-gradient Function (training/speed/attention.py, needed in the compiled graph:
    RESULTS note 39), so its graph went through AOTAutograd in every run. Dynamo traces the
    Function's forward and backward into the graph, so the key covers them. A warm FLUX.1 run on an
    H100 now takes both graphs from the cache: first step 4.40 -> 3.72 s (note 40)."""
    import torch._functorch.config as functorch_config

    functorch_config.autograd_cache_allow_custom_autograd_functions = True


def compile_state(denoiser: torch.nn.Module) -> RegionalCompile | None:
    """The RegionalCompile registered for `denoiser`, or None when it was never compiled."""
    return _STATES.get(denoiser)


def revert_to_eager(denoiser: torch.nn.Module, reason: str) -> None:
    """Undo the regional compile of `denoiser` (its blocks run eagerly again) and record why."""
    state = _STATES.get(denoiser)
    if state is None:
        return
    for block in state.blocks:
        block._compiled_call_impl = None  # what nn.Module.compile set; None = the eager __call__
        for inner in list(block.modules())[1:]:
            if hasattr(inner, INSIDE_ATTR):
                delattr(inner, INSIDE_ATTR)
    for block, cls in state.swapped:
        block.__class__ = cls
    state.blocks, state.swapped, state.cuda_graphs = [], [], False
    state.fallback_reason = reason
    log.warning("compile: falling back to eager: %s", reason)


def is_compiler_error(err: BaseException) -> bool:
    """True for failures of the compiler stack (Dynamo, AOTAutograd, Inductor, Triton build),
    which the eager path does not have; False for everything else (OOM, shape errors, ...)."""
    from torch._dynamo.exc import TorchDynamoException

    if isinstance(err, torch.OutOfMemoryError):
        return False
    if isinstance(err, TorchDynamoException):
        return True
    module = type(err).__module__ or ""
    return module.startswith(("torch._inductor", "torch._dynamo", "torch._functorch", "triton"))


def run_compiled(denoiser: torch.nn.Module, call: Callable[[], T]) -> T:
    """Run `call` (a forward + backward through `denoiser`). When the denoiser's regional compile
    is active and the call fails inside the compiler, revert to eager, restore the gradients of
    the trainable parameters to what they were before the call, and run `call` again (eagerly).

    With CUDA graphs, each call starts a new graph generation first (the outputs of the previous
    call's graphs may then be overwritten: the step keeps none of them, only its detached loss,
    computed outside the compiled regions).
    Returns: what `call` returns. Raises: whatever `call` raises that is not a compiler error,
    and any error of the eager retry.
    """
    state = _STATES.get(denoiser)
    if state is None or not state.active:
        return call()
    grads = [None if p.grad is None else p.grad.clone() for p in state.params]
    try:
        if state.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        return call()
    except Exception as err:  # narrowed just below: only compiler failures are handled
        if not is_compiler_error(err):
            raise
        revert_to_eager(denoiser, f"{type(err).__name__}: {_first_line(err)}")
        for p, g in zip(state.params, grads, strict=True):
            p.grad = g
    return call()


def _first_line(err: BaseException) -> str:
    """The error's first two non-empty lines on one line (Dynamo puts the cause on the second)."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return " ".join(lines[:2])[:300] if lines else "(no message)"
