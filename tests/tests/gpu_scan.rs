//! GPU tests of the `scan` family (SPEC §6; `templates/scan.cu.tera`) against the f64 reference
//! scores (`reference::score::score_stored`, which decodes every channel with the
//! reference store's own `decode`), and of the `gather` family (SPEC §7.2;
//! `templates/gather.cu.tera`) against the store it copies from.
//!
//! Scan: the store is the reference `HeadStore` of random keys, laid out by `DeviceStore` in
//! device memory (`hbm`) or in mapped host memory (`host`); the plan of every `(b, h)` comes from
//! the reference planner (`fathom` at budgets 24, 48 and 92 with the uncalibrated `σ²`, the mean
//! square scale; `sparq(32)`; `uniform(4)`, every channel at depth 4; and the all-zero plan,
//! whose scores must be exactly 0), the run table and class counts are built on the CPU
//! (`store_kernels::run_tables`), the queries are random f32. Every stored token of every head
//! is compared (at 1M tokens, a random sample, see below); tokens at and past `n_stored` must
//! keep the scores buffer's poison.
//!
//! Tolerance, per score: `reference::score::scan_tolerance`, which says why. For the plain scan
//! `|gpu − ref| <= (m + 2)·2⁻²⁴·Σ_c |q_c·x̂_c| + 1e-30`, `m` the active channels; for the
//! tensor-core one (`ScanSpec::tensor_cores`, weights as fp16 high and low parts) a bound of
//! `2⁻²¹·(P + 4)` times the pieces' `Δ·2^(2−k)·(|q_c| + max|q|)`, `P` the active pieces.
//!
//! Shapes: G = 1, 4, 7, 8, 16 × every D of §1 (`fathom_tests::shapes`) with BLK 32/64/128 cycling and tiles of 1, 2, 4 and
//! 8 tokens per thread; one block alone; `B = 3` sequences of different lengths (several
//! segments, a partial last segment, one block, none); and one head of 1M tokens (D = 128,
//! G = 4; HBM, host fused, and host staged through gather). At 1M tokens the test checks every
//! score is written and finite, and compares a random sample of 20,000 token positions (plus
//! the first and last token of every segment) with the reference: the f64 reference over all
//! 1M × 4 scores per plan would dominate the test's time. The reference store itself is built
//! from all 1M keys.
//!
//! Peaks (`ScanSpec::peaks`, `templates/scan_peaks.cuh.tera`): a scan with peaks writes the same
//! scores, bit for bit, as the scan without (and so matches the reference as it does), and
//! every 32-token half holding a scored token gets the largest `order_key` (computed here by
//! `codegen::spec::peaks::order_key`, bit-exact with `templates/select_common.cuh.tera`'s) of the kernel's own
//! scores of that half; every other entry keeps the buffer's poison (0xDEADBEEF). Checked for the
//! plain and tensor-core scans, both placements, G = 4 and 7, 1 to 8 tokens a thread and the
//! default tiles, lengths that stop inside a half and a tile (the stores hold whole blocks; the
//! scan is told fewer tokens), one block and none, on every plan; and on a third of the shape
//! cases of the tests above.
//!
//! The plans, cases and checks are `fathom_tests::scan_check`'s, which `cpu_scan.rs` shares to
//! run the same checks on the CPU emulator.
//!
//! Gather: after the plan kernel (`fathom(48)`, `sparq(32)`) writes the source and staged run
//! tables, gather copies every active run; the staging equals the source runs word for word
//! and scale for scale, and every other staging word and scale (inactive slots, segments past
//! the store, a plan that exceeds the staging) keeps its poison. The scan of the staged table
//! then matches the reference like the scan of the source table.

