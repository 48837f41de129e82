"""What a LoRA / DoRA layer keeps for the backward (training/adapters/lora_saved.py, RELIABILITY 2170): its
bf16 input as it came, not the fp32 copy peft's forward casts it to, eager (peft's layers and the
fused projections' shared LoRA input) and under Inductor's partitioner; outputs and gradients
bitwise peft's."""

from __future__ import annotations

import copy
import functools
import weakref

import pytest
import torch
from torch._dynamo.utils import counters
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from lorastudio import families
from lorastudio.tiny.parts import FLUX1_DIT
from lorastudio.training.adapters import lora_saved
from lorastudio.training.adapters.lora import add_lora, lora_config_for
from lorastudio.training.speed.fused_projections import fuse_projections, share_lora_inputs

TARGETS = families.get("flux").spec.lora_targets


class _Outputs(TorchDispatchMode):
    """Weak references to every tensor an op made while active."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[weakref.ref] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        self.made += [weakref.ref(t) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        return out


def _flux(adapter: str, fused: bool = False) -> tuple[torch.nn.Module, list[torch.nn.Parameter]]:
    """A tiny bf16 FLUX.1 transformer with the run's adapter (add_lora), every factor drawn."""
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    model = FluxTransformer2DModel(**FLUX1_DIT, pooled_projection_dim=32, guidance_embeds=True)
    model = model.to(torch.bfloat16)
    if fused:
        fuse_projections(model, families.get("flux").spec.fused_projection_groups)
    cfg = type("Cfg", (), {"lora_rank": 4, "lora_alpha": 4.0, "lora_dropout": 0.0, "lora_targets": None})()
    cfg.adapter = adapter
    params = add_lora(model, lora_config_for(cfg, TARGETS))
    if fused:
        share_lora_inputs(model)
    with torch.no_grad():
        for i, p in enumerate(params):  # B is zero-initialised: make every adapter count
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 0.1 + (i % 3 == 0))
    return model, params


def _inputs() -> dict:
    g = torch.Generator().manual_seed(1)
    tokens, text = 16, 8
    return {
        "hidden_states": torch.randn(2, tokens, 64, generator=g).bfloat16(),  # [B, L, C]
        "encoder_hidden_states": torch.randn(2, text, 32, generator=g).bfloat16(),  # [B, T, D]
        "pooled_projections": torch.randn(2, 32, generator=g).bfloat16(),
        "timestep": torch.tensor([0.3, 0.7]).bfloat16(),
        "img_ids": torch.randint(0, 4, (tokens, 3), generator=g).float(),
        "txt_ids": torch.zeros(text, 3),
        "guidance": torch.tensor([3.5, 3.5]).bfloat16(),
        "return_dict": False,
    }


def _step(
    model: torch.nn.Module, params: list[torch.nn.Parameter], record: bool = True
) -> tuple[torch.Tensor, list, list]:
    """One forward and backward: the output, the gradients, and (`record`: eager only) the fp32
    copies of an adapted layer's input that the forward left alive (held by autograd)."""
    inputs: list[torch.Tensor] = []
    hooks = [
        m.register_forward_pre_hook(lambda _, args: inputs.append(args[0]))
        for m in model.modules()
        if hasattr(m, "lora_A")
    ]
    made = _Outputs()
    if record:
        with made:
            out = model(**_inputs())[0]  # [B, L, C]
    else:
        out = model(**_inputs())[0]
    for hook in hooks:
        hook.remove()
    copies = []
    for ref in made.made:
        t = ref()
        if t is None or t.dtype != torch.float32 or t.untyped_storage().data_ptr() == out.data_ptr():
            continue
        for x in inputs:
            if (
                x.dtype == torch.bfloat16
                and t.numel() == x.numel()
                and torch.equal(t.reshape(-1), x.float().reshape(-1))
            ):
                copies.append(tuple(t.shape))
                break
    grads = torch.autograd.grad(out.float().square().mean(), params)
    return out, list(grads), copies


