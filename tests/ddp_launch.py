"""The gloo launch of the data-parallel engine tests (tests/unit/training/test_ddp*.py): two
processes set up as torchrun would (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT in the
environment) run the scenarios of the selected tests in turn, each on its own port and studio
home, and write their records; the tests compare them with the one-process runs they make
themselves.

Starting the gloo processes costs more than the tiny runs (they are forked from the test process's
zygote, tests/zygote.py, which imported torch and the pipelines once: `start_ranks`), so ONE launch
per pytest session serves every module (the session fixture `launched` of
tests/unit/training/conftest.py): only the scenarios of the selected tests are run
(SCENARIO_TESTS, after -m / -k deselection), so the default run (-m 'not slow') does not pay for
a slow test's scenario, nor `-m slow` for the default ones."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ddp_caches_build import build_caches, caches_config
from ddp_init import init_config, init_rank_main, write_init_file
from lorastudio.config import TrainConfig
from lorastudio.data import decode_progress, images
from lorastudio.settings import get_settings
from lorastudio.training.events import StopRequest
from lorastudio.training.inputs import conditioning
from lorastudio.training.loop import train
from undecodable_images import idat_ends_early
from zygote import ZygoteContext

WORLD = 2
SCAN_STOP = -1  # a scenario's stop_after: rank 0 stops during its decode scan
SCAN_FAIL = -2  # a scenario's stop_after: the run fails in its preflight (each rank's error recorded)
# One process computes a batch of 2 in one forward; two compute one sample each, so the sums
# are rounded in another order: float32 noise, far below what a wrong shard or scale would give.
LOSS_RTOL = 1e-5
LORA_ATOL, LORA_RTOL = 1e-6, 1e-4


def free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports (all held open while the others are picked)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def _environment(rank: int, port: int, out: str) -> None:
    """The environment torchrun would set for `rank` (studio home: out/home)."""
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


def _rank_main(rank: int, cfg: TrainConfig, port: int, out: str, stop_after: int | None = None) -> None:
    """One scenario of a launched process: the environment torchrun would set, then a plain
    train() call; writes out/rank{rank}.json (`_train_record`)."""
    _environment(rank, port, out)
    Path(out, f"rank{rank}.json").write_text(
        json.dumps(_train_record(rank, cfg, stop_after)), encoding="utf-8"
    )


def _train_record(rank: int, cfg: TrainConfig, stop_after: int | None) -> dict[str, Any]:
    """A train() call of this rank and its record, with the count of files it decoded fully
    (images._full_decode).
    With stop_after, EVERY rank's stop poll asks for stop-and-save once that many steps are
    done on rank 0 (rank 1 never sees progress events): only rank 0's poll may count; with
    SCAN_STOP, rank 0's asks once its decode scan reported a file decoded (every count
    reported). With SCAN_FAIL the run's error is the record ("error")."""
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
        return {"error": str(err), "full_decodes": len(decodes), "events": [e.type for e in events]}
    finally:
        images._full_decode = real  # type: ignore[assignment]
        decode_progress.REPORT_AFTER_S, decode_progress.REPORT_EVERY_S = every
    return {
        "full_decodes": len(decodes),
        "losses": result.losses,
        "steps_run": result.steps_run,
        "lora_path": str(result.lora_path) if result.lora_path else None,
        "events": [e.type for e in events],
        "stopped": result.stopped,
        "polls": polls["n"],
    }


def _twice_rank_main(rank: int, cfg: TrainConfig, port: int, out: str) -> None:
    """Two train() calls in one process group that the launched process started itself (as a
    script under accelerate launch does; collectives bounded to 60 s so that a broken run fails
    instead of hanging): the first stopped in rank 0's decode scan, the second run to its end.
    Writes out/rank{rank}.json: {"first": record, "second": record or {"error": ...}}."""
    _environment(rank, port, out)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=60),
    )
    try:
        first = _train_record(rank, cfg, SCAN_STOP)
        try:
            second = _train_record(rank, cfg, None)
        except RuntimeError as err:  # the record says what broke (the old code: a collective)
            second = {"error": f"{type(err).__name__}: {err}"}
    finally:
        dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps({"first": first, "second": second}), encoding="utf-8")


