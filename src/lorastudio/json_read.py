"""JSON parsed from text anyone may have written (records and sidecars in the studio home, a
dataset's metadata.jsonl, a model's config files, a child's report): one parse whose every
failure on bad input is a ValueError. No torch.

`json.loads` raises RecursionError, not a ValueError, for arrays or objects nested deeper than
the parser goes (a line of 5,000 "[" is enough): a reader that catches ValueError (or
JSONDecodeError) for bad JSON let it through, so one such line in a metadata.jsonl answered 500
for GET /api/datasets (RELIABILITY 483). Every json.loads of the package goes through `loads`
(tests/unit/test_json_read.py keeps it so), but for the few that handle RecursionError
themselves (json_keys.loads_unique's callers, lora/header.py, basemodels/jsonfile.py,
caption_count.py, api/body_checks.py, jobs/caption_records.py).
"""

from __future__ import annotations

import json
from typing import Any

NESTED_TOO_DEEP = "arrays or objects nested deeper than the parser goes"


def loads(text: str | bytes | bytearray, **kwargs: Any) -> Any:
    """`json.loads(text, **kwargs)`; nesting deeper than the parser goes raises
    json.JSONDecodeError (a ValueError) naming it, as any other bad JSON does."""
    try:
        return json.loads(text, **kwargs)
    except RecursionError:
        raise json.JSONDecodeError(NESTED_TOO_DEEP, text if isinstance(text, str) else "", 0) from None