@pytest.mark.parametrize(("adapter", "fused"), [("lora", False), ("dora", False), ("lora", True)])
def test_the_lora_step_keeps_no_fp32_copy_of_an_adapted_layers_input(adapter: str, fused: bool, monkeypatch):
    """peft's lora.Linear (DoRA too) and the fused groups' shared LoRA input cast the bf16 input to
    the fp32 adapter's dtype and autograd kept that copy per adapted layer and step: 48 MiB per
    FLUX.1 3072-wide projection at [1, 4096, 3072] (RELIABILITY 2170). Outputs and gradients
    stay bitwise those of the fp32 copy (peft's own forward)."""
    model, params = _flux(adapter, fused)
    out, grads, copies = _step(model, params)
    assert not copies, copies  # was one per adapted layer (or fused group)
    monkeypatch.setattr(lora_saved, "KEEP_BF16_INPUT", False)  # peft's: the fp32 copy kept
    want_out, want_grads, want_copies = _step(model, params)
    assert want_copies  # the measure sees the copy where it is kept
    assert torch.equal(out, want_out)
    assert all(torch.equal(g, w) for g, w in zip(grads, want_grads, strict=True))


def test_a_kept_lora_layer_is_bitwise_peft_and_refuses_an_input_changed_in_place():
    """Against peft's own class (not only KEEP_BF16_INPUT off): outputs and gradients bitwise; an
    input changed in place between forward and backward raises, as a saved tensor's check does."""
    from peft import LoraConfig, inject_adapter_in_model

    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(64, 48)).bfloat16().requires_grad_(False)
    layer = inject_adapter_in_model(LoraConfig(r=4, lora_alpha=8, target_modules=["0"]), base)[0]
    for p in layer.parameters():
        if p.requires_grad:
            p.data = torch.randn_like(p, dtype=torch.float32) * 0.1
    peft_layer = copy.deepcopy(layer)
    assert lora_saved.keep_lora_inputs(base) == 1 and lora_saved.keep_lora_inputs(base) == 0
    x = torch.randn(2, 256, 64, dtype=torch.bfloat16, requires_grad=True)  # [B, L, in]
    results = []
    for m in (layer, peft_layer):
        out = m(x)
        factors = [p for p in m.parameters() if p.requires_grad]
        results.append((out, torch.autograd.grad(out.float().square().sum(), [x, *factors])))
    (out, grads), (want_out, want_grads) = results
    assert torch.equal(out, want_out)
    assert all(torch.equal(g, w) for g, w in zip(grads, want_grads, strict=True))
    y = x.detach().clone().requires_grad_(False)
    out = layer(y)
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified in place"):
        out.float().sum().backward()


def test_under_an_activation_checkpoint_the_layer_runs_peft_forward_alike():
    """Inside a non-reentrant checkpoint (its own saved-tensor hooks decide what is kept) the kept
    forward steps aside: the same outputs and gradients, bitwise."""
    model, params = _flux("lora")
    out, grads, _ = _step(model, params)
    for block in [*model.transformer_blocks, *model.single_transformer_blocks]:
        forward = block.forward
        block.forward = functools.partial(torch.utils.checkpoint.checkpoint, forward, use_reentrant=False)
    got_out, got_grads, _ = _step(model, params)
    assert torch.equal(got_out, out)
    assert all(torch.equal(g, w) for g, w in zip(got_grads, grads, strict=True))


def _partitioned(block_saves: list[torch.Tensor]):  # type: ignore[no-untyped-def]
    """A torch.compile backend: AOT Autograd with Inductor's min-cut partition, graphs run eagerly;
    appends to `block_saves` what each forward hands its backward (graph inputs left out)."""
    from functorch.compile import make_boxed_compiler
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    def forward_graph(gm: torch.fx.GraphModule, _: object) -> torch.fx.GraphModule:
        outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        block_saves.extend(o.meta["val"] for o in outputs[1:] if o is not None and o.op != "placeholder")
        return gm

    def backend(gm: torch.fx.GraphModule, example: list[torch.Tensor]) -> object:
        return aot_module_simplified(
            gm,
            example,
            fw_compiler=make_boxed_compiler(forward_graph),
            bw_compiler=make_boxed_compiler(lambda g, _: g),
            partition_fn=functools.partial(min_cut_rematerialization_partition, compiler="inductor"),
        )

    return backend


