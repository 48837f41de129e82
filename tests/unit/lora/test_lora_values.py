"""LoRA files whose header is well-formed but whose tensors cannot be an adapter: NaN / infinite
values, an integer dtype, an alpha of several numbers, down and up matrices of different ranks, a
down matrix without its up one, a diffusers adapter config with a NaN alpha. Every place that
reads a LoRA file refuses each with a ModelSourceError naming the file and the tensor (generation,
convert, merge, resize; the CLI with exit 2 and no traceback), and writes nothing. A merge weight
or a generation scale that is not finite, or a merge that overflows float32, is refused too."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from tests.cli_runner import run_cli as _cli

from lorastudio import families
from lorastudio.errors import ConfigError, ModelSourceError
from lorastudio.generate import apply_loras, load_pipeline
from lorastudio.lora.convert import PeftLora
from lorastudio.lora.file_read import check_lora_values, read_lora_file
from lorastudio.lora.files import convert_file, file_for_layout, write_lora_file
from lorastudio.lora.header import check_lora_file
from lorastudio.lora.ops import merge_files, resize_file


def _good(shapes: dict, family: str, layout: str, path: Path) -> Path:
    """A real-shaped rank-4 LoRA of `family` (every default target layer) in `layout`."""
    targets = families.get(family).spec.lora_targets
    names = [n for n, s in shapes.items() if len(s) == 2 and any(n.endswith("." + t) for t in targets)]
    g = torch.Generator().manual_seed(0)
    sd = {}
    for n in names:
        out, inp = shapes[n]
        sd[f"{n}.lora_A.weight"] = 0.1 * torch.randn(4, inp, generator=g)  # [r, in]
        sd[f"{n}.lora_B.weight"] = 0.1 * torch.randn(out, 4, generator=g)  # [out, r]
    tensors, header = file_for_layout(PeftLora(sd, 4, 8.0), family, layout, {"lorastudio.family": family})  # type: ignore[arg-type]
    return write_lora_file(path, tensors, header)


def _down(tensors: dict) -> str:
    return sorted(k for k in tensors if k.endswith((".lora_A.weight", ".lora_down.weight")))[0]


def _up(tensors: dict) -> str:
    return sorted(k for k in tensors if k.endswith((".lora_B.weight", ".lora_up.weight")))[0]


def _poisoned(good: Path, case: str, out: Path) -> tuple[Path, str]:
    """(a copy of `good` with one defect, what the refusal says)."""
    tensors = load_file(str(good))
    from safetensors import safe_open

    with safe_open(str(good), "pt") as f:
        metadata = dict(f.metadata() or {})
    up, down = _up(tensors), _down(tensors)
    if case == "nan":
        tensors[up] = tensors[up].clone()
        tensors[up][0, 0] = float("nan")
        said = f"the tensor '{up}' holds 1 NaN or infinite value(s)"
    elif case == "inf":
        tensors[down] = tensors[down].clone()
        tensors[down][1, 1] = float("-inf")
        said = f"the tensor '{down}' holds 1 NaN or infinite value(s)"
    elif case == "integer":
        tensors[up] = tensors[up].to(torch.int32)
        said = f"the tensor '{up}' is I32, not a floating-point dtype"
    elif case == "rank_mismatch":
        tensors[up] = torch.zeros(tensors[up].shape[0], tensors[up].shape[1] + 1)
        said = "do not share a rank"
    elif case == "unpaired":
        layer = down.rsplit(".", 2)[0]
        tensors[layer + ".x/../../etc.lora_down.weight"] = torch.zeros(4, 4)
        said = f"the layer '{layer}.x/../../etc' has a lora_down.weight but no lora_up.weight"
    elif case == "alpha_shape":
        alpha = sorted(k for k in tensors if k.endswith(".alpha"))[0]
        tensors[alpha] = torch.ones(3)
        said = f"the alpha '{alpha}' has shape [3], not one number"
    elif case == "alpha_nan":
        alpha = sorted(k for k in tensors if k.endswith(".alpha"))[0]
        tensors[alpha] = torch.tensor(float("nan"))
        said = f"the tensor '{alpha}' holds 1 NaN or infinite value(s)"
    elif case == "alpha_zero":  # applied as alpha / rank = 0 by every loader: the LoRA changes nothing
        alpha = sorted(k for k in tensors if k.endswith(".alpha"))[0]
        tensors[alpha] = torch.tensor(0.0)
        said = f"the alpha '{alpha}' is 0"
    elif case == "orphan_alpha":  # an alpha whose layer's matrices are not in the file
        alpha = sorted(k for k in tensors if k.endswith(".alpha"))[0]
        tensors[alpha.replace("_0_", "_7_", 1)] = torch.tensor(4.0)
        said = f"the tensor '{alpha.replace('_0_', '_7_', 1)}' has no weights of its layer"
    elif case == "adapter_alpha_zero":
        config = json.loads(metadata["lora_adapter_metadata"])
        config["transformer.lora_alpha"] = 0
        metadata["lora_adapter_metadata"] = json.dumps(config)
        said = "lora_adapter_metadata gives an impossible lora_alpha"
    elif case == "adapter_alpha_nan":
        config = json.loads(metadata["lora_adapter_metadata"])
        config["transformer.lora_alpha"] = float("nan")
        metadata["lora_adapter_metadata"] = json.dumps(config)
        said = "lora_adapter_metadata gives an impossible lora_alpha"
    else:
        raise AssertionError(case)
    save_file(tensors, str(out), metadata=metadata)
    return out, said


DIFFUSERS_CASES = [
    "nan",
    "inf",
    "integer",
    "rank_mismatch",
    "unpaired",
    "adapter_alpha_nan",
    "adapter_alpha_zero",
]
KOHYA_CASES = ["nan", "integer", "unpaired", "alpha_shape", "alpha_nan", "alpha_zero", "orphan_alpha"]
CASES = [("diffusers", c) for c in DIFFUSERS_CASES] + [("kohya", c) for c in KOHYA_CASES]


@pytest.mark.parametrize(("layout", "case"), CASES)
def test_a_poisoned_lora_is_refused_by_every_reader(
    layer_shapes, tmp_path, capsys, monkeypatch, layout, case
):
    good = _good(layer_shapes("flux"), "flux", layout, tmp_path / "good.safetensors")
    bad, said = _poisoned(good, case, tmp_path / "bad.safetensors")
    header_level = case not in (
        "nan",
        "inf",
        "alpha_nan",
        "alpha_zero",
    )  # the rest is refused from the header alone
    if header_level:
        with pytest.raises(ModelSourceError, match="is not a usable") as info:
            check_lora_file(bad, "flux")  # what the server checks before a generation worker starts
        assert said in str(info.value) and str(bad) in str(info.value)
    else:
        check_lora_file(bad, "flux")
    for reader in (read_lora_file, check_lora_values):  # convert / merge / resize's, generation's
        with pytest.raises(ModelSourceError) as info:
            reader(bad)
        assert said in str(info.value) and str(bad) in str(info.value)
    out = tmp_path / "out.safetensors"
    with pytest.raises(ModelSourceError, match="is not a usable"):
        convert_file(bad, out, to="kohya" if layout == "diffusers" else "diffusers")
    with pytest.raises(ModelSourceError, match="is not a usable"):
        merge_files([(good, 0.5), (bad, 0.5)], out)
    with pytest.raises(ModelSourceError, match="is not a usable"):
        resize_file(bad, out, 2)
    assert not out.exists()
    to = "kohya" if layout == "diffusers" else "diffusers"
    code, printed = _cli(capsys, monkeypatch, "lora", "convert", str(bad), str(out), "--to", to)
    assert code == 2 and said in printed and "Traceback" not in printed, printed
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == [
        "bad.safetensors",
        "good.safetensors",
    ]


@pytest.mark.parametrize("case", ["nan", "integer", "rank_mismatch", "unpaired"])
def test_generation_refuses_a_poisoned_lora_and_keeps_no_adapter(
    layer_shapes, tiny_model: Callable[[str], Path], tmp_path, case
):
    """apply_loras (the generation worker and `lorastudio generate`) refuses the file before
    diffusers' loader sees it: before, a NaN rendered a black image and the others failed deep
    in load_state_dict with torch's own message."""
    good = _good(layer_shapes("flux"), "flux", "diffusers", tmp_path / "good.safetensors")
    bad, said = _poisoned(good, case, tmp_path / "bad.safetensors")
    pipe = load_pipeline(str(tiny_model("flux")), "flux", device="cpu", dtype=torch.float32)
    apply_loras(pipe, [(good, 1.0)])
    with pytest.raises(ModelSourceError) as info:
        apply_loras(pipe, [(bad, 1.0)])
    assert said in str(info.value) and str(bad) in str(info.value)
    assert not pipe.get_list_adapters()  # the pipeline is left with no LoRA


