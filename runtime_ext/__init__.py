"""structserve's SGLang runtime extension (loaded as an ``sglang.srt.plugins`` entry point)."""

__version__ = "0.1.0"
