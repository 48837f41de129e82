"""Hostile tokenizer files and chat templates in a base model folder: the preflight's torch-free
caption count (jobs/caption_count.py, run in a bounded child) answers fast with the reason the
count is left to the start, never hangs the server, eats its memory, raises, or reads a file
outside the folder."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.polling import until

from lorastudio import families
from lorastudio.jobs import caption_tokens
from lorastudio.jobs.caption_tokens import CannotCount, caption_counts

SPEC = families.get("z-image").spec  # a chat template (tokenizer_config.json's or chat_template.jinja)


@pytest.fixture
def base(tiny_model: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the tiny Z-Image's tokenizer folder, a shorter count time limit (a loaded
    2-core host starts the child in well under it)."""
    monkeypatch.setattr(caption_tokens, "COUNT_TIMEOUT_S", 12.0)
    shutil.copytree(tiny_model("z-image") / "tokenizer", tmp_path / "base" / "tokenizer")
    tok = tmp_path / "base" / "tokenizer"
    jinja = tok / "chat_template.jinja"
    if jinja.exists():  # the template in tokenizer_config.json, where the attacks below put theirs
        _template(tmp_path / "base", jinja.read_text(encoding="utf-8"))
        jinja.unlink()
    return tmp_path / "base"


def _refused(base: Path, why: str) -> None:
    started = time.monotonic()
    with pytest.raises(CannotCount, match=why):
        caption_counts(SPEC, base, ["a red circle"])
    assert time.monotonic() - started < caption_tokens.COUNT_TIMEOUT_S + 3  # never held longer


def _template(base: Path, template: str) -> None:
    file = base / "tokenizer" / "tokenizer_config.json"
    config = json.loads(file.read_text(encoding="utf-8"))
    file.write_text(json.dumps({**config, "chat_template": template}), encoding="utf-8")


def test_the_tiny_base_is_counted(base: Path) -> None:
    assert caption_counts(SPEC, base, ["a red circle"])[0] > 3


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda f: os.mkfifo(f), "not a regular file"),
        (lambda f: f.symlink_to("/dev/zero"), "leads out of the model folder"),
        (lambda f: f.symlink_to("/etc/passwd"), "leads out of the model folder"),
        (lambda f: f.write_text("[" * 200_000 + "]" * 200_000), "cannot be read by tokenizers"),
        (lambda f: f.touch() or os.truncate(f, 200 * 2**20), "is 200 MiB"),
        (lambda f: f.write_bytes(b"\xff\xfe{"), "cannot be read by tokenizers"),
    ],
    ids=["fifo", "dev-zero", "outside", "nested", "huge", "not-utf8"],
)
def test_a_hostile_tokenizer_json_is_refused_fast(base: Path, make: Callable[[Path], None], why: str) -> None:
    file = base / "tokenizer" / "tokenizer.json"
    file.unlink()
    make(file)
    _refused(base, why)


@pytest.mark.parametrize(
    "config",
    ["[" * 200_000 + "]" * 200_000, "[1, 2]"],  # nested past Python's recursion limit; not an object
    ids=["nested", "a-list"],
)
def test_an_odd_tokenizer_config_is_no_chat_template(base: Path, config: str) -> None:
    (base / "tokenizer" / "tokenizer_config.json").write_text(config, encoding="utf-8")
    _refused(base, "has no chat template")


def test_a_special_token_without_content_is_left_out(base: Path) -> None:
    _template(base, "{{ bos_token is defined }}|{{ messages[0].content }}")
    file = base / "tokenizer" / "tokenizer_config.json"
    file.write_text(json.dumps({**json.loads(file.read_text()), "bos_token": {"id": 1}}), encoding="utf-8")
    assert caption_counts(SPEC, base, ["a red circle"]) == caption_counts(SPEC, base, ["a red circle"])
    assert caption_tokens.render_chat("{{ x is defined }}", [], {}) == "False"


def test_a_fifo_chat_template_is_refused_fast(base: Path) -> None:
    os.mkfifo(base / "tokenizer" / "chat_template.jinja")
    _refused(base, "not a regular file")


