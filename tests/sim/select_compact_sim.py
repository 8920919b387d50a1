#!/usr/bin/env python3
"""Thread-level model of templates/select_compact.cu.tera (the selection; `_union` is shared with
the plain select and not modelled), checked against the §6 reference selection.

Why it exists: the compacting select had no GPU run when it was written. This model follows the
kernels entry point by entry point and thread by thread -- the (warp, j, lane) token order, the
ballots and block scans that place a chunk's tokens, the one-atomic-per-chunk run offsets of
`_filter` (blocks in a random order), the per-head switch in `_pick` -- over workspaces poisoned as
the GPU tests poison them (0xffffffff), so an off-by-one in an offset, a run read before it is
written, a write past CAND or a broken ascending order shows up on the CPU.

Run: python3 tests/sim/select_compact_sim.py [iterations]   (prints "ok ..." or raises)
"""
import random
import struct
import sys

SINK, LOCAL = 4, 32
ALWAYS = SINK + LOCAL
BINS = 2048
THRESHOLD, NEED, DECIDED, SOURCE, ABOVE, FILLED = 0, 1, 2, 3, 4, 5
HEADER = 8
STATE_WORDS = HEADER + BINS
CANDIDATES_PER_K = 8  # codegen/src/spec/select.rs
POISON = 0xFFFFFFFF
U32 = 0xFFFFFFFF


def order_key(s):
    b = struct.unpack('<I', struct.pack('<f', s))[0]
    if b == 0x80000000:
        b = 0
    return (~b & U32) if b & 0x80000000 else (b | 0x80000000)


def pass_shift(p):
    return 21 if p == 0 else (10 if p == 1 else 0)


def pass_bins(p):
    return 1024 if p == 2 else 2048


def prefix_mask(p):
    return 0 if p == 0 else (U32 << pass_shift(p - 1)) & U32


def popc(x):
    return bin(x).count('1')


class Breach(Exception):
    """A write the kernel would make outside its buffer, or a read of a word nobody wrote."""


