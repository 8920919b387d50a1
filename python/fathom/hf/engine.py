"""The long-lived half of decoding a model through fathom: its layout, the backend, and the key
stores and decoders, made once and shared by every cache (every generation, every method branch)
that decodes this model. A store is made per kind it must be (placement, landmarks, ParisKV
index), a decoder per calibration; caches only create and free sequences in them.
"""

from __future__ import annotations

import os

import torch

from .. import ConfigError
from .backend import default_device, resolve_backend
from .layout import layout_of
from .methods import Method


class Engine:
    """Stores and decoders for one model.

    `basis` ("raw" or "klt") overrides the model shape's store basis (SPEC §5).
    `capacity_tokens` bounds the tokens resident in one store over all its sequences (default:
    `max_batch` sequences of the model's `max_position_embeddings`); `max_batch` is the most
    sequences one step batches.
    """

    def __init__(
        self,
        model_or_config,
        *,
        backend=None,
        device=None,
        capacity_tokens=None,
        max_batch: int = 8,
        k_max: int = 2048,
        basis: str | None = None,
    ):
        config = getattr(model_or_config, "config", model_or_config)
        self.model_config = config  # read again when a cache starts decoding (its attention)
        self.layout = layout_of(config)
        if device is None:
            device = (
                default_device(model_or_config) if hasattr(model_or_config, "parameters") else "cpu"
            )
        self.device = torch.device(device)
        self.backend = resolve_backend(backend, self.device)
        # basis: "raw" or "klt" instead of the shape's own (SPEC §5: measure both per model).
        self.shape = self.backend.model_shape(self.layout.store_config(), basis)
        if capacity_tokens is None:
            positions = int(self.layout.config.get("max_position_embeddings") or 8192)
            capacity_tokens = max_batch * (positions + 64)
        if max_batch < 1 or capacity_tokens < 1:
            raise ConfigError(
                f"max_batch ({max_batch}) and capacity_tokens ({capacity_tokens}) must be positive"
            )
        self.capacity_tokens = int(capacity_tokens)
        self.max_batch = int(max_batch)
        self.k_max = int(k_max)
        self._stores: dict[tuple, object] = {}
        self._decoders: dict[int, tuple[object, object]] = {}

    def store_for(self, method: Method, placement: str, calibration):
        if placement not in ("hbm", "host"):
            raise ConfigError(f"placement {placement!r}: expected 'hbm' or 'host'")
        takes_cal = getattr(self.backend, "store_takes_calibration", lambda: False)()
        key = (
            placement,
            method.needs_landmarks,
            method.needs_pariskv_index,
            id(calibration) if takes_cal else None,
        )
        if key not in self._stores:
            self._stores[key] = self.backend.key_store(
                self.shape,
                placement=placement,
                capacity_tokens=self.capacity_tokens,
                device=self.device,
                max_batch=self.max_batch,
                landmarks=method.needs_landmarks,
                pariskv_index=method.needs_pariskv_index,
                calibration=calibration,
            )
        return self._stores[key]

    def decoder_for(self, calibration):
        # Keyed by identity: a calibration is fitted per prefill and shared by its branches; the
        # calibration is kept beside its decoder so that its id is not reused while cached.
        key = id(calibration)
        if key not in self._decoders:
            self._decoders[key] = (
                calibration,
                self.backend.decoder(
                    self.shape, device=self.device, k_max=self.k_max, calibration=calibration
                ),
            )
        return self._decoders[key][1]

    def forget_calibration(self, calibration) -> None:
        """Drops the decoder made for `calibration` (the evaluation does after each prefill's
        branches, so decoders do not pile up)."""
        self._decoders.pop(id(calibration), None)
        for key in [k for k in self._stores if k[3] is not None and k[3] == id(calibration)]:
            del self._stores[key]

    def calibration(self, spec, prompt, method: Method):
        """The calibration a cache decodes with: `spec` itself if it is one, loaded if it is a
        path, fitted from `prompt` (the default, for methods that use one), or none (`False`)."""
        # A rotated (KLT) store needs the calibration's basis whatever the method.
        needed = method.needs_calibration or getattr(self.shape, "basis", "raw") == "klt"
        if spec is False or (spec is None and not needed):
            return None
        if isinstance(spec, (str, os.PathLike)):
            return self.backend.load_calibration(spec)
        if spec is not None:
            return spec
        keys, queries = prompt.calibration_inputs(self.layout.full_layers)
        # double_sparsity(r)'s fixed channel sets are fitted for its own r.
        r = int(method.arg) if method.name == "double_sparsity" else None
        return self.backend.fit_calibration(self.shape, keys, queries, double_sparsity_r=r)

    def memory(self) -> dict:
        """Each store's own account (`KeyStore.memory()`), by placement and kind."""
        return {
            f"{p}{'+landmarks' if lm else ''}{'+pariskv' if x else ''}": s.memory()
            for (p, lm, x, _), s in self._stores.items()
        }
