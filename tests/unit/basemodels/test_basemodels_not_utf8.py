"""A model folder whose name is not UTF-8 (Latin-1 bytes: Python holds them as lone surrogates) is
listed as not trainable saying why and how to fix it (RELIABILITY 1034). Before, `models list`
showed it trainable ("yes"), and every config or request naming it was refused ("Input should be
a valid string, unable to parse raw data as a unicode string")."""

from __future__ import annotations

import os
from pathlib import Path

from lorastudio.basemodels import list_models
from lorastudio.settings import Settings


def test_a_model_folder_named_in_latin1_is_listed_untrainable_saying_why(settings: Settings) -> None:
    latin1 = Path(os.fsdecode(os.fsencode(str(settings.models_dir)) + b"/flux-caf\xe9"))
    latin1.mkdir(parents=True)
    (latin1 / "model_index.json").write_text('{"_class_name": "FluxPipeline"}', encoding="utf-8")
    (entry,) = list_models(settings, hub_cache=False, known_captioners=False)
    assert entry.path == str(latin1) and not entry.trainable and not entry.complete
    assert entry.reason == (
        f"{settings.models_dir}/flux-caf\\xe9 is not UTF-8 text (byte 0xe9 at "
        f"{len(os.fsencode(str(settings.models_dir))) + 9}): a config or a request cannot name it; rename it"
    )