# the count limit of the templates that run until it (test_concurrent_counts_never_pile_up's too): a
# child killed there is the refusal asserted, and each such case holds a core until then
LOOP_LIMIT_S = 2.0


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("{{ 1/0 }}", "ZeroDivisionError"),
        ("{{ 1 + 'a' }}", "TypeError"),
        ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "RecursionError"),
        ("{{ ''.__class__.__mro__ }}", "unsafe"),
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "within 2 s"),
        ("{{ lipsum(1000000) }}", "within 2 s"),
        ("{{ 'a'|center(2000000000) }}", "within 2 s|MemoryError|could not be counted"),
        ("{{ 'a' * 10000000000 }}", "MemoryError|OverflowError|could not be counted|within 2 s"),
    ],
    ids=["zero-division", "type-error", "recursion", "escape", "loops", "lipsum", "center", "repeat"],
)
def test_a_hostile_chat_template_is_refused_fast(
    base: Path, template: str, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if "within 2 s" in why:  # the loops run until the limit: a short one
        monkeypatch.setattr(caption_tokens, "COUNT_TIMEOUT_S", LOOP_LIMIT_S)
    _template(base, template)
    _refused(base, why)


def test_a_hub_snapshots_links_into_its_blobs_are_followed(base: Path, tmp_path: Path) -> None:
    repo = tmp_path / "hub" / "models--acme--tiny"
    snapshot = repo / "snapshots" / ("a" * 40)
    (repo / "blobs").mkdir(parents=True)
    (snapshot / "tokenizer").mkdir(parents=True)
    for file in (base / "tokenizer").iterdir():
        blob = repo / "blobs" / file.name
        shutil.copy(file, blob)
        (snapshot / "tokenizer" / file.name).symlink_to(Path("../../..") / "blobs" / file.name)
    assert caption_counts(SPEC, snapshot, ["a red circle"]) == caption_counts(SPEC, base, ["a red circle"])


def test_a_local_dir_of_links_into_hub_blobs_is_counted(base: Path, tmp_path: Path) -> None:
    """huggingface_hub's old `--local-dir` with symlinks: a plain folder whose files link into the
    hub cache's blobs (session 30 environ). Before: "counted at the start of the run (... leads
    out of the model folder)". A link out to any other file is still refused."""
    import hashlib

    blobs = tmp_path / "hub" / "models--acme--tiny" / "blobs"
    blobs.mkdir(parents=True)
    local = tmp_path / "local-dir"
    (local / "tokenizer").mkdir(parents=True)
    for file in (base / "tokenizer").iterdir():
        blob = blobs / hashlib.sha256(file.read_bytes()).hexdigest()
        shutil.copy(file, blob)
        (local / "tokenizer" / file.name).symlink_to(blob)
    assert caption_counts(SPEC, local, ["a red circle"]) == caption_counts(SPEC, base, ["a red circle"])
    tokenizer = local / "tokenizer" / "tokenizer.json"
    target = tokenizer.resolve()
    for elsewhere in (
        tmp_path / "notes" / target.name,  # a hash's name, not in a hub cache's blobs
        tmp_path / "blobs" / target.name,  # blobs/, not a models-- repository's
        target.with_name("tokenizer.json"),  # in blobs/, not named by a hash
    ):
        elsewhere.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(target, elsewhere)
        tokenizer.unlink()
        tokenizer.symlink_to(elsewhere)
        _refused(local, "leads out of the model folder")


def test_concurrent_counts_never_pile_up(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight preflights at once of a base whose template loops: two children run, two requests
    wait, the others are answered at once (the count left to the start), not held in turn."""
    monkeypatch.setattr(caption_tokens, "COUNT_TIMEOUT_S", LOOP_LIMIT_S)
    _template(base, "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
    real_child, release, released = caption_tokens._run_child, threading.Event(), []

    def held_child(ask: dict) -> object:  # the children start once the test has seen who was turned away
        release.wait(60)
        return real_child(ask)

    monkeypatch.setattr(caption_tokens, "_run_child", held_child)
    answers: list[tuple[float, str]] = []

    def ask() -> None:
        try:
            caption_counts(SPEC, base, ["a red circle"])
            why = "counted"
        except CannotCount as err:
            why = str(err)
        answers.append((time.monotonic() - (released or [time.monotonic()])[0], why))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    turned_away = 8 - 2 - caption_tokens.MAX_WAITING  # answered while the children are held
    until(lambda: len(answers) == turned_away, 60, "answers to the turned-away counts")
    assert [why for _, why in answers] == ["other caption counts are running"] * turned_away
    released.append(time.monotonic())
    release.set()
    for thread in threads:
        thread.join(60)
    timed_out = [took for took, why in answers if "within 2 s" in why]
    # two children at a time, each killed at LOOP_LIMIT_S: the waiting ones are not held longer than two turns
    assert len(timed_out) == 2 + caption_tokens.MAX_WAITING and max(timed_out) < 2 * LOOP_LIMIT_S + 3, answers


def test_a_large_datasets_chat_template_count_finishes_in_time(base: Path) -> None:
    """The template was compiled again for every caption (~5 ms each): 5,000 captions ran past
    the child's time and were never counted."""
    captions = [f"a red circle number {i}" for i in range(5000)]
    counts = caption_counts(SPEC, base, captions)  # ~1 s; 5 ms a caption was 25 s, past the 12 s
    assert len(counts) == 5000 and counts[0] == caption_counts(SPEC, base, captions[:1])[0]
