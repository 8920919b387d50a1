// host_fetch_tlb.cu: why the fetch of the union's K/V rows from mapped host memory falls from
// ~50 GB/s at 128k tokens to ~10 GB/s at 1M (issue #15, item 2), and what allocation fixes it.
//
// The fetch reads G*k + 36 scattered 256-byte rows (D = 128, bf16) of K and of V per KV head out
// of a layer's row region, [K: H][cap][D] | [V: H][cap][D]: 2 GiB per layer at 1M tokens. The
// suspicion is GPU TLB reach: host memory mapped with small GPU pages makes nearly every
// scattered row a TLB miss once the region outgrows what the TLBs cover. This program measures
// the same access pattern over
//   allocation  cudaHostAlloc (mapped; what the store does today)
//               mmap + madvise(MADV_HUGEPAGE) + cudaHostRegister (mapped)
//               mmap(MAP_HUGETLB) + cudaHostRegister (if the kernel has huge pages reserved)
//               cuMemCreate on the host (HOST_NUMA, then HOST) + cuMemMap + cuMemSetAccess
//   span        32k, 128k, 256k, 1M, 2M tokens of one layer's 8 KV heads
//   layout      separate K and V regions; K and V of one token adjacent (512 B)
//   kernel      today's fetch shape (64 threads, 4 row pairs in flight per warp, grid sized by
//               the union's capacity); deeper warps (128 threads, 8 or 16 row pairs per warp)
// with 548 random distinct sorted rows per KV head (4,384 per layer: k = 512, G = 4), a fresh
// row set for every run (so no run finds the previous run's translations), the L2 overwritten
// before every run outside the timed window, warm-up, and the median of 25 runs timed with
// CUDA events. Every configuration's output is poisoned first and checked against the values
// the source holds (a function of head, token, K/V and position, also read back through a host
// copy of a few rows). It also times one large pinned copy (the link's rate) and a coalesced
// read of 256 MiB through each allocation (the scan's access pattern, which must not get worse).
//
// Build and run on the GPU machine (about 30-60 s; the largest allocation is 8 GiB):
//   nvcc -O3 -arch=sm_90 bench/experiments/host_fetch_tlb.cu -o /tmp/f -lcuda
//   /tmp/f [out.json]           (default host_fetch_tlb.json)
// It prints one table (µs, GB/s per configuration) and writes every figure to the JSON.
#include <cuda.h>
#include <cuda_runtime.h>

#include <errno.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int H = 8;                    // KV heads of one layer (qwen3-8b)
constexpr int D = 128;                  // head dimension
constexpr int ROW_BYTES = D * 2;        // one bf16 row
constexpr int UNITS = ROW_BYTES / 16;   // 16-byte units per row
constexpr int ROWS_PER_HEAD = 548;      // the measured union per KV head at k = 512, G = 4, 1M
constexpr int UNION_CAP = 4 * 512 + 36; // G*k + 36: what today's launch sizes its grid by
constexpr int WARMUP = 3;
constexpr int REPS = 25;
constexpr int SETS = WARMUP + REPS + 1; // a fresh row set per run, the last for the check
constexpr size_t FLUSH_BYTES = 256u << 20;
constexpr size_t STREAM_BYTES = 256u << 20;
constexpr size_t COPY_BYTES = 1u << 30;
const long SPANS[] = {32L << 10, 128L << 10, 256L << 10, 1L << 20, 2L << 20};
constexpr long MAX_SPAN = 2L << 20;
constexpr size_t REGION_BYTES = size_t(2) * H * MAX_SPAN * ROW_BYTES; // 8 GiB

#define CK(call)                                                                        \
    do {                                                                                \
        cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess) {                                                        \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,        \
                    cudaGetErrorString(e_));                                            \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

