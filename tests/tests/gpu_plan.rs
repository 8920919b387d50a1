//! GPU tests of the `plan` family (SPEC §3, §4, §7; `templates/plan.cu.tera`) against the f64
//! reference planner (`reference::plans::depth_plan`, which water-fills with
//! `planner::water_fill` for `fathom`).
//!
//! Every launch plans a batch of `B` sequences × `H` KV heads, each `(b, h)` with its own random
//! queries (f32, per-channel scales over two orders of magnitude) and `σ²` (f32, a few channels
//! exactly 0). What is checked, on fresh random inputs (the seed is printed and named in every
//! failure):
//!
//! - `q_store`: the raw queries bit for bit; with a rotation, `Rᵀq` bit for bit as f32 fma in
//!   ascending `i` computes it, and within fp32 rounding of the f64 product
//!   (`|q' - Rᵀq| <= (D + 1)·2⁻²⁴·Σ_i |R_ij q_i|`: `D` fma roundings of partial sums bounded by
//!   that sum).
//! - `depths`: equal to the reference's plan computed from the same f32 inputs (the kernel's
//!   own `q_store` and the `σ²`, widened to f64) for every method: `fathom` (G = 1, 4, 7, 8, 16
//!   × every D of §1, raw and rotated, random budgets and 48), `sparq(16)`, `sparq(32)`,
//!   `double_sparsity(32)` (the reference calibration's mask), `loki(32)` (rotated),
//!   `thumbnail`, `uniform(1..=4)`.
//! - `class_count`, and the run tables: the source table (slot `k` of a stored segment =
//!   `{segment words + c·4·S words, segment scales + c·SPC, c, t_c}` in depth-class order) and
//!   the staged table (dense packing per `(b, h, s)`), built independently on the CPU; slots of
//!   segments past the store keep their poison.
//! - edges: all-zero queries (all depths 0), a huge budget (every channel with `w_c > 0` at
//!   depth 4), the minimum budget (one channel at depth 1), a batch of three sequences of
//!   different lengths including `n_stored = 0` (depths written, no run slot), and a plan that
//!   exceeds the staging (status `{1, b, h}`, staged depths 0).

use codegen::model::Basis;
use codegen::spec::shape::HEAD_DIMS;
use codegen::spec::{Placement, PlanMethod, PlanSpec};
use fathom_tests::device_store::random_device_stores;
use fathom_tests::shapes::GROUPS;
use fathom_tests::store_kernels::{
    class_count, download, rotate_f32, rotations, run_plan, run_tables, Kernel, Mismatches,
    PlanInputs, Staging,
};
use fathom_tests::{gpu_test, inputs};
use rand::Rng;
use reference::planner::min_budget;
use reference::plans::{depth_plan, DepthPlan, DoubleSparsityCalibration, Method, PlanContext};
use reference::store::{BlockSize, StoreLayout};
use runtime::gpu::Gpu;

/// One plan launch to check.
struct Case {
    d: usize,
    g: usize,
    blk: usize,
    method: PlanMethod,
    rotate: bool,
    budget: f32,
    /// Stored tokens per sequence (multiples of BLK); `B` is its length.
    n_stored: Vec<usize>,
    heads: usize,
    /// `(b, h)` whose queries are all zero.
    zero_queries: Vec<(usize, usize)>,
    /// Staging capacity in planes per `(b, h, s)`.
    stage_planes: usize,
    /// Threads per block (the bisection's rounds and midpoints per warp follow it).
    threads: usize,
}

impl Case {
    fn new(d: usize, g: usize, blk: usize, method: PlanMethod) -> Case {
        Case {
            d,
            g,
            blk,
            method,
            rotate: false,
            budget: 48.0,
            n_stored: vec![3 * blk, 0, 9 * blk],
            heads: 2,
            zero_queries: Vec::new(),
            stage_planes: 4 * d,
            threads: 256,
        }
    }
}

/// Segment words: small segments, so that a few blocks span several of them.
const SEGMENT_WORDS: usize = 2;

