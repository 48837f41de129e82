"""Does ComfyUI's own loader apply the files lorastudio DERIVES from a run as it applies a run's
own file? (session 38 comfyreal2; comfyui_check.py runs the trained files.)

    python -m bench.comfyui_derived_check --comfyui /path/to/ComfyUI [--pythonpath DIR] [FAMILY:CASE[@STRENGTH] ...]

DERIVED (each a 3-step tiny CPU run of comfyui_check.train_case, rank 4, alpha 8, then):
- "convert-kohya": `lora convert --to kohya` (lora.files.convert_file) of a diffusers-layout file;
- "convert-diffusers": `lora convert --to diffusers` of a kohya-layout file;
  expected: the run's trained change (peft's merge), never read from the converted file.
- "merge": `lora merge` (lora.ops.merge_files) of two runs (seeds 0 and 1) at 0.7 and 0.5;
  expected: 0.7 x the first run's trained change + 0.5 x the second's.
- "resize": `lora resize` to rank 2 (lora.ops.resize_file); expected: the best rank-2
  approximation of each layer's trained change, by this module's own SVD of it.
- "resume": the run stopped (with a checkpoint) after step 2 and resumed to step 3; expected:
  the resumed run's trained change.
  "resume-<case>" (comfyui_check.CASES: "resume-lokr", "resume-dora"): that adapter's run.
- "ema": a run with ema_decay 0.5: the saved (EMA) file, expected its own change read by
  lorastudio's file reader (lora.ops._load: (alpha / rank) x B @ A per layer; the EMA's adapter
  weights are in no model to merge), and "ema-raw": the raw file saved beside it
  (<name>.raw.safetensors), expected the run's trained change (the returned denoiser holds the
  raw weights); "ema-raw-<case>": that adapter's run's raw file.
Then comfyui_side.py (ComfyUI's `load_lora_for_models` + `patch_weight_to_device`) as for the
trained files: every key loaded, every patched weight the expected change within fp32 rounding
(1e-4 of the layer's largest change).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from bench.comfyui_check import NOT_IN_COMFYUI, run_side, train_case, write_given

DERIVED = ("convert-kohya", "convert-diffusers", "merge", "resize", "resume", "ema", "ema-raw")
MERGE_WEIGHTS = (0.7, 0.5)
RESIZE_RANK = 2


def best_rank(change: dict[str, torch.Tensor], rank: int) -> dict[str, torch.Tensor]:
    """{name: the best rank-`rank` approximation of the change} (truncated SVD, float64)."""
    out: dict[str, torch.Tensor] = {}
    for name, delta in change.items():
        flat = delta.flatten(1).double()  # [out, in*k]
        u, s, vh = torch.linalg.svd(flat, full_matrices=False)  # [out, q], [q], [q, in*k]
        out[name] = ((u[:, :rank] * s[:rank]) @ vh[:rank]).reshape(delta.shape).float()
    return out


def file_change(lora: Path, family: str) -> dict[str, torch.Tensor]:
    """{diffusers weight name: (alpha / rank) x B @ A} of a LoRA file, by lorastudio's reader."""
    from lorastudio.lora.convert import peft_modules
    from lorastudio.lora.ops import _load

    peft, _ = _load(lora, family)
    scale = peft.alpha / peft.rank
    return {
        f"{m}.weight": scale * (b.flatten(1).float() @ a.flatten(1).float()).reshape(b.shape[0], *a.shape[1:])
        for m, (a, b) in peft_modules(peft.tensors).items()
    }


