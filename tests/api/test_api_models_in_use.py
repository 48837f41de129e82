"""DELETE /api/models/{id} while a generation request uses the model: 409, the folder kept; once
the request ended the model can be deleted. (The delete used to check training jobs, caption
jobs and fetches only: the folder went from under a generation loading it, which failed with
"neither a valid local path nor a valid repo id".)"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from api_helpers import live_server
from tests.polling import until

from lorastudio.api.app import create_app
from lorastudio.settings import Settings


@pytest.mark.slow  # ~13 s: a worker spawned and its 6 s ready allowance waited out
def test_a_model_a_generation_uses_is_not_deleted_under_it(
    studio_home: Path, tiny_model: Callable[[str], Path]
) -> None:
    from generation_hang_workers import silent_generation_worker

    # the worker never says ready: the request holds the model until its ready allowance ends
    # (120 s x 0.05 = 6 s), then is a 504
    settings = Settings(home=studio_home, worker_timeout_scale=0.05).ensure_dirs()
    folder = Path(shutil.copytree(tiny_model("flux"), settings.models_dir / "tiny-flux"))
    body = {"family": "flux", "base_model": "tiny-flux", "prompt": "x", "steps": 1, "width": 32,
            "height": 32}  # fmt: skip
    with live_server(create_app(settings, generation_target=silent_generation_worker)) as server:
        client = server.client
        answers: dict[str, int] = {}
        request = threading.Thread(
            target=lambda: answers.update(status=client.post("/api/generate", json=body).status_code)
        )
        request.start()
        until(lambda: server.app.state.generation.models_in_use(), 60, "the generation took its base model")
        refused = client.delete("/api/models/tiny-flux")
        assert refused.status_code == 409 and refused.json()["error"] == "JobActive", refused.text
        assert (folder / "model_index.json").is_file()
        request.join(120)
        assert answers["status"] == 504 and server.app.state.generation.models_in_use() == set()
        assert client.delete("/api/models/tiny-flux").status_code == 200 and not folder.exists()