#define CU(call)                                                                        \
    do {                                                                                \
        CUresult r_ = (call);                                                           \
        if (r_ != CUDA_SUCCESS) {                                                       \
            const char* s_ = nullptr;                                                   \
            cuGetErrorString(r_, &s_);                                                  \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,        \
                    s_ ? s_ : "?");                                                     \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

std::string cu_error(const char* call, CUresult r) {
    const char* s = nullptr;
    cuGetErrorString(r, &s);
    return std::string(call) + ": " + (s ? s : "unknown error");
}

// The value word w of 16-byte unit u of the K (kv = 0) or V (kv = 1) row of token t of head h.
__host__ __device__ inline uint32_t pattern(uint32_t h, uint32_t t, uint32_t kv, uint32_t u,
                                            uint32_t w) {
    uint32_t x = (h * 0x9e3779b9u) ^ (t * 0x85ebca6bu) ^ (kv * 0xc2b2ae35u) ^
                 (u * 0x27d4eb2fu) ^ (w * 0x165667b1u);
    x ^= x >> 15;
    x *= 0x2c1b3c6du;
    x ^= x >> 12;
    return x;
}

// Unit index (in uint4) of unit u of the K or V row of (h, t) in a region of capacity cap.
__host__ __device__ inline size_t unit_index(bool adjacent, long cap, int h, long t, int kv,
                                             int u) {
    if (adjacent) return ((size_t(h) * cap + t) * 2 + kv) * UNITS + u;
    return ((size_t(kv) * H + h) * cap + t) * UNITS + u;
}

// Writes every row of a region of capacity cap in the layout (grid-stride over all units).
__global__ void fill(uint4* region, long cap, bool adjacent) {
    const size_t total = size_t(2) * H * cap * UNITS;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total;
         i += size_t(gridDim.x) * blockDim.x) {
        // Invert unit_index.
        const int u = int(i % UNITS);
        size_t r = i / UNITS;
        int h, kv;
        long t;
        if (adjacent) {
            kv = int(r % 2);
            r /= 2;
            t = long(r % cap);
            h = int(r / cap);
        } else {
            t = long(r % cap);
            r /= cap;
            h = int(r % H);
            kv = int(r / H);
        }
        region[i] = make_uint4(pattern(h, t, kv, u, 0), pattern(h, t, kv, u, 1),
                               pattern(h, t, kv, u, 2), pattern(h, t, kv, u, 3));
    }
}

// The fetch: per KV head (blockIdx.y) the rows `rows[h*count .. +count]` (sorted tokens) into
// k_out / v_out [H][count][D]. A warp moves a K and V row pair (lanes 0-15 K, 16-31 V, one
// 16-byte unit each), UNROLL pairs loaded before any is stored, as templates/fetch.cu.tera.
template <int UNROLL>
__global__ void fetch(const uint4* __restrict__ region, long cap, bool adjacent,
                      const int* __restrict__ rows, int count, uint4* __restrict__ k_out,
                      uint4* __restrict__ v_out) {
    const int h = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int kv = lane / UNITS, u = lane % UNITS;
    const int* tokens = rows + size_t(h) * count;
    uint4* out = (kv == 0 ? k_out : v_out) + size_t(h) * count * UNITS;
    const int step = warps * UNROLL;
    for (int base = blockIdx.x * step; base < count; base += gridDim.x * step) {
        uint4 w[UNROLL];
        int row[UNROLL];
#pragma unroll
        for (int i = 0; i < UNROLL; ++i) {
            row[i] = base + i * warps + warp;
            w[i] = make_uint4(0, 0, 0, 0);
            if (row[i] < count) {
                const long t = tokens[row[i]];
                w[i] = __ldcs(region + unit_index(adjacent, cap, h, t, kv, u));
            }
        }
#pragma unroll
        for (int i = 0; i < UNROLL; ++i)
            if (row[i] < count) out[size_t(row[i]) * UNITS + u] = w[i];
    }
}

