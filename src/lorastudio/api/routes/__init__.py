"""One router per resource: train, datasets, runs, loras, generate, info."""
