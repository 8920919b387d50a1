from typing import Any, Optional, Sequence

from ._native import (
    CalibrationError as CalibrationError,
)
from ._native import (
    CapacityError as CapacityError,
)
from ._native import (
    ConfigError as ConfigError,
)
from ._native import (
    DeviceUnavailableError as DeviceUnavailableError,
)
from ._native import (
    FathomError as FathomError,
)
from ._native import InvalidInputError as _NativeInvalidInput
from ._native import (
    KernelError as KernelError,
)
from ._native import (
    MethodError as MethodError,
)
from ._native import (
    ModelShape as ModelShape,
)
from ._native import (
    Selection as Selection,
)
from ._native import (
    SequenceError as SequenceError,
)

__version__: str

class InvalidInputError(_NativeInvalidInput, ValueError): ...

def is_available() -> bool: ...
def unavailable_reason() -> Optional[str]: ...

class Calibration:
    layer_budgets: Optional[list[int]]
    sigma2: Optional[list[float]]
    has_rotation: bool
    double_sparsity_r: Optional[int]
    @staticmethod
    def fit(
        shape: ModelShape,
        keys: Sequence[Any],
        queries: Sequence[Any],
        budgets: Optional[float] = ...,
        double_sparsity_r: int = ...,
    ) -> Calibration: ...
    def save(self, path: Any) -> None: ...
    def shard(self, shape: ModelShape, rank: int, ranks: int) -> Calibration: ...
    @staticmethod
    def load(path: Any) -> Calibration: ...

class KeyStore:
    device: str
    shape: ModelShape
    def __init__(
        self,
        shape: ModelShape,
        placement: str = ...,
        capacity_tokens: int = ...,
        device: Any = ...,
        max_batch: int = ...,
        landmarks: bool = ...,
        pariskv_index: bool = ...,
        calibration: Optional[Calibration] = ...,
        kv_rows: Optional[str] = ...,
    ) -> None: ...
    def create_sequence(self) -> int: ...
    def free_sequence(self, seq: int) -> None: ...
    def prefill(self, seq: int, layer: int, keys: Any, values: Any, stream: Any = ...) -> None: ...
    def append(
        self, seqs: Sequence[int], layer: int, keys: Any, values: Any, stream: Any = ...
    ) -> None: ...
    def lengths(self, seq: int, layer: int) -> tuple[int, int]: ...
    def memory(self) -> dict[str, int]: ...
    def check(self) -> None: ...

class Decoder:
    device: str
    shape: ModelShape
    def __init__(
        self,
        shape: ModelShape,
        device: Any = ...,
        k_max: int = ...,
        calibration: Optional[Calibration] = ...,
    ) -> None: ...
    def step(
        self,
        store: KeyStore,
        seqs: Sequence[int],
        layer: int,
        queries: Any,
        out: Any,
        method: str = ...,
        k: Optional[int] = ...,
        scale: Optional[float] = ...,
        placement_transfer: Optional[str] = ...,
        return_selection: bool = ...,
        stream: Any = ...,
        _repeat: int = ...,
    ) -> Optional[Selection]: ...