fn reference_method(method: PlanMethod, budget: f32, r_dsparsity: usize) -> Method {
    match method {
        PlanMethod::Fathom => Method::Fathom {
            bits: f64::from(budget),
        },
        PlanMethod::Sparq { r } => Method::Sparq { r },
        PlanMethod::DoubleSparsity => Method::DoubleSparsity { r: r_dsparsity },
        PlanMethod::Loki { r } => Method::Loki { r },
        PlanMethod::Thumbnail => Method::Thumbnail,
        PlanMethod::Uniform { t } => Method::Uniform { t: t as u8 },
    }
}

/// Channels `double_sparsity` reads in these tests.
const DSPARSITY_R: usize = 32;

/// Runs the case and checks every output; returns the expected depths `[b][h]`.
// `(b, h)` index the queries, σ², calibrations and every output alike.
#[allow(clippy::needless_range_loop)]
fn check(gpu: &Gpu, rng: &mut impl Rng, seed: u64, case: &Case) -> Vec<Vec<Vec<u8>>> {
    let Case { d, g, blk, .. } = *case;
    let (batch, heads) = (case.n_stored.len(), case.heads);
    let block = BlockSize::from_tokens(blk).unwrap();
    let layout = StoreLayout::new(d, block, SEGMENT_WORDS).unwrap();
    let (_, store, shape) =
        random_device_stores(gpu, rng, layout, Placement::Hbm, &case.n_stored, heads);

    // Queries with per-channel scales, so that importances spread; some heads all zero.
    let channel_scale: Vec<f32> = (0..d)
        .map(|_| 10f32.powf(rng.gen_range(-1.0..1.0)))
        .collect();
    let mut queries = inputs::vectors(rng, batch * heads * g, d);
    for (i, q) in queries.iter_mut().enumerate() {
        *q *= channel_scale[i % d];
    }
    for &(b, h) in &case.zero_queries {
        let row = (b * heads + h) * g * d;
        queries[row..row + g * d].fill(0.0);
    }
    let sigma2: Vec<f32> = (0..batch * heads * d)
        .map(|i| {
            if i % d % 17 == 3 {
                0.0
            } else {
                10f32.powf(rng.gen_range(-2.0..2.0))
            }
        })
        .collect();
    let rotation = case.rotate.then(|| rotations(rng, heads, d));
    let calibrations: Vec<DoubleSparsityCalibration> = (0..heads)
        .map(|_| {
            let rows = |rng: &mut dyn rand::RngCore, n| -> Vec<Vec<f64>> {
                (0..n)
                    .map(|_| {
                        (0..d)
                            .map(|c| rng.gen_range(-1.0..1.0) * f64::from(channel_scale[c]))
                            .collect()
                    })
                    .collect()
            };
            let (cal_q, cal_k) = (rows(rng, 16), rows(rng, 64));
            DoubleSparsityCalibration::fit(&cal_q, &cal_k, DSPARSITY_R).unwrap()
        })
        .collect();
    let fixed: Vec<u8> = calibrations.iter().flat_map(|c| c.mask()).collect();

    let spec = PlanSpec {
        head_dim: d,
        group: g,
        block: blk,
        segment_words: SEGMENT_WORDS,
        method: case.method,
        rotate: case.rotate,
        threads: case.threads,
    };
    let kernel = Kernel::compile(gpu, spec);
    let staging = Staging::new(gpu, &shape, case.stage_planes);
    let plan_inputs = PlanInputs {
        queries: &queries,
        sigma2: (case.method == PlanMethod::Fathom).then_some(&sigma2[..]),
        fixed_channels: (case.method == PlanMethod::DoubleSparsity).then_some(&fixed[..]),
        rotation: rotation.as_deref(),
        budget: case.budget,
    };
    let out = run_plan(
        gpu,
        &kernel,
        &spec,
        &shape,
        &store,
        &plan_inputs,
        Some(&staging),
    );
    let label = format!(
        "{} budget {} n_stored {:?}",
        kernel.name(),
        case.budget,
        case.n_stored
    );

    // q_store.
    let q_store = download(&out.q_store, "q_store");
    let mut bad = Mismatches::new(format!("{label}: q_store"), seed);
    for bh in 0..batch * heads {
        for gi in 0..g {
            let row = (bh * g + gi) * d;
            let q = &queries[row..row + d];
            let got = &q_store[row..row + d];
            let want = match rotation.as_deref() {
                None => q.to_vec(),
                Some(r) => rotate_f32(&r[bh % heads * d * d..(bh % heads + 1) * d * d], d, q),
            };
            for j in 0..d {
                bad.check(got[j].to_bits() == want[j].to_bits(), || {
                    format!(
                        "(b, h) {bh} head {gi} channel {j}: {}, want {}",
                        got[j], want[j]
                    )
                });
                if let Some(r) = rotation.as_deref() {
                    let r = &r[bh % heads * d * d..];
                    let exact: f64 = (0..d)
                        .map(|i| f64::from(r[i * d + j]) * f64::from(q[i]))
                        .sum();
                    let mass: f64 = (0..d)
                        .map(|i| (f64::from(r[i * d + j]) * f64::from(q[i])).abs())
                        .sum();
                    let bound = (d + 1) as f64 * 2f64.powi(-24) * mass + 1e-30;
                    bad.check((f64::from(got[j]) - exact).abs() <= bound, || {
                        format!(
                            "(b, h) {bh} head {gi} channel {j}: {} vs f64 {exact}, bound {bound}",
                            got[j]
                        )
                    });
                }
            }
        }
    }
    bad.assert_none();

    // Depths from the reference on the same f32 inputs.
    let mut expected: Vec<Vec<Vec<u8>>> = vec![Vec::new(); batch];
    for b in 0..batch {
        for h in 0..heads {
            let bh = b * heads + h;
            let group: Vec<Vec<f64>> = (0..g)
                .map(|gi| {
                    q_store[(bh * g + gi) * d..(bh * g + gi + 1) * d]
                        .iter()
                        .map(|&x| f64::from(x))
                        .collect()
                })
                .collect();
            let s2: Vec<f64> = match case.method {
                PlanMethod::Fathom => sigma2[bh * d..(bh + 1) * d]
                    .iter()
                    .map(|&x| f64::from(x))
                    .collect(),
                _ => vec![1.0; d],
            };
            let ctx = PlanContext {
                queries: &group,
                sigma2: &s2,
                block,
                basis: if case.rotate { Basis::Klt } else { Basis::Raw },
                double_sparsity: Some(&calibrations[h]),
            };
            let method = reference_method(case.method, case.budget, DSPARSITY_R);
            match depth_plan(method, &ctx) {
                Ok(DepthPlan::Depths(plan)) => expected[b].push(plan.depths),
                other => panic!("{label}: the reference plan of {method} is {other:?}"),
            }
        }
    }
    let depths = download(&out.depths, "depths");
    let mut bad = Mismatches::new(format!("{label}: depths"), seed);
    for b in 0..batch {
        for h in 0..heads {
            let bh = b * heads + h;
            for c in 0..d {
                let (got, want) = (depths[bh * d + c], expected[b][h][c]);
                bad.check(got == want, || {
                    format!("b {b} h {h} channel {c}: depth {got}, want {want}")
                });
            }
        }
    }
    bad.assert_none();

    // Class counts and run tables.
    let (want_runs, want_staged, want_counts) =
        run_tables(&shape, &store, &case.n_stored, &expected, Some(&staging));
    let counts = download(&out.class_count, "class_count");
    let mut bad = Mismatches::new(format!("{label}: class_count"), seed);
    for (i, (got, want)) in counts.iter().zip(&want_counts).enumerate() {
        bad.check(got == want, || {
            format!("(b, h) {} depth {}: {got}, want {want}", i / 4, 4 - i % 4)
        });
    }
    bad.assert_none();
    let staged = out.staged_runs.as_ref().map(|t| download(t, "staged runs"));
    let tables = [
        ("source runs", download(&out.runs, "source runs"), want_runs),
        ("staged runs", staged.unwrap(), want_staged.unwrap()),
    ];
    for (what, got, want) in tables {
        let mut bad = Mismatches::new(format!("{label}: {what}"), seed);
        for (i, (got, want)) in got.iter().zip(&want).enumerate() {
            let entry = i / 4;
            bad.check(got == want, || {
                let slot = entry % d;
                let s = entry / d % shape.max_seg;
                let bh = entry / d / shape.max_seg;
                let field = ["words", "scales", "channel", "depth"][i % 4];
                format!("(b, h) {bh} segment {s} slot {slot} {field}: {got:#x}, want {want:#x}")
            });
        }
        bad.assert_none();
    }

    // Status: set only when some head's planes exceed the staging.
    let status = download(&out.status, "plan status");
    let over: Vec<(usize, usize)> = (0..batch)
        .flat_map(|b| (0..heads).map(move |h| (b, h)))
        .filter(|&(b, h)| {
            expected[b][h].iter().map(|&t| t as usize).sum::<usize>() > case.stage_planes
        })
        .collect();
    if over.is_empty() {
        assert_eq!(status, [0; 3], "{label}: status (FATHOM_TEST_SEED={seed})");
    } else {
        let at = (status[1] as usize, status[2] as usize);
        assert!(
            status[0] == 1 && over.contains(&at),
            "{label}: status {status:?}, want 1 and one of {over:?} (FATHOM_TEST_SEED={seed})"
        );
    }
    expected
}

