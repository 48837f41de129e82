"""What README.md tells a user to type is what the code takes (parsed, never run; seconds).

- Every `lorastudio ...` command line of README's bash blocks parses with the CLI's own click
  parser: the command exists, every option is spelt as the command spells it, the required
  options and arguments are there, no argument is left over and each `--set KEY=VALUE` names a
  setting. The inline ones (`lorastudio datasets import DIR --name N [--strict]`) name an
  existing command and only its options.
- Every TOML block of README is a config the strict schema takes (a fragment completed with the
  minimum: family, base_model, data_dir), and so is every inline `setting = value` of a
  TrainConfig, `[[datasets]]` entry, sample prompt or preservation field (for some family), and
  every inline sample prompt object (`{ prompt = "a dog", width = 768, ... }`).
- Every `/api/...` route README names (with its method when it gives one) is a route of the app.
- `lorastudio families` says which families take a negative prompt (`generate --negative`'s help
  sends the user there).
"""

from __future__ import annotations

import importlib
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import BaseModel, ValidationError

from lorastudio import families
from lorastudio.api.app import create_app
from lorastudio.cli.app import _register, app
from lorastudio.config import TrainConfig, parse_train_config, resolve_train_config
from lorastudio.config_datasets import DatasetEntry
from lorastudio.config_preservation import Preservation
from lorastudio.config_samples import SamplePrompt
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings

