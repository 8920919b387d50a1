"""Describing the caller's tensors to the native module without copying them.

A description is ``(address, shape, strides in elements, dtype name, device)``; the native side
checks every part (dtype, shape, device, contiguity, 16-byte alignment, and on a GPU the
driver's placement of the address) before it reads anything. torch is optional: numpy arrays
describe themselves through ``__array_interface__``.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

Description = tuple


def _torch():
    return sys.modules.get("torch")


def _is_torch(x: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def describe(x: Any) -> Description:
    """The native description of a torch tensor or a numpy array (never a copy)."""
    if _is_torch(x):
        device = x.device
        text = "cpu" if device.type == "cpu" else f"{device.type}:{device.index or 0}"
        dtype = str(x.dtype).replace("torch.", "")
        return (x.data_ptr(), list(x.shape), list(x.stride()), dtype, text)
    if isinstance(x, np.ndarray):
        iface = x.__array_interface__
        item = x.dtype.itemsize
        strides = iface.get("strides")
        if strides is None:
            elements = []
            step = 1
            for n in reversed(x.shape):
                elements.append(step)
                step *= max(n, 1)
            elements.reverse()
        else:
            # A stride that is not a whole number of elements cannot be contiguous: report it
            # in bytes, negated, so the native check names it.
            elements = [s // item if s % item == 0 else -abs(s) for s in strides]
        return (iface["data"][0], list(x.shape), elements, x.dtype.name, "cpu")
    raise TypeError(f"expected a torch.Tensor or a numpy.ndarray, not {type(x).__name__}")


def current_stream(device: str) -> int:
    """torch's current stream on ``device`` (0, the legacy stream, without torch)."""
    torch = _torch()
    if torch is None or not torch.cuda.is_available():
        return 0
    return int(torch.cuda.current_stream(torch.device(device)).cuda_stream)


def to_f64_rows(x: Any, what: str) -> tuple:
    """``[H, n, D]`` of any float dtype (or bf16 bits as uint16) as ``(flat float64 list, n)``
    for calibration, which runs on the host."""
    if _is_torch(x):
        x = x.detach().float().cpu().numpy()
    x = np.asarray(x)
    if x.dtype == np.uint16:
        x = (x.astype(np.uint32) << 16).view(np.float32)
    if x.ndim != 3:
        raise ValueError(f"{what} must be [heads, tokens, head_dim], not shape {x.shape}")
    x = np.ascontiguousarray(x, dtype=np.float64)
    return (x.reshape(-1).tolist(), int(x.shape[1]))
