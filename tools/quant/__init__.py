"""Offline quantization on a HF model (torch): ``structserve quant calibrate | scan | export``."""
