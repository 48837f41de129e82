"""The flavour hooks of a Family (families/base.py): which variant of the family a checkpoint is.

A family's checkpoints can differ in flavour (FLUX.1 dev / schnell, FLUX.2 klein distilled or
base, Qwen-Image-Edit / -Plus ...): `FamilySpec.variants` lists them as rows of `when` facts
(read from model_index.json and the denoiser's config, see `config_facts`) with what each row
changes: its pipeline class, its control images per sample, its generation defaults. These hooks
read the facts of a checkpoint, a local folder or a run's base and pick the row.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lorastudio import json_read
from lorastudio.errors import ModelSourceError
from lorastudio.families.spec import FamilySpec, Variant
from lorastudio.hub_token import hub_kwargs

if TYPE_CHECKING:
    from lorastudio.families.single_file import SingleFile


class FlavourHooks:
    """The variant hooks every Family has (a base class of Family; they read `self.spec` only)."""

    spec: FamilySpec

    # -- flavours ------------------------------------------------------------------------------
    def checkpoint_facts(self, source: str | SingleFile, revision: str | None) -> dict[str, Any]:
        """What the checkpoint says about its flavour: model_index.json's plain attributes (e.g.
        `is_distilled`) and the denoiser's config as "<denoiser>.<key>" (e.g.
        "transformer.guidance_embeds"); a single file's from its base config. Raises
        ModelSourceError when they cannot be read."""
        import diffusers

        from lorastudio.families.single_file import config_of

        source = config_of(source)

        cls = getattr(diffusers, self.spec.denoiser_class)
        try:
            index = diffusers.DiffusionPipeline.load_config(source, revision=revision, **hub_kwargs())
            denoiser = cls.load_config(
                source, subfolder=self.spec.denoiser, revision=revision, **hub_kwargs()
            )
        except (OSError, ValueError) as err:
            raise ModelSourceError(f"cannot read the configs of {source!r}: {err}") from err
        return config_facts(index, self.spec.denoiser, denoiser)

    def folder_variant(self, folder: Path) -> Variant | None:
        """The variant of a local pipeline folder, from its model_index.json and denoiser
        config.json read as plain JSON (no diffusers import: cheap enough for a preflight).
        None when the family has no variants, no row matches, or the files cannot be read."""
        if not self.spec.variants:
            return None
        facts = self._folder_facts(folder)
        return None if facts is None else self.variant(facts)

    def local_facts(self, source: str | SingleFile, revision: str | None = None) -> dict[str, Any] | None:
        """checkpoint_facts read from disk only, as plain JSON (no diffusers import, no download):
        a pipeline folder's, a single file's base config's, or a hub id's cached snapshot's; None
        when none is on disk or its configs cannot be read."""
        from lorastudio.basemodels.hubcache import cached_snapshot, is_hub_id
        from lorastudio.families.single_file import config_of

        where = str(config_of(source))
        folder: Path | None = Path(where).expanduser()
        if not folder.is_dir():
            folder = cached_snapshot(where, revision) if is_hub_id(where) else None
        if folder is None:
            return None
        return self._folder_facts(folder)

    def _folder_facts(self, folder: Path) -> dict[str, Any] | None:
        """config_facts of a pipeline folder's model_index.json and denoiser config.json, read as
        plain JSON; None when either cannot be read or is not a JSON object."""
        try:
            index = json_read.loads((folder / "model_index.json").read_text(encoding="utf-8"))
            denoiser = json_read.loads(
                (folder / self.spec.denoiser / "config.json").read_text(encoding="utf-8")
            )
        except (OSError, ValueError):
            return None
        if not isinstance(index, dict) or not isinstance(denoiser, dict):
            return None
        return config_facts(index, self.spec.denoiser, denoiser)

    def source_variant(self, source: str | SingleFile, revision: str | None) -> Variant | None:
        """The variant of a run's base model source: a local folder's (folder_variant), else the
        hub checkpoint's configs (checkpoint_facts; None when they cannot be read); a single
        file's base config's."""
        from lorastudio.families.single_file import config_of

        if not self.spec.variants:
            return None
        source = config_of(source)
        if Path(source).is_dir():
            return self.folder_variant(Path(source))
        try:
            return self.variant(self.checkpoint_facts(source, revision))
        except ModelSourceError:
            return None

    def variant(self, facts: Mapping[str, Any]) -> Variant | None:
        """The first row of spec.variants whose `when` facts all match `facts`; None if none does."""
        for row in self.spec.variants:
            if all(facts.get(k) == v for k, v in row.when.items()):
                return row
        return None

    def pipeline_class(self, facts: Mapping[str, Any]) -> str:
        """The diffusers pipeline class of the checkpoint with these facts: its variant's, else
        spec.pipeline_class."""
        row = self.variant(facts)
        return row.pipeline_class if row and row.pipeline_class else self.spec.pipeline_class

    def control_images(self, facts: Mapping[str, Any]) -> tuple[int, int]:
        """(min, max) control images per sample for the checkpoint with these facts: its
        variant's, else spec.control_images (the most any flavour takes)."""
        row = self.variant(facts)
        return row.control_images if row and row.control_images else self.spec.control_images

    def source_pipeline_class(self, source: str | SingleFile, revision: str | None) -> str:
        """pipeline_class of a run's base model source (source_variant, a single file's from its
        base config; the spec's when unread)."""
        row = self.source_variant(source, revision)
        return row.pipeline_class if row and row.pipeline_class else self.spec.pipeline_class

    def source_control_images(
        self, source: str | Path | SingleFile | None, revision: str | None = None
    ) -> tuple[int, int]:
        """control_images of a base model source: a local folder's variant's (folder_variant; a
        single file's base config's), else spec.control_images (a hub id is checked again when
        the run loads it)."""
        from lorastudio.families.single_file import SingleFile

        if isinstance(source, SingleFile):
            source = source.config
        folder = Path(source).expanduser() if source else None
        row = self.folder_variant(folder) if folder is not None and folder.is_dir() else None
        return row.control_images if row and row.control_images else self.spec.control_images

    def generation_defaults(self, facts: Mapping[str, Any]) -> dict[str, Any]:
        """spec.generation_defaults with the checkpoint's variant's overrides applied."""
        row = self.variant(facts)
        return {**self.spec.generation_defaults, **(row.generation_defaults if row else {})}


def config_facts(
    index: Mapping[str, Any], denoiser_name: str, denoiser_config: Mapping[str, Any]
) -> dict[str, Any]:
    """Checkpoint facts (Family.checkpoint_facts) from a pipeline's model_index / pipe.config and
    its denoiser's config: the plain (non-component, non-private) attributes of the first and its
    `_class_name`, and every public key of the second as "<denoiser_name>.<key>"."""
    facts = {
        k: v for k, v in dict(index).items() if not k.startswith("_") and not isinstance(v, (list, tuple))
    }
    facts["_class_name"] = dict(index).get("_class_name")  # the pipeline class the checkpoint names
    facts.update(
        {f"{denoiser_name}.{k}": v for k, v in dict(denoiser_config).items() if not k.startswith("_")}
    )
    return facts
