"""Build a studio home with the code of session 39's start (run with PYTHONPATH=<old tree>/src):
session 38's fixture home (tests/upgrade/old_home38.py: session 37's home, a LoKr run and a
validation run, each stopped at step 2 beside its uninterrupted twin, the LoKr twin's wall-time
record without `adapter`, RELIABILITY 1861; its placeholder-caption dataset, whose run and the
klein run this code refuses, so neither is made),
then through the old train(): a plain LoRA run of the LoKr run's settings, finished (its record
and the LoKr's: what this session's forecast tells apart), a LoHa run at rank 2 (this session's
factored LoHa forward, RELIABILITY 1990) stopped at step 2 beside its twin, a run on a dataset with loss masks
(one of them black inside its image's centred crop, white outside: this session's blank-mask
warning judges the crop, 1860s) stopped at step 2 beside its twin, and a Qwen-Image-Edit run on
a dataset with control images and masks stopped likewise.
`python old_home39.py HOME` (`--s39` adds only this session's part to a home of old_home38.py);
the summary goes to HOME/../old_home.json."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
from old_home import _settings  # noqa: E402 (beside this file)
from old_home38 import STEPS, _stopped_and_full  # noqa: E402
from PIL import Image


def _masked(shapes: Path, folder: Path) -> Path:
    """`shapes` copied with a mask per image under masks/: white, but the first oblong image's
    mask is black in its centred square and white in the strips outside it (blank where a centre
    crop takes it, not blank as a whole)."""
    if folder.is_dir():
        return folder
    shutil.copytree(shapes, folder)
    (folder / "masks").mkdir()
    oblong = None
    for image in sorted(folder.glob("*.png")):
        w, h = Image.open(image).size
        mask = np.full((h, w), 255, np.uint8)  # H x W
        if oblong is None and w != h:
            oblong = image.name
            side = min(w, h)
            top, left = (h - side) // 2, (w - side) // 2
            mask[top : top + side, left : left + side] = 0
        Image.fromarray(mask, "L").save(folder / "masks" / image.name)
    return folder


def _controls(shapes: Path, folder: Path) -> Path:
    """The first four images of `shapes` with their captions, a control image of each (flipped)
    under control/ and a white mask under masks/."""
    if folder.is_dir():
        return folder
    (folder / "control").mkdir(parents=True)
    (folder / "masks").mkdir()
    for image in sorted(shapes.glob("*.png"))[:4]:
        shutil.copy(image, folder / image.name)
        shutil.copy(image.with_suffix(".txt"), folder / image.with_suffix(".txt").name)
        pic = Image.open(image).convert("RGB")
        pic.transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(folder / "control" / image.name)
        Image.fromarray(np.full((pic.height, pic.width), 255, np.uint8), "L").save(
            folder / "masks" / image.name
        )
    return folder


def _session39(home: Path, model: Path, done: dict) -> dict:
    """The plain twin of the LoKr run, the masked run and the edit run (see the module); those of
    `done` (an earlier build's) kept."""
    from lorastudio import families
    from lorastudio.config import TrainConfig
    from lorastudio.tiny import save_tiny_model
    from lorastudio.training.loop import train

    shapes = home / "datasets" / "shapes"
    out = dict(done)
    if "lora" not in out:  # the LoKr run's settings as a plain LoRA, finished: a record of its own
        raw = _settings(model, shapes, "lora39", {"steps": STEPS, "save_every": None})
        out["lora"] = {
            "raw": raw,
            "losses": list(train(TrainConfig.model_validate(raw), [].append, device="cpu").losses),
        }
    if "loha" not in out:  # rank 2: this session's forward takes its factors' product (1990)
        raw = _settings(model, shapes, "loha39", {"steps": STEPS, "save_every": None, "adapter": "loha"})
        out["loha"] = _stopped_and_full({**raw, "lora_rank": 2})
    if "mask" not in out:
        masked = _masked(shapes, home / "datasets" / "mask39")
        out["mask"] = _stopped_and_full(
            _settings(model, masked, "mask39", {"steps": STEPS, "save_every": None})
        )
    if "edit" not in out:
        edit = home / "models" / "tiny-qwen-edit"
        if not edit.is_dir():
            save_tiny_model("qwen-image-edit", edit)
        spec = families.get("qwen-image-edit").spec
        raw = _settings(edit, _controls(shapes, home / "datasets" / "edit39"), "edit39", {
            "family": "qwen-image-edit", "steps": 4, "save_every": None, "control_resolution": "target",
            "resolution": max(32, 2 * spec.resolution_multiple),
        })  # fmt: skip
        if "max_sequence_length" not in spec.supports:
            del raw["max_sequence_length"]
        out["edit"] = _stopped_and_full(raw)
    return out


if __name__ == "__main__":
    home = Path(sys.argv[1])
    os.environ["LORASTUDIO_HOME"] = str(home)
    summary = home.parent / "old_home.json"
    if sys.argv[2:] == ["--s39"]:
        out = json.loads(summary.read_text())
    else:
        from old_home34 import _killed_server, build  # noqa: E402
        from old_home37 import _session37  # noqa: E402
        from old_home38 import _session38  # noqa: E402

        out = build(home)
        out["killed_server"] = _killed_server(home)
        out["s37"] = _session37(home, Path(out["model"]))
        # its placeholder-caption and klein runs are refused by this code (1733, 1682): the
        # dataset kept (its listing), the runs left out
        s38 = _session38(home, Path(out["model"]), {"trig": None, "klein": None})
        out["s38"] = {k: v for k, v in s38.items() if v is not None}
    out["s39"] = _session39(home, Path(out["model"]), out.get("s39", {}))
    summary.write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps(out["s39"], default=str)[:3000])
