"""Pushing a LoRA to the hub (lora/hub_push.py) against a local fake hub (fake_hub_upload.py) with
huggingface_hub's real client: one commit with the file, its sidecar, the model card and the
newest sample round; the card names the base model, trigger word and settings; failures (no
token, a refused token, a read-only token, a missing repo) are named errors; the CLI pushes too."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from fake_hub_upload import READ_TOKEN, WRITE_TOKEN, UploadHub, UploadHubServer
from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError, HubAccessDenied, HubTokenMissing, JobActive, NotFound
from lorastudio.lora import hub_push
from lorastudio.lora.hub_card import hub_base_model, model_card
from lorastudio.lora.hub_push import push_lora
from lorastudio.settings import Settings
from lorastudio.training.loop import train

PROMPTS = ["sks, a red circle", "sks, a blue square"]


@pytest.fixture(scope="module")
def run_home(tiny_model, sample_dataset, tmp_path_factory) -> Path:
    """A studio home with one finished tiny run "pushme" (samples at steps 2 and 4)."""
    home = tmp_path_factory.mktemp("push-home")
    raw = {
        "family": "z-image",
        "base_model": str(tiny_model("z-image")),
        "data_dir": str(sample_dataset),
        "resolution": 32,
        "steps": 4,
        "lora_rank": 4,
        "output_name": "pushme",
        "trigger_word": "sks",
        "sample_prompts": PROMPTS,
        "sample_every": 2,
        "sample_steps": 1,
    }
    train(TrainConfig.model_validate(raw), [].append, settings=Settings(home=home), device="cpu")
    return home


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[UploadHub]:
    from huggingface_hub import constants

    fake = UploadHub(repos={"me/existing": {}})
    with UploadHubServer(fake):
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setattr(constants, "ENDPOINT", fake.url)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no login of this machine's user
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
        yield fake


def _settings(home: Path, token: str | None) -> Settings:
    return Settings(home=home, hf_token=SecretStr(token) if token else None)


def test_a_push_is_one_commit_of_the_lora_its_sidecar_card_and_newest_samples(
    run_home, hub, tiny_model, sample_dataset
):
    result = push_lora(_settings(run_home, WRITE_TOKEN), "pushme", "me/existing")
    (commit,) = hub.commits
    run = run_home / "outputs" / "pushme"
    assert commit["repo"] == "me/existing" and commit["summary"] == "lorastudio: LoRA pushme"
    files = commit["files"]
    assert sorted(files) == result.files == [
        "README.md", "pushme.json", "pushme.safetensors", "samples/step-000004-0.png", "samples/step-000004-1.png",
    ]  # fmt: skip
    assert files["pushme.safetensors"] == (run / "pushme.safetensors").read_bytes()
    # the sidecar's shared copy: the settings, without the trainer's folders (the base model's, the
    # training images'): each named by its last part (lora/shared.py); the run's own keeps them
    local = json.loads((run / "pushme.json").read_text())
    pushed = json.loads(files["pushme.json"])
    assert str(tiny_model("z-image")) in json.dumps(local) and str(sample_dataset) in json.dumps(local)
    assert str(tiny_model("z-image").parent) not in files["pushme.json"].decode()
    assert str(sample_dataset.parent) not in files["pushme.json"].decode()
    assert pushed["base_model"] == pushed["config"]["base_model"] == tiny_model("z-image").name
    assert pushed["config"]["data_dir"] == pushed["dataset"]["path"] == sample_dataset.name
    assert pushed["config"] == {
        **local["config"],
        "base_model": tiny_model("z-image").name,
        "data_dir": sample_dataset.name,
    }
    assert files["samples/step-000004-1.png"] == (run / "samples" / "step-000004-1.png").read_bytes()
    card = files["README.md"].decode()
    assert card.startswith("---\n") and 'instance_prompt: "sks"' in card
    assert '"tags": ' not in card and 'tags: ["lora", "lorastudio", "text-to-image", "z-image"]' in card
    assert '{"text": "sks, a blue square", "output": {"url": "samples/step-000004-1.png"}}' in card
    assert "base_model:" not in card  # a local tiny model is no hub id
    (meta,) = hub.cards  # the hub parsed the front matter (its validate-yaml call)
    assert meta["instance_prompt"] == "sks" and meta["widget"][0]["text"] == PROMPTS[0]
    assert "| steps | `4` |" in card and "| lora_rank | `4` |" in card and "Trigger word: `sks`" in card
    assert result.commit and result.url == f"{hub.url}/me/existing"


def test_create_makes_the_repo_private_when_asked(run_home, hub):
    push_lora(_settings(run_home, WRITE_TOKEN), "pushme", "me/new-lora", create=True, private=True)
    assert "me/new-lora" in hub.private and "pushme.safetensors" in hub.repos["me/new-lora"]
    push_lora(_settings(run_home, WRITE_TOKEN), "pushme", "me/new-lora", create=True)  # exists: fine
    assert len(hub.commits) == 2


def test_failures_are_named(run_home, hub):
    with pytest.raises(HubTokenMissing, match="LORASTUDIO_HF_TOKEN"):
        push_lora(_settings(run_home, None), "pushme", "me/existing")
    with pytest.raises(HubAccessDenied, match=r"refused the token \(401\)") as denied:
        push_lora(_settings(run_home, "hf_not_a_known_token_000000000"), "pushme", "me/existing")
    assert denied.value.status == 401
    with pytest.raises(HubAccessDenied, match=r"no write access \(403\)") as read_only:
        push_lora(_settings(run_home, READ_TOKEN), "pushme", "me/existing")
    assert read_only.value.status == 403
    with pytest.raises(NotFound, match="no model repo 'me/missing'.*--create"):
        push_lora(_settings(run_home, WRITE_TOKEN), "pushme", "me/missing")
    with pytest.raises(NotFound, match="no LoRA 'nope'"):
        push_lora(_settings(run_home, WRITE_TOKEN), "nope", "me/existing")
    # ids the route's pattern and the CLI took but the hub does not: a refusal naming the field
    # before anything is read (was huggingface_hub's ValueError as a HubUploadError, a 502)
    for repo in ("me/..", "me/b--c", "me/x.git", "me/x\n"):
        with pytest.raises(ConfigError, match="repo: .* is not a hub model repo id"):
            push_lora(_settings(run_home, WRITE_TOKEN), "pushme", repo, create=True)
    assert hub.commits == []


def test_the_cli_pushes_with_the_studio_token(run_home, hub, monkeypatch):
    from lorastudio.cli.app import _register, app
    from lorastudio.settings import get_settings

    _register()
    monkeypatch.setenv("LORASTUDIO_HOME", str(run_home))
    monkeypatch.setenv("LORASTUDIO_HF_TOKEN", WRITE_TOKEN)
    get_settings.cache_clear()
    out = CliRunner().invoke(app, ["lora", "push", "pushme", "--repo", "me/existing"])
    assert out.exit_code == 0, out.output
    assert f"{hub.url}/me/existing" in out.output and "pushme.safetensors" in out.output
    monkeypatch.delenv("LORASTUDIO_HF_TOKEN")
    get_settings.cache_clear()
    refused = CliRunner().invoke(app, ["lora", "push", "pushme", "--repo", "me/existing"])
    assert refused.exit_code == 2 and "LORASTUDIO_HF_TOKEN" in refused.output
    get_settings.cache_clear()


def test_the_card_names_a_hub_base_model():
    sidecar = {"family": "flux", "base_model": "black-forest-labs/FLUX.1-dev", "config": {"steps": 10}}
    card = model_card(sidecar, "x")
    assert 'base_model: "black-forest-labs/FLUX.1-dev"' in card and "Trigger word: none" in card
    assert hub_base_model("/home/u/models/flux") is None and hub_base_model("./a/b") is None
    assert json.loads(card.split("tags: ", 1)[1].splitlines()[0]) == [
        "lora",
        "lorastudio",
        "text-to-image",
        "flux",
    ]


def test_the_api_pushes_and_answers_each_failure_with_its_status(run_home, hub, monkeypatch):
    import socket

    from fastapi.testclient import TestClient

    from live_server import LOOPBACK
    from lorastudio.api.app import create_app

    app = create_app(_settings(run_home, WRITE_TOKEN))
    with TestClient(app, base_url=LOOPBACK) as client:
        done = client.post("/api/loras/pushme/push", json={"repo": "me/api-lora", "create": True})
        assert done.status_code == 201, done.text
        assert done.json()["url"] == f"{hub.url}/me/api-lora" and "README.md" in done.json()["files"]
        assert "pushme.safetensors" in hub.repos["me/api-lora"]
        missing = client.post("/api/loras/pushme/push", json={"repo": "me/missing"})
        assert missing.status_code == 404 and "--create" in missing.json()["detail"]
        assert client.post("/api/loras/nope/push", json={"repo": "me/x"}).status_code == 404
        assert client.post("/api/loras/pushme/push", json={"repo": "no-owner"}).status_code == 422
        # a hub that cannot be reached: 502, which the route's description promised and its
        # responses did not declare (session 37 docs2)
        with socket.socket() as closed:  # a port nothing listens on: the connection is refused
            closed.bind(("127.0.0.1", 0))
            port = closed.getsockname()[1]
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
        failed = client.post("/api/loras/pushme/push", json={"repo": "me/existing"})
        assert failed.status_code == 502 and failed.json()["error"] == "HubUploadError", failed.text
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
    declared = app.openapi()["paths"]["/api/loras/{name}/push"]["post"]["responses"]
    assert "502" in declared and "HubAccessDenied" in declared["403"]["description"]
    with TestClient(create_app(_settings(run_home, READ_TOKEN)), base_url=LOOPBACK) as client:
        refused = client.post("/api/loras/pushme/push", json={"repo": "me/existing"})
        assert refused.status_code == 403 and refused.json()["error"] == "HubAccessDenied"
    with TestClient(create_app(_settings(run_home, None)), base_url=LOOPBACK) as client:
        no_token = client.post("/api/loras/pushme/push", json={"repo": "me/existing"})
        assert no_token.status_code == 400 and "LORASTUDIO_HF_TOKEN" in no_token.json()["detail"]


# A push's LoRA and sidecar are one write's (lora/push_snapshot.py, RELIABILITY 2042): a resume
# renaming a new pair into place during the upload changes neither; a pair read between a write's
# two renames (the sidecar new, the LoRA old) is refused naming both, the CLI exiting 1.


def _rewritten(run: Path, steps: int) -> tuple[bytes, bytes]:
    """(LoRA, sidecar) bytes of the run's pair as a resume to `steps` writes it: other weights, the
    header's and the sidecar's steps and created_at its own."""
    lora = run / "pushme.safetensors"
    from safetensors import safe_open

    with safe_open(str(lora), "pt") as f:
        meta = dict(f.metadata())
    tensors = {k: v + 1 for k, v in load_file(str(lora)).items()}
    meta.update({"lorastudio.steps": str(steps), "lorastudio.created_at": "2026-12-07T23:00:00+00:00"})
    staged = run.parent / "staged.safetensors"
    save_file(tensors, str(staged), metadata=meta)
    sidecar = json.loads((run / "pushme.json").read_text())
    sidecar.update({"steps": steps, "created_at": "2026-12-07T23:00:00+00:00"})
    out = staged.read_bytes(), json.dumps(sidecar).encode()
    staged.unlink()
    return out


@pytest.fixture
def run(run_home: Path, tmp_path: Path):
    """The run's folder, put back as it was after the test."""
    folder = run_home / "outputs" / "pushme"
    kept = tmp_path / "kept"
    shutil.copytree(folder, kept)
    yield folder
    shutil.rmtree(folder)
    shutil.copytree(kept, folder)


