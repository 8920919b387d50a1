//! `autotune`: benchmarks kernel variants on the GPU, in host (PCIe) and HBM placements, and
//! records the winners per GPU model.
//!
//! Today it detects the GPU and measures the ceilings every variant is judged against (pinned
//! copy, mapped-read kernel, HBM copy); enumerating and timing the variants arrives with the
//! autotune issue.

use std::process::ExitCode;

fn main() -> ExitCode {
    let gpu = match runtime::gpu::Gpu::open(0) {
        Ok(gpu) => gpu,
        Err(e) => {
            eprintln!("autotune: {e}");
            return ExitCode::from(2);
        }
    };
    let info = gpu.info();
    println!(
        "GPU: {} (compute capability {}.{}, {} SMs, {:.1} GiB), driver CUDA {}.{}",
        info.name,
        info.compute_capability.0,
        info.compute_capability.1,
        info.multiprocessors,
        info.total_memory as f64 / (1u64 << 30) as f64,
        info.driver_version / 1000,
        info.driver_version % 1000 / 10,
    );
    match runtime::ceilings::measure(&gpu, 1 << 30, 20) {
        Ok(c) => {
            println!("{}", serde_json::to_string_pretty(&c).unwrap_or_default());
            eprintln!(
                "autotune: tuning of kernel variants is not available yet; only the ceilings \
                 were measured"
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("autotune: measuring the ceilings failed: {e}");
            ExitCode::FAILURE
        }
    }
}