/// Every (G, D), the block size cycling.
fn all_shapes() -> Vec<(usize, usize, usize)> {
    let mut shapes = Vec::new();
    for (i, g) in GROUPS.map(|g| g as usize).into_iter().enumerate() {
        for (j, d) in HEAD_DIMS.into_iter().enumerate() {
            shapes.push((g, d, [32, 64, 128][(i + j) % 3]));
        }
    }
    shapes
}

/// Shapes covering every G, D and BLK once at least.
const FEW_SHAPES: [(usize, usize, usize); 7] = [
    (1, 64, 32),
    (4, 128, 64),
    (7, 128, 128),
    (8, 256, 32),
    (16, 96, 64),
    (3, 80, 128),
    (16, 192, 32),
];

gpu_test!(gpu_plan_fathom_matches_reference, |t| {
    for (g, d, blk) in all_shapes() {
        let block = BlockSize::from_tokens(blk).unwrap();
        let most = d as f64 * (4.0 + block.scale_bits_per_token());
        for budget in [48.0, t.rng.gen_range(min_budget(block)..most).ceil()] {
            let case = Case {
                budget: budget as f32,
                ..Case::new(d, g, blk, PlanMethod::Fathom)
            };
            check(&t.gpu, &mut t.rng, t.seed, &case);
        }
    }
});

