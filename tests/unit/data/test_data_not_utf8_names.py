"""A name's bytes that are not UTF-8 (os.fsdecode's U+DC80-U+DCFF stand-ins) are named as bytes
wherever hidden characters are named (RELIABILITY 1034): a kohya folder `10_caf\\xe9` was
"skipped: the name holds control or invisible characters (U+DCE9 unnamed)"."""

from __future__ import annotations

import os

import pytest

from lorastudio.data.kohya import parse_kohya_folder
from lorastudio.data.paths import hidden_characters
from lorastudio.errors import DatasetError


def test_a_kohya_folder_named_in_latin1_is_refused_naming_the_byte() -> None:
    name = os.fsdecode(b"10_caf\xe9")
    with pytest.raises(DatasetError) as refused:
        parse_kohya_folder(name)
    assert refused.value.problems == [
        "'10_caf\\udce9': the name holds control or invisible characters or bytes (byte 0xE9, not UTF-8); rename it"
    ]
    assert hidden_characters("a\ud800\x7f") == "U+007F unnamed, U+D800, a lone surrogate"  # JSON's lone one
