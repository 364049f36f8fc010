"""C8 INT8 KV cache for SGLang (registered by the plugin)."""
