//! The GPU layer itself: a kernel compiled by NVRTC for the device's own architecture runs and
//! writes every element; mapped host memory is readable by a kernel.

use fathom_tests::{gpu_test, inputs};
use rand::Rng;
use runtime::gpu::Arg;

const AXPY: &str = r#"
extern "C" __global__ void axpy(const float* x, const float* y, float a, int n, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}
"#;

gpu_test!(
    a_compiled_kernel_writes_every_element_from_device_and_mapped_memory,
    |t| {
        let n = 1000 + t.rng.gen_range(0..1000);
        let x = inputs::vectors(&mut t.rng, n, 1);
        let y = inputs::vectors(&mut t.rng, n, 1);
        let a: f32 = t.rng.gen_range(-2.0..2.0);
        let module = t.gpu.load(AXPY, "axpy.cu").unwrap();
        let axpy = module.function("axpy").unwrap();
        let dx = t.gpu.upload(&x).unwrap();
        let mut my = t.gpu.mapped::<f32>(n, 0).unwrap();
        my.as_mut_slice().copy_from_slice(&y);
        let out = t.gpu.filled::<f32>(n, 0xff).unwrap();
        let grid = (n.div_ceil(128) as u32, 1, 1);
        let args = [
            dx.arg(),
            my.arg(),
            Arg::F32(a),
            Arg::I32(n as i32),
            out.arg(),
        ];
        t.gpu.launch(&axpy, grid, (128, 1, 1), 0, &args).unwrap();
        t.gpu.synchronize().unwrap();
        let got = out.download().unwrap();
        for i in 0..n {
            let want = a.mul_add(x[i], y[i]);
            assert!(
                (got[i] - want).abs() <= 1e-6 * want.abs().max(1.0),
                "element {i}: {} != {want}",
                got[i]
            );
        }
        eprintln!("device: {:?}", t.gpu.info());
    }
);
