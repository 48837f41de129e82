"""What README.md and CONTRIBUTING.md point a user at exists, spelt as they spell it (read, never run).

test_docs_claims.py checks the commands, configs and routes README gives; this file checks the
rest of what a new user follows from the two files and from `lorastudio --help`:
- every file or folder path named (`tests/...`, `bench/...`, `jobs/caption_gpu.py`) exists, and
  every `python -m MODULE` names a module there is;
- every `LORASTUDIO_*` variable named is read by the code (a server setting or an `os.environ`
  look-up), and every test named (`test_a_half_precision_file`) is a test of the suite;
- every query parameter of a README route (`GET /api/runs/{id}/log?lines=N`) is one the route
  takes, and every body or answer field README names for a route is in that route's schema;
- every command a CLI help text names (`datasets caption --model PATH`) exists with its options;
- every default README's prose states for a setting (`caption_variants` (default 8)) is the
  setting's default or the one its description gives for null.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from lorastudio.api.app import create_app
from lorastudio.cli.app import _register, app
from lorastudio.config import TrainConfig
from lorastudio.config_datasets import DatasetEntry
from lorastudio.settings import Settings, get_settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = {name: (ROOT / name).read_text(encoding="utf-8") for name in ("README.md", "CONTRIBUTING.md")}
FLAT = {name: re.sub(r"\s+", " ", text) for name, text in DOCS.items()}
# README's settings reference is generated from the fields (config_reference's test checks it)
PROSE = FLAT["README.md"].split("settings-reference:start")[0]
SEARCHED = ("src", "scripts", "bench", "tests", ".ci")


def _code_text() -> str:
    out = []
    for top in SEARCHED:
        for path in (ROOT / top).rglob("*"):
            if path.suffix in (".py", ".sh", "") and path.is_file() and "node_modules" not in path.parts:
                out.append(path.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(out)


def _named_paths() -> list[str]:
    """Paths the docs name: from a top folder (`tests/unit/x.py`, `bench/RESULTS.md`) or a package
    folder of src/lorastudio (`jobs/caption_gpu.py`)."""
    found = set()
    for text in DOCS.values():
        found |= set(re.findall(r"(?<![\w./<-])((?:tests|bench|scripts|src)/[\w./-]*\w)", text))
        found |= set(re.findall(r"(?<![\w./<-])([a-z_]+/[a-z_0-9]+\.(?:py|md))\b", text))
    return sorted(found)


def _exists(named: str) -> bool:
    bases = [ROOT, ROOT / "src", ROOT / "src" / "lorastudio", ROOT / "tests", ROOT / "tests" / "unit"]
    return any((base / named).exists() for base in bases)


def test_every_path_the_docs_name_exists():
    named = _named_paths()
    assert len(named) >= 20
    assert [p for p in named if not _exists(p)] == []


def test_every_python_module_the_docs_run_exists():
    modules = sorted({m for text in FLAT.values() for m in re.findall(r"python -m ([a-z_][\w.]*\w)", text)})
    assert "lorastudio.config_reference" in modules and len(modules) >= 4
    sys.path.insert(0, str(ROOT))  # bench is a folder of the checkout, not an installed package
    try:
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
    finally:
        sys.path.remove(str(ROOT))
    assert missing == []


def test_every_environment_variable_the_docs_name_is_read():
    named = sorted(
        {v for text in DOCS.values() for v in re.findall(r"\b(LORASTUDIO_[A-Z0-9_]*[A-Z0-9])\b", text)}
    )
    assert len(named) >= 15
    code = _code_text()
    unread = [
        v
        for v in named
        if v.removeprefix("LORASTUDIO_").lower() not in Settings.model_fields
        and not re.search(rf"[\"'{{]{v}\b", code)  # "NAME", 'NAME' or ${NAME (a shell script's)
    ]
    assert unread == []


def test_every_test_the_docs_name_is_in_the_suite():
    tests = ROOT / "tests"
    defined = {
        m for p in tests.rglob("test_*.py") for m in re.findall(r"def (test_\w+)", p.read_text("utf-8"))
    }
    files = {p.stem for p in tests.rglob("test_*.py")}
    named = sorted({t for text in DOCS.values() for t in re.findall(r"`(test_\w+)`", text)})
    assert len(named) >= 5
    # a name may be a test's start (README names a parametrised family of tests by it) or a file
    assert [t for t in named if t not in files and not any(d.startswith(t) for d in defined)] == []


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    return create_app(get_settings()).openapi()


def test_every_status_a_route_description_names_is_declared(openapi):
    """A route's description ("502 the hub failed") and its declared responses agree: a client
    generated from /openapi.json has a case for each status the prose promises (another route's
    status in parentheses after its name, `POST /api/generations (202 at once)`, is that route's)."""
    undeclared = []
    for route, ops in openapi["paths"].items():
        for method, op in ops.items():
            text = " ".join([op.get("summary", ""), op.get("description", "")])
            text = re.sub(r"(?:GET|POST|PUT|DELETE) /\S+ \([^)]*\)", "", re.sub(r"\s+", " ", text))
            named = {int(n) for n in re.findall(r"(?<![\w.%-])([2-5]\d\d)(?![\w.%-])", text)}
            named = {n for n in named if n in HTTP_STATUSES}
            undeclared += [
                f"{method.upper()} {route}: {n}" for n in sorted(named) if str(n) not in op["responses"]
            ]
    assert undeclared == []


HTTP_STATUSES = {
    200,
    201,
    202,
    204,
    206,
    400,
    401,
    403,
    404,
    405,
    409,
    413,
    415,
    416,
    421,
    422,
    500,
    502,
    503,
    504,
    507,
}


def _route(openapi: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    """The operation of `path` as README writes it (`/api/runs/{id}/log`, `/api/datasets/NAME`)."""

    def shape(p: str) -> str:
        return re.sub(r"/(?:\{[^}]+\}|[A-Z]+)(?=/|$)", "/{x}", p)

    for route, ops in openapi["paths"].items():
        if method.lower() in ops and shape(route) == shape(path):
            return ops[method.lower()]
    raise AssertionError(f"no route {method} {path}")


def test_every_query_parameter_readme_gives_a_route_is_one_it_takes(openapi):
    given = re.findall(r"(GET|POST|PUT|DELETE) (/api/[\w/{}.-]+)\?([\w=&]+)", PROSE)
    # `?strict=true` (a query parameter) of the upload, `?step=N` of a LoRA's download
    given += [("POST", "/api/datasets/NAME/files", q) for q in re.findall(r"`\?(strict=\w+)`", PROSE)]
    given += [("GET", "/api/loras/NAME/file", q) for q in re.findall(r"download `\?(step=[\w=&]+)`", PROSE)]
    assert len(given) >= 6, given
    for method, path, query in given:
        takes = {p["name"] for p in _route(openapi, method, path).get("parameters", []) if p["in"] == "query"}
        names = {pair.split("=", 1)[0] for pair in query.split("&")}
        assert names <= takes, f"{method} {path}?{query}: takes only {sorted(takes)}"


def _field(openapi: dict[str, Any], schema: dict[str, Any], dotted: str) -> bool:
    """Whether `dotted` (`families[].refuses`, `loras[].sha256`) is a field of `schema`."""
    for part in dotted.split("."):
        schema = _resolve(openapi, schema)
        name, many = part.removesuffix("[]"), part.endswith("[]")
        props = schema.get("properties", {})
        if name not in props:
            return False
        schema = _resolve(openapi, props[name])
        if many:
            schema = _resolve(openapi, schema.get("items", {}))
    return True


def _resolve(openapi: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """A $ref followed; a nullable one (anyOf [X, null]) taken as X."""
    while True:
        if "$ref" in schema:
            schema = openapi["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        elif "anyOf" in schema:
            schema = next((s for s in schema["anyOf"] if s.get("type") != "null"), {})
        else:
            return schema


# (README's words, the route, "body" | "answer", the fields those words name)
FIELDS = [
    ('take a config as `{"config": {...}}`', "POST /api/train/start", "body", ["config"]),
    ('take a config as `{"config": {...}}`', "POST /api/train/preflight", "body", ["config"]),
    ('the resume API with `{"settings": {"steps": N}}`', "POST /api/runs/ID/resume", "body", ["settings"]),
    ("(`loras: [{name, scale, step, weights, sha256}]`)", "POST /api/generate", "body", ["loras[].name", "loras[].scale"]),
    ("(`loras: [{name, scale, step, weights, sha256}]`)", "POST /api/generate", "body",
     ["loras[].step", "loras[].weights", "loras[].sha256"]),
    ("then `references` in `/api/generate`", "POST /api/generate", "body", ["references"]),
    ("a negative prompt (`negative_prompt`, `generate --negative`)", "POST /api/generate", "body", ["negative_prompt"]),
    ("for a request sent with that `request_id`", "POST /api/generate", "body", ["request_id"]),
    ("tells its `state` (`queued` for the worker, `loading` the worker or the pipeline, `generating` at `step` of `steps`",
     "GET /api/generations/ID", "answer", ["state", "step", "steps"]),
    ("then `done` with the gallery `image` and its `url`, `failed` with the `error`", "GET /api/generations/ID",
     "answer", ["image.url", "error.status", "error.detail"]),
    ("may name the caption it started from (`expected`,", "PUT /api/datasets/N/captions/F", "body", ["expected"]),
    ("(`GET /api/loras`: `weights`, and `raw_step`,", "GET /api/loras", "answer", ["loras[].weights", "loras[].raw_step"]),
    ("(`GET /api/loras`: each LoRA's `files`)", "GET /api/loras", "answer", ["loras[].files"]),
    ("refused settings (`families[].refuses`)", "GET /api/info", "answer", ["families[].refuses"]),
    ("(`attention_backends_refused`: Chroma's cuDNN)", "GET /api/info", "answer", ["families[].attention_backends_refused"]),
    ("(`max_sequence_length_max`: 512", "GET /api/info", "answer", ["families[].max_sequence_length_max"]),
    ("(`refuses_on`: Qwen-Image-Edit's `random_flip`)", "GET /api/info", "answer", ["families[].refuses_on"]),
    ("`/api/info` families' `negative_prompt`", "GET /api/info", "answer", ["families[].negative_prompt"]),
    ("`/api/info` families' `guidance`", "GET /api/info", "answer", ["families[].guidance"]),
    ("(`config_rules`)", "GET /api/info", "answer", ["config_rules"]),
    ("(`host.optimizers`, `host.compile_modes`, `host.attention_backends`)", "GET /api/info", "answer",
     ["host.optimizers", "host.compile_modes", "host.attention_backends"]),
    ("(web Train page, `dataset.caption_tokens`:", "POST /api/train/preflight", "answer", ["dataset.caption_tokens"]),
    ("(the preflight's `dataset.mode` says which)", "POST /api/train/preflight", "answer", ["dataset.mode"]),
    ("(`--check`, the report's `family.notes`)", "POST /api/train/preflight", "answer", ["family.notes"]),
    ("the API's preflight in `conditioning`", "POST /api/train/preflight", "answer", ["conditioning"]),
    ("the preflight's `notes` then say", "POST /api/train/preflight", "answer", ["notes"]),
    # session 28: what renders a preview again, the paged gallery (surfaces audit)
    ("`GET /api/runs/{id}/samples` lists each with its `seed`, `width`, `height`, `guidance`, `steps`",
     "GET /api/runs/ID/samples", "answer",
     ["samples[].seed", "samples[].width", "samples[].height", "samples[].guidance", "samples[].steps"]),
    ("the `weights` it shows and `lora`, Generate's `loras` entry of the file holding them, or null with a `note`",
     "GET /api/runs/ID/samples", "answer", ["samples[].weights", "samples[].lora", "samples[].note"]),
    ("the answer's `total` counts every image and its `next_cursor`", "GET /api/gallery", "answer",
     ["total", "next_cursor", "images"]),
    # session 29: EMA step files, Generate's text tokens (docs29)
    ('`weights=ema` with it (download `?step=N&weights=ema`, `[{name, step, weights: "ema"}]`)',
     "POST /api/generate", "body", ["loras[].weights"]),
    ("The text tokens the prompt is read to (`max_sequence_length`, `generate --max-sequence-length`",
     "POST /api/generate", "body", ["max_sequence_length"]),
    ("`steps`, `max_sequence_length` (the run's: its previews read their prompt to it)",
     "GET /api/runs/ID/samples", "answer", ["samples[].max_sequence_length"]),
    ("each labelled with the weights it holds (`weights`: `ema` / `raw`", "GET /api/runs/ID/loras", "answer",
     ["loras[].weights", "loras[].step"]),
    # session 34: the paged runs list (home at scale audit)
    ("the answer's `total` counts every run and its `next_cursor`", "GET /api/runs", "answer",
     ["total", "next_cursor", "runs"]),
]  # fmt: skip


def test_each_error_readme_names_with_its_status_is_answered_so(openapi):
    """README's "409 `JobActive`", "404 `DatasetNotFound`" (`{"error": CLASS}`): each class named
    beside a status is a domain error api/errors.py answers with that status (its nearest mapped
    class), so a client keyed on the body's `error` gets what README says."""
    from lorastudio import errors
    from lorastudio.api.errors import STATUS_CODES

    named = set(re.findall(r"\b([45]\d\d)[),:;]? `([A-Z][A-Za-z]+)`", PROSE))
    assert {("409", "JobActive"), ("409", "DatasetChanged"), ("404", "DatasetNotFound")} <= named, named
    wrong = []
    for status, name in sorted(named):
        cls = getattr(errors, name, None)
        mapped = next((STATUS_CODES[c] for c in getattr(cls, "__mro__", ()) if c in STATUS_CODES), None)
        if mapped != int(status):
            wrong.append(f"{status} `{name}`: answered {mapped}")
    assert wrong == []
    # the error body's own fields README names: a missing dataset's name, a caption edit's current text
    assert '404 `DatasetNotFound` (`"dataset": NAME` in the body)' in PROSE
    assert {"error", "detail", "dataset", "current"} <= set(
        openapi["components"]["schemas"]["ErrorOut"]["properties"]
    )


def test_the_gallerys_paging_parameters_readme_names_are_the_routes(openapi):
    """README: `GET /api/gallery?limit=60` (1-1000, the default 60) and `cursor` (session 28)."""
    assert "(`GET /api/gallery?limit=60`, the default; `limit` 1-1000;" in PROSE
    assert "`next_cursor`, given as `cursor`," in PROSE
    params = {p["name"]: p for p in _route(openapi, "GET", "/api/gallery").get("parameters", [])}
    assert {"limit", "cursor"} <= set(params), sorted(params)
    limit = params["limit"]["schema"]
    assert (limit.get("default"), limit.get("minimum"), limit.get("maximum")) == (60, 1, 1000), limit


def test_the_runs_paging_parameters_readme_names_are_the_routes(openapi):
    """README: `GET /api/runs?limit=200` (1-10000, the default 200) and `cursor` (session 34)."""
    assert "`GET /api/runs?limit=200`, the default, `limit` 1-10000;" in PROSE
    params = {p["name"]: p for p in _route(openapi, "GET", "/api/runs").get("parameters", [])}
    assert {"limit", "cursor"} <= set(params), sorted(params)
    limit = params["limit"]["schema"]
    assert (limit.get("default"), limit.get("minimum"), limit.get("maximum")) == (200, 1, 10_000), limit


@pytest.mark.parametrize(("words", "route", "side", "fields"), FIELDS)
def test_each_field_readme_names_for_a_route_is_in_its_schema(openapi, words, route, side, fields):
    assert re.sub(r"\s+", " ", words) in PROSE, f"README no longer says {words!r}: update this test"
    method, path = route.split(" ", 1)
    op = _route(openapi, method, path)
    if side == "body":
        schema = next(iter(op["requestBody"]["content"].values()))["schema"]
    else:
        schema = op["responses"]["200"]["content"]["application/json"]["schema"]
    assert [f for f in fields if not _field(openapi, schema, f)] == [], f"{route} ({side})"


def test_the_api_schema_readme_names_is_there(openapi):
    """`TrainConfigOut`, the resolved config, at /docs."""
    assert "`TrainConfigOut`" in PROSE and "TrainConfigOut" in openapi["components"]["schemas"]


def _commands() -> list[tuple[str, Any]]:
    _register()
    out = []

    def walk(cmd: Any, path: str) -> None:
        out.append((path, cmd))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "lorastudio")
    return out


def _help_spans() -> list[tuple[str, str]]:
    """`lorastudio X ...` or `GROUP X ...` spans of every command's and option's help text."""
    groups = {path.split()[1] for path, cmd in _commands() if hasattr(cmd, "commands") and " " in path}
    spans = []
    for path, cmd in _commands():
        text = " ".join([cmd.help or "", *((getattr(p, "help", None) or "") for p in cmd.params)])
        for span in re.findall(r"`([^`]+)`", text):
            words = span.split()
            if words[0] == "lorastudio" or (words[0] in groups and len(words) > 1):
                spans.append((path, span if words[0] == "lorastudio" else f"lorastudio {span}"))
    return spans


def test_every_command_a_help_text_names_exists_with_its_options():
    spans = _help_spans()
    assert len(spans) >= 8
    commands = dict(_commands())
    for path, span in spans:
        words = span.split()
        i = len(words)
        while " ".join(words[:i]) not in commands:  # the longest command the span starts with
            i -= 1
            assert i > 1, f"`{path} --help` names `{span}`: no such command"
        cmd = commands[" ".join(words[:i])]
        assert hasattr(cmd, "commands") is False or i == len(words), f"`{path} --help`: `{span}`"
        known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
        unknown = [w for w in words[i:] if w.startswith("-") and w not in known]
        assert unknown == [], f"`{path} --help` names `{span}`: no option {unknown}"


def _stated_defaults() -> list[tuple[str, str]]:
    fields = {**DatasetEntry.model_fields, **TrainConfig.model_fields}
    found = re.findall(r"`([a-z_0-9]+)` \(default:? ([0-9][0-9.]*)[;,)]", PROSE)
    found += re.findall(r"`([a-z_0-9]+)` \(([0-9][0-9.]*)\)", PROSE)
    found += re.findall(r"`([a-z_0-9]+)`:? =? ?`\"?([a-z_0-9]+)\"?` \((?:[a-z ]+, )?default[,)]", PROSE)
    found += re.findall(r"`([a-z_0-9]+) = \"([a-z_0-9]+)\"` \(default\)", PROSE)
    return [(n, v) for n, v in found if n in fields]


def _same(value: Any, stated: str) -> bool:
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int | float):
        try:
            return float(stated) == float(value)
        except ValueError:
            return False
    return str(value) == stated


@pytest.mark.parametrize(("name", "stated"), _stated_defaults())
def test_each_default_readme_states_for_a_setting_is_its_default(name, stated):
    """`caption_variants` (default 8), `loss`: `mse` (default), `latent_cache = "auto"` (default): the
    field's default, or for a null default the value its description gives null (`null: 8`)."""
    field = {**DatasetEntry.model_fields, **TrainConfig.model_fields}[name]
    if field.default is None:
        null_means = re.findall(r"null[^:;)]*: ([\w.]+)", field.description or "")
        null_means += re.findall(r"([\w.]+) \(null\)", field.description or "")
        assert stated in null_means or any(
            _same(float(m), stated) for m in null_means if re.fullmatch(r"[\d.]+", m)
        ), f"`{name}`: README says default {stated}, the field says {field.description!r}"
    else:
        assert _same(field.default, stated), (
            f"`{name}`: README says default {stated}, the field's is {field.default!r}"
        )


def test_there_are_defaults_to_check():
    assert len(_stated_defaults()) >= 8, _stated_defaults()
