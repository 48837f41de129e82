"""Datasets: discovery, captions, image checks and crops, aspect buckets, safe paths.

This package never imports torch: the job service and the API validate datasets with it.
Typical use (the engine):

    scan = scan_dataset(folder, resolution=1024, multiple=64, trigger_word="sks")
    sampler = BucketBatchSampler([it.bucket for it in scan.items], batch_size=4, seed=42)
    for batch in sampler:
        crops = [load_crop(scan.items[i], random_crop=False, flip=False, rng=rng) for i in batch]
"""

from lorastudio.data.buckets import make_buckets, nearest_bucket, resolution_problems
from lorastudio.data.captions import CaptionSource, apply_trigger, choose_caption
from lorastudio.data.crop import CroppedImage, load_crop, resized_size
from lorastudio.data.discovery import IMAGE_EXTENSIONS, is_image_name
from lorastudio.data.images import ImageInfo, probe_image
from lorastudio.data.items import DatasetScan, ImageItem
from lorastudio.data.paths import new_name, resolve_dataset_dir, safe_component
from lorastudio.data.sampler import BucketBatchSampler
from lorastudio.data.scan import dataset_fingerprint, scan_dataset

__all__ = [
    "IMAGE_EXTENSIONS",
    "BucketBatchSampler",
    "CaptionSource",
    "CroppedImage",
    "DatasetScan",
    "ImageInfo",
    "ImageItem",
    "apply_trigger",
    "choose_caption",
    "dataset_fingerprint",
    "is_image_name",
    "load_crop",
    "make_buckets",
    "nearest_bucket",
    "new_name",
    "probe_image",
    "resized_size",
    "resolution_problems",
    "resolve_dataset_dir",
    "safe_component",
    "scan_dataset",
]
