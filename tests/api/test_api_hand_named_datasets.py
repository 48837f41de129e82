"""A dataset folder made by hand under a name the studio would not create (`?`, `"`, over 100
characters, `CON`, NFD as copied from macOS) was listed by GET /api/datasets, and then its
detail and every other route answered a bare 400 (or 404 for NFD) and a run refused it: a dead
end. Now the listing marks it `usable: false` with the reason and the fix, every lookup by the
listed name answers 400 with that reason and fix (never a 500, never another folder), and
POST /api/datasets/{name}/rename gives it a good name in one step (refused while the folder is
claimed, and when the new name is taken or bad). data/dataset_names.py."""

from __future__ import annotations

import io
import unicodedata
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.config import parse_train_config
from lorastudio.data import resolve_dataset_dir
from lorastudio.data.dataset_names import rename_dataset
from lorastudio.errors import ConfigError, NotFound, PathOutsideRoot
from lorastudio.jobs.dataset_claims import READ, DatasetClaim
from lorastudio.settings import Settings

NFD = unicodedata.normalize("NFD", "café")
HAND_NAMES = ["what?", 'say "hi"', "x" * 120, "CON", NFD]


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), "red").save(buf, format="PNG")
    return buf.getvalue()


def _dataset(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "a.png").write_bytes(_png())
    (folder / "a.txt").write_text("a cat")
    return folder


def _url(name: str, tail: str = "") -> str:
    return f"/api/datasets/{quote(name, safe='')}{tail}"


@pytest.mark.parametrize("name", HAND_NAMES)
def test_a_hand_named_folder_is_listed_unusable_with_the_fix_and_renamed(
    client: TestClient, settings: Settings, name: str
) -> None:
    settings.ensure_dirs()
    _dataset(settings.datasets_dir / name)
    _dataset(settings.datasets_dir / "good")
    listed = {d["name"]: d for d in client.get("/api/datasets").json()["datasets"]}
    assert listed["good"]["usable"] is True and listed["good"]["problem"] is None
    entry = listed[name]
    assert entry["usable"] is False
    assert entry["problem"].endswith("rename the folder") or "rename the folder (to" in entry["problem"]
    assert {d["name"]: d["usable"] for d in client.get("/api/info").json()["datasets"]}[name] is False

    for method, tail, body in (
        ("GET", "", None),
        ("PUT", "/captions/a.png", {"caption": "x"}),
        ("POST", "/captions", {"append": "x", "dry_run": True}),
        ("DELETE", "/images/a.png", None),
    ):
        resp = client.request(method, _url(name, tail), json=body)
        assert resp.status_code == 400, (method, tail, resp.text)
        message = resp.json()["problems"][0]["message"]
        assert "rename the folder" in message and "/rename" in message, message
    with pytest.raises(ConfigError) as info:  # a run by the listed name says the same
        resolve_dataset_dir(name, settings.datasets_dir, allow_outside_root=False)
    assert "rename the folder" in str(info.value)
    assert (settings.datasets_dir / name / "a.txt").read_text() == "a cat"  # nothing written

    resp = client.post(_url(name, "/rename"), json={"to": "good"})
    assert resp.status_code == 400 and "already exists" in resp.text  # never replaced
    resp = client.post(_url(name, "/rename"), json={"to": "bad?"})
    assert resp.status_code == 400 and "must not contain" in resp.text
    resp = client.post(_url(name, "/rename"), json={"to": "-x"})
    assert resp.status_code == 400
    resp = client.post(_url(name, "/rename"), json={"to": "../out"})
    assert resp.status_code == 400
    assert not (settings.datasets_dir.parent / "out").exists()

    resp = client.post(_url(name, "/rename"), json={"to": "fixed"})
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"renamed": name, "name": "fixed"}
    assert not (settings.datasets_dir / name).exists()
    detail = client.get("/api/datasets/fixed")
    assert detail.status_code == 200 and detail.json()["captions"] == 1
    listed = {d["name"]: d for d in client.get("/api/datasets").json()["datasets"]}
    assert listed["fixed"]["usable"] is True and name not in listed


def test_an_nfd_folder_renames_to_its_own_nfc_name(client: TestClient, settings: Settings) -> None:
    settings.ensure_dirs()
    _dataset(settings.datasets_dir / NFD)
    nfc = unicodedata.normalize("NFC", NFD)
    entry = client.get("/api/datasets").json()["datasets"][0]
    assert entry["name"] == NFD and entry["usable"] is False and repr(nfc) in entry["problem"]
    resp = client.post(_url(NFD, "/rename"), json={"to": nfc})
    assert resp.status_code == 200, resp.text
    assert client.get(_url(nfc)).status_code == 200
    cfg = parse_train_config({"family": "flux", "base_model": "m", "data_dir": nfc, "output_name": "o"})
    assert cfg.data_dir == nfc


