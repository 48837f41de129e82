"""The result types of a dataset scan: one ImageItem per image, and the DatasetScan report."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from lorastudio.data.captions import CaptionSource
from lorastudio.data.safe_open import FolderId


@dataclass(frozen=True)
class MaskRef:
    """Where an image's loss mask comes from (data/masks.py): a grey image `path` of the dataset's
    masks/ folder (opened from `folder_id`), or the image's own alpha channel (`alpha`: path is
    the image)."""

    path: Path
    folder_id: FolderId | None = None
    alpha: bool = False


@dataclass(frozen=True)
class ImageItem:
    """One training image.

    caption: final caption (trigger word applied), never empty after a successful scan.
    width, height: size after EXIF transpose. bucket: (bucket_width, bucket_height) in pixels.
    controls: the control (reference) images of a paired sample, in slot order (data/pairs.py).
    folder_id: (device, inode) of the dataset folder the scan validated; the image is opened
    only from that folder (see data.safe_open), None when unchecked; `control_folder_ids` the
    same for each control's folder (controls are opened the same way).
    """

    path: Path
    caption: str
    caption_source: CaptionSource
    width: int
    height: int
    bucket: tuple[int, int]
    controls: tuple[Path, ...] = ()
    folder_id: FolderId | None = None
    control_folder_ids: tuple[FolderId, ...] = ()  # the folder identity of each control, in order
    mask: MaskRef | None = None  # the loss mask (data/masks.py); None: every pixel counts fully


@dataclass(frozen=True)
class DatasetScan:
    """A validated dataset: its items (sorted by file name), what was not used, and its
    fingerprint (changes when any image byte, file name or final caption changes)."""

    root: Path
    items: list[ImageItem]
    dropped: list[tuple[str, str]]  # (file name, reason): not used, listed for the preflight report
    fingerprint: str
    control_sources: tuple[str, ...] = ()  # where the controls came from (data/pairs.py)

    def bucket_histogram(self) -> dict[str, int]:
        """Images per bucket: "WxH" -> count, buckets ordered by (width, height)."""
        counts = Counter(item.bucket for item in self.items)
        return {f"{w}x{h}": counts[(w, h)] for (w, h) in sorted(counts)}

    def controls_per_image(self) -> int:
        """The most control images of a sample (0 for a text-to-image dataset); samples may
        differ, a mixed dataset holds samples without any (data/pairs.py)."""
        return max((len(item.controls) for item in self.items), default=0)

    def batch_keys(self) -> list[tuple[int, int, int]]:
        """Per item what the samples of one batch share: (bucket width, height, control count)
        (a batch stacks latents and controls: data.BucketBatchSampler groups by this)."""
        return [(item.bucket[0], item.bucket[1], len(item.controls)) for item in self.items]

    def batch_histogram(self) -> dict[str, int]:
        """Images per batch group: "WxH" -> count for a dataset with one control count (as
        bucket_histogram), else "WxH+N" (N controls) -> count."""
        counts = Counter(self.batch_keys())
        one = len({k for _, _, k in counts}) <= 1
        return {f"{w}x{h}" if one else f"{w}x{h}+{k}": counts[(w, h, k)] for (w, h, k) in sorted(counts)}

    def captions(self) -> list[str]:
        """The unique final captions, sorted (what the conditioning phase encodes)."""
        return sorted({item.caption for item in self.items})
