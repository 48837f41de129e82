"""Issue 29 part 5: `no_upscale` trains a small image at the largest bucket inside its own size
(never enlarged, never larger than its regular bucket), and the preflight's warning names the
images a run would enlarge by more than 2x (the first ten and a count)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from lorastudio.data import make_buckets, scan_dataset
from lorastudio.data.buckets import choose_bucket, fitting_bucket, upscale_factor
from lorastudio.data.upscaling import upscale_warning, upscaled_images


def test_choose_bucket_keeps_the_regular_bucket_unless_it_would_enlarge() -> None:
    buckets = make_buckets(128, 16)
    assert choose_bucket(64, 64, buckets, 16) == (128, 128)  # the default: upscaled 2x
    assert choose_bucket(64, 64, buckets, 16, no_upscale=True) == (64, 64)
    assert choose_bucket(300, 300, buckets, 16, no_upscale=True) == (128, 128)  # large enough: unchanged
    assert choose_bucket(50, 90, buckets, 16, no_upscale=True) == (48, 80)
    assert choose_bucket(40, 190, buckets, 16, no_upscale=True, square=False) == (32, 128)
    assert choose_bucket(70, 90, [(128, 128)], 16, no_upscale=True, square=True) == (64, 64)
    for w, h in [(7, 9), (40, 190), (33, 500), (127, 128), (500, 20)]:
        bucket = choose_bucket(w, h, buckets, 16, no_upscale=True)
        regular = choose_bucket(w, h, buckets, 16)
        assert (
            bucket[0] % 16 == 0 and bucket[1] % 16 == 0 and bucket[0] * bucket[1] <= regular[0] * regular[1]
        )
        assert max(bucket) / min(bucket) <= 4.0
        if w >= 16 and h >= 16:
            assert upscale_factor(w, h, bucket) <= 1.0, (w, h, bucket)


def test_fitting_bucket_is_at_least_one_multiple() -> None:
    assert fitting_bucket(7, 9, (128, 128), 16) == (16, 16)


def _save(folder: Path, name: str, size: tuple[int, int]) -> None:
    Image.new("RGB", size, "red").save(folder / name)


def test_the_scan_buckets_small_images_at_their_size_and_the_warning_names_them(tmp_path: Path) -> None:
    folder = tmp_path / "tiny"
    folder.mkdir()
    _save(folder, "big.png", (256, 256))
    _save(folder, "half.png", (64, 64))  # 2x: not warned (only above 2x)
    for i in range(12):
        _save(folder, f"small{i:02d}.png", (40 + i, 40 + i))
    scan = scan_dataset(folder, resolution=128, multiple=16, trigger_word="sks")
    assert {i.bucket for i in scan.items} == {(128, 128)}
    warning = upscale_warning(scan.items, no_upscale=False)
    assert warning is not None
    assert warning.startswith(
        "12 image(s) would be upscaled by more than 2x to fill their bucket: small00.png (3.2x)"
    )
    named = [n for n, _ in upscaled_images(scan.items)][:10]
    assert named == [f"small{i:02d}.png" for i in range(10)]
    assert all(n in warning for n in named) and "small10.png" not in warning
    assert warning.endswith(
        "and 2 more; set no_upscale = true to train them at their own size, or use larger images"
    )

    kept = scan_dataset(folder, resolution=128, multiple=16, trigger_word="sks", no_upscale=True)
    buckets = {i.path.name: i.bucket for i in kept.items}
    assert buckets["big.png"] == (128, 128) and buckets["half.png"] == (64, 64)
    assert buckets["small00.png"] == (32, 32) and buckets["small11.png"] == (48, 48)
    assert upscale_warning(kept.items, no_upscale=True) is None