def test_a_resume_during_the_upload_changes_nothing_pushed(run_home, hub, run, monkeypatch):
    before = (run / "pushme.safetensors").read_bytes()
    new_lora, new_sidecar = _rewritten(run, 6)
    upload = hub_push._upload

    def resumed_meanwhile(files, *args, **kwargs):  # the server's resume renames its pair into place
        for name, data in (("pushme.json", new_sidecar), ("pushme.safetensors", new_lora)):
            (run / f".{name}").write_bytes(data)
            (run / f".{name}").replace(run / name)
        return upload(files, *args, **kwargs)

    monkeypatch.setattr(hub_push, "_upload", resumed_meanwhile)
    push_lora(_settings(run_home, WRITE_TOKEN), "pushme", "me/existing")
    (commit,) = hub.commits
    assert commit["files"]["pushme.safetensors"] == before  # the pair read, not the resumed LoRA
    assert json.loads(commit["files"]["pushme.json"])["steps"] == 4
    assert (run / "pushme.safetensors").read_bytes() == new_lora


def test_a_round_past_the_pairs_step_is_not_pushed_as_its_samples(run_home, hub, run):
    """A resume's (or a failed run's) sample round lands before its pair: the step-6 images are not
    the step-4 LoRA's outputs, so the card shows step 4's (RELIABILITY 2140)."""
    for i in (0, 1):  # the resume's round at step 6, its LoRA not yet written
        shutil.copy(run / "samples" / f"step-000004-{i}.png", run / "samples" / f"step-000006-{i}.png")
    push_lora(_settings(run_home, WRITE_TOKEN), "pushme", "me/existing")
    (commit,) = hub.commits
    assert sorted(f for f in commit["files"] if f.startswith("samples/")) == [
        "samples/step-000004-0.png", "samples/step-000004-1.png",
    ]  # fmt: skip
    assert "step-000006" not in commit["files"]["README.md"].decode()


