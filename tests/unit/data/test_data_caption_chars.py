"""A caption file holding an invisible or text-direction character is named by the run's dataset
warnings (data/caption_chars.py, RELIABILITY 1035): trained as written, it was said nowhere."""

from __future__ import annotations

from pathlib import Path

from lorastudio.config import TrainConfig
from lorastudio.data import scan_dataset
from lorastudio.data.scan_warnings import scan_warnings


def test_a_caption_with_a_zero_width_space_or_an_override_is_named(tmp_path: Path, make_image) -> None:
    for name, caption in (
        ("a", "a\u200bcat"),
        ("b", "a \u202edog"),
        ("c", "\u05e9\u05dc\u05d5\u05dd, two\nlines\tand a tab"),  # Hebrew letters, a line break, a tab: fine
    ):
        make_image(tmp_path / f"{name}.png")
        (tmp_path / f"{name}.txt").write_text(caption, encoding="utf-8")
    scan = scan_dataset(tmp_path, resolution=64, multiple=16)
    cfg = TrainConfig.model_validate({"family": "flux", "base_model": "/unused", "data_dir": str(tmp_path)})
    (said,) = [w for w in scan_warnings(scan, cfg, None) if "invisible" in w]
    assert said == (
        "2 caption(s) hold invisible or text-direction characters, trained as written: a.png (U+200B ZERO "
        "WIDTH SPACE); b.png (U+202E RIGHT-TO-LEFT OVERRIDE); remove them (a bulk caption edit's find takes "
        "them) or the model learns text no prompt holds"
    )
