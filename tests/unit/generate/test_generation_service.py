"""The generation service (jobs/generation.py) and the CLI's checks: the budget; a request is
checked before any work; the worker is spawned from the service's own thread, so it outlives
the request thread that asked for it (its parent-death signal follows the spawning thread), and
reloads its pipeline for another base model; training's start stops it; hostile LoRA files and bad revisions are a one-line CLI error, no traceback."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from hostile_loras import hostile_cases
from lorastudio.cli.app import _register, app
from lorastudio.errors import ConfigError
from lorastudio.generation_rules import MAX_PIXEL_STEPS, budget_problems
from lorastudio.jobs.generation import GenerationService
from lorastudio.jobs.generation_inputs import GenerationRequest, LoraChoice
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.settings import Settings


def test_the_budget() -> None:
    assert budget_problems(1024, 1024, 200, "flux") == []
    assert budget_problems(2048, 2048, 50, "flux") == []
    assert budget_problems(4096, 1024, 50, "flux") == []  # 4.2 MP, a side at the limit
    assert [p.field for p in budget_problems(2048, 2048, 51, "flux")] == ["steps"]
    assert 2048 * 2048 * 51 > MAX_PIXEL_STEPS >= 2048 * 2048 * 50
    assert [p.field for p in budget_problems(4096, 4096, 1, "flux")] == ["width"]  # 16.8 MP
    assert [p.field for p in budget_problems(8192, 16, 1, "flux")] == ["width"]
    assert [p.field for p in budget_problems(24, 32, 0, "flux")] == ["width", "steps"]


def test_a_request_is_checked_before_any_work(studio_home: Path, tiny_model: Callable[[str], Path]) -> None:
    settings = Settings(home=studio_home).ensure_dirs()
    data, _ = hostile_cases()["rank_0"]
    (settings.outputs_dir / "r0").mkdir()
    (settings.outputs_dir / "r0" / "r0.safetensors").write_bytes(data)
    service = GenerationService(settings, GpuArbiter())
    try:
        req = GenerationRequest(
            family="flux", base_model=str(tiny_model("flux")), prompt="x", steps=300, width=4096,
            height=4096, revision="../x", loras=(LoraChoice("r0"),),
        )  # fmt: skip
        with pytest.raises(ConfigError) as info:
            service.generate(req)
        assert [p.field for p in info.value.problems] == ["steps", "width", "revision", "loras.0"]
        assert service.worker_pid is None and not (settings.home / "gallery").exists()
    finally:
        service.shutdown()


@pytest.mark.spawned_workers  # its death signal follows the spawning thread (a zygote's: the main one)
def test_the_worker_outlives_the_request_thread(studio_home: Path, tiny_model: Callable[[str], Path]) -> None:
    settings = Settings(home=studio_home).ensure_dirs()
    arbiter = GpuArbiter()
    service = GenerationService(settings, arbiter)
    req = GenerationRequest(family="flux", base_model=str(tiny_model("flux")), prompt="x", steps=1, width=32,
                            height=32)  # fmt: skip
    results: list[dict] = []
    try:
        asker = threading.Thread(target=lambda: results.append(service.generate(req)))
        asker.start()
        asker.join(300)
        assert results and service.loaded == (str(tiny_model("flux")), "flux", None)
        pid = service.worker_pid
        time.sleep(1.0)  # the asking thread is gone; a worker bound to it would be dead by now
        assert pid is not None and psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
        again = service.generate(req)
        assert service.worker_pid == pid
        assert Path(again["path"]).read_bytes() == Path(results[0]["path"]).read_bytes()
        zimage = str(tiny_model("z-image"))  # another base model: reloaded in the same worker
        other = service.generate(GenerationRequest(family="z-image", base_model=zimage, prompt="x", steps=1,
                                                   width=32, height=32))  # fmt: skip
        assert service.loaded == (zimage, "z-image", None) and service.worker_pid == pid
        assert other["family"] == "z-image" and Path(other["path"]).is_file()
        arbiter.begin_training("job-1")  # training takes the GPU: the worker is stopped
        assert service.worker_pid is None and service.loaded is None
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
        arbiter.end_training("job-1")
    finally:
        service.shutdown()


@pytest.mark.parametrize("case", ["huge_header", "not_json", "absurd_shape", "metadata_not_string",
                                  "rank_0", "another_family_in_header", "unet_layers"])  # fmt: skip
def test_the_cli_refuses_a_hostile_lora_without_a_traceback(
    case: str, tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    if not app.registered_commands:
        _register()
    data, reason = hostile_cases()[case]
    lora = tmp_path / "x.safetensors"
    lora.write_bytes(data)
    out = tmp_path / "img.png"
    args = [
        "generate",
        "--base",
        str(tiny_model("flux")),
        "--prompt",
        "p",
        "--out",
        str(out),
        "--lora",
        str(lora),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "error: invalid configuration" in result.output and reason in result.output.replace("\n", "")
    assert "Traceback" not in result.output and not out.exists()


def test_the_cli_refuses_a_bad_revision(tiny_model: Callable[[str], Path], tmp_path: Path) -> None:
    if not app.registered_commands:
        _register()
    args = [
        "generate",
        "--base",
        "acme/flux",
        "--family",
        "flux",
        "--prompt",
        "p",
        "--out",
        str(tmp_path / "a.png"),
    ]
    result = CliRunner().invoke(app, [*args, "--revision", "../../etc"])
    assert result.exit_code == 2 and "--revision: '../../etc' is not a branch, tag or commit" in result.output


def test_a_worker_death_and_its_errors_are_told_plainly() -> None:
    from lorastudio.errors import FieldProblem, GenerationFailed, ModelSourceError, NotFound
    from lorastudio.jobs.generation_process import death_reason, rebuild_error
    from lorastudio.jobs.generation_worker import error_reply

    assert death_reason(-9) == "the generation worker was killed (SIGKILL; out of memory?)"
    assert death_reason(-11) == "the generation worker crashed (SIGSEGV)"
    assert death_reason(-15) == "the generation worker was killed (SIGTERM)"
    assert death_reason(1) == "the generation worker exited unexpectedly (code 1)"
    config = ConfigError([FieldProblem("width", "too wide"), FieldProblem("steps", "too many")])
    rebuilt = rebuild_error(*error_reply(config)[1:])
    assert isinstance(rebuilt, ConfigError) and rebuilt.problems == config.problems
    assert str(rebuilt) == str(config)
    for err in (NotFound("no LoRA x"), ModelSourceError("cannot load y")):
        again = rebuild_error(*error_reply(err)[1:])
        assert type(again) is type(err) and str(again) == str(err)
    assert isinstance(rebuild_error("NoSuchError", "boom", []), GenerationFailed)
