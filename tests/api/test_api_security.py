"""Token auth, loopback binding, error mapping, path checks on training requests, run deletion
and the static UI mount."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from live_server import LOOPBACK
from lorastudio import families
from lorastudio.api.app import check_bind, create_app
from lorastudio.api.hosts import HostPolicy
from lorastudio.api.origin import redact_tokens
from lorastudio.data.paths import safe_component
from lorastudio.errors import ConfigError
from lorastudio.jobs.records import JobStatus, now_iso
from lorastudio.settings import Settings


def test_with_a_token_every_api_route_requires_it(settings: Settings) -> None:
    secured = settings.model_copy(update={"api_token": "tok-123"})
    with TestClient(create_app(secured), base_url=LOOPBACK) as client:
        assert client.get("/api/info").status_code == 401
        assert client.get("/api/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/api/runs", headers={"Authorization": "Bearer tok-123"}).status_code == 200
        assert client.get("/api/train/status", params={"token": "tok-123"}).status_code == 200  # GET only
        assert client.post("/api/train/stop", params={"token": "tok-123"}, json={}).status_code == 401
        assert (
            client.post("/api/train/stop", json={}, headers={"Authorization": "Bearer tok-123"}).status_code
            == 404
        )
        assert client.get("/gallery/x.png").status_code == 401
        gallery = settings.home / "gallery"
        gallery.mkdir(parents=True, exist_ok=True)
        (gallery / "kept.png").write_bytes(b"\x89PNG\r\n\x1a\n")
        for query in ({}, {"token": "tok-123"}):  # the query token is for GETs only
            assert client.delete("/api/gallery/kept.png", params=query).status_code == 401
            assert client.post("/api/generate/r-1/cancel", params=query).status_code == 401
        assert (gallery / "kept.png").is_file()
        bearer = {"Authorization": "Bearer tok-123"}
        assert client.post("/api/generate/r-1/cancel", headers=bearer).status_code == 404
        assert client.delete("/api/gallery/kept.png", headers=bearer).json() == {"deleted": ["kept.png"]}


def test_binding_beyond_loopback_needs_a_token(settings: Settings) -> None:
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        check_bind(host, settings)
    for host in ("0.0.0.0", "192.168.1.10", "::"):
        with pytest.raises(ConfigError, match="API token"):
            check_bind(host, settings)
    check_bind("0.0.0.0", settings.model_copy(update={"api_token": "t"}))


@pytest.fixture
def shapes(settings: Settings, sample_dataset: Path) -> Path:
    settings.ensure_dirs()
    return Path(shutil.copytree(sample_dataset, settings.datasets_dir / "shapes"))


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"data_dir": "../shapes"}, "data_dir"),
        ({"data_dir": "/etc"}, "data_dir"),
        ({"data_dir": "escape"}, "data_dir"),
        ({"output_name": "../evil"}, "output_name"),
        ({"output_name": "/tmp/evil"}, "output_name"),
        ({"base_model": "../models/x"}, "base_model"),
    ],
)
def test_paths_outside_the_roots_are_400_and_nothing_is_written(
    settings: Settings,
    client: TestClient,
    shapes: Path,
    tmp_path: Path,
    flux_config: Callable[..., dict],
    override: dict,
    field: str,
) -> None:
    outside = tmp_path / "outside"
    shutil.copytree(shapes, outside)
    (settings.datasets_dir / "escape").symlink_to(outside)
    resp = client.post("/api/train/start", json={"config": flux_config(**override)})
    assert resp.status_code == 400, resp.text
    assert field in {p["field"] for p in resp.json()["problems"]}
    assert list(settings.outputs_dir.iterdir()) == []
    assert client.get("/api/runs").json()["runs"] == []
    assert client.get("/api/train/status").json()["job"] is None


def test_config_errors_list_every_problem_and_schema_errors_are_422(
    client: TestClient, shapes: Path, flux_config: Callable[..., dict]
) -> None:
    resp = client.post(
        "/api/train/start", json={"config": flux_config(lora_rank=0, bogus=True, steps="many")}
    )
    assert resp.status_code == 400
    assert resp.json()["error"] == "ConfigError"
    assert {"lora_rank", "bogus", "steps"} <= {p["field"] for p in resp.json()["problems"]}
    unknown = client.post("/api/train/preflight", json={"config": flux_config(family="sd15")})
    assert unknown.status_code == 400 and "family" in {p["field"] for p in unknown.json()["problems"]}
    assert client.post("/api/train/start", json=[1, 2]).status_code == 422
    assert (
        client.post("/api/train/start", json={"config": flux_config(), "queue": "maybe"}).status_code == 422
    )
    assert client.post("/api/train/start", json={"config": flux_config(), "extra": 1}).status_code == 422


def test_not_found_and_idle_answers(client: TestClient) -> None:
    assert client.get("/api/runs/nope").status_code == 404
    assert client.delete("/api/runs/nope").status_code == 404
    assert client.post("/api/train/stop", json={"save": True}).status_code == 404
    assert client.get("/gallery/nope.png").status_code == 404
    assert client.get("/gallery/..%2F..%2Fetc%2Fpasswd").status_code in (400, 404)
    assert client.get("/api/train/status").json() == {"job": None, "queue": [], "busy": False, "event_seq": 0}


def test_deleting_a_run_removes_its_record_and_outputs_but_not_a_live_one(
    settings: Settings, client: TestClient
) -> None:
    store = client.app.state.store
    for run_id, status in (("done", JobStatus.COMPLETED), ("live", JobStatus.RUNNING)):
        store.create_run(run_id, run_id, "flux", {"output_name": run_id}, now_iso())
        store.update_run(run_id, status=status)
        (settings.outputs_dir / run_id).mkdir()
        (settings.outputs_dir / run_id / f"{run_id}.safetensors").write_bytes(b"x")
    assert client.delete("/api/runs/live").status_code == 409
    resp = client.delete("/api/runs/done")
    assert resp.json() == {"deleted": "done", "files_removed": True}
    assert sorted(p.name for p in settings.outputs_dir.iterdir()) == ["live"]
    assert client.get("/api/runs/done").status_code == 404


def test_the_built_ui_is_served_when_present(settings: Settings, tmp_path: Path) -> None:
    dist = tmp_path / "web_dist"
    dist.mkdir()
    (dist / "index.html").write_text("<html>lorastudio ui</html>")
    with TestClient(create_app(settings, web_dist=dist), base_url=LOOPBACK) as client:
        assert "lorastudio ui" in client.get("/").text
        assert client.get("/api/train/status").status_code == 200
    with TestClient(create_app(settings, web_dist=tmp_path / "absent"), base_url=LOOPBACK) as client:
        assert client.get("/").status_code == 404


def test_info_lists_local_models_with_their_family(
    settings: Settings, client: TestClient, tiny_model: Callable[[str], Path]
) -> None:
    shutil.copytree(tiny_model("flux"), settings.models_dir / "tiny-flux")
    (settings.models_dir / "not-a-model").mkdir()
    info = client.get("/api/info").json()
    assert info["models"] == [
        {"name": "tiny-flux", "path": str(settings.models_dir / "tiny-flux"), "family": "flux"}
    ]
    assert [f["name"] for f in info["families"]] == families.names()


@pytest.mark.parametrize(
    ("bind", "token", "allowed", "accepted", "refused"),
    [
        (
            "127.0.0.1",
            None,
            [],
            ["localhost:7860", "127.0.0.1", "127.9.9.9:1", "[::1]:7860", "[::1]"],
            ["evil.example:7860", "localhost.evil.example", "", "[::2]:7860", "0.0.0.0:7860", "[::1"],
        ),
        ("127.0.0.1", None, ["studio.lan"], ["studio.lan:7860", "STUDIO.LAN", "localhost"], ["evil.example"]),
        ("192.168.1.10", "t", [], ["192.168.1.10:7860", "localhost"], ["evil.example", "192.168.1.11"]),
        ("0.0.0.0", "t", [], ["evil.example", "anything.lan:1"], []),
        ("0.0.0.0", "t", ["studio.lan"], ["studio.lan", "127.0.0.1"], ["evil.example"]),
        ("0.0.0.0", None, [], ["localhost"], ["evil.example"]),  # (refused at bind anyway)
    ],
)
def test_the_host_policy(
    settings: Settings,
    bind: str,
    token: str | None,
    allowed: list[str],
    accepted: list[str],
    refused: list[str],
) -> None:
    policy = HostPolicy.from_settings(
        settings.model_copy(update={"host": bind, "api_token": token, "allowed_hosts": allowed})
    )
    assert [h for h in accepted if not policy.accepts(h)] == []
    assert [h for h in refused if policy.accepts(h)] == []
    assert not HostPolicy(frozenset()).accepts(None)


def test_allowed_hosts_come_comma_separated_from_the_environment(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LORASTUDIO_ALLOWED_HOSTS", " Studio.LAN, 10.0.0.5,[fe80::1],, ")
    assert Settings(home=settings.home).allowed_hosts == ["studio.lan", "10.0.0.5", "fe80::1"]
    for bad in ("studio.lan:7860", "http://studio.lan", "a b"):
        monkeypatch.setenv("LORASTUDIO_ALLOWED_HOSTS", bad)
        with pytest.raises(ValidationError, match="not a host name"):
            Settings(home=settings.home)


def test_blank_tokens_count_as_none(settings: Settings) -> None:
    for blank in ("", " ", "\t\n "):
        assert Settings(home=settings.home, api_token=blank).api_token is None
    assert Settings(home=settings.home, api_token=" tok ").api_token == "tok"
    for unvalidated in (
        Settings(home=settings.home, api_token="  "),
        settings.model_copy(update={"api_token": " "}),
    ):
        with pytest.raises(ConfigError, match="blank"):
            check_bind("0.0.0.0", unvalidated)


def test_token_values_are_redacted_whatever_the_encoding_of_their_name() -> None:
    for line in (
        'GET /api/train/events?token=SECRET HTTP/1.1" 200',
        "GET /x?after=3&%74oken=SECRET",
        "GET /x?tok%65n=SECRET&a=1",
        "GET /x?%54%4F%4B%45%4E=SECRET",
        "GET /x?a=1;token=SECRET",
    ):
        assert "SECRET" not in redact_tokens(line), line
    kept = "GET /x?tokens=1&my_token=2&a=token"
    assert redact_tokens(kept) == kept


@pytest.mark.parametrize(
    "hidden",
    [
        "\u200b",
        "\u200c",
        "\u200d",
        "\u200e",
        "\u200f",
        "\u202a",
        "\u202e",
        "\u2066",
        "\u2069",
        "\ufeff",
        "\u00ad",
        "\u0085",
        "\u2028",
        "\u061c",
    ],
)
def test_names_with_invisible_or_bidi_characters_are_refused(hidden: str) -> None:
    with pytest.raises(ConfigError, match=f"U\\+{ord(hidden):04X}"):
        safe_component(f"inv{hidden}oice.png", field="file name")


def test_names_are_normalised_to_nfc() -> None:
    decomposed = "cafe\u0301.png"
    assert safe_component(decomposed) == "caf\u00e9.png"
    assert safe_component("caf\u00e9.png") == "caf\u00e9.png"
    assert safe_component("\u212b") == "\u00c5"  # the Angstrom sign is the letter A-ring
