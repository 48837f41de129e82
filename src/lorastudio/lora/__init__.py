"""Portable LoRA files: the diffusers/peft and kohya/ComfyUI key layouts of every family,
pure conversions between them, ComfyUI's key-consumption check and header metadata."""
