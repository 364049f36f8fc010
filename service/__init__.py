"""structserve: the OpenAI-compatible HTTP service in front of an in-process SGLang engine."""

__version__ = "0.1.0"
