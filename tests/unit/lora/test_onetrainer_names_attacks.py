"""OneTrainer's underscored names (lora/onetrainer_names.py) with odd block indices: only a
module name a model can have is answered."""

from __future__ import annotations

import pytest

from lorastudio.errors import ConfigError
from lorastudio.lora.onetrainer_names import from_flat


def test_a_plain_index_names_its_block() -> None:
    assert from_flat("layers_0_attention_to_q", "z-image") == "layers.0.attention.to_q"
    assert from_flat("layers_27_attention_to_q", "z-image") == "layers.27.attention.to_q"


@pytest.mark.parametrize(
    "index",
    ["\u0663", "\u096f", "\uff11", "007", "00", "1\u0663"],
    ids=["arabic-indic", "devanagari", "fullwidth", "leading-zeros", "zeros", "mixed"],
)
def test_an_index_no_module_list_names_is_no_layer(index: str) -> None:
    """re's \\d took any Unicode digit, and a leading zero: `layers.٣.attention.to_q` was
    answered, a name no model has (fix 138)."""
    with pytest.raises(ConfigError, match="is no layer of z-image's transformer"):
        from_flat(f"layers_{index}_attention_to_q", "z-image")
