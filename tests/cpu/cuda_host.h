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

enum class Op { Ballot, Shfl, ShflUp, ShflDown, ShflXor, MatchAny, ReduceAdd };

// One warp collective being gathered: the lanes of `mask` deposit their values.
struct Collective {
    unsigned int mask = 0, arrived = 0, departed = 0;
    Op op = Op::Ballot;
    int line = 0;
    bool complete = false;
    unsigned long long value[32] = {};
    int arg[32] = {};
};

enum class State { Run, Barrier, Waiting, Done };

struct Fiber {
    ucontext_t ctx;
    std::unique_ptr<char[]> stack;
    dim3 idx;
    unsigned int lane = 0, warp = 0;
    State state = State::Run;
    int line = 0;             // the barrier's call site
    Collective* waiting = nullptr;
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

inline unsigned long long collective(Op op, unsigned int mask, unsigned long long value, int arg,
                                     int line) {
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
        pending.push_back(c);
    }
    if (c->op != op || c->line != line) fail("lanes of one warp collective at different call sites", line);
    if (c->arrived & bit) fail("a lane joins one warp collective twice", line);
    c->value[f->lane] = value;
    c->arg[f->lane] = arg;
    c->arrived |= bit;
    if (c->arrived == mask) c->complete = true;
    f->state = State::Waiting;
    f->waiting = c;
    while (!c->complete) yield();
    f->state = State::Run;
    f->waiting = nullptr;
    unsigned long long result = 0;
    const unsigned int lane = f->lane;
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
    }
    c->departed |= bit;
    if (c->departed == mask) {
        pending.erase(std::find(pending.begin(), pending.end(), c));
        delete c;
    }
    return result;
}

inline void trampoline() {
    Block* b = block();
    b->body();
    b->current->state = State::Done;
    swapcontext(&b->current->ctx, &b->scheduler);
}

extern "C" char __start_fathom_shared[] __attribute__((weak));
extern "C" char __stop_fathom_shared[] __attribute__((weak));

// Runs `body` as every thread of every block of the grid, block after block.
inline void launch(dim3 grid, dim3 threads, const std::function<void()>& body) {
    if (threads.y != 1 || threads.z != 1) fail("only 1-D blocks", 0);
    if (threads.x % 32 != 0 || threads.x == 0 || threads.x > 1024) fail("threads: whole warps up to 1024", 0);
    grid_dim() = grid;
    block_dim() = threads;
    Block b;
    block() = &b;
    b.body = body;
    b.fibers.resize(threads.x);
    constexpr size_t STACK = 64 * 1024;
    for (unsigned int t = 0; t < threads.x; ++t) b.fibers[t].stack.reset(new char[STACK]);
    b.pending.resize(threads.x / 32);
    std::vector<unsigned int> order(threads.x);
    for (unsigned int z = 0; z < grid.z; ++z)
        for (unsigned int y = 0; y < grid.y; ++y)
            for (unsigned int x = 0; x < grid.x; ++x) {
                block_idx() = dim3{x, y, z};
                if (__start_fathom_shared != nullptr)
                    std::memset(__start_fathom_shared, 0xff, __stop_fathom_shared - __start_fathom_shared);
                for (unsigned int t = 0; t < threads.x; ++t) {
                    Fiber& f = b.fibers[t];
                    f.idx = dim3{t, 0, 0};
                    f.lane = t % 32;
                    f.warp = t / 32;
                    f.state = State::Run;
                    f.waiting = nullptr;
                    getcontext(&f.ctx);
                    f.ctx.uc_stack.ss_sp = f.stack.get();
                    f.ctx.uc_stack.ss_size = STACK;
                    f.ctx.uc_link = nullptr;
                    makecontext(&f.ctx, trampoline, 0);
                    order[t] = t;
                }
                // Half the blocks run their warps one at a time from barrier to barrier, in a
                // random order of warps: a warp then reads what another warp wrote before the
                // last barrier only after that warp has run on to the next one, which catches a
                // shared word rewritten without a barrier between the reads and the write. The
                // other half interleave every thread.
                const bool warp_serial = rng()() % 2 == 0;
                const unsigned int warps = threads.x / 32;
                std::vector<unsigned int> warp_order(warps);
                for (unsigned int w = 0; w < warps; ++w) warp_order[w] = w;
                auto runnable = [&](const Fiber& f) {
                    return f.state == State::Run || (f.state == State::Waiting && f.waiting->complete);
                };
                auto run_one = [&](Fiber& f) {
                    b.current = &f;
                    swapcontext(&b.scheduler, &f.ctx);
                };
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
                    unsigned int done = 0, at_barrier = 0;
                    int line = -1;
                    for (Fiber& f : b.fibers) {
                        done += f.state == State::Done;
                        if (f.state == State::Barrier) {
                            if (at_barrier > 0 && f.line != line)
                                fail("threads wait at two different __syncthreads", f.line);
                            line = f.line;
                            ++at_barrier;
                        }
                    }
                    if (done == threads.x) break;
                    if (at_barrier + done == threads.x) {
                        if (done > 0) fail("some threads returned while others wait at __syncthreads", line);
                        for (Fiber& f : b.fibers) f.state = State::Run;
                        b.barrier_result = b.barrier_count;
                        b.barrier_count = 0;
                        continue;
                    }
                    if (!ran) fail("every thread waits for something that cannot happen", line);
                }
                for (auto& p : b.pending)
                    if (!p.empty()) fail("a warp collective was left incomplete", p.front()->line);
            }
    block() = nullptr;
}

inline void seed(unsigned long long s) { rng().seed(s); }

}  // namespace fathom_cpu

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
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
// The inline PTX of common.cuh (fp16 conversions) has no meaning here; no select kernel uses it.
#define asm(...) ((void)0)

namespace fathom_cpu {
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
inline long long __double_as_longlong(double d) {
    long long v;
    std::memcpy(&v, &d, 8);
    return v;
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
