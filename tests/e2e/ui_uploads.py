"""Dataset uploads and JSON calls for the browser tests: captioned 32 px images posted through the page's own
request context (the studio's upload API), so a test starts from datasets a user would have."""

from __future__ import annotations

import io
import json
import urllib.request

from PIL import Image


def upload_captioned(page, url: str, name: str, count: int, caption: str) -> None:
    """Upload `count` images with .txt captions "`caption` i" to dataset `name`; asserts 201."""
    files = []
    for i in range(count):
        buf = io.BytesIO()
        Image.new("RGB", (32, 32), (40 * i, 100, 200)).save(buf, format="PNG")
        files += [(f"{name}{i}.png", buf.getvalue()), (f"{name}{i}.txt", f"{caption} {i}".encode())]
    multipart = {
        f"f{i}": {"name": n, "mimeType": "application/octet-stream", "buffer": b}
        for i, (n, b) in enumerate(files)
    }
    answer = page.request.post(f"{url}/api/datasets/{name}/files", multipart=multipart)
    assert answer.status == 201, answer.text()


def api_json(url: str, path: str, body: dict | None = None) -> dict:
    """GET (or POST `body` as JSON to) the studio at `url`; the decoded JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{url}{path}", data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as res:
        return json.loads(res.read())
