"""Attacks on the session-15 config blocks (`[[datasets]]`, `preservation`): settings the
engine cannot honour are refused, all at once and each by its field, the same by the API's
preflight and by the CLI's `train --check` (exit 2): two entries on one folder (however it is
spelled: its absolute path, a link to it), a preservation class word or prompt holding the trigger word (its output preserved
is the trigger's own, so the LoRA cannot learn it), preservation of an entry without a trigger
word (its own captions preserved), an entry whose weight's share of the epoch rounds to no
sample, keep_loras on a run that writes no LoRA snapshot while it trains; a trigger word typed
with blanks around it works as without them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from fastapi.testclient import TestClient
from PIL import Image
from typer.testing import CliRunner

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.settings import Settings

CASES = {
    "same-folder": (
        {"datasets": [{"path": "shapes"}, {"path": "shapes", "repeats": 3}]},
        ["datasets.1.path"],
    ),
    "spelled-otherwise": (
        {"datasets": [{"path": "shapes"}, {"path": "alias"}, {"path": "ABS"}, {"path": "reg"}]},
        ["datasets.1.path", "datasets.2.path"],
    ),
    "weight-share-rounds-to-zero": (  # the subject never sampled: a run of class images alone
        {
            "datasets": [
                {"path": "shapes", "weight": 1},
                {"path": "reg", "weight": 1e6, "regularisation": True},
            ]
        },
        ["datasets.0.weight"],
    ),
    "keep-loras-with-nothing-to-keep": (  # no save_lora_every / save_every / validate_every
        {"data_dir": "shapes", "keep_loras": 2},
        ["keep_loras"],
    ),
    "class-is-trigger": (
        {"data_dir": "shapes", "trigger_word": "sks", "preservation": {"class_word": "sks"}},
        ["preservation.class_word"],
    ),
    "class-holds-trigger": (
        {"data_dir": "shapes", "trigger_word": "sks", "preservation": {"class_word": "a sks person"}},
        ["preservation.class_word"],
    ),
    "prompt-holds-entry-trigger": (
        {
            "datasets": [{"path": "shapes", "trigger_word": "ohwx"}, {"path": "reg", "regularisation": True}],
            "preservation": {"class_word": "dog", "prompts": ["a dog", "an ohwx dog, photo"]},
        },
        ["preservation.prompts.1"],
    ),
    "every-prompt-named": (
        {
            "datasets": [{"path": "shapes", "trigger_word": "ohwx"}, {"path": "reg", "trigger_word": "sks"}],
            "preservation": {"class_word": "dog", "prompts": ["sks dog", "a dog", "ohwx"]},
        },
        ["preservation.prompts.0", "preservation.prompts.2"],
    ),
    "entry-without-trigger": (  # its captions preserved as they are: the LoRA cannot learn them
        {
            "datasets": [{"path": "shapes", "trigger_word": "sks"}, {"path": "reg"}],
            "preservation": {"class_word": "thing"},
        },
        ["datasets.1.trigger_word"],
    ),
    "entry-trigger-blanked": (  # "" or blanks: no trigger (the run's is not taken)
        {
            "trigger_word": "sks",
            "datasets": [{"path": "shapes"}, {"path": "reg", "trigger_word": "  "}],
            "preservation": {"class_word": "thing"},
        },
        ["datasets.1.trigger_word"],
    ),
    "blank-trigger": (  # blanks are no trigger word: nothing to replace
        {"data_dir": "shapes", "trigger_word": " ", "preservation": {"class_word": "thing"}},
        ["preservation"],
    ),
}


@pytest.fixture
def base(settings: Settings, tiny_model) -> dict:
    for name in ("shapes", "reg"):
        folder = settings.datasets_dir / name
        folder.mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (32, 32), (90 * i, 20, 20)).save(folder / f"{name}{i}.png")
            (folder / f"{name}{i}.txt").write_text(f"sks thing {i}")
    (settings.datasets_dir / "alias").symlink_to(settings.datasets_dir / "shapes", target_is_directory=True)
    return {"family": "flux", "base_model": str(tiny_model("flux")), "resolution": 32, "steps": 2}


def _fields(body: dict) -> list[str]:
    return sorted({p["field"] for p in body.get("problems", [])})


@pytest.mark.parametrize("case", list(CASES))
def test_unhonourable_blocks_are_refused_alike_by_the_api_and_the_cli(
    cli: typer.Typer, settings: Settings, base: dict, tmp_path: Path, case: str
) -> None:
    over, fields = CASES[case]
    text = json.dumps({**base, **over}).replace('"ABS"', json.dumps(str(settings.datasets_dir / "shapes")))
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:  # closed: the CLI needs the home
        answer = client.post("/api/train/preflight", json={"config": json.loads(text)})
    assert answer.status_code == 400 and _fields(answer.json()) == fields, answer.text
    config = tmp_path / "run.json"
    config.write_text(text)
    checked = CliRunner().invoke(cli, ["train", str(config), "--check", "--device", "cpu"])
    assert checked.exit_code == 2, checked.output
    for field in fields:
        assert field in checked.output


def test_the_same_blocks_without_the_clash_pass(client: TestClient, base: dict) -> None:
    ok = {
        "datasets": [
            {"path": "shapes", "trigger_word": "sks", "weight": 3},
            {"path": "reg", "regularisation": True, "weight": 1},
        ],
        "preservation": {
            "class_word": "thing",
            "prompts": ["a thing", "asks nothing"],
        },  # "asks": not the word
    }
    assert client.post("/api/train/preflight", json={"config": {**base, **ok}}).status_code == 200


WEIRD = [None, True, 0, -1, 2**63, 10**30, 1.5, 1e308, 1e-308, "", " ", "a" * 5000, "\u202e", "\x00", [], ["a"],
         {}, {"a": 1}, "NaN", "Infinity", "shapes", "reg", "/", "..", "sks", "../shapes"]  # fmt: skip
ENTRY_FIELDS = ["path", "repeats", "weight", "trigger_word", "default_caption", "caption_dropout", "resolution",
                "shuffle_tags", "keep_tokens", "tag_dropout", "loss_weight", "regularisation", "prior_prediction"]  # fmt: skip
TOP_FIELDS = ["prior_loss_weight", "preservation", "control_resolution", "latent_cache", "latent_cache_max_gb",
              "kohya_folders", "trigger_word", "cache_variants"]  # fmt: skip


@pytest.mark.slow
def test_fuzzed_blocks_never_give_a_5xx(client: TestClient, base: dict) -> None:
    """300 random mixes of odd values in the datasets / preservation / cache blocks: every
    answer is 200 or a 4xx with a JSON body (seeded: a failure reproduces)."""
    import random

    rng = random.Random(16)
    for _ in range(300):
        entries = [
            {
                "path": rng.choice(["shapes", "reg"]),
                **{f: rng.choice(WEIRD) for f in rng.sample(ENTRY_FIELDS, 2)},
            }
            for _ in range(rng.randint(1, 4))
        ]
        cfg = {**base, "datasets": entries}
        for name in rng.sample(TOP_FIELDS, rng.randint(0, 3)):
            value = rng.choice(WEIRD)
            cfg[name] = (
                {"class_word": "p", "prompts": value}
                if name == "preservation" and rng.random() < 0.5
                else value
            )
        answer = client.post("/api/train/preflight", content=json.dumps({"config": cfg}),
                             headers={"content-type": "application/json"})  # fmt: skip
        assert answer.status_code < 500 and isinstance(answer.json(), dict), json.dumps(cfg)[:500]


def test_a_trigger_word_with_blanks_around_it_is_replaced_and_kept_like_the_captions_get_it(
    settings: Settings, base: dict
) -> None:
    """trigger_word " sks ": captions got "sks, ..." (stripped), but preservation looked for
    " sks " (so every preserved caption was the training caption itself, undoing the LoRA) and
    tag_dropout did not know the trigger tag (it was dropped like any tag)."""
    from lorastudio.data.caption_variants import scan_variants
    from lorastudio.data.preservation_texts import preservation_texts
    from lorastudio.jobs.validation import validate_run

    for i in range(2):
        (settings.datasets_dir / "shapes" / f"shapes{i}.txt").write_text(f"red, circle, big, {i}")
    raw = {
        **base, "data_dir": "shapes", "trigger_word": " sks ", "tag_dropout": 0.9,
        "preservation": {"class_word": "thing"},
    }  # fmt: skip
    run = validate_run(raw, settings, live_output_names=set())
    texts = preservation_texts(run.config, run.scan)
    assert texts is not None
    for i, item in enumerate(run.scan.items):
        assert item.caption.startswith("sks, red, ")
        assert texts.text(item.caption, i) == "thing, " + item.caption.removeprefix("sks, ")
    variants = scan_variants(run.scan, 16, run.config.seed)
    assert all("sks" in v.split(", ") for options in variants for v in options), variants
