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
