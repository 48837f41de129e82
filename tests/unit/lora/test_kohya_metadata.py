"""kohya sd-scripts' `ss_*` header keys (lora/metadata.kohya_metadata) as sd-scripts writes them."""

from __future__ import annotations

import pytest

from lorastudio.lora.metadata import kohya_metadata


@pytest.mark.parametrize(
    ("base_model", "named"),
    [
        ("/home/alice/models/flux1-dev", "flux1-dev"),  # a local folder: its name, as sd-scripts writes it
        ("/home/alice/ckpt/sd_xl_base_1.0.safetensors", "sd_xl_base_1.0.safetensors"),
        ("black-forest-labs/FLUX.1-dev", "black-forest-labs/FLUX.1-dev"),  # a hub id as it is
    ],
)
def test_ss_sd_model_name_is_a_local_bases_name_not_its_path(base_model, named):
    """sd-scripts' train_network.py records os.path.basename of a local base (the model's name,
    not where the trainer keeps it: the file is shared); a hub id is kept whole."""
    info = {"lorastudio.family": "flux", "lorastudio.base_model": base_model}
    meta = kohya_metadata(info, rank=4, alpha=8.0)
    assert meta["ss_sd_model_name"] == named
    assert meta["ss_network_dim"] == "4" and meta["ss_network_alpha"] == "8"


@pytest.mark.parametrize(
    ("base_model", "named"),
    [
        ("/home/alice/models/flux1-dev", "flux1-dev"),
        ("/home/alice/models/flux1-dev/", "flux1-dev"),
        ("~/models/flux1-dev", "flux1-dev"),
        ("C:\\Users\\alice\\models\\sd_xl_base_1.0.safetensors", "sd_xl_base_1.0.safetensors"),
        ("black-forest-labs/FLUX.1-dev", "black-forest-labs/FLUX.1-dev"),
        ("flux1-dev", "flux1-dev"),  # a folder under models/ by its name
    ],
)
def test_the_lorastudio_header_names_the_base_not_where_the_trainer_keeps_it(base_model, named):
    """`lorastudio.base_model` held the run's base as given, a local absolute path included
    (`/home/<user>/...`): a shared file showed where its trainer kept the base. A run's header
    (training_metadata) and the header of a file made from another (convert, merge, resize:
    carried_header) name the model (the last path part; a hub id whole); the sidecar beside a
    run's file keeps the path (the studio's own record)."""
    from lorastudio.lora.metadata import carried_header, training_metadata

    assert training_metadata({"family": "flux", "base_model": base_model})["lorastudio.base_model"] == named
    carried = carried_header({"lorastudio.family": "flux", "lorastudio.base_model": base_model, "other": "x"})
    assert carried == {"lorastudio.family": "flux", "lorastudio.base_model": named}
