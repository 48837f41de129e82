"""A zero-width joiner or non-joiner that joins is text (text_rules.hidden_in_text, RELIABILITY
1103): a prompt holding an emoji ZWJ sequence (as a phone's keyboard types 👩‍💻), a Persian word's
non-joiner, an Indic conjunct's joiner or an emoji flag's tags was refused 400 ("it holds U+200D ZERO WIDTH JOINER"),
as were such captions, trigger words and sample prompts, and a caption file holding one was
warned about. One that shapes nothing (between Latin letters, at an end, doubled) still is."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from lorastudio.config import TrainConfig
from lorastudio.data.caption_chars import hidden_text_warning
from lorastudio.data.items import ImageItem
from lorastudio.generation_rules import prompt_problems

JOINING = (
    "a 👩\u200d💻 at a desk",  # woman technologist
    "🏳\ufe0f\u200d🌈 flag",  # a variation selector before the joiner
    "👩🏽\u200d💻",  # a skin tone before it
    "🙂\u200d↔\ufe0f",  # head shaking horizontally: an arrow (Sm) after the joiner
    "می\u200cخواهم",  # Persian: the non-joiner between two letters
    "क्\u200dष",  # Devanagari: after a virama
    "ന്\u200d is a chillu",  # Malayalam: after a virama, before a space
    "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",  # Scotland's flag: tags
)
NOT_JOINING = (
    "ca\u200dt",
    "\u200d👩",
    "👩\u200d",
    "👩\u200d\u200d💻",
    "👩\u200d 💻",
    "a\u200cb",
    "a\U000e0067\U000e007f",
)


def test_a_joiner_that_joins_is_text_and_one_that_joins_nothing_is_refused() -> None:
    """Was: every one of JOINING refused as a prompt."""
    for text in JOINING:
        assert prompt_problems({"prompt": text}) == [], text
    for text in NOT_JOINING:
        (problem,) = prompt_problems({"prompt": text})
        assert problem.message.endswith(("ZERO WIDTH JOINER", "ZERO WIDTH NON-JOINER", "CANCEL TAG")), text


def test_the_config_rules_and_the_caption_warning_agree(tmp_path: Path) -> None:
    """A trigger word (one line) and a sample prompt take a joining joiner; the run's caption
    warning names only the caption whose joiner joins nothing."""
    base = {"family": "flux", "base_model": "/unused", "data_dir": str(tmp_path)}
    cfg = TrainConfig.model_validate(
        {**base, "trigger_word": "می\u200cخواهم", "sample_prompts": [JOINING[0]]}
    )
    assert cfg.trigger_word == "می\u200cخواهم"
    with pytest.raises(ValidationError, match="U\\+200D ZERO WIDTH JOINER"):
        TrainConfig.model_validate({**base, "trigger_word": "ca\u200dt"})
    items = [
        ImageItem(tmp_path / f"{i}.png", caption, "txt", 8, 8, (8, 8))
        for i, caption in enumerate([*JOINING, "ca\u200dt"])
    ]
    said = hidden_text_warning(items)
    assert (
        said is not None
        and said.startswith("1 caption(s) hold")
        and "8.png (U+200D ZERO WIDTH JOINER)" in said
    )
