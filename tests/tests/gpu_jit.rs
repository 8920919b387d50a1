//! The JIT on a GPU: a preset's whole kernel set loads cold (compiled) then warm (from the disk
//! cache) with every entry point resolved; a damaged entry is rebuilt and loads; a kernel loaded
//! through the cache computes bit for bit what the same kernel built directly by
//! `codegen::emit::build_kernel` computes. Every test uses its own temporary cache directory.

use std::fs;
use std::sync::Arc;

use codegen::emit::build_kernel;
use codegen::kernels::{kernels_for, KernelSetOptions};
use codegen::model::{preset, Basis, ModelShape};
use codegen::spec::{KernelSpec, OracleSpec, Placement};
use fathom_tests::select_kernels::{dot_tolerance, HeadTable, POISON};
use fathom_tests::{gpu_test, inputs};
use half::bf16;
use rand::Rng;
use reference::score::score_exact;
use runtime::abi;
use runtime::gpu::Gpu;
use runtime::jit::{CorruptReason, CudaFunction, Jit, JitCache, JitError, ModuleImage, Origin};
use runtime::launch::{DevicePtr, KernelArgs};

fn qwen3_8b_set() -> Vec<KernelSpec> {
    kernels_for(&preset("qwen3-8b").unwrap(), &KernelSetOptions::default())
}

fn jit(gpu: &Arc<Gpu>, dir: &std::path::Path) -> Jit {
    Jit::new(gpu.clone(), JitCache::new(dir.to_path_buf())).expect("NVRTC loads")
}

// Every kernel of the shapes beyond the presets compiles for this GPU's own architecture and
// loads with every entry point: Phi-3-mini (D = 96, G = 1), GLM-4-9B (G = 16), and D = 80
// and 192 (ParisKV zero-pads all three).
gpu_test!(the_sets_of_every_gqa_shape_load, |t| {
    let dir = tempfile::tempdir().unwrap();
    let jit = jit(&t.gpu, dir.path());
    for (head_dim, query_heads, kv_heads) in [(96, 32, 32), (128, 32, 2), (80, 10, 2), (192, 32, 2)]
    {
        let shape = ModelShape {
            name: format!("d{head_dim}"),
            layers: 2,
            query_heads,
            kv_heads,
            head_dim,
            qk_norm: false,
            basis: Basis::Klt,
        };
        let specs = kernels_for(&shape, &KernelSetOptions::default());
        let set = jit.load_set(&specs).unwrap();
        assert_eq!(set.kernels.len(), specs.len());
        for spec in &specs {
            let kernel = jit.kernel(spec).unwrap();
            for entry in spec.entry_points() {
                kernel
                    .function(&entry)
                    .unwrap_or_else(|e| panic!("{}: {e}", kernel.name));
            }
        }
    }
});

gpu_test!(the_qwen3_8b_set_loads_cold_then_warm_from_the_cache, |t| {
    let dir = tempfile::tempdir().unwrap();
    let specs = qwen3_8b_set();

    let cold_jit = jit(&t.gpu, dir.path());
    let cold = cold_jit.load_set(&specs).unwrap();
    eprintln!("cold:\n{}", cold.table());
    assert_eq!(cold.compiled, specs.len());
    assert_eq!(cold_jit.cache().stats().compiled, specs.len() as u64);
    for spec in &specs {
        let kernel = cold_jit.kernel(spec).unwrap();
        assert_eq!(kernel.name, spec.kernel_name());
        for entry in spec.entry_points() {
            kernel
                .function(&entry)
                .unwrap_or_else(|e| panic!("{}: {e}", kernel.name));
        }
        match kernel.function("no_such_entry") {
            Err(JitError::UnknownEntryPoint { known, .. }) => {
                assert_eq!(known, spec.entry_points())
            }
            other => panic!("{}: expected UnknownEntryPoint, got {other:?}", kernel.name),
        }
    }
    // The same JIT again: everything is in memory.
    let again = cold_jit.load_set(&specs).unwrap();
    assert!(again.kernels.iter().all(|k| k.reused));

    let warm_jit = jit(&t.gpu, dir.path());
    let warm = warm_jit.load_set(&specs).unwrap();
    eprintln!("warm:\n{}", warm.table());
    assert_eq!(warm.cache_hits, specs.len());
    assert!(warm.kernels.iter().all(|k| k.from == Origin::CacheHit));
    let stats = warm_jit.cache().stats();
    assert_eq!((stats.hits, stats.compiled), (specs.len() as u64, 0));
    for spec in &specs {
        let (cold_k, warm_k) = (
            cold_jit.kernel(spec).unwrap(),
            warm_jit.kernel(spec).unwrap(),
        );
        assert_eq!(cold_k.key, warm_k.key);
        assert_eq!(cold_k.source_sha256, warm_k.source_sha256);
        for entry in spec.entry_points() {
            warm_k.function(&entry).unwrap();
        }
    }
});