use codegen::spec::peaks::order_key;
use codegen::spec::shape::HEAD_DIMS;
use codegen::spec::{Family, GatherSpec, KvRows, Placement, PlanMethod, PlanSpec, ScanSpec};
use fathom_tests::device_store::{random_device_stores, DeviceStore};
use fathom_tests::scan_check::{
    batch_depths, check_peaks, check_same_scores, check_score, compare_scores, reference_depths,
    PlanKind, ScanCase, PEAKS_POISON, PLANS,
};
use fathom_tests::shapes::GROUPS;
use fathom_tests::store_kernels::{
    download, run_gather, run_plan, run_scan, run_scan_peaks, run_tables, slot_order, upload,
    Kernel, Mismatches, PlanInputs, Staging, TableShape,
};
use fathom_tests::{gpu_test, inputs};
use rand::seq::SliceRandom;
use rand::Rng;
use reference::store::{BlockSize, HeadStore, StoreLayout};
use runtime::gpu::Gpu;

#[test]
fn order_key_orders_scores_as_the_select_does() {
    assert_eq!(order_key(0.0), 0x8000_0000);
    assert_eq!(order_key(-0.0), order_key(0.0));
    assert_eq!(order_key(1.0), 0xbf80_0000);
    assert_eq!(order_key(-1.0), 0x407f_ffff);
    let ascending = [
        f32::NEG_INFINITY,
        f32::MIN,
        -2.5,
        -1.0,
        -f32::MIN_POSITIVE,
        -f32::from_bits(1),
        0.0,
        f32::from_bits(1),
        f32::MIN_POSITIVE,
        1.0,
        2.5,
        f32::MAX,
        f32::INFINITY,
    ];
    for pair in ascending.windows(2) {
        assert!(
            order_key(pair[0]) < order_key(pair[1]),
            "{} {}",
            pair[0],
            pair[1]
        );
    }
    // NaNs by their bits, as the CUDA function maps them.
    let nan = f32::from_bits(0x7fc0_0000);
    let negative_nan = f32::from_bits(0xffc0_0000);
    assert_eq!(order_key(nan), 0xffc0_0000);
    assert!(order_key(nan) > order_key(f32::INFINITY));
    assert_eq!(order_key(negative_nan), 0x003f_ffff);
    assert!(order_key(negative_nan) < order_key(f32::NEG_INFINITY));
    assert_eq!(order_key(f32::from_bits(u32::MAX)), 0);
}

/// The kernels take the largest raw key (`fathom_raw_key`: order_key but -0 at 0x7fffffff) and
/// map 0x7fffffff to +0's key once per half (`fathom_peak_key`): the same as the largest
/// order key over any set of scores, tokens past `n_stored` counting as key 0.
#[test]
fn the_kernels_raw_keys_give_the_largest_order_key() {
    let raw_key = |s: f32| {
        let bits = s.to_bits();
        bits ^ (((bits as i32) >> 31) as u32 | 0x8000_0000)
    };
    let peak_key = |raw: u32| if raw == 0x7fff_ffff { 0x8000_0000 } else { raw };
    let values = [
        -0.0,
        0.0,
        -1.0,
        1.0,
        -f32::from_bits(1),
        f32::from_bits(1),
        f32::NEG_INFINITY,
        f32::INFINITY,
        f32::from_bits(0x7fc0_0000),
        f32::from_bits(0xffc0_0000),
        f32::from_bits(u32::MAX),
        -3.5e-20,
    ];
    for (i, &s) in values.iter().enumerate() {
        let order = order_key(s);
        if s.to_bits() != 0x8000_0000 {
            assert_eq!(raw_key(s), order, "{s}");
        }
        // Every set of up to three of the values.
        for &t in &values[i..] {
            for &u in &values {
                let set = [s, t, u];
                let want = set.iter().map(|&x| order_key(x)).max().unwrap();
                let got = peak_key(set.iter().map(|&x| raw_key(x)).max().unwrap());
                assert_eq!(got, want, "{set:?}");
            }
        }
    }
    // A half of one -0 and tokens past n_stored (raw key 0).
    assert_eq!(
        peak_key([raw_key(-0.0), 0, 0].into_iter().max().unwrap()),
        order_key(-0.0)
    );
}

