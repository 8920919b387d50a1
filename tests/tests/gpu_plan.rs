//! GPU tests of the `plan` family (SPEC §3, §4, §7; `templates/plan.cu.tera`) against the f64
//! reference planner (`reference::plans::depth_plan`, which water-fills with
//! `planner::water_fill` for `fathom`). The case, its inputs and the checks are
//! `fathom_tests::plan_check`'s, which `cpu_plan.rs` shares on the CPU emulator.
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
//! - the same with the run tables' segment pointers loaded in batches
//!   (`gpu_plan_batched_run_tables`, `PlanSpec::batched_runs`), and shared among several
//!   blocks a head (`gpu_plan_shared_run_tables`, `PlanSpec::run_blocks`), and each entry
//!   written by a lane pair (`gpu_plan_paired_run_tables`, `PlanSpec::paired_runs`).
//! - fathom's water line found directly (`gpu_plan_direct_line_matches_reference`,
//!   `PlanSpec::direct_line`): every shape, every block size, raw and rotated, the edges.
//! - edges: all-zero queries (all depths 0), a huge budget (every channel with `w_c > 0` at
//!   depth 4), the minimum budget (one channel at depth 1), a batch of three sequences of
//!   different lengths including `n_stored = 0` (depths written, no run slot), and a plan that
//!   exceeds the staging (status `{1, b, h}`, staged depths 0).

use codegen::spec::shape::HEAD_DIMS;
use codegen::spec::{Placement, PlanMethod};
use fathom_tests::device_store::random_device_stores;
use fathom_tests::gpu_test;
use fathom_tests::plan_check::{
    check_plan, PlanAddresses, PlanCase as Case, PlanHostInputs, PlanResult, SEGMENT_WORDS,
};
use fathom_tests::shapes::GROUPS;
use fathom_tests::store_kernels::{
    class_count, download, run_plan, segment_addresses, Kernel, PlanInputs, Staging,
};
use rand::Rng;
use reference::planner::min_budget;
use reference::store::BlockSize;
use runtime::gpu::Gpu;

