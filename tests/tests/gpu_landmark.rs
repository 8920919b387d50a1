//! GPU tests of the `landmark` kernels (SPEC §4 `landmark`): `_build` (fp16 mean key of each
//! 8-token group) and `_scan` (every stored token scores its group's `q·mean`).
//!
//! Coverage, for both placements (keys and means in HBM, or both in mapped host memory), every
//! head dimension of §1 and G = 1, 4, 7, 8, 16 (`fathom_tests::shapes`), with B = 3 sequences of
//! different lengths
//! (one shorter than a group, lengths not multiples of 8) and H = 2 KV heads per launch:
//! - `_build` over `[NULL, n)` with the spec's grid, then over per-sequence ranges (a start that is
//!   not a multiple of 8, an empty range) with one block: exactly the groups whose 8 tokens lie in
//!   the range are written, the rest of the means buffer (partial groups, an extra row) stays
//!   poisoned.
//! - The means are compared bit for bit (±0 alike) with an fp32 emulation of the kernel's
//!   documented arithmetic: sum in fp32 in token order from +0, times 1/8 (exact), round to
//!   nearest-even fp16. Against the f64 reference `score::landmark_means` (mean in f64, rounded
//!   once) every mean is within 1 fp16 ulp, and differences are rare (at most 1 in 1,000 values):
//!   the fp32 sum of 8 bf16 values is exact unless their magnitudes span more than ~2^16, and
//!   only then can the two roundings part.
//! - `_scan` on the GPU's own means for `n_stored` a multiple of 64, not a multiple of 8, and
//!   below 8: tokens `0 .. 8*floor(n_stored/8)` score `Σ_c q_c·mean_c` (computed in f64 from the
//!   downloaded means, which is `score::score_landmark` wherever the means agree) within fp32
//!   rounding ([`dot_tolerance`]); every other element stays poisoned.

use codegen::spec::{LandmarkSpec, Placement};
use fathom_tests::gpu_test;
use fathom_tests::inputs;
use fathom_tests::kit::GpuTest;
use fathom_tests::select_kernels::{
    dot_tolerance, with_grid_x, HeadTable, LandmarkBuildArgs, LandmarkKernels, LandmarkScanArgs,
    Mismatches, POISON, POISON_F32_BITS, POISON_U16,
};
use fathom_tests::shapes::head_dims_and_groups;
use half::{bf16, f16};
use rand::Rng;
use reference::score::{landmark_means, LANDMARK_TOKENS};
use runtime::gpu::Gpu;

const BATCH: usize = 3;
const KV_HEADS: usize = 2;
const GT: usize = LANDMARK_TOKENS;

/// The kernel's mean of one group and channel: fp32 sum in token order from +0, × 1/8, fp16 RNE.
fn emulated_mean(keys: &[bf16], d: usize, group: usize, c: usize) -> f16 {
    let mut sum = 0.0f32;
    for r in 0..GT {
        sum += keys[(group * GT + r) * d + c].to_f32();
    }
    f16::from_f32(sum * 0.125)
}