/// Scans the case's random store with reference plans on the CPU-built source run table. The
/// stores hold whole blocks (`n_stored` rounded up); the scan is told `n_stored`.
fn scan_case(gpu: &Gpu, rng: &mut impl Rng, seed: u64, case: &ScanCase) {
    let ScanCase { d, g, .. } = *case;
    let (batch, heads) = (case.n_stored.len(), case.heads);
    let (layout, stored) = case.layout_and_stored();
    let (stores, store, shape) =
        random_device_stores(gpu, rng, layout, case.placement, &stored, heads);
    let queries = inputs::vectors(rng, batch * heads * g, d);
    let offset = rng.gen_range(0..PLANS.len());
    let depths = batch_depths(&PLANS, offset, &stores, &queries, g);
    let (runs, _, counts) = run_tables(&shape, &store, &stored, &depths, None);
    let n_scored: Vec<i32> = case.n_stored.iter().map(|&n| n as i32).collect();
    let (runs, counts, q_store, n_scored_buffer) = (
        upload(gpu, &runs, "runs"),
        upload(gpu, &counts, "class_count"),
        upload(gpu, &queries, "q_store"),
        upload(gpu, &n_scored, "n_stored"),
    );
    let spec = ScanSpec {
        peaks: false,
        ..case.spec()
    };
    let kernel = Kernel::compile(gpu, spec);
    let ld_scores = case.n_stored.iter().max().unwrap() + 64;
    let scores = run_scan(
        gpu,
        &kernel,
        &spec,
        &shape,
        &runs,
        &counts,
        &q_store,
        &n_scored_buffer,
        ld_scores,
    );
    let label = format!(
        "{} n_stored {:?} plans from {offset}",
        kernel.name(),
        case.n_stored
    );
    compare_scores(
        &scores,
        &case.n_stored,
        &stores,
        &depths,
        &queries,
        g,
        ld_scores,
        &label,
        seed,
        spec.tensor_cores,
    )
    .assert_none();
    if !case.peaks {
        return;
    }
    let spec = case.spec();
    let kernel = Kernel::compile(gpu, spec);
    // One more half than the longest row needs: its entries stay poison.
    let ld_peaks = ld_scores.div_ceil(32) + 1;
    let (peak_scores, peaks) = run_scan_peaks(
        gpu,
        &kernel,
        &spec,
        &shape,
        &runs,
        &counts,
        &q_store,
        &n_scored_buffer,
        (ld_scores, ld_peaks),
        PEAKS_POISON,
    );
    let label = format!(
        "{} n_stored {:?} plans from {offset}",
        kernel.name(),
        case.n_stored
    );
    check_same_scores(&peak_scores, &scores, ld_scores, &label, seed).assert_none();
    check_peaks(
        &peak_scores,
        &peaks,
        &case.n_stored,
        heads,
        g,
        (ld_scores, ld_peaks),
        &label,
        seed,
    )
    .assert_none();
}

/// Tiles `(tile_words, threads)` of 1, 2, 4 and 8 tokens per thread.
const TILES: [(usize, usize); 5] = [(2, 128), (4, 128), (8, 128), (8, 64), (16, 256)];

fn shapes_cases(rng: &mut impl Rng, placement: Placement) -> Vec<ScanCase> {
    let mut cases = Vec::new();
    for (i, g) in GROUPS.map(|g| g as usize).into_iter().enumerate() {
        for (j, d) in HEAD_DIMS.into_iter().enumerate() {
            let blk = [32, 64, 128][(i + j) % 3];
            let (tile_words, threads) = TILES[(3 * i + j) % TILES.len()];
            let segment_words = 16;
            let seg_tokens = 64 * segment_words;
            // Several segments with a partial last one, one block, none.
            let long = blk * rng.gen_range(2 * seg_tokens / blk + 1..4 * seg_tokens / blk);
            cases.push(ScanCase {
                d,
                g,
                blk,
                segment_words,
                tile_words,
                threads,
                placement,
                n_stored: vec![long, blk, 0],
                heads: 2,
                tensor_cores: false,
                peaks: (i + j) % 3 == 0,
            });
        }
    }
    cases
}

