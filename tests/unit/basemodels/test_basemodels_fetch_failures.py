"""A fetch that fails for a reason of the disk or of the repo ends, says why and leaves nothing
that counts as a model: a full disk (a real small tmpfs under models/) is "no space left on
device" with the files kept for a resume, not "cannot reach the hub"; a repo whose paths take
one of lorastudio's own names (a component folder named like the fetch marker) is refused
before anything is written (its fetch thread died on the marker write: "running" for the
server's life, neither fetchable again nor deletable)."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest
from fake_hub import FakeHub, FakeRepo
from tests.reliability.tmpfs_home import small_disk

from lorastudio.basemodels import (
    FetchManager,
    fetch_model,
    inspect_folder,
    list_models,
    plan_fetch,
    run_fetch,
)
from lorastudio.basemodels.fetch import staging_folder
from lorastudio.errors import ConfigError, JobActive, ModelSourceError, NotFound
from lorastudio.settings import Settings


def _local_ids(settings: Settings) -> list[str]:
    return [e.id for e in list_models(settings, hub_cache=False, known_captioners=False)]


def test_a_full_disk_fails_the_fetch_as_such_and_it_resumes_once_there_is_room(
    settings: Settings, hub: FakeHub
) -> None:
    target = settings.models_dir / "acme--flux"
    with small_disk(settings.models_dir, 1):  # the tiny FLUX.1's files are ~2 MB
        manager = FetchManager(settings)
        failed = manager.wait(manager.start("acme/flux")["id"], 60)
        assert failed["status"] == "failed" and failed["resumable"], failed
        assert failed["error"].startswith("no space left on device: downloading acme/flux"), failed["error"]
        assert "cannot reach the hub" not in failed["error"] and "fetch again to resume" in failed["error"]
        assert _local_ids(settings) == [] and not target.exists() and staging_folder(target).is_dir()
        subprocess.run(["mount", "-o", "remount,size=16m", str(settings.models_dir)], check=True)
        done = manager.wait(manager.start("acme/flux")["id"], 60)
        assert done["status"] == "completed", done
        assert inspect_folder(target).trainable and _local_ids(settings) == ["acme--flux"]


@pytest.mark.parametrize("name", ["lorastudio_fetch.json", "lorastudio_tiny.json"])
def test_a_repo_path_under_a_lorastudio_name_is_never_fetched(
    settings: Settings, hub: FakeHub, name: str
) -> None:
    files = dict(hub.repos["acme/flux"].files)
    index = json.loads(files["model_index.json"])
    index[name] = ["diffusers", "FlowMatchEulerDiscreteScheduler"]
    files["model_index.json"] = json.dumps(index).encode()
    files[f"{name}/scheduler_config.json"] = files["scheduler/scheduler_config.json"]
    hub.repos["acme/hostile"] = FakeRepo(files)
    manager = FetchManager(settings)
    with pytest.raises(ModelSourceError, match=rf"lacks files training needs: {name}/ \(not in the repo\)"):
        manager.start("acme/hostile")
    assert manager.list() == [] and list(Path(settings.models_dir).iterdir()) == []


def test_one_fetch_of_a_model_at_a_time_across_processes(settings: Settings, hub: FakeHub) -> None:
    """Two servers on one home (two FetchManagers: the flock is per open file, as between
    processes) and `models fetch` share the staging folder: the second is refused (409) while
    the first runs, and a plan made before the first published its folder finds it there."""
    weights = "transformer/diffusion_pytorch_model.safetensors"
    hub.hold[weights] = threading.Event()
    first, second = FetchManager(settings), FetchManager(settings)
    late_plan = plan_fetch(settings, "acme/flux")  # planned while nothing is on disk
    running = first.start("acme/flux")
    with pytest.raises(JobActive, match="being fetched already by another process"):
        second.start("acme/flux")
    with pytest.raises(JobActive, match="being fetched already by another process"):
        fetch_model(settings, "acme/flux")
    hub.hold.pop(weights).set()
    assert first.wait(running["id"], 60)["status"] == "completed"
    asked = len(hub.requests)
    late = run_fetch(settings, late_plan)
    assert late.already_present and late.path == str(settings.models_dir / "acme--flux")
    assert len(hub.requests) == asked and not staging_folder(settings.models_dir / "acme--flux").exists()
    assert second.wait(second.start("acme/flux")["id"], 60)["already_present"] is True


@pytest.mark.parametrize(
    "repo_id", ["acme/flux\n", "acme/flux-", "acme/flux.", "acme--x/flux", "acme/flux.git", "a/" + "b" * 97]
)
def test_an_id_the_hub_client_refuses_is_a_config_error_naming_repo_id(
    settings: Settings, hub: FakeHub, repo_id: str
) -> None:
    """is_hub_id took a trailing newline ('$' matches before one), a name ending in '-' or '.',
    '--' and names over 96 characters; huggingface_hub's own check then raised HFValidationError
    past every handler (a 500 of POST /api/models/fetch)."""
    with pytest.raises(ConfigError) as err:
        plan_fetch(settings, repo_id)
    assert [p.field for p in err.value.problems] == ["repo_id"] and hub.requests == []


def test_the_longest_id_and_revision_fetch_into_a_name_the_file_system_takes(
    settings: Settings, hub: FakeHub
) -> None:
    """Two 96-character id parts and a 150-character branch name made a folder name (and its
    staging and lock names) over 255 bytes: the fetch's first write was an OSError, a 500."""
    repo_id = f"{'o' * 96}/{'n' * 96}"
    branch = "b" * 150
    hub.repos[repo_id] = FakeRepo(dict(hub.repos["acme/flux"].files), commit=branch)
    manager = FetchManager(settings)
    done = manager.wait(manager.start(repo_id, branch)["id"], 60)
    assert done["status"] == "completed", done
    folder = Path(done["path"])
    assert len(folder.name.encode()) <= 200 and inspect_folder(folder).trainable
    assert manager.wait(manager.start(repo_id, branch)["id"], 60)["already_present"] is True


def test_the_fetch_list_keeps_the_latest_ended_fetches_only(settings: Settings, hub: FakeHub) -> None:
    """Every POST of a model already on disk is a fetch of its own, kept for the server's life:
    GET /api/models/fetch grew with each. Now the latest 100 ended ones are kept (MAX_ENDED)."""
    kept = 100
    manager = FetchManager(settings)
    manager.wait(manager.start("acme/flux")["id"], 60)
    ids = [manager.wait(manager.start("acme/flux")["id"], 60)["id"] for _ in range(kept + 20)]
    listed = manager.list()
    assert [f["id"] for f in listed] == ids[-kept:] and all(f["already_present"] for f in listed)
    with pytest.raises(NotFound):
        manager.get(ids[0])