METHODS = {
    "steps": 4, "batch_size": 2, "optimizer": "prodigy", "learning_rate": 1.0, "ema_decay": 0.5, "adapter": "lokr",
    "loss": "huber", "huber_schedule": "snr",  # each rank takes its slice of the per-sample thresholds
}  # fmt: skip


def scenarios(
    make_config: Callable[..., TrainConfig],
    broken: Path = Path("broken"),
    init_file: Path = Path("init.safetensors"),
) -> dict[str, tuple[str, TrainConfig, int | None]]:
    """The launched scenarios, in order: name -> (kind, config, stop_after); `broken`: the
    dataset of the scan-fail scenario (`broken_dataset`); `init_file`: the LoRA the init-lora
    scenario starts from (written by `launch` when it runs)."""
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
        "caches": ("caches", caches_config(make_config), None),
        # issue 31 part 6: the on-disk latent and caption cache, written and read by both ranks
        "disk": (
            "train",
            make_config(steps=4, batch_size=2, output_name="ddp", num_gpus=WORLD, latent_cache="disk"),
            None,
        ),
        # the disk cache with controls of their own size (control_resolution 128: one
        # control_0 tensor per shard, not the target's crop), written and read by both ranks
        "disk-controls": ("train", sized_controls(make_config, num_gpus=WORLD, output_name="ddp"), None),
        # issue 29: a dataset entry's repeats and loss_weight across ranks
        "mix": ("train", make_config(output_name="ddp", num_gpus=WORLD, **mix_settings(make_config)), None),
        # RELIABILITY 390: two train() calls in one group, the first stopped in rank 0's scan
        "twice": ("twice", make_config(steps=2, batch_size=2, output_name="ddp", num_gpus=WORLD), None),
        # session 36: a run started from a LoRA file (init_lora), every rank loading it
        "init-lora": ("init", init_config(make_config, init_file, output_name="ddp", num_gpus=WORLD), None),
    }


def sized_controls(make_config: Callable[..., TrainConfig], **overrides: object) -> TrainConfig:
    """A FLUX.1 Kontext run on the disk cache whose controls are sized on their own (128 x 128)."""
    settings = {"steps": 4, "batch_size": 2, "latent_cache": "disk", "control_resolution": 128}
    return make_config("flux-kontext", **{**settings, **overrides})


def mix_settings(make_config: Callable[..., TrainConfig]) -> dict:
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
        elif kind == "twice":
            _twice_rank_main(rank, cfg, port, str(folder))
        elif kind == "init":
            init_rank_main(rank, cfg, port, str(folder))
        else:
            _cache_rank_main(rank, cfg, port, str(folder))


@dataclass(frozen=True)
class Launched:
    """Where the launch wrote each scenario's records (out/<name>/rank{r}.json, cache{r}.pt,
    init{r}.safetensors), for a training scenario its studio home (out/<name>/home), and the
    init-lora scenario's LoRA file (out/init-lora.safetensors)."""

    out: Path

    def ranks(self, name: str) -> list[dict]:
        return [json.loads((self.out / name / f"rank{r}.json").read_text()) for r in range(WORLD)]

    def outputs(self, name: str) -> Path:
        return self.out / name / "home" / "outputs"


# scenario -> the tests that read its records: the launch runs only the scenarios of the selected
# tests (after -m / -k deselection), so the default run (-m 'not slow') does not pay for the slow


# scenario -> the tests that read its records, as "module::test": the launch runs only the
# scenarios of the selected tests (after -m / -k deselection)
SCENARIO_TESTS = {
    "flux": ("test_ddp::test_two_gloo_processes_train_the_lora_of_one_process",),
    "qwen-image": ("test_ddp::test_two_gloo_processes_train_the_lora_of_one_process",),
    "stop": ("test_ddp_stop::test_rank_0_stop_and_save_stops_every_rank_and_the_checkpoint_resumes_in_one_process",),
    "scan-stop": ("test_ddp_stop::test_a_stop_during_rank_0s_decode_scan_stops_every_rank_before_any_model_loads",),
    "scan-fail": ("test_ddp_stop::test_an_image_rank_0s_scan_refuses_fails_every_rank_naming_it",),
    "twice": ("test_ddp_stop::test_a_second_run_in_the_same_group_follows_its_own_preflight",),
    "methods": ("test_ddp::test_two_gloo_processes_train_like_one_with_prodigy_ema_lokr_and_huber",),
    "caches": ("test_ddp_caches::test_ranks_share_the_caches_and_get_exactly_the_tensors_of_one_process",),
    "disk": ("test_ddp::test_two_gloo_processes_train_from_the_disk_cache_like_one",),
    "disk-controls": ("test_ddp::test_two_gloo_processes_train_sized_controls_from_the_disk_cache_like_one",),
    "mix": ("test_ddp::test_two_gloo_processes_train_a_weighted_entry_like_one",),
    "init-lora": ("test_ddp_init_lora::test_every_rank_starts_from_the_init_lora_file_and_trains_like_one",),
}  # fmt: skip