gpu_test!(gpu_scan_hbm_matches_reference, |t| {
    for case in shapes_cases(&mut t.rng, Placement::Hbm) {
        scan_case(&t.gpu, &mut t.rng, t.seed, &case);
    }
});

gpu_test!(gpu_scan_host_fused_matches_reference, |t| {
    for case in shapes_cases(&mut t.rng, Placement::Host) {
        scan_case(&t.gpu, &mut t.rng, t.seed, &case);
    }
    // The host default tilings: 64-word tiles of 1024 threads, and for G > 8 32-word tiles of 512.
    let defaults = [
        (4, 128, 64),
        (7, 128, 32),
        (8, 256, 128),
        (16, 96, 64),
        (16, 192, 128),
    ];
    for (g, d, blk) in defaults {
        let tile = ScanSpec::new(d, g, Placement::Host);
        let case = ScanCase {
            d,
            g,
            blk,
            segment_words: 64,
            tile_words: tile.tile_words,
            threads: tile.threads,
            placement: Placement::Host,
            n_stored: vec![blk * t.rng.gen_range(64..160), 0, 2 * blk],
            heads: 2,
            tensor_cores: false,
            peaks: false,
        };
        scan_case(&t.gpu, &mut t.rng, t.seed, &case);
    }
});

// The tensor-core variant on the shapes of the two tests above (where its registers do not
// allow the case's tile, 8-word tiles of 128 threads), on one block, and at the HBM default
// tile; the 1M-token test below runs it too.
gpu_test!(gpu_scan_tensor_cores_match_reference, |t| {
    for placement in [Placement::Hbm, Placement::Host] {
        for case in shapes_cases(&mut t.rng, placement) {
            let mut case = ScanCase {
                tensor_cores: true,
                ..case
            };
            if case.spec().validate().is_err() {
                (case.tile_words, case.threads) = (8, 128);
            }
            scan_case(&t.gpu, &mut t.rng, t.seed, &case);
        }
    }
    for blk in [32, 64, 128] {
        for (tile_words, threads, segment_words) in [(2, 64, 2), (16, 256, 32)] {
            let case = ScanCase {
                d: 128,
                g: 4,
                blk,
                segment_words,
                tile_words,
                threads,
                placement: Placement::Hbm,
                n_stored: vec![blk, 64 * segment_words + blk, 0],
                heads: 3,
                tensor_cores: true,
                peaks: false,
            };
            for _ in 0..2 {
                scan_case(&t.gpu, &mut t.rng, t.seed, &case);
            }
        }
    }
});

gpu_test!(gpu_scan_one_block, |t| {
    for placement in [Placement::Hbm, Placement::Host] {
        for blk in [32, 64, 128] {
            let case = ScanCase {
                d: 128,
                g: 4,
                blk,
                segment_words: 2,
                tile_words: 2,
                threads: 64,
                placement,
                n_stored: vec![blk],
                heads: 1,
                tensor_cores: false,
                peaks: false,
            };
            // Every plan on the one head.
            for _ in 0..PLANS.len() {
                scan_case(&t.gpu, &mut t.rng, t.seed, &case);
            }
        }
    }
});

// Peaks (`ScanSpec::peaks`) at their edges: plain and tensor-core scans, HBM and host, G = 4 and
// 7, 1, 2, 4 and 8 tokens a thread and the default tile of the placement; in each batch a row of
// several 4,096-token segments that stops inside a 32-token half (odd), one of 45 tokens (a
// half and a part, inside the first tile), one block, and none; 3 heads a sequence, so the plans
// (fathom, sparq, all depth 4, all depth 0) each fall on two rows.
gpu_test!(gpu_scan_peaks_are_the_largest_keys_of_each_half, |t| {
    let segment_words = 64;
    for tensor_cores in [false, true] {
        for placement in [Placement::Hbm, Placement::Host] {
            for g in [4, 7] {
                let default = ScanSpec::new(128, g, placement);
                let tiles = [
                    (2, 128),
                    (4, 128),
                    (8, 64),
                    (16, 256),
                    (default.tile_words, default.threads),
                ];
                for (k, (tile_words, threads)) in tiles.into_iter().enumerate() {
                    let blk = [32, 64, 128][k % 3];
                    let seg_tokens = 64 * segment_words;
                    let long = (blk
                        * t.rng
                            .gen_range(2 * seg_tokens / blk + 1..3 * seg_tokens / blk)
                        - t.rng.gen_range(1..32))
                        | 1;
                    let mut case = ScanCase {
                        d: 128,
                        g,
                        blk,
                        segment_words,
                        tile_words,
                        threads,
                        placement,
                        n_stored: vec![long, 45, blk, 0],
                        heads: 3,
                        tensor_cores,
                        peaks: true,
                    };
                    if case.spec().validate().is_err() {
                        // The tensor cores' registers do not allow the tile.
                        (case.tile_words, case.threads) = (8, 128);
                    }
                    scan_case(&t.gpu, &mut t.rng, t.seed, &case);
                }
            }
        }
    }
});

