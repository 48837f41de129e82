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
