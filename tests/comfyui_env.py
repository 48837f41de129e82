"""The ComfyUI checkout the external tests run ComfyUI's own loader from (not on PyPI, never
vendored): LORASTUDIO_COMFYUI=/path/to/ComfyUI, its extra dependencies in LORASTUDIO_COMFYUI_DEPS
(bench/comfyui_check.py says which), or a venv of ComfyUI's own whose Python runs its side:
LORASTUDIO_COMFYUI_PYTHON=<venv>/bin/python (session 38). NEEDS_COMFYUI is such a test module's `pytestmark`: slow, and
skipped without a checkout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

COMFYUI = Path(os.environ.get("LORASTUDIO_COMFYUI", "/nonexistent"))
DEPS = os.environ.get("LORASTUDIO_COMFYUI_DEPS")
NEEDS_COMFYUI = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (COMFYUI / "comfy" / "lora.py").is_file(), reason="no ComfyUI checkout (LORASTUDIO_COMFYUI)"
    ),
]
