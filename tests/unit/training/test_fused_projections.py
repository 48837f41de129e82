"""training/speed/fused_projections.py: the same-input frozen projections as one matmul per group,
with peft's LoRA adapters on the same module names: the same outputs and LoRA gradients as the
unfused model, eager and through Dynamo + AOTAutograd, without graph breaks and without keeping
any tensor between forwards; what a run fuses (fusion_choice) and what a run reports."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
import torch
from safetensors.torch import load_file
from torch._dynamo.utils import counters

from lorastudio import families
from lorastudio.config_rules import FusionChoice, fusion_choice
from lorastudio.errors import ConfigError
from lorastudio.tiny.models import build_flux
from lorastudio.training.adapters.lora import add_lora, lora_config_for
from lorastudio.training.loop import train
from lorastudio.training.speed import precompile_key
from lorastudio.training.speed.fused_projections import (
    FusedFrozenProjections,
    FusedSlice,
    FusionUnsupported,
    fuse_for_run,
    fuse_projections,
    share_lora_inputs,
)

FLUX_GROUPS = families.get("flux").spec.fused_projection_groups

TARGETS = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")


def _inputs() -> dict:
    g = torch.Generator().manual_seed(1)
    tokens, text = 16, 8
    return {
        "hidden_states": torch.randn(2, tokens, 64, generator=g),  # [B, L, C] packed latents
        "encoder_hidden_states": torch.randn(2, text, 32, generator=g),  # [B, T, D]
        "pooled_projections": torch.randn(2, 32, generator=g),
        "timestep": torch.tensor([0.3, 0.7]),
        "img_ids": torch.randint(0, 4, (tokens, 3), generator=g).float(),
        "txt_ids": torch.zeros(text, 3),
        "guidance": torch.tensor([3.5, 3.5]),
        "return_dict": False,
    }


def _with_lora(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    cfg = type("Cfg", (), {"lora_rank": 4, "lora_alpha": 4.0, "lora_dropout": 0.0, "lora_targets": None})()
    params = add_lora(model, lora_config_for(cfg, TARGETS))
    with torch.no_grad():
        for i, p in enumerate(params):  # B is zero-initialised: make every adapter count
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 0.1)
    return params


def _run(model: torch.nn.Module, params: list[torch.nn.Parameter]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    for p in params:
        p.grad = None
    out = model(**_inputs())[0]  # [B, L, C]
    out.square().mean().backward()
    return out.detach(), [p.grad.clone() for p in params]


def test_fused_projections_train_like_the_separate_ones_eager_and_compiled():
    plain = build_flux(0).transformer
    fused = copy.deepcopy(plain)
    groups = fuse_projections(fused, FLUX_GROUPS)
    blocks = len(fused.transformer_blocks) * 2 + len(fused.single_transformer_blocks)
    assert groups == blocks and sum(isinstance(m, FusedSlice) for m in fused.modules()) == 3 * groups + len(
        fused.single_transformer_blocks
    )
    p_plain, p_fused = _with_lora(plain), _with_lora(fused)
    assert [p.shape for p in p_plain] == [p.shape for p in p_fused]  # the same adapters
    names = {n for n, _ in fused.named_modules()}
    assert any(n.endswith("attn.to_q.lora_A") for n in names)  # on the same module names
    out, grads = _run(plain, p_plain)
    calls = []
    hooks = [
        m.linear.register_forward_hook(lambda *_: calls.append(1))
        for m in fused.modules()
        if isinstance(m, FusedFrozenProjections)
    ]
    _run(fused, p_fused)
    assert len(calls) == groups  # one matmul per group and forward
    for hook in hooks:
        hook.remove()
    for model_out, model_grads in (_run(fused, p_fused), _compiled_run(fused, p_fused)):
        torch.testing.assert_close(model_out, out, rtol=1e-5, atol=1e-6)
        for got, want in zip(model_grads, grads, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    holders = [m for m in fused.modules() if isinstance(m, FusedFrozenProjections)]
    assert holders and all(h._input is None and h._parts is None for h in holders)  # nothing kept


def _compiled_run(model: torch.nn.Module, params: list[torch.nn.Parameter]):
    torch._dynamo.reset()
    counters.clear()
    for block in [*model.transformer_blocks, *model.single_transformer_blocks]:
        block.compile(backend="aot_eager")
    result = _run(model, params)
    assert not counters["graph_break"]  # each block traced whole, its groups included
    return result


def test_qwen_image_and_z_image_blocks_fuse_with_the_same_outputs():
    from lorastudio.tiny.qwen_image import qwen_image_transformer, qwen_image_transformer_inputs
    from lorastudio.tiny.z_image import z_image_transformer, z_image_transformer_inputs

    for family, build, inputs in (
        (
            "qwen-image",
            qwen_image_transformer,
            lambda: {**qwen_image_transformer_inputs(), "return_dict": False},
        ),
        ("z-image", z_image_transformer, z_image_transformer_inputs),
    ):
        plain = build(0).eval()
        fused = copy.deepcopy(plain)
        groups = fuse_projections(fused, families.get(family).spec.fused_projection_groups)
        calls = []
        for m in fused.modules():
            if isinstance(m, FusedFrozenProjections):
                m.linear.register_forward_hook(lambda *_, log=calls: log.append(1))
        with torch.no_grad():
            want, got = plain(**inputs())[0], fused(**inputs())[0]
        assert groups > 0 and len(calls) == groups  # one matmul per group
        want, got = (torch.stack(x) if isinstance(x, list) else x for x in (want, got))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_shared_lora_inputs_keep_peft_maths_with_one_a_matmul_per_group():
    plain = build_flux(0).transformer
    shared = copy.deepcopy(plain)
    groups = fuse_projections(shared, FLUX_GROUPS)
    p_plain, p_shared = _with_lora(plain), _with_lora(shared)
    # FLUX.1's single blocks fuse proj_mlp, which is no LoRA target: its group shares q/k/v only
    assert share_lora_inputs(shared) == groups
    a_calls = []
    for name, module in shared.named_modules():
        if name.endswith("lora_A.default") and "_out" not in name:  # members of fused groups
            module.register_forward_hook(lambda *_, log=a_calls: log.append(1))
    out, grads = _run(plain, p_plain)
    for got_out, got_grads in (_run(shared, p_shared), _compiled_run(shared, p_shared)):
        torch.testing.assert_close(got_out, out, rtol=1e-5, atol=1e-6)
        for got, want in zip(got_grads, grads, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    assert not a_calls  # the A weights are read through the group's one matmul
    holders = [m for m in shared.modules() if isinstance(m, FusedFrozenProjections)]
    assert all(h._lora_input is None and h._lora_parts is None for h in holders)


# -- what a run fuses -----------------------------------------------------------------------------


def _choice(setting: str, **over):
    kwargs = {
        "precision": "bf16",
        "device_type": "cuda",
        "lora_dropout": 0.0,
        "plain_plan": True,
        "adapter": "lora",
    }
    return fusion_choice(setting, True, **{**kwargs, **over})


def test_auto_fuses_only_the_measured_case_and_on_says_what_it_cannot_do():
    assert _choice("auto") == FusionChoice(True, True)
    assert _choice("auto", precision="fp16") == FusionChoice(True, True)
    for over in (
        {"device_type": "cpu"},
        {"precision": "fp32"},
        {"precision": "fp8"},
        {"precision": "nf4"},
        {"plain_plan": False},  # checkpointing or block swap
        {"lora_dropout": 0.1},
    ):
        assert _choice("auto", **over) == FusionChoice(False, False), over
    assert _choice("off") == FusionChoice(False, False)
    assert fusion_choice(
        "on", False, precision="bf16", device_type="cpu", lora_dropout=0.0, plain_plan=True, adapter="lora"
    ) == FusionChoice(False, False)  # a family without groups (config validation refuses "on")
    assert _choice("on", device_type="cpu", precision="fp32", plain_plan=False) == FusionChoice(True, True)
    no_share = _choice("on", lora_dropout=0.1)
    assert (no_share.fuse, no_share.share) == (True, False) and "lora_dropout" in no_share.note
    quantised = _choice("on", precision="int8")  # base_precision auto chose a quantised plan
    assert (quantised.fuse, quantised.share) == (False, False) and "int8" in quantised.note


def test_fuse_on_is_refused_for_a_family_without_groups_and_for_quantised_bases(make_config, monkeypatch):
    from lorastudio.config import resolve_train_config

    resolve_train_config(make_config("sdxl", fuse_projections="on"))  # every built-in family has groups
    sdxl = families.get("sdxl")  # a family that declares none (a plug-in's, say)
    monkeypatch.setattr(sdxl, "spec", dataclasses.replace(sdxl.spec, fused_projection_groups={}))
    with pytest.raises(ConfigError) as err:
        resolve_train_config(make_config("sdxl", fuse_projections="on"))
    assert [p.field for p in err.value.problems] == ["fuse_projections"]
    assert "Stable Diffusion XL" in err.value.problems[0].message
    resolve_train_config(make_config("sdxl", fuse_projections="off"))  # off / auto: nothing asked
    for precision in ("fp8", "int8", "nf4"):
        with pytest.raises(ConfigError, match="converted layer by layer"):
            resolve_train_config(make_config(fuse_projections="on", base_precision=precision))


def _trained(make_config, family: str, fuse: str, name: str, events: list | None = None, **over):
    events = [] if events is None else events
    cfg = make_config(family, fuse_projections=fuse, output_name=name, steps=3, **over)
    result = train(cfg, events.append, device="cpu", return_denoiser=True)
    plan = next(e for e in events if e.type == "plan_chosen")
    return result, load_file(str(result.lora_path)), plan


def test_a_fused_run_renders_the_same_previews(make_config):
    """The previews run the training denoiser (fused, adapters shared) under no_grad."""
    import numpy as np
    from PIL import Image

    images = {}
    for fuse in ("off", "on"):
        events: list = []
        result, _, _ = _trained(
            make_config,
            "flux",
            fuse,
            f"preview-{fuse}",
            events,
            sample_prompts=["a red circle"],
            sample_steps=2,
        )  # 2 denoising steps (flux's default: 28): the same training denoiser in each
        ready = [e for e in events if e.type == "sample_ready"]
        assert ready and ready[-1].images
        with Image.open(result.lora_path.parent / ready[-1].images[0]) as image:
            images[fuse] = np.asarray(image, dtype=np.float32)
    assert images["on"].shape == images["off"].shape
    assert np.abs(images["on"] - images["off"]).max() <= 2.0  # 8-bit rounding of near-equal values


@pytest.mark.parametrize(
    "family", [n for n in families.names() if families.get(n).spec.fused_projection_groups]
)
def test_a_fused_run_trains_like_an_unfused_one_and_writes_the_same_lora_file(family, make_config):
    plain, plain_lora, plain_plan = _trained(make_config, family, "off", f"{family}-off")
    fused, fused_lora, fused_plan = _trained(make_config, family, "on", f"{family}-on")
    holders = [m for m in fused.denoiser.modules() if isinstance(m, FusedFrozenProjections)]
    shared = [h for h in holders if h.lora_members]
    assert plain_plan.fused_projections == 0 and fused_plan.fused_projections == len(holders) > 0
    assert shared  # the LoRA members of the groups read their input once
    assert not any(isinstance(m, FusedSlice) for m in plain.denoiser.modules())
    assert fused.losses == pytest.approx(plain.losses, rel=1e-5)
    assert fused_lora.keys() == plain_lora.keys()  # the same file: another loader sees no difference
    # Adam moves a weight by up to ~lr (5e-3 here) whatever its gradient's size, so an element
    # whose gradient is at rounding level (one of SDXL's cross-attention A's) may land a little
    # apart: every element within lr / 20, and on average within 2e-6
    for key in plain_lora:
        diff = (fused_lora[key] - plain_lora[key]).abs()
        assert diff.max() <= 2.5e-4 and diff.mean() <= 2e-6, key
    if family == "flux":  # fusion_choice reads no family but has_groups (true for each here)
        auto, _, auto_plan = _trained(make_config, family, "auto", f"{family}-auto")
        assert auto_plan.fused_projections == 0 and auto.losses == plain.losses  # auto: off on the CPU


def test_with_lora_dropout_the_base_is_fused_and_each_adapter_keeps_its_input(make_config):
    fused, _, plan = _trained(make_config, "flux", "on", "dropout", lora_dropout=0.2)
    holders = [m for m in fused.denoiser.modules() if isinstance(m, FusedFrozenProjections)]
    assert plan.fused_projections == len(holders) > 0 and not any(h.lora_members for h in holders)
    assert any("lora_dropout > 0" in f for f in plan.fallbacks)
    assert all(torch.isfinite(torch.tensor(fused.losses)))


def test_a_disabled_adapter_is_not_applied_by_the_shared_forward():
    plain = build_flux(0).transformer
    shared = copy.deepcopy(plain)
    fuse_projections(shared, FLUX_GROUPS)
    p_plain, p_shared = _with_lora(plain), _with_lora(shared)
    share_lora_inputs(shared)
    with torch.no_grad():
        with_lora = shared(**_inputs())[0]
        shared.disable_adapters()
        plain.disable_adapters()
        base_only, want = shared(**_inputs())[0], plain(**_inputs())[0]
    torch.testing.assert_close(base_only, want, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(with_lora, base_only)  # the adapters count when enabled
    assert p_plain and p_shared


def test_a_model_that_cannot_be_fused_as_declared_is_left_whole_and_the_run_says_why():
    model = build_flux(0).transformer
    before = {n: type(m) for n, m in model.named_modules()}
    odd = model.single_transformer_blocks[-1]
    odd.proj_mlp = torch.nn.Linear(odd.proj_mlp.in_features + 1, odd.proj_mlp.out_features).requires_grad_(
        False
    )
    before["single_transformer_blocks.1.proj_mlp"] = torch.nn.Linear
    for groups, why in (
        (FLUX_GROUPS, "differ in input size"),  # the last single block's group, found after others
        ({"FluxTransformerBlock": (("attn.to_q", "attn.nope"),)}, "has no attn.nope"),
        ({"NoSuchBlock": (("to_q", "to_k"),)}, "none of the blocks"),
    ):
        choice, groups_fused, notes = fuse_for_run(model, groups, FusionChoice(True, True))
        assert (choice, groups_fused) == (FusionChoice(False, False), 0)
        assert len(notes) == 1 and why in notes[0] and notes[0].startswith("fuse_projections: not fused")
        assert {n: type(m) for n, m in model.named_modules()} == before  # nothing was changed
    fused_twice = build_flux(0).transformer
    fuse_projections(fused_twice, FLUX_GROUPS)
    with pytest.raises(FusionUnsupported, match="FusedSlice, not a plain Linear"):
        fuse_projections(fused_twice, FLUX_GROUPS)
    kept = _choice("on", lora_dropout=0.1)
    assert fuse_for_run(build_flux(0).transformer, FLUX_GROUPS, kept)[2] == [f"fuse_projections: {kept.note}"]


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_checkpointed_fused_blocks_train_alike_and_keep_nothing_after_the_step(mode, make_config):
    plain, _, _ = _trained(make_config, "flux", "off", f"ckpt-{mode}-off", gradient_checkpointing=mode)
    fused, _, plan = _trained(make_config, "flux", "on", f"ckpt-{mode}-on", gradient_checkpointing=mode)
    assert plan.fused_projections > 0 and plan.gradient_checkpointing == mode
    assert fused.losses == pytest.approx(plain.losses, rel=1e-5)
    holders = [m for m in fused.denoiser.modules() if isinstance(m, FusedFrozenProjections)]
    # the backward's recomputation of each block served every member: no group output is held
    assert all(h._parts is None and h._lora_parts is None for h in holders)


def test_a_shared_input_model_pickles_by_reference_and_its_copy_computes_the_same():
    """Dynamo's saved block graphs pickle a block's modules with their guards
    (training/speed/precompile.py): the shared LoRA forward is a class's, found by name, not a closure
    set on each instance, which torch pickled as peft's forward without its closure, so every
    saved FLUX.1 block failed to load on the GPU (RELIABILITY 1230)."""
    shared = build_flux(0).transformer
    fuse_projections(shared, FLUX_GROUPS)
    _with_lora(shared)
    assert share_lora_inputs(shared) > 0
    assert precompile_key.local_instance_functions(shared) == []
    assert precompile_key.local_classes(shared) == []
    restored = pickle.loads(pickle.dumps(shared))  # the old closures: "Can't pickle local object"
    assert [type(m) for m in restored.modules()] == [type(m) for m in shared.modules()]
    with torch.no_grad():
        torch.testing.assert_close(restored(**_inputs())[0], shared(**_inputs())[0])


def test_the_preflight_says_a_dora_loha_or_lokr_run_is_unfused_as_the_engine_runs_it(make_config):
    """RELIABILITY 1520: the engine never fuses a DoRA / LoHa / LoKr run (peft's own layers), but
    the preflight's plan asked fusion_choice without the adapter and reported
    fuse_projections true for one on a bf16 GPU (the web form's "projections fused" chip)."""
    from lorastudio.jobs.hardware import HostInfo
    from lorastudio.jobs.preflight import preflight_plan

    gpu = HostInfo("cuda", "H100", 80.0, ("auto", "fp32", "fp16", "bf16"), 1, (80.0,), capability=(9, 0))
    base = "black-forest-labs/FLUX.1-dev"  # schema-checked only: no model is read
    assert (
        preflight_plan(make_config("flux", base_model=base), gpu)["fuse_projections"] is True
    )  # LoRA: fused
    for adapter in ("dora", "loha", "lokr"):
        cfg = make_config("flux", base_model=base, adapter=adapter)
        assert preflight_plan(cfg, gpu)["fuse_projections"] is False, adapter
        assert _choice("auto", adapter=adapter) == FusionChoice(False, False), adapter
