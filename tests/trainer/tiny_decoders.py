"""Small random decoders of the supported families, for tests that compare two computations of the same thing."""

import torch
from transformers import PreTrainedConfig, PreTrainedModel


def tiny_decoder(
    config_class: type[PreTrainedConfig], model_class: type[PreTrainedModel], *, vocab_size: int = 400
) -> PreTrainedModel:
    """Two layers, grouped keys (4 query heads, 2 key/value heads), seeded; q/k/v biases (Qwen2) made nonzero and
    RMSNorm weights drawn away from their initial ones."""
    torch.manual_seed(0)
    config = config_class(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
    )
    model = model_class(config)
    # initialised to 0 and 1: a bias, or a norm weight folded into a matrix, would be tested for nothing
    make_matter(model, "_proj.bias", "norm.weight")
    return model


def make_matter(model: PreTrainedModel, *name_parts: str) -> None:
    """Draw the parameters whose names contain one of name_parts (LoRA's B and biases start at zero)."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if any(part in name for part in name_parts):
                parameter.normal_(std=0.5)