def test_an_nfd_folder_beside_its_nfc_twin_is_unusable_and_never_opens_the_twin(
    client: TestClient, settings: Settings
) -> None:
    settings.ensure_dirs()
    nfc = unicodedata.normalize("NFC", NFD)
    _dataset(settings.datasets_dir / NFD)
    twin = settings.datasets_dir / nfc
    twin.mkdir()
    if (settings.datasets_dir / NFD).samefile(twin):
        pytest.skip("a normalisation-insensitive file system: one folder")
    listed = {d["name"]: d for d in client.get("/api/datasets").json()["datasets"]}
    assert listed[nfc]["usable"] is True
    assert listed[NFD]["usable"] is False and "another folder" in listed[NFD]["problem"]
    resp = client.get(_url(NFD))
    assert resp.status_code == 400 and "rename the folder" in resp.text
    assert client.get(_url(nfc)).json()["images"] == 0  # the twin, by its own name
    assert client.post(_url(NFD, "/rename"), json={"to": nfc}).status_code == 400  # taken


@pytest.mark.parametrize("name", HAND_NAMES)
def test_a_hand_named_folder_is_deleted_by_its_listed_name(
    client: TestClient, settings: Settings, name: str
) -> None:
    settings.ensure_dirs()
    _dataset(settings.datasets_dir / name)
    resp = client.delete(_url(name))
    assert resp.status_code == 200, resp.text
    assert not (settings.datasets_dir / name).exists()
    assert client.get("/api/datasets").json()["datasets"] == []


def test_a_rename_is_refused_while_the_folder_is_claimed(client: TestClient, settings: Settings) -> None:
    settings.ensure_dirs()
    folder = _dataset(settings.datasets_dir / "what?")
    claim = DatasetClaim.take(settings.home, settings.datasets_dir, [folder], READ, "a test run")
    try:
        resp = client.post(_url("what?", "/rename"), json={"to": "fixed"})
    finally:
        claim.release()
    assert resp.status_code == 409, resp.text
    assert folder.is_dir() and not (settings.datasets_dir / "fixed").exists()
    assert client.post(_url("what?", "/rename"), json={"to": "fixed"}).status_code == 200


def test_rename_never_leaves_the_root_nor_follows_a_link(
    client: TestClient, settings: Settings, tmp_path: Path
) -> None:
    settings.ensure_dirs()
    outside = _dataset(tmp_path / "elsewhere")
    (settings.datasets_dir / "link?").symlink_to(outside)
    assert client.post(_url("link?", "/rename"), json={"to": "x"}).status_code in (400, 404)
    for bad in ("..", ".", "a/b", ".locks"):
        with pytest.raises((PathOutsideRoot, NotFound)):
            rename_dataset(settings.datasets_dir, bad, "x", in_use=set)
    assert client.post(_url("nothing", "/rename"), json={"to": "x"}).status_code == 404
    assert outside.is_dir() and (settings.datasets_dir / "link?").is_symlink()
    assert not (settings.datasets_dir / "x").exists()


def test_a_usable_dataset_renames_too_never_over_another_folder(
    client: TestClient, settings: Settings
) -> None:
    settings.ensure_dirs()
    _dataset(settings.datasets_dir / "cats")
    assert client.post(_url("cats", "/rename"), json={"to": "cats"}).status_code == 400  # the same
    resp = client.post(_url("cats", "/rename"), json={"to": "dogs"})
    assert resp.status_code == 200, resp.text
    assert [d["name"] for d in client.get("/api/datasets").json()["datasets"]] == ["dogs"]
    (settings.datasets_dir / "empty").mkdir()  # an empty folder is never replaced
    assert client.post(_url("dogs", "/rename"), json={"to": "empty"}).status_code == 400
    assert (settings.datasets_dir / "dogs" / "a.png").is_file()


def test_a_dataset_linked_in_from_elsewhere_is_listed_unusable_naming_the_link(
    client: TestClient, settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    """`ln -s /data/photos ~/.lorastudio/datasets/photos` was simply missing from GET
    /api/datasets (and `datasets list`): links are never followed, and the listing left them
    out unnamed. It is listed unusable with where it points and what to do; nothing is read
    through it, and its delete removes the link only."""
    from cli_runner import run_cli

    settings.ensure_dirs()
    _dataset(settings.datasets_dir / "cats")
    outside = _dataset(tmp_path / "photos")
    (settings.datasets_dir / "photos").symlink_to(outside, target_is_directory=True)
    listed = {d["name"]: d for d in client.get("/api/datasets").json()["datasets"]}
    assert listed["cats"]["usable"] and listed["cats"]["images"] == 1
    link = listed["photos"]
    assert not link["usable"] and link["images"] == 0
    assert link["problem"].startswith(
        f"a symbolic link to {outside}: dataset folders are not read through links"
    )
    code, out = run_cli(capsys, monkeypatch, "datasets", "list")
    assert code == 0 and "unusable: 'photos': a symbolic link to" in out and "datasets rename" not in out
    assert client.delete(_url("photos")).status_code in (200, 204)
    assert not (settings.datasets_dir / "photos").exists() and (outside / "a.png").is_file()
