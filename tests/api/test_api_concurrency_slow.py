"""Many clients editing the datasets of one studio at once (session 29 concaudit), on a real uvicorn
server: uploads (some paused halfway through their body), renames, deletes, caption edits with
and without `expected`, bulk edits and image deletes, on a few dataset names, from 8 threads.
Every answer is a success or a clear 4xx (never a 5xx); afterwards the listing is the folders,
each dataset with as many images as it lists, no caption without its image, and nothing hidden
left (no staging, no trash, no lock). The default suite forces each interleaving in its own
test (test_api_upload_races.py and the others of RELIABILITY 770-777); this is the loop."""

from __future__ import annotations

import io
import random
import threading

import httpx
import pytest
from api_helpers import LiveServer
from PIL import Image

from lorastudio.settings import Settings

NAMES = ("pets", "cats", "dogs")
ROUNDS = 150
CLEAR = {200, 201, 400, 404, 409}


def _png(shade: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (shade % 256, 60, 120)).save(buf, format="PNG")
    return buf.getvalue()


def _paused_upload(client: httpx.Client, name: str, files: list, rng: random.Random) -> httpx.Response:
    """An upload whose body stops halfway for a moment (another client's request lands then)."""
    request = httpx.Request("POST", f"{client.base_url}/api/datasets/{name}/files", files=files)
    body = request.read()
    pause = threading.Event()

    def chunks():  # type: ignore[no-untyped-def]
        yield body[: len(body) // 2]
        pause.wait(rng.random() * 0.05)  # a bounded pause: the loop's spread, not a condition
        yield body[len(body) // 2 :]

    headers = {"content-type": request.headers["content-type"]}
    return client.post(f"/api/datasets/{name}/files", content=chunks(), headers=headers)


def _act(client: httpx.Client, rng: random.Random, k: int) -> httpx.Response:
    name, other = rng.sample(NAMES, 2)
    stem = f"i{rng.randrange(4)}"
    choice = rng.randrange(8)
    if choice <= 1:
        files = [("files", (f"{stem}.png", _png(k))), ("files", (f"{stem}.txt", f"up {k}".encode()))]
        return (
            _paused_upload(client, name, files, rng)
            if choice
            else client.post(f"/api/datasets/{name}/files", files=files)
        )
    if choice == 2:
        return client.post(f"/api/datasets/{name}/rename", json={"to": other})
    if choice == 3:
        return client.delete(f"/api/datasets/{name}")
    if choice == 4:
        body = {"caption": f"edit {k}", **({"expected": f"up {k - 1}"} if rng.random() < 0.5 else {})}
        return client.put(f"/api/datasets/{name}/captions/{stem}.png", json=body)
    if choice == 5:
        return client.post(f"/api/datasets/{name}/captions", json={"append": " x", "dry_run": False})
    if choice == 6:
        return client.delete(f"/api/datasets/{name}/images/{stem}.png")
    return client.get(f"/api/datasets/{name}")


@pytest.mark.slow  # ~15 s on 2 loaded cores: 8 clients x 150 requests, a quarter paused mid-body
def test_many_clients_editing_datasets_at_once_leave_a_consistent_studio(
    server: LiveServer, settings: Settings
) -> None:
    answers: list[tuple[int, str]] = []
    lock = threading.Lock()

    def client_loop(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for k in range(ROUNDS):
                got = _act(client, rng, seed * 1000 + k)
                with lock:
                    answers.append((got.status_code, got.text[:300]))

    threads = [threading.Thread(target=client_loop, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)

    assert len(answers) == 8 * ROUNDS
    unclear = [a for a in answers if a[0] not in CLEAR]
    assert not unclear, unclear[:5]
    root = settings.datasets_dir
    listed = {d["name"]: d for d in server.client.get("/api/datasets").json()["datasets"]}
    assert set(listed) == {p.name for p in root.iterdir() if not p.name.startswith(".")}
    for name, summary in listed.items():
        folder = root / name
        images = sorted(p.name for p in folder.glob("*.png"))
        assert summary["images"] == len(images), (name, summary, images)
        for txt in folder.glob("*.txt"):  # no caption without its image
            assert (folder / f"{txt.stem}.png").is_file(), txt
    hidden = [p for p in root.rglob(".*") if p.name != ".uploads" or any(p.iterdir())]
    assert not hidden, hidden
