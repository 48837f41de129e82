"""What a factored LoKr / LoHa linear keeps for the backward (training/adapters/lycoris_grad.py, RELIABILITY
2080): its bf16 input as it came, not an fp32 copy of it nor LoKr's fp32 intermediate, eager and
under Inductor's partitioner; outputs and gradients still peft's within rounding."""

from __future__ import annotations

import functools

import pytest
import torch

from lorastudio.training.adapters.lycoris_forward import TRACED_ATTR, trace_friendly_lycoris


def _bf16_layer(kind: str, dim_in: int, dim_out: int, device: str = "cpu") -> torch.nn.Module:
    """A frozen bf16 linear with peft's `kind` adapter (rank 16 as the default run; LoHa at rank 2
    on the small CPU layer, where the factored delta is taken), factors fp32 drawn from N(0, 0.05)
    as add_lora leaves them: the draw-free forward."""
    from peft import LoHaConfig, LoKrConfig, inject_adapter_in_model

    torch.manual_seed(0)
    rank = 16 if dim_in > 256 else 2
    config = (LoKrConfig if kind == "lokr" else LoHaConfig)(r=rank, alpha=rank, target_modules=["0"])
    base = (
        torch.nn.Sequential(torch.nn.Linear(dim_in, dim_out)).to(device, torch.bfloat16).requires_grad_(False)
    )
    layer = inject_adapter_in_model(config, base)[0]
    trace_friendly_lycoris(base)
    for name, p in layer.named_parameters():
        if "lokr" in name or "hada" in name:
            p.data = p.data.float()
            with torch.no_grad():
                p.normal_(std=0.05)
    assert getattr(type(layer), TRACED_ATTR, False)
    return layer


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


@pytest.mark.parametrize("kind", ["lokr", "loha"])
def test_a_factored_lycoris_linear_keeps_its_bf16_input_not_an_fp32_copy(kind: str):
    """The factored deltas cast the bf16 input to the fp32 factors' dtype as plain ops: autograd
    kept that fp32 copy (2x the input's bytes) and LoKr's fp32 intermediate (as large again) per
    adapted layer and step: 96 MiB for a 3072 x 3072 LoKr linear at [1, 4096, 3072], where the
    frozen base keeps none (RELIABILITY 2080)."""
    layer = _bf16_layer(kind, 64, 64)
    factors = [p for n, p in layer.named_parameters() if p.requires_grad]
    x = torch.randn(2, 256, 64, dtype=torch.bfloat16, requires_grad=True)  # [B, L, in]
    kept: dict[int, int] = {}
    free = {_storage(p) for p in layer.parameters()} | {_storage(x)}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if _storage(t) not in free:
            kept[_storage(t)] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = layer(x)
    limit = x.untyped_storage().nbytes() // 4  # besides the input: the factors' products and
    assert sum(kept.values()) <= limit, sorted(kept.values())  # LoHa's [rows, r1*r2] projection
    grads = torch.autograd.grad(out.float().square().sum(), [x, *factors])
    assert out.dtype == grads[0].dtype == torch.bfloat16
    layer.__class__ = type(layer).__mro__[2]  # peft's own forward: the full weight, the same maths
    want_out = layer(x)
    want = torch.autograd.grad(want_out.float().square().sum(), [x, *factors])
    torch.testing.assert_close(out, want_out)  # bf16 rounding of the same fp32 sums
    torch.testing.assert_close(grads[0], want[0])
    for got, exp in zip(grads[1:], want[1:], strict=True):
        torch.testing.assert_close(got, exp, rtol=1e-4, atol=1e-5)


