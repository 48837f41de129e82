"""The new-dataset name rule the web form applies (data/name_rule.py, /api/info's
dataset_name_rule) refuses exactly the names data.paths.new_name refuses, with its reason; the
web tests run the same checks in JavaScript on NAME_CASES (web/scripts/dump_rules.py)."""

from __future__ import annotations

import importlib.util
import unicodedata
from pathlib import Path

import pytest
import regex

from lorastudio.data.name_rule import new_name_rule
from lorastudio.data.paths import new_name
from lorastudio.errors import ConfigError, PathOutsideRoot

# the names the web tests check too (web/scripts/dump_rules.py NAME_CASES, with new_name's verdicts)
_spec = importlib.util.spec_from_file_location(
    "dump_rules", Path(__file__).parents[3] / "web/scripts/dump_rules.py"
)
dump_rules = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dump_rules)
NAME_CASES = dump_rules.NAME_CASES


def first_refusal(name: str) -> int | None:
    """The index of the served rule's first check that refuses `name` (len(checks): its byte
    limit), None if it takes the name."""
    rule = new_name_rule()
    name = unicodedata.normalize("NFC", name)
    for i, check in enumerate(rule["checks"]):
        flags = regex.IGNORECASE if "i" in check["flags"] else 0
        if regex.search(check["refuse"], name, flags):
            return i
    return len(rule["checks"]) if len(name.encode("utf-8", "surrogatepass")) > rule["max_bytes"] else None


def served(name: str) -> str | None:
    """The served rule's reason for refusing `name`, None if it takes it."""
    rule = new_name_rule()
    i = first_refusal(name)
    if i is None:
        return None
    if i == len(rule["checks"]):
        return rule["bytes_reason"]
    return rule["checks"][i]["reason"].replace("{name}", repr(unicodedata.normalize("NFC", name)))


def server(name: str) -> str | None:
    try:
        new_name(name)
    except (ConfigError, PathOutsideRoot) as err:
        return str(err)
    return None


@pytest.mark.parametrize("name", NAME_CASES)
def test_the_served_rule_refuses_what_new_name_refuses_with_its_reason(name):
    verdict, truth = served(name), server(name)
    assert (verdict is None) == (truth is None), (name, verdict, truth)
    if truth is not None:
        fixed = regex.split(r" \(|: | any of ", verdict)[0]  # the server names the bad characters found
        assert fixed in truth, (verdict, truth)


def test_the_cases_cover_every_check_and_non_ascii_names_are_taken():
    rule = new_name_rule()
    assert {first_refusal(name) for name in NAME_CASES} == {None, *range(len(rule["checks"]) + 1)}
    assert new_name("café") == "café" and served("café") is None and served("猫の写真") is None
