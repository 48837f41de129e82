"""Phases 1-2: the text conditioning and the latents, in RAM or as on-disk shards reused by later
runs, with the checks that a cache still matches (text signatures, caption length)."""