// A coalesced read of `units` 16-byte units, folded into one word per thread (kept).
__global__ void stream_read(const uint4* __restrict__ src, size_t units, uint32_t* sink) {
    uint32_t acc = 0;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < units;
         i += size_t(gridDim.x) * blockDim.x) {
        const uint4 v = __ldcs(src + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

struct KernelShape {
    const char* name;
    int threads;
    int unroll;
    bool today; // grid sized by the union's capacity, as FetchSpec::launch does
};

const KernelShape KERNELS[] = {
    {"today t64 u4", 64, 4, true},
    {"deep t128 u8", 128, 8, false},
    {"deep t128 u16", 128, 16, false},
};

void launch_fetch(const KernelShape& k, const uint4* region, long cap, bool adjacent,
                  const int* rows, uint4* k_out, uint4* v_out, cudaStream_t s) {
    const int step = k.threads / 32 * k.unroll;
    const int x = ((k.today ? UNION_CAP : ROWS_PER_HEAD) + step - 1) / step;
    const dim3 grid(x, H);
    switch (k.unroll) {
    case 4: fetch<4><<<grid, k.threads, 0, s>>>(region, cap, adjacent, rows, ROWS_PER_HEAD, k_out, v_out); break;
    case 8: fetch<8><<<grid, k.threads, 0, s>>>(region, cap, adjacent, rows, ROWS_PER_HEAD, k_out, v_out); break;
    case 16: fetch<16><<<grid, k.threads, 0, s>>>(region, cap, adjacent, rows, ROWS_PER_HEAD, k_out, v_out); break;
    default: fprintf(stderr, "no fetch<%d>\n", k.unroll); exit(1);
    }
    CK(cudaGetLastError());
}

// splitmix64: the row sets are the same on every run of the program.
uint64_t next_random(uint64_t& s) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// SETS row sets of H heads x ROWS_PER_HEAD distinct sorted tokens in [0, span).
std::vector<int> row_sets(long span) {
    std::vector<int> all;
    all.reserve(size_t(SETS) * H * ROWS_PER_HEAD);
    uint64_t seed = 0x5eed0000ull + uint64_t(span);
    for (int s = 0; s < SETS; ++s)
        for (int h = 0; h < H; ++h) {
            std::vector<int> head;
            while (int(head.size()) < ROWS_PER_HEAD) {
                while (int(head.size()) < ROWS_PER_HEAD)
                    head.push_back(int(next_random(seed) % uint64_t(span)));
                std::sort(head.begin(), head.end());
                head.erase(std::unique(head.begin(), head.end()), head.end());
            }
            all.insert(all.end(), head.begin(), head.end());
        }
    return all;
}

struct Allocation {
    std::string mode;
    std::string status = "ok"; // or why it was refused
    std::string note;          // granularity, huge pages seen, ...
    void* host = nullptr;      // the CPU address, when there is one
    uint4* device = nullptr;   // what kernels read
    double alloc_s = 0;
    // How to free it.
    enum Kind { HOST_ALLOC, REGISTERED_MMAP, VMM } kind = HOST_ALLOC;
    size_t bytes = 0;
    CUmemGenericAllocationHandle handle = 0;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Fraction of the range [p, p + bytes) that /proc/self/smaps reports as AnonHugePages.
double huge_fraction(void* p, size_t bytes) {
    FILE* f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    const uintptr_t lo = uintptr_t(p), hi = lo + bytes;
    bool inside = false;
    double huge_kb = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = a < hi && b > lo;
            continue;
        }
        double kb;
        if (inside && sscanf(line, "AnonHugePages: %lf kB", &kb) == 1) huge_kb += kb;
    }
    fclose(f);
    return huge_kb * 1024.0 / double(bytes);
}

std::string read_first_line(const char* path) {
    FILE* f = fopen(path, "r");
    if (!f) return "unreadable";
    char line[256] = {0};
    if (!fgets(line, sizeof line, f)) line[0] = 0;
    fclose(f);
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

Allocation alloc_host_alloc(size_t bytes) {
    Allocation a;
    a.mode = "cudaHostAlloc mapped";
    a.kind = Allocation::HOST_ALLOC;
    a.bytes = bytes;
    auto t0 = std::chrono::steady_clock::now();
    cudaError_t e = cudaHostAlloc(&a.host, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess) {
        a.status = std::string("refused: cudaHostAlloc: ") + cudaGetErrorString(e);
        return a;
    }
    CK(cudaHostGetDevicePointer((void**)&a.device, a.host, 0));
    a.alloc_s = seconds_since(t0);
    return a;
}

Allocation alloc_registered(size_t bytes, bool hugetlb) {
    Allocation a;
    a.mode = hugetlb ? "mmap MAP_HUGETLB + cudaHostRegister" : "mmap THP + cudaHostRegister";
    a.kind = Allocation::REGISTERED_MMAP;
    a.bytes = bytes;
    auto t0 = std::chrono::steady_clock::now();
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | (hugetlb ? MAP_HUGETLB : 0);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p == MAP_FAILED) {
        a.status = std::string("refused: mmap: ") + strerror(errno);
        if (hugetlb)
            a.status += " (huge pages reserved: /proc/sys/vm/nr_hugepages = " +
                        read_first_line("/proc/sys/vm/nr_hugepages") + ")";
        return a;
    }
    if (!hugetlb) {
        if (madvise(p, bytes, MADV_HUGEPAGE) != 0)
            a.note = std::string("madvise: ") + strerror(errno) + "; ";
        a.note += "THP " + read_first_line("/sys/kernel/mm/transparent_hugepage/enabled");
    }
    // Touch every page before pinning, so that THP can back it with 2 MiB pages.
    memset(p, 0, bytes);
    if (!hugetlb) {
        char huge[64];
        snprintf(huge, sizeof huge, "; %.0f%% AnonHugePages", 100.0 * huge_fraction(p, bytes));
        a.note += huge;
    }
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e != cudaSuccess) {
        a.status = std::string("refused: cudaHostRegister: ") + cudaGetErrorString(e);
        munmap(p, bytes);
        return a;
    }
    a.host = p;
    CK(cudaHostGetDevicePointer((void**)&a.device, p, 0));
    a.alloc_s = seconds_since(t0);
    return a;
}

