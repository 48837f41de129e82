"""Phase 2 with latent_cache = "disk": the VAE posteriors on disk, reused by later runs.

Each crop/flip variant of an image is one safetensors shard (data/disk_cache.py: layout, key,
listing): its posterior mean and std [C, h, w] fp32 and, for a paired sample, its control latents:
"controls" [N, C, h, w] where they take their target's crop (control_resolution "target"), else
one "control_<n>" [C, h_n, w_n] per control at its own size (ImageItem.control_sizes; the key
holds the sizes and the rule: data/latent_keys.control_parts). The variants are drawn exactly as training/inputs/latents.build_latent_cache draws them
(the same `rng` draws, flips then crop offsets per image, without decoding), so the keys are known
before any image is opened and `rng` ends where the in-memory cache leaves it. An image whose
variants all have a valid shard is neither decoded nor encoded; the others are encoded (all their
variants in one VAE call, as the in-memory cache does) and their shards written (staged, then
renamed). A shard that cannot be read, is truncated, has the wrong shapes or dtype (of its
latents or of its controls), holds a non-finite latent, fails its crc32 or is not a regular
file below real folders (a link, a FIFO, a folder planted there: data/cache_io.py) is
re-encoded and rewritten. A run whose cache folder cannot be made (a link or a file where it
goes) is refused (CacheError naming it: disk_cache.prepare_cache_folder). A shard that cannot be written (disk full, the cache cleared under the
run) is kept in RAM for this run instead.

`DiskLatents.sample` draws like CachedLatents.sample (one variant pick per index, then
mean + std * randn from the same generator), reading only the batch's shards (read whole, one at a time,
through data/cache_io.py: no link followed): host RAM holds the batch, not the set. Masks are cut from the mask file
per sample (data.masks.mask_crop), as the cache would have stored them.

A data-parallel run shares the images to encode out round-robin; each rank writes the shards it
encoded, and after a barrier every rank reads them (one host: the ranks share the disk).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from lorastudio.data.disk_cache import shard_path
from lorastudio.data.latent_keys import Variant, encoder_parts, plan_variants, replay_rng
from lorastudio.training.distributed import barrier, gather_round, group_context, round_robin
from lorastudio.training.events import Emit, Preparing
from lorastudio.training.inputs.cache_shards import (  # the shards' I/O, shared with the text cache
    _crc as _crc,
)
from lorastudio.training.inputs.cache_shards import (
    read_shard,
    write_shard,
)
from lorastudio.training.inputs.cache_shards import (
    read_shard_entry as read_shard_entry,
)
from lorastudio.training.inputs.latents import (
    ItemControls,
    LatentBatch,
    _draw,
    batch_mask,
    encode_controls,
    stack_controls,
)

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.data import ImageItem
    from lorastudio.families.base import Family

KIND = "latents"
CHECK_THREADS = 8  # shards checked at once before a run (build_disk_latents)
DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}  # as the preflight names them


def control_tensors(controls: ItemControls, k: int) -> dict[str, torch.Tensor]:
    """Variant k's control latents as a shard stores them: {"controls": [N, C, h, w]} from
    [V, N, C, h, w], or {"control_<n>": [C, h_n, w_n]} from N slots [V, C, h_n, w_n]."""
    if isinstance(controls, torch.Tensor):
        return {"controls": controls[k].contiguous()}
    return {f"control_{n}": slot[k].contiguous() for n, slot in enumerate(controls)}


def shard_controls(tensors: dict[str, torch.Tensor]) -> ItemControls | None:
    """A shard's control latents (control_tensors' inverse, one variant): [N, C, h, w], N slots
    [C, h_n, w_n], or None for a shard without controls."""
    if "controls" in tensors:
        return tensors["controls"]
    slots = sorted(
        (int(name.removeprefix("control_")), t) for name, t in tensors.items() if name.startswith("control_")
    )
    return tuple(t for _, t in slots) or None


def control_shapes(item: ImageItem, channels: int, scale: int) -> dict[str, tuple[int, ...]]:
    """The control tensors a valid shard of `item` holds and their shapes (control_tensors'
    layout, latent channels `channels`, VAE scale `scale`); {} for an item without controls."""
    if not item.controls:
        return {}
    if not item.control_sizes:
        w, h = item.bucket
        return {"controls": (len(item.controls), channels, h // scale, w // scale)}
    return {f"control_{n}": (channels, h // scale, w // scale) for n, (w, h) in enumerate(item.control_sizes)}


class DiskLatents:
    """The latent source of a disk-cached run: reads each batch's shards (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        model: str,
        items: Sequence[ImageItem],
        variants: list[list[Variant]],
        scale: int,
        kept: dict[str, dict[str, torch.Tensor]],
    ):
        self.root, self.model, self.items, self.variants, self.scale = (
            root,
            model,
            list(items),
            variants,
            scale,
        )
        self.kept = kept  # shards that could not be written: key -> tensors
        self.encoded = 0  # images encoded by this run (the others' shards were on disk)
        self.unwritten: list[str] = []  # "<shard>: <reason>" of this rank's refused writes

    def unwritten_note(self) -> str | None:
        """A RunWarning's text when shards could not be written (disk full, read-only: they are
        in RAM for this run, and the next run encodes them again), else None (RELIABILITY 1742:
        said nowhere, while RAM took what the disk cache was chosen to hold)."""
        if not self.kept:
            return None
        held = sum(t.numel() * t.element_size() for s in self.kept.values() for t in s.values())
        why = f" ({self.unwritten[0]})" if self.unwritten else ""
        return (
            f"{len(self.kept)} latent shard(s) could not be written to the disk cache {self.root / KIND / self.model}"
            f"{why}: this run keeps them in RAM ({held / 2**20:.2f} MB) and the next run encodes them again; "
            "free space there (lorastudio cache prune), or set LORASTUDIO_CACHE_DIR to a writable disk"
        )

    def _tensors(self, key: str) -> dict[str, torch.Tensor]:
        if key in self.kept:
            return self.kept[key]
        from lorastudio.errors import DatasetError

        found = read_shard(shard_path(self.root, KIND, self.model, key))
        if found is None:
            raise DatasetError(
                f"latent cache shard {key} vanished or was damaged during the run",
                [
                    f"{shard_path(self.root, KIND, self.model, key)}: unreadable; restart the run (it re-encodes)"
                ],
            )
        return found

    def sample(
        self, indices: Sequence[int], generator: torch.Generator, dtype: torch.dtype, device: torch.device
    ) -> LatentBatch:
        """One latent per index from a uniformly chosen variant (CachedLatents.sample's draws)."""
        from lorastudio.data.masks import mask_crop

        picks = [int(torch.randint(len(self.variants[i]), (1,), generator=generator)) for i in indices]
        chosen = [self.variants[i][k] for i, k in zip(indices, picks, strict=True)]
        shards = [self._tensors(v.key) for v in chosen]
        mean = torch.stack([s["mean"] for s in shards])  # [B, C, h, w]
        std = torch.stack([s["std"] for s in shards])  # [B, C, h, w]
        latents = _draw(mean, std, generator).to(device=device, dtype=dtype)  # [B, C, h, w]
        picked = [shard_controls(s) for s in shards]
        controls = None
        if picked[0] is not None:  # [B, N, C, h, w], or N slots [B, C, h_n, w_n] (stack_controls)
            controls = stack_controls([c for c in picked if c is not None], device, dtype)
        masks = [
            None
            if self.items[i].mask is None
            else torch.from_numpy(mask_crop(self.items[i], v.crop_top_left, v.flip, self.scale))
            for i, v in zip(indices, chosen, strict=True)
        ]
        bw, bh = self.items[indices[0]].bucket
        return LatentBatch(
            latents,
            [v.original_size for v in chosen],
            [v.crop_top_left for v in chosen],
            (bh, bw),
            controls,
            batch_mask(masks, latents),
        )