// The bisection tries 2^LEVELS - 1 midpoints a round, one per warp, LEVELS set by the warps
// (one level a round for one warp, five for 32; odd warp counts leave warps idle): every block
// size must reach the serial line bit for bit. Up to 128 threads a sequence also has more than
// twice as many segments as the block has threads, and a partial last one, so that every thread
// writes the run-table entries of several segments.
gpu_test!(gpu_plan_fathom_every_block_size_matches_reference, |t| {
    for threads in [32, 64, 96, 128, 224, 512, 1024] {
        for (g, d, blk) in FEW_SHAPES {
            let block = BlockSize::from_tokens(blk).unwrap();
            let most = d as f64 * (4.0 + block.scale_bits_per_token());
            for budget in [48.0, t.rng.gen_range(min_budget(block)..most).ceil()] {
                let mut n_stored = vec![3 * blk, 0, 9 * blk];
                if threads <= 128 {
                    n_stored.push((2 * threads + 3) * 64 * SEGMENT_WORDS + blk);
                }
                let case = Case {
                    budget: budget as f32,
                    threads,
                    n_stored,
                    ..Case::new(d, g, blk, PlanMethod::Fathom)
                };
                check(&t.gpu, &mut t.rng, t.seed, &case);
            }
        }
    }
});

gpu_test!(gpu_plan_fathom_rotated_matches_reference, |t| {
    for (g, d, blk) in FEW_SHAPES {
        for budget in [24.0, 92.0] {
            let case = Case {
                rotate: true,
                budget,
                ..Case::new(d, g, blk, PlanMethod::Fathom)
            };
            check(&t.gpu, &mut t.rng, t.seed, &case);
        }
    }
});

