// The CUDA a generated kernel uses, on the CPU: every thread of a block is a fiber (ucontext) of
// one OS thread, switched only where CUDA threads wait for each other (__syncthreads and the
// warp collectives), in a seeded random order (half the blocks: one warp at a time from barrier
// to barrier, in a random order of warps). So a kernel that is race-free gives the outputs
// it gives on a GPU, and the checks here catch what a GPU would leave undefined: a barrier that
// not every thread reaches (or reaches at another call site), a warp collective whose mask does
// not hold the lanes that call it, lanes of one collective at different call sites, and a block
// whose threads all wait for something that can no longer happen. Shared memory is poisoned
// (0xff) before every block.
//
// Inline PTX has no meaning here: the header defines FATHOM_CPU_EMULATION, and each template
// helper that wraps an `asm` statement has a branch for it that calls the emulation of its
// instruction below (NVRTC never defines the macro, so the GPU code is the asm alone):
//   - cp.async (copy_async, commit_group, wait_group) with its asynchrony: a copy is recorded in
//     the thread's open group, commit_group closes the group, and wait_group N performs every
//     committed group of the thread but the newest N; only then does the copy write shared
//     memory, so a kernel that reads a copy's destination before waiting for it reads what was
//     there before (the poison, or an earlier step's data). A copy still pending when its thread
//     returns is an error;
//   - cvt between f32 and f16 (round to nearest even, as cvt.rn.f16.f32) and bf16;
//   - prmt.b32 (the generic form) and lop3.b32, as the PTX ISA defines them;
//   - mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32, a warp collective of the whole warp in
//     the PTX ISA's fragment layouts, accumulated in fp32 in k order (the hardware's order of the
//     sums differs, so results are compared within fp32 tolerances).
//   - thread-block clusters: an entry point declared with __cluster_dims__(N, 1, 1) runs N
//     blocks at once (launch's `cluster_blocks`, which the driver reads from the declaration),
//     each with its own shared memory (swapped into the section while it runs), from cluster
//     barrier to cluster barrier in a random order of blocks; barrier.cluster is cluster_sync
//     and mapa + ld.shared::cluster is cluster_shared, which fails on a read before the reader's
//     first cluster barrier, of a block that has exited, or outside the cluster.
// griddepcontrol (await_previous_kernel) is compiled only for __CUDA_ARCH__ >= 900, so here
// it is nothing; an `asm` statement without a branch does not compile.
//
// Include it before the kernel's source (which it compiles as C++17). Shared variables must be
// declared in non-template functions (GCC puts template statics outside the poisoned section).
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <vector>

struct dim3 {
    unsigned int x = 1, y = 1, z = 1;
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned int x, y;
};
inline uint2 make_uint2(unsigned int x, unsigned int y) { return uint2{x, y}; }
struct alignas(16) ulonglong2 {
    unsigned long long x, y;
};
inline ulonglong2 make_ulonglong2(unsigned long long x, unsigned long long y) { return ulonglong2{x, y}; }
struct alignas(16) uint4 {
    unsigned int x, y, z, w;
};
inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) {
    return uint4{x, y, z, w};
}
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

