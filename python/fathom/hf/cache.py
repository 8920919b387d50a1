"""`FathomCache`: a transformers `Cache` whose full-attention layers live in a fathom key store.

Life of one cache:
1. *prefill* (the first forward, any number of tokens): every layer records the prompt's K/V and
   returns them, so the prompt's attention is the model's own sdpa over them (dense prefill);
   full layers also keep the queries of the last `calibration_queries` positions.
2. *materialise* (at the first one-token forward, or at once when built from a saved `Prompt`):
   the calibration is fitted from the recorded prefill (or the given one is taken), sequences
   are created in the engine's store for the placement and method, and every full layer's prompt
   K/V are prefilled into them.
3. *decode*: each generated token's K/V are appended to the store and its attention, in every
   full layer, is `Decoder.step` with the cache's method (SPEC §6: sink, local window, top-k per
   query head, exact attention over the set), queued on the current torch stream with no host
   synchronisation. Sliding layers stay dense over their window (`layout.py` says why).

`branch(method=...)` makes another cache from the same saved prefill: SPEC §13's one dense
prefill per sample, each method decoding from a copy. `reset()` frees the cache's sequences and
makes it empty again; after an exception mid-token (some layers appended, others not) the cache
refuses to go on until it is reset.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicSlidingWindowLayer

from .. import ConfigError, InvalidInputError, MethodError, SequenceError
from .attention import NAME
from .engine import Engine
from .layout import FULL
from .methods import paper_k, parse_method
from .prompt import Prompt, PromptRow


class FathomLayer(CacheLayerMixin):
    """One full-attention layer: prompt K/V while recording, then the store's sequences."""

    is_sliding = False
    is_compileable = False
    is_croppable = False

    def __init__(self, cache: FathomCache, layer: int):
        super().__init__()
        self.cache = cache
        self.layer = layer
        self.store_layer = cache.engine.layout.store_layer(layer)
        self._clear()

    def _clear(self) -> None:
        self.keys = self.values = None
        self.queries = None
        self.appended = 0
        self.is_initialized = False

    def lazy_initialization(self, key_states, value_states) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        cache = self.cache
        if cache.state == "recording" and (self.keys is None or key_states.shape[-2] > 1):
            self.keys = (
                key_states if self.keys is None else torch.cat([self.keys, key_states], dim=-2)
            )
            self.values = (
                value_states
                if self.values is None
                else torch.cat([self.values, value_states], dim=-2)
            )
            keys = self.keys
            keys._fathom_prefill = self  # the attention function keeps this layer's queries
            return keys, self.values
        if key_states.shape[-2] != 1:
            raise InvalidInputError(
                f"layer {self.layer}: after the prefill fathom decodes one token per forward, got "
                f"{key_states.shape[-2]}"
            )
        if cache.state == "recording":
            cache.materialize()
        cache.check_step(self)
        # The store holds bf16 rows (SPEC §2); a bf16 model's are already.
        store_keys = key_states[:, :, 0].to(torch.bfloat16).contiguous()
        store_values = value_states[:, :, 0].to(torch.bfloat16).contiguous()
        cache.store.append(cache.seqs, self.store_layer, store_keys, store_values)
        self.appended += 1
        key_states._fathom_step = self
        return key_states, value_states

    def capture_queries(self, query: torch.Tensor) -> None:
        keep = self.cache.calibration_queries
        if keep:
            self.queries = query[:, :, -keep:].detach()

    def attend(self, query: torch.Tensor, scaling: float | None):
        """This token's attention for every row, `[B, 1, H_q, D]`, by the cache's method."""
        cache = self.cache
        q = query[:, :, 0]
        if q.dtype not in (torch.bfloat16, torch.float32):
            q = q.float()
        q = q.contiguous()
        out = torch.empty_like(q)
        cache.decoder.step(
            cache.store,
            cache.seqs,
            self.store_layer,
            q,
            out,
            method=cache.method.text,
            k=cache.k,
            scale=scaling,
        )
        return out.to(query.dtype).unsqueeze(1), None

    def get_seq_length(self) -> int:
        if self.cache.state == "recording":
            return 0 if self.keys is None else self.keys.shape[-2]
        return self.cache.prompt_lengths[0] + self.appended

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        self._clear()

    def reorder_cache(self, beam_idx) -> None:
        raise ConfigError("a fathom cache decodes greedily or by sampling, not by beam search")

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove:
            raise ConfigError(
                "a fathom store cannot drop tokens (no assisted or speculative decoding)"
            )

    def batch_repeat_interleave(self, repeats: int) -> None:
        if repeats != 1:
            raise ConfigError(
                "repeat the prompt rows instead (num_return_sequences > 1 is not supported)"
            )

    def batch_select_indices(self, indices) -> None:
        raise ConfigError("a fathom cache keeps all its rows until it is reset")