def test_the_cli_refuses_non_finite_scales_and_weights(
    layer_shapes, tiny_model, tmp_path, capsys, monkeypatch
):
    good = _good(layer_shapes("flux"), "flux", "diffusers", tmp_path / "good.safetensors")
    base = str(tiny_model("flux"))
    for scale, said in [
        ("nan", "the scale must be a finite number"),
        ("inf", "the scale must be a finite number"),
        ("-1e400", "the scale must be a finite number"),
        ("5", "a scale must be between -4 and 4"),
    ]:
        args = ["generate", "--base", base, "--prompt", "x", "--out", str(tmp_path / "x.png")]
        code, printed = _cli(capsys, monkeypatch, *args, "--lora", f"{good}:{scale}", "--device", "cpu")
        assert code == 2 and said in printed and "Traceback" not in printed, printed
    out = tmp_path / "m.safetensors"
    code, printed = _cli(
        capsys, monkeypatch, "lora", "merge", f"{good}:nan", f"{good}:0.5", "--out", str(out)
    )
    assert code == 2 and "LORAS" in printed and "the weight must be a finite number" in printed, printed
    with pytest.raises(ConfigError, match="a merge weight must be a finite number"):
        merge_files([(good, float("inf")), (good, 0.5)], out)
    with pytest.raises(ConfigError, match="the weights overflow float32 in layer"):
        merge_files([(good, 1e300), (good, 1.0)], out)
    assert not out.exists() and not (tmp_path / "x.png").exists()


