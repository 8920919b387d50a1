#!/usr/bin/env python3
"""How often the one-read select's append runs, simulated (no GPU).

One `_chunk` block's share at 1M tokens (128k N(0,1) scores), tiles of 4,096 scores (t512 i8),
k = 512, a buffer of 4,096 entries cut to k when a tile's survivors do not fit (cutting
earlier at `limit`). Prints, per limit: the cuts, the survivors appended, and the warp-tiles
(16 warps of 256 scores each) with at least one survivor, which is how often a warp runs its
append. Quoted in `bench/experiments/select-append-scan.patch` and `bench/NOTES.md`.

Usage: python3 bench/experiments/select-survivors-sim.py   (needs numpy)
"""

import numpy as np


def simulate(rng, n=131072, tile=4096, k=512, limit=4096, warps=16):
    scores = rng.standard_normal(n).astype(np.float32)
    buffer = np.empty(0, np.float32)
    floor = -np.inf
    cuts = appended = warp_tiles = 0
    for t0 in range(0, n, tile):
        t = scores[t0 : t0 + tile]
        kept = t[t >= floor]
        warp_tiles += int(((t.reshape(warps, -1) >= floor).sum(axis=1) > 0).sum())
        if len(buffer) + len(kept) <= limit:
            buffer = np.concatenate([buffer, kept])
            appended += len(kept)
        else:
            best = np.sort(np.concatenate([buffer, kept]))[::-1]
            buffer = best[:k]
            floor = np.nextafter(buffer[-1], np.float32(np.inf), dtype=np.float32)
            cuts += 1
    return cuts, appended, warp_tiles


def main():
    rng = np.random.default_rng(1)
    print("limit  cuts  appended  warp-tiles with survivors (of 512)")
    for limit in [4096, 3072, 2048, 1536, 1024, 768]:
        cuts, appended, warp_tiles = simulate(rng, limit=limit)
        print(f"{limit:5d}  {cuts:4d}  {appended:8d}  {warp_tiles}")


if __name__ == "__main__":
    main()