def make_broken_dataset(clean: Path, folder: Path) -> Path:
    """`clean` copied into folder/broken with its first image's deflate stream ending early
    (valid chunks: only a full decode refuses it): the scan-fail scenario's dataset."""
    out = Path(shutil.copytree(clean, folder / "broken"))
    first = sorted(out.glob("*.png"))[0]
    first.write_bytes(idat_ends_early(32))
    return out


def launch(
    make_config: Callable[..., TrainConfig], broken: Path, out: Path, selected: set[tuple[str, str]]
) -> Launched:
    """One launch of WORLD gloo processes running in turn every scenario of `scenarios` that a
    `selected` test reads ((module, test) pairs of the session's items); records under `out`."""
    init_file = out / "init-lora.safetensors"
    every = scenarios(make_config, broken, init_file)
    assert sorted(SCENARIO_TESTS) == sorted(every), "every scenario names the tests reading it"
    wanted = {name: {tuple(t.split("::")) for t in tests} for name, tests in SCENARIO_TESTS.items()}
    chosen = {name: every[name] for name, tests in wanted.items() if selected & tests}
    runs = [
        (name, kind, cfg, port, stop_after)
        for (name, (kind, cfg, stop_after)), port in zip(chosen.items(), free_ports(len(chosen)), strict=True)
    ]
    for name, *_ in runs:
        (out / name).mkdir()
    if "init-lora" in chosen:
        write_init_file(make_config, init_file)
    if runs:
        start_ranks(runs, out)
    return Launched(out)


def start_ranks(runs: list[tuple[str, str, TrainConfig, int, int | None]], out: Path) -> None:
    """The WORLD launched processes, each `_launched_main(rank, runs, out)`, waited for; once one
    exits non-zero the others are ended (a rank left at a collective would wait out its timeout)
    and the launch fails naming the ranks' exit codes (their tracebacks are on the test's stderr).

    Started as the job service's workers are in the test process (tests/zygote.py): forked from
    the zygote, which has imported torch, diffusers and peft once, where a fresh interpreter per
    rank imported them again (torch.multiprocessing.spawn: the launch's children 33 -> 6 CPU s);
    still two processes of their own, with their own environment (torchrun's, `_environment`)
    and gloo group. Where the environment does not fit the zygote's, ZygoteContext spawns them,
    as before."""
    ctx = ZygoteContext()
    procs = [
        ctx.Process(target=_launched_main, args=(rank, runs, str(out)), name=f"gloo-rank{rank}")
        for rank in range(WORLD)
    ]
    try:
        for proc in procs:
            proc.start()
        running = {proc.sentinel: proc for proc in procs}
        while running:
            for sentinel in wait(list(running)):
                proc = running.pop(sentinel)
                proc.join()
                if proc.exitcode != 0:
                    codes = {p.name: p.exitcode for p in procs}
                    raise RuntimeError(f"a launched gloo process failed: exit codes {codes}")
    finally:
        for proc in procs:
            if proc.pid is None:  # not started (an earlier start failed)
                continue
            if proc.is_alive():
                proc.terminate()
            proc.join()


def _cache_rank_main(rank: int, cfg: TrainConfig, port: int, out: str) -> None:
    """One scenario of a launched process: phases 1 and 2 under a gloo group; writes
    out/cache{rank}.pt (the encode chunk is restored for the scenarios that follow)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    previous = conditioning.ENCODE_CHUNK
    try:
        torch.save(build_caches(cfg), Path(out, f"cache{rank}.pt"))
    finally:
        conditioning.ENCODE_CHUNK = previous
        dist.destroy_process_group()
