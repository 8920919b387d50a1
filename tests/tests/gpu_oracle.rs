//! GPU tests of the `oracle` kernel (SPEC §4 `oracle`, §6 tail scoring) against the f64
//! reference `score::score_exact`.
//!
//! Coverage, for both placements of the K rows (HBM, mapped host memory), every head dimension
//! of §1 and group sizes G = 1, 4, 7, 8, 16 (`fathom_tests::shapes`), with B = 3 sequences of
//! different lengths and H = 2 KV heads in one launch:
//! - `range_start = NULL` (the `oracle` method: tokens `0 .. n_total`), with the spec's grid;
//! - per-sequence ranges in one launch: the tail (`start = n_stored`, a multiple of 64), an
//!   interior range, and an empty one (`end <= start`), with a single block per (head, sequence)
//!   so that the block's stride loop covers the range;
//! - every score in a range within [`dot_tolerance`] of the reference (fp32 rounding of a sum of
//!   D products of exact fp32 × bf16 inputs, derived there), and every element outside the ranges
//!   (other tokens, the padding of `ld_scores`) still poisoned.

use codegen::spec::{OracleSpec, Placement};
use fathom_tests::gpu_test;
use fathom_tests::inputs;
use fathom_tests::kit::GpuTest;
use fathom_tests::select_kernels::{
    dot_tolerance, with_grid_x, HeadTable, Mismatches, OracleArgs, OracleKernel, POISON,
    POISON_F32_BITS,
};
use fathom_tests::shapes::head_dims_and_groups;
use half::bf16;
use rand::Rng;
use reference::score::score_exact;
use runtime::gpu::Gpu;

const BATCH: usize = 3;
const KV_HEADS: usize = 2;
/// The store's block: a tail starts at a multiple of it.
const BLK: usize = 64;

/// One sequence's token range, as the kernel gets it.
#[derive(Clone, Copy, Debug)]
struct Range {
    start: usize,
    end: usize,
}