fathom_macros::kernels! {
    /// What a user's crate embeds for its own model: here the oracle kernel of `oracle_spec()`.
    mod user_kernels {
        oracle(head_dim = 128, group = 4, threads = 256, placement = hbm);
    }
}

gpu_test!(
    a_user_crate_s_embedded_kernels_load_through_the_jit_and_compute_the_same_scores,
    |t| {
        let dir = tempfile::tempdir().unwrap();
        let spec: KernelSpec = oracle_spec().into();
        let name = spec.kernel_name();
        let embedded = jit(&t.gpu, dir.path()).with_sources(user_kernels::SOURCES);
        let kernel = embedded.kernel(&spec).unwrap();
        assert_eq!(
            kernel.source_sha256,
            codegen::emit::sha256_hex(user_kernels::FATHOM_ORACLE_D128_G4_T256_HBM_SOURCE)
        );
        assert_eq!(kernel.from, Origin::Compiled, "a fresh cache compiles");

        let (d, heads) = (128, 3);
        let n = t.rng.gen_range(1..2000);
        let keys: Vec<Vec<bf16>> = (0..heads).map(|_| inputs::keys(&mut t.rng, n, d)).collect();
        let queries = inputs::vectors(&mut t.rng, heads * 4, d);
        let got = run_oracle(
            &t.gpu,
            kernel.function(&name).unwrap(),
            &keys,
            &queries,
            n,
            n + 3,
        );
        let want = direct_scores(&t.gpu, &keys, &queries, n, n + 3);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want));
        assert!(got
            .iter()
            .any(|x| x.to_bits() != u32::from_ne_bytes([POISON; 4])));
    }
);

fn oracle_spec() -> OracleSpec {
    OracleSpec {
        head_dim: 128,
        group: 4,
        threads: 256,
        placement: Placement::Hbm,
        kv_rows: codegen::spec::KvRows::Separate,
    }
}

gpu_test!(a_truncated_entry_is_rebuilt_and_loads, |t| {
    let dir = tempfile::tempdir().unwrap();
    let spec: KernelSpec = oracle_spec().into();
    let first = jit(&t.gpu, dir.path()).kernel(&spec).unwrap();
    assert_eq!(first.from, Origin::Compiled);
    let path = dir.path().join(format!("{}.ptx", first.key));
    let good = fs::read(&path).unwrap();
    fs::write(&path, &good[..good.len() / 2]).unwrap();

    let second_jit = jit(&t.gpu, dir.path());
    let second = second_jit.kernel(&spec).unwrap();
    assert_eq!(second.from, Origin::Compiled);
    assert!(
        matches!(second.rebuilt, Some(CorruptReason::BodyHash { .. })),
        "{:?}",
        second.rebuilt
    );
    second.function(&spec.kernel_name()).unwrap();
    assert_eq!(second_jit.cache().stats().corrupt_rebuilt, 1);
    assert_eq!(fs::read(&path).unwrap(), good);
    assert_eq!(
        jit(&t.gpu, dir.path()).kernel(&spec).unwrap().from,
        Origin::CacheHit
    );
});

/// Scores of the oracle kernel `function` (of `oracle_spec()`) on the given keys and queries.
fn run_oracle(
    gpu: &Gpu,
    function: &CudaFunction,
    keys: &[Vec<bf16>],
    queries: &[f32],
    n: usize,
    ld: usize,
) -> Vec<f32> {
    let spec = oracle_spec();
    let (heads, g) = (keys.len(), spec.group as usize);
    let bits: Vec<Vec<u16>> = keys
        .iter()
        .map(|k| k.iter().map(|x| x.to_bits()).collect())
        .collect();
    let k_rows = HeadTable::upload(gpu, spec.placement, &bits).unwrap();
    let q = gpu.upload(queries).unwrap();
    let ends = gpu.upload(&[n as i32]).unwrap();
    let mut scores = gpu.filled::<f32>(heads * g * ld, POISON).unwrap();
    let launch = spec.launch(1, heads as u64, n as u64).unwrap();
    abi::oracle::Args {
        k_rows: k_rows.table.ptr().cast(),
        q: q.ptr(),
        range_start: DevicePtr::null(),
        range_end: ends.ptr(),
        scores: scores.ptr_mut(),
        ld_scores: ld as i32,
        num_kv_heads: heads as i32,
    }
    .launch(gpu, function, launch)
    .unwrap();
    gpu.synchronize().unwrap();
    scores.download().unwrap()
}

