"""The latent cache's settings against each other (no torch): the crop / flip variants cached per
image (cache_variants) and the RAM budget (latent_cache_max_gb), refused where the augmentation
or the latent_cache mode would make them change nothing (config_rules.combination_problems
reports them with the rest); data/disk_cache.latent_mode is the rule that reads them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lorastudio.errors import FieldProblem

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig


def default_cache_variants(cfg: TrainConfig) -> int:
    """cache_variants left unset: 4 with random crop, 2 with flip only, else 1."""
    return 4 if cfg.random_crop else 2 if cfg.random_flip else 1


def latent_cache_problems(cfg: TrainConfig) -> list[FieldProblem]:
    """cache_variants that would give identical variants (no random crop / flip, more than a
    flip's two), and cache settings the latent_cache mode never reads: latent_cache_max_gb (the
    RAM budget of 'auto' / 'memory') with 'disk' or 'off', and cache_variants other than its
    default with 'off' (every step encodes a fresh crop / flip: nothing is cached). A resolved
    config carries the defaults, so a clone of a run passes."""
    augmenting = cfg.random_crop or cfg.random_flip
    problems: list[FieldProblem] = []
    if cfg.cache_variants is not None and cfg.cache_variants > 1 and not augmenting:
        problems.append(
            FieldProblem(
                "cache_variants", "> 1 needs random_crop or random_flip (every variant would be identical)"
            )
        )
    if cfg.cache_variants is not None and cfg.cache_variants > 2 and cfg.random_flip and not cfg.random_crop:
        problems.append(
            FieldProblem("cache_variants", "random_flip alone gives only 2 distinct variants: use <= 2")
        )
    if (
        cfg.latent_cache in ("disk", "off")
        and cfg.latent_cache_max_gb != type(cfg).model_fields["latent_cache_max_gb"].default
    ):
        problems.append(
            FieldProblem(
                "latent_cache_max_gb",
                f"is the RAM budget of latent_cache 'auto' / 'memory'; {cfg.latent_cache!r} never reads it "
                "(it would be ignored): remove it",
            )
        )
    if (
        cfg.latent_cache == "off"
        and cfg.cache_variants is not None
        and cfg.cache_variants != default_cache_variants(cfg)
    ):
        problems.append(
            FieldProblem(
                "cache_variants",
                "latent_cache 'off' encodes every step's crop / flip afresh and caches none, so the variants "
                "cached per image would be ignored: remove it, or cache the latents",
            )
        )
    return problems
