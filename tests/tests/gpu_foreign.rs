//! The runtime for foreign callers on a GPU: a store and a decoder moved onto borrowed streams
//! (the legacy stream 0, the per-thread stream) and fed borrowed memory (`TensorDesc`s) give
//! bit for bit the results of the `DeviceBuffer` path on the handle's own stream; bad lent
//! tensors are refused with the driver's word on where they live.

use std::sync::Arc;

use codegen::spec::Placement;
use fathom_tests::gpu_test;
use fathom_tests::step_setup::qwen3_8b;
use half::bf16;
use rand::{Rng, SeedableRng};
use runtime::foreign::{Device, Dtype, TensorDesc};
use runtime::gpu::{DeviceBuffer, Gpu, StreamHandle};
use runtime::jit::Jit;
use runtime::step::{Calibration, Decoder, DecoderConfig, ForeignStep, Method, StepRequest};
use runtime::store::{KeyStore, StoreConfig, StoreError};

fn desc<T>(buffer: &DeviceBuffer<T>, shape: &[usize], dtype: Dtype) -> TensorDesc {
    TensorDesc {
        addr: buffer.addr(),
        shape: shape.to_vec(),
        strides: runtime::foreign::contiguous_strides(shape),
        dtype,
        device: Device::Cuda(0),
    }
}

fn bits(v: &[f32]) -> Vec<u16> {
    v.iter().map(|&x| bf16::from_f32(x).to_bits()).collect()
}

gpu_test!(
    borrowed_streams_and_memory_give_the_device_buffer_path_s_results_bit_for_bit,
    |t| {
        let own = t.gpu.clone();
        let model = qwen3_8b(1);
        let (h, q_heads, d) = (model.kv_heads, model.query_heads, model.head_dim);
        let n = 5_000 + 37;
        let mut rng = rand::rngs::StdRng::seed_from_u64(13);
        let keys: Vec<f32> = (0..h * n * d).map(|_| rng.gen_range(-2.0..2.0)).collect();
        let values: Vec<f32> = (0..h * n * d).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let queries: Vec<f32> = (0..q_heads * d).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let (k, v, q) = (
            own.upload(&bits(&keys)).unwrap(),
            own.upload(&bits(&values)).unwrap(),
            own.upload(&queries).unwrap(),
        );
        let jit = Arc::new(Jit::with_default_cache(own.clone()).unwrap());
        let config = StoreConfig::new(model.clone(), Placement::Host, 1 << 16);
        let mut store = KeyStore::with_kernels(own.clone(), config, jit.as_ref()).unwrap();
        let sigma2 = vec![1.0f32; h * d];
        let calibration = Calibration::new(1, h, d).with_sigma2(sigma2).unwrap();
        let mut decoder = Decoder::with_kernels(own.clone(), model, DecoderConfig::default(), jit)
            .unwrap()
            .with_calibration(calibration)
            .unwrap();
        let a = store.create_sequence();
        store.prefill(a, 0, &k, &v).unwrap();
        let methods = [
            Method::Fathom { bits: 48.0 },
            Method::Sparq { r: 16 },
            Method::Oracle,
            Method::Dense,
        ];
        let mut want = Vec::new();
        for method in methods {
            let view = store.layer_view(&[a], 0).unwrap();
            let out = decoder
                .step(&view, &q, StepRequest::new(method, 256))
                .unwrap();
            want.push(out.download().unwrap());
        }
        // The same work on the legacy and the per-thread default streams, from lent memory.
        for handle in [StreamHandle::Legacy, StreamHandle::PerThread] {
            let borrowed = Arc::new(unsafe { own.on_stream(handle) }.unwrap());
            store.rebind(borrowed.clone()).unwrap();
            decoder.rebind(borrowed.clone()).unwrap();
            let b = store.create_sequence();
            let rows = [h, n, d];
            unsafe {
                store
                    .prefill_tensors(
                        b,
                        0,
                        &desc(&k, &rows, Dtype::Bf16),
                        &desc(&v, &rows, Dtype::Bf16),
                    )
                    .unwrap();
            }
            let mut scratch = ForeignStep::default();
            for (method, want) in methods.iter().zip(&want) {
                let out: DeviceBuffer<f32> = borrowed.filled(q_heads * d, 0xff).unwrap();
                let view = store.layer_view(&[b], 0).unwrap();
                let shape = [1, q_heads, d];
                unsafe {
                    decoder
                        .step_tensors(
                            &mut scratch,
                            &view,
                            &desc(&q, &shape, Dtype::F32),
                            &desc(&out, &shape, Dtype::F32),
                            StepRequest::new(*method, 256),
                        )
                        .unwrap();
                }
                let sel = decoder.selections(&scratch).unwrap();
                let got = borrowed.download(&out, q_heads * d).unwrap();
                let same = got
                    .iter()
                    .zip(&want.out)
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "{method} on {handle:?}: outputs differ");
                for qh in 0..q_heads {
                    let (kv, g) = (qh / (q_heads / h), qh % (q_heads / h));
                    assert_eq!(sel.indices(0, qh), want.selected(0, kv, g), "{method} {qh}");
                }
            }
            store.free_sequence(b).unwrap();
        }
        // A host pointer said to be on the GPU is refused, naming where the driver puts it.
        let host = vec![0u16; h * d];
        let lie = TensorDesc {
            addr: host.as_ptr() as u64,
            shape: vec![1, h, d],
            strides: vec![(h * d) as i64, d as i64, 1],
            dtype: Dtype::Bf16,
            device: Device::Cuda(0),
        };
        let e = unsafe { store.append_tensors(&[a], 0, &lie, &lie) }.unwrap_err();
        assert!(matches!(e, StoreError::Tensor(_)), "{e}");
        assert!(e.to_string().contains("host memory"), "{e}");
        assert_eq!(store.lengths(a, 0).unwrap(), (4992, n));
    }
);

gpu_test!(
    a_capture_on_a_borrowed_stream_is_never_queried_and_refuses_allocations,
    |_t| {
        let raw = Arc::new(unsafe { Gpu::borrow_stream(0, StreamHandle::PerThread) }.unwrap());
        let side = raw.with_new_stream().unwrap();
        let target: DeviceBuffer<u32> = side.filled(4, 0).unwrap();
        side.synchronize().unwrap();
        side.begin_capture().unwrap();
        // During a capture an allocation is refused before the driver is asked, so the capture
        // stays valid: work queued after the refusal is recorded, and the graph replays it.
        let Err(e) = side.upload(&[1.0f32]) else {
            panic!("an allocation during a capture was allowed");
        };
        assert!(e.to_string().contains("captured"), "{e}");
        assert!(side.is_capturing().unwrap());
        side.fill(&target, 0x5a).unwrap();
        let graph = side
            .end_capture()
            .expect("the capture survives the refused allocation");
        assert!(!side.is_capturing().unwrap());
        assert_eq!(
            side.download(&target, 4).unwrap(),
            [0; 4],
            "captured, not run"
        );
        graph.launch().unwrap();
        assert_eq!(side.download(&target, 4).unwrap(), [0x5a5a_5a5a; 4]);
    }
);
