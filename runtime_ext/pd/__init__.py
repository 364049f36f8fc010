"""Prefill/decode disaggregation on SGLang's own machinery, on devices SGLang's PD path did not
expect (the CPU): ``cpu_transfer`` removes the CUDA calls on the prefill's KV send path."""