// Host memory from the virtual memory management API, mapped for the device with the
// allocation's own (large) granularity.
Allocation alloc_vmm(size_t bytes, CUmemLocationType type, int device) {
    Allocation a;
    a.mode = type == CU_MEM_LOCATION_TYPE_HOST_NUMA ? "cuMemCreate HOST_NUMA" : "cuMemCreate HOST";
    a.kind = Allocation::VMM;
    CUdevice dev;
    CU(cuDeviceGet(&dev, device));
    int numa = 0, supported = 0;
    const CUdevice_attribute attr = type == CU_MEM_LOCATION_TYPE_HOST_NUMA
                                        ? CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
                                        : CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED;
    CUresult r = cuDeviceGetAttribute(&supported, attr, dev);
    if (r != CUDA_SUCCESS || !supported) {
        a.status = "refused: the device reports no support (" +
                   (r != CUDA_SUCCESS ? cu_error("cuDeviceGetAttribute", r)
                                      : std::string("attribute is 0")) + ")";
        return a;
    }
    CU(cuDeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, dev));
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = type;
    prop.location.id = type == CU_MEM_LOCATION_TYPE_HOST_NUMA ? std::max(numa, 0) : 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    size_t minimum = 0, recommended = 0;
    r = cuMemGetAllocationGranularity(&minimum, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r == CUDA_SUCCESS)
        r = cuMemGetAllocationGranularity(&recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    if (r != CUDA_SUCCESS) {
        a.status = "refused: " + cu_error("cuMemGetAllocationGranularity", r);
        return a;
    }
    const size_t granule = std::max(recommended, size_t(2) << 20);
    a.bytes = (bytes + granule - 1) / granule * granule;
    char note[160];
    snprintf(note, sizeof note, "granularity minimum %zu KiB, recommended %zu KiB; host NUMA id %d",
             minimum >> 10, recommended >> 10, numa);
    a.note = note;
    auto t0 = std::chrono::steady_clock::now();
    r = cuMemCreate(&a.handle, a.bytes, &prop, 0);
    if (r != CUDA_SUCCESS) {
        a.status = "refused: " + cu_error("cuMemCreate", r);
        return a;
    }
    CUdeviceptr va = 0;
    r = cuMemAddressReserve(&va, a.bytes, granule, 0, 0);
    if (r != CUDA_SUCCESS) {
        a.status = "refused: " + cu_error("cuMemAddressReserve", r);
        cuMemRelease(a.handle);
        return a;
    }
    r = cuMemMap(va, a.bytes, 0, a.handle, 0);
    if (r != CUDA_SUCCESS) {
        a.status = "refused: " + cu_error("cuMemMap", r);
        cuMemAddressFree(va, a.bytes);
        cuMemRelease(a.handle);
        return a;
    }
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = cuMemSetAccess(va, a.bytes, &access, 1);
    if (r != CUDA_SUCCESS) {
        a.status = "refused: " + cu_error("cuMemSetAccess(device)", r);
        cuMemUnmap(va, a.bytes);
        cuMemAddressFree(va, a.bytes);
        cuMemRelease(a.handle);
        return a;
    }
    // CPU access to the same addresses, where the driver allows it (noted, not needed).
    if (type == CU_MEM_LOCATION_TYPE_HOST_NUMA) {
        CUmemAccessDesc cpu = access;
        cpu.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        cpu.location.id = prop.location.id;
        r = cuMemSetAccess(va, a.bytes, &cpu, 1);
        a.note += r == CUDA_SUCCESS ? "; CPU access granted" : "; no CPU access (" + cu_error("cuMemSetAccess(host)", r) + ")";
        if (r == CUDA_SUCCESS) a.host = (void*)va;
    }
    a.device = (uint4*)va;
    a.alloc_s = seconds_since(t0);
    return a;
}