/// fp16 bits as a signed position on the number line (+0 and −0 both 0), so that the distance
/// of two finite values is their difference in ulps.
fn ordered(bits: u16) -> i32 {
    let magnitude = i32::from(bits & 0x7fff);
    if bits & 0x8000 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

/// Checks one head's means buffer after a build over `[start, end)`; returns
/// (values compared with the reference, values that differ from it by one ulp).
#[allow(clippy::too_many_arguments)]
fn check_means(
    got: &[u16],
    keys: &[bf16],
    n: usize,
    d: usize,
    start: usize,
    end: usize,
    head: &str,
    m: &mut Mismatches,
) -> (usize, usize) {
    let first = start.div_ceil(GT);
    let last = end / GT;
    let reference = landmark_means(keys, d, n);
    let (mut compared, mut off_by_one) = (0, 0);
    for (j, row) in got.chunks_exact(d).enumerate() {
        for (c, &bits) in row.iter().enumerate() {
            if j >= first && j < last {
                let want = emulated_mean(keys, d, j, c);
                m.check(ordered(bits) == ordered(want.to_bits()), || {
                    format!(
                        "{head} group {j} channel {c}: {} ({bits:#06x}) vs fp32 emulation {} \
                         ({:#06x})",
                        f16::from_bits(bits),
                        want,
                        want.to_bits()
                    )
                });
                let f64_mean = reference[j * d + c];
                let distance = (ordered(bits) - ordered(f64_mean.to_bits())).abs();
                m.check(distance <= 1, || {
                    format!(
                        "{head} group {j} channel {c}: {} is {distance} ulps from the f64 mean {}",
                        f16::from_bits(bits),
                        f64_mean
                    )
                });
                compared += 1;
                off_by_one += usize::from(distance == 1);
            } else {
                m.check(bits == POISON_U16, || {
                    format!(
                        "{head} group {j} channel {c} outside groups [{first}, {last}) was \
                         written: {bits:#06x}"
                    )
                });
            }
        }
    }
    (compared, off_by_one)
}

fn landmark_case(
    gpu: &Gpu,
    rng: &mut impl Rng,
    seed: u64,
    placement: Placement,
    d: usize,
    g: usize,
) {
    let spec = LandmarkSpec {
        head_dim: d as u32,
        group: g as u32,
        threads: 256,
        placement,
        kv_rows: codegen::spec::KvRows::Separate,
    };
    let kernels = LandmarkKernels::load(gpu, spec).expect("landmark kernels compile");
    let mut lengths = [
        rng.gen_range(2000..5000),
        rng.gen_range(9..700),
        rng.gen_range(1..GT),
    ];
    lengths.swap(0, rng.gen_range(0..BATCH));
    let max_n = *lengths.iter().max().expect("three sequences");
    let heads = BATCH * KV_HEADS;
    let keys: Vec<Vec<bf16>> = (0..heads)
        .map(|kh| inputs::keys(rng, lengths[kh / KV_HEADS], d))
        .collect();
    let bits: Vec<Vec<u16>> = keys
        .iter()
        .map(|k| k.iter().map(|x| x.to_bits()).collect())
        .collect();
    let k_rows = HeadTable::upload(gpu, placement, &bits).expect("upload keys");
    // One more mean row than the partial group needs, to catch writes past the last group.
    let mean_lens: Vec<usize> = (0..heads)
        .map(|kh| (lengths[kh / KV_HEADS].div_ceil(GT) + 1) * d)
        .collect();
    let ends: Vec<i32> = lengths.iter().map(|&n| n as i32).collect();
    let range_end = gpu.upload(&ends).expect("upload range_end");
    let name = |kh: usize| {
        format!(
            "{} D={d} G={g} b {} kv head {}",
            placement.as_str(),
            kh / KV_HEADS,
            kh % KV_HEADS
        )
    };

    // Build 1: every group of [0, n), NULL start, the spec's grid.
    let means =
        HeadTable::<u16>::filled(gpu, placement, &mean_lens, POISON).expect("means buffers");
    let grid = spec
        .launch_build(BATCH as u64, KV_HEADS as u64, max_n as u64)
        .expect("build geometry");
    let args = LandmarkBuildArgs {
        k_rows: k_rows.addr(),
        means: means.addr(),
        range_start: None,
        range_end: range_end.addr(),
        num_kv_heads: KV_HEADS,
    };
    kernels.build(gpu, grid, &args).expect("build launch");
    gpu.synchronize().expect("build runs");
    let mut m = Mismatches::new(format!("landmark build D={d} G={g} [0, n)"), seed);
    let (mut compared, mut off_by_one) = (0, 0);
    let mut gpu_means = Vec::new();
    for kh in 0..heads {
        let got = means.read(kh).expect("read means");
        let n = lengths[kh / KV_HEADS];
        let (c, o) = check_means(&got, &keys[kh], n, d, 0, n, &name(kh), &mut m);
        compared += c;
        off_by_one += o;
        gpu_means.push(got);
    }
    m.check(off_by_one * 1000 <= compared, || {
        format!("{off_by_one} of {compared} means differ from the f64 reference by one ulp")
    });
    m.finish();

    // Build 2: per-sequence ranges (an unaligned start, an empty range), one block.
    let starts: Vec<usize> = lengths
        .iter()
        .enumerate()
        .map(|(b, &n)| {
            if b == 1 {
                n + 1 // empty: end < start
            } else {
                rng.gen_range(0..n)
            }
        })
        .collect();
    let starts_i32: Vec<i32> = starts.iter().map(|&s| s as i32).collect();
    let range_start = gpu.upload(&starts_i32).expect("upload range_start");
    let means2 =
        HeadTable::<u16>::filled(gpu, placement, &mean_lens, POISON).expect("means buffers");
    let args = LandmarkBuildArgs {
        means: means2.addr(),
        range_start: Some(range_start.addr()),
        ..args
    };
    kernels
        .build(gpu, with_grid_x(grid, 1), &args)
        .expect("build launch");
    gpu.synchronize().expect("build runs");
    let mut m = Mismatches::new(
        format!("landmark build D={d} G={g} ranges {starts:?}..{lengths:?}"),
        seed,
    );
    for (kh, head_keys) in keys.iter().enumerate() {
        let got = means2.read(kh).expect("read means");
        let b = kh / KV_HEADS;
        let n = lengths[b];
        check_means(&got, head_keys, n, d, starts[b], n, &name(kh), &mut m);
    }
    m.finish();

    // Scan on the means of build 1.
    let stored: Vec<usize> = lengths
        .iter()
        .enumerate()
        .map(|(b, &n)| match b {
            0 => n / 64 * 64,
            1 => n,
            _ => n.min(GT - 1),
        })
        .collect();
    let stored_i32: Vec<i32> = stored.iter().map(|&s| s as i32).collect();
    let n_stored = gpu.upload(&stored_i32).expect("upload n_stored");
    let queries = inputs::vectors(rng, heads * g, d);
    let q = gpu.upload(&queries).expect("upload queries");
    let ld = max_n + 5;
    let scores = gpu
        .filled::<f32>(heads * g * ld, POISON)
        .expect("scores buffer");
    let scan_grid = spec
        .launch_scan(BATCH as u64, KV_HEADS as u64, max_n as u64)
        .expect("scan geometry");
    let scan = LandmarkScanArgs {
        means: means.addr(),
        q: q.addr(),
        n_stored: n_stored.addr(),
        scores: scores.addr(),
        ld_scores: ld,
        num_kv_heads: KV_HEADS,
    };
    kernels.scan(gpu, scan_grid, &scan).expect("scan launch");
    gpu.synchronize().expect("scan runs");
    let got = scores.download().expect("download scores");
    let mut m = Mismatches::new(
        format!(
            "landmark scan {} D={d} G={g} n_stored {stored:?}",
            placement.as_str()
        ),
        seed,
    );
    for kh in 0..heads {
        let scored = stored[kh / KV_HEADS] / GT * GT;
        let mean: Vec<f64> = gpu_means[kh]
            .iter()
            .map(|&b| f16::from_bits(b).to_f64())
            .collect();
        for h in 0..g {
            let query: Vec<f64> = queries[(kh * g + h) * d..(kh * g + h + 1) * d]
                .iter()
                .map(|&x| f64::from(x))
                .collect();
            let row = &got[(kh * g + h) * ld..(kh * g + h + 1) * ld];
            for (i, &s) in row.iter().enumerate() {
                if i < scored {
                    let group = &mean[i / GT * d..(i / GT + 1) * d];
                    let want: f64 = query.iter().zip(group).map(|(a, b)| a * b).sum();
                    let tol = dot_tolerance(&query, group.iter().copied());
                    m.check((f64::from(s) - want).abs() <= tol, || {
                        format!(
                            "{} g {h} token {i}: {s} vs {want} (tolerance {tol:.3e})",
                            name(kh)
                        )
                    });
                } else {
                    m.check(s.to_bits() == POISON_F32_BITS, || {
                        format!(
                            "{} g {h} element {i} past {scored} scored tokens was written: {s}",
                            name(kh)
                        )
                    });
                }
            }
        }
    }
    m.finish();
}

fn landmark_all_shapes(t: &mut GpuTest, placement: Placement) {
    for (d, g) in head_dims_and_groups() {
        landmark_case(&t.gpu, &mut t.rng, t.seed, placement, d, g);
    }
}

gpu_test!(gpu_landmark_build_and_scan_hbm, |t| {
    landmark_all_shapes(&mut t, Placement::Hbm);
});

gpu_test!(gpu_landmark_build_and_scan_host, |t| {
    landmark_all_shapes(&mut t, Placement::Host);
});
