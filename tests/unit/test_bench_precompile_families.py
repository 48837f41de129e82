"""bench/precompile_families.py's verdict: what makes a family's saved-graph runs fail."""

from pathlib import Path

from bench.precompile_families import child_command, verdict


def _runs(save: dict, load: dict, losses: dict[str, list[float]]) -> dict:
    counters = {"eager": {}, "off": {}, "on-save": save, "on-load": load}
    return {"family": "flux", "runs": {t: {"losses": losses[t], "counters": counters[t]} for t in counters}}


GOOD = {"eager": [1.0, 0.9], "off": [1.0, 0.9], "on-save": [1.0, 0.9], "on-load": [1.0, 0.9]}


def test_a_clean_save_and_load_with_equal_losses_passes():
    assert verdict(_runs({"saved": 2}, {"hit": 2}, GOOD), 1e-5, 1e-3) == []


def test_each_failure_is_named():
    assert "on-save saved nothing" in verdict(_runs({}, {"hit": 2}, GOOD), 1e-5, 1e-3)[0]
    assert (
        "on-load did not load" in verdict(_runs({"saved": 2}, {"hit": 2, "fallback": 1}, GOOD), 1e-5, 1e-3)[0]
    )
    drift = {**GOOD, "on-load": [1.0, 0.95]}
    assert verdict(_runs({"saved": 2}, {"hit": 2}, drift), 1e-5, 1e-3) == [
        "on-load losses differ from off by 5.00e-02"
    ]
    eager = {**GOOD, "eager": [1.1, 0.9]}
    assert "differ from eager" in verdict(_runs({"saved": 2}, {"hit": 2}, eager), 1e-5, 1e-3)[0]
    errored = {"family": "flux", "runs": {"off": {"error": "Traceback: boom"}}}
    assert verdict(errored, 1e-5, 1e-3) == ["off: Traceback: boom"]


def test_every_set_item_reaches_the_child_run():
    """Session 36's `--set adapter=lokr` runs trained LoRA: the items never reached the child."""
    cmd = child_command(Path("/r"), "flux", "off", 3, "on", "cuda", ["adapter=lokr", "lokr_factor=4"])
    assert cmd[cmd.index("child") + 1] == "/r"
    sets = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--set"]
    assert sets == ["adapter=lokr", "lokr_factor=4"]
    args = dict(zip(cmd[cmd.index("--families") :: 2], cmd[cmd.index("--families") + 1 :: 2], strict=False))
    assert args["--families"] == "flux" and args["--tag"] == "off" and args["--device"] == "cuda"
