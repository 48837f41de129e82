"""auto's attention probe started as the run begins and cached on disk (training/speed/attention_early.py,
training/speed/probe_cache.py, the child's hold protocol in training/speed/attention_probe.py). This CPU has no
CUDA: the GPU facts (probe_cache.gpu_facts) and the child's kernels are faked, the rest is real
(child processes, pipes, cache files)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from lorastudio.settings import get_settings
from lorastudio.tiny.models import build
from lorastudio.training import loop, loop_phases
from lorastudio.training.planning.plan import resolve_fixed_plan
from lorastudio.training.preflight import preflight
from lorastudio.training.speed import attention, attention_early, attention_probe, probe_cache
from lorastudio.training.speed.attention import AttentionChoice, KernelProbe, read_probe_output
from lorastudio.training.speed.attention_early import choose_cached, run_shapes, start_attention, start_choice
from lorastudio.training.speed.attention_fa4 import CACHE_DIR_ENV, CACHE_ENV, keep_fa4_cache
from lorastudio.training.speed.probe_cache import ProbeCache

CUDA = torch.device("cuda")
SHAPES = [(1, 24, 4608, 128), (1, 24, 4096, 128)]
FACTS = {"gpu": "NVIDIA H200", "capability": "9.0", "driver": "580.1", "torch": "2.11.0", "cuda": "13.0"}

FAKE_CHILD = """
import json, pathlib, sys, time
spec = json.loads(sys.argv[1])
log = pathlib.Path({log!r})
def note(what):
    with log.open("a") as fh:
        fh.write(what + "\\n")
note("started")
for kernel in spec["kernels"]:
    print(json.dumps({{"kernel": kernel, "checked": True}}), flush=True)
print(json.dumps({{"ready": True}}), flush=True)
if not sys.stdin.readline():
    note("eof")
    sys.exit(0)
note("released")
for kernel in spec["kernels"]:
    print(json.dumps({{"kernel": kernel, "ok": True, "ms": {{"cudnn": 3.0, "fa4": 2.0}}[kernel]}}), flush=True)
"""


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> dict:
    """The GPU facts of the cache key (mutable: a test changes one), FA4 probed as available."""
    facts = dict(FACTS)
    monkeypatch.setattr(probe_cache, "gpu_facts", lambda _device: dict(facts))
    monkeypatch.setattr(attention, "fa4_unavailable", lambda _device: None)
    return facts


@pytest.fixture
def child_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The held probe child replaced by FAKE_CHILD (the CUDA kernels are the fake part), which
    notes in the returned file when it started, was released or saw EOF."""
    log = tmp_path / "child.log"
    script = tmp_path / "fake_child.py"
    script.write_text(textwrap.dedent(FAKE_CHILD.format(log=str(log))))
    monkeypatch.setattr(attention_early, "PROBE_COMMAND", [sys.executable, str(script)])
    return log


