"""Generation with trained LoRAs: load a pipeline, apply LoRAs with scales, generate images."""

from lorastudio.generate.detect import detect_family
from lorastudio.generate.pipeline import apply_loras, generate_image, load_pipeline

__all__ = ["apply_loras", "detect_family", "generate_image", "load_pipeline"]