/// Checks the staging after gather: for each stored segment of each head, the active runs in
/// slot order (`depths`, from the plan kernel) equal the source segment's runs; every other
/// staging word and scale is poison. When the plan exceeds the staging, everything is poison.
#[allow(clippy::too_many_arguments)]
fn check_staging(
    staging: &Staging,
    shape: &TableShape,
    stores: &[Vec<HeadStore>],
    depths: &[Vec<Vec<u8>>],
    label: &str,
    seed: u64,
) {
    let layout = shape.layout;
    let (s_words, spc, d) = (
        layout.segment_words(),
        layout.scales_per_channel(),
        layout.head_dim(),
    );
    let words = download(&staging.words, "staging words");
    let scales = download(&staging.scales, "staging scales");
    let region_words = staging.planes * s_words;
    let region_scales = d * spc;
    let mut bad = Mismatches::new(format!("{label}: staging"), seed);
    for (b, sequence) in stores.iter().enumerate() {
        for (h, store) in sequence.iter().enumerate() {
            let plan = &depths[b][h];
            let planes: usize = plan.iter().map(|&t| t as usize).sum();
            let fits = planes <= staging.planes;
            for s in 0..shape.max_seg {
                let region = (b * shape.heads + h) * shape.max_seg + s;
                let got_words = &words[region * region_words..(region + 1) * region_words];
                let got_scales = &scales[region * region_scales..(region + 1) * region_scales];
                let mut want_words = vec![u64::MAX; region_words];
                let mut want_scales = vec![u16::MAX; region_scales];
                if fits && s < shape.stored_segments(store.stored_tokens()) {
                    let segment = &store.segments()[s];
                    let mut prefix = 0;
                    for (slot, &c) in slot_order(plan).iter().enumerate() {
                        let t = plan[c] as usize;
                        if t == 0 {
                            break;
                        }
                        for p in 0..t {
                            for j in 0..s_words {
                                want_words[(prefix + p) * s_words + j] =
                                    segment.words[layout.word_index(c, p, j)];
                            }
                        }
                        for k in 0..spc {
                            want_scales[slot * spc + k] = segment.scales[layout.scale_index(c, k)];
                        }
                        prefix += t;
                    }
                }
                for (i, (got, want)) in got_words.iter().zip(&want_words).enumerate() {
                    bad.check(got == want, || {
                        format!("b {b} h {h} segment {s} staged word {i}: {got:#018x}, want {want:#018x}")
                    });
                }
                for (i, (got, want)) in got_scales.iter().zip(&want_scales).enumerate() {
                    bad.check(got == want, || {
                        format!("b {b} h {h} segment {s} staged scale {i}: {got:#06x}, want {want:#06x}")
                    });
                }
            }
        }
    }
    bad.assert_none();
}

