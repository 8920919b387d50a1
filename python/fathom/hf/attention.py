"""The `"fathom"` attention and mask functions of transformers' `AttentionInterface` and
`AttentionMaskInterface`.

A model set to `attn_implementation="fathom"` calls `fathom_attention` in every layer with the
K/V its cache's `update` returned. A decode step of a `FathomCache` full layer marks its key
tensor; for that call the attention is the layer's `Decoder.step`. Every other call (the dense
prefill, sliding layers, a model decoding with any other cache) is transformers' own sdpa, so
the prompt's attention is the model's exactly.

The mask function is sdpa's for the prefill. A one-token decode step needs no mask: the store
holds each row's own tokens only, and a sliding layer's cache holds exactly its window. Padded
batches are refused: a pad token would enter the store and be selected like any other (rows of
different lengths are what a batch of saved prompts, `FathomCache(prompt=...)`, is for).
"""

from __future__ import annotations

from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from .. import ConfigError, InvalidInputError

NAME = "fathom"


def fathom_attention(
    module,
    query,
    key,
    value,
    attention_mask,
    dropout: float = 0.0,
    scaling: float | None = None,
    softcap: float | None = None,
    **kwargs,
):
    step = key.__dict__.pop("_fathom_step", None)
    if step is not None:
        if softcap is not None:
            raise ConfigError(
                f"layer {step.layer} asks for attention logit softcapping ({softcap}); "
                "the step's attention (SPEC §6) has none"
            )
        return step.attend(query, scaling)
    prefill = key.__dict__.pop("_fathom_prefill", None)
    if prefill is not None:
        prefill.capture_queries(query)
    if softcap is not None:
        kwargs["softcap"] = softcap
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
    )


def fathom_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    attention_mask=None,
    **kwargs,
):
    if q_length == 1 and kv_length > 1:
        return None
    if attention_mask is not None and not bool(attention_mask.all()):
        raise InvalidInputError(
            "fathom decodes unpadded rows: this batch has padding (attention_mask zeros); "
            "prefill each prompt alone and decode them together from saved prompts"
        )
    return sdpa_mask(
        batch_size=batch_size,
        q_length=q_length,
        kv_length=kv_length,
        q_offset=q_offset,
        kv_offset=kv_offset,
        attention_mask=attention_mask,
        **kwargs,
    )


def register() -> str:
    """Registers `"fathom"` with both interfaces (idempotent) and returns the name."""
    AttentionInterface.register(NAME, fathom_attention)
    AttentionMaskInterface.register(NAME, fathom_mask)
    return NAME


def use_fathom(model):
    """Registers the functions and switches `model` to them; returns the model."""
    register()
    model.set_attn_implementation(NAME)
    return model
