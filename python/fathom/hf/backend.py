"""The two things a cache can decode through: fathom itself, and the torch reference of SPEC §6
that the tests use as their oracle. Both give a shape, key stores, a calibration and decoders with
the calls of fathom's Python API (`KeyStore.prefill/append`, `Decoder.step`), so the cache code
is the same for both.
"""

from __future__ import annotations

import inspect

import torch

from .. import ConfigError, DeviceUnavailableError


class FathomBackend:
    """fathom's own `ModelShape`, `KeyStore`, `Calibration` and `Decoder` (`device="cpu"` is the
    package's CPU backend over the f64 reference)."""

    name = "fathom"

    def __init__(self):
        import fathom

        missing = [
            n
            for n in ("ModelShape", "KeyStore", "Calibration", "Decoder")
            if not hasattr(fathom, n)
        ]
        if missing:
            raise DeviceUnavailableError(
                "this fathom package has no " + ", ".join(missing) + ": build it from python/ "
                "(pip install ./python) to decode through fathom"
            )
        self._fathom = fathom

    def model_shape(self, cfg: dict, basis: str | None = None):
        shape = self._fathom.ModelShape.from_hf_config(cfg)
        return shape.with_basis(basis) if basis is not None else shape

    def store_takes_calibration(self) -> bool:
        """True where a store is built with a calibration (a rotated store's basis), so each
        calibration needs its own store."""
        return "calibration" in _parameters(self._fathom.KeyStore)

    def key_store(
        self,
        shape,
        *,
        placement,
        capacity_tokens,
        device,
        max_batch,
        landmarks,
        pariskv_index,
        calibration=None,
    ):
        kwargs = dict(
            placement=placement,
            capacity_tokens=capacity_tokens,
            device=str(device),
            max_batch=max_batch,
            landmarks=landmarks,
            pariskv_index=pariskv_index,
        )
        # A rotated (KLT) store takes its basis from the calibration where the package asks for it.
        if calibration is not None and self.store_takes_calibration():
            kwargs["calibration"] = calibration
        return self._fathom.KeyStore(shape, **kwargs)

    def fit_calibration(self, shape, keys, queries, double_sparsity_r=None):
        extra = {} if double_sparsity_r is None else {"double_sparsity_r": double_sparsity_r}
        return self._fathom.Calibration.fit(shape, keys, queries, **extra)

    def load_calibration(self, path):
        return self._fathom.Calibration.load(path)

    def decoder(self, shape, *, device, k_max, calibration):
        return self._fathom.Decoder(shape, device=str(device), k_max=k_max, calibration=calibration)


class ReferenceBackend:
    """The pure-torch §6 oracle (`dense` and `oracle` only): for tests, on any device."""

    name = "reference"

    def model_shape(self, cfg: dict, basis: str | None = None):
        from .reference import ReferenceShape

        return ReferenceShape.from_hf_config(cfg)

    def key_store(
        self,
        shape,
        *,
        placement,
        capacity_tokens,
        device,
        max_batch,
        landmarks,
        pariskv_index,
        calibration=None,
    ):
        from .reference import ReferenceKeyStore

        if landmarks or pariskv_index:
            raise ConfigError("the torch reference keeps no landmarks and no ParisKV index")
        return ReferenceKeyStore(
            shape, capacity_tokens=capacity_tokens, device=device, max_batch=max_batch
        )

    def fit_calibration(self, shape, keys, queries, double_sparsity_r=None):
        return None

    def load_calibration(self, path):
        raise ConfigError("the torch reference takes no calibration")

    def decoder(self, shape, *, device, k_max, calibration):
        from .reference import ReferenceDecoder

        return ReferenceDecoder(shape, device=device, k_max=k_max)


def _parameters(cls) -> set[str]:
    try:
        return set(inspect.signature(cls).parameters)
    except (TypeError, ValueError):  # a native class may not say
        return set()


def resolve_backend(backend, device) -> object:
    """`backend` as given: an object with the calls above, `"fathom"`, `"reference"`, or None
    (fathom)."""
    if backend is None or backend == "fathom":
        return FathomBackend()
    if backend == "reference":
        return ReferenceBackend()
    if isinstance(backend, str):
        raise ConfigError(f"unknown backend {backend!r}: expected 'fathom' or 'reference'")
    return backend


def default_device(model) -> torch.device:
    return next(model.parameters()).device
