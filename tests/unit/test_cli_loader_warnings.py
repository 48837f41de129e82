"""The CLI's end-of-run loader warning names why a loader's save-time check failed: for a file
diffusers' own reader refused (the check's `error`, e.g. its kohya FLUX.1 reader's AssertionError)
it said "would not load this file as trained ()", naming nothing (RELIABILITY 681)."""

from __future__ import annotations

from lorastudio.cli.run_display import loader_warnings


def test_a_reader_that_failed_is_named_with_its_error() -> None:
    failed = {
        "checked": True,
        "ok": False,
        "rules": "diffusers FluxPipeline.lora_state_dict",
        "error": "AssertionError",
    }
    keys = {"checked": True, "ok": False, "unknown": ["a.lora_A.weight", "b", "c"], "dropped": []}
    lines = loader_warnings({"diffusers": failed, "comfyui": keys, "a1111_forge": {"checked": False}})
    assert lines == [
        "diffusers' load_lora_weights would not load this file as trained (its reader failed: "
        "AssertionError): see the sidecar's loaders",
        "ComfyUI would not load this file as trained (unknown 3 key(s): a.lora_A.weight, b, ...): "
        "see the sidecar's loaders",
    ]
    assert loader_warnings({"diffusers": {"checked": True, "ok": True}}) == []


def test_a_layout_the_loader_does_not_read_is_named_with_the_checks_reason() -> None:
    """An SDXL LoRA written in the diffusers layout: the A1111 / Forge check is not ok with a
    `reason` (lora/portability.py), which the warning printed as "()" (session 29 logaudit)."""
    a1111 = {
        "checked": True,
        "ok": False,
        "rules": "kohya lora_unet_<SGM name> keys + .alpha",
        "reason": "A1111/Forge read kohya names: lora_format=kohya",
    }
    assert loader_warnings({"a1111_forge": a1111}) == [
        "A1111 / Forge would not load this file as trained (A1111/Forge read kohya names: "
        "lora_format=kohya): see the sidecar's loaders"
    ]
    bare = {"checked": True, "ok": False, "rules": "r"}  # a check with nothing to name: no "()"
    assert loader_warnings({"comfyui": bare}) == [
        "ComfyUI would not load this file as trained: see the sidecar's loaders"
    ]
