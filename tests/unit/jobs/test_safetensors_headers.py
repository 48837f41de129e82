"""A base's safetensors headers are parsed once per file version per process, shared by the VRAM
estimate's readers, the host-memory estimate's converted bytes and the forecast's cost model
(RELIABILITY 936): a header near the cap (10^6 tensors) cost ~3.5 s and ~1.4 GB per parse, and
the preflight parsed it once per reader. The memo is bounded in tensors."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from lorastudio import json_read
from lorastudio.jobs import safetensors_headers, time_work
from lorastudio.jobs.vram_estimate import converted_bytes, denoiser_param_split, lora_param_count, param_count


def _base(folder: Path, name: str = "model.safetensors", tensors: int = 6, dtype: str = "F32") -> Path:
    """A header-only safetensors file of `tensors` [4, 8] weights in transformer blocks."""
    header = {}
    for i in range(tensors):
        header[f"transformer_blocks.{i}.attn.to_q.weight"] = {
            "dtype": dtype, "shape": [4, 8], "data_offsets": [i * 128, (i + 1) * 128]
        }  # fmt: skip
    raw = json.dumps(header).encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    return path


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the headers parsed (every reader parses through json_read.loads)."""
    safetensors_headers.clear()
    seen: list[int] = []
    real = json_read.loads

    def counting(data: bytes | str) -> object:
        seen.append(len(data))
        return real(data)

    monkeypatch.setattr(json_read, "loads", counting)
    return seen


def _every_reader(folder: Path) -> tuple[object, ...]:
    return (
        param_count(folder),
        denoiser_param_split(folder),
        lora_param_count(folder, ("to_q",), 2),
        converted_bytes(folder, "BF16"),
        len(time_work._shapes(folder)),
    )


def test_every_reader_shares_one_parse_per_file_version(tmp_path: Path, parses: list[int]) -> None:
    folder = tmp_path / "transformer"
    path = _base(folder)
    first = _every_reader(folder)
    assert first == (192, (0, [32] * 6), 6 * 2 * 12, 192 * 2, 6)
    assert _every_reader(folder) == first
    assert len(parses) == 1  # one parse for five readers, twice
    st = path.stat()
    _base(folder, tensors=6, dtype="F16")  # rewritten in place: same size, the mtime put back
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _every_reader(folder)[3] == 6 * 64 * 2  # the new version is read (F16: 64 elements a tensor)
    assert len(parses) == 2


def test_the_memo_is_bounded_in_tensors(
    tmp_path: Path, parses: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(safetensors_headers, "MAX_CACHED_TENSORS", 10)
    a, b = _base(tmp_path / "a", tensors=6), _base(tmp_path / "b", tensors=6)
    big = _base(tmp_path / "big", tensors=11)
    for path in (a, a, b, b, a, big, big):
        safetensors_headers.header_tensors(path)
    # a (kept), b (kept: 12 > 10 drops a), a again (parsed: drops b), big twice (over the bound: never kept)
    assert len(parses) == 5
    assert safetensors_headers._memo_tensors <= 10
