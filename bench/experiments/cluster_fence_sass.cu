// The kernels of cluster_fence_sass.py: each stores to shared memory, synchronises the cluster
// one way, and loads a word of block 1's (or block 3's) shared memory through mapa.
#define EXCHANGE(name, sync)                                                                  \
    extern "C" __global__ void __cluster_dims__(8, 1, 1) name(unsigned* out, unsigned x) {    \
        __shared__ unsigned h[256];                                                           \
        h[threadIdx.x] = x + threadIdx.x;                                                     \
        asm volatile(sync ::: "memory");                                                      \
        const unsigned local = (unsigned)__cvta_generic_to_shared(&h[threadIdx.x]);           \
        unsigned remote, v;                                                                   \
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(1)); \
        asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(remote) : "memory");  \
        out[blockIdx.x * 256 + threadIdx.x] = v;                                              \
    }

EXCHANGE(k_release, "barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;")
EXCHANGE(k_default, "barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;")
EXCHANGE(k_relaxed, "barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;")
EXCHANGE(k_fence_cluster_relaxed,
         "fence.acq_rel.cluster;\n\tbarrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;")
EXCHANGE(k_fence_cta_relaxed, "fence.cta;\n\tbarrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;")

// The same exchange through an mbarrier of block 0, arrived at remotely with release.
extern "C" __global__ void __cluster_dims__(8, 1, 1) k_mbarrier(unsigned* out, unsigned x) {
    __shared__ unsigned h[256];
    __shared__ unsigned long long bar;
    const unsigned bar_local = (unsigned)__cvta_generic_to_shared(&bar);
    if (threadIdx.x == 0) asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar_local), "r"(256 * 8));
    asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
    h[threadIdx.x] = x + threadIdx.x;
    unsigned bar_remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(bar_remote) : "r"(bar_local), "r"(0));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(bar_remote) : "memory");
    if (blockIdx.x != 0) return;
    unsigned done = 0;
    while (!done)
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; "
            "selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(bar_local), "r"(0)
            : "memory");
    const unsigned local = (unsigned)__cvta_generic_to_shared(&h[threadIdx.x]);
    unsigned remote, v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(3));
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(remote) : "memory");
    out[threadIdx.x] = v;
}
