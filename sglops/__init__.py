"""sglops: drive a remote SGLang GPU host over SSH from a laptop."""

__version__ = "0.1.0"