def _notes(log: Path, want: str | None = None, timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while want is not None and time.monotonic() < deadline:
        if log.is_file() and want in log.read_text(encoding="utf-8").split():
            break
        time.sleep(0.05)
    return log.read_text(encoding="utf-8").split() if log.is_file() else []


def test_the_child_checks_every_kernel_first_and_times_only_once_released(monkeypatch, capsys):
    timed: list[str] = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda _d: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(
        attention_probe,
        "check_kernel",
        lambda name, *_: (
            None if name == "cudnn" else {"kernel": name, "ok": False, "reason": "no fa4 kernel"}
        ),
    )
    monkeypatch.setattr(attention_probe, "time_kernel", lambda name, *_: timed.append(name) or 1.5)
    spec = {
        "device": "cuda:0",
        "dtype": "bfloat16",
        "shapes": SHAPES,
        "kernels": ["cudnn", "fa4"],
        "time": True,
    }
    for released in (False, True):
        monkeypatch.setattr(attention_probe, "_released", lambda _timeout, r=released: r)
        monkeypatch.setattr(sys, "argv", ["probe", json.dumps({**spec, "hold": True})])
        attention_probe.main()
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        head = [
            {"kernel": "cudnn", "checked": True},
            {"kernel": "fa4", "ok": False, "reason": "no fa4 kernel"},
            {"ready": True},
        ]
        assert rows == head + ([{"kernel": "cudnn", "ok": True, "ms": 1.5}] if released else [])
    assert timed == ["cudnn"]  # never before the release, never a kernel that failed its check


def test_a_crash_is_blamed_on_the_kernel_being_checked_or_timed():
    checking_fa4 = '{"kernel": "cudnn", "checked": true}\n'
    got = read_probe_output(checking_fa4, "Segmentation fault\n", -11, ["cudnn", "fa4"])
    assert got["cudnn"] == KernelProbe(True) and not got["fa4"].ok
    assert got["fa4"].reason == "the probe exited with -11: Segmentation fault"
    timing = checking_fa4 + '{"kernel": "fa4", "checked": true}\n{"ready": true}\n'
    got = read_probe_output(timing, "", -11, ["cudnn", "fa4"])
    assert not got["cudnn"].ok and got["fa4"] == KernelProbe(True)  # cuDNN crashed while timed
    assert not probe_cache.probe_finished(got)


def test_probe_results_are_reused_until_a_part_of_their_key_changes(tmp_path, fake_gpu, monkeypatch):
    probes: list[list] = []
    answer = {"cudnn": KernelProbe(True, ms=3.0), "fa4": KernelProbe(True, ms=2.0)}

    def probe(_dev, _dtype, shapes, _kernels):
        probes.append(shapes)
        return dict(answer)

    monkeypatch.setattr(attention, "probe_attention", probe)
    cache = ProbeCache(tmp_path / "probes")

    def choose(shapes=SHAPES, dtype=torch.bfloat16):
        return choose_cached("auto", CUDA, dtype, shapes, False, cache)

    assert choose() == AttentionChoice("fa4") and len(probes) == 1
    assert choose() == AttentionChoice("fa4") and len(probes) == 1  # from the cache
    assert len(list((tmp_path / "probes").glob("*.json"))) == 1
    choose(shapes=SHAPES[:1])
    choose(dtype=torch.float16)
    fake_gpu["driver"] = "590.2"  # a driver update
    choose()
    fake_gpu["torch"] = "2.12.0"
    choose()
    assert len(probes) == 5
    answer["cudnn"] = KernelProbe(False, "the probe exited with -11: Segmentation fault")
    fake_gpu["gpu"] = "NVIDIA B200"
    assert choose().backend == "fa4" and choose().backend == "fa4"
    assert len(probes) == 7  # a crashed probe is not stored: the next run probes again
    answer["cudnn"] = KernelProbe(False, "cudnn dq differs from flash by 0.3 at 4608 tokens")
    fake_gpu["gpu"] = "NVIDIA H100"
    choose(), choose()
    assert len(probes) == 8  # a kernel that failed its check is a result: stored


def test_an_unreadable_cache_file_is_ignored_and_rewritten(tmp_path, fake_gpu, monkeypatch):
    monkeypatch.setattr(attention, "probe_attention", lambda *_: {"cudnn": KernelProbe(True, ms=1.0)})
    monkeypatch.setattr(attention, "fa4_unavailable", lambda _d: "not installed")
    cache = ProbeCache(tmp_path)
    assert choose_cached("auto", CUDA, torch.bfloat16, SHAPES, False, cache) == AttentionChoice("cudnn")
    (path,) = tmp_path.glob("*.json")
    path.write_text("{not json")
    key = probe_cache.probe_key(CUDA, torch.bfloat16, SHAPES, ["cudnn"])
    assert cache.get(key) is None
    choose_cached("auto", CUDA, torch.bfloat16, SHAPES, False, cache)
    assert cache.get(key) == {"cudnn": KernelProbe(True, None, 1.0)}


def test_the_early_probe_runs_beside_the_run_and_times_when_the_run_is_ready(tmp_path, fake_gpu, child_log):
    cache = ProbeCache(tmp_path / "probes")
    pending = start_choice("auto", CUDA, torch.bfloat16, SHAPES, False, cache)
    assert pending.running is not None
    assert "started" in _notes(child_log, "started")
    time.sleep(0.3)  # the run's phases 1-2: the child has checked its kernels and waits
    assert "released" not in _notes(child_log)
    assert pending.result(torch.bfloat16, SHAPES) == AttentionChoice("fa4")  # 2.0 ms vs cuDNN's 3.0
    assert _notes(child_log) == ["started", "released"]
    again = start_choice("auto", CUDA, torch.bfloat16, SHAPES, False, cache)
    assert again.running is None and again.decided == AttentionChoice("fa4")  # no child: the cache
    assert _notes(child_log) == ["started", "released"]


def test_an_abandoned_early_probe_ends_its_child(tmp_path, fake_gpu, child_log):
    pending = start_choice("auto", CUDA, torch.bfloat16, SHAPES, False, ProbeCache(tmp_path))
    proc = pending.running.proc
    _notes(child_log, "started")
    pending.close()  # an error or a stop before the denoiser phase
    assert proc.poll() is not None and pending.running is None
    assert list(tmp_path.glob("*.json")) == []


def test_shapes_that_changed_since_the_start_are_probed_again(tmp_path, fake_gpu, child_log, monkeypatch):
    monkeypatch.setattr(attention, "probe_attention", lambda *_: {"cudnn": KernelProbe(True, ms=1.0)})
    monkeypatch.setattr(attention, "fa4_unavailable", lambda _d: "not installed")
    pending = start_choice("auto", CUDA, torch.bfloat16, SHAPES, False, ProbeCache(tmp_path))
    proc = pending.running.proc
    assert pending.result(torch.bfloat16, SHAPES[1:]) == AttentionChoice("cudnn")
    assert proc.wait(10) is not None  # the early child was ended, the build's shapes probed


def test_the_run_starts_its_probe_before_loading_at_the_built_denoisers_shapes(
    make_config, tmp_path, fake_gpu, child_log, monkeypatch
):
    """start_attention reads the heads from the base model's config: the shapes equal those of
    the built denoiser, so result() takes the early probe rather than probing again."""
    cfg = make_config("flux", steps=1, output_name="early")
    run = preflight(cfg, get_settings(), "cpu")
    run = dataclasses.replace(run, device=CUDA)  # the CUDA boundary: nothing runs on it here
    plan = resolve_fixed_plan(run.cfg, torch.device("cpu"))
    monkeypatch.setattr(attention_early, "pick_dtype", lambda _precision, _device: torch.bfloat16)
    pending = start_attention(run, plan, tmp_path / "probes")
    try:
        assert pending.running is not None and pending.dtype == torch.bfloat16
        built = run_shapes(run, plan, build("flux", 0).transformer.config)
        assert pending.shapes == built and built[0][1:] == (2, built[0][2], 16)  # tiny: 2 heads of 16
    finally:
        pending.close()


def test_the_loop_starts_the_probe_before_the_text_encoders_load(make_config, monkeypatch):
    events: list = []
    real = loop_phases.start_attention  # looked up where the run's phases call it

    def spy(run, plan, probes):
        events.append(("start_attention", probes))
        return real(run, plan, probes)

    monkeypatch.setattr(loop_phases, "start_attention", spy)
    loop.train(make_config("flux", steps=1, output_name="order"), events.append, device="cpu")
    loads = [i for i, e in enumerate(events) if not isinstance(e, tuple) and e.type == "model_load_started"]
    assert events[loads[0]].component == "text_encoders"  # the first load
    assert ("start_attention", get_settings().probe_cache_dir) in events[: loads[0]]  # the probe before it


def test_fa4s_jit_cache_goes_to_the_studio_home_unless_the_user_chose(tmp_path, monkeypatch):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    assert keep_fa4_cache(tmp_path / "fa4")
    assert (os.environ[CACHE_ENV], os.environ[CACHE_DIR_ENV]) == (
        "1",
        str(tmp_path / "fa4"),
    )
    monkeypatch.setenv(CACHE_ENV, "0")
    monkeypatch.delenv(CACHE_DIR_ENV)
    assert not keep_fa4_cache(tmp_path / "fa4") and CACHE_DIR_ENV not in os.environ


def test_fa4s_jit_cache_follows_a_later_runs_home_in_the_same_process(tmp_path, monkeypatch):
    """The values an earlier run of this process set are not the user's choice (RELIABILITY 1012):
    a second train() with another home kept the first home's FA4 cache."""
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    assert keep_fa4_cache(tmp_path / "one")
    assert keep_fa4_cache(tmp_path / "two") and os.environ[CACHE_DIR_ENV] == str(tmp_path / "two")
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "mine"))  # the user's, still kept
    assert not keep_fa4_cache(tmp_path / "three") and os.environ[CACHE_DIR_ENV] == str(tmp_path / "mine")
