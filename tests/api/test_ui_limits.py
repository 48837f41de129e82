"""The web UI's shared bounds (web/src/api/limits.gen.ts, generated from the OpenAPI schema) are
the API's: the LoRA scale slider offers exactly the range LoraRef accepts (issue 30)."""

from __future__ import annotations

import re
from pathlib import Path

from lorastudio.api.app import create_app
from lorastudio.settings import Settings

LIMITS = Path(__file__).resolve().parents[2] / "web" / "src" / "api" / "limits.gen.ts"


def test_the_ui_lora_scale_range_is_the_apis(settings: Settings) -> None:
    scale = create_app(settings).openapi()["components"]["schemas"]["LoraRef"]["properties"]["scale"]
    match = re.search(r"LORA_SCALE = \{ min: (-?[\d.]+), max: (-?[\d.]+) \}", LIMITS.read_text())
    assert match, "run `npm --prefix web run gen:api` (web/scripts/routes.mjs writes limits.gen.ts)"
    assert (float(match[1]), float(match[2])) == (scale["minimum"], scale["maximum"])
