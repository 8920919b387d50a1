"""Which layers of a Hugging Face model decode through fathom, read from its config.

Llama, Qwen2, Qwen3 and Gemma 3 attention layers are either `full_attention` (every earlier
token) or `sliding_attention` (the last `sliding_window` tokens: Gemma 3's local layers, Qwen2's
upper layers when `use_sliding_window` is set). A full layer decodes through the store with the
chosen method. A sliding layer stays dense over its own window, exactly as the model computes it:
its window is the model's, not the §6 local window (32 tokens), and the §6 selection over the
whole sequence would let it see tokens the model never attends to there, so neither mapping
would be honest. Its K/V live in a small torch cache of `sliding_window - 1` rows.

The store is built for the full layers only (`store_config` gives their count as
`num_hidden_layers`), so a model with five local layers to one global one, like Gemma 3, keeps a
store for one layer in six.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ConfigError

FULL = "full_attention"
SLIDING = "sliding_attention"


@dataclass(frozen=True)
class Layout:
    """The attention layers of one model: kind per layer, and the store layer of each full one."""

    kinds: tuple[str, ...]
    sliding_window: int | None
    q_heads: int
    kv_heads: int
    head_dim: int
    model_type: str
    config: dict

    @property
    def full_layers(self) -> list[int]:
        return [i for i, kind in enumerate(self.kinds) if kind == FULL]

    def store_layer(self, layer: int) -> int:
        """The store's index of model layer `layer` (a full layer)."""
        return self.full_layers.index(layer)

    @property
    def group(self) -> int:
        return self.q_heads // self.kv_heads

    def store_config(self) -> dict:
        """The config the store's `ModelShape.from_hf_config` reads: the fields SPEC §10 names,
        with only the full layers counted."""
        cfg = {k: self.config[k] for k in _SHAPE_FIELDS if self.config.get(k) is not None}
        cfg.update(
            num_hidden_layers=len(self.full_layers),
            head_dim=self.head_dim,
            num_key_value_heads=self.kv_heads,
            num_attention_heads=self.q_heads,
        )
        return cfg


_SHAPE_FIELDS = ("model_type", "hidden_size", "max_position_embeddings")


def text_config(config):
    """The language model's config (Gemma 3's multimodal config nests it in `text_config`)."""
    get = getattr(config, "get_text_config", None)
    return get(decoder=True) if callable(get) else config


def layout_of(config) -> Layout:
    """The layout of a `PretrainedConfig` (or its text config); a layer kind fathom cannot
    decode, or a model with no full layer, is a ConfigError that names it."""
    cfg = text_config(config)
    layers = int(cfg.num_hidden_layers)
    kinds = getattr(cfg, "layer_types", None)
    window = getattr(cfg, "sliding_window", None)
    if kinds is None:
        kinds = [SLIDING if window is not None else FULL] * layers
    kinds = tuple(kinds)[:layers]
    bad = sorted({k for k in kinds if k not in (FULL, SLIDING)})
    if bad:
        raise ConfigError(
            f"layer types {bad} of {cfg.model_type} cannot decode through fathom: "
            f"only {FULL!r} (through the store) and {SLIDING!r} (dense over its window) can"
        )
    if FULL not in kinds:
        raise ConfigError(
            f"{cfg.model_type} has no {FULL!r} layer: nothing would decode through fathom"
        )
    if SLIDING in kinds and not window:
        raise ConfigError(f"{cfg.model_type} has sliding layers but no sliding_window")
    q_heads = int(cfg.num_attention_heads)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or q_heads)
    head_dim = int(getattr(cfg, "head_dim", None) or int(cfg.hidden_size) // q_heads)
    return Layout(
        kinds=kinds,
        sliding_window=int(window) if window else None,
        q_heads=q_heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        model_type=str(cfg.model_type),
        config=cfg.to_dict(),
    )
