"""Where the preflight finds a base's tokenizer (jobs/caption_tokens.tokenizer_folder: a folder, a
hub id's cached snapshot, nothing for a hub id not on disk), what it does with a chat template it
cannot render, and the lora target check's child (jobs/target_check.py): one for racing requests
of one config, and no answer, not a wrong one, when it runs out of time; the count imports neither
torch nor transformers."""

from __future__ import annotations

import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from tests.polling import until

from lorastudio import families
from lorastudio.config import TrainConfig, resolve_train_config
from lorastudio.errors import FieldProblem
from lorastudio.jobs import caption_tokens, target_check


def _cfg(base_model: str, **over: object) -> TrainConfig:
    return resolve_train_config(
        TrainConfig.model_validate({"family": "flux", "base_model": base_model, "data_dir": "/d", **over})
    )


def test_a_hub_ids_cached_snapshot_is_counted_and_an_uncached_one_is_not_found(
    tiny_model, tmp_path, monkeypatch
):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    repo = tmp_path / "hub" / "models--acme--tiny-flux"
    snapshot = repo / "snapshots" / ("a" * 40)
    shutil.copytree(tiny_model("flux") / "tokenizer_2", snapshot / "tokenizer_2")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    assert caption_tokens.tokenizer_folder(_cfg("acme/tiny-flux"), None) == snapshot
    spec = families.get("flux").spec
    local = caption_tokens.caption_counts(spec, tiny_model("flux"), ["a red circle", "cat " * 30])
    assert caption_tokens.caption_counts(spec, snapshot, ["a red circle", "cat " * 30]) == local
    assert caption_tokens.tokenizer_folder(_cfg("acme/not-fetched"), None) is None


def test_a_chat_template_that_does_not_render_here_leaves_the_count_to_the_start():
    with pytest.raises(caption_tokens.CannotCount, match="does not render here: not for you"):
        caption_tokens.render_chat("{{ raise_exception('not for you') }}", [], {})
    with pytest.raises(caption_tokens.CannotCount, match="does not render here"):
        caption_tokens.render_chat("{% unknown_tag %}", [], {})
    generation = "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}"
    assert (
        caption_tokens.render_chat(generation, [{"role": "user", "content": "x"}], {}) == "[x]"
    )  # transformers' tag


def test_a_child_out_of_time_gives_no_problems_and_caches_nothing(tiny_model):
    cfg = _cfg(str(tiny_model("flux")), lora_targets=["no_such_layer"])
    before = len(target_check._cache)
    answer = target_check.check_lora_targets(cfg, timeout_s=0.01)
    assert answer.problems == ()  # the run's start checks it, and the answer says so
    assert answer.not_checked == (
        "lora_targets not checked now: the check took longer than 0.01 s; the run's start checks it"
    )
    assert len(target_check._cache) == before


def test_racing_checks_of_one_config_start_one_child(tiny_model, monkeypatch: pytest.MonkeyPatch):
    """The child answers once the three requests hold the three slots (one runs it, two wait):
    the waiting two must find its answer. (A real child's answer to a missing layer, and its
    ~5 CPU s of torch imports: test_api_lora_targets_preflight.)"""

    asked: list[TrainConfig] = []

    def child(cfg: TrainConfig, timeout_s: float) -> target_check.TargetAnswer:
        if not asked:  # the first: its answer waits for the racing two
            until(lambda: target_check._slots._value == 0, 60, "three racing requests")
        asked.append(cfg)
        return target_check.TargetAnswer(
            (FieldProblem("lora_targets", f"no layer named {cfg.lora_targets[1]}"),)
        )

    monkeypatch.setattr(target_check, "_ask_child", child)
    monkeypatch.setattr(target_check, "_cache", {})  # not an earlier test's answer
    cfg = _cfg(str(tiny_model("flux")), lora_targets=["to_q", "missing_one"])
    before = target_check.spawned
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda _: target_check.check_lora_targets(cfg), range(3)))
    assert target_check.spawned == before + 1 and len(asked) == 1
    assert [[p.field for p in a.problems] for a in answers] == [["lora_targets"]] * 3
    assert "missing_one" in answers[0].problems[0].message and answers[0].not_checked is None


@pytest.mark.parametrize("name", ["flux", "z-image", "flux2"])  # plain, a chat template, FLUX.2's system turn
def test_the_count_imports_no_torch_nor_transformers(name, tiny_model):
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from lorastudio import families\n"
        "from lorastudio.jobs.caption_tokens import caption_counts\n"
        f"print(caption_counts(families.get({name!r}).spec, Path({str(tiny_model(name))!r}), ['a red circle']))\n"
        "print(sorted(m for m in ('torch', 'diffusers', 'transformers', 'peft') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    counted, heavy = out.stdout.strip().splitlines()
    assert counted.startswith("[") and int(counted.strip("[]")) > 0
    assert heavy == "[]"
