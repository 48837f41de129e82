"""The result types of a dataset scan: one ImageItem per image, and the DatasetScan report."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lorastudio.data.captions import CaptionSource
from lorastudio.data.mix import MixEntry
from lorastudio.data.safe_open import FolderId


@dataclass(frozen=True)
class MaskRef:
    """Where an image's loss mask comes from (data/masks.py): a grey image `path` of the dataset's
    masks/ folder (opened from `folder_id`), or the image's own alpha channel (`alpha`: path is
    the image)."""

    path: Path
    folder_id: FolderId | None = None
    alpha: bool = False
    sha256: str = ""  # a masks/ file's bytes as the scan read them (data.scan.check_unchanged)
    decoded: bool = False  # a masks/ file's every pixel decoded (as ImageItem.decoded)


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
    control_dims: tuple[tuple[int, int], ...] = ()  # each control's (width, height) after EXIF transpose
    # the (width, height) each control trains at (data/control_sizing.py, set by data.run_scan
    # for the run's control_resolution); empty: each control takes its target's bucket ("target")
    control_sizes: tuple[tuple[int, int], ...] = ()
    entry: int = 0  # index of the run's dataset entry the image came from (DatasetScan.entries)
    resolution: int = 0  # the training side its bucket was chosen for (data/resolutions.py; 0: unset)
    mask: MaskRef | None = None  # the loss mask (data/masks.py); None: every pixel counts fully
    # sha256 of the image's bytes as the scan read them ("": not recorded), and of each control's;
    # every decode for training checks them (data.scan.check_unchanged): a run never trains on an
    # image changed since
    sha256: str = ""
    control_sha256: tuple[str, ...] = ()
    # every pixel decoded by this scan or an earlier check (data/decoded.py); False: the header
    # and chunk check alone (a check past its time budget): the run's own scan decodes it
    decoded: bool = False
    controls_decoded: tuple[bool, ...] = ()  # the same for each control, in slot order


@dataclass(frozen=True)
class DatasetScan:
    """A validated dataset: its items (sorted by file name), what was not used, and its
    fingerprint (changes when any image byte, file name or final caption changes)."""

    root: Path
    items: list[ImageItem]
    dropped: list[tuple[str, str]]  # (file name, reason): not used, listed for the preflight report
    fingerprint: str
    control_sources: tuple[str, ...] = ()  # where the controls came from (data/pairs.py)
    # the run's parallel control folders (control_dirs, resolved, in the config's order): where a
    # sample prompt's `controls` may also name a file (data/sample_refs.py)
    control_dirs: tuple[Path, ...] = ()
    # the run's dataset entries (data/entries.py), in order; ImageItem.entry indexes them. Empty
    # for a scan of one folder made directly with scan_dataset (one entry, sampled plainly).
    entries: tuple[MixEntry, ...] = ()

    def bucket_histogram(self) -> dict[str, int]:
        """Images per bucket: "WxH" -> count, buckets ordered by (width, height)."""
        counts = Counter(item.bucket for item in self.items)
        return {f"{w}x{h}": counts[(w, h)] for (w, h) in sorted(counts)}

    def controls_per_image(self) -> int:
        """The most control images of a sample (0 for a text-to-image dataset); samples may
        differ, a mixed dataset holds samples without any (data/pairs.py)."""
        return max((len(item.controls) for item in self.items), default=0)

    def batch_keys(self) -> list[tuple[int, ...]]:
        """Per item what the samples of one batch share: (bucket width, height, control count)
        followed by each control's trained (width, height) where controls are sized on their
        own (ImageItem.control_sizes) (a batch stacks latents and each control slot:
        data.BucketBatchSampler groups by this)."""
        return [
            (
                item.bucket[0],
                item.bucket[1],
                len(item.controls),
                *(s for size in item.control_sizes for s in size),
            )
            for item in self.items
        ]

    def batch_histogram(self) -> dict[str, int]:
        """Images per batch group: "WxH" -> count for a dataset with one control count (as
        bucket_histogram), else "WxH+N" (N controls) -> count; control sizes of their own add
        "+cWxH" per control."""
        counts = Counter(self.batch_keys())
        one = len({k[2] for k in counts}) <= 1
        out: dict[str, int] = {}
        for key in sorted(counts):
            name = f"{key[0]}x{key[1]}" if one else f"{key[0]}x{key[1]}+{key[2]}"
            name += "".join(f"+c{key[i]}x{key[i + 1]}" for i in range(3, len(key), 2))
            out[name] = out.get(name, 0) + counts[key]
        return out

    def controls_sized(self) -> bool:
        """Whether the controls train at sizes of their own (not their targets' buckets)."""
        return any(item.control_sizes for item in self.items)

    def images(self) -> list[ImageItem]:
        """The items less the copies of an image at its other resolutions (data/resolutions.py):
        one per (entry, file), in order. What "images used" counts."""
        seen: set[tuple[int, Path]] = set()
        out = []
        for item in self.items:
            if (item.entry, item.path) not in seen:
                seen.add((item.entry, item.path))
                out.append(item)
        return out

    def labels(self) -> tuple[str, ...]:
        """The entries' labels when the scan joins several (reports then name an image
        "label/file", item_name: two entries may hold files of the same name); else ()."""
        return tuple(e.label for e in self.entries) if len(self.entries) > 1 else ()

    def captions(self) -> list[str]:
        """The unique final captions, sorted (what the conditioning phase encodes)."""
        return sorted({item.caption for item in self.items})


def item_name(item: ImageItem, labels: Sequence[str] = ()) -> str:
    """How reports name an image: its file name, prefixed "label/" by its entry's label when
    `labels` (DatasetScan.labels) are given."""
    return f"{labels[item.entry]}/{item.path.name}" if labels else item.path.name


def batch_key_pixels(key: tuple[int, ...]) -> int:
    """The pixels one sample of a batch group (DatasetScan.batch_keys) puts in the sequence: its
    target's plus its controls' (their own sizes where given, else the target's each)."""
    w, h, n = key[:3]
    sized = key[3:]
    if not sized:
        return w * h * (1 + n)
    return w * h + sum(sized[i] * sized[i + 1] for i in range(0, len(sized), 2))
