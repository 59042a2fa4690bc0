"""Sampling completions: the lean KV-cache decoder, the static CUDA-graph decoder, and group sampling behind
one GenerationBackend protocol."""
