"""fp8 attention on cuDNN (Hopper): the forward and backward of scaled-dot-product attention with
fp8 (e4m3) Q, K, V, dO and probabilities, through the cuDNN frontend's Python graph API
(`nvidia-cudnn-frontend`, which torch does not expose). A bench prototype: bench/probe_fp8_attention.py
measures it against torch's bf16 cuDNN SDPA before anything goes into the engine.

Layout: q, k, v are [B, H, S, D] views (any strides, e.g. diffusers' [B, S, H, D] memory); no mask,
no dropout (the transformer families' joint attention). Scaling is per tensor, computed from the
tensors themselves on the device (no host read):
- Q, K, V, dO: scale = E4M3_MAX / amax (current scaling);
- the softmax probabilities P in [0, 1]: scale_s = E4M3_MAX (a fixed, exact bound);
- O: |O| <= max |V| (each row of O is a convex combination of V's rows), so scale_o is V's scale;
- dP = dO V^T: |dP_ij| <= |dO_i|_2 |V_j|_2, so scale_dP = E4M3_MAX / (max row norm of dO x
  max row norm of V) never overflows (`dp_headroom` > 1 trades that guarantee for resolution).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

E4M3_MAX = 448.0
E5M2_MAX = 57344.0


def _cudnn() -> Any:
    import cudnn  # nvidia-cudnn-frontend; imported late: CPU machines do not have it

    return cudnn


def quantize(x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn) -> tuple[torch.Tensor, torch.Tensor]:
    """x (any float) -> (x in fp8 `dtype`, its descale [1,1,1,1] fp32: x ~= x8 * descale)."""
    fmax = E4M3_MAX if dtype == torch.float8_e4m3fn else E5M2_MAX
    amax = x.abs().amax().float().clamp(min=1e-12)  # [] on the device, no host read
    scale = fmax / amax
    x8 = (x.float() * scale).to(dtype)
    return x8, (1.0 / scale).reshape(1, 1, 1, 1)


def _row_norm_max(x: torch.Tensor) -> torch.Tensor:
    """max over (b, h, s) of |x[b, h, s, :]|_2 as fp32 []."""
    return x.float().square().sum(-1).amax().sqrt()


@dataclass(frozen=True)
class Fp8Options:
    """o_bf16: the forward writes O in bf16 (else fp8, dequantized after); dqkv_bf16: the backward
    writes dQ, dK, dV in bf16 (else fp8 e4m3 with the scales of `grad_scales`); do_e5m2: dO in
    e5m2 (wider range) instead of e4m3; bwd_o_bf16: the backward reads O in bf16. The defaults
    are what cuDNN 9.19 builds on Hopper: its frontend refuses bf16 outputs (O, or dQ/dK/dV)
    below Blackwell (RESULTS.md note 22)."""

    o_bf16: bool = False
    dqkv_bf16: bool = False
    do_e5m2: bool = False
    bwd_o_bf16: bool = False
    dp_headroom: float = 1.0


_FP8 = {torch.float8_e4m3fn: "FP8_E4M3", torch.float8_e5m2: "FP8_E5M2"}


def _dt(cudnn: Any, dtype: torch.dtype) -> Any:
    if dtype in _FP8:
        return getattr(cudnn.data_type, _FP8[dtype])
    return {torch.bfloat16: cudnn.data_type.BFLOAT16, torch.float32: cudnn.data_type.FLOAT}[dtype]


class _Graph:
    """One built cuDNN graph: `tensors` maps a name to its graph tensor; run(**torch_tensors)."""

    def __init__(self, graph: Any, tensors: dict[str, Any], handle: Any) -> None:
        self.graph, self.tensors, self.handle = graph, tensors, handle
        self.workspace = torch.empty(graph.get_workspace_size(), device="cuda", dtype=torch.uint8)

    def run(self, **values: torch.Tensor) -> None:
        cudnn = _cudnn()
        cudnn.set_stream(handle=self.handle, stream=torch.cuda.current_stream().cuda_stream)
        pack = {self.tensors[name]: value for name, value in values.items()}
        self.graph.execute(pack, self.workspace, handle=self.handle)


_HANDLE: list[Any] = []
_CACHE: dict[tuple, _Graph] = {}


def _handle() -> Any:
    if not _HANDLE:
        _HANDLE.append(_cudnn().create_handle())
    return _HANDLE[0]


def _build(key: tuple, make: Any) -> _Graph:
    if key not in _CACHE:
        cudnn = _cudnn()
        graph = cudnn.pygraph(
            io_data_type=cudnn.data_type.FP8_E4M3,
            intermediate_data_type=cudnn.data_type.FLOAT,
            compute_data_type=cudnn.data_type.FLOAT,
            handle=_handle(),
        )
        tensors = make(cudnn, graph)
        graph.validate()
        graph.build_operation_graph()
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        graph.check_support()
        graph.build_plans()
        _CACHE[key] = _Graph(graph, tensors, _handle())
    return _CACHE[key]


def _like(cudnn: Any, graph: Any, t: torch.Tensor, dtype: torch.dtype, name: str) -> Any:
    return graph.tensor(name=name, dim=list(t.shape), stride=list(t.stride()), data_type=_dt(cudnn, dtype))


def _scalar(cudnn: Any, graph: Any, name: str) -> Any:
    return graph.tensor(name=name, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.FLOAT)


def _set_out(t: Any, ref: torch.Tensor, cudnn: Any, dtype: torch.dtype) -> None:
    t.set_output(True).set_dim(list(ref.shape)).set_stride(list(ref.stride())).set_data_type(
        _dt(cudnn, dtype)
    )


def _out_like(q: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An empty tensor of q's shape and strides in `dtype`."""
    return torch.empty_strided(q.shape, q.stride(), device=q.device, dtype=dtype)


