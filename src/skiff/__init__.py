"""skiff: self-hosted serverless compute with a runpod-compatible job interface."""

__version__ = "0.1.0"

__all__ = ["__version__"]
