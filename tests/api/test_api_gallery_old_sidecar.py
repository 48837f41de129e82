"""A gallery sidecar written before session 26 (no `base_identity`; each LoRA without `step`),
as the code of the session's start wrote it (the record below is that code's, by hand): listed
with every field it has and `base_identity` null (the image renders with the base as it is),
never dropped or misread (session 26 upgrade audit; end to end: tests/upgrade/)."""

from __future__ import annotations

import json

from PIL import Image

from lorastudio.settings import Settings

OLD_SIDECAR = {
    "prompt": "a red circle", "seed": 1, "family": "flux", "base_model": "/somewhere/tiny-flux",
    "steps": 2, "guidance": None, "references": [], "width": 32, "height": 32,
    "loras": [{"name": "done", "scale": 1.0, "sha256": "dd952cd8c93989787677a0b7dc393187e4fbedac9f8e9e4861f4a137137b89cf"}],
}  # fmt: skip


def test_an_old_gallery_sidecar_is_listed_whole_without_a_base_identity(client, settings: Settings) -> None:
    gallery = settings.home / "gallery"
    gallery.mkdir(parents=True)
    Image.new("RGB", (32, 32)).save(gallery / "20261206-051343-1-b07716dc.png")
    (gallery / "20261206-051343-1-b07716dc.json").write_text(json.dumps(OLD_SIDECAR, indent=2))
    (image,) = client.get("/api/gallery").json()["images"]
    assert image["base_identity"] is None
    for key in ("prompt", "seed", "family", "base_model", "steps", "width", "height"):
        assert image[key] == OLD_SIDECAR[key], key
    assert image["loras"] == [{**OLD_SIDECAR["loras"][0], "step": None, "weights": None}]
