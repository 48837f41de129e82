"""The data package is usable without torch (the job service and the API import it)."""

from __future__ import annotations

import subprocess
import sys


def test_importing_data_does_not_import_torch():
    code = (
        "import sys, lorastudio.data, lorastudio.data.scan, lorastudio.data.crop, lorastudio.data.sampler\n"
        "bad = sorted(m for m in ('torch', 'diffusers', 'transformers') if m in sys.modules)\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
