"""A control setting given to a family that takes no control images is refused by its own field
when the config is read (config_resolve.setting_family_problems, asked by parse_train_config), beside the config's other
problems, before any dataset folder is scanned."""

from __future__ import annotations

import pytest

from lorastudio.config import parse_train_config
from lorastudio.errors import ConfigError


def test_control_dirs_and_sample_references_of_a_text_to_image_family_are_named_by_field():
    """control_dirs on FLUX.1 was refused only by the pairing, as control images with no target
    under data_dir (the field named nothing of control_dirs), and a sample prompt's references
    only once the dataset scanned cleanly; an edit family keeps both."""
    given = {
        "base_model": "m",
        "data_dir": "d",
        "control_dirs": ["refs"],
        "sample_prompts": ["a", {"prompt": "x", "controls": ["a.png"]}],
    }
    with pytest.raises(ConfigError) as err:
        parse_train_config({**given, "family": "flux"})
    assert [(p.field, p.message) for p in err.value.problems] == [
        (
            "control_dirs",
            "FLUX.1 trains text-to-image only and takes no control images: remove control_dirs "
            "(or train an edit family)",
        ),
        ("sample_prompts", "sample prompt 1: flux takes no reference images (a text-to-image family)"),
    ]
    assert parse_train_config({**given, "family": "flux-kontext"}).control_dirs == ["refs"]