/// [`run_oracle`] with `oracle_spec()` built directly (`codegen::emit::build_kernel`), past the
/// JIT: what a kernel through the JIT must compute bit for bit.
fn direct_scores(gpu: &Gpu, keys: &[Vec<bf16>], queries: &[f32], n: usize, ld: usize) -> Vec<f32> {
    let spec: KernelSpec = oracle_spec().into();
    let direct = build_kernel(&spec, &gpu.info().arch()).unwrap();
    let module = gpu.load_ptx(&direct.ptx).unwrap();
    let function = module.function(&spec.kernel_name()).unwrap();
    run_oracle(gpu, &function, keys, queries, n, ld)
}

gpu_test!(
    a_kernel_through_the_cache_computes_what_a_direct_build_computes,
    |t| {
        let dir = tempfile::tempdir().unwrap();
        let spec = oracle_spec();
        let kernel_spec: KernelSpec = spec.into();
        let name = kernel_spec.kernel_name();
        let (d, g, heads) = (spec.head_dim as usize, spec.group as usize, 2);

        let n = t.rng.gen_range(500..3000);
        let ld = n + 5;
        let keys: Vec<Vec<bf16>> = (0..heads).map(|_| inputs::keys(&mut t.rng, n, d)).collect();
        let queries = inputs::vectors(&mut t.rng, heads * g, d);

        let want = direct_scores(&t.gpu, &keys, &queries, n, ld);

        // Compiled into the cache by one JIT, then read from it by another.
        jit(&t.gpu, dir.path()).kernel(&kernel_spec).unwrap();
        let cached_jit = jit(&t.gpu, dir.path());
        let cached = cached_jit.kernel(&kernel_spec).unwrap();
        assert_eq!(cached.from, Origin::CacheHit);
        let got = run_oracle(
            &t.gpu,
            cached.function(&name).unwrap(),
            &keys,
            &queries,
            n,
            ld,
        );

        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "the cached kernel's scores differ");
        // And both are the oracle's scores, so the comparison is not of two failures.
        for (kh, k) in keys.iter().enumerate() {
            let qs = inputs::group_queries(&queries, kh, g, d);
            let exact = score_exact(k, d, 0..n, &qs);
            for (h, q) in qs.iter().enumerate() {
                for i in 0..n {
                    let s = f64::from(got[(kh * g + h) * ld + i]);
                    let key = k[i * d..(i + 1) * d].iter().map(|x| x.to_f64());
                    let tol = dot_tolerance(q, key);
                    assert!(
                        (s - exact[h][i]).abs() <= tol,
                        "head {kh} g {h} token {i}: {s} vs {}",
                        exact[h][i]
                    );
                }
            }
        }
    }
);

// The CUBIN road (the default; `FATHOM_JIT_IMAGE=ptx` or `Jit::with_image` for the other):
// NVRTC's machine code, cached beside the PTX, loads and computes bit for bit what the PTX road
// computes (both are ptxas's output of the same PTX), cold and then from the cache.
gpu_test!(
    a_kernel_from_its_cubin_computes_what_its_ptx_computes,
    |t| {
        let dir = tempfile::tempdir().unwrap();
        let spec = oracle_spec();
        let kernel_spec: KernelSpec = spec.into();
        let name = kernel_spec.kernel_name();
        let (d, g, heads) = (spec.head_dim as usize, spec.group as usize, 3);
        let n = t.rng.gen_range(700..2500);
        let ld = n + 3;
        let keys: Vec<Vec<bf16>> = (0..heads).map(|_| inputs::keys(&mut t.rng, n, d)).collect();
        let queries = inputs::vectors(&mut t.rng, heads * g, d);
        let want = direct_scores(&t.gpu, &keys, &queries, n, ld);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();

        for expect in [Origin::Compiled, Origin::CacheHit] {
            let cubin_jit = jit(&t.gpu, dir.path()).with_image(ModuleImage::Cubin);
            let kernel = cubin_jit.kernel(&kernel_spec).unwrap();
            assert_eq!((kernel.from, kernel.image), (expect, ModuleImage::Cubin));
            let got = run_oracle(
                &t.gpu,
                kernel.function(&name).unwrap(),
                &keys,
                &queries,
                n,
                ld,
            );
            assert_eq!(
                bits(&got),
                bits(&want),
                "{expect:?}: the CUBIN's scores differ"
            );
        }
        // The PTX road, in the same directory, is untouched by the CUBIN entries.
        let ptx = jit(&t.gpu, dir.path()).with_image(ModuleImage::Ptx);
        assert_eq!(ptx.kernel(&kernel_spec).unwrap().from, Origin::Compiled);
    }
);
