"""What README.md says is measured or held is where it says (read, never run; well under a second).

- Every figure with a decimal point in a README sentence that cites a note of bench/RESULTS.md
  (`note 53`, `notes 17-20`, `notes 10 and 24`) is a figure of the cited note(s), as written
  or rounded to README's places (1.118 read as 1.12): a number quoted from the wrong note, or
  changed in one file and not the other, fails.
- The commands README says hold the studio home exclusively (`datasets delete|rename|captions`,
  `models rm`, `cache clear|prune`) are the ones whose code takes that hold
  (cli/exclusive_home.exclusive_home), and each says so in its own --help.
- Every `lorastudio[EXTRA]` README tells a user to install is an extra pyproject.toml declares.
- The first paragraph names every registered family.
- The commands README lists as taking `--json` / asking unless `--yes` are the ones that do.
- Every studio home path README or CONTRIBUTING names (`~/.lorastudio/cache/fa4`,
  `<home>/run_timings/`) is spelt so by the code.
"""

from __future__ import annotations

import ast
import importlib
import re
import tomllib
from pathlib import Path

import pytest
import typer

from lorastudio import families
from lorastudio.cli.app import _register, app

click = getattr(typer, "_click", None) or importlib.import_module("click")
ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
RESULTS = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
# "note 53", "notes 17-20", "notes 10 and 24", "notes 19, 22"
CITE = re.compile(r"\bnotes? (\d+(?:-\d+)?(?:(?:, | and )\d+(?:-\d+)?)*)")
# a figure: digits, a point, digits; not part of a version (0.3.77) or a name (H100.x)
FIGURE = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.]*\d)")


def _notes() -> dict[int, str]:
    """RESULTS.md's notes log by number: `N. *...` (notes 1-20) or `N. **...` (21 on)."""
    log = RESULTS[RESULTS.index("## Notes log") :]
    heads = [(int(m.group(1)), m.start()) for m in re.finditer(r"(?m)^(\d+)\. \*", log)]
    out: dict[int, str] = {}
    for i, (number, start) in enumerate(heads):
        end = heads[i + 1][1] if i + 1 < len(heads) else len(log)
        out.setdefault(number, log[start:end])
    return out


def _cited(spec: str) -> list[int]:
    """The note numbers of one citation: "17-20" is 17, 18, 19, 20; "10 and 24" is 10 and 24."""
    out: list[int] = []
    for part in re.split(r", | and ", spec):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def _citing_sentences() -> list[tuple[list[int], str]]:
    """(cited notes, the sentence or clause) for each README sentence that cites a RESULTS note."""
    out = []
    for para in re.split(r"\n\s*\n|\n- ", README):
        for sentence in re.split(r"(?<=[.;])\s+(?=[A-Z(`])", para):
            cited = [n for spec in CITE.findall(sentence) for n in _cited(spec)]
            if cited:
                out.append((cited, re.sub(r"\s+", " ", sentence)))
    return out


def _held(figure: str, note: str) -> bool:
    """`figure` is a number of `note`, as written or rounded to its decimal places."""
    places = len(figure.split(".")[1])
    return any(round(float(y), places) == float(figure) for y in re.findall(r"\d+\.\d+", note))


def test_each_figure_beside_a_results_note_is_in_that_note():
    # session 40 docs40: the nf4 peaks (FLUX.1 9.0, Qwen-Image 13.2, Z-Image 5.9 GiB) cited note 24,
    # which measured the 2026 families, not those (note 10); the standby worker's 0.5 / 4.6 s and
    # 6.2 / 18.7 s were quoted under note 43's memory figures, measured in note 31
    notes = _notes()
    sentences = _citing_sentences()
    assert len(sentences) >= 15 and len(notes) >= 50
    wrong = []
    for cited, sentence in sentences:
        assert all(n in notes for n in cited), f"README cites a note RESULTS.md lacks: {cited}"
        body = "".join(notes[n] for n in cited)
        missing = [f for f in FIGURE.findall(sentence) if not _held(f, body)]
        if missing:
            wrong.append(f"notes {cited}: {missing} in {sentence[:160]!r}")
    assert wrong == [], "README figures not in the note it cites:\n" + "\n".join(wrong)


