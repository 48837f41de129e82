"""Another trainer's key in a config sent to the API (RELIABILITY 2041): the start and the
preflight name it as the CLI does (config_resolve, the one place they share)."""

from __future__ import annotations


def test_the_api_names_another_trainers_key(client) -> None:
    config = {"family": "flux", "base_model": "tiny", "data_dir": "shapes", "output_name": "peer",
              "checkpointing_steps": 100, "checkpoint_every": 5}  # fmt: skip
    for route in ("/api/train/start", "/api/train/preflight"):
        answer = client.post(route, json={"config": config})
        assert answer.status_code == 400, answer.text
        text = answer.text
        assert "SimpleTuner's checkpointing_steps is save_every here" in text, text
        assert "`lorastudio config import` converts a whole SimpleTuner file" in text, text
        assert "did you mean save_every?" in text, text
