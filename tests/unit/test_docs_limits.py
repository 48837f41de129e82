"""Every bound README states in words (a size cap, a count of records kept, a time allowance) is
the constant the code enforces (read, never run).

Each row: a phrase of README with the number as a group, the constant, and the unit the phrase
gives it in. A row whose phrase README no longer has fails too (the claim was reworded: find it
again), so a constant changed without its prose, or prose changed without its constant, fails.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lorastudio.api import sse, sse_slots
from lorastudio.cgroup_limits import MIN_SHM_BYTES
from lorastudio.data import cache_prune, captions, colour, decoded, thumbnails
from lorastudio.jobs import caption_records, generation_records, step_watch, worker_allowance, worker_log
from lorastudio.timings import MAX_RECORDS as TIMING_RECORDS
from lorastudio.training.speed import precompile_prune

README = re.sub(r"\s+", " ", (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8"))
KB, MB = 2**10, 2**20

# (README phrase as a regex, its number group, the constant, what one unit of the phrase is)
CLAIMS = [
    (r"A caption is at most (\d+) KB", captions.MAX_CAPTION_BYTES, KB),
    (r"metadata\.jsonl at most (\d+) MB", captions.MAX_METADATA_BYTES, MB),
    (r"is over (\d+) MB or does not fit its pixels", colour.MAX_PROFILE_BYTES, MB),
    (r"unset: (\d+) GB or half of the cache", cache_prune.DEFAULT_MAX_GB, 1),
    (r"half of the cache plus its disk's free space", None, None),
    (r"every (\d+) s at most and its end; the newest \d+ are kept", caption_records.RECORD_EVERY_S, 1),
    (r"its end; the newest (\d+) are kept", caption_records.KEEP, 1),
    (r"at most (\d+) s of such decodes per check", decoded.FULL_DECODE_BUDGET_S, 1),
    (r"generation: (\d+) s to start", worker_allowance.READY_S, 1),
    (r"to start, (\d+) min to load a model", worker_allowance.LOAD_S, 60),
    (r"min to load a model, (\d+) s \+ \d+ s per step", worker_allowance.FIXED_S, 1),
    (r"s \+ (\d+) s per step per megapixel", worker_allowance.STEP_S, 1),
    (r"captioning: (\d+) min to load", worker_allowance.CAPTION_LOAD_S, 60),
    (r"min to load, (\d+) min per image", worker_allowance.CAPTION_IMAGE_S, 60),
    (r": (\d+) x its slowest step", step_watch.HANG_STEP_FACTOR, 1),
    (r"a run's log \((\d+) MB, with its rotated half", worker_log.MAX_LOG_BYTES, MB),
    (r"dataset thumbnails \(([\d,]+) files, the oldest go first", thumbnails.CACHE_MAX_FILES, 1),
    (r"the asynchronous generations' records \(the newest (\d+)\)", generation_records.KEEP, 1),
    (r"the caption jobs' records \(the newest (\d+)\)", caption_records.KEEP, 1),
    (r"\(`run_timings/`, the newest (\d+)\)", TIMING_RECORDS, 1),
    (r"a `: keep-alive` comment every (\d+) s when idle", sse.SSE_KEEPALIVE_S, 1),
    (r"holds at most (\d+) live event streams", sse_slots.SSE_MAX_PER_CLIENT, 1),
    (r"the server at most (\d+) in all", sse_slots.SSE_MAX_STREAMS, 1),
    (r"a stream that sent no event for (\d+) s is closed", sse.SSE_IDLE_CLOSE_S, 1),
    (r"A key folder there that no run used for (\d+) days is removed", precompile_prune.KEEP_DAYS, 1),
    (r"while /dev/shm is under (\d+) MB", MIN_SHM_BYTES, MB),
]


@pytest.mark.parametrize(("phrase", "constant", "unit"), CLAIMS, ids=[c[0][:40] for c in CLAIMS])
def test_each_bound_readme_states_is_the_codes(phrase: str, constant: float | None, unit: float | None):
    found = re.search(phrase, README)
    assert found, f"README no longer says {phrase!r}: reworded? find the claim and update this row"
    if constant is None:
        return  # a rule in words only: its presence is the check
    stated = float(found.group(1).replace(",", ""))
    assert stated * unit == constant, (
        f"README says {found.group(0)!r}; the code's bound is {constant} ({unit} a unit)"
    )


def test_readmes_paths_line_names_every_folder_paths_prints():
    """README's `lorastudio paths` line names each folder the command prints (it left out the encode
    cache's line, session 37 docs2)."""
    from typer.testing import CliRunner

    from lorastudio.cli.app import _register, app

    _register()
    out = CliRunner().invoke(app, ["paths"])
    assert out.exit_code == 0, out.output
    labels = [line.split()[0] for line in out.output.splitlines() if line.strip()]
    line = re.search(r"lorastudio paths +# ([^`]*?) lorastudio du", README)
    assert line and len(labels) >= 6
    words = {"home": "where", "database": "run database", "cache": "encode cache"}
    assert [w for w in labels if words.get(w, w) not in line.group(1)] == []


def test_the_ranges_generates_help_states_are_the_rules():
    """`lorastudio generate --help` states the seed, guidance and steps ranges the CLI and the API
    check (generation_rules.py), and names the LoRA scale's range it refuses past."""
    import typer

    from lorastudio import generation_rules as rules
    from lorastudio.cli.app import _register, app

    _register()
    command = typer.main.get_command(app).commands["generate"]  # type: ignore[attr-defined]
    helps = {p.name: (p.help or "") for p in command.params}
    assert f"0-{rules.SEED_MAX}" in helps["seed"]
    assert f"0-{rules.GUIDANCE_MAX:g}" in helps["guidance"]
    assert f"1-{rules.MAX_STEPS}" in helps["steps"]
    assert f"{-rules.LORA_SCALE_LIMIT:g} to {rules.LORA_SCALE_LIMIT:g}" in helps["lora"]