def _holding_commands() -> set[str]:
    """The commands whose code takes the exclusive hold: exclusive_home(home, "COMMAND", ...)."""
    found = set()
    for path in (ROOT / "src" / "lorastudio" / "cli").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "exclusive_home"
                and isinstance(node.args[1], ast.Constant)
            ):
                found.add(node.args[1].value)
    return found


def _expand(span: str) -> set[str]:
    """`datasets delete|rename|captions` -> the three commands."""
    group, _, names = span.partition(" ")
    return {f"{group} {name}" for name in names.split("|")}


def test_the_commands_readme_says_hold_the_home_are_the_ones_that_do():
    flat = re.sub(r"\s+", " ", README)
    sentence = re.search(r"([^.]*) hold the studio home while they run", flat)
    assert sentence, "README's sentence on the commands that hold the studio home is gone"
    named = set().union(*(_expand(s) for s in re.findall(r"`([a-z]+ [a-z|]+)`", sentence.group(1))))
    holding = _holding_commands()
    assert len(holding) >= 6
    assert named == holding
    module = (ROOT / "src" / "lorastudio" / "cli" / "exclusive_home.py").read_text(encoding="utf-8")
    listed = re.search(r"reading \(([^)]*)\)", module)  # its docstring's list
    assert (
        listed and set().union(*(_expand(s) for s in re.findall(r"`([a-z]+ [a-z|]+)`", listed[1]))) == holding
    )
    _register()
    root = typer.main.get_command(app)
    for path in sorted(holding):
        group, name = path.split()
        cmd = root.commands[group].commands[name]
        words = re.sub(r"\s+", " ", cmd.help or "")
        assert re.search(r"holds the studio home exclusively|[Rr]efused while a server", words), path


def test_every_extra_readme_names_is_declared():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    named = set(re.findall(r"\blorastudio(?:-[\w.-]+\.whl)?\[(\w+)\]", README))
    assert {"tensorboard", "bnb", "fa4"} <= named
    assert named - set(declared) == set()


@pytest.mark.parametrize("family", families.names())
def test_the_first_paragraph_names_every_family(family: str):
    intro = re.sub(r"\s+", " ", README.split("\n## ", 1)[0])
    title = families.get(family).spec.title
    spelt = {"Stable Diffusion XL": "SDXL"}.get(title, title)
    assert re.search(rf"[ *(,]{re.escape(spelt)}[ ,*)]", intro), f"{family} ({spelt}) not in README's intro"


def _commands_with(option: str) -> set[str]:
    """Every `group command` (or top-level command) of the CLI that takes `option`."""
    _register()
    out = set()

    def walk(cmd, path: list[str]) -> None:
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])
        elif any(option in p.opts for p in cmd.params):
            out.add(" ".join(path))

    walk(typer.main.get_command(app), [])
    return out


@pytest.mark.parametrize(
    ("option", "sentence"),
    [
        ("--json", r"With `--json` \(([^)]*)\)"),
        ("--yes", r"((?:`[a-z ]+`(?:, | and ))+`[a-z ]+`) ask first unless given `--yes`"),
    ],
)
def test_the_commands_readme_lists_for_an_option_are_the_ones_taking_it(option: str, sentence: str):
    listed = re.search(sentence, re.sub(r"\s+", " ", README))
    assert listed, f"README's list of the commands taking {option} is gone"
    assert set(re.findall(r"`([a-z ]+)`", listed[1])) == _commands_with(option)


def test_every_studio_home_path_the_docs_name_is_one_the_code_writes():
    """`~/.lorastudio/cache/attention-probe`, `<home>/run_timings/`, `<home>/claims/<key>.lock`: each
    named part is a name the code spells (a string of src/lorastudio), so a renamed folder fails."""
    code = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "src" / "lorastudio").rglob("*.py"))
    docs = README + (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    named = set(re.findall(r"(?:~/\.lorastudio|<home>)/((?:[\w.-]+/?)+)", docs))
    assert len(named) >= 10
    examples = {"my-run", "my-run.safetensors", "photos"}  # a run's and a dataset's name in examples
    unknown = [
        f"{path}: {part}"
        for path in sorted(named)
        for part in path.strip("/").split("/")
        if part not in examples and not re.search(rf"[\"'/]{re.escape(part)}[\"'/]", code)
    ]
    assert unknown == [], f"studio home paths the code does not spell: {unknown}"
