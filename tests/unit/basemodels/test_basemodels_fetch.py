"""Fetching through the real huggingface_hub client from a fake hub on 127.0.0.1: only the files
training needs, refusals before anything is written, resume after a dropped connection and after
a cancel, offline mode, and a token that never leaks."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fake_hub import TOKEN, FakeHub, FakeRepo
from pydantic import SecretStr

from lorastudio.basemodels import fetch_model, inspect_folder, list_models, plan_fetch
from lorastudio.basemodels.events import FetchEvent
from lorastudio.basemodels.fetch import staging_folder
from lorastudio.basemodels.layout import select_training_files
from lorastudio.errors import ConfigError, ModelAccessDenied, ModelSourceError, NotFound
from lorastudio.settings import Settings

WEIGHTS = "vae/diffusion_pytorch_model.safetensors"


def _with_token(settings: Settings, token: str | None = TOKEN) -> Settings:
    return settings.model_copy(update={"hf_token": SecretStr(token) if token else None})


def _planned(hub: FakeHub, repo_id: str = "acme/flux") -> list[str]:
    files = hub.repos[repo_id].files
    return select_training_files(json.loads(files["model_index.json"]), files).files


def _file_gets(hub: FakeHub) -> list[str]:
    return [
        r.path.split("/resolve/")[1].split("/", 1)[1]
        for r in hub.requests
        if r.method == "GET" and "/resolve/" in r.path
    ]


def test_fetch_takes_only_training_files_reports_progress_and_keeps_the_token_secret(
    settings: Settings, hub: FakeHub, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    events: list[FetchEvent] = []
    settings = _with_token(settings)
    outcome = fetch_model(settings, "acme/flux", emit=events.append)

    folder = settings.models_dir / "acme--flux"
    assert (outcome.status, outcome.model_id, outcome.path, outcome.already_present) == (
        "completed", "acme--flux", str(folder), False
    )  # fmt: skip
    planned = _planned(hub)
    on_disk = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert on_disk == sorted([*planned, "lorastudio_fetch.json"])
    repo = hub.repos["acme/flux"].files
    assert all((folder / p).read_bytes() == repo[p] for p in planned)
    assert set(_file_gets(hub)) == set(
        planned
    )  # README, root checkpoint, .bin, fp16, gguf... never asked for
    assert inspect_folder(folder).trainable and not staging_folder(folder).exists()
    marker = json.loads((folder / "lorastudio_fetch.json").read_text())
    assert marker["repo_id"] == "acme/flux" and marker["commit"] == hub.repos["acme/flux"].commit
    assert marker["family"] == "flux" and marker["files"] == sorted(planned)

    kinds = [e.type for e in events]
    assert kinds[0] == "fetch_started" and kinds[-1] == "fetch_complete" and "fetch_progress" in kinds
    total = sum(len(repo[p]) for p in planned)
    assert events[0].files_total == len(planned) and events[0].bytes_total == total  # type: ignore[union-attr]
    done = [e.bytes_done for e in events if e.type == "fetch_progress"]  # type: ignore[union-attr]
    assert done == sorted(done) and done[-1] == total

    assert {r.authorization for r in hub.requests} == {f"Bearer {TOKEN}"}  # the token was used ...
    public = json.dumps([e.model_dump() for e in events]) + json.dumps(
        [m.public() for m in list_models(settings)]
    )
    for text in (public, caplog.text, (folder / "lorastudio_fetch.json").read_text(), repr(settings)):
        assert TOKEN not in text  # ... and never shown

    asked = len(hub.requests)
    again = fetch_model(settings, "acme/flux")
    assert again.already_present and again.path == str(folder)
    assert len(hub.requests) == asked  # on disk already: the hub is not asked


def test_gated_private_and_missing_repos_are_refused_before_anything_is_written(
    settings: Settings, hub: FakeHub
) -> None:
    cases = [
        ("acme/gated", None, 401, "gated repo and no hub token was sent"),
        ("acme/gated", "hf_wrong", 403, "gated repo and the hub token has no access"),
        ("acme/private", None, 401, "not found or is private"),
        ("acme/nothing", "hf_wrong", 401, "not found or is private"),
    ]
    for repo_id, token, status, words in cases:
        with pytest.raises(ModelAccessDenied) as err:
            fetch_model(_with_token(settings, token), repo_id)
        assert err.value.status == status and words in str(err.value)
        assert "LORASTUDIO_HF_TOKEN" in str(err.value) and "hf_wrong" not in str(err.value)
    assert list(settings.models_dir.iterdir()) == []
    assert [f for f in _file_gets(hub) if f != "model_index.json"] == []  # no weights were requested

    with pytest.raises(NotFound, match="no revision 'v9'"):
        plan_fetch(settings, "acme/flux", "v9")
    for repo_id, revision in [("not-an-id", None), ("../x/y", None), ("acme/flux", "../main")]:
        with pytest.raises(ConfigError):
            plan_fetch(settings, repo_id, revision)
    plan = plan_fetch(_with_token(settings), "acme/private")  # with access it plans normally
    assert plan.family == "flux" and sorted(plan.files or {}) == sorted(_planned(hub, "acme/private"))


def test_untrainable_and_incomplete_repos_are_refused_before_downloading(
    settings: Settings, hub: FakeHub
) -> None:
    flux = hub.repos["acme/flux"].files
    index = json.loads(flux["model_index.json"])
    hub.repos["acme/sd15"] = FakeRepo(
        {**flux, "model_index.json": json.dumps({**index, "_class_name": "StableDiffusionPipeline"}).encode()}
    )
    hub.repos["acme/gguf"] = FakeRepo({"README.md": b"#", "flux1-dev-Q4_K_S.gguf": b"GGUF"})
    hub.repos["acme/component"] = FakeRepo(
        {"config.json": b"{}", "diffusion_pytorch_model.safetensors": b"w"}
    )
    hub.repos["acme/single"] = FakeRepo({"flux1-dev.safetensors": b"w", "ae.safetensors": b"w"})
    no_weights = {p: b for p, b in flux.items() if not p.startswith("transformer/")}
    no_weights.update({"transformer/config.json": b"{}", "transformer/flux-Q8_0.gguf": b"GGUF"})
    hub.repos["acme/partial"] = FakeRepo(no_weights)
    cases = {
        "acme/sd15": "StableDiffusionPipeline (Stable Diffusion 1.x/2.x) is not a family lorastudio can train",
        "acme/gguf": "holds GGUF files, an inference-only format",
        "acme/component": "a single model component",
        "acme/single": "single-file checkpoint(s) (ae.safetensors, flux1-dev.safetensors)",
        "acme/partial": "lacks files training needs: transformer/*.safetensors (weights; only GGUF found",
    }
    for repo_id, words in cases.items():
        with pytest.raises(ModelSourceError) as err:
            fetch_model(settings, repo_id)
        assert words in str(err.value)
        if repo_id != "acme/partial":
            assert "FluxPipeline" in str(err.value)  # what IS accepted
    assert (
        set(_file_gets(hub)) <= {"model_index.json", "config.json"}
        and list(settings.models_dir.iterdir()) == []
    )


def test_a_dropped_connection_resumes_with_a_range_request(
    settings: Settings, hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 16 * 1024)  # so a part of the file is written
    hub.drop_after[WEIGHTS] = 100_000  # the first GET of the VAE weights is cut after 100 kB
    outcome = fetch_model(settings, "acme/flux")
    gets = hub.gets(WEIGHTS)
    assert len(gets) == 2 and gets[0].range is None
    assert gets[1].range is not None and 0 < int(gets[1].range.removeprefix("bytes=").rstrip("-")) <= 100_000
    assert (Path(str(outcome.path)) / WEIGHTS).read_bytes() == hub.repos["acme/flux"].files[WEIGHTS]


def test_a_cancelled_fetch_keeps_its_files_and_resumes(settings: Settings, hub: FakeHub) -> None:
    hub.hold[WEIGHTS] = threading.Event()
    cancel = threading.Event()
    events: list[FetchEvent] = []
    result: dict[str, object] = {}
    target = settings.models_dir / "acme--flux"
    others = [p for p in _planned(hub) if p != WEIGHTS]

    thread = threading.Thread(
        target=lambda: result.update(
            out=fetch_model(settings, "acme/flux", emit=events.append, cancel=cancel)
        )
    )
    thread.start()
    deadline = time.monotonic() + 20
    while not all((staging_folder(target) / p).is_file() for p in others):
        assert time.monotonic() < deadline, "the other files were not downloaded"
        time.sleep(0.02)
    cancel.set()
    hub.hold.pop(WEIGHTS).set()
    thread.join(20)
    assert result["out"].status == "cancelled" and events[-1].type == "fetch_cancelled"  # type: ignore[attr-defined]
    assert not target.exists() and not (staging_folder(target) / WEIGHTS).exists()
    gets_before = {p: len(hub.gets(p)) for p in others}

    resumed: list[FetchEvent] = []
    outcome = fetch_model(settings, "acme/flux", emit=resumed.append)
    assert outcome.status == "completed" and inspect_folder(target).trainable
    gets_after = {p: len(hub.gets(p)) for p in others}
    # the plan reads model_index.json and the components' configs (their agreement check) again
    read = [
        "model_index.json",
        *(f"{c}/config.json" for c in ("text_encoder", "text_encoder_2", "transformer", "vae")),
    ]
    assert [gets_after.pop(p) - gets_before.pop(p) for p in read] == [1] * len(read)
    assert gets_after == gets_before  # nothing else downloaded twice
    assert len(hub.gets(WEIGHTS)) == 2
    first = next(e for e in resumed if e.type == "fetch_progress")
    kept = sum(len(hub.repos["acme/flux"].files[p]) for p in others)
    assert first.bytes_done >= kept  # type: ignore[union-attr]


def test_offline_mode_uses_only_what_is_on_disk_and_says_so(
    settings: Settings, hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants, snapshot_download

    from lorastudio.basemodels.hubcache import hub_cache_dir

    snapshot = snapshot_download("acme/flux", endpoint=hub.url, cache_dir=hub_cache_dir())
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    asked = len(hub.requests)
    with pytest.raises(
        ModelSourceError, match=r"offline mode \(HF_HUB_OFFLINE=1\): acme/private is not on disk"
    ):
        fetch_model(settings, "acme/private")
    events: list[FetchEvent] = []
    outcome = fetch_model(settings, "acme/flux", emit=events.append)
    assert (outcome.already_present, outcome.offline, outcome.path, outcome.model_id) == (
        True, True, snapshot, "hub:acme--flux"
    )  # fmt: skip
    assert events[-1].type == "fetch_complete" and events[-1].offline  # type: ignore[union-attr]
    assert len(hub.requests) == asked and list(settings.models_dir.iterdir()) == []


def test_a_taken_or_broken_target_folder_is_never_overwritten(
    settings: Settings, hub: FakeHub, copy_tiny: Callable[..., Path]
) -> None:
    mine = copy_tiny("flux", settings.models_dir / "acme--flux")  # the user's folder, same name
    with pytest.raises(ModelSourceError, match="is not lorastudio's download of acme/flux"):
        fetch_model(settings, "acme/flux")
    (mine / "lorastudio_fetch.json").write_text(json.dumps({"repo_id": "acme/flux", "revision": None}))
    (mine / WEIGHTS).unlink()
    with pytest.raises(ModelSourceError, match=r"no longer usable .*lorastudio models rm acme--flux"):
        fetch_model(settings, "acme/flux")
    assert sorted(p.name for p in settings.models_dir.iterdir()) == ["acme--flux"] and hub.requests == []
    rev = plan_fetch(settings, "acme/flux", hub.repos["acme/flux"].commit)  # another revision, another folder
    assert rev.target.name == f"acme--flux@{hub.repos['acme/flux'].commit}" and rev.present is None
