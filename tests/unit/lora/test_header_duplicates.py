"""A safetensors header naming a tensor (or a metadata key) twice is refused, naming it, by every
reader of a LoRA file (generation, convert). Before (RELIABILITY 892): Python's json kept the last
entry without a word, so the checks read one description of the tensor and a reader keeping the
first would read another; generation applied the file."""

from __future__ import annotations

import json

import pytest
from tests.hostile_loras import FLUX_KEY, safetensors_bytes

from lorastudio.errors import ModelSourceError
from lorastudio.lora.file_read import check_lora_values, read_lora_file
from lorastudio.lora.header import read_header


def _entry(shape: list[int], begin: int, dtype: str = "F32", size: int = 4) -> str:
    return json.dumps(
        {"dtype": dtype, "shape": shape, "data_offsets": [begin, begin + size * shape[0] * shape[1]]}
    )


@pytest.mark.parametrize("where", ["tensor", "metadata"])
def test_a_name_given_twice_in_the_header_is_refused(where, tmp_path):
    a, b = f"{FLUX_KEY}.lora_A.weight", f"{FLUX_KEY}.lora_B.weight"
    if where == "tensor":  # A described as F16 then as F32: the checks read the F32 one
        body = f'{{"{a}": {_entry([2, 4], 0, "F16", 2)}, "{b}": {_entry([4, 2], 32)}, "{a}": {_entry([2, 4], 0)}}}'
        twice = a
    else:
        meta = '{"lorastudio.family": "flux", "lorastudio.family": "sdxl"}'
        body = f'{{"__metadata__": {meta}, "{a}": {_entry([2, 4], 0)}, "{b}": {_entry([4, 2], 32)}}}'
        twice = "lorastudio.family"
    path = tmp_path / "twice.safetensors"
    path.write_bytes(safetensors_bytes(body.encode(), bytes(64)))
    for read in (read_header, check_lora_values, read_lora_file):
        with pytest.raises(ModelSourceError, match="twice") as err:
            read(path)
        assert str(path) in str(err.value) and twice in str(err.value)
