"""TEST-ONLY: the fingerprint of the tiny models and the sample dataset (test_tiny_determinism):
sha256 of every weight and dataset file, and the ids each saved tokenizer (loaded back) gives
the prompts.

Run as a script (`python tests/tiny_fingerprint.py OUT PROMPTS_JSON`) it builds every tiny model
under OUT/tiny-<family> and the dataset under OUT/data, then prints the fingerprint as JSON."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fingerprint(models: Path, data: Path, prompts: list[str]) -> dict:
    """The fingerprint of the tiny models of every family in `models` (tiny-<family> folders, as
    lorastudio.tiny.tiny_model_dir names them) and of the dataset folder `data`: weights keyed
    by their path under `models`, tokenizer ids by family/tokenizer folder, dataset files by name."""
    from transformers import AutoTokenizer

    from lorastudio import tiny

    result: dict = {"weights": {}, "ids": {}, "dataset": {}}
    for family in tiny.TINY_FAMILIES:
        folder = tiny.tiny_model_dir(family, models)
        for path in sorted(folder.rglob("*.safetensors")):
            result["weights"][path.relative_to(models).as_posix()] = _digest(path)
        for sub in sorted(p for p in folder.iterdir() if p.name.startswith("tokenizer")):
            tok = AutoTokenizer.from_pretrained(sub)
            result["ids"][f"{family}/{sub.name}"] = [tok(p).input_ids for p in prompts]
    result["dataset"] = {p.name: _digest(p) for p in sorted(data.iterdir())}
    return result


def main(out: Path, prompts: list[str]) -> None:
    from lorastudio import tiny

    for family in tiny.TINY_FAMILIES:
        tiny.save_tiny_model(family, tiny.tiny_model_dir(family, out))
    data = tiny.make_sample_dataset(out / "data")
    print(json.dumps(fingerprint(out, data, prompts)))


if __name__ == "__main__":
    main(Path(sys.argv[1]), json.loads(sys.argv[2]))
