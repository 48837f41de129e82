"""The memory plan and the forecasts: precision, checkpointing, block swap, quantised bases,
micro-batches, the plan against the card, measured trials, and the time model's inputs."""
