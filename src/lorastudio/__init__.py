"""lorastudio: a self-hosted studio for training LoRA adapters on image diffusion models."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("lorastudio")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"


def _quiet_torchao_import() -> None:
    """torchao (a dependency: fp8 / int8 / nf4 bases) is imported by diffusers and transformers
    whenever it is installed, and warns at import about its optional C++ kernels built for another
    torch version and about a torch deprecation of the enums it registers. lorastudio uses none of
    those kernels (fp8 goes through torch._scaled_mm, int8 / nf4 through torchao's Python
    tensors), so these two loggers only report errors."""
    import logging

    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.ERROR)


_quiet_torchao_import()
