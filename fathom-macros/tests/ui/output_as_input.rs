use runtime::gpu::{Gpu, GpuError};
use runtime::launch::{CudaFunction, DevicePtr, Launch};

fathom_macros::kernels! {
    mod kernels {
        select(group = 4, k_max = 2048, threads = 256, items_per_thread = 16);
    }
}

// `state` is written by the kernel: a read-only pointer, or a buffer borrowed shared, is refused.
fn pick(gpu: &Gpu, f: &CudaFunction, state: DevicePtr<u32>) -> Result<(), GpuError> {
    let launch = Launch::new([1, 1, 1], 256);
    kernels::fathom_select_g4_k2048_t256_i16_pick(gpu, f, launch, state, 0)?;
    let buffer = gpu.filled::<u32>(16, 0)?;
    kernels::fathom_select_g4_k2048_t256_i16_pick(gpu, f, launch, &buffer, 0)
}

fn main() {}
