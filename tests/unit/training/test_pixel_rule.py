"""The pixel rule (RELIABILITY 610): session 27's fixes 550, 552 and 553 read some files otherwise
without any file or setting changing, so a run whose data holds such a file records `pixel_rule`
and a checkpoint of it written by the older code (this code's identity without the record, as
tests/unit/training/test_identity_rules.py writes one) is refused on resume before any model
loads, naming the rule, the fix and a file; the same old checkpoint over a clean dataset (RGBA
and palette transparency, an opaque mask, a control of its target's size: read as before)
resumes. The resume is the CLI's and the worker's (training/session.prepare_session) and the job
service's (jobs/resume.validate_resume)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.resume.checkpoint import CHECKPOINT_FILES, INFO_FILE
from lorastudio.training.resume.identity import IDENTITY_FORMAT
from lorastudio.training.session import prepare_session


def _picture(width: int, height: int) -> np.ndarray:
    """[height, width, 3] uint8 gradients with black corners (a colour key's usual value)."""
    ys, xs = np.mgrid[0:height, 0:width]
    pixels = np.stack([xs * 4 % 256, ys * 6 % 256, 255 - xs * 4 % 256], -1).astype(np.uint8)
    pixels[:4, :4] = 0
    return pixels


def _dataset(root: Path, case: str, paired: bool = False) -> Path:
    """Two captioned targets (60x37 and 48x48) and what `case` adds: "colour-key" (a.png an RGB PNG
    keyed on black), "mask" (masks/a.png grey with transparency), "control" (control/ copies,
    a.png's at half size: 30x18, a pixel off its target's cover size); "clean" holds files of
    each kind read as before (b.png RGBA, a palette-transparent c.png, an opaque grey mask and,
    `paired`, controls of their targets' sizes)."""
    root.mkdir()
    a, b = _picture(60, 37), _picture(48, 48)
    Image.fromarray(a).save(root / "a.png", **({"transparency": (0, 0, 0)} if case == "colour-key" else {}))
    Image.fromarray(b).save(root / "b.png")
    for name in ("a", "b"):
        (root / f"{name}.txt").write_text(f"a picture {name}")
    if case in ("mask", "clean"):
        (root / "masks").mkdir()
        grey = Image.fromarray(a[..., 1])  # [37, 60]
        mask = Image.merge("LA", (grey, grey)) if case == "mask" else grey
        mask.save(root / "masks" / "a.png")
    paired = case == "control" or paired
    if paired:
        (root / "control").mkdir()
        size = (30, 18) if case == "control" else (60, 37)
        Image.fromarray(a).resize(size, Image.Resampling.LANCZOS).save(root / "control" / "a.png")
        Image.fromarray(255 - b).save(root / "control" / "b.png")
    if case == "clean":
        Image.fromarray(np.dstack([b, b[..., :1]])).save(root / "b.png")  # RGBA: composited as before
        palette = Image.fromarray(b).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
        palette.save(root / "c.png", transparency=0)  # a palette's tRNS: composited as before
        (root / "c.txt").write_text("a picture c")
        if paired:
            Image.fromarray(255 - b).save(root / "control" / "c.png")
    return root


def _config(make_config, data: Path, paired: bool) -> TrainConfig:
    family = "flux-kontext" if paired else "flux"
    return make_config(family, data_dir=str(data), aspect_buckets=False, steps=4)


def _old_checkpoint(cfg: TrainConfig, identity: dict) -> Path:
    """A checkpoint of `cfg`'s run (resolved, as a run records it) at step 1 as the code before the pixel rule wrote it: `identity`
    without the rule's keys (its state and LoRA files empty: the resume's checks read only
    identity.json before the models load)."""
    checkpoint = get_settings().outputs_dir / "run" / "checkpoints" / "step-000001"
    checkpoint.mkdir(parents=True)
    for name in CHECKPOINT_FILES:
        (checkpoint / name).touch()
    old = {k: v for k, v in identity.items() if k not in ("pixel_rule", "pixel_rule_files")}
    info = {"format": IDENTITY_FORMAT, "step": 1, "total_steps": 4, "identity": old,
            "config": cfg.model_dump(mode="json")}  # fmt: skip
    (checkpoint / INFO_FILE).write_text(json.dumps(info))
    return checkpoint


@pytest.mark.parametrize(
    ("case", "fix", "named"),
    [
        ("colour-key", "553", "a.png"),
        ("mask", "552", "a.png: mask masks/a.png"),
        ("control", "550", "a.png: control control/a.png"),
    ],
)
def test_an_old_checkpoint_over_files_read_otherwise_is_refused_naming_the_rule(
    make_config, tmp_path: Path, case: str, fix: str, named: str
) -> None:
    cfg = _config(make_config, _dataset(tmp_path / "data", case), paired=case == "control")
    settings = get_settings()
    run, identity = prepare_session(cfg, settings, "cpu", None)
    assert identity["pixel_rule"] == 2 and identity["pixel_rule_files"] == {fix: named}
    checkpoint = _old_checkpoint(run.cfg, identity)
    with pytest.raises(ConfigError) as err:
        prepare_session(cfg, settings, "cpu", checkpoint)
    (problem,) = err.value.problems
    assert problem.field == "pixel_rule"
    for said in (
        "pixel rule 1",
        "rule 2",
        f"RELIABILITY {fix}",
        named,
        "start a new run",
        "version that wrote it",
    ):
        assert said in problem.message
    # a checkpoint this code wrote (with the record) resumes
    info = json.loads((checkpoint / INFO_FILE).read_text())
    info["identity"] = identity
    (checkpoint / INFO_FILE).write_text(json.dumps(info))
    assert prepare_session(cfg, settings, "cpu", checkpoint)[1] == identity


@pytest.mark.parametrize("paired", [False, True], ids=["plain", "paired"])
def test_an_old_checkpoint_over_a_clean_dataset_resumes(make_config, tmp_path: Path, paired: bool) -> None:
    cfg = _config(make_config, _dataset(tmp_path / "data", "clean", paired), paired)
    settings = get_settings()
    run, identity = prepare_session(cfg, settings, "cpu", None)
    assert run.scan.items[0].mask is not None and (run.scan.items[0].controls != ()) == paired
    assert "pixel_rule" not in identity and "pixel_rule_files" not in identity  # the identity as before
    checkpoint = _old_checkpoint(run.cfg, identity)
    assert prepare_session(cfg, settings, "cpu", checkpoint)[1] == identity


def test_the_job_service_refuses_an_old_checkpoint_over_a_colour_key(make_config) -> None:
    """The server's resume (a job's: jobs/resume.validate_resume) refuses it the same way."""
    from lorastudio.jobs.resume import validate_resume

    settings = get_settings()
    settings.datasets_dir.mkdir(parents=True)
    cfg = _config(make_config, _dataset(settings.datasets_dir / "keyed", "colour-key"), paired=False)
    run, identity = prepare_session(cfg, settings, "cpu", None)
    checkpoint = _old_checkpoint(run.cfg, identity)
    with pytest.raises(ConfigError) as err:
        validate_resume(checkpoint.parent.parent, None, {}, settings, live_output_names=set())
    assert [p.field for p in err.value.problems] == ["pixel_rule"]
    assert "RELIABILITY 553" in err.value.problems[0].message


def test_a_colour_key_is_read_from_the_header_of_grey_and_rgb_pngs_only(tmp_path: Path) -> None:
    """`image_headers.png_colour_key` agrees with Pillow: a grey, 16-bit grey or RGB PNG's tRNS is a
    colour key (fix 553 reads it otherwise); a palette's tRNS, an alpha channel, none: not."""
    from lorastudio.data.image_headers import png_colour_key

    grey = np.arange(64, dtype=np.uint8).reshape(8, 8)
    cases = {
        "grey": (Image.fromarray(grey), {"transparency": 0}, True),
        "grey16": (Image.fromarray(grey.astype(np.uint16) * 257), {"transparency": 0}, True),
        "rgb": (Image.fromarray(np.dstack([grey] * 3)), {"transparency": (0, 0, 0)}, True),
        "palette": (Image.fromarray(grey).convert("P"), {"transparency": 0}, False),
        "la": (Image.merge("LA", (Image.fromarray(grey),) * 2), {}, False),
        "plain": (Image.fromarray(grey), {}, False),
    }
    for name, (img, options, keyed) in cases.items():
        img.save(tmp_path / f"{name}.png", **options)
        with Image.open(tmp_path / f"{name}.png") as opened:
            assert (opened.mode != "P" and "transparency" in opened.info) == keyed, name
        with open(tmp_path / f"{name}.png", "rb") as fh:
            assert png_colour_key(fh) is keyed, name


def test_only_a_colour_keyed_image_takes_the_new_pixel_rule_in_its_latent_key(tmp_path: Path) -> None:
    """An upgrade re-encodes only what fix 553 reads otherwise: a colour-keyed PNG's latent cache
    key holds the new pixel rule, every other image's the rule its shards were written under
    (the old disk cache stays read: tests/upgrade's "none written anew")."""
    from lorastudio.data.images import DECODE_RULES, PIXEL_RULES
    from lorastudio.data.pixel_rule import decode_rule
    from lorastudio.data.scan import scan_dataset

    scan = scan_dataset(_dataset(tmp_path / "data", "colour-key"), resolution=32, multiple=16)
    rules = {item.path.name: decode_rule(item) for item in scan.items}
    assert rules == {"a.png": PIXEL_RULES, "b.png": DECODE_RULES}
    assert PIXEL_RULES != DECODE_RULES


def test_session_32s_fixes_take_pixel_rule_3_and_refuse_only_older_checkpoints(tmp_path: Path) -> None:
    """Pixel rule 3 (RELIABILITY 1036, 1038): a strip enlarged far beyond its bucket (cut from a
    window now) and a 2-bit grey PNG's colour key are named by read_otherwise, their latent key
    takes the new rule, and the run records rule 3: a rule-2 checkpoint over them is refused
    naming the fix; over files of rule 2's fixes alone (an 8-bit colour key) it still resumes."""
    import struct
    import zlib

    from lorastudio.data.images import DECODE_RULES, PIXEL_RULES
    from lorastudio.data.pixel_rule import decode_rule, read_otherwise
    from lorastudio.data.scan import scan_dataset
    from lorastudio.training.resume.identity_rules import pixel_problems, pixel_record

    root = _dataset(tmp_path / "data", "colour-key")
    Image.new("RGB", (1, 600), (90, 20, 200)).save(root / "strip.png")  # 16x9600 to cover 16x64
    raw = b"".join(b"\0" + bytes([0b11000110, 0b01000000]) for _ in range(3))  # 2-bit grey: 3 0 1 2 1
    chunks = [(b"IHDR", struct.pack(">IIBBBBB", 5, 3, 2, 0, 0, 0, 0)), (b"tRNS", b"\0\1")]
    chunks += [(b"IDAT", zlib.compress(raw)), (b"IEND", b"")]
    (root / "low.png").write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + b"".join(
            struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d)) for t, d in chunks
        )
    )
    for name in ("strip", "low"):
        (root / f"{name}.txt").write_text(name)
    scan = scan_dataset(root, resolution=32, multiple=16)
    found = read_otherwise(scan)
    assert found == {"553": "a.png", "1036": "strip.png", "1038": "low.png"}
    rules = {item.path.name: decode_rule(item) for item in scan.items}
    assert rules == {
        "a.png": PIXEL_RULES,
        "b.png": DECODE_RULES,
        "strip.png": PIXEL_RULES,
        "low.png": PIXEL_RULES,
    }
    current = pixel_record(found)
    assert current["pixel_rule"] == 3
    (problem,) = pixel_problems({"pixel_rule": 2}, current)
    assert "RELIABILITY 1036" in problem.message and "strip.png" in problem.message
    assert "RELIABILITY 1038" in problem.message and "RELIABILITY 553" not in problem.message
    assert pixel_problems({"pixel_rule": 3}, current) == []
    rule_two = pixel_record({"553": "a.png"})
    assert rule_two["pixel_rule"] == 2  # as session 27's code recorded it
    assert pixel_problems({"pixel_rule": 2}, rule_two) == []
    assert len(pixel_problems({}, rule_two)) == 1  # rule 1: refused as before
