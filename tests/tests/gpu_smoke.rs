//! The GPU layer itself: a kernel compiled through the JIT (the one road to a module) for the
//! device's own architecture runs and writes every element, reading device memory and mapped
//! host memory. The kernel is the `convert` family (bf16 ↔ f32 of the foreign step), so the
//! smoke test also checks its rounding against `half`'s, special values included.

use codegen::spec::{ConvertSpec, KernelSpec};
use fathom_tests::gpu_test;
use half::bf16;
use rand::Rng;
use runtime::abi;
use runtime::jit::{Jit, JitCache};
use runtime::launch::{DevicePtr, DevicePtrMut, KernelArgs, Launch};

gpu_test!(
    a_compiled_kernel_writes_every_element_from_device_and_mapped_memory,
    |t| {
        let gpu = &*t.gpu;
        let dir = tempfile::tempdir().unwrap();
        let jit = Jit::new(t.gpu.clone(), JitCache::new(dir.path().to_path_buf())).unwrap();
        let spec = ConvertSpec { threads: 128 };
        let kernel = jit.kernel(&KernelSpec::Convert(spec)).unwrap();
        let to_f32 = kernel.function(&spec.to_f32_entry()).unwrap();
        let to_bf16 = kernel.function(&spec.to_bf16_entry()).unwrap();

        // Random floats of every magnitude, then the values where rounding is easy to get wrong.
        let n = 1000 + t.rng.gen_range(0..1000);
        let mut x: Vec<f32> = (0..n)
            .map(|_| t.rng.gen_range(-1.0f32..1.0) * 2f32.powi(t.rng.gen_range(-130..120)))
            .collect();
        let specials = [
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX, // rounds up to infinity
            f32::MIN_POSITIVE,
            1.0 + f32::EPSILON * 64.0, // exactly halfway between two bf16: ties to even (down)
            1.0 + f32::EPSILON * 192.0, // halfway, odd below: ties to even (up)
            f32::from_bits(0x3fff_ffff), // the carry reaches the exponent: 2.0
            f32::NAN,
            f32::from_bits(0xff80_0001), // a signalling NaN comes back quiet
        ];
        x[..specials.len()].copy_from_slice(&specials);

        // f32 (device) -> bf16 (mapped host memory, poisoned first).
        let dx = gpu.upload(&x).unwrap();
        let bits = gpu.mapped::<u16>(n, 0xff).unwrap();
        let small = Launch::new([(n as u32).div_ceil(512), 1, 1], spec.threads);
        abi::convert::F32ToBf16Args {
            src: DevicePtr::from_addr(dx.addr()),
            dst: DevicePtrMut::from_addr(bits.addr()),
            n: n as u64,
        }
        .launch(gpu, to_bf16, small)
        .unwrap();
        gpu.synchronize().unwrap();
        for (i, (&got, &v)) in bits.as_slice().iter().zip(&x).enumerate() {
            assert_eq!(got, bf16::from_f32(v).to_bits(), "element {i}: {v:e}");
        }

        // bf16 (mapped host memory) -> f32 (device, poisoned first): exact.
        let back = gpu.filled::<f32>(n, 0xff).unwrap();
        abi::convert::Bf16ToF32Args {
            src: DevicePtr::from_addr(bits.addr()),
            dst: DevicePtrMut::from_addr(back.addr()),
            n: n as u64,
        }
        .launch(gpu, to_f32, small)
        .unwrap();
        let got = back.download().unwrap();
        for (i, (&g, &b)) in got.iter().zip(bits.as_slice().iter()).enumerate() {
            assert_eq!(g.to_bits(), u32::from(b) << 16, "element {i}");
        }
        eprintln!("device: {:?}", gpu.info());
    }
);