class WindowLayer(DynamicSlidingWindowLayer):
    """A sliding layer: dense over its window, exactly as transformers' own sliding cache."""

    is_croppable = False

    def load(self, keys: torch.Tensor, values: torch.Tensor, seen: int) -> None:
        self.lazy_initialization(keys, values)
        self.keys, self.values = keys.clone(), values.clone()
        self.cumulative_length = seen


class FathomCache(Cache):
    """A `Cache` for `model.generate(..., past_key_values=FathomCache(model, "fathom(48)"))`.

    method: a method string of the step (`"fathom(48)"`, `"sparq(32)"`, `"pariskv(100)"`,
        `"oracle"`, `"dense"`...), per cache, so per generate call.
    placement: `"hbm"` or `"host"` (the store and K/V rows in page-locked host memory).
    k: the top-k per query head; default `paper_k` of the longest prompt.
    calibration: None fits one from the prefill for the methods that use one; a fathom
        `Calibration` or the path of a saved one is taken as it is; False plans without.
    engine: an `Engine` to share stores and decoders with other caches of the same model
        (`backend`, `device`, `capacity_tokens`, `max_batch`, `k_max` make a new one).
    keep_prompt: keep the recorded prefill after materialising, for `branch`.
    """

    def __init__(
        self,
        model,
        method: str = "fathom(48)",
        *,
        placement: str = "hbm",
        k: int | None = None,
        calibration=None,
        engine: Engine | None = None,
        keep_prompt: bool = False,
        calibration_queries: int = 64,
        prompt: Prompt | None = None,
        **engine_kwargs,
    ):
        if engine is None and model is None:
            raise ConfigError("a FathomCache needs the model (or an Engine made for it)")
        self.engine = engine if engine is not None else Engine(model, **engine_kwargs)
        layout = self.engine.layout
        layers = [
            FathomLayer(self, i) if kind == FULL else WindowLayer(layout.sliding_window)
            for i, kind in enumerate(layout.kinds)
        ]
        super().__init__(layers=layers)
        try:
            self.method = parse_method(method) if method is not None else None
        except ValueError as e:
            raise MethodError(str(e)) from None
        self.placement = placement
        self.k_request = k
        self.calibration_spec = calibration
        self.keep_prompt = keep_prompt
        self.calibration_queries = int(calibration_queries)
        self._reset_state()
        if prompt is not None:
            self._materialize_from(prompt)

    # -- life cycle --------------------------------------------------------------------------

    def _reset_state(self) -> None:
        self.state = "recording"
        self.store = self.decoder = self.calibration = None
        self.seqs: list[int] = []
        self.prompt: Prompt | None = None
        self.prompt_lengths: list[int] = []
        self.first_tokens: list[int | None] = []
        self.k = None
        self._broken = None

    def materialize(self) -> None:
        """Ends the prefill: the recorded prompt becomes store sequences (see the module doc)."""
        self._materialize_from(self.recorded_prompt())

    def recorded_prompt(self) -> Prompt:
        """The prefill this cache recorded, as a `Prompt` (one row per batch row)."""
        layout = self.engine.layout
        full = [self.layers[i] for i in layout.full_layers]
        if any(layer.keys is None for layer in full):
            raise SequenceError("nothing was prefilled: run the prompt through the model first")
        batch, n = full[0].keys.shape[0], full[0].keys.shape[-2]
        rows = [PromptRow(length=n) for _ in range(batch)]
        for i, layer in enumerate(self.layers):
            for b, row in enumerate(rows):
                if isinstance(layer, FathomLayer):
                    row.full[i] = (layer.keys[b], layer.values[b])
                    if layer.queries is not None:
                        row.queries[i] = layer.queries[b]
                else:
                    row.window[i] = (layer.keys[b], layer.values[b])
        return Prompt(rows)

    def _materialize_from(self, prompt: Prompt) -> None:
        if self.method is None:
            raise MethodError(
                "this cache only records a prefill (method=None): branch it with a method"
            )
        engine = self.engine
        attn = getattr(engine.model_config, "_attn_implementation", NAME)
        if attn != NAME:
            # Any other attention would see only the new token's K/V that a decode step returns.
            raise ConfigError(
                f"the model attends with {attn!r}: call fathom.hf.use_fathom(model) first"
            )
        if len(prompt.rows) > engine.max_batch:
            raise InvalidInputError(
                f"{len(prompt.rows)} rows exceed the engine's max_batch {engine.max_batch}"
            )
        calibration = engine.calibration(self.calibration_spec, prompt, self.method)
        store = engine.store_for(self.method, self.placement, calibration)
        decoder = engine.decoder_for(calibration)
        seqs = []
        try:
            for row in prompt.rows:
                seq = store.create_sequence()
                seqs.append(seq)
                for layer, (keys, values) in row.full.items():
                    store.prefill(
                        seq,
                        engine.layout.store_layer(layer),
                        keys.to(torch.bfloat16).contiguous(),
                        values.to(torch.bfloat16).contiguous(),
                    )
        except BaseException:
            for seq in seqs:
                store.free_sequence(seq)
            raise
        for i, layer in enumerate(self.layers):
            if isinstance(layer, FathomLayer):
                layer.keys = layer.values = layer.queries = None
                layer.appended = 0
                layer.is_initialized = True
            else:
                keys, values = prompt.window_batch(i)
                layer.load(keys, values, max(prompt.lengths))
        self.store, self.decoder, self.calibration, self.seqs = store, decoder, calibration, seqs
        self.prompt_lengths = prompt.lengths
        self.first_tokens = prompt.next_tokens
        self.k = self.k_request if self.k_request is not None else paper_k(max(prompt.lengths))
        self.prompt = prompt if self.keep_prompt else None
        self.state = "decoding"

    def check_step(self, layer: FathomLayer) -> None:
        """Refuses a step on a cache whose last token stopped between layers: a step starts at
        the first full layer with every full layer at the same count, and each later layer is
        one behind the first until it appends."""
        if self._broken is None:
            full = [self.layers[i] for i in self.engine.layout.full_layers]
            if layer is full[0]:
                consistent = len({other.appended for other in full}) == 1
            else:
                consistent = layer.appended == full[0].appended - 1
            if consistent:
                return
            self._broken = layer.layer
        raise SequenceError(
            f"an earlier decode step stopped at layer {self._broken}; call reset() first"
        )

    def branch(
        self, method: str, *, placement: str | None = None, k: int | None = None, calibration=None
    ):
        """A new cache of `method` from this cache's prefill: the one it is recording, or the
        one it kept (`keep_prompt=True`). The calibration is this cache's unless given."""
        prompt = self.prompt
        if prompt is None and self.state == "recording":
            prompt = self.recorded_prompt()
        if prompt is None:
            raise SequenceError(
                "this cache kept no prefill to branch from: make it with keep_prompt=True"
            )
        return FathomCache(
            None,
            method,
            placement=placement or self.placement,
            k=self.k_request if k is None else k,
            calibration=self.calibration if calibration is None else calibration,
            engine=self.engine,
            calibration_queries=self.calibration_queries,
            prompt=prompt,
        )

    def release(self) -> None:
        """Frees this cache's sequences in the store (the cache is empty afterwards)."""
        store, seqs = self.store, self.seqs
        self.seqs = []
        if store is not None:
            for seq in seqs:
                store.free_sequence(seq)

    def reset(self) -> None:
        self.release()
        for layer in self.layers:
            layer.reset() if isinstance(layer, FathomLayer) else _clear_window(layer)
        self._reset_state()

    def __del__(self):
        try:
            self.release()
        except Exception:  # noqa: BLE001 - the store may be gone at interpreter exit
            pass

    # -- what transformers asks --------------------------------------------------------------

    def get_seq_length(self, layer_idx: int = 0) -> int:
        if layer_idx >= len(self.layers):
            return 0
        return self.layers[layer_idx].get_seq_length()

    @property
    def lengths(self) -> list[int]:
        """Tokens each row holds (its prompt and what it decoded); empty while recording."""
        if self.state == "recording":
            return []
        done = self.layers[self.engine.layout.full_layers[0]].appended
        return [n + done for n in self.prompt_lengths]

    @property
    def is_compileable(self) -> bool:
        return False


def _clear_window(layer: WindowLayer) -> None:
    layer.keys = layer.values = None
    layer.is_initialized = False
    layer.cumulative_length = 0
