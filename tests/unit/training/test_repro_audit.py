"""Session 38 reproducibility audit (slow): after this session's changes to the maths paths (LoHa /
LoKr forward without a global draw, validation noise from validation_seed, the disk cache's RAM
fallback, EMA preview pairs across resumes, masks), the same config twice writes the same run
folder bit for bit (every file, checkpoints included: tensors, metadata and JSON but the time
they were written), and a run stopped with save at step k and resumed writes the uninterrupted
run's folder, with the RAM and the disk latent cache and with the disk cache full at the resume.
The default suite keeps each piece alone (test_resume, test_validation_seed, test_lycoris_forward,
test_latent_disk_cache, test_ema_preview_files); this file runs them together (5-65 s a case)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open
from safetensors.torch import load_file

from lorastudio.data.disk_cache import cache_root, clear_cache
from lorastudio.settings import get_settings
from lorastudio.training.loop import train
from stop_at import stop_at

pytestmark = pytest.mark.slow

PROGRESS = ("step", "total_steps", "epoch", "loss", "avg_loss", "lr", "grad_norm", "skipped_steps")
DATED = {"modelspec.date", "lorastudio.created_at"}  # when a LoRA file was written
JSON_DATED = {"created_at"}  # when a sidecar or checkpoint identity was written


def _files(run_dir: Path) -> dict[str, Path]:
    """Every file of the run folder, by its path with the run's name replaced."""
    return {
        str(p.relative_to(run_dir)).replace(run_dir.name, "RUN"): p
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


def _metadata(path: Path, name: str) -> dict[str, str]:
    with safe_open(str(path), "pt") as f:
        found = f.metadata() or {}
    return {k: v.replace(name, "RUN") for k, v in found.items() if k not in DATED}


def _json(path: Path, name: str) -> object:
    found = json.loads(path.read_text(encoding="utf-8").replace(name, "RUN"))
    return {k: v for k, v in found.items() if k not in JSON_DATED} if isinstance(found, dict) else found


def _differences(one: Path, two: Path, skip: set[str] = frozenset()) -> list[str]:
    """What differs between two run folders, file by file ([] when every file but `skip` is the
    same: tensors and metadata of safetensors files and JSON but the dates, other files' bytes)."""
    a, b = _files(one), _files(two)
    out = [f"only in {one.name}: {k}" for k in sorted(set(a) - set(b) - skip)]
    out += [f"only in {two.name}: {k}" for k in sorted(set(b) - set(a) - skip)]
    for key in sorted((set(a) & set(b)) - skip):
        x, y = a[key], b[key]
        if x.read_bytes() == y.read_bytes():
            continue
        if key.endswith(".safetensors"):
            ta, tb = load_file(str(x)), load_file(str(y))
            if ta.keys() != tb.keys() or not all(torch.equal(ta[k], tb[k]) for k in ta):
                out.append(f"{key}: tensors")
            if _metadata(x, one.name) != _metadata(y, two.name):
                out.append(f"{key}: metadata")
        elif key.endswith(".json"):
            if _json(x, one.name) != _json(y, two.name):
                out.append(f"{key}: json")
        elif key.endswith(".pt"):
            out.extend(
                f"{key}: {where}"
                for where in _state_differences(
                    torch.load(x, weights_only=False), torch.load(y, weights_only=False)
                )
            )
        else:
            out.append(f"{key}: bytes")
    return out


def _state_differences(a: object, b: object, at: str = "") -> list[str]:
    """Where two loaded checkpoint states differ (tensors bitwise, other values equal)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        same = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
        return [] if same and a.shape == b.shape and torch.equal(a, b) else [at]
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{at} keys {sorted(map(str, set(a) ^ set(b)))}"]
        return [d for k in a for d in _state_differences(a[k], b[k], f"{at}.{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{at} length"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _state_differences(x, y, f"{at}[{i}]")
        ]
    return [] if a == b else [f"{at}: {a!r:.80} != {b!r:.80}"]


def _checkpoint_losses(run_dir: Path, stop: int) -> dict[int, list[float]]:
    """Each checkpoint's losses read from losses.bin (one segment per session, so the file's bytes
    differ after a resume by design: training/resume/loss_record.py) but the stop's own checkpoint's."""
    from lorastudio.training.resume.loss_record import RECORD_KEY, read_span

    found = {}
    for folder in sorted((run_dir / "checkpoints").glob("step-*")):
        step = int(folder.name[5:])
        if step != stop:
            state = torch.load(folder / "state.pt", weights_only=False)
            found[step] = list(read_span(run_dir / "losses.bin", state[RECORD_KEY], step)[0])
    return found


def _progress(seen: list) -> list[tuple]:
    return [tuple(getattr(e, k) for k in PROGRESS) for e in seen if e.type == "progress"]


def _rounds(seen: list) -> list[dict]:
    return [e.model_dump() for e in seen if e.type == "validation"]


def _samples(seen: list) -> list[tuple]:
    return [(e.step, tuple(e.images)) for e in seen if e.type == "sample_ready"]


@pytest.fixture
def masked_mix(small_dataset: Path, tmp_path: Path) -> list[dict]:
    """small_dataset as two subject entries with repeats (the first with masks: left half white)
    and a regularisation entry."""
    folders = [tmp_path / n for n in ("a", "b", "reg")]
    for folder in folders:
        folder.mkdir()
    for image, index in zip(sorted(small_dataset.glob("*.png")), [0, 0, 1, 2], strict=True):
        shutil.copy(image, folders[index] / image.name)
        shutil.copy(image.with_suffix(".txt"), folders[index] / f"{image.stem}.txt")
    (folders[0] / "masks").mkdir()
    for image in sorted(folders[0].glob("*.png")):
        width, height = Image.open(image).size
        mask = np.zeros((height, width), dtype=np.uint8)
        mask[:, : width // 2] = 255
        Image.fromarray(mask).save(folders[0] / "masks" / image.name)
    return [
        {"path": str(folders[0]), "repeats": 2},
        {"path": str(folders[1]), "repeats": 3},
        {"path": str(folders[2]), "regularisation": True},
    ]


# rounds: checkpoints and snapshots at 2 and 4, validation at 2, 4, 6, samples at 3 and 6
EVERYTHING = {
    "steps": 6, "batch_size": 1, "grad_accum": 2, "ema_decay": 0.8, "validation_split": 0.25,
    "validate_every": 2, "caption_dropout": 0.3, "random_flip": True, "save_every": 2,
    "save_lora_every": 2, "prior_loss_weight": 0.5, "trigger_word": "sks", "lr_scheduler": "cosine",
    "lr_warmup_steps": 2, "sample_prompts": ["a red circle", "sks shape"], "sample_every": 3,
    "sample_steps": 2,
}  # fmt: skip


def _settings(mix: list[dict], adapter: str, **over: object) -> dict:
    dropout = 0.0 if adapter in ("loha", "lokr") else 0.1  # peft's LyCORIS layers take none
    return {
        **EVERYTHING,
        "data_dir": None,
        "datasets": mix,
        "adapter": adapter,
        "lora_dropout": dropout,
        **over,
    }


@pytest.mark.parametrize("adapter", ["lora", "dora", "loha", "lokr"])
def test_the_same_config_twice_writes_the_same_run_folder(make_config, masked_mix, adapter):
    settings = _settings(masked_mix, adapter)
    first: list = []
    second: list = []
    train(make_config(output_name="run-alpha", **settings), first.append, device="cpu")
    train(make_config(output_name="run-omega", **settings), second.append, device="cpu")
    out = get_settings().outputs_dir
    assert _differences(out / "run-alpha", out / "run-omega") == []
    assert _progress(first) == _progress(second) and len(_progress(first)) == 6
    assert _rounds(first) == _rounds(second) and len(_rounds(first)) == 3
    assert _samples(first) == _samples(second) and len(_samples(first)) == 2


def _resume_equals_full(
    make_config, settings: dict, stop: int, before_resume=None, before_start=None
) -> list:
    """A run stopped with save at `stop` and resumed (`before_resume()` run between) against the
    same run uninterrupted: events and every file (the stop's own checkpoint and snapshot aside).
    `before_start()` runs after the uninterrupted run. Returns the two parts' events."""
    whole: list = []
    train(make_config(output_name="run-whole", **settings), whole.append, device="cpu")
    if before_start is not None:
        before_start()
    events, check = stop_at(stop)
    cfg = make_config(output_name="run-parts", **settings)
    assert train(cfg, events.append, check, device="cpu").stopped
    if before_resume is not None:
        before_resume()
    out = get_settings().outputs_dir
    train(cfg, events.append, device="cpu", resume=out / "run-parts")
    assert _progress(events) == _progress(whole) and len(_progress(whole)) == settings["steps"]
    assert _rounds(events) == _rounds(whole)
    assert _samples(events) == _samples(whole)
    stopped = {f"loras/RUN-step-{stop:06d}.{ext}" for ext in ("json", "safetensors")}
    stopped |= {
        str(p.relative_to(out / "run-parts")).replace("run-parts", "RUN")
        for p in (out / "run-parts" / "checkpoints" / f"step-{stop:06d}").glob("*")
    }
    full = set(_files(out / "run-whole"))
    # the stop's checkpoint counts in keep_last (2): one of the uninterrupted run's before it goes
    older = {k for k in full if k.startswith("checkpoints/step-") and int(k[17:23]) < stop}
    found = _differences(out / "run-whole", out / "run-parts", (stopped - full) | older | {"losses.bin"})
    assert found == []
    parts, whole_losses = (
        _checkpoint_losses(out / "run-parts", stop),
        _checkpoint_losses(out / "run-whole", stop),
    )
    assert parts.keys() <= whole_losses.keys() and all(parts[s] == whole_losses[s] for s in parts)
    return events


RESUMES = [  # (adapter, stop step, latent cache): k = 1, a checkpoint step (2, 4), the step before
    # a sample round (2, 5) and before a validation round (1, 3, 5)
    ("lora", 1, "memory"), ("lora", 2, "disk"), ("lora", 5, "memory"), ("dora", 3, "disk"),
    ("loha", 1, "disk"), ("loha", 5, "memory"), ("lokr", 2, "memory"), ("lokr", 4, "disk"),
]  # fmt: skip


@pytest.mark.parametrize(("adapter", "stop", "cache"), RESUMES)
def test_a_resume_at_step_k_writes_the_uninterrupted_run_folder(
    make_config, masked_mix, adapter, stop, cache
):
    _resume_equals_full(make_config, _settings(masked_mix, adapter, latent_cache=cache), stop)


def test_a_resume_with_the_disk_cache_full_writes_the_uninterrupted_run_folder(
    make_config, masked_mix, monkeypatch
):
    """The first part fills the disk cache; at the resume it is gone and the disk refuses every
    shard (RELIABILITY 1742: held in RAM, said)."""
    from lorastudio.training.inputs import cache_shards

    real = cache_shards.write_shard_bytes

    def full_disk(shard, data, problems=None):  # what data/cache_io says of a full disk
        if problems is not None:
            problems.append(f"{shard}: No space left on device")
        return False

    def fill() -> None:
        clear_cache(cache_root(get_settings()))
        monkeypatch.setattr(cache_shards, "write_shard_bytes", full_disk)

    settings = _settings(masked_mix, "lora", latent_cache="disk")
    events = _resume_equals_full(make_config, settings, 2, fill)
    assert len([e for e in events if e.type == "warning" and "keeps them in RAM" in e.message]) == 2
    # the other way round: full while the first part ran, free at the resume
    monkeypatch.setattr(cache_shards, "write_shard_bytes", real)
    shutil.rmtree(get_settings().outputs_dir)
    clear_cache(cache_root(get_settings()))

    def full() -> None:
        clear_cache(cache_root(get_settings()))  # the uninterrupted run's shards
        monkeypatch.setattr(cache_shards, "write_shard_bytes", full_disk)

    def freed() -> None:
        monkeypatch.setattr(cache_shards, "write_shard_bytes", real)

    events = _resume_equals_full(make_config, settings, 2, freed, full)
    assert len([e for e in events if e.type == "warning" and "keeps them in RAM" in e.message]) == 2


def test_a_preservation_run_twice_and_resumed_is_bitwise(make_config):
    settings = {
        "trigger_word": "sks",
        "steps": 4,
        "batch_size": 2,
        "save_every": 1,
        "ema_decay": 0.8,
        "preservation": {"class_word": "shape", "weight": 1.0},
        "caption_dropout": 0.3,
    }
    train(make_config(output_name="run-again", **settings), [].append, device="cpu")
    _resume_equals_full(make_config, settings, 2)
    out = get_settings().outputs_dir
    assert _differences(out / "run-whole", out / "run-again") == []


def test_two_threads_reproduce_themselves(make_config, masked_mix):
    """At 2 CPU threads the same config twice is bitwise too (whether 1 and 2 threads agree is
    printed: they need not, README's sample previews note)."""
    settings = _settings(masked_mix, "lokr", steps=4)
    previous = torch.get_num_threads()
    one: list = []
    train(make_config(output_name="run-one", **settings), one.append, device="cpu")
    torch.set_num_threads(2)
    try:
        two: list = []
        again: list = []
        train(make_config(output_name="run-two", **settings), two.append, device="cpu")
        train(make_config(output_name="run-twice", **settings), again.append, device="cpu")
    finally:
        torch.set_num_threads(previous)
    out = get_settings().outputs_dir
    assert _differences(out / "run-two", out / "run-twice") == []
    assert _progress(two) == _progress(again)
    print("1 vs 2 threads:", _differences(out / "run-one", out / "run-two"), _progress(one) == _progress(two))


def test_runs_of_other_seeds_measure_the_held_out_images_at_the_same_noise(
    make_config, masked_mix, monkeypatch
):
    """RELIABILITY 1681 through real runs: seeds 1 and 2, one validation_seed, a validation
    folder: the same images at the same noise; a fractional split holds out other images by seed
    (Known problems: the Train form's hint says so, 1790)."""
    from lorastudio.training import loop_inputs

    seen: list = []
    real = loop_inputs.encode_held_out

    def recording(*args, **kwargs):
        found = real(*args, **kwargs)
        seen.append([(h.name, h.noise) for h in found])
        return found

    monkeypatch.setattr(loop_inputs, "encode_held_out", recording)
    for seed in (1, 2):
        cfg = make_config(
            output_name=f"run-{seed}",
            seed=seed,
            steps=2,
            data_dir=masked_mix[0]["path"],
            validation_split=masked_mix[1]["path"],
            validate_every=1,
            validation_seed=3,
        )
        train(cfg, [].append, device="cpu")
    (one, two) = seen
    assert [n for n, _ in one] == [n for n, _ in two] and all(
        torch.equal(a, b) for (_, a), (_, b) in zip(one, two, strict=True)
    )
    seen.clear()
    for seed in (1, 2, 3):
        cfg = make_config(
            output_name=f"run-f{seed}", seed=seed, steps=1, validation_split=0.5, validation_seed=3
        )
        train(cfg, [].append, device="cpu")
    assert len({tuple(n for n, _ in found) for found in seen}) > 1  # other images by seed


def test_init_lora_and_caption_rows_twice_and_resumed_are_bitwise(make_config, masked_mix):
    """A run started from a LoRA file (1680's finite checks on the way) on entries whose captions
    are metadata.jsonl rows (1735), with EMA and validation: twice and resumed at 2, bitwise."""
    for entry in masked_mix[:2]:
        folder = Path(entry["path"])
        rows = [
            json.dumps(
                {"file_name": t.with_suffix(".png").name, "text": t.read_text(encoding="utf-8").strip()}
            )
            for t in sorted(folder.glob("*.txt"))
        ]
        for t in folder.glob("*.txt"):
            t.unlink()
        (folder / "metadata.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    start = train(make_config(steps=1, output_name="run-start"), [].append, device="cpu").lora_path
    settings = _settings(masked_mix, "lora", init_lora=str(start), lora_rank=None, steps=4, sample_prompts=[])
    settings.pop("sample_every")
    settings.pop("sample_steps")
    train(make_config(output_name="run-again", **settings), [].append, device="cpu")
    _resume_equals_full(make_config, settings, 2)
    out = get_settings().outputs_dir
    assert _differences(out / "run-whole", out / "run-again") == []
