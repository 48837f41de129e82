"""Numbers the CLI reads from text someone typed or set (session 40 attack audit): each was
checked with `str.isdigit()` and then read with int(), which raises ValueError for "²" (a digit to
isdigit, not to int) and for more than 4,300 digits: a traceback where a named problem belongs
(RELIABILITY 2103). lorastudio.digits reads them: ASCII digits, at most 18."""

from __future__ import annotations

import pytest

from lorastudio.cli.config_file import apply_overrides
from lorastudio.digits import whole_number
from lorastudio.errors import ConfigError

HUGE = "9" * 5000  # past int()'s 4,300 digits


def test_a_set_path_index_of_thousands_of_digits_is_named() -> None:
    with pytest.raises(ConfigError) as err:
        apply_overrides({"datasets": [{"path": "a"}]}, [f"datasets.{HUGE}.repeats=1"])
    (problem,) = err.value.problems
    assert problem.message == "datasets has 1 entries (datasets.0 to datasets.0)"


@pytest.mark.parametrize(("typed", "rule"), [("²", "²"), (HUGE, HUGE), (" 512 ", 512), ("target", "target")])
def test_generate_reads_a_control_resolution_side_in_ascii_digits_only(typed: str, rule: object) -> None:
    """Anything but a side of ASCII digits goes on as typed, for control_resolution_problems to
    name ("'²': must be 'pipeline', 'target' or a side of 64-4096 pixels")."""
    from lorastudio.cli.generate_cmd import _control_rule

    assert _control_rule(typed) == rule


@pytest.mark.parametrize("value", ["²", HUGE, "", "-1", "١٢"])
def test_a_rank_ignores_an_agent_pid_that_is_no_pid(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    import lorastudio.jobs.worker as worker
    from lorastudio.cli.train_launch import bind_to_agent

    bound: list[int] = []
    monkeypatch.setattr(worker, "bind_to_parent", bound.append)
    monkeypatch.setenv("LORASTUDIO_AGENT_PID", value)
    bind_to_agent()
    assert bound == []
    monkeypatch.setenv("LORASTUDIO_AGENT_PID", "4321")
    bind_to_agent()
    assert bound == [4321]


def test_whole_number_takes_ascii_digits_and_few() -> None:
    assert [whole_number(t) for t in ("0", "007", "9" * 18, "9" * 19, "²", "٣", " 1", "+1", "")] == [
        0, 7, 10**18 - 1, None, None, None, None, None, None,
    ]  # fmt: skip
