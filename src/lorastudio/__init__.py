"""lorastudio: a self-hosted studio for training LoRA adapters on image diffusion models."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("lorastudio")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"