fn oracle_case(gpu: &Gpu, rng: &mut impl Rng, seed: u64, placement: Placement, d: usize, g: usize) {
    let spec = OracleSpec {
        head_dim: d as u32,
        group: g as u32,
        threads: 256,
        placement,
        kv_rows: codegen::spec::KvRows::Separate,
    };
    let kernel = OracleKernel::load(gpu, spec).expect("oracle kernel compiles");
    // Lengths: a long one, a medium one, and one shorter than a block's rows per step.
    let mut lengths = [
        rng.gen_range(3000..6000),
        rng.gen_range(BLK + 1..1000),
        rng.gen_range(1..40),
    ];
    lengths.swap(0, rng.gen_range(0..BATCH));
    let max_n = *lengths.iter().max().expect("three sequences");
    // An odd stride, so that a row-offset bug cannot hide in the padding.
    let ld = max_n + 3;

    let keys: Vec<Vec<bf16>> = (0..BATCH * KV_HEADS)
        .map(|kh| inputs::keys(rng, lengths[kh / KV_HEADS], d))
        .collect();
    let queries = inputs::vectors(rng, BATCH * KV_HEADS * g, d);
    let bits: Vec<Vec<u16>> = keys
        .iter()
        .map(|k| k.iter().map(|x| x.to_bits()).collect())
        .collect();
    let k_rows = HeadTable::upload(gpu, placement, &bits).expect("upload keys");
    let q = gpu.upload(&queries).expect("upload queries");

    // Launch 1: the whole context, NULL start, the spec's grid.
    let full: Vec<Range> = lengths
        .iter()
        .map(|&n| Range { start: 0, end: n })
        .collect();
    // Launch 2: tail, interior and empty ranges, shuffled over the sequences.
    let mut kinds = [0, 1, 2];
    kinds.swap(0, rng.gen_range(0..BATCH));
    kinds.swap(1, rng.gen_range(1..BATCH));
    let parts: Vec<Range> = (0..BATCH)
        .map(|b| {
            let n = lengths[b];
            match kinds[b] {
                0 => Range {
                    start: n / BLK * BLK,
                    end: n,
                },
                1 => {
                    let start = rng.gen_range(0..n);
                    Range {
                        start,
                        end: rng.gen_range(start + 1..=n),
                    }
                }
                _ => {
                    let start = rng.gen_range(0..=n);
                    Range {
                        start,
                        end: rng.gen_range(0..=start),
                    }
                }
            }
        })
        .collect();

    for (launch_no, ranges) in [full, parts].iter().enumerate() {
        let null_start = launch_no == 0;
        let starts: Vec<i32> = ranges.iter().map(|r| r.start as i32).collect();
        let ends: Vec<i32> = ranges.iter().map(|r| r.end as i32).collect();
        let range_start = gpu.upload(&starts).expect("upload range_start");
        let range_end = gpu.upload(&ends).expect("upload range_end");
        let scores = gpu
            .filled::<f32>(BATCH * KV_HEADS * g * ld, POISON)
            .expect("scores");
        let grid = spec
            .launch(BATCH as u64, KV_HEADS as u64, max_n as u64)
            .expect("oracle launch geometry");
        let grid = if null_start {
            grid
        } else {
            with_grid_x(grid, 1)
        };
        let args = OracleArgs {
            k_rows: k_rows.addr(),
            q: q.addr(),
            range_start: (!null_start).then(|| range_start.addr()),
            range_end: range_end.addr(),
            scores: scores.addr(),
            ld_scores: ld,
            num_kv_heads: KV_HEADS,
        };
        kernel.launch(gpu, grid, &args).expect("oracle launch");
        gpu.synchronize().expect("oracle runs");
        let got = scores.download().expect("download scores");

        let mut m = Mismatches::new(
            format!(
                "oracle {} D={d} G={g} {} ranges {ranges:?}",
                placement.as_str(),
                if null_start {
                    "NULL-start"
                } else {
                    "per-sequence"
                }
            ),
            seed,
        );
        for kh in 0..BATCH * KV_HEADS {
            let b = kh / KV_HEADS;
            let r = ranges[b];
            let heads = inputs::group_queries(&queries, kh, g, d);
            let scored = r.start..r.end.max(r.start);
            let want = score_exact(&keys[kh], d, scored.clone(), &heads);
            for (h, query) in heads.iter().enumerate() {
                let row = &got[(kh * g + h) * ld..(kh * g + h + 1) * ld];
                for (i, &s) in row.iter().enumerate() {
                    if scored.contains(&i) {
                        let expect = want[h][i - r.start];
                        let key = &keys[kh][i * d..(i + 1) * d];
                        let tol = dot_tolerance(query, key.iter().map(|x| x.to_f64()));
                        m.check((f64::from(s) - expect).abs() <= tol, || {
                            format!(
                                "b {b} kv head {} g {h} token {i}: {s} vs reference {expect} \
                                 (tolerance {tol:.3e})",
                                kh % KV_HEADS
                            )
                        });
                    } else {
                        m.check(s.to_bits() == POISON_F32_BITS, || {
                            format!(
                                "b {b} kv head {} g {h} element {i} outside [{}, {}) was \
                                 written: {s}",
                                kh % KV_HEADS,
                                r.start,
                                r.end
                            )
                        });
                    }
                }
            }
        }
        m.finish();
    }
}

fn oracle_all_shapes(t: &mut GpuTest, placement: Placement) {
    for (d, g) in head_dims_and_groups() {
        oracle_case(&t.gpu, &mut t.rng, t.seed, placement, d, g);
    }
}

gpu_test!(gpu_oracle_exact_scores_hbm, |t| {
    oracle_all_shapes(&mut t, Placement::Hbm);
});

gpu_test!(gpu_oracle_exact_scores_host, |t| {
    oracle_all_shapes(&mut t, Placement::Host);
});