gpu_test!(gpu_plan_fathom_edges, |t| {
    for (g, d, blk) in FEW_SHAPES {
        let block = BlockSize::from_tokens(blk).unwrap();
        // All-zero queries in two heads; the rest at a normal budget.
        let case = Case {
            zero_queries: vec![(0, 1), (2, 0)],
            ..Case::new(d, g, blk, PlanMethod::Fathom)
        };
        let depths = check(&t.gpu, &mut t.rng, t.seed, &case);
        for (b, h) in [(0, 1), (2, 0)] {
            assert!(
                depths[b][h].iter().all(|&t| t == 0),
                "zero queries must read nothing (FATHOM_TEST_SEED={})",
                t.seed
            );
        }
        // A huge budget: every channel with w_c > 0 at depth 4.
        let case = Case {
            budget: 1.0e6,
            ..Case::new(d, g, blk, PlanMethod::Fathom)
        };
        let depths = check(&t.gpu, &mut t.rng, t.seed, &case);
        assert!(
            depths.iter().flatten().flatten().any(|&t| t == 4)
                && depths.iter().flatten().flatten().all(|&t| t == 0 || t == 4),
            "a huge budget reads whole channels (FATHOM_TEST_SEED={})",
            t.seed
        );
        // The minimum budget: one channel at depth 1 and its scale.
        let case = Case {
            budget: min_budget(block) as f32,
            ..Case::new(d, g, blk, PlanMethod::Fathom)
        };
        let depths = check(&t.gpu, &mut t.rng, t.seed, &case);
        for head in depths.iter().flatten() {
            assert!(
                class_count(head) == [0, 0, 0, 1] || head.iter().all(|&t| t == 0),
                "the minimum budget reads at most one plane: {head:?} (FATHOM_TEST_SEED={})",
                t.seed
            );
        }
        // Three sequences, one without stored tokens, one with a single block.
        let case = Case {
            n_stored: vec![0, blk, 21 * blk],
            budget: 92.0,
            ..Case::new(d, g, blk, PlanMethod::Fathom)
        };
        check(&t.gpu, &mut t.rng, t.seed, &case);
    }
});

gpu_test!(gpu_plan_sparq_matches_reference, |t| {
    for (g, d, blk) in FEW_SHAPES {
        for r in [16, 32] {
            for rotate in [false, true] {
                let case = Case {
                    rotate,
                    ..Case::new(d, g, blk, PlanMethod::Sparq { r })
                };
                check(&t.gpu, &mut t.rng, t.seed, &case);
            }
        }
    }
});

gpu_test!(gpu_plan_double_sparsity_matches_reference, |t| {
    for (g, d, blk) in FEW_SHAPES {
        let case = Case::new(d, g, blk, PlanMethod::DoubleSparsity);
        check(&t.gpu, &mut t.rng, t.seed, &case);
    }
});

gpu_test!(gpu_plan_loki_rotated_matches_reference, |t| {
    for (g, d, blk) in FEW_SHAPES {
        let case = Case {
            rotate: true,
            ..Case::new(d, g, blk, PlanMethod::Loki { r: 32 })
        };
        check(&t.gpu, &mut t.rng, t.seed, &case);
    }
});

gpu_test!(gpu_plan_thumbnail_and_uniform_match_reference, |t| {
    let methods = [
        PlanMethod::Thumbnail,
        PlanMethod::Uniform { t: 1 },
        PlanMethod::Uniform { t: 2 },
        PlanMethod::Uniform { t: 3 },
        PlanMethod::Uniform { t: 4 },
    ];
    for (i, method) in methods.into_iter().enumerate() {
        let (g, d, blk) = FEW_SHAPES[i % FEW_SHAPES.len()];
        check(&t.gpu, &mut t.rng, t.seed, &Case::new(d, g, blk, method));
    }
});

gpu_test!(gpu_plan_staging_overflow_is_reported, |t| {
    for (g, d, blk) in FEW_SHAPES {
        // uniform(4) needs 4·D planes; one fewer does not fit (status, staged depths 0).
        let case = Case {
            stage_planes: 4 * d - 1,
            ..Case::new(d, g, blk, PlanMethod::Uniform { t: 4 })
        };
        check(&t.gpu, &mut t.rng, t.seed, &case);
        // uniform(2) fits exactly.
        let case = Case {
            stage_planes: 2 * d,
            ..Case::new(d, g, blk, PlanMethod::Uniform { t: 2 })
        };
        check(&t.gpu, &mut t.rng, t.seed, &case);
    }
});
