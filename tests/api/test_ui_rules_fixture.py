"""The web tests' /api/info double takes the config rules from web/src/test/serverRules.gen.ts
(web/scripts/dump_rules.py): that file is what /api/info serves now, so the web tests that hide
and send settings by those rules test the server's rules, not a stale copy."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from fastapi.testclient import TestClient

from lorastudio.config_choices import host_choices
from lorastudio.config_host import BNB_OPTIMIZERS

RULES = Path(__file__).resolve().parents[2] / "web" / "src" / "test" / "serverRules.gen.ts"
_spec = importlib.util.spec_from_file_location("dump_rules", RULES.parents[2] / "scripts" / "dump_rules.py")
_dump = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_dump)
NAME_CASES, refused = _dump.NAME_CASES, _dump.refused


def test_the_web_tests_rules_are_what_api_info_serves(client: TestClient) -> None:
    info = client.get("/api/info").json()
    match = re.search(r"\}> \} = (\{.*\});\s*$", RULES.read_text(), re.S)
    assert match, f"{RULES}: run scripts/build_web.sh (web/scripts/dump_rules.py writes it)"
    fixture = json.loads(match[1])
    assert fixture["config_rules"] == info["config_rules"], "stale: rm web/.api-stamp; scripts/build_web.sh"
    # the new dataset name's rule, and new_name's verdicts on the names the web tests run it on
    assert fixture["dataset_name_rule"] == info["dataset_name_rule"], (
        "stale: rm web/.api-stamp; scripts/build_web.sh"
    )
    assert fixture["name_cases"] == [[n, refused(n)] for n in NAME_CASES], "stale: scripts/build_web.sh"
    keys = ("supports", "refuses", "attention_backends_refused", "max_sequence_length_max", "refuses_on")
    served = {f["name"]: {k: f[k] for k in keys} for f in info["families"]}
    assert fixture["families"] == served, "stale: rm web/.api-stamp; scripts/build_web.sh"
    # the file's CUDA host has no bitsandbytes, whatever this machine has (web/scripts/dump_rules.py)
    for device in ("cpu", "cuda"):
        here = host_choices(device)
        here["optimizers"] = [o for o in here["optimizers"] if device == "cpu" or o not in BNB_OPTIMIZERS]
        assert fixture["hosts"][device] == here, (
            f"stale {device} host: rm web/.api-stamp; scripts/build_web.sh"
        )
    host = info["host"]
    assert host_choices(host["device"]) == {
        k: host[k] for k in ("optimizers", "compile_modes", "attention_backends")
    }