# typer 0.29 vendors click (its commands are typer._click's); an older typer uses click itself
click = getattr(typer, "_click", None) or importlib.import_module("click")
README = Path(__file__).resolve().parents[2] / "README.md"
TEXT = README.read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```", TEXT, re.S | re.M)
PROSE = re.sub(r"^```.*?^```", "", TEXT, flags=re.S | re.M)
# the bash blocks' comments name commands too: `models fetch ID`, `cache clear [--model FP]`
COMMENTS = "\n".join(
    line.split(" #", 1)[1] for lang, b in BLOCKS if lang == "bash" for line in b.splitlines() if " #" in line
)
SPANS = [re.sub(r"\s+", " ", s) for s in re.findall(r"`([^`]+)`", PROSE + "\n" + COMMENTS)]
# commands named without the leading `lorastudio` (`datasets delete NAME`, `runs show ID`)
GROUPS = ("cache", "datasets", "lora", "models", "runs", "tiny")


def _bash_commands() -> list[str]:
    """The `lorastudio ...` lines of README's bash blocks (continuations joined, comments cut)."""
    out = []
    for lang, body in BLOCKS:
        if lang != "bash":
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith("lorastudio "):
                out.append(line)
    return out


def _leaf(tokens: list[str]) -> tuple[Any, list[str], str]:
    """The command `tokens` name (groups walked) and the tokens left for it."""
    _register()
    cmd = typer.main.get_command(app)
    path = "lorastudio"
    while hasattr(cmd, "get_command"):  # a group
        assert tokens, f"`{path}` needs a command"
        name, tokens = tokens[0], tokens[1:]
        sub = cmd.get_command(cmd.context_class(cmd), name)
        assert sub is not None, f"`{path}` has no command {name!r}"
        cmd, path = sub, f"{path} {name}"
    return cmd, tokens, path


def _parse(cmd: Any, tokens: list[str], path: str) -> dict[str, Any]:
    """click's own parse of `tokens` (no type conversion, nothing run): the values by name."""
    ctx = cmd.context_class(cmd, info_name=path)
    parser = cmd.make_parser(ctx)
    try:
        opts, args, _ = parser.parse_args(args=list(tokens))
    except click.ClickException as err:  # UsageError, NoSuchOption, BadOptionUsage
        raise AssertionError(f"`{path} {' '.join(tokens)}`: {err.format_message()}") from err
    assert not args, f"`{path}`: left over {args}"
    return opts


@pytest.mark.parametrize("line", _bash_commands())
def test_every_readme_command_line_parses(line: str):
    cmd, tokens, path = _leaf(shlex.split(line.replace("[", " ").replace("]", " "))[1:])
    given = _parse(cmd, tokens, path)
    missing = [p.name for p in cmd.params if p.required and p.name not in given]
    assert missing == [], f"`{line}` lacks {missing}"
    for override in given.get("overrides") or given.get("set") or []:  # --set KEY=VALUE: a setting
        head = override.split("=", 1)[0].split(".", 1)[0]  # datasets.0.repeats: inside datasets
        assert head in TrainConfig.model_fields, f"`{line}`: no setting {override}"


def _inline_commands() -> list[str]:
    """Inline `lorastudio ...` spans (or `datasets import DIR ...`): optional parts ([--x]) are
    checked as given, `a|b` as both."""
    out = []
    for span in SPANS:
        if span.split(" ", 1)[0] in GROUPS and " " in span:
            span = f"lorastudio {span}"
        if not span.startswith("lorastudio "):
            continue
        words = span.replace("[", " ").replace("]", " ").split()
        for i, word in enumerate(words):
            if "|" in word and not word.startswith("-"):
                out += [" ".join(words[:i] + [alt] + words[i + 1 :]) for alt in word.split("|")]
                break
        else:
            out.append(" ".join(words))
    return out


def test_there_are_commands_to_check():
    assert len(_bash_commands()) >= 20 and len(_inline_commands()) >= 15


@pytest.mark.parametrize("span", _inline_commands())
def test_every_inline_command_names_real_options(span: str):
    words = [w for w in span.split()[1:] if w != "..."]
    cmd, tokens, path = _leaf(words)
    known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help", "--"}
    unknown = [t for t in tokens if t.startswith("-") and t not in known and t != "-x"]
    assert unknown == [], f"`{span}`: {path} has no {unknown}"


def _complete(data: dict[str, Any]) -> dict[str, Any]:
    base = {"family": "flux", "base_model": "some/model", "trigger_word": "sks"}  # README's minimum
    if "datasets" not in data:
        base["data_dir"] = "my-dataset"
    return {**base, **data}


def _accepted(data: dict[str, Any]) -> str | None:
    """None when some family's strict config takes `data` (completed), else the problems."""
    tried = [data["family"]] if "family" in data else families.names()
    problems = ""
    for family in tried:
        try:
            resolve_train_config(parse_train_config(_complete({**data, "family": family})))
            return None
        except ConfigError as err:
            problems = str(err)
    return problems


TOML_BLOCKS = [body for lang, body in BLOCKS if lang == "toml"]


@pytest.mark.parametrize("body", TOML_BLOCKS)
def test_every_readme_toml_block_is_a_config_the_schema_takes(body: str):
    assert _accepted(tomllib.loads(body)) is None, body


NESTED: list[tuple[type[BaseModel], dict[str, Any]]] = [
    (DatasetEntry, {"path": "d"}),
    (SamplePrompt, {"prompt": "p"}),
    (Preservation, {"class_word": "person"}),
]


def _settings_spans() -> list[str]:
    """Inline `name = value` spans whose name is a setting (placeholders such as N, ... left out)."""
    fields = set(TrainConfig.model_fields).union(*(m.model_fields for m, _ in NESTED))
    out = []
    for span in SPANS:
        m = re.fullmatch(r"([a-z_0-9]+) = (.+)", span)
        if m and m[1] in fields and not re.search(r"\.\.\.|…|\||^[A-Z]$", m[2]):
            out.append(span)
    return out


def test_every_inline_sample_prompt_object_is_taken():
    """`{ prompt = "a dog", width = 768, ... }`: a sample_prompts entry as README writes one."""
    objects = [s for s in SPANS if re.fullmatch(r"\{ ?prompt = .*\}", s)]
    assert objects
    for span in objects:
        SamplePrompt.model_validate(tomllib.loads(f"x = {span}")["x"])


def test_there_are_settings_to_check():
    assert len(_settings_spans()) > 25


# Settings README describes beside those they need (`sample_with_ema = false`: EMA and previews).
COMPANIONS = {"sample_with_ema": {"ema_decay": 0.999, "sample_prompts": ["a dog"]}}


@pytest.mark.parametrize("span", _settings_spans())
def test_every_inline_setting_is_taken(span: str):
    data = tomllib.loads(span)
    (name,) = data
    if name in TrainConfig.model_fields and _accepted({**COMPANIONS.get(name, {}), **data}) is None:
        return
    for model, minimum in NESTED:
        if name in model.model_fields:
            try:
                model.model_validate({**minimum, **data})
                return
            except ValidationError:
                pass
    raise AssertionError(
        f"`{span}` is refused: {_accepted(data) if name in TrainConfig.model_fields else ''}"
    )


def _app_routes() -> list[tuple[str, re.Pattern[str]]]:
    paths = create_app(get_settings()).openapi()["paths"]
    return [
        (method.upper(), re.compile(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(p)) + "$"))
        for p, ops in paths.items()
        for method in ops
    ]


def _readme_routes() -> list[tuple[str | None, str]]:
    found = re.findall(r"(?:\b(GET|POST|PUT|DELETE) )?(/api/[A-Za-z0-9_/{}.-]*[A-Za-z0-9_}])", TEXT)
    return sorted({(m or None, p) for m, p in found}, key=str)


def test_every_readme_route_exists():
    routes = _app_routes()
    named = _readme_routes()
    assert len(named) >= 15
    missing = [
        f"{m or ''} {p}".strip()
        for m, p in named
        if not any((m is None or m == rm) and pat.match(p) for rm, pat in routes)
    ]
    assert missing == []


def test_families_says_which_take_a_negative_prompt():
    """`generate --negative`'s help sends the user to `lorastudio families` for the families whose
    pipeline takes one (the others are refused: the spec's negative_prompt, checked against the
    pipelines by the contract suite)."""
    from typer.testing import CliRunner

    _register()
    out = CliRunner().invoke(app, ["families"], env={"COLUMNS": "400"})
    assert out.exit_code == 0, out.output
    rows = {line.split("\t")[0]: line for line in out.output.splitlines()[1:] if "\t" in line}
    for family in families.names():
        takes = families.get(family).spec.negative_prompt
        assert rows[family].endswith("; negative prompt" if takes else "; no negative prompt"), rows[family]


def test_generates_text_tokens_help_names_the_families_that_refuse_them():
    """`generate --max-sequence-length`'s help sends the user to `lorastudio families` (whose
    settings column lists max_sequence_length for the families that take it) and names the
    families that refuse it: exactly those whose generation refuses every length (session 29:
    the help said "families with a T5 / LLM text encoder", which Qwen-Image-Edit has and refuses)."""
    from typer.testing import CliRunner

    from lorastudio.generation_rules import text_tokens_problems

    _register()
    out = CliRunner().invoke(app, ["families"], env={"COLUMNS": "400"})
    assert out.exit_code == 0, out.output
    rows = {line.split("\t")[0]: line.split("\t") for line in out.output.splitlines()[1:] if "\t" in line}
    refusing = {f for f in families.names() if text_tokens_problems(64, f)}
    listed = {f for f in families.names() if "max_sequence_length" in rows[f][4].split(", ")}
    assert refusing and listed and refusing == set(families.names()) - listed
    help_text = " ".join(
        next(
            p.help
            for p in typer.main.get_command(app).commands["generate"].params
            if p.name == "max_sequence_length"
        ).split()
    )
    assert "`lorastudio families`" in help_text
    named = set(
        re.findall(r"refused for ([\w -]+(?: and [\w-]+)?)\)", help_text)[0]
        .replace(" and ", ", ")
        .split(", ")
    )
    assert named == refusing, help_text


def test_the_text_token_cap_readme_gives_generate_is_the_rule():
    """README: Generate's `max_sequence_length` is at most the family's `max_sequence_length_max`,
    "4096 where it has none: Qwen-Image, Z-Image, Krea 2" (generation_rules.text_tokens_problems)."""
    from lorastudio.generation_rules import text_tokens_problems

    flat = re.sub(r"\s+", " ", README.read_text(encoding="utf-8"))
    said = re.search(r"`max_sequence_length_max` \(`/api/info`; (\d+) where it has none: ([^)]+)\)", flat)
    assert said, "README no longer gives the cap of a family without one: update this test"
    uncapped = [
        f
        for f in families.names()
        if "max_sequence_length" in families.get(f).spec.supports
        and not families.get(f).spec.max_sequence_length_max
    ]
    assert sorted(families.get(f).spec.title for f in uncapped) == sorted(
        said[2].replace(", ", ",").split(",")
    )
    for f in uncapped:
        cap = int(said[1])
        assert text_tokens_problems(cap, f) == [] and text_tokens_problems(cap + 1, f), f


def test_the_environment_defaults_readme_states_are_the_settings_defaults():
    """`LORASTUDIO_MAX_JSON_MB` (default 4; ...), `LORASTUDIO_MAX_DECODE_PIXELS` (default
    4096x4096): each default README gives a LORASTUDIO_* setting is the one Settings has."""
    from lorastudio.settings import Settings

    flat = re.sub(r"\s+", " ", TEXT)
    stated = re.findall(r"`LORASTUDIO_([A-Z_]+)`,? \(?default ([0-9][0-9,]*(?:x[0-9]+)?)", flat)
    checked = {}
    for name, value in stated:
        field = Settings.model_fields.get(name.lower())
        if field is None:
            continue  # not a server setting (LORASTUDIO_TEST_WORKERS is scripts/test.sh's)
        number = 1
        for part in value.replace(",", "").split("x"):
            number *= int(part)
        checked[name] = (field.get_default(call_default_factory=True), number)
    assert len(checked) >= 6, checked
    assert {k: v for k, v in checked.items() if v[0] != v[1]} == {}


def test_the_generation_budget_readme_states_is_the_rules():
    from lorastudio import generation_rules as rules

    flat = re.sub(r"\s+", " ", TEXT)
    m = re.search(
        r"width or height is over (\d+), width × height over ([\d.]+) MP \((\d+)²\), steps over (\d+), "
        r"or width × height × steps over ([\d.]+) M",
        flat,
    )
    assert m, "README's generation budget sentence changed: update this test with it"
    assert int(m[1]) == rules.MAX_SIDE and int(m[3]) ** 2 == rules.MAX_PIXELS
    assert float(m[2]) == round(rules.MAX_PIXELS / 1e6, 1) and int(m[4]) == rules.MAX_STEPS
    assert float(m[5]) == round(rules.MAX_PIXEL_STEPS / 1e6, 1)


def _command_paths() -> list[str]:
    """Every command the CLI has, as typed after `lorastudio` (`train`, `tiny model`, `models add`)."""
    out: list[str] = []

    def walk(cmd: Any, path: list[str]) -> None:
        if hasattr(cmd, "commands"):  # a group
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])
        else:
            out.append(" ".join(path))

    _register()
    walk(typer.main.get_command(app), [])
    return out


def test_every_command_is_named_in_the_readme():
    # session 38 journey: `lorastudio tiny model` (the offline stand-in for a hub id), `models add`
    # and `models forget` were in no README line: a user reading it top to bottom never met them
    flat = re.sub(r"\s+", " ", TEXT)
    paths = _command_paths()
    assert len(paths) >= 30
    unnamed = [p for p in paths if not re.search(r"(lorastudio |`)" + re.escape(p) + r"\b", flat)]
    assert unnamed == [], f"commands README never names: {unnamed}"