/// Runs the case and checks every output (`plan_check::check_plan`); returns the expected
/// depths `[b][h]`.
fn check(gpu: &Gpu, rng: &mut impl Rng, seed: u64, case: &Case) -> Vec<Vec<Vec<u8>>> {
    let heads = case.heads;
    let (_, store, shape) = random_device_stores(
        gpu,
        rng,
        case.layout(),
        Placement::Hbm,
        &case.n_stored,
        heads,
    );
    let host = PlanHostInputs::random(rng, case);
    let spec = case.spec();
    let kernel = Kernel::compile(gpu, spec);
    let staging = Staging::new(gpu, &shape, case.stage_planes);
    let plan_inputs = PlanInputs {
        queries: &host.queries,
        sigma2: host.sigma2_arg(case),
        fixed_channels: host.fixed_arg(case),
        rotation: host.rotation.as_deref(),
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
    let status = download(&out.status, "plan status");
    let result = PlanResult {
        q_store: download(&out.q_store, "q_store"),
        depths: download(&out.depths, "depths"),
        class_count: download(&out.class_count, "class_count"),
        runs: download(&out.runs, "source runs"),
        staged_runs: out.staged_runs.as_ref().map(|t| download(t, "staged runs")),
        status: [status[0], status[1], status[2]],
    };
    let (seg_words, seg_scales) = segment_addresses(&store);
    let at = PlanAddresses {
        seg_words: &seg_words,
        seg_scales: &seg_scales,
        staging: Some((staging.words.addr(), staging.scales.addr(), staging.planes)),
    };
    let (report, expected) = check_plan(&label, seed, case, &host, &result, &at, &shape);
    if let Some(report) = report {
        panic!("{report}");
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

/// Every shape of `FEW_SHAPES` at `threads`, `with` applied, over sequences of many segments
/// (several run-table entries a thread, the last round partial), of a few and of none; the
/// methods in turn, every method's run tables staged and not.
fn check_run_tables(
    t: &mut fathom_tests::kit::GpuTest,
    threads: usize,
    with: impl Fn(Case) -> Case,
) {
    let methods = [
        PlanMethod::Fathom,
        PlanMethod::Sparq { r: 16 },
        PlanMethod::Uniform { t: 3 },
        PlanMethod::Thumbnail,
    ];
    for (i, (g, d, blk)) in FEW_SHAPES.into_iter().enumerate() {
        let case = with(Case {
            threads,
            n_stored: vec![3 * blk, 0, (2 * threads + 3) * 64 * SEGMENT_WORDS + blk],
            ..Case::new(d, g, blk, methods[(i + threads) % methods.len()])
        });
        check(&t.gpu, &mut t.rng, t.seed, &case);
    }
}

// The run tables written from segment pointers loaded in batches (`PlanSpec::batched_runs`,
// opt-in; exact on an H100, no faster): batches of 8 a thread up to 256 threads, of 4 above.
gpu_test!(gpu_plan_batched_run_tables, |t| {
    for threads in [32, 96, 256, 512, 1024] {
        check_run_tables(&mut t, threads, |case| Case {
            batched_runs: true,
            ..case
        });
    }
});

// The run tables shared among blocks (`PlanSpec::run_blocks`; exact on an H100, the default
// at long contexts): 2 to 16 blocks a head, each working out the same plan and writing its
// share of the entries (block 0 the other outputs); shares that do not divide the entries,
// blocks with no entry.
gpu_test!(gpu_plan_shared_run_tables, |t| {
    for (threads, run_blocks) in [(32, 3), (96, 16), (256, 4), (512, 8), (1024, 2)] {
        check_run_tables(&mut t, threads, |case| Case { run_blocks, ..case });
    }
});

// The run-table entries written by lane pairs (`PlanSpec::paired_runs`, opt-in): a lane the
// pointers, the next the channel and depth, alone and with the tables shared among blocks.
gpu_test!(gpu_plan_paired_run_tables, |t| {
    for (threads, run_blocks) in [(32, 1), (96, 3), (256, 4), (512, 1), (1024, 2)] {
        check_run_tables(&mut t, threads, |case| Case {
            run_blocks,
            paired_runs: true,
            ..case
        });
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

// Fathom's direct water line (`PlanSpec::direct_line`, opt-in): the same plans bit for bit as
// the rounds of midpoints (the reference's) for every G and D of §1 at random budgets and 48,
// every block size (one warp to 32), raw and rotated, and the edges (all-zero queries, a huge
// and the minimum budget, sequences with nothing stored).
gpu_test!(gpu_plan_direct_line_matches_reference, |t| {
    let direct = |case: Case| Case {
        direct_line: true,
        ..case
    };
    for (i, (g, d, blk)) in all_shapes().into_iter().enumerate() {
        let block = BlockSize::from_tokens(blk).unwrap();
        let most = d as f64 * (4.0 + block.scale_bits_per_token());
        for budget in [48.0, t.rng.gen_range(min_budget(block)..most).ceil()] {
            let case = direct(Case {
                budget: budget as f32,
                threads: [32, 64, 96, 128, 224, 256, 512, 1024][i % 8],
                rotate: i % 3 == 1,
                ..Case::new(d, g, blk, PlanMethod::Fathom)
            });
            check(&t.gpu, &mut t.rng, t.seed, &case);
        }
    }
    for (g, d, blk) in FEW_SHAPES {
        let block = BlockSize::from_tokens(blk).unwrap();
        for (budget, zero_queries, n_stored) in [
            (48.0, vec![(0, 1), (2, 0)], vec![3 * blk, 0, 9 * blk]),
            (1.0e6, vec![], vec![3 * blk, 0, 9 * blk]),
            (min_budget(block) as f32, vec![], vec![0, blk, 21 * blk]),
        ] {
            let case = direct(Case {
                budget,
                zero_queries: zero_queries.clone(),
                n_stored,
                ..Case::new(d, g, blk, PlanMethod::Fathom)
            });
            let depths = check(&t.gpu, &mut t.rng, t.seed, &case);
            for &(b, h) in &zero_queries {
                assert!(
                    depths[b][h].iter().all(|&t| t == 0),
                    "zero queries must read nothing (FATHOM_TEST_SEED={})",
                    t.seed
                );
            }
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