def derived_file(family: str, case: str, work: Path) -> tuple[Path, Path, dict[str, torch.Tensor]]:
    """(derived file, tiny model folder, expected change) of `case` (DERIVED)."""
    from lorastudio.lora.files import convert_file
    from lorastudio.lora.ops import merge_files, resize_file

    if case == "convert-kohya":
        lora, model, change = train_case(family, work, "lora", "diffusers")
        out = lora.with_name("converted-kohya.safetensors")
        convert_file(lora, out, "kohya", family)
        return out, model, change
    if case == "convert-diffusers":
        lora, model, change = train_case(family, work, "lora", "kohya")
        out = lora.with_name("converted-diffusers.safetensors")
        convert_file(lora, out, "diffusers", family)
        return out, model, change
    if case == "merge":
        first, model, change1 = train_case(family, work, "lora")
        second, _, change2 = train_case(family, work / "second", "lora", extra={"seed": 1})
        out = first.with_name("merged.safetensors")
        merge_files([(first, MERGE_WEIGHTS[0]), (second, MERGE_WEIGHTS[1])], out, family)
        return (
            out,
            model,
            {k: MERGE_WEIGHTS[0] * v + MERGE_WEIGHTS[1] * change2[k] for k, v in change1.items()},
        )
    if case == "resize":
        lora, model, change = train_case(family, work, "lora")
        out = lora.with_name("resized.safetensors")
        resize_file(lora, out, RESIZE_RANK, family)
        return out, model, best_rank(change, RESIZE_RANK)
    if case == "resume" or case.startswith("resume-"):  # resume-<adapter case>: a LyCORIS / DoRA run
        return train_case(family, work, case.removeprefix("resume").removeprefix("-") or "lora", stop_at=2)
    if case in ("ema", "ema-raw") or case.startswith("ema-raw-"):
        adapter = case.removeprefix("ema-raw-") if case.startswith("ema-raw-") else "lora"
        lora, model, change = train_case(family, work, adapter, extra={"ema_decay": 0.5})
        if case.startswith("ema-raw"):
            return lora.with_name(lora.name.replace(".safetensors", ".raw.safetensors")), model, change
        return lora, model, file_change(lora, family)
    raise ValueError(f"unknown derived case {case!r}; known: {', '.join(DERIVED)}")


def check_derived(
    family: str, case: str, comfyui: Path, work: Path, pythonpath: str | None, strength: float = 1.0
) -> dict[str, Any]:
    """comfyui_side.py's result on `family`'s derived `case` at `strength` (+ "lora": the file)."""
    if family in NOT_IN_COMFYUI:
        return {"family": family, "case": case, "ok": None, "skipped": NOT_IN_COMFYUI[family]}
    lora, model, change = derived_file(family, case, work)
    if not lora.is_file():
        return {"family": family, "case": case, "ok": False, "error": f"{lora} was not written"}
    verdict = save_time_verdict(lora, model, family)
    change = {k: strength * v for k, v in change.items()}
    folder = write_given(family, work / "cases" / f"{family}-{case}", case, lora, model, change)
    if strength != 1.0:
        case_json = json.loads((folder / "case.json").read_text())
        (folder / "case.json").write_text(json.dumps(case_json | {"strength": strength}, indent=1))
    result = run_side(folder, comfyui, pythonpath, family, case)
    return result | {"strength": strength, "lora": str(lora), "verdict": verdict}


def save_time_verdict(lora: Path, model: Path, family: str) -> dict[str, Any]:
    """The sidecar's ComfyUI verdict of the file: a run's file (resumed, EMA, raw) has its sidecar
    (<name>.json); a converted, merged or resized file has none, so the save-time check
    (lora.portability.check_comfyui) on the tiny model's denoiser says what one would."""
    from safetensors import safe_open

    from lorastudio import json_read

    sidecar = lora.with_suffix(".json")
    if sidecar.is_file():
        return json_read.loads(sidecar.read_text())["loaders"]["comfyui"]

    from lorastudio import families
    from lorastudio.lora.files import read_lora_file
    from lorastudio.lora.portability import check_comfyui

    shapes: dict[str, tuple[int, ...]] = {}
    for f in sorted((model / families.get(family).spec.denoiser).glob("*.safetensors")):
        with safe_open(str(f), "pt") as weights:
            for k in weights.keys():  # noqa: SIM118 (safe_open has no __iter__)
                if k.endswith(".weight"):
                    shapes[k.removesuffix(".weight")] = tuple(weights.get_slice(k).get_shape())
    tensors, header = read_lora_file(lora)
    return check_comfyui(tensors, header, family, shapes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comfyui", type=Path, required=True)
    parser.add_argument("--pythonpath", default=None)
    parser.add_argument("--work", type=Path, default=Path("/tmp/comfyui-derived"))
    parser.add_argument("cells", nargs="*", default=[f"flux:{c}" for c in DERIVED])
    args = parser.parse_args()
    for cell in args.cells:
        family, _, rest = cell.partition(":")
        case, _, at = rest.partition("@")  # FAMILY:CASE@STRENGTH, 1.0 when not given
        work = args.work / family / rest
        result = check_derived(family, case, args.comfyui, work, args.pythonpath, float(at or 1.0))
        print(
            json.dumps(
                {
                    k: result.get(k)
                    for k in (
                        "family",
                        "case",
                        "strength",
                        "ok",
                        "worst_relative_error",
                        "not_loaded",
                        "comfy_errors",
                        "patched_weights",
                        "expected_weights",
                        "error",
                    )
                }
            )
        )
        print(json.dumps({"verdict_ok": (result.get("verdict") or {}).get("ok")}))


if __name__ == "__main__":
    main()
