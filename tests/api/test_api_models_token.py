"""POST /api/models/fetch with a hub token for that fetch only (the Models screen's prompt for a
gated repo): the fake hub of tests/unit/basemodels refuses the studio's token, takes the one
given, and the given token is never shown back or kept."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from api_helpers import live_server
from pydantic import SecretStr
from tests.polling import until

from lorastudio.api.app import create_app
from lorastudio.settings import Settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "basemodels"))
from fake_hub import FakeHub, FakeHubServer, FakeRepo, flux_repo_files  # noqa: E402

HUB_TOKEN = "hf_the_hub_wants_this_one"


@pytest.fixture
def hub(
    tiny_model: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[FakeHub]:
    from huggingface_hub import constants

    fake = FakeHub(token=HUB_TOKEN)
    fake.repos["acme/gated"] = FakeRepo(flux_repo_files(tiny_model("flux")), gated=True)
    with FakeHubServer(fake):
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        yield fake


def test_a_gated_repo_fetches_with_a_token_given_for_that_fetch(studio_home: Path, hub: FakeHub) -> None:
    settings = Settings(home=studio_home, hf_token=SecretStr("hf_the_studios_own_token"))
    with live_server(create_app(settings)) as server:
        client = server.client
        refused = client.post("/api/models/fetch", json={"repo_id": "acme/gated"})
        assert refused.status_code == 403 and refused.json()["hub_status"] == 403
        wrong = client.post("/api/models/fetch", json={"repo_id": "acme/gated", "token": "hf_wrong"})
        assert wrong.status_code == 403
        started = client.post("/api/models/fetch", json={"repo_id": "acme/gated", "token": HUB_TOKEN})
        assert started.status_code == 202, started.text
        deadline = time.monotonic() + 30
        while (fetch := client.get(f"/api/models/fetch/{started.json()['id']}").json())[
            "status"
        ] == "running":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert fetch["status"] == "completed", fetch
        catalogue = client.get("/api/models").json()
        assert any(m["id"] == fetch["model_id"] and m["trainable"] for m in catalogue)
        answers = json.dumps([client.get("/api/models/fetch").json(), catalogue, fetch, started.json()])
        assert HUB_TOKEN not in answers
        assert server.app.state.settings.hf_token.get_secret_value() == "hf_the_studios_own_token"


def test_a_token_is_never_echoed_and_one_no_header_can_carry_is_refused(
    studio_home: Path, hub: FakeHub
) -> None:
    """A 422 echoes the body's values: never a token's (a wrong type, too long, the whole body of
    a missing field). A token an HTTP header cannot carry (a newline inside, another script) is
    a 400 naming the field, not the token (the HTTP client's error quoted it, or raised: a 500);
    a pasted token's surrounding newline is dropped and it fetches."""
    leak = "hf_LEAKED_secret_0123456789"
    settings = Settings(home=studio_home, hf_token=SecretStr("hf_the_studios_own_token"))
    with live_server(create_app(settings)) as server:
        client = server.client
        answers = []
        for body in (
            {"repo_id": "acme/gated", "token": [leak]},
            {"repo_id": "acme/gated", "token": {"t": leak}},
            {"repo_id": "acme/gated", "token": leak + "x" * 400},
            {"token": leak},
            {"token": leak, "repo_id": "acme/gated", "extra": 1},
        ):
            answer = client.post("/api/models/fetch", json=body)
            assert answer.status_code == 422, answer.text
            answers.append(answer.text)
        for token in (leak + "\nX-Other: 1", leak + "ö", "hf_" + "\x00" + leak, leak + " " + leak):
            answer = client.post("/api/models/fetch", json={"repo_id": "acme/gated", "token": token})
            assert answer.status_code == 400, answer.text
            assert answer.json()["problems"][0]["field"] == "token"
            answers.append(answer.text)
        assert all(leak not in text for text in answers), answers
        started = client.post(
            "/api/models/fetch", json={"repo_id": "acme/gated", "token": f" {HUB_TOKEN}\r\n"}
        )
        assert started.status_code == 202, started.text
        fetch_id = started.json()["id"]
        ended = until(
            lambda: (f := client.get(f"/api/models/fetch/{fetch_id}").json())["status"] != "running" and f,
            60,
            "the fetch with the stripped token ended",
        )
        assert ended["status"] == "completed", ended  # type: ignore[index]