def forward(
    q8: torch.Tensor,
    k8: torch.Tensor,
    v8: torch.Tensor,
    dq: torch.Tensor,
    dk: torch.Tensor,
    dv: torch.Tensor,
    attn_scale: float,
    opts: Fp8Options,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """fp8 q8, k8, v8 [B,H,S,D] with descales dq, dk, dv [1,1,1,1] -> (O [B,H,S,D] in bf16 or
    e4m3, O's descale [1,1,1,1], stats [B,H,S,1] fp32 (the softmax logsumexp), amax_o)."""
    o_dtype = torch.bfloat16 if opts.o_bf16 else torch.float8_e4m3fn
    key = ("fwd", tuple(q8.shape), tuple(q8.stride()), o_dtype, attn_scale)

    def make(cudnn: Any, g: Any) -> dict[str, Any]:
        t = {n: _like(cudnn, g, x, x.dtype, n) for n, x in (("q", q8), ("k", k8), ("v", v8))}
        for n in ("dq", "dk", "dv", "ds", "ss", "so"):
            t[n] = _scalar(cudnn, g, n)
        o, stats, amax_s, amax_o = g.sdpa_fp8(
            q=t["q"], k=t["k"], v=t["v"], descale_q=t["dq"], descale_k=t["dk"], descale_v=t["dv"],
            descale_s=t["ds"], scale_s=t["ss"], scale_o=t["so"], generate_stats=True,
            attn_scale=attn_scale,
        )  # fmt: skip
        _set_out(o, q8, cudnn, o_dtype)
        b, h, s, _ = q8.shape
        stats.set_output(True).set_dim([b, h, s, 1]).set_stride([h * s, s, 1, 1]).set_data_type(
            cudnn.data_type.FLOAT
        )
        for a in (amax_s, amax_o):
            a.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(
                cudnn.data_type.FLOAT
            )
        return {**t, "o": o, "stats": stats, "amax_s": amax_s, "amax_o": amax_o}

    g = _build(key, make)
    b, h, s, _ = q8.shape
    o = _out_like(q8, o_dtype)
    stats = torch.empty(b, h, s, 1, device=q8.device, dtype=torch.float32)
    amax_s = torch.empty(1, 1, 1, 1, device=q8.device, dtype=torch.float32)
    amax_o = torch.empty(1, 1, 1, 1, device=q8.device, dtype=torch.float32)
    ss = torch.full((1, 1, 1, 1), E4M3_MAX, device=q8.device)
    one = torch.ones(1, 1, 1, 1, device=q8.device)
    so = one if opts.o_bf16 else 1.0 / dv  # O's bound is V's amax: O's scale is V's
    g.run(q=q8, k=k8, v=v8, dq=dq, dk=dk, dv=dv, ds=1.0 / ss, ss=ss, so=so, o=o, stats=stats,
          amax_s=amax_s, amax_o=amax_o)  # fmt: skip
    return o, (one if opts.o_bf16 else dv), stats, amax_o


def backward(
    q8: torch.Tensor,
    k8: torch.Tensor,
    v8: torch.Tensor,
    o: torch.Tensor,
    grad: torch.Tensor,
    stats: torch.Tensor,
    descales: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    attn_scale: float,
    opts: Fp8Options,
    grad_scales: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of forward(): grad (dO, bf16 [B,H,S,D]) -> (dQ, dK, dV, amax_dP) with dQ..dV
    in bf16 (opts.dqkv_bf16) or e4m3 scaled by `grad_scales`. `o` is forward's O (bf16 or
    e4m3: cast to what opts.bwd_o_bf16 asks), descales = (q, k, v, o)."""
    dq_, dk_, dv_, do_ = descales
    do_dtype = torch.float8_e5m2 if opts.do_e5m2 else torch.float8_e4m3fn
    grad8, d_grad = quantize(grad, do_dtype)
    if opts.bwd_o_bf16:
        o_in = o if o.dtype == torch.bfloat16 else (o.float() * do_).to(torch.bfloat16)
        d_o = torch.ones(1, 1, 1, 1, device=o.device)
    elif o.dtype == torch.bfloat16:
        o_in, d_o = quantize(o)
    else:
        o_in, d_o = o, do_
    out_dtype = torch.bfloat16 if opts.dqkv_bf16 else torch.float8_e4m3fn
    key = ("bwd", tuple(q8.shape), tuple(q8.stride()), tuple(grad8.stride()), o_in.dtype, do_dtype,
           out_dtype, attn_scale)  # fmt: skip

    def make(cudnn: Any, g: Any) -> dict[str, Any]:
        t = {
            n: _like(cudnn, g, x, x.dtype, n)
            for n, x in (("q", q8), ("k", k8), ("v", v8), ("o", o_in), ("dO", grad8))
        }
        t["stats"] = g.tensor(name="stats", dim=list(stats.shape), stride=list(stats.stride()),
                              data_type=cudnn.data_type.FLOAT)  # fmt: skip
        names = ("dq", "dk", "dv", "d_o", "ddo", "ds", "ddp", "ss", "sdq", "sdk", "sdv", "sdp")
        for n in names:
            t[n] = _scalar(cudnn, g, n)
        dQ, dK, dV, a_dq, a_dk, a_dv, a_dp = g.sdpa_fp8_backward(
            q=t["q"], k=t["k"], v=t["v"], o=t["o"], dO=t["dO"], stats=t["stats"],
            descale_q=t["dq"], descale_k=t["dk"], descale_v=t["dv"], descale_o=t["d_o"],
            descale_dO=t["ddo"], descale_s=t["ds"], descale_dP=t["ddp"], scale_s=t["ss"],
            scale_dQ=t["sdq"], scale_dK=t["sdk"], scale_dV=t["sdv"], scale_dP=t["sdp"],
            attn_scale=attn_scale,
        )  # fmt: skip
        for out, ref in ((dQ, q8), (dK, k8), (dV, v8)):
            _set_out(out, ref, cudnn, out_dtype)
        for a in (a_dq, a_dk, a_dv, a_dp):
            a.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(
                cudnn.data_type.FLOAT
            )
        return {**t, "dQ": dQ, "dK": dK, "dV": dV, "a_dq": a_dq, "a_dk": a_dk, "a_dv": a_dv, "a_dp": a_dp}

    g = _build(key, make)
    dev = q8.device
    one = torch.ones(1, 1, 1, 1, device=dev)
    ss = torch.full((1, 1, 1, 1), E4M3_MAX, device=dev)
    # |dP| <= max|dO row| * max|V row| (Cauchy-Schwarz), in real units
    bound = _row_norm_max(grad8.float() * d_grad) * _row_norm_max(v8.float() * dv_)
    sdp = (E4M3_MAX * opts.dp_headroom / bound.clamp(min=1e-12)).reshape(1, 1, 1, 1)
    if grad_scales is None:
        sdq = sdk = sdv = one
    else:
        sdq, sdk, sdv = grad_scales
    outs = [_out_like(x, out_dtype) for x in (q8, k8, v8)]
    amax = [torch.empty(1, 1, 1, 1, device=dev) for _ in range(4)]
    g.run(q=q8, k=k8, v=v8, o=o_in, dO=grad8, stats=stats, dq=dq_, dk=dk_, dv=dv_, d_o=d_o,
          ddo=d_grad, ds=1.0 / ss, ddp=1.0 / sdp, ss=ss, sdq=sdq, sdk=sdk, sdv=sdv, sdp=sdp,
          dQ=outs[0], dK=outs[1], dV=outs[2], a_dq=amax[0], a_dk=amax[1], a_dv=amax[2],
          a_dp=amax[3])  # fmt: skip
    return outs[0], outs[1], outs[2], amax[3]