/// The copy-kernel transfer end to end: the plan kernel writes both run tables, gather fills the
/// staging (checked word for word), and the HBM scan of the staged table matches the
/// reference; the scan of the source table (HBM, or fused from host memory) too.
fn staged_pipeline(
    gpu: &Gpu,
    rng: &mut impl Rng,
    seed: u64,
    placement: Placement,
    method: PlanMethod,
    (g, d, blk): (usize, usize, usize),
) {
    let (heads, segment_words) = (2, 8);
    let layout = StoreLayout::new(d, BlockSize::from_tokens(blk).unwrap(), segment_words).unwrap();
    let seg_tokens = layout.segment_tokens();
    let n_stored = vec![
        blk * rng.gen_range(seg_tokens / blk + 1..3 * seg_tokens / blk),
        0,
        blk,
    ];
    let batch = n_stored.len();
    let (stores, store, shape) =
        random_device_stores(gpu, rng, layout, placement, &n_stored, heads);
    let queries = inputs::vectors(rng, batch * heads * g, d);
    let sigma2: Vec<f32> = stores
        .iter()
        .flatten()
        .flat_map(|s| s.mean_square_scale().into_iter().map(|x| x as f32))
        .collect();
    let plan_spec = PlanSpec {
        head_dim: d,
        group: g,
        block: blk,
        segment_words,
        method,
        rotate: false,
        threads: 256,
        tail: None,
        tail_kv_rows: KvRows::Separate,
        batched_runs: false,
        run_blocks: 1,
        paired_runs: false,
        direct_line: false,
    };
    let plan_kernel = Kernel::compile(gpu, plan_spec);
    let staging = Staging::new(gpu, &shape, 4 * d);
    let plan = run_plan(
        gpu,
        &plan_kernel,
        &plan_spec,
        &shape,
        &store,
        &PlanInputs {
            queries: &queries,
            sigma2: Some(&sigma2),
            fixed_channels: None,
            rotation: None,
            budget: 48.0,
        },
        Some(&staging),
    );
    let flat = download(&plan.depths, "depths");
    let depths: Vec<Vec<Vec<u8>>> = (0..batch)
        .map(|b| {
            (0..heads)
                .map(|h| flat[(b * heads + h) * d..(b * heads + h + 1) * d].to_vec())
                .collect()
        })
        .collect();
    let staged_runs = plan.staged_runs.as_ref().expect("staging was given");

    let gather_spec = GatherSpec {
        head_dim: d,
        block: blk,
        segment_words,
        loads_in_flight: 4,
        threads: 256,
    };
    let gather = Kernel::compile(gpu, gather_spec);
    run_gather(
        gpu,
        &gather,
        &gather_spec,
        &shape,
        &plan.runs,
        staged_runs,
        &plan.class_count,
        &store.n_stored,
    );
    let label = format!(
        "{} then {} ({placement:?} store) n_stored {n_stored:?}",
        plan_kernel.name(),
        gather.name()
    );
    check_staging(&staging, &shape, &stores, &depths, &label, seed);

    let ld_scores = n_stored.iter().max().unwrap() + 64;
    let q_store = download(&plan.q_store, "q_store");
    for (runs, scan_placement, what) in [
        (staged_runs, Placement::Hbm, "staged"),
        (&plan.runs, placement, "source"),
    ] {
        let spec = ScanSpec {
            head_dim: d,
            group: g,
            block: blk,
            segment_words,
            tile_words: 4,
            threads: 128,
            placement: scan_placement,
            tensor_cores: false,
            peaks: false,
        };
        let kernel = Kernel::compile(gpu, spec);
        let scores = run_scan(
            gpu,
            &kernel,
            &spec,
            &shape,
            runs,
            &plan.class_count,
            &plan.q_store,
            &store.n_stored,
            ld_scores,
        );
        let label = format!("{label}, {} on the {what} table", kernel.name());
        compare_scores(
            &scores, &n_stored, &stores, &depths, &q_store, g, ld_scores, &label, seed, false,
        )
        .assert_none();
    }
}

gpu_test!(gpu_gather_staging_equals_source_runs_hbm, |t| {
    for shape in [(1, 64, 32), (4, 128, 64), (8, 256, 128), (16, 96, 64)] {
        for method in [PlanMethod::Fathom, PlanMethod::Sparq { r: 32 }] {
            staged_pipeline(&t.gpu, &mut t.rng, t.seed, Placement::Hbm, method, shape);
        }
    }
});