def _kohya_file(path: Path, dtype: torch.dtype, alpha: float, up: float = 1.0) -> Path:
    """A kohya-named FLUX.1 LoRA of one layer (rank 2) whose matrices are in `dtype`."""
    layer = "lora_unet_single_blocks_0_linear2"
    tensors = {
        f"{layer}.lora_down.weight": torch.full((2, 12), 0.5).to(dtype),  # [r, in]
        f"{layer}.lora_up.weight": torch.full((4, 2), up).to(dtype),  # [out, r]
        f"{layer}.alpha": torch.tensor(alpha),
    }
    save_file(tensors, str(path), metadata={"lorastudio.family": "flux"})
    return path


def test_an_fp8_lora_converts_merges_and_resizes(tmp_path: Path) -> None:
    """safetensors' F8_E4M3 / F8_E5M2 pass the header check (fp8 LoRAs are written by some
    trainers), but torch has no arithmetic on them: a conversion folding alpha / rank, a merge or
    a resize died with NotImplementedError. They are read as float32."""
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        src = _kohya_file(tmp_path / f"{dtype}.safetensors", dtype, alpha=1.0)
        out = tmp_path / f"{dtype}-diffusers.safetensors"
        convert_file(src, out, to="diffusers")
        b = load_file(str(out))["transformer.single_transformer_blocks.0.proj_out.lora_B.weight"]
        assert b.dtype == torch.float32 and torch.equal(b, torch.full((4, 2), 0.5))  # 1.0 x alpha / rank
        merge_files([(src, 1.0), (src, 1.0)], tmp_path / f"{dtype}-merged.safetensors")
        resize_file(src, tmp_path / f"{dtype}-r1.safetensors", 1)


def test_a_conversion_that_would_overflow_the_dtype_writes_nothing(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """A bf16 lora_up times a huge alpha / rank (folded into lora_B by the conversion) is infinite
    in bf16: the file was written with infinities, which every reader then refused."""
    # alpha / rank 1e4 (the largest fix 951 reads) over a lora_up of 1e35: past bf16's 3.4e38
    src = _kohya_file(tmp_path / "big.safetensors", torch.bfloat16, alpha=2e4, up=1e35)
    out = tmp_path / "out.safetensors"
    # refused where alpha / rank is folded in (RELIABILITY 912), before the write's own check
    said = r"alpha / rank \(10000\) scales its weights past what bfloat16 holds"
    with pytest.raises(ModelSourceError, match=said):
        convert_file(src, out, to="diffusers")
    code, printed = _cli(capsys, monkeypatch, "lora", "convert", str(src), str(out), "--to", "diffusers")
    assert code == 2 and re.search(said, printed) and "Traceback" not in printed, printed
    assert "big.safetensors: layer " in printed  # the file named
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.safetensors"]


def test_generation_applies_an_fp8_kohya_lora_as_its_float32_values(
    layer_shapes, tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    """diffusers' FLUX.1 kohya converter multiplies each down / up by its share of alpha: on fp8
    tensors that is a NotImplementedError, so an fp8 kohya file was refused ("mul_cpu_reduced_float"
    not implemented) though its conversion works. It is loaded as its float32 values."""
    good = _good(layer_shapes("flux"), "flux", "kohya", tmp_path / "good.safetensors")
    with_meta = {"lorastudio.family": "flux"}
    # diffusers' reader of the fused qkv / linear1 layers assumes FLUX.1's real sizes: left out here
    kept = {k: v for k, v in load_file(str(good)).items() if "qkv" not in k and "linear1" not in k}
    fp8 = {k: v if k.endswith(".alpha") else v.to(torch.float8_e4m3fn) for k, v in kept.items()}
    save_file(fp8, str(tmp_path / "fp8.safetensors"), metadata=with_meta)
    save_file({k: v.float() for k, v in fp8.items()}, str(tmp_path / "wide.safetensors"), metadata=with_meta)
    pipe = load_pipeline(str(tiny_model("flux")), "flux", device="cpu", dtype=torch.float32)

    def applied(name: str) -> dict[str, torch.Tensor]:
        apply_loras(pipe, [(tmp_path / name, 1.0)])
        return {n: p.detach().clone() for n, p in pipe.transformer.named_parameters() if "lora_" in n}

    fp8_weights, wide_weights = applied("fp8.safetensors"), applied("wide.safetensors")
    assert fp8_weights and fp8_weights.keys() == wide_weights.keys()
    assert all(torch.equal(fp8_weights[k], wide_weights[k]) for k in fp8_weights)