def _compiled_saves(
    layer: torch.nn.Module, x: torch.Tensor, graphs: list[torch.fx.GraphModule] | None = None
) -> list[torch.Tensor]:
    """The tensors the compiled forward of `layer` hands its backward (AOT Autograd with the min-cut
    partition Inductor uses; nothing runs on meta tensors), graph inputs left out; the forward and
    backward graphs appended to `graphs` when given."""
    from functorch.compile import make_boxed_compiler
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    saved: list[torch.Tensor] = []

    def forward_graph(gm: torch.fx.GraphModule, _: object) -> torch.fx.GraphModule:
        outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        saved.extend(o.meta["val"] for o in outputs[1:] if o is not None and o.op != "placeholder")
        return _kept(gm)

    def _kept(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
        if graphs is not None:
            graphs.append(gm)
        return gm

    def backend(gm: torch.fx.GraphModule, example: list[torch.Tensor]) -> object:
        partition = functools.partial(min_cut_rematerialization_partition, compiler="inductor")
        return aot_module_simplified(
            gm,
            example,
            fw_compiler=make_boxed_compiler(forward_graph),
            bw_compiler=make_boxed_compiler(lambda g, _: _kept(g)),
            partition_fn=partition,
        )

    torch._dynamo.reset()
    torch.compile(layer, backend=backend, fullgraph=True)(x).float().sum().backward()
    return saved


@pytest.mark.parametrize("kind", ["lokr", "loha"])
def test_a_compiled_factored_lycoris_linear_keeps_no_fp32_copy_of_its_input(kind: str):
    """Compiled, Inductor's partitioner kept the fp32 cast of the input (it feeds a backward matmul)
    and LoKr's intermediate (a matmul's output): the same 96 MiB per 3072 x 3072 LoKr linear at
    [1, 4096, 3072] as eager (RELIABILITY 2080). Shapes of a FLUX.1 projection on meta tensors."""
    layer = _bf16_layer(kind, 3072, 3072, device="meta")
    x = torch.randn(1, 4096, 3072, dtype=torch.bfloat16, device="meta", requires_grad=True)  # [B, L, D]
    saved = _compiled_saves(layer, x)
    fp32 = sum(t.numel() * 4 for t in saved if t.dtype == torch.float32)
    # LoHa: its [rows, 256] projection and the two Khatri-Rao factors (10 MiB) stay; was 58 MiB
    assert fp32 <= (2 if kind == "lokr" else 12) * 2**20, [(t.dtype, tuple(t.shape)) for t in saved]


def _matmul_gflop(graph: torch.fx.GraphModule) -> float:
    """The matmul FLOPs of `graph` (mm / addmm / bmm: 2 x output elements x inner dim), in GFLOP."""
    flops = 0
    for n in graph.graph.nodes:
        if n.op == "call_function" and n.target in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
            first = n.args[1] if n.target is torch.ops.aten.addmm.default else n.args[0]
            flops += 2 * n.meta["val"].numel() * first.meta["val"].shape[-1]
    return flops / 1e9


@pytest.mark.slow  # ~3.5 s (two compiles); the default test_a_compiled_factored_lycoris_linear_keeps_no_fp32_copy_of_its_input covers the path
def test_the_compiled_lokr_backward_recomputes_only_the_cast_and_the_first_small_matmul(
    monkeypatch: pytest.MonkeyPatch,
):
    """The checkpointed region of 2080 made a compiled LoKr step 6 % slower on an H100 (FLUX.1
    0.504 -> 0.535 s): its backward recomputes the fp32 cast of the input and the first of the two
    small matmuls (t = xs w2^T, which w1's gradient needs), nothing more: 1.611 GFLOP over the
    plain ops' 82.947 GFLOP backward of a 3072 x 3072 layer at [1, 4096, 3072] (the second small
    matmul, 1.208 GFLOP, and the base matmul are not recomputed; the session 40 kpfix17 audit in RELIABILITY)."""
    from lorastudio.training.adapters import lycoris_grad

    x = torch.randn(1, 4096, 3072, dtype=torch.bfloat16, device="meta", requires_grad=True)  # [B, L, D]
    checkpointed: list[torch.fx.GraphModule] = []
    _compiled_saves(_bf16_layer("lokr", 3072, 3072, device="meta"), x, checkpointed)
    monkeypatch.setattr(lycoris_grad, "checkpoint", lambda f, *args, **_: f(*args))
    plain: list[torch.fx.GraphModule] = []
    _compiled_saves(_bf16_layer("lokr", 3072, 3072, device="meta"), x, plain)
    first = 2 * 4096 * 3072 * 64 / 1e9  # t: [4096 * 48, 64] from an inner dimension of 64
    assert _matmul_gflop(checkpointed[0]) == pytest.approx(_matmul_gflop(plain[0]))  # the forwards
    assert _matmul_gflop(checkpointed[1]) == pytest.approx(_matmul_gflop(plain[1]) + first)
    casts = [n for n in checkpointed[1].graph.nodes if n.target is torch.ops.aten._to_copy.default]
    assert sum(n.meta["val"].dtype == torch.float32 and n.meta["val"].dim() == 3 for n in casts) == 2