def test_a_compiled_lora_linear_keeps_no_fp32_copy_of_its_input():
    """Compiled, Inductor's partitioner kept the fp32 cast of the input (it feeds the lora_A weight
    gradient's matmul): 48 MiB per FLUX.1 3072 x 3072 projection at [1, 4096, 3072] (RELIABILITY
    2170). On meta tensors at those shapes: only the [rows, 16] projection (0.25 MiB) is kept.
    (DoRA does not compile whole: peft's dequantize_module_weight breaks the graph; Known problems.)"""
    from peft import LoraConfig, inject_adapter_in_model

    base = torch.nn.Sequential(torch.nn.Linear(3072, 3072)).to("meta", torch.bfloat16).requires_grad_(False)
    layer = inject_adapter_in_model(LoraConfig(r=16, lora_alpha=16, target_modules=["0"]), base)[0]
    for p in layer.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    lora_saved.keep_lora_inputs(base)
    x = torch.randn(1, 4096, 3072, dtype=torch.bfloat16, device="meta", requires_grad=True)  # [B, L, D]
    saved: list[torch.Tensor] = []
    torch._dynamo.reset()
    torch.compile(layer, backend=_partitioned(saved), fullgraph=True)(x).float().sum().backward()
    fp32 = sum(t.numel() * 4 for t in saved if t.dtype == torch.float32)
    assert fp32 <= 2**20, [(t.dtype, tuple(t.shape)) for t in saved]  # was 48.25 MiB


@pytest.mark.slow  # ~40-60 s of Dynamo tracing; the default test_a_compiled_lora_linear_keeps_no_fp32_copy_of_its_input
@pytest.mark.parametrize("fused", [False, True])  # covers the compiled cast (one graph, not kept)
def test_compiled_lora_blocks_stay_one_graph_and_bitwise_the_fp32_copys(fused: bool, monkeypatch):
    """Every block of the tiny bf16 FLUX.1 compiled whole (`fullgraph=True`) with the checkpointed
    cast, under Inductor's partition: no graph break, outputs and gradients bitwise those of the
    compiled fp32 copy, and no fp32 copy of an adapted input among what the blocks keep."""
    results = []
    for keep in (True, False):
        monkeypatch.setattr(lora_saved, "KEEP_BF16_INPUT", keep)
        model, params = _flux("lora", fused)
        saved: list[torch.Tensor] = []
        torch._dynamo.reset()
        counters.clear()
        for block in [*model.transformer_blocks, *model.single_transformer_blocks]:
            block.compile(backend=_partitioned(saved), fullgraph=True)
        out, grads, _ = _step(model, params, record=False)
        assert not counters["graph_break"]
        results.append((out, grads, sorted(tuple(t.shape) for t in saved if t.dtype == torch.float32)))
    (out, grads, kept), (want_out, want_grads, want_kept) = results
    assert torch.equal(out, want_out)
    assert all(torch.equal(g, w) for g, w in zip(grads, want_grads, strict=True))
    assert len(kept) < len(want_kept), (kept, want_kept)  # the casts are recomputed, not kept


def test_a_base_that_saves_a_tensor_subclass_trains_through_the_kept_forward():
    """A quantised base (torchao's int8 / nf4 / fp8 weights are tensor subclasses) saves a tensor
    without a storage to compare inside the kept forward's hooks: kept as it is, not an error."""
    from peft import LoraConfig, inject_adapter_in_model
    from torch.testing._internal.two_tensor import TwoTensor

    class SubclassBase(torch.nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            w = TwoTensor(self.weight, self.weight)  # saved by the matmul: a wrapper subclass
            return (x @ w.t()).a  # [..., out]

    torch.manual_seed(0)
    base = torch.nn.Sequential(SubclassBase(16, 8)).bfloat16().requires_grad_(False)
    layer = inject_adapter_in_model(LoraConfig(r=2, lora_alpha=2, target_modules=["0"]), base)[0]
    for p in layer.parameters():
        if p.requires_grad:
            p.data = torch.randn_like(p, dtype=torch.float32)
    assert lora_saved.keep_lora_inputs(base) == 1
    x = torch.randn(4, 16, dtype=torch.bfloat16, requires_grad=True)  # [N, in]
    layer(x).float().sum().backward()
    assert x.grad is not None and layer.lora_A["default"].weight.grad is not None