def _replayed(variant: Variant) -> np.random.Generator:
    """A copy of the rng as it was before the variant's crop draws (data.load_crop draws them again)."""
    if variant.rng_state is None:
        raise ValueError("the variant's rng was dropped: the cache is built")
    return replay_rng(variant.rng_state)


def build_disk_latents(
    family: Family,
    vae: Any,
    items: Sequence[ImageItem],
    cfg: TrainConfig,
    rng: np.random.Generator,
    *,
    root: Path,
    model: str,
    encoder: dict[str, Any],
    device: torch.device,
    emit: Emit,
    check_stop: Callable[[], None],
) -> tuple[DiskLatents, int]:
    """Plan every variant (plan_variants), verify the shards on disk, encode and write the images
    with any missing or damaged one. Returns the source and how many images were encoded.
    Emits Preparing("latents", done, total) as build_latent_cache does; calls check_stop()
    before each round."""
    from lorastudio.data import load_crop
    from lorastudio.data.control_sizing import rule_area

    area = rule_area(cfg.control_resolution)  # the int control_resolution's, else None
    variants = plan_variants(items, cfg, rng, encoder)
    spec = family.spec

    def needs_encoding(n: int) -> bool:
        item = items[n]
        shape = (
            spec.latent_channels,
            item.bucket[1] // spec.vae_scale_factor,
            item.bucket[0] // spec.vae_scale_factor,
        )
        controls = control_shapes(item, spec.latent_channels, spec.vae_scale_factor)
        return any(
            read_shard(shard_path(root, KIND, model, v.key), shape, shapes=controls) is None
            for v in variants[n]
        )

    # every shard is read whole and checked (crc32, shapes, finite) before the run trusts it: at
    # 10,000 images x 4 variants that is the whole cache (~50 GB at 1024 px), read by CHECK_THREADS
    # at once (file reads, crc32 and safetensors' load release the GIL; one shard each in RAM)
    with ThreadPoolExecutor(max_workers=CHECK_THREADS, thread_name_prefix="shard-check") as pool:
        todo = [n for n, bad in enumerate(pool.map(needs_encoding, range(len(items)))) if bad]
    ctx = group_context()
    todo = gather_round(todo, ctx)[0]  # rank 0's view (a rank may write before another has looked)
    kept: dict[str, dict[str, torch.Tensor]] = {}
    unwritten: list[str] = []  # this rank's refused writes, "<shard>: <reason>"
    total, every = len(items), max(1, len(todo) // 100)
    emit(Preparing(phase="latents", done=total - len(todo), total=total))
    for members, mine in round_robin(len(todo), ctx):
        check_stop()
        failed = None
        if mine is not None:
            n = todo[mine]
            flips = [v.flip for v in variants[n]]
            crops = [
                load_crop(items[n], random_crop=cfg.random_crop, flip=v.flip, rng=_replayed(v))
                for v in variants[n]
            ]
            pixels = torch.from_numpy(np.stack([c.pixels for c in crops])).to(device)  # [K, 3, H, W]
            with torch.no_grad():
                mean, std = family.encode_pixels(vae, pixels)  # [K, C, h, w] each, fp32
                controls = encode_controls(
                    family, vae, items[n], crops, flips, device, area
                )  # [K, N, C, h, w], or N slots [K, C, h_n, w_n]
            failed = {}
            for k, v in enumerate(variants[n]):
                tensors = {
                    "mean": mean[k].detach().float().cpu().contiguous(),
                    "std": std[k].detach().float().cpu().contiguous(),
                }
                if controls is not None:
                    tensors.update(control_tensors(controls, k))
                if not write_shard(shard_path(root, KIND, model, v.key), tensors, problems=unwritten):
                    failed[v.key] = tensors
        for result in gather_round(failed, ctx)[: len(members)]:
            kept.update(result or {})
        done = members[-1] + 1
        if done % every < len(members) or done == len(todo):
            emit(Preparing(phase="latents", done=total - len(todo) + done, total=total))
    barrier(ctx)
    held = [[dataclasses.replace(v, rng_state=None) for v in vs] for vs in variants]  # the rngs are done with
    source = DiskLatents(root, model, items, held, spec.vae_scale_factor, kept)
    source.unwritten = unwritten
    return source, len(todo)


def hold_latent_entry(cfg: TrainConfig, root: Path, holds: list[int] | None) -> str:
    """Make and hold the latent cache entry of the run's VAE (its content fingerprint, returned):
    data/cache_io.hold_entry, the descriptor appended to `holds` (closed at the run's end).
    Raises CacheError naming a link or a file in the way."""
    from lorastudio.data.cache_io import hold_entry, prepare_cache_folder
    from lorastudio.data.disk_cache import component_fingerprint
    from lorastudio.families.single_file import model_source

    model = component_fingerprint(model_source(cfg), "vae", cfg.revision)
    prepare_cache_folder(root, KIND, model)  # CacheError naming a link or a file in the way
    held = hold_entry(root, KIND, model)  # before any shard is looked at: a prune keeps the entry
    if held is not None and holds is not None:
        holds.append(held)
    return model


def hold_latent_entry_early(cfg: TrainConfig, root: Path, holds: list[int] | None) -> None:
    """hold_latent_entry with the cache's readers lock, before the run's first encode: a prune
    meanwhile (its text encode may take minutes) would otherwise remove the entry the run is
    about to read, and it would encode every image again. A VAE not on disk yet (a hub id the
    loader downloads) is not held: its fingerprint is known once it is there (open_disk_latents)."""
    from lorastudio.data.disk_cache import component_on_disk
    from lorastudio.families.single_file import model_source

    if component_on_disk(model_source(cfg), "vae", cfg.revision):
        hold_latent_entry(cfg, root, holds)


def open_disk_latents(
    run: Any,
    vae: Any,
    rng: np.random.Generator,
    root: Path,
    *,
    emit: Emit,
    check_stop: Callable[[], None],
    holds: list[int] | None = None,
) -> DiskLatents:
    """build_disk_latents for a prepared run (training/preflight.PreparedRun): the shards of
    its base model's VAE (its content fingerprint), its dtype and device kind, under `root`.
    The entry is held (hold_latent_entry, again: the VAE's files are now on disk, a hub id's
    fingerprint may have changed with its download) until the descriptor appended to `holds`
    closes."""
    cfg, spec = run.cfg, run.family.spec
    model = hold_latent_entry(cfg, root, holds)
    dtype = str(run.dtype).removeprefix("torch.")
    encoder = encoder_parts(spec, model, DTYPE_NAMES.get(dtype, dtype), run.device.type)
    source, encoded = build_disk_latents(
        run.family,
        vae,
        run.scan.items,
        cfg,
        rng,
        root=root,
        model=model,
        encoder=encoder,
        device=run.device,
        emit=emit,
        check_stop=check_stop,
    )
    source.encoded = encoded
    return source
