"""fathom inside a Hugging Face transformers model (5.x): Llama, Qwen2, Qwen3, Gemma 3.

    import fathom.hf
    model = fathom.hf.use_fathom(model)        # registers the "fathom" attention and mask
    cache = fathom.hf.FathomCache(model, "fathom(48)", placement="host")
    out = model.generate(input_ids, past_key_values=cache, max_new_tokens=64, do_sample=False)

The prompt is prefilled densely (the model's sdpa); every generated token's attention in every
full-attention layer is the fathom step of the chosen method. `cache.py` has the life cycle,
`layout.py` what happens to sliding-window layers.

Only `methods` is importable without torch; everything else needs torch and transformers.
"""

from importlib import import_module

_EXPORTS = {
    "FathomCache": "cache",
    "Engine": "engine",
    "Prompt": "prompt",
    "PromptRow": "prompt",
    "register": "attention",
    "use_fathom": "attention",
    "fathom_attention": "attention",
    "fathom_mask": "attention",
    "record_prompt": "decode",
    "greedy": "decode",
    "teacher_forced": "decode",
    "layout_of": "layout",
    "FathomBackend": "backend",
    "ReferenceBackend": "backend",
    "paper_k": "methods",
    "parse_method": "methods",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