gpu_test!(gpu_scan_host_staged_after_gather_matches_reference, |t| {
    for shape in [
        (7, 128, 32),
        (4, 64, 128),
        (8, 256, 64),
        (16, 80, 32),
        (5, 192, 64),
    ] {
        for method in [PlanMethod::Fathom, PlanMethod::Sparq { r: 32 }] {
            staged_pipeline(&t.gpu, &mut t.rng, t.seed, Placement::Host, method, shape);
        }
    }
});

// A plan that exceeds the staging: staged depths are 0, so gather copies nothing.
gpu_test!(gpu_gather_plan_over_staging_copies_nothing, |t| {
    let (g, d, blk, segment_words, heads) = (4, 128, 64, 4, 2);
    let layout = StoreLayout::new(d, BlockSize::from_tokens(blk).unwrap(), segment_words).unwrap();
    let n_stored = vec![5 * blk, 11 * blk];
    let stores = inputs::head_stores(&mut t.rng, layout, &n_stored, heads);
    let max_seg = 4;
    let store = DeviceStore::new(&t.gpu, Placement::Host, &stores, max_seg).unwrap();
    let shape = TableShape {
        batch: 2,
        heads,
        max_seg,
        layout,
    };
    let plan_spec = PlanSpec {
        head_dim: d,
        group: g,
        block: blk,
        segment_words,
        method: PlanMethod::Uniform { t: 4 },
        rotate: false,
        threads: 256,
        tail: None,
        tail_kv_rows: KvRows::Separate,
        batched_runs: false,
        run_blocks: 1,
        paired_runs: false,
        direct_line: false,
    };
    let plan_kernel = Kernel::compile(&t.gpu, plan_spec);
    let staging = Staging::new(&t.gpu, &shape, 4 * d - 1);
    let queries = inputs::vectors(&mut t.rng, 2 * heads * g, d);
    let plan = run_plan(
        &t.gpu,
        &plan_kernel,
        &plan_spec,
        &shape,
        &store,
        &PlanInputs {
            queries: &queries,
            sigma2: None,
            fixed_channels: None,
            rotation: None,
            budget: 0.0,
        },
        Some(&staging),
    );
    let status = download(&plan.status, "plan status");
    assert_eq!(
        status[0], 1,
        "plan status {status:?} (FATHOM_TEST_SEED={})",
        t.seed
    );
    let gather_spec = GatherSpec {
        head_dim: d,
        block: blk,
        segment_words,
        loads_in_flight: 2,
        threads: 128,
    };
    let gather = Kernel::compile(&t.gpu, gather_spec);
    run_gather(
        &t.gpu,
        &gather,
        &gather_spec,
        &shape,
        &plan.runs,
        plan.staged_runs.as_ref().unwrap(),
        &plan.class_count,
        &store.n_stored,
    );
    let depths = vec![vec![vec![4u8; d]; heads]; 2];
    check_staging(&staging, &shape, &stores, &depths, gather.name(), t.seed);
});