namespace fathom_cpu {

[[noreturn]] inline void fail(const char* what, int line) {
    std::fprintf(stderr, "cuda_host: %s (kernel source line %d)\n", what, line);
    std::exit(3);
}

enum class Op { Ballot, Shfl, ShflUp, ShflDown, ShflXor, MatchAny, ReduceAdd, ReduceMax, ReduceMaxSigned, Mma };

// The operands of one lane of an mma.sync (m16n8k16, f16 A and B, f32 C and D).
struct MmaFragments {
    unsigned int a[4] = {}, b[2] = {};
    float c[4] = {};
};

// One warp collective being gathered: the lanes of `mask` deposit their values.
struct Collective {
    unsigned int mask = 0, arrived = 0, departed = 0;
    Op op = Op::Ballot;
    int line = 0;
    bool complete = false;
    unsigned long long value[32] = {};
    int arg[32] = {};
    // Op::Mma: every lane's operands, and once the last lane has arrived its D fragment.
    std::unique_ptr<MmaFragments[]> mma;
    float d[32][4] = {};
};

// One cp.async copy: `bytes` from `global` to `shared`, performed when its group is waited for.
struct AsyncCopy {
    void* shared;
    const void* global;
    int bytes;
    int line;
};

enum class State { Run, Barrier, ClusterBarrier, Waiting, Done };

struct Fiber {
    ucontext_t ctx;
    std::unique_ptr<char[]> stack;
    dim3 idx;
    unsigned int lane = 0, warp = 0;
    State state = State::Run;
    int line = 0;             // the barrier's call site
    Collective* waiting = nullptr;
    // cp.async: the copies of the group not yet committed, and the committed groups not yet
    // waited for, oldest first.
    std::vector<AsyncCopy> open_copies;
    std::deque<std::vector<AsyncCopy>> committed_copies;
};

struct Block {
    std::vector<Fiber> fibers;
    std::vector<std::vector<Collective*>> pending;  // per warp
    ucontext_t scheduler;
    Fiber* current = nullptr;
    std::function<void()> body;
    // __syncthreads_count: the predicates of the threads at the barrier, and once it opens,
    // their sum (read by every thread before any can reach the next barrier).
    int barrier_count = 0, barrier_result = 0;
};

inline Block*& block() {
    static Block* b = nullptr;
    return b;
}
inline std::mt19937_64& rng() {
    static std::mt19937_64 r(1);
    return r;
}

inline dim3& grid_dim() {
    static dim3 d;
    return d;
}
inline dim3& block_dim() {
    static dim3 d;
    return d;
}
inline dim3& block_idx() {
    static dim3 d;
    return d;
}
inline const dim3& thread_idx() { return block()->current->idx; }

inline void yield() {
    Block* b = block();
    swapcontext(&b->current->ctx, &b->scheduler);
}

inline void syncthreads(int line) {
    Fiber* f = block()->current;
    f->state = State::Barrier;
    f->line = line;
    yield();
}

inline int syncthreads_count(int predicate, int line) {
    block()->barrier_count += predicate != 0;
    syncthreads(line);
    return block()->barrier_result;
}

// fp16 bits as a float (exact).
inline float f16_to_f32(unsigned short h) {
    const unsigned int sign = (unsigned int)(h & 0x8000u) << 16;
    const unsigned int exponent = (h >> 10) & 0x1fu;
    const unsigned int mantissa = h & 0x3ffu;
    unsigned int bits;
    if (exponent == 0x1fu) {
        bits = sign | 0x7f800000u | mantissa << 13;  // infinity, or NaN with its payload
    } else if (exponent != 0) {
        bits = sign | (exponent + 112u) << 23 | mantissa << 13;
    } else {
        float magnitude = std::ldexp((float)mantissa, -24);  // zero or subnormal: exact
        std::memcpy(&bits, &magnitude, 4);
        bits |= sign;
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// The integer m · 2^-shift rounded to nearest, ties to even (shift >= 1).
inline unsigned int round_shift_even(unsigned int m, unsigned int shift) {
    if (shift >= 32) return 0;
    const unsigned int q = m >> shift;
    const unsigned int rest = m & ((1u << shift) - 1u);
    const unsigned int half = 1u << (shift - 1);
    return q + (rest > half || (rest == half && (q & 1u)) ? 1u : 0u);
}

// cvt.rn.f16.f32: round to nearest even; overflow to infinity; NaN to the canonical 0x7fff.
inline unsigned short f32_to_f16(float f) {
    unsigned int x;
    std::memcpy(&x, &f, 4);
    const unsigned int sign = (x >> 16) & 0x8000u;
    const unsigned int ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return 0x7fff;
    if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // at or past 65520
    const unsigned int exponent = ax >> 23;
    const unsigned int mantissa = (ax & 0x7fffffu) | 0x800000u;
    if (exponent >= 113) {
        // Normal: exponent - 112 in 1..30; a mantissa that rounds up carries into the exponent.
        return (unsigned short)(sign | (((exponent - 112u) << 10) + round_shift_even(mantissa, 13) - 0x400u));
    }
    if (exponent == 0) return (unsigned short)sign;  // f32 zero or subnormal: below half of 2^-24
    // Subnormal (or zero) f16: the value · 2^24 = mantissa · 2^(exponent - 126), rounded.
    return (unsigned short)(sign | round_shift_even(mantissa, 126u - exponent));
}

// cvt.rn.bf16.f32: round to nearest even; NaN to the canonical 0x7fff.
inline unsigned short f32_to_bf16(float f) {
    unsigned int x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
    return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// prmt.b32 d, a, b, c in its generic form (no mode): byte i of d is byte c[4i+2:4i] of {b, a}
// (a holds bytes 0 to 3), or with c[4i+3] set that byte's sign bit replicated over all 8 bits.
inline unsigned int prmt(unsigned int a, unsigned int b, unsigned int c) {
    const unsigned long long source = (unsigned long long)b << 32 | a;
    unsigned int d = 0;
    for (int i = 0; i < 4; ++i) {
        const unsigned int select = (c >> (4 * i)) & 0xfu;
        unsigned int byte = (unsigned int)(source >> (8 * (select & 7u))) & 0xffu;
        if (select & 8u) byte = (byte & 0x80u) ? 0xffu : 0u;
        d |= byte << (8 * i);
    }
    return d;
}

// lop3.b32 d, a, b, c, lut: bit k of d is bit (a_k << 2 | b_k << 1 | c_k) of lut (the table
// whose lut is F(0xF0, 0xCC, 0xAA) for the function F of a, b, c).
inline unsigned int lop3(unsigned int a, unsigned int b, unsigned int c, unsigned int lut) {
    unsigned int d = 0;
    for (unsigned int m = 0; m < 8; ++m)
        if (lut >> m & 1u) d |= (m & 4u ? a : ~a) & (m & 2u ? b : ~b) & (m & 1u ? c : ~c);
    return d;
}

// D = A · B + C of one mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32, from the operands of
// the 32 lanes in the PTX ISA's fragment layouts (groupID = lane >> 2, threadID_in_group =
// lane % 4; "Matrix Fragments for mma.m16n8k16 with floating point type"):
//   A (16 × 16, f16 pairs in a[0..3], elements a0..a7 low half first): row groupID for a0, a1,
//     a4, a5 and groupID + 8 for the others; column 2·threadID_in_group + (i & 1), + 8 for
//     i >= 4;
//   B (16 × 8, b0..b3 in b[0..1]): row 2·threadID_in_group + (i & 1), + 8 for i >= 2; column
//     groupID;
//   C, D (16 × 8, c0..c3): row groupID for i < 2, groupID + 8 otherwise; column
//     2·threadID_in_group + (i & 1).
// A product of two fp16 is exact in fp32; the products are added to C one by one in k order,
// each sum rounded to fp32 (the tensor cores add them in another order).
inline void mma_m16n8k16(Collective& c) {
    float a[16][16], b[16][8], d[16][8];
    for (int lane = 0; lane < 32; ++lane) {
        const int group = lane >> 2, thread = lane % 4;
        const MmaFragments& f = c.mma[lane];
        for (int i = 0; i < 8; ++i) {
            const unsigned short h = (unsigned short)(f.a[i / 2] >> (16 * (i & 1)));
            const int row = (i < 2 || (i >= 4 && i < 6)) ? group : group + 8;
            const int col = thread * 2 + (i & 1) + (i >= 4 ? 8 : 0);
            a[row][col] = f16_to_f32(h);
        }
        for (int i = 0; i < 4; ++i) {
            const unsigned short h = (unsigned short)(f.b[i / 2] >> (16 * (i & 1)));
            const int row = thread * 2 + (i & 1) + (i >= 2 ? 8 : 0);
            b[row][group] = f16_to_f32(h);
        }
        for (int i = 0; i < 4; ++i) d[i < 2 ? group : group + 8][thread * 2 + (i & 1)] = f.c[i];
    }
    for (int row = 0; row < 16; ++row)
        for (int col = 0; col < 8; ++col) {
            float acc = d[row][col];
            for (int k = 0; k < 16; ++k) {
                const volatile float product = a[row][k] * b[k][col];  // exact
                acc = acc + product;
            }
            d[row][col] = acc;
        }
    for (int lane = 0; lane < 32; ++lane) {
        const int group = lane >> 2, thread = lane % 4;
        for (int i = 0; i < 4; ++i) c.d[lane][i] = d[i < 2 ? group : group + 8][thread * 2 + (i & 1)];
    }
}

// Joins the warp collective `op` of the lanes of `mask` at call site `line`: `deposit(c, lane)`
// stores the lane's operands; returns once every lane of the mask has joined (the last one to
// arrive computes an mma for all).
template <class Deposit>
inline Collective* join(Op op, unsigned int mask, int line, Deposit deposit) {
    Block* b = block();
    Fiber* f = b->current;
    const unsigned int bit = 1u << f->lane;
    if (!(mask & bit)) fail("a lane calls a warp collective whose mask leaves it out", line);
    std::vector<Collective*>& pending = b->pending[f->warp];
    Collective* c = nullptr;
    for (Collective* p : pending)
        if (!p->complete && p->mask == mask) c = p;
    if (c == nullptr) {
        c = new Collective();
        c->mask = mask;
        c->op = op;
        c->line = line;
        if (op == Op::Mma) c->mma.reset(new MmaFragments[32]);
        pending.push_back(c);
    }
    if (c->op != op || c->line != line) fail("lanes of one warp collective at different call sites", line);
    if (c->arrived & bit) fail("a lane joins one warp collective twice", line);
    deposit(*c, f->lane);
    c->arrived |= bit;
    if (c->arrived == mask) {
        if (op == Op::Mma) mma_m16n8k16(*c);
        c->complete = true;
    }
    f->state = State::Waiting;
    f->waiting = c;
    while (!c->complete) yield();
    f->state = State::Run;
    f->waiting = nullptr;
    return c;
}

// The lane leaves collective `c` (joined and complete); the last one frees it.
inline void leave(Collective* c) {
    Block* b = block();
    Fiber* f = b->current;
    c->departed |= 1u << f->lane;
    if (c->departed == c->mask) {
        std::vector<Collective*>& pending = b->pending[f->warp];
        pending.erase(std::find(pending.begin(), pending.end(), c));
        delete c;
    }
}

inline unsigned long long collective(Op op, unsigned int mask, unsigned long long value, int arg,
                                     int line) {
    Collective* c = join(op, mask, line, [&](Collective& c, unsigned int lane) {
        c.value[lane] = value;
        c.arg[lane] = arg;
    });
    unsigned long long result = 0;
    const unsigned int lane = block()->current->lane;
    auto from = [&](int src) {
        if (src < 0 || src > 31 || !(mask & (1u << src))) fail("a shuffle reads a lane outside the mask", line);
        return c->value[src];
    };
    switch (op) {
    case Op::Ballot:
        for (int l = 0; l < 32; ++l)
            if ((mask >> l & 1u) && c->value[l] != 0) result |= 1ull << l;
        break;
    case Op::Shfl: result = from(c->arg[lane]); break;
    case Op::ShflUp: result = (int)lane - c->arg[lane] >= 0 ? from((int)lane - c->arg[lane]) : value; break;
    case Op::ShflDown: result = (int)lane + c->arg[lane] < 32 ? from((int)lane + c->arg[lane]) : value; break;
    case Op::ShflXor: result = from((int)(lane ^ (unsigned int)c->arg[lane])); break;
    case Op::MatchAny:
        for (int l = 0; l < 32; ++l)
            if ((mask >> l & 1u) && c->value[l] == value) result |= 1ull << l;
        break;
    case Op::ReduceAdd:
        for (int l = 0; l < 32; ++l)
            if (mask >> l & 1u) result = (unsigned int)(result + c->value[l]);
        break;
    case Op::ReduceMax:
        for (int l = 0; l < 32; ++l)
            if (mask >> l & 1u) result = std::max(result, c->value[l] & 0xffffffffull);
        break;
    case Op::ReduceMaxSigned: {
        int best = INT32_MIN;
        for (int l = 0; l < 32; ++l)
            if (mask >> l & 1u) best = std::max(best, (int)(unsigned int)c->value[l]);
        result = (unsigned int)best;
        break;
    }
    case Op::Mma: fail("an mma joined as a value collective", line);
    }
    leave(c);
    return result;
}

// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {acc} = {a} · {b0, b1} + {acc}: a collective
// of the whole warp (`mma_m16n8k16` says how the fragments are laid out).
inline void mma_sync_m16n8k16(float (&acc)[4], const unsigned int (&a)[4], unsigned int b0, unsigned int b1,
                              int line) {
    Collective* c = join(Op::Mma, 0xffffffffu, line, [&](Collective& c, unsigned int lane) {
        MmaFragments& f = c.mma[lane];
        for (int i = 0; i < 4; ++i) f.a[i] = a[i];
        f.b[0] = b0;
        f.b[1] = b1;
        for (int i = 0; i < 4; ++i) f.c[i] = acc[i];
    });
    const unsigned int lane = block()->current->lane;
    for (int i = 0; i < 4; ++i) acc[i] = c->d[lane][i];
    leave(c);
}

extern "C" char __start_fathom_shared[] __attribute__((weak));
extern "C" char __stop_fathom_shared[] __attribute__((weak));

// cvta.to.shared: the offset of a generic pointer into the block's shared memory.
inline unsigned int shared_offset(const void* p, int line) {
    const char* c = static_cast<const char*>(p);
    if (__start_fathom_shared == nullptr || c < __start_fathom_shared || c >= __stop_fathom_shared)
        fail("__cvta_generic_to_shared of a pointer outside shared memory", line);
    return (unsigned int)(c - __start_fathom_shared);
}

// cp.async.{ca,cg}.shared.global [shared], [global], bytes: recorded in the thread's open group,
// performed by the wait_group that completes that group.
inline void copy_async(unsigned int shared, const void* global, int bytes, int line) {
    if (bytes != 4 && bytes != 8 && bytes != 16) fail("cp.async copies 4, 8 or 16 bytes", line);
    if (__start_fathom_shared == nullptr || shared + (unsigned int)bytes > (unsigned int)(__stop_fathom_shared - __start_fathom_shared))
        fail("cp.async to an address past shared memory", line);
    const char* g = static_cast<const char*>(global);
    if (g + bytes > __start_fathom_shared && g < __stop_fathom_shared) fail("cp.async from shared memory", line);
    if (shared % (unsigned int)bytes != 0 || reinterpret_cast<uintptr_t>(global) % (uintptr_t)bytes != 0)
        fail("cp.async with an address not aligned to its size", line);
    block()->current->open_copies.push_back(AsyncCopy{__start_fathom_shared + shared, global, bytes, line});
}

// cp.async.commit_group: the open copies (perhaps none) become the thread's newest group.
inline void commit_group() {
    Fiber* f = block()->current;
    f->committed_copies.push_back(std::move(f->open_copies));
    f->open_copies.clear();
}

// cp.async.wait_group n: performs the thread's committed groups, oldest first, until at most
// the newest n remain (copies not yet committed stay pending).
inline void wait_group(int n) {
    Fiber* f = block()->current;
    while (f->committed_copies.size() > (size_t)n) {
        for (const AsyncCopy& c : f->committed_copies.front()) std::memcpy(c.shared, c.global, (size_t)c.bytes);
        f->committed_copies.pop_front();
    }
}

// Fails when the current thread has a cp.async copy that no wait_group has performed.
inline void check_no_pending_copies() {
    Fiber* f = block()->current;
    const AsyncCopy* pending = f->open_copies.empty() ? nullptr : &f->open_copies.front();
    for (const auto& group : f->committed_copies)
        if (pending == nullptr && !group.empty()) pending = &group.front();
    if (pending != nullptr) fail("a thread returned with a cp.async copy not waited for", pending->line);
}

inline void trampoline() {
    Block* b = block();
    b->body();
    check_no_pending_copies();
    b->current->state = State::Done;
    swapcontext(&b->current->ctx, &b->scheduler);
}

// The blocks of the thread-block cluster being run (one, unless the kernel declares
// __cluster_dims__): each keeps its shared memory in `image` while another runs in the section.
struct Cluster {
    std::vector<std::unique_ptr<Block>> blocks;
    std::vector<std::vector<char>> image;
    std::vector<unsigned int> barriers_passed;  // barrier.cluster each block has passed
    unsigned int running = 0;                   // the block whose memory is in the section
};

inline Cluster*& cluster() {
    static Cluster* c = nullptr;
    return c;
}

inline size_t shared_bytes() {
    return __start_fathom_shared == nullptr ? 0 : (size_t)(__stop_fathom_shared - __start_fathom_shared);
}

// barrier.cluster.arrive + wait: every thread of every block of the cluster.
inline void cluster_sync(int line) {
    Fiber* f = block()->current;
    f->state = State::ClusterBarrier;
    f->line = line;
    yield();
}

// mapa + ld.shared::cluster: where `p`, a shared variable, lies in block `rank` of the cluster.
// A GPU leaves undefined a read of a block that may not have started (before the reader's first
// cluster barrier) or that has exited; both fail here.
template <class T>
inline const T* cluster_shared(const T* p, int rank, int line) {
    Cluster* c = cluster();
    const char* at = reinterpret_cast<const char*>(p);
    if (__start_fathom_shared == nullptr || at < __start_fathom_shared || at + sizeof(T) > __stop_fathom_shared)
        fail("distributed shared memory: a pointer outside shared memory", line);
    if (rank < 0 || (size_t)rank >= c->blocks.size()) fail("distributed shared memory: a rank outside the cluster", line);
    if (reinterpret_cast<uintptr_t>(p) % alignof(T) != 0) fail("distributed shared memory: a misaligned load", line);
    if (c->barriers_passed[c->running] == 0)
        fail("distributed shared memory read before the cluster's first barrier (its block may not have started)", line);
    if ((unsigned int)rank == c->running) return p;
    for (const Fiber& f : c->blocks[(size_t)rank]->fibers)
        if (f.state == State::Done) fail("distributed shared memory of a block that has exited", line);
    return reinterpret_cast<const T*>(c->image[(size_t)rank].data() + (at - __start_fathom_shared));
}

// Runs the block's fibers until none can run (all returned, or waiting at a cluster barrier, or
// for what cannot happen), opening its __syncthreads barriers on the way. Returns whether any
// fiber ran.
inline bool run_block(Block& b, bool warp_serial) {
    const unsigned int threads = (unsigned int)b.fibers.size();
    const unsigned int warps = threads / 32;
    std::vector<unsigned int> order(threads), warp_order(warps);
    for (unsigned int t = 0; t < threads; ++t) order[t] = t;
    for (unsigned int w = 0; w < warps; ++w) warp_order[w] = w;
    auto runnable = [&](const Fiber& f) {
        return f.state == State::Run || (f.state == State::Waiting && f.waiting->complete);
    };
    auto run_one = [&](Fiber& f) {
        b.current = &f;
        swapcontext(&b.scheduler, &f.ctx);
    };
    bool any = false;
    for (;;) {
        bool ran = false;
        if (warp_serial) {
            std::shuffle(warp_order.begin(), warp_order.end(), rng());
            for (unsigned int w : warp_order) {
                for (bool again = true; again;) {
                    again = false;
                    std::shuffle(order.begin() + w * 32, order.begin() + w * 32 + 32, rng());
                    for (unsigned int i = w * 32; i < w * 32 + 32; ++i) {
                        Fiber& f = b.fibers[order[i]];
                        if (!runnable(f)) continue;
                        run_one(f);
                        ran = again = true;
                    }
                }
            }
        } else {
            std::shuffle(order.begin(), order.end(), rng());
            for (unsigned int t : order) {
                Fiber& f = b.fibers[t];
                if (!runnable(f)) continue;
                run_one(f);
                ran = true;
            }
        }
        any = any || ran;
        unsigned int done = 0, at_barrier = 0;
        int line = -1;
        for (Fiber& f : b.fibers) {
            done += f.state == State::Done;
            if (f.state == State::Barrier) {
                if (at_barrier > 0 && f.line != line) fail("threads wait at two different __syncthreads", f.line);
                line = f.line;
                ++at_barrier;
            }
        }
        if (at_barrier > 0 && at_barrier + done == threads) {
            if (done > 0) fail("some threads returned while others wait at __syncthreads", line);
            for (Fiber& f : b.fibers) f.state = State::Run;
            b.barrier_result = b.barrier_count;
            b.barrier_count = 0;
            continue;
        }
        if (!ran) return any;
    }
}

// Runs `body` as every thread of every block of the grid: block after block, or with `cluster`
// blocks (consecutive in x) at once, each run from cluster barrier to cluster barrier in a
// random order of blocks with its own shared memory.
inline void launch(dim3 grid, dim3 threads, unsigned int cluster_blocks, const std::function<void()>& body) {
    if (threads.y != 1 || threads.z != 1) fail("only 1-D blocks", 0);
    if (threads.x % 32 != 0 || threads.x == 0 || threads.x > 1024) fail("threads: whole warps up to 1024", 0);
    if (cluster_blocks == 0 || cluster_blocks > 8 || grid.x % cluster_blocks != 0)
        fail("a cluster of 1 to 8 blocks in x that divides the grid's x", 0);
    grid_dim() = grid;
    block_dim() = threads;
    Cluster c;
    cluster() = &c;
    const size_t bytes = shared_bytes();
    c.image.assign(cluster_blocks, std::vector<char>(bytes));
    c.barriers_passed.assign(cluster_blocks, 0);
    constexpr size_t STACK = 64 * 1024;
    for (unsigned int r = 0; r < cluster_blocks; ++r) {
        c.blocks.emplace_back(new Block);
        Block& b = *c.blocks.back();
        b.body = body;
        b.fibers.resize(threads.x);
        for (unsigned int t = 0; t < threads.x; ++t) b.fibers[t].stack.reset(new char[STACK]);
        b.pending.resize(threads.x / 32);
    }
    auto enter = [&](unsigned int r, unsigned int x, unsigned int y, unsigned int z) {
        block() = c.blocks[r].get();
        block_idx() = dim3{x, y, z};
        c.running = r;
        if (cluster_blocks > 1 && bytes > 0) std::memcpy(__start_fathom_shared, c.image[r].data(), bytes);
    };
    auto leave_block = [&](unsigned int r) {
        if (cluster_blocks > 1 && bytes > 0) std::memcpy(c.image[r].data(), __start_fathom_shared, bytes);
    };
    std::vector<bool> warp_serial(cluster_blocks);
    std::vector<unsigned int> block_order(cluster_blocks);
    for (unsigned int z = 0; z < grid.z; ++z)
        for (unsigned int y = 0; y < grid.y; ++y)
            for (unsigned int x0 = 0; x0 < grid.x; x0 += cluster_blocks) {
                for (unsigned int r = 0; r < cluster_blocks; ++r) {
                    Block& b = *c.blocks[r];
                    std::memset(c.image[r].data(), 0xff, bytes);
                    if (bytes > 0) std::memset(__start_fathom_shared, 0xff, bytes);
                    for (unsigned int t = 0; t < threads.x; ++t) {
                        Fiber& f = b.fibers[t];
                        f.idx = dim3{t, 0, 0};
                        f.lane = t % 32;
                        f.warp = t / 32;
                        f.state = State::Run;
                        f.waiting = nullptr;
                        f.open_copies.clear();
                        f.committed_copies.clear();
                        getcontext(&f.ctx);
                        f.ctx.uc_stack.ss_sp = f.stack.get();
                        f.ctx.uc_stack.ss_size = STACK;
                        f.ctx.uc_link = nullptr;
                        makecontext(&f.ctx, trampoline, 0);
                    }
                    c.barriers_passed[r] = 0;
                    // Half the blocks run their warps one at a time from barrier to barrier, in
                    // a random order of warps: a warp then reads what another warp wrote before
                    // the last barrier only after that warp has run on to the next one, which
                    // catches a shared word rewritten without a barrier between the reads and
                    // the write. The other half interleave every thread.
                    warp_serial[r] = rng()() % 2 == 0;
                    block_order[r] = r;
                }
                for (;;) {
                    bool ran = false;
                    std::shuffle(block_order.begin(), block_order.end(), rng());
                    for (unsigned int r : block_order) {
                        enter(r, x0 + r, y, z);
                        ran = run_block(*c.blocks[r], warp_serial[r]) || ran;
                        leave_block(r);
                    }
                    unsigned int done = 0, at_barrier = 0, total = 0;
                    int line = -1, waiting_line = -1;
                    for (auto& b : c.blocks)
                        for (Fiber& f : b->fibers) {
                            ++total;
                            done += f.state == State::Done;
                            if (f.state != State::Done) waiting_line = f.line;
                            if (f.state == State::ClusterBarrier) {
                                if (at_barrier > 0 && f.line != line)
                                    fail("threads wait at two different cluster barriers", f.line);
                                line = f.line;
                                ++at_barrier;
                            }
                        }
                    if (done == total) break;
                    if (at_barrier > 0 && at_barrier + done == total) {
                        if (done > 0) fail("some threads returned while others wait at a cluster barrier", line);
                        for (unsigned int r = 0; r < cluster_blocks; ++r) {
                            for (Fiber& f : c.blocks[r]->fibers) f.state = State::Run;
                            ++c.barriers_passed[r];
                        }
                        continue;
                    }
                    if (!ran) fail("every thread waits for something that cannot happen", waiting_line);
                }
                for (auto& b : c.blocks)
                    for (auto& p : b->pending)
                        if (!p.empty()) fail("a warp collective was left incomplete", p.front()->line);
            }
    block() = nullptr;
    cluster() = nullptr;
}

inline void seed(unsigned long long s) { rng().seed(s); }

}  // namespace fathom_cpu

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __cluster_dims__(...)
#define __shared__ __attribute__((section("fathom_shared"))) static
#define threadIdx (fathom_cpu::thread_idx())
#define blockIdx (fathom_cpu::block_idx())
#define blockDim (fathom_cpu::block_dim())
#define gridDim (fathom_cpu::grid_dim())
#define __syncthreads() fathom_cpu::syncthreads(__LINE__)
#define __syncthreads_count(pred) fathom_cpu::syncthreads_count((pred), __LINE__)
#define __ballot_sync(mask, pred) \
    ((unsigned int)fathom_cpu::collective(fathom_cpu::Op::Ballot, (mask), (pred) ? 1 : 0, 0, __LINE__))
#define __match_any_sync(mask, v) \
    ((unsigned int)fathom_cpu::collective(fathom_cpu::Op::MatchAny, (mask), (v), 0, __LINE__))
#define __reduce_add_sync(mask, v) \
    ((unsigned int)fathom_cpu::collective(fathom_cpu::Op::ReduceAdd, (mask), (unsigned int)(v), 0, __LINE__))
#define __shfl_sync(mask, v, src) \
    fathom_cpu::shfl(fathom_cpu::Op::Shfl, (mask), (v), (src), __LINE__)
#define __shfl_up_sync(mask, v, d) \
    fathom_cpu::shfl(fathom_cpu::Op::ShflUp, (mask), (v), (d), __LINE__)
#define __shfl_down_sync(mask, v, d) \
    fathom_cpu::shfl(fathom_cpu::Op::ShflDown, (mask), (v), (d), __LINE__)
#define __shfl_xor_sync(mask, v, m) \
    fathom_cpu::shfl(fathom_cpu::Op::ShflXor, (mask), (v), (m), __LINE__)
#define __reduce_max_sync(mask, v) fathom_cpu::reduce_max((mask), (v), __LINE__)
#define __align__(n) __attribute__((aligned(n)))
#define __cvta_generic_to_shared(p) ((size_t)fathom_cpu::shared_offset((p), __LINE__))
// The templates' helpers of inline PTX call the emulation of their instruction instead.
#define FATHOM_CPU_EMULATION 1

namespace fathom_cpu {
inline unsigned int reduce_max(unsigned int mask, unsigned int v, int line) {
    return (unsigned int)collective(Op::ReduceMax, mask, v, 0, line);
}
inline int reduce_max(unsigned int mask, int v, int line) {
    return (int)(unsigned int)collective(Op::ReduceMaxSigned, mask, (unsigned int)v, 0, line);
}
template <class T>
inline T shfl(Op op, unsigned int mask, T v, int arg, int line) {
    static_assert(sizeof(T) <= 8, "a shuffled value fits 64 bits");
    unsigned long long bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    const unsigned long long r = collective(op, mask, bits, arg, line);
    T out;
    std::memcpy(&out, &r, sizeof(T));
    return out;
}
}  // namespace fathom_cpu

inline void __threadfence() {}
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __ffs(unsigned int x) { return __builtin_ffs((int)x); }
inline int __clz(unsigned int x) { return x == 0 ? 32 : __builtin_clz(x); }
inline unsigned int __brev(unsigned int x) {
    unsigned int r = 0;
    for (int i = 0; i < 32; ++i) r |= (x >> i & 1u) << (31 - i);
    return r;
}
// hi:lo shifted right by shift % 32, the low word.
inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int shift) {
    return (unsigned int)((((unsigned long long)hi << 32) | lo) >> (shift & 31u));
}
// hi:lo shifted left by shift % 32, the high word.
inline unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int shift) {
    return (unsigned int)(((((unsigned long long)hi << 32) | lo) << (shift & 31u)) >> 32);
}
// Byte i of the result is byte s[4i+2:4i] of y:x (prmt without the sign replication).
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
    return fathom_cpu::prmt(x, y, s & 0x7777u);
}
inline float __int_as_float(int i) {
    float f;
    std::memcpy(&f, &i, 4);
    return f;
}
inline int __float_as_int(float f) {
    int i;
    std::memcpy(&i, &f, 4);
    return i;
}
inline unsigned int __float_as_uint(float f) {
    unsigned int u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float __uint_as_float(unsigned int u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
// A GPU faults on a load that is not aligned to its size; so does this.
template <class T>
inline T __ldg(const T* p) {
    if (reinterpret_cast<uintptr_t>(p) % alignof(T) != 0) fathom_cpu::fail("misaligned load", 0);
    return *p;
}
// The load from L2 of what other blocks wrote during the kernel: here blocks run one after
// another, so any load sees every earlier write.
template <class T>
inline T __ldcg(const T* p) {
    return __ldg(p);
}
// The streaming load of mapped host memory: only a cache hint on a GPU.
template <class T>
inline T __ldcs(const T* p) {
    return __ldg(p);
}
// The streaming store: only a cache hint on a GPU. It faults on a misaligned address there too.
template <class T>
inline void __stcs(T* p, T v) {
    if (reinterpret_cast<uintptr_t>(p) % alignof(T) != 0) fathom_cpu::fail("misaligned store", 0);
    *p = v;
}
inline long long __double_as_longlong(double d) {
    long long v;
    std::memcpy(&v, &d, 8);
    return v;
}
inline double __longlong_as_double(long long v) {
    double d;
    std::memcpy(&d, &v, 8);
    return d;
}
// The f64 operations of the ParisKV kernels, each rounded once (x86-64 has no fused
// multiply-add in its baseline, so nothing is contracted).
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline unsigned int atomicAdd(unsigned int* p, unsigned int v) {
    const unsigned int old = *p;
    *p = old + v;
    return old;
}
inline int atomicAdd(int* p, int v) {
    const int old = *p;
    *p = old + v;
    return old;
}
inline int atomicCAS(int* p, int compare, int v) {
    const int old = *p;
    if (old == compare) *p = v;
    return old;
}
inline unsigned int atomicMax(unsigned int* p, unsigned int v) {
    const unsigned int old = *p;
    *p = old > v ? old : v;
    return old;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
