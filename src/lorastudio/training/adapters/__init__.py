"""The adapter itself: adding LoRA / DoRA / LoHa / LoKr layers (peft's) and the forwards that keep
their inputs small, starting from a LoRA file, the SDXL text encoders' LoRA, the assistant LoRA,
and writing the trained file (diffusers / kohya / LyCORIS layouts)."""
