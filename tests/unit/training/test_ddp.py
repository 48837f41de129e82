"""Data-parallel training on the CPU: two gloo processes (launched like torchrun: RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT in the environment) train the same LoRA, within float
tolerance, as one process with the same global batch and seed; only rank 0 emits and writes.
The caption and latent caches are shared out over the ranks and all-gathered: exactly the
tensors of one process. A 2-rank run's checkpoint resumes in one process with the same maths.
A num_gpus > 1 run started as a single process, and lora_dropout with several ranks, are
refused with a clear message.

Starting the gloo processes (each imports torch and the pipelines) costs far more than the tiny
runs, so one module-wide launch of two processes runs every scenario in turn (`launched`): the
flux and Qwen-Image runs, the stop-and-save run and the cache build, each on its own port and
studio home; the tests compare those records with the one-process runs they make themselves.
Only the scenarios of the selected tests are launched (SCENARIO_TESTS)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.torch import load_file

from lorastudio import families
from lorastudio.config import TrainConfig, resolve_train_config
from lorastudio.data import decode_progress, images, load_crop, scan_dataset
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training import conditioning
from lorastudio.training.conditioning import captions_to_encode, encode_texts
from lorastudio.training.distributed import ParallelContext, check_parallel_config
from lorastudio.training.events import StopRequest
from lorastudio.training.latents import build_latent_cache, replay_crop_draws
from lorastudio.training.loop import train
from undecodable_images import idat_ends_early

WORLD = 2
SCAN_STOP = -1  # a scenario's stop_after: rank 0 stops during its decode scan
SCAN_FAIL = -2  # a scenario's stop_after: the run fails in its preflight (each rank's error recorded)
# One process computes a batch of 2 in one forward; two compute one sample each, so the sums
# are rounded in another order: float32 noise, far below what a wrong shard or scale would give.
LOSS_RTOL = 1e-5
LORA_ATOL, LORA_RTOL = 1e-6, 1e-4


def _free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports (all held open while the others are picked)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def _rank_main(rank: int, cfg: TrainConfig, port: int, out: str, stop_after: int | None = None) -> None:
    """One scenario of a launched process: the environment torchrun would set (studio home:
    out/home), then a plain train() call; writes out/rank{rank}.json with the count of files
    it decoded fully (images._full_decode).
    With stop_after, EVERY rank's stop poll asks for stop-and-save once that many steps are
    done on rank 0 (rank 1 never sees progress events): only rank 0's poll may count; with
    SCAN_STOP, rank 0's asks once its decode scan reported a file decoded (every count
    reported)."""
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(WORLD),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        LORASTUDIO_HOME=str(Path(out, "home")),
    )
    torch.set_num_threads(1)
    get_settings.cache_clear()
    events: list = []
    polls = {"n": 0}

    def should_stop() -> StopRequest | None:
        polls["n"] += 1
        if stop_after is None:
            return None
        if rank != 0:
            return StopRequest(save=False)  # asked (its beat), never followed: only rank 0 decides
        if stop_after == SCAN_STOP:
            scanned = [e for e in events if e.type == "preparing" and e.phase == "decoding" and e.done]
            return StopRequest(save=True) if scanned else None
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1].step >= stop_after else None

    decodes: list[str] = []
    real = images._full_decode

    def counted(path: Path, *args: object) -> bool:
        decodes.append(path.name)
        return real(path, *args)  # type: ignore[arg-type]

    images._full_decode = counted  # type: ignore[assignment]
    every = (decode_progress.REPORT_AFTER_S, decode_progress.REPORT_EVERY_S)
    if stop_after == SCAN_STOP:
        decode_progress.REPORT_AFTER_S = decode_progress.REPORT_EVERY_S = 0.0
    try:
        result = train(cfg, events.append, should_stop, device="cpu")
    except Exception as err:
        if stop_after != SCAN_FAIL:
            raise
        record = {"error": str(err), "full_decodes": len(decodes), "events": [e.type for e in events]}
        Path(out, f"rank{rank}.json").write_text(json.dumps(record))
        return
    finally:
        images._full_decode = real  # type: ignore[assignment]
        decode_progress.REPORT_AFTER_S, decode_progress.REPORT_EVERY_S = every
    record = {
        "full_decodes": len(decodes),
        "losses": result.losses,
        "steps_run": result.steps_run,
        "lora_path": str(result.lora_path) if result.lora_path else None,
        "events": [e.type for e in events],
        "stopped": result.stopped,
        "polls": polls["n"],
    }
    Path(out, f"rank{rank}.json").write_text(json.dumps(record))


def _scenarios(
    make_config: Callable[..., TrainConfig], broken: Path = Path("broken")
) -> dict[str, tuple[str, TrainConfig, int | None]]:
    """The launched scenarios, in order: name -> (kind, config, stop_after); `broken`: the
    dataset of the scan-fail scenario (`broken_dataset`)."""
    # 3 square images + 1 other: batches of 2 and tail batches of 1 (one rank's slice is empty)
    return {
        "flux": (
            "train",
            make_config("flux", steps=4, batch_size=2, output_name="ddp", num_gpus=WORLD),
            None,
        ),
        # Qwen-Image: a LoRA layer without a gradient
        "qwen-image": (
            "train",
            make_config("qwen-image", steps=4, batch_size=2, output_name="ddp", num_gpus=WORLD),
            None,
        ),
        "stop": ("train", make_config(steps=6, batch_size=2, output_name="ddp", num_gpus=WORLD), 2),
        # an image whose pixels do not decode (RELIABILITY 213): rank 0's scan fails, the other
        # rank is told and fails alike (not left waiting)
        "scan-fail": (
            "train",
            make_config(steps=2, batch_size=2, output_name="ddp", num_gpus=WORLD, data_dir=str(broken)),
            SCAN_FAIL,
        ),
        # a stop during rank 0's decode scan (RELIABILITY 213): every rank ends before any model loads
        "scan-stop": (
            "train",
            make_config(steps=6, batch_size=2, output_name="ddp", num_gpus=WORLD),
            SCAN_STOP,
        ),
        # training methods (issue 28): Prodigy, EMA and LoKr across ranks
        "methods": ("train", make_config(output_name="ddp", num_gpus=WORLD, **METHODS), None),
        "caches": ("caches", _caches_config(make_config), None),
        # issue 31 part 6: the on-disk latent and caption cache, written and read by both ranks
        "disk": (
            "train",
            make_config(steps=4, batch_size=2, output_name="ddp", num_gpus=WORLD, latent_cache="disk"),
            None,
        ),
        # the disk cache with controls of their own size (control_resolution 128: one
        # control_0 tensor per shard, not the target's crop), written and read by both ranks
        "disk-controls": ("train", _sized_controls(make_config, num_gpus=WORLD, output_name="ddp"), None),
        # issue 29: a dataset entry's repeats and loss_weight across ranks
        "mix": ("train", make_config(output_name="ddp", num_gpus=WORLD, **_mix(make_config)), None),
    }


def _sized_controls(make_config: Callable[..., TrainConfig], **overrides: object) -> TrainConfig:
    """A FLUX.1 Kontext run on the disk cache whose controls are sized on their own (128 x 128)."""
    settings = {"steps": 4, "batch_size": 2, "latent_cache": "disk", "control_resolution": 128}
    return make_config("flux-kontext", **{**settings, **overrides})


def _mix(make_config: Callable[..., TrainConfig]) -> dict:
    """A run of one datasets entry with repeats 2 and loss_weight 0.5 (data/mix.py)."""
    folder = str(make_config().data_dir)
    entries = [{"path": folder, "repeats": 2, "loss_weight": 0.5}]
    return {"data_dir": None, "datasets": entries, "steps": 4, "batch_size": 2}


def _launched_main(
    rank: int, scenarios: list[tuple[str, str, TrainConfig, int, int | None]], out: str
) -> None:
    """One launched process: every scenario in turn, each in its own folder out/<name>."""
    for name, kind, cfg, port, stop_after in scenarios:
        folder = Path(out, name)
        if kind == "train":
            _rank_main(rank, cfg, port, str(folder), stop_after)
        else:
            _cache_rank_main(rank, cfg, port, str(folder))


@dataclass(frozen=True)
class Launched:
    """Where the launch wrote each scenario's records (out/<name>/rank{r}.json, cache{r}.pt)
    and, for a training scenario, its studio home (out/<name>/home)."""

    out: Path

    def ranks(self, name: str) -> list[dict]:
        return [json.loads((self.out / name / f"rank{r}.json").read_text()) for r in range(WORLD)]

    def outputs(self, name: str) -> Path:
        return self.out / name / "home" / "outputs"


# scenario -> the tests that read its records: the launch runs only the scenarios of the selected
# tests (after -m / -k deselection), so the default run (-m 'not slow') does not pay for the slow
# test's scenario, nor `-m slow` for the default ones
SCENARIO_TESTS = {
    "flux": ("test_two_gloo_processes_train_the_lora_of_one_process",),
    "qwen-image": ("test_two_gloo_processes_train_the_lora_of_one_process",),
    "stop": ("test_rank_0_stop_and_save_stops_every_rank_and_the_checkpoint_resumes_in_one_process",),
    "scan-stop": ("test_a_stop_during_rank_0s_decode_scan_stops_every_rank_before_any_model_loads",),
    "scan-fail": ("test_an_image_rank_0s_scan_refuses_fails_every_rank_naming_it",),
    "methods": ("test_two_gloo_processes_train_like_one_with_prodigy_ema_lokr_and_huber",),
    "caches": ("test_ranks_share_the_caches_and_get_exactly_the_tensors_of_one_process",),
    "disk": ("test_two_gloo_processes_train_from_the_disk_cache_like_one",),
    "disk-controls": ("test_two_gloo_processes_train_sized_controls_from_the_disk_cache_like_one",),
    "mix": ("test_two_gloo_processes_train_a_weighted_entry_like_one",),
}


@pytest.fixture(scope="module")
def broken_dataset(make_config: Callable[..., TrainConfig], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The flux runs' dataset with its first image's deflate stream ending early (valid chunks:
    only a full decode refuses it)."""
    out = Path(shutil.copytree(make_config().data_dir, tmp_path_factory.mktemp("broken") / "broken"))
    first = sorted(out.glob("*.png"))[0]
    first.write_bytes(idat_ends_early(32))
    return out