def test_a_pair_of_two_writes_is_refused_naming_both(run_home, hub, run, monkeypatch):
    from lorastudio.cli.app import _register, app
    from lorastudio.settings import get_settings

    monkeypatch.setattr("lorastudio.lora.push_snapshot.PAIR_PAUSE_S", 0.0)
    (run / "pushme.json").write_bytes(_rewritten(run, 6)[1])  # the sidecar renamed in, the LoRA not yet
    with pytest.raises(JobActive, match=r"not one write's \(steps 4 in the LoRA, 6 in the sidecar\)"):
        push_lora(_settings(run_home, WRITE_TOKEN), "pushme", "me/existing")
    assert hub.commits == []
    _register()
    monkeypatch.setenv("LORASTUDIO_HOME", str(run_home))
    monkeypatch.setenv("LORASTUDIO_HF_TOKEN", WRITE_TOKEN)
    get_settings.cache_clear()
    try:
        refused = CliRunner().invoke(app, ["lora", "push", "pushme", "--repo", "me/existing"])
    finally:
        get_settings.cache_clear()
    assert refused.exit_code == 1, refused.output
    assert "pushed pair would not match" in refused.output and hub.commits == []


def test_a_sidecar_whose_config_or_dataset_is_null_pushes_as_before_2042(run_home, hub, run):
    """The pair check read the sidecar through lora/metadata.training_metadata, which called
    .get on its "config" and "dataset": a sidecar holding null there (edited by hand, another
    tool's) ended the push in AttributeError (the API's 500), where the push before 2042 and its
    model card (hub_card: `config or {}`) went on. The check reads the three facts it compares
    only (RELIABILITY 2223)."""
    sidecar = json.loads((run / "pushme.json").read_text())
    sidecar.update({"config": None, "dataset": None})
    (run / "pushme.json").write_text(json.dumps(sidecar))
    push_lora(_settings(run_home, WRITE_TOKEN), "pushme", "me/existing")
    (commit,) = hub.commits
    assert commit["files"]["pushme.safetensors"] == (run / "pushme.safetensors").read_bytes()
    assert json.loads(commit["files"]["pushme.json"])["config"] is None
    assert "Trained steps: 4" in commit["files"]["README.md"].decode()


def test_the_card_keeps_prompts_and_names_out_of_its_markdown():
    """A sample prompt's `]` or line break ended its image's alt text and added Markdown of its
    own (a link, a heading); a trigger word's backtick ended its code span (RELIABILITY 2237)."""
    prompt = "a cat](https://evil.example/t.png)\n\n# Owned [x]"
    sidecar = {"family": "flux", "base_model": "/m/my`base", "trigger_word": "sk`s", "config": {}}
    card = model_card(sidecar, "x", [("samples/a.png", prompt)])
    body = card.split("\n---\n", 1)[1]
    assert "![a cat\\](https://evil.example/t.png) # Owned \\[x\\]](samples/a.png)" in body
    assert "\n# Owned" not in body and not re.search(r"(?<!\\)\]\(https://evil", body)
    assert "- Trigger word: ``sk`s``" in body and "- Base model: ``/m/my`base``" in body
