"""Reading another trainer's config file, which anyone may have written (no torch).

A file is read only when it is a regular file of at most MAX_BYTES (a 50 MB "config" is refused
before a byte is parsed), as UTF-8 (a leading byte-order mark skipped; another encoding refused
naming the byte's line and column), and parsed by its suffix: JSON (a key given twice refused),
TOML (tomllib) or YAML. YAML goes through PyYAML's SafeLoader (no Python objects), which
huggingface_hub and transformers already require; the composed node graph is measured before it
is built, so an alias bomb ("billion laughs": each alias repeating a list of aliases) or a
recursive alias is refused instead of being expanded by the mapping that walks it. Every error
names the file (and the key, for a side file named inside it).
"""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Any

from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.utf8_text import utf8_text

MAX_BYTES = 4 * 1024 * 1024  # the largest peer config read; theirs are a few kB
MAX_NODES = 100_000  # YAML nodes once every alias is expanded
MAX_DEPTH = 32  # tables and lists inside each other; theirs go 4 deep
SUFFIXES = (".json", ".toml", ".yaml", ".yml")


def _refuse(where: str, why: str) -> ConfigError:
    """The ConfigError of one problem at `where`."""
    return ConfigError([FieldProblem(where, why)])


def read_bytes(path: Path, where: str, kind: str = "a trainer's config") -> bytes:
    """The bytes of the regular file `path` (a link is followed: a user's config may be one), at
    most MAX_BYTES. Raises ConfigError naming `where` (a folder, a pipe or device, too big,
    unreadable); `kind` names what the file is in the size refusal. Also the reader of
    lorastudio's own CLI config files (cli/config_file.py)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise _refuse(where, f"cannot read {path}: {err.strerror or err}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(where, f"{path} is not a regular file")
        if info.st_size > MAX_BYTES:
            raise _refuse(where, f"{path} is {info.st_size} bytes: {kind} is at most {MAX_BYTES}")
        chunks, total = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            total += len(chunk)
            if total > MAX_BYTES:  # grew since the fstat
                raise _refuse(where, f"{path} is over {MAX_BYTES} bytes: {kind} is smaller")
        return b"".join(chunks)
    except OSError as err:
        raise _refuse(where, f"cannot read {path}: {err.strerror or err}") from None
    finally:
        os.close(fd)


def file_text(raw: bytes, path: Path, where: str) -> str:
    """`raw` as text (a UTF-8 byte-order mark skipped). Raises ConfigError naming the first byte that is not UTF-8."""
    try:
        return utf8_text(raw)
    except ValueError as err:
        raise _refuse(where, f"{path.name} is {err}") from None


def read_document(path: Path, where: str = "config") -> Any:
    """The parsed document of the peer file `path` (.json, .toml, .yaml / .yml). Raises
    ConfigError naming `where` and the file (see the module's docstring)."""
    if path.suffix.lower() not in SUFFIXES:
        raise _refuse(where, f"{path.name}: a trainer's config is a .yaml, .yml, .toml or .json file")
    return parse_document(path.name, read_bytes(path, where), where)


def parse_document(name: str, raw: bytes, where: str = "config") -> Any:
    """The parsed document of a peer file named `name` (its suffix picks the parser) whose bytes
    are `raw` (at most MAX_BYTES). Raises ConfigError naming `where` and `name`."""
    suffix = Path(name).suffix.lower()
    if suffix not in SUFFIXES:
        raise _refuse(where, f"{name}: a trainer's config is a .yaml, .yml, .toml or .json file")
    if len(raw) > MAX_BYTES:
        raise _refuse(where, f"{name} is {len(raw)} bytes: a trainer's config is at most {MAX_BYTES}")
    text = file_text(raw, Path(name), where)
    try:
        if suffix == ".json":
            from lorastudio.json_keys import loads_unique

            data = loads_unique(text)
        elif suffix == ".toml":
            data = tomllib.loads(text)
        else:
            data = load_yaml(text)
        _check_depth(data)
        return data
    except ConfigError as err:
        raise _refuse(where, f"{name}: {err.problems[0].message}") from None
    except (ValueError, RecursionError) as err:  # JSON / TOML errors are ValueErrors
        raise _refuse(where, f"cannot read {name}: {str(err).splitlines()[0]}") from None


def _check_depth(data: Any) -> None:
    """Raise ConfigError when `data` nests tables or lists deeper than MAX_DEPTH (the mapping
    and the report walk it recursively)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError([FieldProblem("config", f"it nests tables or lists deeper than {MAX_DEPTH}")])
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def load_yaml(text: str) -> Any:
    """`yaml.safe_load(text)`, refusing a document of more than MAX_NODES nodes once its aliases
    are expanded, and a recursive alias. Raises ConfigError (the message only), ValueError for
    YAML that does not parse (PyYAML's own message), ConfigError when PyYAML is missing."""
    try:
        import yaml
    except ImportError:
        raise ConfigError(
            [
                FieldProblem(
                    "config", "reading YAML needs PyYAML (pip install pyyaml); or convert the file to JSON"
                )
            ]
        ) from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)  # libyaml's parser when built with it
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _measure(node)
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        raise ValueError(" ".join(str(err).split())) from None
    finally:
        loader.dispose()


def _measure(root: Any) -> None:
    """Raise ConfigError when the YAML node graph `root` expands to more than MAX_NODES nodes or
    holds a node inside itself. Each node's expanded size is computed once (aliases share nodes),
    so measuring a bomb costs its written size, not its expanded one."""
    import yaml

    sizes: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_.discard(key)
            children = _children(node, yaml)
            sizes[key] = min(MAX_NODES + 1, 1 + sum(sizes[id(c)] for c in children))
            if sizes[key] > MAX_NODES:
                why = f"its YAML holds over {MAX_NODES} values once its aliases are expanded (an alias bomb?)"
                raise ConfigError([FieldProblem("config", why)])
            continue
        if key in sizes:
            continue
        if key in open_:
            raise ConfigError([FieldProblem("config", "its YAML holds an alias of a node inside that node")])
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node, yaml) if id(c) not in sizes)


def _children(node: Any, yaml: Any) -> list[Any]:
    """A YAML node's child nodes (a mapping's keys and values, a sequence's items)."""
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def side_file(owner: Path, value: str) -> Path:
    """The path of a file named inside the peer file `owner` (kohya's dataset_config, SimpleTuner's
    data_backend_config): absolute as written, else relative to `owner`'s folder."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else owner.parent / path
