//! Fathom's runtime: what a serving stack links against.
//!
//! - [`store`]: the key store of every sequence, on the GPU or in mapped host memory (§2, §7);
//! - [`step`]: the decode step of one layer for a batch of sequences (§8), over a [`view`] of
//!   the store;
//! - [`jit`]: kernels compiled by NVRTC for the device on first use and cached on disk;
//! - [`gpu`], [`launch`], [`ceilings`]: the checked driver layer, typed device pointers, and the
//!   copy rates kernels are measured against.
//! - [`pariskv`]: the host side of the ParisKV kernels' launch ABI (§12), shared by the store's
//!   index build and the decoder's `pariskv(k)` step;
//! - [`foreign`]: memory a foreign caller (PyTorch, numpy) lends, and its checks; the store and
//!   the decoder take such tensors beside their own buffers (`KeyStore::prefill_tensors`,
//!   `Decoder::step_tensors`) on a borrowed stream (`Gpu::borrow_stream`);
//! - [`tuning`]: the tuning vocabulary the step looks its launches up in ([`tuning::Tile`],
//!   [`tuning::TuneKey`], the [`tuning::Tuning`] trait, the default [`tuning::Tiles`], the
//!   host-placement [`tuning::Transfer`]), autotune records (per GPU model, the committed ones
//!   in `runtime/records/` compiled in) and where the decoder finds its own.
//!
//! # Where the rest lives
//!
//! - The vocabulary the runtime shares with the f64 reference and the kernels is in `codegen`:
//!   [`codegen::spec::method::Method`] (re-exported as [`step::Method`]),
//!   [`codegen::spec::layout::StoreLayout`] and [`codegen::spec::layout::BlockSize`],
//!   [`codegen::spec::shape::HEAD_DIMS`], the ParisKV sign vector
//!   ([`codegen::spec::pariskv::signs`]).
//! - The f64 reference is the crate `fathom-reference` (`runtime/reference/`, lib `reference`),
//!   which the tests, autotune and the research programs use; the runtime does not depend on it.
//! - The research programs (`fathom-fidelity`, `fathom-drift`) are the crate `fathom-research`
//!   (`runtime/research/`).
//!
//! # The types a serving stack touches
//!
//! - [`gpu::Gpu`]: one CUDA device and its stream; everything below is queued on it, in order.
//! - [`store::StoreConfig`]: how a store is built: model shape, placement (HBM or mapped host
//!   memory), block and segment size, token capacity, KLT rotations, landmarks, the ParisKV
//!   index.
//! - [`store::KeyStore`]: the keys and values of every resident sequence: prefill, per-token
//!   append (blocks encoded on the device), free, and the per-layer view a step reads.
//! - [`store::SequenceId`]: one sequence of a store; a batch is a slice of them.
//! - [`step::DecoderConfig`]: the decoder's fixed parameters (the store's block and segment
//!   size, the largest top-k, default tiles).
//! - [`step::Decoder`]: runs one layer's decode step for a batch over a store's view: score,
//!   select, fetch, attend; eager or captured into a CUDA graph.
//! - [`step::StepRequest`]: what one step is asked: method, top-k, transfer, softmax scale, `σ²`.
//! - [`step::Method`]: the selection methods of §4: `fathom(B)`, `sparq(r)`, ..., `dense`, and
//!   §12's `pariskv(k)`.
//! - [`step::Transfer`]: how the planes of a host-placement store reach the scan.
//! - [`step::StepOutput`]: a step's selections, unions and attention outputs on the device.
//! - [`jit::Jit`]: kernels compiled for the device on first use and cached on disk; the store
//!   and the decoder load theirs through one (their default), or through any
//!   [`jit::KernelSource`].
//!
//! # A decode loop
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use codegen::{model::preset, spec::Placement};
//! use runtime::gpu::Gpu;
//! use runtime::jit::Jit;
//! use runtime::step::{Calibration, Decoder, DecoderConfig, Method, StepRequest};
//! use runtime::store::{KeyStore, StoreConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let gpu = Arc::new(Gpu::open(0)?);
//! let model = preset("qwen3-8b")?;
//! let (layers, heads, g, d) = (model.layers, model.kv_heads, model.group_size(), model.head_dim);
//! let jit = Arc::new(Jit::with_default_cache(gpu.clone())?); // one kernel cache for both
//! let config = StoreConfig::new(model.clone(), Placement::Host, 1 << 22);
//! let mut store = KeyStore::with_kernels(gpu.clone(), config, jit.as_ref())?;
//! let sigma2 = vec![1.0f32; layers * heads * d]; // calibrated channel variances (§3)
//! let calibration = Calibration::new(layers, heads, d).with_sigma2(sigma2)?;
//! let mut decoder = Decoder::with_kernels(gpu.clone(), model, DecoderConfig::default(), jit)?
//!     .with_calibration(calibration)?;
//!
//! // Prefill: bf16 bits [H][n][D] of every layer, from the model's prefill on the device.
//! let seq = store.create_sequence();
//! let rows = gpu.upload(&vec![0x3f00u16; heads * 5000 * d])?;
//! for layer in 0..layers {
//!     store.prefill(seq, layer, &rows, &rows)?;
//! }
//! // Decode: per layer, a step over the store's view, then the new token's K and V.
//! let queries = gpu.upload(&vec![0.5f32; heads * g * d])?; // [B][H][G][D]
//! let token = gpu.upload(&vec![0x3f00u16; heads * d])?; // [B][H][D]
//! for _ in 0..100 {
//!     for layer in 0..layers {
//!         let view = store.layer_view(&[seq], layer)?;
//!         let request = StepRequest::new(Method::Fathom { bits: 48.0 }, 256);
//!         let _attention = decoder.step(&view, &queries, request)?; // out() feeds the layer
//!         store.append(&[seq], layer, &token, &token)?;
//!     }
//! }
//! store.check()?; // bad keys of the appended blocks, if any
//! store.free_sequence(seq)?;
//! # Ok(())
//! # }
//! ```

pub mod abi;
pub mod ceilings;
pub mod embedded;
pub mod foreign;
pub mod gpu;
pub mod jit;
pub mod launch;
pub mod numa;
pub mod pariskv;
pub mod shard;
pub mod step;
pub mod store;
pub mod tuning;
pub mod view;
