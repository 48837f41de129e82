"""scripts/check_deps.sh's requirement lists, read from pyproject.toml.

    python scripts/check_deps.py runtime   pyproject's dependencies, one a line
    python scripts/check_deps.py dev       the test tools the subset needs (the dev extra less
                                           playwright, whose browser tests are not run, and ruff)
    python scripts/check_deps.py floors    each dependency as `name==V`, V the lowest release on
                                           the package index its specifier allows (`>=0.20`: the
                                           first 0.20.x listed; `==X` as it is)
    python scripts/check_deps.py newest    each dependency's installed version beside the index's
                                           newest release, the ones held back marked

Run with the venv's python: `floors` reads specifiers with pip's own packaging module (the venv
has pip, not necessarily packaging) and lists releases with `pip index versions`. A dependency
none of whose releases the specifier allows exits non-zero, naming it.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
NOT_FOR_THE_SUBSET = ("playwright", "ruff")


def requirements(which: str) -> list[str]:
    """pyproject's `dependencies` (`runtime`) or the dev extra less NOT_FOR_THE_SUBSET (`dev`)."""
    with PYPROJECT.open("rb") as f:
        project = tomllib.load(f)["project"]
    if which == "runtime":
        return list(project["dependencies"])
    return [d for d in project["optional-dependencies"]["dev"] if not d.startswith(NOT_FOR_THE_SUBSET)]


def releases(name: str) -> list:
    """The final releases of `name` the package index lists (`pip index versions`), as Versions."""
    from pip._vendor.packaging.version import InvalidVersion, Version

    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", name],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    listed = next((ln for ln in out.splitlines() if ln.strip().startswith("Available versions:")), None)
    if listed is None:
        raise SystemExit(f"{name}: `pip index versions` listed no release:\n{out}")
    versions = []
    for text in listed.split(":", 1)[1].split(","):
        try:
            versions.append(Version(text.strip()))
        except InvalidVersion:
            continue
    return [v for v in versions if not v.is_prerelease]


def lowest_allowed(line: str) -> str:
    """`name==V` for the lowest final release on the index that the requirement `line` allows."""
    from pip._vendor.packaging.requirements import Requirement

    req = Requirement(line)
    allowed = [v for v in releases(req.name) if req.specifier.contains(v)]
    if not allowed:
        raise SystemExit(f"{line}: no release on the index satisfies it")
    return f"{req.name}=={min(allowed)}"


def installed_and_newest(line: str) -> str:
    """`name installed [index newest: V, held back]` for the requirement `line` in this venv."""
    from importlib.metadata import version

    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.version import Version

    req = Requirement(line)
    have = Version(version(req.name))
    newest = max(releases(req.name))
    if newest.release > have.release:
        return f"{req.name} {have} (held back: the index has {newest}; {line})"
    return f"{req.name} {have}"


def main(argv: list[str]) -> int:
    """Print the list `argv[1]` names (module docstring), one a line."""
    if len(argv) != 2 or argv[1] not in ("runtime", "dev", "floors", "newest"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[1] == "floors":
        lines = [lowest_allowed(line) for line in requirements("runtime")]
    elif argv[1] == "newest":
        lines = [installed_and_newest(line) for line in requirements("runtime")]
    else:
        lines = requirements(argv[1])
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
