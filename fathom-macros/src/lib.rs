//! `fathom-macros`: renders a list of kernel specs at build time into embedded CUDA sources and
//! typed launch functions.
//!
//! [`kernels!`] takes a module that lists model presets and kernel specs. At expansion time it
//! validates every spec, renders it with `codegen` (the same templates and the same code as
//! `codegen::render_any`, so the source is identical to the CLI's), reads each entry point's
//! parameter list out of the rendered source, and writes a module holding, for every kernel:
//!
//! - `pub const <KERNEL_NAME>_SOURCE: &str`, the CUDA source;
//! - per entry point, `pub const <ENTRY_NAME>_ENTRY: &str`, its name (for `Module::function`),
//!   and a launcher `pub fn <entry_name>(gpu, function, launch, ...)` with one typed argument
//!   per kernel parameter, in the kernel's order;
//!
//! and `pub const SOURCES: &[(&str, &str)]`, every `(kernel name, source)` in order. A kernel
//! listed twice (a spec that a preset also gives) appears once.
//!
//! ```no_run
//! fathom_macros::kernels! {
//!     /// Doc comments and other attributes pass through to the module.
//!     pub mod qwen3_kernels {
//!         // Every kernel of the preset's default set (`codegen::kernels_for`); `block` and
//!         // `segment_words` may follow: `preset("qwen3-8b", block = 32)`.
//!         preset("qwen3-8b");
//!         // One spec: the family, then every field of its spec struct (`codegen::spec`).
//!         scan(head_dim = 128, group = 7, block = 64, segment_words = 512, tile_words = 16,
//!              threads = 256, placement = hbm);
//!         select(group = 4, k_max = 2048, threads = 256, items_per_thread = 16);
//!         plan(head_dim = 128, group = 4, block = 64, segment_words = 512,
//!              method = sparq(r = 16), rotate = false, threads = 256);
//!     }
//! }
//!
//! use codegen::spec::{Placement, ScanSpec};
//! use runtime::jit::Jit;
//! use runtime::launch::{DevicePtr, Launch};
//!
//! fn scores(jit: Jit) -> Result<(), Box<dyn std::error::Error>> {
//!     use qwen3_kernels as k;
//!     // The one road to a module: the JIT, which finds the embedded source of a spec in the
//!     // module's `SOURCES` before it would render it, and compiles it once for the device.
//!     let jit = jit.with_sources(k::SOURCES);
//!     let gpu = jit.gpu().clone();
//!     let spec = ScanSpec { head_dim: 128, group: 7, block: 64, segment_words: 512,
//!                           tile_words: 16, threads: 256, placement: Placement::Hbm,
//!                           tensor_cores: false, peaks: false };
//!     let kernel = jit.kernel(&spec.into())?;
//!     let scan = kernel.function(k::FATHOM_SCAN_D128_G7_B64_S512_W16_HBM_T256_ENTRY)?;
//!     let gpu = &*gpu;
//!     let (batch, heads, max_seg, ld) = (1usize, 8usize, 1usize, 32_768usize);
//!     let runs = gpu.filled::<u64>(batch * heads * max_seg * 128 * 4, 0)?;
//!     let class_count = gpu.filled::<u32>(batch * heads * 4, 0)?;
//!     let q_store = gpu.filled::<f32>(batch * heads * 7 * 128, 0)?;
//!     let n_stored = gpu.upload(&[0i32])?;
//!     let mut scores = gpu.filled::<f32>(batch * heads * 7 * ld, 0xff)?;
//!     let launch = Launch::new([32, max_seg as u32, (batch * heads) as u32], 256);
//!     k::fathom_scan_d128_g7_b64_s512_w16_hbm_t256(
//!         gpu, &scan, launch,
//!         &runs,          // const unsigned long long* runs: a `&DeviceBuffer<u64>`
//!         &class_count,   // const unsigned int* class_count
//!         q_store.ptr(),  // const float* q_store: or a `DevicePtr<f32>`
//!         &n_stored,      // const int* n_stored
//!         max_seg as i32, // int max_seg
//!         heads as i32,   // int n_heads
//!         &mut scores,    // float* scores: outputs need `&mut` (or a `DevicePtrMut<f32>`)
//!         ld as i32,      // int ld_scores
//!     )?;
//!     Ok(gpu.synchronize()?)
//! }
//! ```
//!
//! # Argument types
//!
//! Pointer parameters are typed by element and by whether the kernel writes through them
//! (`runtime::launch`): `const T*` takes `impl Into<DevicePtr<T>>` (`&DeviceBuffer<T>`,
//! `&MappedBuffer<T>`, `DevicePtr<T>`, `DevicePtrMut<T>`), `T*` takes
//! `impl Into<DevicePtrMut<T>>` (`&mut DeviceBuffer<T>`, `&mut MappedBuffer<T>`,
//! `DevicePtrMut<T>`), so an input passed where the kernel writes does not compile. Pointer
//! tables nest: `const unsigned short* const* k_rows` is `DevicePtr<DevicePtr<u16>>`, a buffer
//! of `DevicePtr<u16>`; `unsigned long long* const* seg_words` is
//! `DevicePtr<DevicePtrMut<u64>>`. Element types: `unsigned short` → `u16` (bf16 and fp16
//! bits; `DevicePtr::cast` retypes a `half` buffer), `unsigned char` → `u8`, `int` → `i32`,
//! `unsigned int` → `u32`, `unsigned long long` → `u64`, `float` → `f32`. Values: `int` → `i32`,
//! `unsigned int` → `u32`, `unsigned long long` → `u64`, `float` → `f32`. Optional pointers
//! take `DevicePtr::null()`.
//!
//! # Field values
//!
//! Integers, `true`/`false`, and enum variants by name: `placement = hbm`, `mode = append`,
//! `method = fathom`, `method = sparq(r = 16)` (a variant with fields). Values are deserialised
//! into the family's spec struct, so every field of the struct is accepted, by its name.
//!
//! # Errors
//!
//! A bad spec is a compile error at the argument at fault, with the message of
//! `codegen::spec::SpecError` (or `codegen::model::ModelError` for a preset), which names the
//! field and what is allowed:
//!
//! ```text
//! error: invalid scan spec: `head_dim` is 96; allowed: 64, 128 or 256
//!   |     scan(head_dim = 72, group = 4, ...);
//!   |                     ^^
//! ```
//!
//! Unknown families, unknown, repeated or missing fields, values of the wrong type and unknown
//! presets are reported the same way.
//!
//! # The runtime crate
//!
//! The generated code names the runtime as `::runtime`: depend on `fathom-runtime` under that
//! name (`runtime = { package = "fathom-runtime", ... }`, as the workspace does). Under another
//! name or path, say so with an attribute on the module:
//! `#[fathom(runtime = ::fathom_runtime)] pub mod kernels { ... }`.

