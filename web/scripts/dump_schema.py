"""Print the server's OpenAPI schema as JSON, for openapi-typescript (run with the venv's python).

Besides `create_app().openapi()` it adds, as components, the pydantic models the UI reads that
no route declares in the schema: TrainConfig (the body inside start/preflight `config`) and the
events of the SSE stream: the engine's (except the load/preparing ones, which JobOut.phase
declares) and the job service's `status`. Everything stays generated from the Python source.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic import TypeAdapter

from lorastudio.api.app import create_app
from lorastudio.api.schemas_runs import StatusEvent
from lorastudio.config import TrainConfig
from lorastudio.training import events

EXTRA_MODELS: dict[str, Any] = {
    "TrainConfig": TrainConfig,
    "ProgressEvent": events.Progress,
    "SampleReadyEvent": events.SampleReady,
    "ValidationEvent": events.Validated,
    "PlanChosenEvent": events.PlanChosen,
    "CompleteEvent": events.Complete,
    "ErrorEvent": events.Error,
    "StatusEvent": StatusEvent,
}


def schema() -> dict[str, Any]:
    """The OpenAPI document with EXTRA_MODELS merged into components.schemas."""
    doc = create_app().openapi()
    components = doc.setdefault("components", {}).setdefault("schemas", {})
    ref = "#/components/schemas/{model}"
    for name, model in EXTRA_MODELS.items():
        # TrainConfig is a request body (fields with defaults optional); events are responses.
        mode = "validation" if model is TrainConfig else "serialization"
        js = TypeAdapter(model).json_schema(ref_template=ref, mode=mode)
        components.update(js.pop("$defs", {}))
        js["title"] = name
        components.setdefault(name, js)
    return doc


if __name__ == "__main__":
    json.dump(schema(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
