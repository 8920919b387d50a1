//! The ceilings a kernel is measured against, measured on the device in the same run (SPEC §9):
//! the pinned host-to-device copy rate, the rate of a kernel reading mapped host memory, and the
//! device-to-device (HBM) copy rate.

use codegen::spec::{Family, MappedReadSpec};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::abi;
use crate::gpu::GpuError;
use crate::jit::{Jit, JitError};
use crate::launch::{KernelArgs, Launch};

/// Why a ceiling could not be measured.
#[derive(Debug, Error)]
pub enum CeilingsError {
    /// Allocating, copying, launching or timing failed.
    #[error("measuring the ceilings: {0}")]
    Gpu(#[from] GpuError),
    /// The mapped-read probe (`codegen::spec::MappedReadSpec`) could not be compiled or loaded.
    #[error("measuring the ceilings: {0}")]
    Jit(#[from] JitError),
}

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

    /// A warning when mapped host reads run well below the pinned copy (under
    /// [`SLOW_MAPPED_READ`] of it), for the reports of autotune and step-bench. The host
    /// placement's scans read their planes by mapped reads, so on such a machine its steps sit
    /// above a link floor set by the copy for reasons of the machine, not of the kernels: an
    /// H100 of 2026-12-06 read at 32.3 GB/s against a 55.2 GB/s copy and took 62.8 ms for the
    /// host 1M step that took 45.7 on one reading at 51.3 (`bench/NOTES.md`, seventeenth
    /// session). `None` on a machine like the others (51 of 55 GB/s on the H100s and H200s).
    pub fn mapped_read_warning(&self) -> Option<String> {
        let ratio = self.mapped_read_gbps / self.pinned_copy_gbps;
        (ratio < SLOW_MAPPED_READ).then(|| {
            format!(
                "mapped host reads run at {:.1} GB/s, {:.0}% of the pinned copy's {:.1} (the H100s \
                 and H200s measured so far: ~92%): host-placement scans read at that rate, so \
                 their times and ratios to the link floor here are this machine's; compare host \
                 figures only with runs on the same machine",
                self.mapped_read_gbps,
                100.0 * ratio,
                self.pinned_copy_gbps
            )
        })
    }
}

/// The share of the pinned copy's rate below which mapped reads are called slow
/// ([`Ceilings::mapped_read_warning`]).
pub const SLOW_MAPPED_READ: f64 = 0.8;

fn median(mut v: Vec<f32>) -> f64 {
    v.sort_by(f32::total_cmp);
    v[v.len() / 2] as f64
}

fn gbps(bytes: usize, ms: f64) -> f64 {
    bytes as f64 / (ms * 1e-3) / 1e9
}

/// Measures the three ceilings on `jit`'s device with buffers of `bytes` bytes (a multiple of
/// 16), `repetitions` timed runs each after one warm-up. Buffers hold non-zero data. The
/// mapped-read probe is the `mapped_read` family's default spec, compiled and cached by `jit`.
pub fn measure(jit: &Jit, bytes: usize, repetitions: usize) -> Result<Ceilings, CeilingsError> {
    let gpu = jit.gpu();
    let words = bytes / 8;
    let mut host = gpu.mapped::<u64>(words, 0)?;
    for (i, w) in host.as_mut_slice().iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    }
    let device_a = gpu.filled::<u64>(words, 0x5a)?;
    let device_b = gpu.filled::<u64>(words, 0xa5)?;
    let mut sink = gpu.filled::<u64>(2, 0)?;
    let spec = MappedReadSpec::default();
    let probe = jit.kernel(&spec.into())?;
    let read = probe.function(&spec.kernel_name())?;
    let launch = Launch::new([gpu.info().multiprocessors as u32 * 8, 1, 1], spec.threads);
    let args = abi::mapped_read::Args {
        src: host.ptr().cast(),
        vectors: (words / 2) as u64,
        sink: sink.ptr_mut().cast(),
    };

    let time = |work: &dyn Fn() -> Result<(), GpuError>| -> Result<f64, GpuError> {
        work()?;
        gpu.synchronize()?;
        let runs = (0..repetitions)
            .map(|_| gpu.time_ms(work))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(median(runs))
    };
    let pinned = time(&|| gpu.copy_from_host(&host, &device_a))?;
    let mapped = time(&|| args.launch(gpu, read, launch))?;
    let hbm = time(&|| gpu.copy_device(&device_a, &device_b))?;
    Ok(Ceilings {
        pinned_copy_gbps: gbps(words * 8, pinned),
        mapped_read_gbps: gbps(words * 8, mapped),
        hbm_copy_gbps: gbps(2 * words * 8, hbm),
        bytes: words * 8,
        repetitions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ceilings(pinned_copy_gbps: f64, mapped_read_gbps: f64) -> Ceilings {
        Ceilings {
            pinned_copy_gbps,
            mapped_read_gbps,
            hbm_copy_gbps: 3000.0,
            bytes: 1 << 30,
            repetitions: 20,
        }
    }

    #[test]
    fn slow_mapped_reads_are_named_with_their_rates() {
        // The two H100s of 2026-12-06's seventeenth session.
        assert_eq!(ceilings(55.5, 51.3).mapped_read_warning(), None);
        let warning = ceilings(55.2, 32.3).mapped_read_warning().unwrap();
        assert!(warning.contains("32.3 GB/s"), "{warning}");
        assert!(
            warning.contains("59% of the pinned copy's 55.2"),
            "{warning}"
        );
        // At the threshold and just under it.
        assert_eq!(ceilings(50.0, 40.0).mapped_read_warning(), None);
        assert!(ceilings(50.0, 39.9).mapped_read_warning().is_some());
    }
}