mod abi;
mod expand;
mod input;
mod specs;

use proc_macro::TokenStream;

/// One argument struct per entry point of each listed family variant, read from the rendered
/// signature of a representative spec: `sel: DevicePtrMut<i32>` for `int* sel`, and so on, in
/// the kernel's order, with `runtime::launch::KernelArgs`. The runtime declares its ABI with it
/// (`runtime::abi`):
///
/// ```ignore
/// fathom_macros::abi! {
///     #[fathom(runtime = crate)]
///     pub mod abi {
///         scan = scan(head_dim = 128, group = 4, block = 64, segment_words = 512,
///                     tile_words = 16, threads = 256, placement = hbm);
///     }
/// }
/// // abi::scan::Args { runs, class_count, q_store, n_stored, max_seg, n_heads, scores, ld_scores }
/// ```
///
/// A template whose signature changes changes the struct, so every stale call site fails to
/// compile; `SIGNATURES` lists every struct's parameters for the test that renders each family's
/// specs and checks their signatures are among them.
#[proc_macro]
pub fn abi(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as abi::AbiInput);
    abi::expand(input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Renders kernel specs into a module of CUDA sources and typed launchers; see the
/// [crate documentation](crate).
#[proc_macro]
pub fn kernels(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as input::KernelsInput);
    expand::expand(input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
