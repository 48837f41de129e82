"""safe_component and resolve_dataset_dir: names and paths that stay where they belong."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lorastudio.data import resolve_dataset_dir, safe_component
from lorastudio.errors import ConfigError, PathOutsideRoot

BAD_NAMES = [
    "",
    ".",
    "..",
    "a/b",
    "a\\b",
    "../etc",
    "a\x00b",
    "CON",
    "con",
    "nul.txt",
    "Com1",
    "LPT9.tar.gz",
    "aux ",
    ".hidden",
    "x" * 101,
    "tab\tname",
    "a:b",
    "what?",
    " leading",
    "trailing ",
    "dot.",
]
GOOD_NAMES = ["portraits", "my-set_2", "v1.5", "x" * 100, "café", "CONSOLE", "com10", "nul_set", "a b"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names_refused(name):
    with pytest.raises((ConfigError, PathOutsideRoot)) as info:
        safe_component(name)
    assert str(info.value)


@pytest.mark.parametrize("name", ["..", "a/b", "a\\b", "../etc"])
def test_escaping_names_are_path_outside_root(name):
    with pytest.raises(PathOutsideRoot):
        safe_component(name)


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_good_names_accepted(name):
    assert safe_component(name) == name


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=0, max_size=120))
def test_safe_component_accepts_only_harmless_names(name):
    root = Path("/srv/root")
    try:
        result = safe_component(name)
    except (ConfigError, PathOutsideRoot):
        return
    # the NFC form is returned (a compatibility ideograph such as U+2F800 has a canonical
    # decomposition, so NFC changes it: callers store and look up the returned form)
    assert result == unicodedata.normalize("NFC", name)
    assert (root / result).parent == root
    assert os.sep not in result and "\\" not in result and "\x00" not in result
    assert not result.startswith(".") and 0 < len(result) <= 100
    assert result.split(".")[0].strip().upper() not in {"CON", "PRN", "AUX", "NUL"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> tuple[Path, Path]:
    """datasets root with a real folder, a link inside it, and a link escaping to `outside`."""
    base = tmp_path_factory.mktemp("paths")
    root, outside = base / "datasets", base / "outside"
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "ok").mkdir()
    outside.mkdir()
    (root / "link_out").symlink_to(outside)
    (root / "link_in").symlink_to(root / "ok")
    return root, outside


def test_bare_and_nested_names_resolve_under_root(tree):
    root, _ = tree
    assert resolve_dataset_dir("ok", root, False) == (root / "ok").resolve()
    assert resolve_dataset_dir("sub/deep", root, False) == (root / "sub" / "deep").resolve()
    assert resolve_dataset_dir("not-yet", root, False) == root.resolve() / "not-yet"
    assert resolve_dataset_dir("link_in", root, False) == (root / "ok").resolve()


def test_escapes_refused(tree):
    root, outside = tree
    for data_dir in ["../outside", "ok/../../outside", "sub/../ok", "link_out", "link_out/x"]:
        with pytest.raises(PathOutsideRoot):
            resolve_dataset_dir(data_dir, root, False)
    with pytest.raises(PathOutsideRoot, match="outside"):
        resolve_dataset_dir(str(outside), root, False)
    with pytest.raises(PathOutsideRoot):
        resolve_dataset_dir(str(root), root, False)
    with pytest.raises(PathOutsideRoot):
        resolve_dataset_dir(str(root / "link_out"), root, False)
    for data_dir in ["", "   ", "a\x00b", ".", "ok/.hidden", "CON"]:
        with pytest.raises((ConfigError, PathOutsideRoot)):
            resolve_dataset_dir(data_dir, root, False)


def test_absolute_paths(tree):
    root, outside = tree
    assert resolve_dataset_dir(str(root / "ok"), root, False) == (root / "ok").resolve()
    assert resolve_dataset_dir(str(outside), root, True) == outside.resolve()
    assert resolve_dataset_dir(str(root / "link_out"), root, True) == outside.resolve()
    assert resolve_dataset_dir("../outside", root, True) == outside.resolve()


COMPONENTS = st.sampled_from(
    ["ok", "sub", "deep", "link_out", "link_in", "..", ".", "", "new", "CON", ".git"]
)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(COMPONENTS, min_size=1, max_size=5), absolute=st.booleans(), sep=st.sampled_from("/\\"))
def test_resolved_paths_never_leave_the_root(tree, parts, absolute, sep):
    root, _ = tree
    data_dir = sep.join(parts)
    if absolute:
        data_dir = str(root) + "/" + data_dir
    try:
        resolved = resolve_dataset_dir(data_dir, root, False)
    except (ConfigError, PathOutsideRoot):
        return
    real_root = root.resolve()
    assert resolved.is_absolute() and resolved != real_root
    assert resolved.resolve().is_relative_to(real_root)


def test_safe_component_refuses_names_too_long_in_bytes():
    from lorastudio.data.paths import MAX_COMPONENT_BYTES

    name = "\U0001f600" * 99  # 99 characters, 396 bytes in UTF-8
    with pytest.raises(ConfigError, match="bytes in UTF-8"):
        safe_component(name)
    assert safe_component("a" * 100) and MAX_COMPONENT_BYTES < 255


def test_safe_component_returns_the_nfc_form_of_a_compatibility_ideograph():
    """U+2F800 (a CJK compatibility ideograph) is U+4E3D in NFC: the name is accepted and its
    NFC form returned (hypothesis found it against a test that expected the name unchanged)."""
    assert safe_component("\U0002f800") == "\u4e3d"
