"""The three answers to one generated config document (tests/config_fuzz.py): `lorastudio train
--check` (in process, its JSON file), POST /api/train/preflight and the engine's own validation
(parse_train_config, then training.preflight.preflight on --device cpu), and the fuzz audit's
invariants over them (`check_doc`): each accepts or refuses with every problem named by its field
path, no traceback, no 5xx; the three agree; every deliberately wrong field is named."""

from __future__ import annotations

import json
import re
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config_fuzz import Doc

_PROBLEM_LINE = re.compile(r"^\s+- ([A-Za-z_]\S*): ", re.M)
# named by the API and not by `train --check --device cpu`, by design: num_gpus (the CLI runs gloo
# ranks on the CPU); the target fields when the API's child check ran out of time ("not checked")
_API_ONLY = frozenset({"num_gpus", "lora_targets", "rank_pattern", "alpha_pattern"})


@dataclass
class Answer:
    """One way's answer: accepted, or refused with the fields its problems name."""

    way: str
    accepted: bool
    fields: set[str] = field(default_factory=set)
    text: str = ""
    crash: str | None = None  # a traceback, a 5xx, an exit status other than 0 / 2

    def summary(self) -> str:
        state = "crash" if self.crash else "accepted" if self.accepted else f"refused {sorted(self.fields)}"
        return f"{self.way}: {state}"


def cli_answer(doc: Doc, folder: Path) -> Answer:
    """`lorastudio train DOC.json --check --device cpu` in this process (typer's CliRunner)."""
    from typer.testing import CliRunner

    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    path = folder / f"fuzz-{doc.seed}.json"
    path.write_text(json.dumps(doc.data))
    result = CliRunner().invoke(app, ["train", str(path), "--check", "--device", "cpu"])
    out = result.output
    if result.exit_code == 0 and "would train" in out:
        return Answer("cli", True, text=out)
    if result.exit_code == 2 and (result.exception is None or isinstance(result.exception, SystemExit)):
        return Answer("cli", False, set(_PROBLEM_LINE.findall(out)) or _error_field(out), out)
    trace = "".join(traceback.format_exception(result.exception)) if result.exception else ""
    return Answer("cli", False, text=out, crash=f"exit {result.exit_code}: {out[-2000:]}\n{trace[-4000:]}")


def _error_field(out: str) -> set[str]:
    """A refusal that is not a ConfigError (one line, no field): named by its first word."""
    match = re.search(r"error: (\S+)", out)
    return {f"(error) {match.group(1)}"} if match else set()


def api_answer(client: Any, doc: Doc) -> Answer:
    """POST /api/train/preflight {"config": DOC} on the in-process app."""
    body = json.dumps({"config": doc.data}).encode()  # NaN / Infinity as JSON's extension writes them
    answer = client.post("/api/train/preflight", content=body, headers={"content-type": "application/json"})
    if answer.status_code == 200:
        return Answer("api", True, text=answer.text)
    if answer.status_code >= 500:
        return Answer("api", False, text=answer.text, crash=f"{answer.status_code}: {answer.text[:2000]}")
    payload = answer.json()
    if answer.status_code == 400 and isinstance(payload.get("problems"), list):
        fields = {p["field"] for p in payload["problems"] if isinstance(p, dict) and "field" in p}
        if fields:
            return Answer("api", False, fields, answer.text)
    if answer.status_code == 422:  # the HTTP schema's: {"detail": [{loc: ["body", "config", ...]}]}
        fields = {".".join(str(x) for x in d["loc"][2:]) or "config" for d in payload.get("detail", [])}
        return Answer("api", False, fields, answer.text)
    return Answer("api", False, {f"(error) {payload.get('error')}"}, answer.text)


def engine_answer(doc: Doc, settings: Any) -> Answer:
    """The engine's own validation: parse_train_config, then training.preflight.preflight and the
    launch check (check_parallel_config, of this single process: what train() runs before any
    model load) on the CPU."""
    from lorastudio.config import parse_train_config
    from lorastudio.errors import ConfigError, LorastudioError
    from lorastudio.training.distributed import ParallelContext, check_parallel_config
    from lorastudio.training.preflight import preflight

    try:
        cfg = parse_train_config(doc.data)
        preflight(cfg, settings, "cpu", decode_budget_s=30.0)
        check_parallel_config(cfg, ParallelContext())  # a num_gpus > 1 run started as one process
    except ConfigError as err:
        return Answer("engine", False, {p.field for p in err.problems}, str(err))
    except LorastudioError as err:
        return Answer("engine", False, {f"(error) {type(err).__name__}"}, str(err))
    except Exception:  # noqa: BLE001 - the audit records any other exception as a crash
        return Answer("engine", False, crash=traceback.format_exc()[-4000:])
    return Answer("engine", True)


def _names(fields: set[str], wanted: str) -> bool:
    """Whether a problem's field is `wanted` or a path inside it (`datasets.0.repeats` names
    `datasets`; pydantic's union member tags, `resolution.list[int]`, name `resolution`)."""
    return any(f == wanted or f.startswith(wanted + ".") or wanted.startswith(f + ".") for f in fields)


def check_doc(doc: Doc, answers: list[Answer]) -> list[str]:
    """The invariants broken by one document's answers (empty: all held)."""
    broken = [f"{doc.label()}: {a.way} crashed: {a.crash}" for a in answers if a.crash]
    if broken:
        return broken
    verdicts = {a.way: a.accepted for a in answers}
    if len(set(verdicts.values())) > 1:
        broken.append(f"{doc.label()}: the ways disagree: {[a.summary() for a in answers]}")
    by_way = {a.way: a for a in answers}
    cli, api = by_way.get("cli"), by_way.get("api")
    differ = cli and api and {f for f in cli.fields ^ api.fields if f.split(".")[0] not in _API_ONLY}
    if cli and api and not cli.accepted and not api.accepted and differ:
        broken.append(f"{doc.label()}: the CLI names {sorted(cli.fields)}, the API {sorted(api.fields)}")
    for a in answers:
        if not a.accepted and not a.fields:
            broken.append(f"{doc.label()}: {a.way} refused naming no field: {a.text[-1500:]}")
        if a.accepted and doc.wrong:
            broken.append(f"{doc.label()}: {a.way} accepted wrong values {sorted(doc.wrong)}")
        if not a.accepted:
            for wanted in sorted(doc.wrong):
                if not _names(a.fields, wanted):
                    broken.append(f"{doc.label()}: {a.way} did not name {wanted}: {sorted(a.fields)}")
    return broken


def fuzz_datasets(home: Path, sample_dataset: Path) -> tuple[Any, dict[str, str]]:
    """(Settings of the studio `home`, {"plain", "pairs"}): the sample dataset copied into its
    datasets folder twice, the second with a control/ image (its colour inverse) per image; absolute
    paths inside the datasets folder (what the API takes)."""
    import shutil

    from PIL import Image, ImageOps

    from lorastudio.settings import Settings

    settings = Settings(home=home)
    settings.ensure_dirs()
    plain = shutil.copytree(sample_dataset, settings.datasets_dir / "shapes")
    pairs = shutil.copytree(sample_dataset, settings.datasets_dir / "pairs")
    (pairs / "control").mkdir()
    for image in sorted(plain.glob("*.png")):
        with Image.open(image) as source:
            ImageOps.invert(source.convert("RGB")).save(pairs / "control" / image.name)
    return settings, {"plain": str(plain), "pairs": str(pairs)}
