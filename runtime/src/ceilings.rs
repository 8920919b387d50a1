//! The ceilings a kernel is measured against, measured on the device in the same run (SPEC §9):
//! the pinned host-to-device copy rate, the rate of a kernel reading mapped host memory, and the
//! device-to-device (HBM) copy rate.

use crate::gpu::{Arg, Gpu, GpuError};
use serde::{Deserialize, Serialize};

/// Measured rates, in GB/s (10^9 bytes per second).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ceilings {
    /// One large asynchronous copy from pinned host memory to the device.
    pub pinned_copy_gbps: f64,
    /// A kernel reading mapped host memory with coalesced 16-byte loads.
    pub mapped_read_gbps: f64,
    /// A device-to-device copy, counting bytes read plus bytes written.
    pub hbm_copy_gbps: f64,
    /// Bytes moved by each measurement.
    pub bytes: usize,
    /// Timed repetitions per measurement (after one warm-up); the median is reported.
    pub repetitions: usize,
}

/// The name of the HBM ceiling in reports.
pub const HBM_CEILING: &str = "HBM copy (read + write traffic)";

impl Ceilings {
    /// The ceiling of a kernel streaming from HBM: the copy's traffic rate. A copy already
    /// counts both the bytes it reads and those it writes ([`Ceilings::hbm_copy_gbps`]), which
    /// is what HBM sustains; halving it would count every byte twice (a read-only kernel
    /// reaches well above half of it).
    pub fn hbm_stream_gbps(&self) -> f64 {
        self.hbm_copy_gbps
    }
}

const MAPPED_READ: &str = r#"
// Reads every 16-byte vector of a mapped host buffer, four loads in flight per thread; the
// xor-fold keeps the loads alive without writing anything in practice.
extern "C" __global__ void fathom_probe_mapped_read(const uint4* __restrict__ src,
                                                    unsigned long long vectors,
                                                    uint4* __restrict__ sink) {
    uint4 acc = make_uint4(0, 0, 0, 0);
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < vectors; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) v[k] = src[i + k * stride];
#pragma unroll
        for (int k = 0; k < 4; ++k) { acc.x ^= v[k].x; acc.y ^= v[k].y; acc.z ^= v[k].z; acc.w ^= v[k].w; }
    }
    for (; i < vectors; i += stride) {
        uint4 v = src[i];
        acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
    }
    if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x9e3779b9u) sink[0] = acc;
}
"#;

fn median(mut v: Vec<f32>) -> f64 {
    v.sort_by(f32::total_cmp);
    v[v.len() / 2] as f64
}

fn gbps(bytes: usize, ms: f64) -> f64 {
    bytes as f64 / (ms * 1e-3) / 1e9
}

/// Measures the three ceilings with buffers of `bytes` bytes (a multiple of 16), `repetitions`
/// timed runs each after one warm-up. Buffers hold non-zero data.
pub fn measure(gpu: &Gpu, bytes: usize, repetitions: usize) -> Result<Ceilings, GpuError> {
    let words = bytes / 8;
    let mut host = gpu.mapped::<u64>(words, 0)?;
    for (i, w) in host.as_mut_slice().iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    }
    let device_a = gpu.filled::<u64>(words, 0x5a)?;
    let device_b = gpu.filled::<u64>(words, 0xa5)?;
    let sink = gpu.filled::<u64>(2, 0)?;
    let module = gpu.load(MAPPED_READ, "fathom_probe_mapped_read.cu")?;
    let read = module.function("fathom_probe_mapped_read")?;
    let grid = (gpu.info().multiprocessors as u32 * 8, 1, 1);
    let args = [host.arg(), Arg::U64((words / 2) as u64), sink.arg()];

    let time = |work: &dyn Fn() -> Result<(), GpuError>| -> Result<f64, GpuError> {
        work()?;
        gpu.synchronize()?;
        let runs = (0..repetitions)
            .map(|_| gpu.time_ms(work))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(median(runs))
    };
    let pinned = time(&|| gpu.copy_from_host(&host, &device_a))?;
    let mapped = time(&|| gpu.launch(&read, grid, (256, 1, 1), 0, &args))?;
    let hbm = time(&|| gpu.copy_device(&device_a, &device_b))?;
    Ok(Ceilings {
        pinned_copy_gbps: gbps(words * 8, pinned),
        mapped_read_gbps: gbps(words * 8, mapped),
        hbm_copy_gbps: gbps(2 * words * 8, hbm),
        bytes: words * 8,
        repetitions,
    })
}