@pytest.fixture(scope="module")
def launched(
    make_config: Callable[..., TrainConfig],
    broken_dataset: Path,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Launched:
    """One launch of WORLD gloo processes running in turn every scenario of `_scenarios` that a
    selected test reads (SCENARIO_TESTS)."""
    out = tmp_path_factory.mktemp("ddp")
    every = _scenarios(make_config, broken_dataset)
    assert sorted(SCENARIO_TESTS) == sorted(every), "every scenario names the tests reading it"
    assert all(hasattr(request.module, test) for tests in SCENARIO_TESTS.values() for test in tests)
    # the session's items after -m / -k deselection (pytest_collection_modifyitems has run)
    selected = {getattr(item, "originalname", item.name) for item in request.session.items}
    chosen = {name: every[name] for name, tests in SCENARIO_TESTS.items() if selected.intersection(tests)}
    scenarios = [
        (name, kind, cfg, port, stop_after)
        for (name, (kind, cfg, stop_after)), port in zip(
            chosen.items(), _free_ports(len(chosen)), strict=True
        )
    ]
    for name, *_ in scenarios:
        (out / name).mkdir()
    mp.spawn(_launched_main, args=(scenarios, str(out)), nprocs=WORLD, join=True)
    return Launched(out)


METHODS = {
    "steps": 4, "batch_size": 2, "optimizer": "prodigy", "learning_rate": 1.0, "ema_decay": 0.5, "adapter": "lokr",
    "loss": "huber", "huber_schedule": "snr",  # each rank takes its slice of the per-sample thresholds
}  # fmt: skip


@pytest.mark.slow  # a heavy variant of the two-rank test
def test_two_gloo_processes_train_like_one_with_prodigy_ema_lokr_and_huber(make_config, launched):
    single = train(make_config(output_name="single", **METHODS), [].append, device="cpu")
    (rank0, _) = launched.ranks("methods")
    assert rank0["losses"] == pytest.approx(single.losses, rel=LOSS_RTOL)
    for suffix in (".safetensors", ".raw.safetensors"):  # the EMA LoRA and the raw one
        expected = load_file(str(single.lora_path).replace(".safetensors", suffix))
        got = load_file(rank0["lora_path"].replace(".safetensors", suffix))
        assert sorted(got) == sorted(expected) and all(k.startswith("lycoris_") for k in got)
        for key, tensor in expected.items():
            torch.testing.assert_close(got[key], tensor, atol=LORA_ATOL, rtol=LORA_RTOL, msg=key)


def test_two_gloo_processes_train_a_weighted_entry_like_one(make_config, launched):
    """The entry's loss_weight scales each sample before the batch is cut into the ranks'
    slices: two ranks train the LoRA of one process."""
    single = train(make_config(output_name="single", **_mix(make_config)), [].append, device="cpu")
    (rank0, _) = launched.ranks("mix")
    assert rank0["losses"] == pytest.approx(single.losses, rel=LOSS_RTOL)
    expected, got = load_file(str(single.lora_path)), load_file(rank0["lora_path"])
    assert sorted(got) == sorted(expected)
    for key, tensor in expected.items():
        torch.testing.assert_close(got[key], tensor, atol=LORA_ATOL, rtol=LORA_RTOL, msg=key)


@pytest.mark.parametrize("family", ["flux", "qwen-image"])  # Qwen-Image: a LoRA layer without a gradient
def test_two_gloo_processes_train_the_lora_of_one_process(make_config, launched, family):
    single_cfg = make_config(family, steps=4, batch_size=2, output_name="single")
    single = train(single_cfg, [].append, device="cpu")
    ranks = launched.ranks(family)

    for record in ranks:  # every rank ran the same steps and reports the all-reduced loss
        assert record["steps_run"] == 4
        assert record["losses"] == pytest.approx(single.losses, rel=LOSS_RTOL)
    assert ranks[0]["events"][-1] == "complete" and ranks[0]["events"].count("progress") == 4
    assert ranks[1]["events"] == [] and ranks[1]["lora_path"] is None  # rank 1 is silent
    # the decode scan once: rank 0 decodes every image, rank 1 finds them in the record after it
    assert ranks[0]["full_decodes"] > 0 and ranks[1]["full_decodes"] == 0

    assert single.lora_path is not None and ranks[0]["lora_path"] is not None
    expected = load_file(str(single.lora_path))
    got = load_file(ranks[0]["lora_path"])
    assert sorted(got) == sorted(expected)
    moved = 0
    for key, tensor in expected.items():
        torch.testing.assert_close(got[key], tensor, atol=LORA_ATOL, rtol=LORA_RTOL, msg=key)
        moved += int(bool(tensor.abs().max() > 1e-3))
    assert moved > 0  # the LoRA trained (B moved away from its zero init)
    assert [p.name for p in launched.outputs(family).iterdir()] == ["ddp"]  # rank 1 wrote nothing else
    assert [p.name for p in get_settings().outputs_dir.iterdir()] == ["single"]


def test_num_gpus_without_a_launch_is_refused(make_config, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    events: list = []
    with pytest.raises(ConfigError) as caught:
        train(make_config(num_gpus=2), events.append, device="cpu")
    message = str(caught.value)
    assert "num_gpus=2" in message and "single process" in message
    assert "torchrun" in message and "--gpus 2" in message
    assert [e.type for e in events] == ["error"]
    outputs = get_settings().outputs_dir
    assert not outputs.exists() or not any(outputs.iterdir())  # nothing written


def test_a_batch_that_does_not_divide_by_the_world_is_refused(make_config):
    ctx = ParallelContext(rank=1, world_size=2, local_rank=1)
    with pytest.raises(ConfigError, match="batch_size") as caught:
        check_parallel_config(make_config(batch_size=3, num_gpus=2), ctx)
    assert "num_gpus" not in str(caught.value)  # num_gpus matches the launch
    with pytest.raises(ConfigError, match="launched with 2 processes"):
        check_parallel_config(make_config(batch_size=2, num_gpus=4), ctx)
    check_parallel_config(make_config(batch_size=2, num_gpus=2), ctx)  # accepted


def test_each_rank_takes_a_contiguous_slice_covering_the_batch():
    for world in (1, 2, 3, 4):
        for size in range(1, 9):
            slices = [ParallelContext(r, world, r).shard(size) for r in range(world)]
            covered = [i for s in slices for i in range(s.start, s.stop)]
            assert covered == list(range(size))
            assert all(s.grad_factor == world and s.size == size for s in slices)


def test_rank_0_stop_and_save_stops_every_rank_and_the_checkpoint_resumes_in_one_process(
    make_config, launched
):
    cfg = _scenarios(make_config)["stop"][1]
    ranks = launched.ranks("stop")
    assert [r["steps_run"] for r in ranks] == [2, 2] and all(r["stopped"] for r in ranks)
    assert ranks[0]["losses"] == pytest.approx(ranks[1]["losses"], rel=1e-12)
    # every rank polls (its beat to a job's launcher: jobs/rank_silence.py); rank 1's wish is ignored
    # (the counts differ since RELIABILITY 213: rank 0 polls before each of its decodes, rank 1
    # while it waits for rank 0's preflight)
    assert ranks[0]["polls"] > 0 and ranks[1]["polls"] > 0
    launched_dir = launched.outputs("stop") / "ddp"
    assert ranks[0]["lora_path"] == str(launched_dir / "ddp.safetensors")
    assert Path(ranks[0]["lora_path"]).is_file()
    assert sorted(p.name for p in (launched_dir / "checkpoints").iterdir()) == ["step-000002"]

    # num_gpus is resumable: the 2-rank checkpoint continues in one process, to the LoRA of an
    # uninterrupted one-process run (resumed in this test's own copy of the run folder)
    run_dir = Path(shutil.copytree(launched_dir, get_settings().outputs_dir / "ddp"))
    resumed = train(cfg.model_copy(update={"num_gpus": 1}), [].append, device="cpu", resume=run_dir)
    assert resumed.resumed_from == 2 and resumed.steps_run == 6 and not resumed.stopped
    single = train(make_config(steps=6, batch_size=2, output_name="single"), [].append, device="cpu")
    assert resumed.losses == pytest.approx(single.losses, rel=LOSS_RTOL)
    assert resumed.lora_path is not None and single.lora_path is not None
    expected, got = load_file(str(single.lora_path)), load_file(str(resumed.lora_path))
    for key, tensor in expected.items():
        torch.testing.assert_close(got[key], tensor, atol=LORA_ATOL, rtol=LORA_RTOL, msg=key)


def test_a_stop_during_rank_0s_decode_scan_stops_every_rank_before_any_model_loads(launched):
    """Rank 0 alone scans (with the decode progress and its stop check), the others wait for its
    outcome: a stop during the scan ends every rank there (before: each rank scanned alike and
    saw the stop at the first agreed poll after its models loaded)."""
    ranks = launched.ranks("scan-stop")
    assert all(r["stopped"] and r["steps_run"] == 0 and r["lora_path"] is None for r in ranks)
    assert "model_load_started" not in ranks[0]["events"] and ranks[0]["events"][-1] == "complete"
    assert "preparing" in ranks[0]["events"]  # its decode counts
    assert ranks[0]["full_decodes"] >= 1 and ranks[1]["full_decodes"] == 0  # rank 1 never scanned
    assert not (launched.outputs("scan-stop") / "ddp").exists()  # nothing claimed or written


def test_an_image_rank_0s_scan_refuses_fails_every_rank_naming_it(launched, broken_dataset):
    """Rank 0 tells the others its preflight failed; they run theirs (rank 0 recorded the good
    images) and meet the same error: no rank is left waiting for the outcome."""
    ranks = launched.ranks("scan-fail")
    bad = sorted(broken_dataset.glob("*.png"))[0].name
    assert all(bad in r["error"] and "corrupt" in r["error"] for r in ranks), ranks
    assert ranks[0]["error"] == ranks[1]["error"]
    assert ranks[1]["full_decodes"] == 1  # only the file rank 0 could not record
    assert "model_load_started" not in ranks[0]["events"] and ranks[0]["events"][-1] == "error"


def test_lora_dropout_with_several_ranks_is_refused(make_config):
    ctx = ParallelContext(rank=0, world_size=2, local_rank=0)
    with pytest.raises(ConfigError, match="lora_dropout") as caught:
        check_parallel_config(make_config(batch_size=2, num_gpus=2, lora_dropout=0.1), ctx)
    assert "same dropout masks" in str(caught.value)
    check_parallel_config(make_config(batch_size=2, lora_dropout=0.1), ParallelContext())  # one process


# -- shared caches ---------------------------------------------------------------------------------
CACHE_CHUNK = 2  # captions per encoder call: several chunks, so the rounds are uneven


def _build_caches(cfg: TrainConfig) -> dict:
    """Phase 1 and 2 of a run as train() calls them: the conditioning (captions + sample prompts)
    and the latent cache, with the rng state after them and the number of stop polls."""
    conditioning.ENCODE_CHUNK = CACHE_CHUNK
    cfg = resolve_train_config(cfg)
    family = families.get(cfg.family)
    items = scan_dataset(
        Path(cfg.data_dir),
        resolution=int(cfg.resolution or 0),
        multiple=family.spec.resolution_multiple,
        aspect_buckets=cfg.aspect_buckets,
    ).items
    rng = np.random.default_rng(cfg.seed)
    polls = {"n": 0}

    def stop() -> None:
        polls["n"] += 1

    texts = [captions_to_encode([it.caption for it in items], cfg.caption_dropout), cfg.sample_prompts]
    device = torch.device("cpu")
    conds = encode_texts(
        family, cfg, texts, dtype=torch.float32, device=device, emit=[].append, check_stop=stop
    )
    vae = family.load_vae(cfg.base_model, cfg.revision, torch.float32, device)
    cache = build_latent_cache(family, vae, items, cfg, rng, device=device, emit=[].append, check_stop=stop)
    return {
        "conds": conds,
        "means": cache.means,
        "stds": cache.stds,
        "crops": cache.crops,
        "sizes": cache.sizes,
        "rng": rng.bit_generator.state,
        "polls": polls["n"],
        "texts": sum(len(group) for group in texts),
    }


def _cache_rank_main(rank: int, cfg: TrainConfig, port: int, out: str) -> None:
    """One scenario of a launched process: phases 1 and 2 under a gloo group; writes
    out/cache{rank}.pt (the encode chunk is restored for the scenarios that follow)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    previous = conditioning.ENCODE_CHUNK
    try:
        torch.save(_build_caches(cfg), Path(out, f"cache{rank}.pt"))
    finally:
        conditioning.ENCODE_CHUNK = previous
        dist.destroy_process_group()


def _caches_config(make_config: Callable[..., TrainConfig]) -> TrainConfig:
    return make_config(
        random_crop=True,
        random_flip=True,
        cache_variants=2,
        aspect_buckets=False,  # the non-square image is cropped square: random crops have slack
        caption_dropout=0.1,
        sample_prompts=["a red square", "a blue circle", "a green ring"],
    )


def test_ranks_share_the_caches_and_get_exactly_the_tensors_of_one_process(make_config, launched):
    cfg = _caches_config(make_config)
    previous = conditioning.ENCODE_CHUNK
    try:
        single = _build_caches(cfg)
    finally:
        conditioning.ENCODE_CHUNK = previous
    assert single["texts"] > 2 * CACHE_CHUNK  # more chunks than ranks: several rounds, uneven
    assert any(top or left for crops in single["crops"] for _, (top, left) in crops)
    for rank in range(WORLD):
        got = torch.load(launched.out / "caches" / f"cache{rank}.pt", weights_only=False)
        assert got["rng"] == single["rng"]  # the rng walked every image's draws on every rank
        assert got["crops"] == single["crops"] and got["sizes"] == single["sizes"]
        for name in ("means", "stds"):
            assert len(got[name]) == len(single[name])
            for a, b in zip(got[name], single[name], strict=True):
                assert torch.equal(a, b)
        for got_group, group in zip(got["conds"], single["conds"], strict=True):
            assert list(got_group) == list(group)
            for text, tensors in group.items():
                assert sorted(got_group[text]) == sorted(tensors)
                for key, tensor in tensors.items():
                    assert torch.equal(got_group[text][key], tensor), (text, key)
        assert got["polls"] < single["polls"]  # one stop poll per round, fewer rounds than items
    ranks = [
        torch.load(launched.out / "caches" / f"cache{r}.pt", weights_only=False)["polls"]
        for r in range(WORLD)
    ]
    assert ranks[0] == ranks[1]  # the polls are collectives: every rank makes the same number


def test_replayed_crop_draws_advance_the_rng_like_loading_the_crop(sample_dataset):
    items = [
        item
        for buckets in (True, False)
        for item in scan_dataset(sample_dataset, resolution=48, multiple=16, aspect_buckets=buckets).items
    ]
    assert any(it.width != it.height for it in items)  # some crops have slack to draw from
    loaded, replayed = np.random.default_rng(3), np.random.default_rng(3)
    for item in items:
        for random_crop in (True, False):
            load_crop(item, random_crop=random_crop, flip=False, rng=loaded)
            replay_crop_draws(item, random_crop, replayed)
            assert replayed.bit_generator.state == loaded.bit_generator.state
    assert loaded.bit_generator.state != np.random.default_rng(3).bit_generator.state


def test_two_gloo_processes_train_sized_controls_from_the_disk_cache_like_one(make_config, launched):
    single = train(_sized_controls(make_config, latent_cache="memory", output_name="single-controls"),
                   [].append, device="cpu")  # fmt: skip
    for record in launched.ranks("disk-controls"):
        assert record["losses"] == pytest.approx(single.losses, rel=LOSS_RTOL)
    shards = list(
        (launched.out / "disk-controls" / "home" / "cache" / "encoded" / "latents").rglob("*.safetensors")
    )
    assert len(shards) == 4 and all(sorted(load_file(str(s))) == ["control_0", "mean", "std"] for s in shards)


def test_two_gloo_processes_train_from_the_disk_cache_like_one(make_config, launched):
    single = train(make_config(steps=4, batch_size=2, output_name="single"), [].append, device="cpu")
    for record in launched.ranks("disk"):
        assert record["losses"] == pytest.approx(single.losses, rel=LOSS_RTOL)
    cache = launched.out / "disk" / "home" / "cache" / "encoded"
    assert len(list((cache / "latents").rglob("*.safetensors"))) == 4  # one variant of 4 images
    assert len(list((cache / "text").rglob("*.safetensors"))) == 4 and not list(cache.rglob("*.tmp"))
