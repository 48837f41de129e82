"""The lora_targets check child (jobs/target_check.py) under attack: many concurrent preflights
of different configs never hold more than a few of the server's request threads, and a hostile
denoiser config.json (a FIFO, a link to /dev/zero) never holds the server."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from tests.polling import until

from lorastudio.config import TrainConfig, resolve_train_config
from lorastudio.errors import FieldProblem
from lorastudio.jobs import target_check


def _cfg(base_model: str, **over: object) -> TrainConfig:
    return resolve_train_config(
        TrainConfig.model_validate({"family": "flux", "base_model": base_model, "data_dir": "/d", **over})
    )


def _answer_within(call: object, seconds: float) -> object:
    """call()'s answer, failing (not hanging) when it takes longer than `seconds`."""
    out: list[object] = []
    worker = threading.Thread(target=lambda: out.append(call()), daemon=True)  # type: ignore[operator]
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"no answer within {seconds} s"
    return out[0]


def test_concurrent_checks_of_different_configs_do_not_pile_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each waited for the one child in turn (120 s each at most): 40 such preflights held every
    request thread of the server."""
    running = threading.Event()
    release = threading.Event()  # the child runs until the test has seen who was turned away

    def slow_child(cfg: TrainConfig, timeout_s: float) -> target_check.TargetAnswer:
        running.set()
        release.wait(60)  # a child's torch import on a loaded host takes ~20 s
        return target_check.TargetAnswer((FieldProblem("lora_targets", f"checked {cfg.lora_targets}"),))

    monkeypatch.setattr(target_check, "_ask_child", slow_child)
    before = target_check.spawned
    answers: dict[int, target_check.TargetAnswer] = {}

    def ask(i: int) -> None:
        answers[i] = target_check.check_lora_targets(_cfg(str(tmp_path), lora_targets=[f"attack_{i}"]))

    first = threading.Thread(target=ask, args=(0,))
    first.start()
    assert running.wait(60)
    others = [threading.Thread(target=ask, args=(i,)) for i in range(1, 9)]
    for t in others:
        t.start()
    # at once: answered while the child still runs (the start checks them); the others wait
    until(lambda: len(answers) == 9 - 1 - target_check.MAX_WAITING, 60, "answers to the turned-away checks")
    turned_away = dict(answers)
    assert all(not a.problems for a in turned_away.values()), turned_away
    assert target_check.spawned - before == 1
    release.set()
    for t in [first, *others]:
        t.join(60)
    checked = [i for i, answer in answers.items() if answer.problems]
    assert len(checked) == 1 + target_check.MAX_WAITING == target_check.spawned - before
    assert all(answers[i].not_checked is None for i in checked)
    assert sorted(checked + list(turned_away)) == list(range(9))
    assert {a.not_checked for a in turned_away.values()} == {  # said, not only logged (fix 146)
        "lora_targets not checked now: 3 checks already running or waiting; the run's start checks it"
    }
    later = target_check.check_lora_targets(_cfg(str(tmp_path), lora_targets=["attack_late"]))
    assert [p.message for p in later.problems] == ["checked ['attack_late']"]  # once free, checked again
    assert later.not_checked is None


@pytest.mark.parametrize("hostile", ["fifo", "dev-zero"])
def test_a_hostile_denoiser_config_never_holds_the_server(tmp_path: Path, hostile: str) -> None:
    config = tmp_path / "base" / "transformer" / "config.json"
    config.parent.mkdir(parents=True)
    os.mkfifo(config) if hostile == "fifo" else config.symlink_to("/dev/zero")
    before = target_check.spawned
    cfg = _cfg(str(tmp_path / "base"), lora_targets=["to_q"])
    answer = _answer_within(lambda: target_check.check_lora_targets(cfg), 10)
    assert (
        answer.problems == ()
        and "lora_targets not checked now: the base's denoiser config" in answer.not_checked
    )
    assert target_check.spawned == before  # no child left to read it either


def test_the_cache_keeps_no_copy_of_a_huge_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key was the values' JSON: CACHE_SIZE answers of 4 MB bodies (the API's cap) kept
    ~1 GB (fix 137)."""
    monkeypatch.setattr(target_check, "_ask_child", lambda cfg, timeout_s: target_check.TargetAnswer())
    monkeypatch.setattr(target_check, "_cache", {})
    huge = [f"transformer_blocks.{i}.attn.to_q" for i in range(20_000)]  # ~600 kB of names
    assert target_check.check_lora_targets(_cfg(str(tmp_path), lora_targets=huge)).problems == ()
    assert target_check.check_lora_targets(_cfg(str(tmp_path), lora_targets=[*huge, "x"])).problems == ()
    assert len(target_check._cache) == 2  # two configs, two answers
    assert sum(len(k) for k in target_check._cache) < 1000
