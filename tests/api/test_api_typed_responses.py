"""The typed shapes the web UI's generated types rely on, in the OpenAPI document: the job
`phase` union and the typed configs. A real tiny FLUX.1 run's SSE `status` events, phases,
TrainConfigOut configs (also for an older stored config) and RunSummary.lora_file are checked
against these models by test_api_training.py's full job (one real worker for both)."""

from __future__ import annotations

from api_helpers import LiveServer


def test_openapi_declares_the_phase_union_and_typed_configs(server: LiveServer) -> None:
    doc = server.client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    phase = schemas["JobOut"]["properties"]["phase"]["anyOf"][0]
    assert phase["discriminator"]["propertyName"] == "type"
    assert set(phase["discriminator"]["mapping"]) == {
        "model_load_started",
        "model_load_completed",
        "preparing",
    }
    ref = "#/components/schemas/TrainConfigOut"
    for model in ("JobOut", "RunDetail", "PreflightOut"):
        config = schemas[model]["properties"]["config"]
        assert config.get("$ref") == ref or config.get("allOf") == [{"$ref": ref}], (model, config)
    assert "lora_file" in schemas["RunSummary"]["properties"]