class Select:
    """One query head's launches with a tile (threads, items) and a grid of `chunks` blocks."""

    def __init__(self, scores, k, k_max, threads, items, max_tokens, rng):
        assert threads % 32 == 0 and 1 <= items <= 32
        self.scores, self.n = scores, len(scores)
        self.k, self.k_max = k, k_max
        self.threads, self.items = threads, items
        self.warps = threads // 32
        self.chunk = threads * items
        self.chunks = max(1, -(-max_tokens // self.chunk))
        self.cand = CANDIDATES_PER_K * k_max
        self.rng = rng
        self.st = [POISON] * STATE_WORDS
        self.candidates = [(POISON, POISON)] * self.cand
        self.runs = [(POISON, POISON)] * self.chunks
        self.chunk_counts = [(POISON, POISON)] * self.chunks
        self.sel = [-1] * (min(max(k, 0), k_max) + ALWAYS)
        self.sel_count = None
        self.max_source = 0

    def clamp_k(self):
        return min(max(self.k, 0), self.k_max)

    # The chunk of block x: the scores, or its run of candidates.
    def chunk_of_block(self, x):
        filtered = self.st[SOURCE] != 0
        if filtered:
            off, count = self.runs[x]
            if off == POISON or count == POISON:
                raise Breach(f'chunk {x}: run read before _filter wrote it')
            if off + count > self.cand:
                raise Breach(f'chunk {x}: run [{off}, {off + count}) past CAND {self.cand}')
            return dict(filtered=True, base=x * self.chunk, off=off, count=count)
        return dict(filtered=False, base=x * self.chunk, off=0, count=0)

    def no_middle(self, c):
        return c['count'] == 0 if c['filtered'] else c['base'] >= self.n - LOCAL

    def token_at(self, c, p):
        if c['filtered']:
            if p >= c['count']:
                return 'none', None, None
            i, key = self.candidates[c['off'] + p]
            if i == POISON:
                raise Breach('a candidate read before it was written')
            return 'middle', i, key
        i = c['base'] + p
        if i >= self.n:
            return 'none', None, None
        if i < SINK or i >= self.n - LOCAL:
            return 'always', i, None
        return 'middle', i, order_key(self.scores[i])

    def positions(self):
        """(warp, j, lane, p) in the order the kernels visit them; p = (warp*ITEMS + j)*32 + lane."""
        for w in range(self.warps):
            for j in range(self.items):
                for lane in range(32):
                    yield w, j, lane, (w * self.items + j) * 32 + lane

    # Placement of flagged tokens, as _filter and _write do it: per-warp totals of the ballots,
    # an exclusive block scan of the warp totals, then within the warp j by j, lanes by ballot.
    def place(self, flags, base_pos):
        warp_total = [0] * self.warps
        for w in range(self.warps):
            for j in range(self.items):
                warp_total[w] += popc(sum(1 << lane for lane in range(32) if flags[w][j][lane]))
        offsets, acc = [], 0
        for w in range(self.warps):
            offsets.append(acc)
            acc += warp_total[w]
        out = []
        for w in range(self.warps):
            pos = base_pos + offsets[w]
            for j in range(self.items):
                ballot = sum(1 << lane for lane in range(32) if flags[w][j][lane])
                for lane in range(32):
                    if flags[w][j][lane]:
                        out.append((pos + popc(ballot & ((1 << lane) - 1)), w, j, lane))
                pos += popc(ballot)
        return out, acc

    def init(self):
        n, kk = self.n, self.clamp_k()
        for d in range(BINS):
            self.st[HEADER + d] = 0
        middle = n - ALWAYS
        if middle <= kk:
            self.st[THRESHOLD], self.st[NEED], self.st[DECIDED] = 0, 0x7FFFFFFF, 1
            self.sel_count = n
        elif kk == 0:
            self.st[THRESHOLD], self.st[NEED], self.st[DECIDED] = U32, 0, 1
            self.sel_count = ALWAYS
        else:
            self.st[THRESHOLD], self.st[NEED], self.st[DECIDED] = 0, kk, 0
            self.sel_count = ALWAYS + kk
        for w in range(SOURCE, HEADER):
            self.st[w] = 0

    def hist(self, pss):
        if self.st[DECIDED]:
            return
        shift, bins, mask = pass_shift(pss), pass_bins(pss), prefix_mask(pss)
        for x in range(self.chunks):
            c = self.chunk_of_block(x)
            if self.no_middle(c):
                continue
            prefix = self.st[THRESHOLD]
            local = [0] * bins
            for _, _, _, p in self.positions():
                kind, _, key = self.token_at(c, p)
                if kind == 'middle' and (key & mask) == prefix:
                    local[(key >> shift) & (bins - 1)] += 1
            for d in range(bins):
                if local[d]:
                    self.st[HEADER + d] = (self.st[HEADER + d] + local[d]) & U32

    def pick(self, pss):
        st = self.st
        if st[DECIDED]:
            return
        shift, bins = pass_shift(pss), pass_bins(pss)
        per = bins // 32
        sums = [sum(st[HEADER + lane * per + t] for t in range(per)) for lane in range(32)]
        need = st[NEED]
        found = 0
        for lane in range(32):
            incl = sum(sums[lane:])
            above = incl - sums[lane]
            if above < need <= incl:
                found += 1
                cum = above
                for t in range(per - 1, -1, -1):
                    c = st[HEADER + lane * per + t]
                    if cum + c >= need:
                        st[NEED] = need - cum
                        st[THRESHOLD] |= (lane * per + t) << shift
                        st[ABOVE] += cum
                        if pss < 2 and st[SOURCE] == 0 and st[ABOVE] + c <= self.cand:
                            st[SOURCE] = 1 + pss
                            st[FILLED] = 0
                        break
                    cum += c
        if found != 1:
            raise AssertionError(f'pass {pss}: {found} lanes hold the need-th key')
        for d in range(BINS):
            st[HEADER + d] = 0

    def filter(self, pss):
        st = self.st
        if st[DECIDED] or st[SOURCE] != 1 + pss:
            return
        threshold, n = st[THRESHOLD], self.n
        order = list(range(self.chunks))
        self.rng.shuffle(order)  # blocks take their run offsets in any order
        for x in order:
            base = x * self.chunk
            flags = [[[False] * 32 for _ in range(self.items)] for _ in range(self.warps)]
            for w, j, lane, p in self.positions():
                i = base + p
                flags[w][j][lane] = SINK <= i < n - LOCAL and order_key(self.scores[i]) >= threshold
            placed, total = self.place(flags, 0)
            run_offset = 0 if total == 0 else st[FILLED]
            st[FILLED] += total if total else 0
            self.runs[x] = (run_offset, total)
            for at, w, j, lane in placed:
                at += run_offset
                if at >= self.cand:
                    raise Breach(f'_filter({pss}) writes candidate {at} >= CAND {self.cand}')
                i = base + (w * self.items + j) * 32 + lane
                self.candidates[at] = (i, order_key(self.scores[i]))

    def count(self):
        threshold = self.st[THRESHOLD]
        for x in range(self.chunks):
            c = self.chunk_of_block(x)
            fixed = equal = 0
            for _, _, _, p in self.positions():
                kind, _, key = self.token_at(c, p)
                if kind == 'always':
                    fixed += 1
                elif kind == 'middle':
                    fixed += key > threshold
                    equal += key == threshold
            self.chunk_counts[x] = (fixed, equal)

    def write(self):
        st, n = self.st, self.n
        threshold, need = st[THRESHOLD], st[NEED]
        sel_cap = self.clamp_k() + ALWAYS
        for x in range(self.chunks):
            c = self.chunk_of_block(x)
            if c['base'] >= n:
                continue
            if c['filtered']:
                if x == 0:
                    for t in range(ALWAYS):
                        if t < SINK:
                            self.put(t, t, sel_cap)
                        else:
                            self.put(sel_cap - ALWAYS + t, n - ALWAYS + t, sel_cap)
                if c['count'] == 0:
                    continue
            out_before = SINK if c['filtered'] else 0
            equal_before = 0
            for e in range(x):
                fixed_e, equal_e = self.chunk_counts[e]
                if fixed_e == POISON:
                    raise Breach(f'chunk count {e} read before _count wrote it')
                taken = max(0, min(equal_e, need - equal_before))
                out_before += fixed_e + taken
                equal_before += equal_e
            always = [[[False] * 32 for _ in range(self.items)] for _ in range(self.warps)]
            above = [[[False] * 32 for _ in range(self.items)] for _ in range(self.warps)]
            equal = [[[False] * 32 for _ in range(self.items)] for _ in range(self.warps)]
            index = {}
            for w, j, lane, p in self.positions():
                kind, i, key = self.token_at(c, p)
                index[(w, j, lane)] = i
                always[w][j][lane] = kind == 'always'
                above[w][j][lane] = kind == 'middle' and key > threshold
                equal[w][j][lane] = kind == 'middle' and key == threshold
            ranks, _ = self.place(equal, equal_before)
            selected = [[[always[w][j][l] or above[w][j][l] for l in range(32)]
                         for j in range(self.items)] for w in range(self.warps)]
            for rank, w, j, lane in ranks:
                if rank < need:
                    selected[w][j][lane] = True
            placed, _ = self.place(selected, out_before)
            for pos, w, j, lane in placed:
                self.put(pos, index[(w, j, lane)], sel_cap)

    def put(self, pos, value, sel_cap):
        if not 0 <= pos < sel_cap:
            raise Breach(f'sel[{pos}] outside the query head\'s {sel_cap} entries')
        if self.sel[pos] != -1:
            raise Breach(f'sel[{pos}] written twice ({self.sel[pos]}, then {value})')
        self.sel[pos] = value

    def run(self):
        self.init()
        for pss in range(3):
            self.hist(pss)
            self.pick(pss)
            if pss < 2:
                self.filter(pss)
        self.max_source = self.st[SOURCE] if not self.st[DECIDED] else 'decided'
        self.count()
        self.write()
        return self.sel[:self.sel_count], self.max_source


def reference(scores, k):
    """SPEC §6 for one query head: sink ∪ local ∪ top-k of the middle, ties to the lower index."""
    n = len(scores)
    if n - ALWAYS <= k:
        return list(range(n))
    middle = sorted(range(SINK, n - LOCAL), key=lambda i: (-order_key(scores[i]), i))[:k]
    return sorted(set(range(SINK)) | set(range(n - LOCAL, n)) | set(middle))


def f32(x):
    return struct.unpack('<f', struct.pack('<f', x))[0]


def families(rng):
    return {
        'uniform': lambda n, k, cand: [f32(rng.uniform(-10, 10)) for _ in range(n)],
        'gauss': lambda n, k, cand: [f32(rng.gauss(0, 1)) for _ in range(n)],
        'ints': lambda n, k, cand: [f32(rng.randint(-4, 4) * rng.choice([1.0, -1.0]))
                                    for _ in range(n)],
        'const': lambda n, k, cand: [1.5] * n,
        'offset': lambda n, k, cand: [f32(1000 + rng.uniform(-1, 1)) for _ in range(n)],
        'zeros': lambda n, k, cand: [rng.choice([0.0, -0.0, 0.0, 1.0]) for _ in range(n)],
        # Exactly `cand + d` middle tokens share the top digit of the k-th key, d in -1..1: the
        # switch after pass 0 at, and one past, the edge of the buffer.
        'edge': lambda n, k, cand: edge(rng, n, k, cand, rng.choice([-1, 0, 1])),
        'edge1': lambda n, k, cand: edge_after_pass_1(rng, n, k, cand, rng.choice([-1, 0, 1])),
    }


def edge(rng, n, k, cand, d):
    middle = max(0, n - ALWAYS)
    top = min(middle, cand + d)
    # 3.0 .. 3.5 share the top 11 key bits (sign, exponent, 2 mantissa bits); 1.0 is below them.
    s = [1.0] * n
    slots = list(range(SINK, n - LOCAL))
    rng.shuffle(slots)
    for i in slots[:top]:
        s[i] = f32(3.0 + rng.random() * 0.49)
    for i in list(range(min(SINK, n))) + list(range(max(0, n - LOCAL), n)):
        s[i] = 100.0
    return s


def edge_after_pass_1(rng, n, k, cand, d):
    """k-1 tokens above the k-th key's top digit, then `cand - (k-1) + d` (d in -1..1) sharing
    its first two digits and as many below them in its top digit: no switch after pass 0, and
    after pass 1 the tokens above the prefix (from both passes) decide whether the buffer is
    exactly full, one short or one over."""
    middle = max(0, n - ALWAYS)
    above = min(middle, max(0, k - 1))
    tied = min(middle - above, cand - above + d)
    below = min(middle - above - tied, cand)
    s = [1.0] * n
    slots = list(range(SINK, n - LOCAL))
    rng.shuffle(slots)
    for i in slots[:above]:
        s[i] = 50.0
    # 3.25 + less than 2^-12: one digit in passes 0 and 1 (key bits 10..31), distinct below.
    for i in slots[above:above + tied]:
        s[i] = f32(3.25 + rng.random() * 1e-4)
    for i in slots[above + tied:above + tied + below]:
        s[i] = 3.0
    return s


def check(scores, k, k_max, threads, items, max_tokens, rng, what):
    got, source = Select(scores, k, k_max, threads, items, max_tokens, rng).run()
    if got != reference(scores, min(k, k_max)):
        raise AssertionError(f'{what} (source {source}): selection differs')
    return source


def edge_sweep(rng):
    """The candidate buffer exactly full, one short and one over, after pass 0 and after pass 1,
    for every k from 1 to k_max: the switch must happen exactly when the tokens fit."""
    for k_max in [1, 4, 9]:
        cand = CANDIDATES_PER_K * k_max
        n = 2 * cand + ALWAYS + 5
        for k in range(1, k_max + 1):
            for d in [-1, 0, 1]:
                for threads, items in [(32, 1), (64, 3)]:
                    what = f'edge k_max={k_max} k={k} d={d} t={threads} i={items}'
                    source = check(edge(rng, n, k, cand, d), k, k_max, threads, items, n, rng, what)
                    assert source == (1 if d <= 0 else 2), f'{what}: source {source}'
                    what = 'edge after pass 1' + what[4:]
                    source = check(edge_after_pass_1(rng, n, k, cand, d), k, k_max, threads,
                                   items, n, rng, what)
                    assert source == (2 if d <= 0 else 0), f'{what}: source {source}'


def main():
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    rng = random.Random(int.from_bytes(b'fathom', 'little'))
    edge_sweep(rng)
    fam = families(rng)
    stats = {}
    for it in range(iterations):
        threads = rng.choice([32, 64, 128])
        items = rng.choice([1, 2, 3, 5, 8])
        k_max = rng.choice([1, 8, 64, 300])
        k = rng.choice([0, 1, k_max, rng.randint(0, k_max)])
        cand = CANDIDATES_PER_K * k_max
        name = rng.choice(sorted(fam))
        n = rng.choice([0, 3, 36, 37, 36 + k, 37 + k, 40, 300, 1000, 3000,
                        cand + ALWAYS + rng.randint(-2, 2), 2 * cand + ALWAYS + 3])
        n = max(0, n)
        scores = fam[name](n, k, cand)
        # The grid covers the longest sequence of the batch, often longer than this one.
        max_tokens = max(n, rng.choice([n, n + rng.randint(0, 3000)]))
        sel = Select(scores, k, k_max, threads, items, max_tokens, rng)
        got, source = sel.run()
        want = reference(scores, min(k, k_max))
        if got != want:
            raise AssertionError(f'iteration {it}: {name} n={n} k={k} k_max={k_max} '
                                 f't={threads} i={items} source={source}: selection differs')
        key = (name, str(source))
        stats[key] = stats.get(key, 0) + 1
    print('ok', iterations, 'cases; (family, source): count',
          sorted((a, b, c) for (a, b), c in stats.items()))


if __name__ == '__main__':
    main()
