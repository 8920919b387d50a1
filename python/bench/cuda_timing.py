"""CUDA-event timing shared by the benchmarks of this folder (run as scripts: the folder is on
``sys.path``)."""

from __future__ import annotations

import statistics

import torch


def median_ms(fn, reps: int) -> float:
    """Median GPU time of ``fn`` over ``reps`` calls, in ms, by CUDA events on torch's stream
    (queued back to back, then one synchronisation)."""
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(start, end))
