"""Building the denoiser of a plan: the one build path of a run's denoiser and of every plan
trial (training/planning/plan_measure.py), so a trial measures exactly what the run will hold.

Order (each step needs the previous one):
  load        in the plan's compute dtype; on the CPU when the base is quantised or blocks are
              swapped (the device never holds the whole bf16 model), else on the device
  swap set    training.planning.block_swap.swap_candidates: the repeated blocks that wait in CPU RAM
  precision   training.planning.quantize.apply_base_precision: quantise / fp8-convert, place on the
              device except the swap set
  fuse        training.speed.fused_projections (TrainConfig.fuse_projections, decided for the plan):
              each group of same-input frozen projections becomes one matmul
  LoRA        torch.manual_seed(cfg.seed), then training.adapters.lora.add_lora (LoRA A init); a fresh
              run's init_lora file put into it (training/adapters/init_lora.py); then the
              fused groups' LoRA members share their input (one A matmul per group)
  block swap  training.planning.block_swap.attach_block_swap (LoRA parameters live on the device)
  compile     training.speed.compile.compile_denoiser (the run only; trials measure eagerly): the
              repeated blocks, or for compile "wide" the family's wide_compile_blocks (static
              shapes; CUDA graphs unless checkpointing, gradient accumulation or data
              parallelism: training.speed.compile.compile_request)
  checkpoint  training.planning.memory.apply_checkpointing (after compile, so a selective mode that falls
              back to full on compiled blocks is reported)
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.config_rules import fusion_choice
from lorastudio.families.single_file import model_source
from lorastudio.training.adapters.lora import add_lora, lora_config_for
from lorastudio.training.precision import is_quantised, pick_dtype
from lorastudio.training.speed.fused_projections import fuse_for_run, share_lora_inputs

if TYPE_CHECKING:
    from lorastudio.training.planning.plan import Plan
    from lorastudio.training.preflight import PreparedRun

log = logging.getLogger(__name__)


class _StageClock:
    """Seconds per build stage, logged as one line at the end (RESULTS note 34: the denoiser's
    load phase is 8.4 s at real size, of which the weights' copy is ~3.6 s; this says where the
    rest goes)."""

    def __init__(self) -> None:
        self.stages: list[tuple[str, float]] = []
        self._t = time.perf_counter()

    def mark(self, stage: str) -> None:
        now = time.perf_counter()
        self.stages.append((stage, now - self._t))
        self._t = now

    def line(self) -> str:
        return ", ".join(f"{name} {seconds:.2f} s" for name, seconds in self.stages)


@dataclass
class BuiltDenoiser:
    """A denoiser built for a plan, LoRA added, in train mode. `fallbacks`: the reasons a
    requested feature is not in use (precision, checkpointing, compile); `compiled`: regional
    compile is active and `compile_regions` what it compiles (PlanChosen.compile_regions);
    `swap`: the BlockSwap when blocks wait in CPU RAM (else None); `fused_groups`: the groups
    of same-input projections run as one matmul (0: none); `init_warning`: the run's adapted
    layers its init_lora file lacks, which start fresh (training/adapters/init_lora.py; None: none)."""

    denoiser: Any
    params: list[torch.nn.Parameter]
    lora_config: Any
    dtype: torch.dtype
    swap: Any = None
    compiled: bool = False
    compile_regions: str = ""
    fallbacks: list[str] = field(default_factory=list)
    fused_groups: int = 0
    init_warning: str | None = None

    def release(self) -> None:
        """Drop every reference this object holds (the caller frees the device memory:
        training.precision.free_accelerator_memory). The block swap is not detached: detaching
        would bring every swapped block onto the device just before the model goes."""
        self.swap = self.denoiser = self.lora_config = None
        self.params = []


def build_denoiser(
    run: PreparedRun, plan: Plan, *, compile_blocks: bool, loaded: Any = None
) -> BuiltDenoiser:
    """Build the run's denoiser for `plan` (module docstring order). `compile_blocks`: regionally
    compile the repeated blocks (lazy; a compiler failure later falls back to eager). `loaded`:
    the denoiser already loaded for this plan, on the device (training/speed/denoiser_early.py), for
    the load step.

    Returns the BuiltDenoiser. Raises ModelSourceError (load), ConfigError (LoRA targets, a
    precision the device cannot run), torch.OutOfMemoryError."""
    from lorastudio.training.adapters.assistant import merge_assistant
    from lorastudio.training.planning.block_swap import attach_block_swap, swap_candidates
    from lorastudio.training.planning.memory import apply_checkpointing
    from lorastudio.training.planning.quantize import apply_base_precision

    cfg, family, device = run.cfg, run.family, run.device
    clock = _StageClock()
    dtype = pick_dtype(plan.base_precision, device)
    stage_on_cpu = is_quantised(plan.base_precision) or plan.offload_blocks > 0
    load_device = torch.device("cpu") if stage_on_cpu else device
    if loaded is None:
        denoiser = family.load_denoiser(model_source(cfg), cfg.revision, dtype, load_device)
    else:
        denoiser = loaded
    clock.mark("load")
    merge_assistant(denoiser, cfg, family)  # a distilled base's assistant LoRA, into the frozen weights
    blocks = swap_candidates(denoiser, plan.offload_blocks) if plan.offload_blocks > 0 else []
    fallbacks = list(apply_base_precision(denoiser, plan.base_precision, device, stay_on_cpu=blocks))
    clock.mark("precision")
    fusion = fusion_choice(
        cfg.fuse_projections,
        bool(family.spec.fused_projection_groups),
        precision=plan.base_precision,
        device_type=device.type,
        lora_dropout=cfg.lora_dropout,
        plain_plan=plan.offload_blocks == 0 and plan.gradient_checkpointing == "off",
        adapter=cfg.adapter,  # LoHa / LoKr / DoRA: peft's own layers, unfused
    )
    fusion, groups, notes = fuse_for_run(denoiser, family.spec.fused_projection_groups, fusion)
    fallbacks += notes
    clock.mark("fuse")
    torch.manual_seed(cfg.seed)  # LoRA A init and LoRA dropout masks
    lora_config = lora_config_for(cfg, family.spec.lora_targets)
    params = add_lora(denoiser, lora_config)
    init_warning = None
    if run.init_lora is not None:  # a fresh run from a LoRA file: its weights, at the run's scale
        from lorastudio.training.adapters.init_lora import load_init_lora

        loaded_init = load_init_lora(denoiser, run.init_lora, family.spec.name, cfg.adapter)
        init_warning = loaded_init.warning(run.init_lora.path.name)
    if fusion.share:
        share_lora_inputs(denoiser)
    clock.mark("lora")
    built = BuiltDenoiser(
        denoiser,
        params,
        lora_config,
        dtype,
        fallbacks=fallbacks,
        fused_groups=groups,
        init_warning=init_warning,
    )
    if blocks:
        built.swap = attach_block_swap(denoiser, blocks, device)
    denoiser.train()
    if compile_blocks:
        from lorastudio.training.speed.compile import compile_denoiser, compile_request

        request = compile_request(
            cfg.compile,
            family.spec.wide_compile_blocks,
            plan.gradient_checkpointing,
            device,
            # preservation (training/preservation.py) adds a second backward to every micro-batch
            accumulates=cfg.grad_accum > 1
            or plan.micro_batch_size < cfg.batch_size
            or bool(getattr(cfg, "preservation", None)),
            distributed=cfg.num_gpus > 1,
        )
        state = compile_denoiser(
            denoiser, params, classes=request.classes, dynamic=request.dynamic, mode=request.mode
        )
        built.compiled = state.active
        if state.active:
            built.compile_regions = "repeated blocks" if request.classes is None else "wide"
            built.compile_regions += " + CUDA graphs" if state.cuda_graphs else ""
        if state.fallback_reason:
            built.fallbacks.append(f"compile: {state.fallback_reason}")
        elif request.note:
            built.fallbacks.append(f"compile: {request.note}")
    clock.mark("swap+compile")
    built.fallbacks += apply_checkpointing(denoiser, plan.gradient_checkpointing)
    clock.mark("checkpointing")
    log.info("denoiser build: %s", clock.line())
    return built
