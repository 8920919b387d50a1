"""Helpers of the Hugging Face tests: the backends to run, chat prompts, tiny random models."""

import os

import torch

MODEL_DIR = os.environ.get("FATHOM_SMOLLM2_DIR", "/tmp/fathom-models")
GGUF = "smollm2.gguf"


def backends():
    """The reference always; fathom's own where the package has its backend built."""
    out = ["reference"]
    try:
        import fathom

        if hasattr(fathom, "KeyStore"):
            out.append("fathom")
    except ImportError:
        pass
    return out


def chat_ids(tok, text):
    ids = tok.apply_chat_template(
        [{"role": "user", "content": text}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    return ids


def tiny_model(arch: str, **overrides):
    """A random bf16 model of `arch` with 4 layers, 4 query and 2 KV heads, head dim 16."""
    from transformers import AutoConfig, AutoModelForCausalLM

    import fathom.hf

    common = dict(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
    )
    if arch == "gemma3_text":
        common.update(
            sliding_window=12,
            layer_types=["sliding_attention", "full_attention"] * 2,
            query_pre_attn_scalar=16,
        )
    common.update(overrides)
    config = AutoConfig.for_model(arch, **common)
    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    fathom.hf.use_fathom(model)
    return model