void release(Allocation& a) {
    if (a.status != "ok") return;
    switch (a.kind) {
    case Allocation::HOST_ALLOC: CK(cudaFreeHost(a.host)); break;
    case Allocation::REGISTERED_MMAP:
        CK(cudaHostUnregister(a.host));
        if (munmap(a.host, a.bytes) != 0) fprintf(stderr, "munmap: %s\n", strerror(errno));
        break;
    case Allocation::VMM:
        CU(cuMemUnmap(CUdeviceptr(a.device), a.bytes));
        CU(cuMemAddressFree(CUdeviceptr(a.device), a.bytes));
        CU(cuMemRelease(a.handle));
        break;
    }
}

struct Spread {
    double median, p25, p75;
};

Spread spread(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    auto at = [&](double q) { return v[size_t(q * (v.size() - 1) + 0.5)]; };
    return {at(0.5), at(0.25), at(0.75)};
}

struct Result {
    std::string mode, layout, kernel;
    long span;
    Spread us;
    double gbps;
};

std::string json_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out;
}

// Checks the fetched rows of set `set` against the pattern the source was filled with.
bool check_rows(const std::vector<int>& sets, int set, const std::vector<uint4>& k,
                const std::vector<uint4>& v, std::string& why) {
    const int* rows = sets.data() + size_t(set) * H * ROWS_PER_HEAD;
    for (int h = 0; h < H; ++h)
        for (int i = 0; i < ROWS_PER_HEAD; ++i) {
            const int t = rows[h * ROWS_PER_HEAD + i];
            for (int kv = 0; kv < 2; ++kv)
                for (int u = 0; u < UNITS; ++u) {
                    const uint4 got = (kv ? v : k)[(size_t(h) * ROWS_PER_HEAD + i) * UNITS + u];
                    const uint32_t g[4] = {got.x, got.y, got.z, got.w};
                    for (int w = 0; w < 4; ++w)
                        if (g[w] != pattern(h, t, kv, u, w)) {
                            char b[160];
                            snprintf(b, sizeof b, "head %d row %d (token %d) %s unit %d word %d: %08x, want %08x",
                                     h, i, t, kv ? "V" : "K", u, w, g[w], pattern(h, t, kv, u, w));
                            why = b;
                            return false;
                        }
                }
        }
    return true;
}

} // namespace

