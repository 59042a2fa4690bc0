"""The model and its forward: model names, loading and precision, processes (torchrun, FSDP), the decoding
product, the last layer only where a loss reads, one forward per preference pair, the SmolLM2 import."""
