"""Quantized linear layers (W8A8 dynamic, W8A16, W4A16) as SGLang quantization methods."""