int main(int argc, char** argv) {
    const char* out_path = argc > 1 ? argv[1] : "host_fetch_tlb.json";
    const auto start = std::chrono::steady_clock::now();
    const int device = 0;
    CK(cudaSetDevice(device));
    CK(cudaFree(nullptr)); // the primary context, current for the driver calls too
    CU(cuInit(0));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, device));
    int driver = 0;
    CK(cudaDriverGetVersion(&driver));
    printf("host_fetch_tlb: %s (sm_%d%d), driver CUDA %d.%d; %d rows per KV head x %d heads, "
           "%d B rows, median of %d runs\n",
           prop.name, prop.major, prop.minor, driver / 1000, driver % 1000 / 10, ROWS_PER_HEAD, H,
           ROW_BYTES, REPS);

    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    auto time_us = [&](auto&& work) {
        CK(cudaEventRecord(e0, s));
        work();
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        return double(ms) * 1e3;
    };

    void* flush;
    CK(cudaMalloc(&flush, FLUSH_BYTES));
    const size_t out_units = size_t(H) * ROWS_PER_HEAD * UNITS;
    uint4 *k_out, *v_out;
    CK(cudaMalloc(&k_out, out_units * 16));
    CK(cudaMalloc(&v_out, out_units * 16));
    uint32_t* sink;
    CK(cudaMalloc(&sink, size_t(132 * 8) * 1024 * 4));

    // The link: one large copy from pinned memory.
    double link_gbps = 0;
    {
        void *src, *dst;
        CK(cudaHostAlloc(&src, COPY_BYTES, cudaHostAllocDefault));
        memset(src, 1, COPY_BYTES);
        CK(cudaMalloc(&dst, COPY_BYTES));
        std::vector<double> us;
        for (int i = 0; i < 7; ++i) {
            const double t = time_us([&] { CK(cudaMemcpyAsync(dst, src, COPY_BYTES, cudaMemcpyHostToDevice, s)); });
            if (i >= 2) us.push_back(t);
        }
        link_gbps = double(COPY_BYTES) / (spread(us).median * 1e-6) / 1e9;
        CK(cudaFree(dst));
        CK(cudaFreeHost(src));
        printf("pinned copy host->device, 1 GiB: %.1f GB/s (the link)\n", link_gbps);
    }

    std::vector<std::vector<int>> sets_of;
    std::vector<int*> sets_dev;
    for (long span : SPANS) {
        sets_of.push_back(row_sets(span));
        int* d;
        CK(cudaMalloc(&d, sets_of.back().size() * sizeof(int)));
        CK(cudaMemcpy(d, sets_of.back().data(), sets_of.back().size() * sizeof(int), cudaMemcpyHostToDevice));
        sets_dev.push_back(d);
    }

    std::vector<Allocation> modes_seen;
    std::vector<std::pair<std::string, double>> stream_gbps;
    std::vector<Result> results;
    std::vector<std::string> failures;
    std::vector<uint4> k_host(out_units), v_host(out_units);

    for (int m = 0; m < 5; ++m) {
        Allocation a;
        switch (m) {
        case 0: a = alloc_host_alloc(REGION_BYTES); break;
        case 1: a = alloc_registered(REGION_BYTES, false); break;
        case 2: a = alloc_registered(REGION_BYTES, true); break;
        case 3: a = alloc_vmm(REGION_BYTES, CU_MEM_LOCATION_TYPE_HOST_NUMA, device); break;
        default: a = alloc_vmm(REGION_BYTES, CU_MEM_LOCATION_TYPE_HOST, device); break;
        }
        printf("\n== %s: %s%s%s (%.1f s to allocate)\n", a.mode.c_str(), a.status.c_str(),
               a.note.empty() ? "" : "; ", a.note.c_str(), a.alloc_s);
        modes_seen.push_back(a);
        if (a.status != "ok") continue;

        // The scan's pattern: one coalesced pass.
        {
            fill<<<1024, 256, 0, s>>>(a.device, long(STREAM_BYTES / (2 * H * ROW_BYTES)), false);
            CK(cudaGetLastError());
            std::vector<double> us;
            for (int i = 0; i < 7; ++i) {
                CK(cudaMemsetAsync(flush, i, FLUSH_BYTES, s));
                const double t = time_us([&] {
                    stream_read<<<132 * 8, 1024, 0, s>>>(a.device, STREAM_BYTES / 16, sink);
                    CK(cudaGetLastError());
                });
                if (i >= 2) us.push_back(t);
            }
            const double gbps = double(STREAM_BYTES) / (spread(us).median * 1e-6) / 1e9;
            stream_gbps.push_back({a.mode, gbps});
            printf("coalesced read of 256 MiB: %.1f GB/s\n", gbps);
        }

        printf("%-8s %-9s %-14s %10s %10s %8s\n", "span", "layout", "kernel", "median us", "p25-p75", "GB/s");
        for (int si = 0; si < int(sizeof SPANS / sizeof SPANS[0]); ++si) {
            const long span = SPANS[si];
            for (int adjacent = 0; adjacent < 2; ++adjacent) {
                fill<<<132 * 16, 256, 0, s>>>(a.device, span, adjacent != 0);
                CK(cudaGetLastError());
                CK(cudaStreamSynchronize(s));
                // A host copy of a few source rows, through the unified address.
                for (long t : {0L, span / 2, span - 1}) {
                    uint4 row[UNITS];
                    const int h = int(t % H), kv = int(t % 2);
                    CK(cudaMemcpy(row, a.device + unit_index(adjacent, span, h, t, kv, 0), sizeof row, cudaMemcpyDefault));
                    for (int u = 0; u < UNITS; ++u)
                        if (row[u].x != pattern(h, t, kv, u, 0) || row[u].w != pattern(h, t, kv, u, 3)) {
                            fprintf(stderr, "%s: the source row of head %d token %ld differs from the fill\n",
                                    a.mode.c_str(), h, t);
                            return 1;
                        }
                }
                for (const KernelShape& k : KERNELS) {
                    const int* rows = sets_dev[si];
                    const size_t per_set = size_t(H) * ROWS_PER_HEAD;
                    // Checked run: poisoned outputs, the last row set.
                    CK(cudaMemsetAsync(k_out, 0xff, out_units * 16, s));
                    CK(cudaMemsetAsync(v_out, 0xff, out_units * 16, s));
                    launch_fetch(k, a.device, span, adjacent != 0, rows + (SETS - 1) * per_set, k_out, v_out, s);
                    CK(cudaStreamSynchronize(s));
                    CK(cudaMemcpy(k_host.data(), k_out, out_units * 16, cudaMemcpyDeviceToHost));
                    CK(cudaMemcpy(v_host.data(), v_out, out_units * 16, cudaMemcpyDeviceToHost));
                    std::string why;
                    if (!check_rows(sets_of[si], SETS - 1, k_host, v_host, why)) {
                        failures.push_back(a.mode + " " + std::to_string(span) + " " + k.name + ": " + why);
                        fprintf(stderr, "WRONG: %s\n", failures.back().c_str());
                        continue;
                    }
                    std::vector<double> us;
                    for (int r = 0; r < WARMUP + REPS; ++r) {
                        CK(cudaMemsetAsync(flush, r, FLUSH_BYTES, s));
                        const double t = time_us([&] {
                            launch_fetch(k, a.device, span, adjacent != 0, rows + r * per_set, k_out, v_out, s);
                        });
                        if (r >= WARMUP) us.push_back(t);
                    }
                    const Spread sp = spread(us);
                    const double bytes = double(H) * ROWS_PER_HEAD * 2 * ROW_BYTES;
                    Result res{a.mode, adjacent ? "adjacent" : "separate", k.name, span, sp,
                               bytes / (sp.median * 1e-6) / 1e9};
                    results.push_back(res);
                    char spread_text[32];
                    snprintf(spread_text, sizeof spread_text, "%.1f-%.1f", sp.p25, sp.p75);
                    printf("%-8ld %-9s %-14s %10.1f %10s %8.1f\n", span, res.layout.c_str(), k.name,
                           sp.median, spread_text, res.gbps);
                }
            }
        }
        release(a);
    }

    FILE* f = fopen(out_path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s: %s\n", out_path, strerror(errno));
        return 1;
    }
    fprintf(f, "{\n  \"gpu\": \"%s\",\n  \"compute_capability\": \"%d.%d\",\n  \"driver_cuda\": \"%d.%d\",\n",
            json_escape(prop.name).c_str(), prop.major, prop.minor, driver / 1000, driver % 1000 / 10);
    fprintf(f, "  \"kv_heads\": %d,\n  \"head_dim\": %d,\n  \"rows_per_head\": %d,\n  \"reps\": %d,\n",
            H, D, ROWS_PER_HEAD, REPS);
    fprintf(f, "  \"pinned_copy_gbps\": %.3f,\n  \"allocations\": [\n", link_gbps);
    for (size_t i = 0; i < modes_seen.size(); ++i) {
        const Allocation& a = modes_seen[i];
        double g = -1;
        for (auto& p : stream_gbps)
            if (p.first == a.mode) g = p.second;
        fprintf(f, "    {\"mode\": \"%s\", \"status\": \"%s\", \"note\": \"%s\", \"alloc_s\": %.3f, "
                   "\"coalesced_read_gbps\": %s}%s\n",
                json_escape(a.mode).c_str(), json_escape(a.status).c_str(), json_escape(a.note).c_str(),
                a.alloc_s, g < 0 ? "null" : std::to_string(g).c_str(), i + 1 < modes_seen.size() ? "," : "");
    }
    fprintf(f, "  ],\n  \"fetch\": [\n");
    for (size_t i = 0; i < results.size(); ++i) {
        const Result& r = results[i];
        fprintf(f, "    {\"mode\": \"%s\", \"span_tokens\": %ld, \"layout\": \"%s\", \"kernel\": \"%s\", "
                   "\"median_us\": %.3f, \"p25_us\": %.3f, \"p75_us\": %.3f, \"gbps\": %.3f}%s\n",
                json_escape(r.mode).c_str(), r.span, r.layout.c_str(), r.kernel.c_str(), r.us.median,
                r.us.p25, r.us.p75, r.gbps, i + 1 < results.size() ? "," : "");
    }
    fprintf(f, "  ],\n  \"wrong\": [");
    for (size_t i = 0; i < failures.size(); ++i)
        fprintf(f, "%s\"%s\"", i ? ", " : "", json_escape(failures[i]).c_str());
    fprintf(f, "],\n  \"wall_s\": %.1f\n}\n", seconds_since(start));
    fclose(f);
    printf("\nwrote %s; %zu configurations, %zu wrong; %.1f s\n", out_path, results.size(),
           failures.size(), seconds_since(start));
    return failures.empty() ? 0 : 1;
}