// One head of 1M tokens (D = 128, G = 4): HBM, host fused, and host staged through gather.
gpu_test!(gpu_scan_1m_tokens_hbm_host_and_staged, |t| {
    let (d, g, blk, segment_words) = (128, 4, 64, 512);
    let layout = StoreLayout::new(d, BlockSize::B64, segment_words).unwrap();
    let seg_tokens = layout.segment_tokens();
    // A partial last segment.
    let n = (1 << 20) - blk * t.rng.gen_range(1..seg_tokens / blk);
    let stores = inputs::head_stores(&mut t.rng, layout, &[n], 1);
    let head = &stores[0][0];
    let max_seg = n.div_ceil(seg_tokens);
    let shape = TableShape {
        batch: 1,
        heads: 1,
        max_seg,
        layout,
    };
    let queries = inputs::vectors(&mut t.rng, g, d);
    let rows = inputs::group_queries(&queries, 0, g, d);
    let q_store = upload(&t.gpu, &queries, "q_store");
    let ld_scores = n + 64;

    // Sampled positions: random, plus every segment's first and last token.
    let mut sample: Vec<usize> = (0..20_000).map(|_| t.rng.gen_range(0..n)).collect();
    for s in 0..max_seg {
        sample.push(s * seg_tokens);
        sample.push(((s + 1) * seg_tokens).min(n) - 1);
    }
    sample.shuffle(&mut t.rng);

    for kind in [PlanKind::Fathom(48.0), PlanKind::Sparq(32)] {
        let depths = vec![vec![reference_depths(kind, head, &rows)]];
        let active: Vec<(usize, u8)> = depths[0][0]
            .iter()
            .enumerate()
            .filter(|&(_, &t)| t > 0)
            .map(|(c, &t)| (c, t))
            .collect();
        for placement in [Placement::Hbm, Placement::Host] {
            let store = DeviceStore::new(&t.gpu, placement, &stores, max_seg)
                .unwrap_or_else(|e| panic!("1M-token store in {placement:?}: {e}"));
            let staging =
                (placement == Placement::Host).then(|| Staging::new(&t.gpu, &shape, 4 * d));
            let (runs, staged, counts) =
                run_tables(&shape, &store, &[n], &depths, staging.as_ref());
            let runs = upload(&t.gpu, &runs, "runs");
            let counts = upload(&t.gpu, &counts, "class_count");
            let mut tables = vec![(runs, placement, "source")];
            // `staging` lives to the end of this placement's scans: the staged table points into it.
            if let Some(staged) = staged {
                let staged = upload(&t.gpu, &staged, "staged runs");
                let gather_spec = GatherSpec {
                    head_dim: d,
                    block: blk,
                    segment_words,
                    loads_in_flight: 4,
                    threads: 256,
                };
                let gather = Kernel::compile(&t.gpu, gather_spec);
                run_gather(
                    &t.gpu,
                    &gather,
                    &gather_spec,
                    &shape,
                    &tables[0].0,
                    &staged,
                    &counts,
                    &store.n_stored,
                );
                tables.push((staged, Placement::Hbm, "staged"));
            }
            let variants = tables.iter().flat_map(|t| [(t, false), (t, true)]);
            for ((table, scan_placement, what), tensor_cores) in variants {
                let mut spec = ScanSpec {
                    tensor_cores,
                    ..ScanSpec::new(d, g, *scan_placement)
                };
                if spec.validate().is_err() {
                    // The host default (1,024 threads) has too few registers a thread for it.
                    (spec.tile_words, spec.threads) = (16, 256);
                }
                let kernel = Kernel::compile(&t.gpu, spec);
                let scores = run_scan(
                    &t.gpu,
                    &kernel,
                    &spec,
                    &shape,
                    table,
                    &counts,
                    &q_store,
                    &store.n_stored,
                    ld_scores,
                );
                let label = format!(
                    "{} {kind:?} n {n} {placement:?} store, {what} table",
                    kernel.name()
                );
                let mut bad = Mismatches::new(format!("{label}: scores"), t.seed);
                for gi in 0..g {
                    let row = &scores[gi * ld_scores..(gi + 1) * ld_scores];
                    for (i, &got) in row.iter().enumerate() {
                        if i < n {
                            bad.check(got.is_finite(), || {
                                format!("head {gi} token {i}: not written or not finite: {got}")
                            });
                        } else {
                            bad.check(got.to_bits() == u32::MAX, || {
                                format!("head {gi} token {i} past n_stored: written {got}")
                            });
                        }
                    }
                    for &i in &sample {
                        // The reference's own decode, as score_stored sums it.
                        let want: f64 = active
                            .iter()
                            .map(|&(c, t)| rows[gi][c] * head.decode(i, c, t))
                            .sum();
                        check_score(
                            &mut bad,
                            head,
                            &depths[0][0],
                            &rows[gi],
                            (0, 0, gi, i),
                            row[i],
                            want,
                            tensor_cores,
                        );
                    }
                }
                bad.assert_none();
            }
        }
    }
});
