//! The plan kernel (`templates/plan.cu.tera`, SPEC §3, §4, §7) run on the CPU, exactly as
//! rendered (`cpu_cuda`: every CUDA thread a fiber, switched in a seeded random order at
//! barriers and warp collectives), against the f64 reference planner as `gpu_plan.rs` checks it
//! on a GPU (`fathom_tests::plan_check`). These need a C++17 compiler (`c++`), not a GPU.
//!
//! Every launch plans a batch of `B` sequences × 2 KV heads (one block each), each `(b, h)` with
//! its own fresh random queries (per-channel scales over two orders of magnitude) and `σ²` (a
//! few channels exactly 0); the stores are the reference's, laid out as on a GPU (a buffer per
//! segment, 128-token segments, so a few blocks span several). Checked:
//!
//! - `q_store`: raw, the queries bit for bit; rotated, bit for bit equal to `Rᵀq` as f32 fma in
//!   ascending `i` (`store_kernels::rotate_f32`, the kernel's order: the host's `fmaf` is
//!   correctly rounded, as `f32::mul_add` is) and within fp32 rounding of the f64 product.
//! - `depths` exactly equal to the reference's on the same f32 inputs (for `fathom` the kernel's
//!   double `log2` is the host's libm, as `f64::log2` is, so the 30-step bisection of the kernel,
//!   several midpoints a round by several warps, must reach the serial line bit for bit).
//! - `class_count`, every entry of the source run table (segment addresses as the CPU run laid
//!   them out, channel, depth) and of the staged table, slots past the stored segments still
//!   poison; the overflow status; no word written past any output, into the staging or into an
//!   input (poison guards, compared buffers); without a staging the staged table pointer null.
//!
//! Cases: `fathom` at every D of 64, 96 (not a multiple of 32) and 128 × G of 1, 4 and 7, the
//! block size cycling over 32, 64 and 128 tokens, each shape at two of 32, 64, 256 and 1,024
//! threads (the bisection's rounds and midpoints per round follow the warp count; every D meets
//! all four), raw, and each D rotated; budgets the minimum (one channel at depth 1), 48 bits, a
//! random one, every positive channel at depth 4 fitting exactly, and one plane less (one
//! channel at depth 3); all-zero queries in two heads (nothing read); sequences of 0, 3 and 9
//! blocks (the last segment partial at 32- and 64-token blocks), at 32 and 64 threads also one long enough that every
//! thread writes several segments' tables; without a staging, and with one too small (status).
//! Near ties: heads built so that the plan after 29 bisection steps differs from the plan after
//! 30 (the water line within one last halving of a second channel's level), so the bisection
//! must be the reference's to the last step. Exact ties: heads of four channels at exact integer
//! levels (and one twin 2⁻²⁸ above one of them) in a bracket 16 wide, so that the water line is
//! exactly a midpoint the bisection tries, where only `>=` (not `>`) gives the reference's plan.
//! `sparq(16)`, `sparq(32)`, `double_sparsity(32)`, `thumbnail` and `uniform(1..=4)` raw and
//! rotated, `loki(16)` and `loki(32)` rotated (the reference refuses a raw `loki`), each also
//! with all-zero queries (`sparq`'s ties go to the lower channel) and without a staging;
//! `uniform` with a staging one plane short (status, staged depths 0) and exactly full.
//!
//! Mutants that must be caught (the source rendered, one line changed): the rotation
//! transposed, the bisection's low end 7 below the lowest level instead of 9, a round's verdict
//! taken the wrong way, shallow depth classes first in the slot order, staged planes packed one
//! a slot, a fifth class count written past the last head's (only the guard words see it), the
//! overflow status never set; on the near ties (random inputs miss them) one bisection step
//! fewer and the last round one level short; on the exact ties the depth comparisons `>=`
//! turned to `>` (which changes no plan elsewhere).
//!
//! The plan that also scores the tail (`PlanSpec::tail`): its plan checked as above, its tail
//! blocks' scores against the f64 dot products (and nothing else of the scores written), two
//! mutants of the tail's indexing caught.
//!
//! The run tables written from batched pointer loads (`PlanSpec::batched_runs`) and shared
//! among several blocks a head (`PlanSpec::run_blocks`, also with a tail): every output as
//! above, and their mutants caught.
//!
//! About 60 s on two cores from a cold cache, most of it compiling 46 programs (mutants
//! included), which later runs reuse (cached by the hash of their source): then about 25 s.

use codegen::render::render;
use codegen::spec::{KvRows, Placement, PlanMethod};
use fathom_tests::device_store::max_seg;
use fathom_tests::inputs;
use fathom_tests::kv_rows::interleave;
use fathom_tests::plan_check::{check_plan, PlanCase, PlanHostInputs, SEGMENT_WORDS};
use fathom_tests::plan_cpu::{CpuPlan, CpuPlanArgs, CpuPlanRun, CpuTail};
use fathom_tests::store_kernels::class_count;
use rand::{Rng, SeedableRng};
use reference::planner::{depth_at, min_budget, plan_cost, water_fill, BRACKET_LOW_MARGIN};
use reference::store::{BlockSize, HeadStore};

/// How a case is launched beyond its spec.
#[derive(Clone, Copy, Debug)]
enum Staging {
    /// No staging: the staged table pointer is null.
    None,
    /// A staging of the case's `stage_planes`.
    Planes,
}

/// Runs `case` with `plan` on fresh random stores and inputs and checks every output; what
/// differed, if anything did, and the expected depths `[b][h]`.
fn run_case(
    rng: &mut impl Rng,
    seed: u64,
    case: &PlanCase,
    plan: &CpuPlan,
    staging: Staging,
) -> (Vec<String>, Vec<Vec<Vec<u8>>>) {
    let host = PlanHostInputs::random(rng, case);
    run_with(rng, seed, case, plan, staging, &host)
}

/// [`run_case`] with the inputs `host`.
fn run_with(
    rng: &mut impl Rng,
    seed: u64,
    case: &PlanCase,
    plan: &CpuPlan,
    staging: Staging,
    host: &PlanHostInputs,
) -> (Vec<String>, Vec<Vec<Vec<u8>>>) {
    let stores = inputs::head_stores(rng, case.layout(), &case.n_stored, case.heads);
    let stage_planes = match staging {
        Staging::None => None,
        Staging::Planes => Some(case.stage_planes),
    };
    let args = plan_args(case, host, &stores, stage_planes, None);
    let label = format!(
        "{} on the CPU: budget {} n_stored {:?} zero queries {:?} staging {staging:?} ({} planes)",
        plan.name(),
        case.budget,
        case.n_stored,
        case.zero_queries,
        case.stage_planes,
    );
    match run_and_check(rng, seed, case, host, plan, &args, &label) {
        Ok((_, failures, expected)) => (failures, expected),
        Err(e) => (vec![e], Vec::new()),
    }
}

/// The launch arguments of `case` over `stores` with the inputs `host`.
fn plan_args<'a>(
    case: &PlanCase,
    host: &'a PlanHostInputs,
    stores: &'a [Vec<HeadStore>],
    stage_planes: Option<usize>,
    tail: Option<CpuTail<'a>>,
) -> CpuPlanArgs<'a> {
    CpuPlanArgs {
        stores,
        max_seg: max_seg(case.layout(), &case.n_stored),
        queries: &host.queries,
        sigma2: host.sigma2_arg(case),
        fixed_channels: host.fixed_arg(case),
        rotation: host.rotation.as_deref(),
        budget: case.budget,
        stage_planes,
        tail,
    }
}

/// A checked run: the run, what differed from the reference, the expected depths `[b][h]`.
type Checked = (CpuPlanRun, Vec<String>, Vec<Vec<Vec<u8>>>);

/// Runs `plan` over `args` and checks what it planned against the reference: the run, what
/// differed (stray writes included) and the expected depths `[b][h]`; or why it did not run.
fn run_and_check(
    rng: &mut impl Rng,
    seed: u64,
    case: &PlanCase,
    host: &PlanHostInputs,
    plan: &CpuPlan,
    args: &CpuPlanArgs<'_>,
    label: &str,
) -> Result<Checked, String> {
    let run = plan
        .run(args, rng.gen())
        .map_err(|e| format!("{label}: {e}"))?;
    let mut failures: Vec<String> = run
        .stray_writes
        .iter()
        .map(|w| format!("{label}: {w} (FATHOM_TEST_SEED={seed})"))
        .collect();
    let (report, expected) = check_plan(
        label,
        seed,
        case,
        host,
        &run.result,
        &run.addresses(),
        &run.shape,
    );
    failures.extend(report);
    Ok((run, failures, expected))
}

fn assert_none(failures: Vec<String>) {
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Channels with `σ² > 0` (`PlanHostInputs::random` zeroes `c % 17 == 3`): with nonzero queries
/// the channels of positive importance.
fn positive_channels(d: usize) -> usize {
    (0..d).filter(|c| c % 17 != 3).count()
}

/// The budget at which every positive channel sits at depth 4 exactly.
fn all_fit_budget(case: &PlanCase) -> f32 {
    positive_channels(case.d) as f32 * (4.0 + case.block().scale_bits_per_token() as f32)
}

/// Checks the `fathom` case `base` (its spec built once) at the budgets of the module doc, with
/// the edge plans' shapes asserted beside the reference's agreement.
fn check_fathom(rng: &mut impl Rng, seed: u64, base: &PlanCase) -> Vec<String> {
    let plan = CpuPlan::build(base.spec()).expect("the plan builds for the CPU");
    let block = base.block();
    let most = base.d as f64 * (4.0 + block.scale_bits_per_token());
    let all_fit = all_fit_budget(base);
    let budgets = [
        min_budget(block) as f32,
        48.0,
        rng.gen_range(min_budget(block)..most).ceil() as f32,
        all_fit,
        all_fit - 1.0,
    ];
    let mut failures = Vec::new();
    for (i, &budget) in budgets.iter().enumerate() {
        let mut case = PlanCase {
            budget,
            ..base.clone()
        };
        if budget == 48.0 {
            case.zero_queries = vec![(0, 1), (2, 0)];
        }
        if i == 2 && base.threads <= 64 {
            // More than twice as many segments as threads, and a partial last one.
            case.n_stored
                .push((2 * base.threads + 3) * 64 * SEGMENT_WORDS + base.blk);
        }
        let staging = if i == 1 {
            Staging::None
        } else {
            Staging::Planes
        };
        let (f, depths) = run_case(rng, seed, &case, &plan, staging);
        if !f.is_empty() {
            failures.extend(f);
            continue;
        }
        let heads = depths.iter().flatten();
        let label = format!("{} budget {budget} (FATHOM_TEST_SEED={seed})", plan.name());
        for &(b, h) in &case.zero_queries {
            if depths[b][h].iter().any(|&t| t != 0) {
                failures.push(format!("{label}: zero queries read {:?}", depths[b][h]));
            }
        }
        let n_pos = positive_channels(base.d) as u32;
        for head in heads {
            let counts = class_count(head);
            let ok = match i {
                0 => counts == [0, 0, 0, 1],
                3 => counts == [n_pos, 0, 0, 0],
                4 => counts == [n_pos - 1, 1, 0, 0],
                _ => true,
            };
            if !ok {
                failures.push(format!("{label}: class counts {counts:?}"));
            }
        }
    }
    // A staging of 16 planes a segment: the plans at 48 bits exceed it (status, staged depths 0).
    let case = PlanCase {
        stage_planes: 16,
        ..base.clone()
    };
    failures.extend(run_case(rng, seed, &case, &plan, Staging::Planes).0);
    failures
}

const HEAD_DIMS: [usize; 3] = [64, 96, 128];
const GROUPS: [usize; 3] = [1, 4, 7];
const BLOCKS: [usize; 3] = [32, 64, 128];
const THREADS: [usize; 4] = [32, 64, 256, 1024];

/// The raw `fathom` cases of D × G, the block size cycling (every (D, BLK) and (G, BLK) pair
/// once); `part` 0 and 1 give each shape a different thread count, so that every D meets all
/// four.
fn fathom_cases(part: usize) -> Vec<PlanCase> {
    let mut cases = Vec::new();
    for (i, d) in HEAD_DIMS.into_iter().enumerate() {
        for (j, g) in GROUPS.into_iter().enumerate() {
            let k = 3 * i + j;
            let threads = THREADS[(k + part * 2 + i) % 4];
            cases.push(PlanCase {
                threads,
                ..PlanCase::new(d, g, BLOCKS[(i + j) % 3], PlanMethod::Fathom)
            });
        }
    }
    cases
}

#[test]
fn fathom_matches_the_reference() {
    let (mut rng, seed) = inputs::rng_and_seed("fathom_matches_the_reference");
    let mut failures = Vec::new();
    for case in fathom_cases(0) {
        failures.extend(check_fathom(&mut rng, seed, &case));
    }
    assert_none(failures);
}

#[test]
fn fathom_at_other_thread_counts_matches_the_reference() {
    let (mut rng, seed) =
        inputs::rng_and_seed("fathom_at_other_thread_counts_matches_the_reference");
    let mut failures = Vec::new();
    for case in fathom_cases(1) {
        failures.extend(check_fathom(&mut rng, seed, &case));
    }
    assert_none(failures);
}

#[test]
fn fathom_rotated_matches_the_reference() {
    let (mut rng, seed) = inputs::rng_and_seed("fathom_rotated_matches_the_reference");
    let mut failures = Vec::new();
    for (i, d) in HEAD_DIMS.into_iter().enumerate() {
        let case = PlanCase {
            rotate: true,
            threads: [256, 64, 1024][i],
            ..PlanCase::new(d, [4, 7, 1][i], BLOCKS[(i + 1) % 3], PlanMethod::Fathom)
        };
        failures.extend(check_fathom(&mut rng, seed, &case));
    }
    assert_none(failures);
}

#[test]
fn other_methods_match_the_reference() {
    let (mut rng, seed) = inputs::rng_and_seed("other_methods_match_the_reference");
    let methods = [
        (PlanMethod::Sparq { r: 16 }, false),
        (PlanMethod::Sparq { r: 32 }, true),
        (PlanMethod::DoubleSparsity, false),
        (PlanMethod::DoubleSparsity, true),
        (PlanMethod::Loki { r: 16 }, true),
        (PlanMethod::Loki { r: 32 }, true),
        (PlanMethod::Thumbnail, false),
        (PlanMethod::Thumbnail, true),
        (PlanMethod::Uniform { t: 1 }, true),
        (PlanMethod::Uniform { t: 2 }, false),
        (PlanMethod::Uniform { t: 3 }, true),
        (PlanMethod::Uniform { t: 4 }, false),
    ];
    let mut failures = Vec::new();
    for (i, (method, rotate)) in methods.into_iter().enumerate() {
        let d = HEAD_DIMS[i % 3];
        let g = GROUPS[i / 3 % 3];
        let base = PlanCase {
            rotate,
            threads: THREADS[i % 4],
            ..PlanCase::new(d, g, BLOCKS[(i / 2) % 3], method)
        };
        let plan = CpuPlan::build(base.spec()).expect("the plan builds for the CPU");
        let mut cases = vec![
            (base.clone(), Staging::Planes),
            (
                PlanCase {
                    zero_queries: vec![(1, 0), (2, 1)],
                    ..base.clone()
                },
                Staging::None,
            ),
        ];
        if let PlanMethod::Uniform { t } = method {
            // One plane short of the plan (status, staged depths 0), and exactly full.
            for planes in [t * d - 1, t * d] {
                cases.push((
                    PlanCase {
                        stage_planes: planes,
                        ..base.clone()
                    },
                    Staging::Planes,
                ));
            }
        }
        for (case, staging) in cases {
            failures.extend(run_case(&mut rng, seed, &case, &plan, staging).0);
        }
    }
    assert_none(failures);
}

/// `planner::water_fill`'s depths with `steps` bisection steps in place of its 30, from the
/// gains `log2(3 w_c)` (`None`: `w_c = 0`), replayed step for step.
fn bisected_depths(gains: &[Option<f64>], budget: f64, block: BlockSize, steps: u32) -> Vec<u8> {
    let depths_at = |x: f64| -> Vec<u8> {
        gains
            .iter()
            .map(|g| g.map_or(0, |g| depth_at(g, x)))
            .collect()
    };
    let known: Vec<f64> = gains.iter().flatten().copied().collect();
    if known.len() as f64 * (4.0 + block.scale_bits_per_token()) <= budget {
        return gains
            .iter()
            .map(|g| if g.is_some() { 4 } else { 0 })
            .collect();
    }
    let mut hi = known.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut lo = known.iter().copied().fold(f64::INFINITY, f64::min) - BRACKET_LOW_MARGIN;
    for _ in 0..steps {
        let mid = (lo + hi) * 0.5;
        if plan_cost(&depths_at(mid), block) <= budget {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    depths_at(hi)
}

/// `log2(3 w_c)` of one head's queries `[G][D]` and `σ²`, as the reference and the kernel form
/// them (`w_c = σ²_c · Σ_g q_g[c]²` in double, in `g` order).
fn gains(queries: &[f32], sigma2: &[f32], d: usize) -> Vec<Option<f64>> {
    (0..d)
        .map(|c| {
            let sum: f64 = queries
                .chunks_exact(d)
                .map(|q| f64::from(q[c]) * f64::from(q[c]))
                .sum();
            let w = f64::from(sigma2[c]) * sum;
            (w > 0.0).then(|| (3.0 * w).log2())
        })
        .collect()
}

/// Inputs of a raw `fathom` case (G >= 2) whose every head's plan at 29 bisection steps differs
/// from the plan at 30: the water line ends within one last halving of a second channel's
/// level. Each head is drawn until the reference and a 29-step replay disagree: fresh queries
/// whose last query head is zero, then a channel `b` one depth above the critical channel `a`
/// (the channel whose next plane would break the budget) made `a`'s twin, its level `δ` above
/// `a`'s, `δ` just over the last step's width (through `b`'s last query head alone). Then the
/// 30-step line lies between `a`'s level and `b`'s, the 29-step line, one halving wider, above
/// both in half the cases (those kept).
fn near_tie_inputs(rng: &mut impl Rng, case: &PlanCase) -> PlanHostInputs {
    let (d, g) = (case.d, case.g);
    assert!(g >= 2 && !case.rotate && case.method == PlanMethod::Fathom);
    let block = case.block();
    let budget = f64::from(case.budget);
    let mut host = PlanHostInputs::random(rng, case);
    for bh in 0..case.n_stored.len() * case.heads {
        let sigma2 = host.sigma2[bh * d..(bh + 1) * d].to_vec();
        let found = (0..10_000).find_map(|_| {
            let mut q: Vec<f32> = (0..g * d)
                .map(|i| {
                    if i / d == g - 1 {
                        0.0
                    } else {
                        rng.gen_range(-1.0f32..1.0) * 10f32.powf(rng.gen_range(-1.0..1.0))
                    }
                })
                .collect();
            let before = gains(&q, &sigma2, d);
            let depths = bisected_depths(&before, budget, block, 30);
            let level = |c: usize| before[c].map(|l| l - 2.0 * f64::from(depths[c] + 1));
            let a = (0..d)
                .filter(|&c| depths[c] < 4 && before[c].is_some())
                .max_by(|&x, &y| level(x).unwrap().total_cmp(&level(y).unwrap()))?;
            let twins: Vec<usize> = (0..d)
                .filter(|&c| c != a && depths[c] == depths[a] + 1 && sigma2[c] > 0.0)
                .collect();
            let b = *twins.get(rng.gen_range(0..twins.len().max(1)))?;
            let known: Vec<f64> = before.iter().flatten().copied().collect();
            let top = known.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let bottom = known.iter().copied().fold(f64::INFINITY, f64::min);
            let delta = (top - bottom + BRACKET_LOW_MARGIN) * 2f64.powi(-30) * 1.004;
            let sum_a: f64 = (0..g - 1)
                .map(|k| f64::from(q[k * d + a]) * f64::from(q[k * d + a]))
                .sum();
            for k in 0..g - 1 {
                q[k * d + b] = q[k * d + a];
            }
            q[(g - 1) * d + b] = (sum_a * (delta * std::f64::consts::LN_2).exp_m1()).sqrt() as f32;
            let mut sigma2 = sigma2.clone();
            sigma2[b] = sigma2[a];
            let after = gains(&q, &sigma2, d);
            let thirty = bisected_depths(&after, budget, block, 30);
            let rows: Vec<Vec<f64>> = q
                .chunks_exact(d)
                .map(|r| r.iter().map(|&x| f64::from(x)).collect())
                .collect();
            let s2: Vec<f64> = sigma2.iter().map(|&x| f64::from(x)).collect();
            let reference = water_fill(&rows, &s2, budget, block).ok()?.depths;
            (thirty == reference && bisected_depths(&after, budget, block, 29) != thirty)
                .then_some((q, sigma2[b], b))
        });
        let (q, sigma2_b, b) = found.expect("a near tie within 10,000 draws");
        host.queries[bh * g * d..(bh + 1) * g * d].copy_from_slice(&q);
        host.sigma2[bh * d + b] = sigma2_b;
    }
    host
}

/// Four f32 queries whose importance `Σ_g q_g²` (in double, in `g` order) is the double `w`
/// with `3w` exactly `2^j` (`σ² = 1`): a channel at level `log2(3w) = j` exactly.
fn exact_level(rng: &mut impl Rng, j: i32) -> [f32; 4] {
    let power = 2f64.powi(j);
    let third = power / 3.0;
    let target = [
        third,
        f64::from_bits(third.to_bits() + 1),
        f64::from_bits(third.to_bits() - 1),
    ]
    .into_iter()
    .find(|&w| 3.0 * w == power)
    .expect("a double w with 3w = 2^j");
    let sq = |x: f32| f64::from(x) * f64::from(x);
    loop {
        let q0 = ((target * rng.gen_range(0.3..0.6)).sqrt()) as f32;
        let q1 = (((target - sq(q0)) * rng.gen_range(0.3..0.6)).sqrt()) as f32;
        let s01 = 0.0 + sq(q0) + sq(q1);
        let near = ((target - s01).sqrt() as f32).to_bits();
        for n in 0..4096 {
            let q2 = f32::from_bits(near.saturating_sub(n));
            let s2 = s01 + sq(q2);
            let rest = target - s2;
            if rest < 0.0 {
                continue;
            }
            let q3 = (rest.sqrt() as f32).to_bits();
            for q3 in [q3.saturating_sub(1), q3, q3 + 1].map(f32::from_bits) {
                if s2 + sq(q3) == target {
                    return [q0, q1, q2, q3];
                }
            }
        }
    }
}

/// Inputs of a raw `fathom` case (G = 4, BLK = 64, budget 7 bits) whose every head has four
/// channels of importance, the rest `σ² = 0`: `T` at level `k` (the top), `B` at `k - 7` (the
/// bottom: the bracket is 16 wide, so every integer is a midpoint), `a` at `k - 3` and its twin
/// `b` at `k - 3 + 2⁻²⁸` (less than the last step, 2⁻²⁶), levels exact through
/// [`exact_level`]. The budget's water line is `a`'s next level, `k - 7`, exactly a midpoint the
/// bisection tries: with `>=` it does not fit and the line ends at `k - 7 + 2⁻²⁶` (`a` and `b` at
/// depth 1); with the depth comparisons `>`, it would fit (`a` at 1, `b` at 2) and the line stop
/// there. Each head is checked against the reference and a replay of the `>` bisection.
fn exact_tie_inputs(rng: &mut impl Rng, case: &PlanCase) -> PlanHostInputs {
    let (d, g) = (case.d, case.g);
    assert!(g == 4 && case.blk == 64 && case.budget == 7.0 && !case.rotate);
    let block = case.block();
    let mut host = PlanHostInputs::random(rng, case);
    for bh in 0..case.n_stored.len() * case.heads {
        let k = rng.gen_range(-4..=6);
        let mut channels: Vec<usize> = (0..d).collect();
        let picked: Vec<usize> = (0..4)
            .map(|i| channels.swap_remove(rng.gen_range(0..d - i)))
            .collect();
        let (top, bottom, a, b) = (picked[0], picked[1], picked[2], picked[3]);
        let mut q = vec![0.0f32; g * d];
        let mut sigma2 = vec![0.0f32; d];
        for (c, level) in [(top, k), (bottom, k - 7), (a, k - 3)] {
            let rows = exact_level(rng, level);
            for (i, x) in rows.into_iter().enumerate() {
                q[i * d + c] = x;
            }
            sigma2[c] = 1.0;
        }
        // b: a's queries, the last one raised so that its level is 2⁻²⁸ above a's.
        let sum_a: f64 = (0..g).map(|i| f64::from(q[i * d + a]).powi(2)).sum();
        for i in 0..g {
            q[i * d + b] = q[i * d + a];
        }
        let extra = sum_a * (2f64.powi(-28) * std::f64::consts::LN_2).exp_m1();
        q[(g - 1) * d + b] = (f64::from(q[(g - 1) * d + a]).powi(2) + extra).sqrt() as f32;
        sigma2[b] = 1.0;
        let levels = gains(&q, &sigma2, d);
        let (level_a, level_b) = (levels[a].unwrap(), levels[b].unwrap());
        assert!(
            [(top, k), (bottom, k - 7), (a, k - 3)]
                .iter()
                .all(|&(c, l)| levels[c] == Some(f64::from(l)))
                && level_b > level_a
                && level_b - level_a < 2f64.powi(-26),
            "exact levels: {levels:?}"
        );
        let rows: Vec<Vec<f64>> = q
            .chunks_exact(d)
            .map(|r| r.iter().map(|&x| f64::from(x)).collect())
            .collect();
        let s2: Vec<f64> = sigma2.iter().map(|&x| f64::from(x)).collect();
        let reference = water_fill(&rows, &s2, 7.0, block).unwrap().depths;
        assert_eq!(reference, bisected_depths(&levels, 7.0, block, 30));
        assert_eq!((reference[a], reference[b], reference[top]), (1, 1, 3));
        host.queries[bh * g * d..(bh + 1) * g * d].copy_from_slice(&q);
        host.sigma2[bh * d..(bh + 1) * d].copy_from_slice(&sigma2);
    }
    host
}

/// The exact-tie case (`exact_tie_inputs`) at each of `threads` threads, `with` applied: what
/// differed from the reference.
fn exact_tie_failures(
    rng: &mut impl Rng,
    seed: u64,
    threads: &[usize],
    with: impl Fn(PlanCase) -> PlanCase,
) -> Vec<String> {
    let mut failures = Vec::new();
    for &threads in threads {
        let case = with(PlanCase {
            threads,
            budget: 7.0,
            ..PlanCase::new(64, 4, 64, PlanMethod::Fathom)
        });
        let plan = CpuPlan::build(case.spec()).expect("the plan builds for the CPU");
        let host = exact_tie_inputs(rng, &case);
        failures.extend(run_with(rng, seed, &case, &plan, Staging::Planes, &host).0);
    }
    failures
}

/// The near-tie cases (`near_tie_inputs`: three shapes, 32 to 1,024 threads), `with` applied:
/// what differed from the reference.
fn near_tie_failures(
    rng: &mut impl Rng,
    seed: u64,
    with: impl Fn(PlanCase) -> PlanCase,
) -> Vec<String> {
    let mut failures = Vec::new();
    for (d, g, blk, threads) in [(64, 4, 64, 32), (96, 7, 32, 1024), (128, 4, 128, 256)] {
        let case = with(PlanCase {
            threads,
            ..PlanCase::new(d, g, blk, PlanMethod::Fathom)
        });
        let plan = CpuPlan::build(case.spec()).expect("the plan builds for the CPU");
        let host = near_tie_inputs(rng, &case);
        failures.extend(run_with(rng, seed, &case, &plan, Staging::Planes, &host).0);
    }
    failures
}

#[test]
fn fathom_exact_ties_match_the_reference() {
    let (mut rng, seed) = inputs::rng_and_seed("fathom_exact_ties_match_the_reference");
    assert_none(exact_tie_failures(&mut rng, seed, &[32, 1024], |case| case));
}

#[test]
fn fathom_near_ties_match_the_reference() {
    let (mut rng, seed) = inputs::rng_and_seed("fathom_near_ties_match_the_reference");
    assert_none(near_tie_failures(&mut rng, seed, |case| case));
}

/// Four cases of a way of writing the run tables, at `threads[i]` threads and `with(i, case)`
/// applied: every output the reference's, with and without staging, over stores of many
/// segments (20 to 40 of 2 words, up to 40 D entries a head), of a few and of none; the kernel's
/// name carries `name(i)`.
fn run_table_cases(
    test: &str,
    threads: [usize; 4],
    with: impl Fn(usize, PlanCase) -> PlanCase,
    name: impl Fn(usize) -> String,
) {
    let (mut rng, seed) = inputs::rng_and_seed(test);
    let mut failures = Vec::new();
    let methods = [
        PlanMethod::Fathom,
        PlanMethod::Sparq { r: 16 },
        PlanMethod::Uniform { t: 3 },
        PlanMethod::Fathom,
    ];
    for (i, (threads, method)) in threads.into_iter().zip(methods).enumerate() {
        let d = HEAD_DIMS[i % 3];
        let blk = BLOCKS[i % 3];
        let base = with(
            i,
            PlanCase {
                threads,
                rotate: i == 3,
                n_stored: vec![40 * blk, 0, 3 * blk],
                ..PlanCase::new(d, GROUPS[i % 3], blk, method)
            },
        );
        let plan = CpuPlan::build(base.spec()).expect("the plan builds for the CPU");
        assert!(plan.name().contains(&name(i)), "{}", plan.name());
        for staging in [Staging::Planes, Staging::None] {
            failures.extend(run_case(&mut rng, seed, &base, &plan, staging).0);
        }
    }
    assert_none(failures);
}

/// The run tables written from segment pointers loaded in batches (`PlanSpec::batched_runs`,
/// opt-in), at 32 to 1,024 threads (batches of 8 and of 4 a thread; several batches a thread,
/// the last partial).
#[test]
fn batched_run_tables_match_the_reference() {
    run_table_cases(
        "batched_run_tables_match_the_reference",
        [32, 256, 512, 1024],
        |_, case| PlanCase {
            batched_runs: true,
            ..case
        },
        |_| "_rb".to_string(),
    );
}

#[test]
fn batched_run_table_mutations_are_caught() {
    let base = PlanCase {
        threads: 64,
        batched_runs: true,
        n_stored: vec![40 * 64, 0, 3 * 64],
        ..PlanCase::new(64, 4, 64, PlanMethod::Fathom)
    };
    assert_caught(
        &base,
        &[48.0],
        Inputs::Random,
        &[
            (
                "a batch's pointers from its first entry's segment",
                "const size_t seg = (size_t)bh * max_seg + e / D;\n        words_of[j]",
                "const size_t seg = (size_t)bh * max_seg + e0 / D;\n        words_of[j]",
            ),
            (
                "a batch's entries past the tables written",
                "if (e >= n_seg * D) continue;",
                "(void)0;",
            ),
            (
                "one entry a batch written",
                "for (int j = 0; j < RUN_BATCH; ++j) {\n        const int e = e0 + j * THREADS + (int)threadIdx.x;\n        if (e >= n_seg * D) continue;",
                "for (int j = 0; j < 1; ++j) {\n        const int e = e0 + j * THREADS + (int)threadIdx.x;\n        if (e >= n_seg * D) continue;",
            ),
            (
                "every entry's words from the batch's first pointer",
                "(unsigned long long)(words_of[j] + (size_t)c * 4 * S)",
                "(unsigned long long)(words_of[0] + (size_t)c * 4 * S)",
            ),
        ],
    );
}

/// The run tables shared among blocks (`PlanSpec::run_blocks`, opt-in): every entry written
/// by the block whose share holds it (poison guards see any missed), at 32 to 1,024 threads
/// and 2 to 16 blocks a head (shares that do not divide the entries, blocks with no entry).
#[test]
fn shared_run_tables_match_the_reference() {
    const RUN_BLOCKS: [usize; 4] = [3, 16, 4, 2];
    run_table_cases(
        "shared_run_tables_match_the_reference",
        [32, 64, 256, 1024],
        |i, case| PlanCase {
            run_blocks: RUN_BLOCKS[i],
            ..case
        },
        |i| format!("_rt{}", RUN_BLOCKS[i]),
    );
}

/// The run-table entries written by lane pairs (`PlanSpec::paired_runs`, opt-in), alone and
/// with the tables shared among blocks, at 32 to 1,024 threads: every half of every entry
/// (poison guards see any missed), staged and not.
#[test]
fn paired_run_tables_match_the_reference() {
    const RUN_BLOCKS: [usize; 4] = [1, 3, 4, 1];
    run_table_cases(
        "paired_run_tables_match_the_reference",
        [32, 96, 256, 1024],
        |i, case| PlanCase {
            paired_runs: true,
            run_blocks: RUN_BLOCKS[i],
            ..case
        },
        |i| match RUN_BLOCKS[i] {
            1 => "_rp".to_string(),
            r => format!("_rt{r}_rp"),
        },
    );
}

/// Mutants of the paired entries: a pair writing one half twice, the halves swapped, the
/// loop over whole entries, the staged table's halves swapped.
#[test]
fn paired_run_table_mutations_are_caught() {
    for run_blocks in [1, 3] {
        let base = PlanCase {
            threads: 64,
            run_blocks,
            paired_runs: true,
            n_stored: vec![40 * 64, 0, 3 * 64],
            ..PlanCase::new(64, 4, 64, PlanMethod::Fathom)
        };
        let end = if run_blocks > 1 {
            "run_end"
        } else {
            "n_seg * D"
        };
        assert_caught(
            &base,
            &[48.0],
            Inputs::Random,
            &[
                (
                    "the channel and depth in the pointers' half",
                    "entry[half & 1] = half & 1 ?",
                    "entry[0] = half & 1 ?",
                ),
                (
                    "the halves swapped",
                    "entry[half & 1] = half & 1 ?",
                    "entry[half & 1] = !(half & 1) ?",
                ),
                (
                    "half the halves written",
                    &format!("half < 2 * {end}; half += THREADS"),
                    &format!("half < {end}; half += THREADS"),
                ),
                (
                    "the staged halves swapped",
                    "staged_entry[half & 1] =\n                half & 1 ?",
                    "staged_entry[half & 1] =\n                !(half & 1) ?",
                ),
            ],
        );
    }
}

/// Mutants of the shared run tables. (Blocks writing more than their share, or the plan's
/// other outputs, write the same values as the block that owns them, which no output shows,
/// and so does another block than 0 writing the plan's outputs: not mutants a test can see.)
#[test]
fn shared_run_table_mutations_are_caught() {
    let base = PlanCase {
        threads: 64,
        run_blocks: 3,
        n_stored: vec![40 * 64, 0, 3 * 64],
        ..PlanCase::new(64, 4, 64, PlanMethod::Fathom)
    };
    assert_caught(
        &base,
        &[48.0],
        Inputs::Random,
        &[
            (
                "every block's share from the first entry",
                "const int run_begin = (int)blockIdx.z * run_share;",
                "const int run_begin = 0;",
            ),
            (
                "shares not rounded up",
                "const int run_share = ((n_seg * D + RUN_BLOCKS - 1) / RUN_BLOCKS + THREADS - 1) / THREADS * THREADS;",
                "const int run_share = (n_seg * D) / RUN_BLOCKS;",
            ),
            (
                "block 0 leaves when it has no entry",
                "if (!writes_plan && run_begin >= run_end) return;",
                "if (run_begin >= run_end) return;",
            ),
        ],
    );
}

/// The inputs a mutation check draws.
#[derive(Clone, Copy)]
enum Inputs {
    Random,
    NearTies,
    ExactTies,
}

/// The seed of the mutation checks: which inputs catch a mutant must not change between runs.
const MUTATION_SEED: u64 = 0x9_1a4;

/// Each mutation `(what, from, to)` applied once to `base`'s source must be caught by the cases
/// `budgets` (fresh inputs of `kind` from `MUTATION_SEED`) with a staging.
fn assert_caught(base: &PlanCase, budgets: &[f32], kind: Inputs, mutations: &[(&str, &str, &str)]) {
    let spec = base.spec();
    let source = render(&spec).expect("the plan renders");
    for &(what, from, to) in mutations {
        assert!(
            source.contains(from),
            "the mutant `{what}`: `{from}` is not in {}",
            spec_name(base)
        );
        let mutant = CpuPlan::build_source(spec, &source.replacen(from, to, 1))
            .unwrap_or_else(|e| panic!("the mutant `{what}` builds: {e}"));
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(MUTATION_SEED);
        let caught = budgets.iter().any(|&budget| {
            let failures = failures_at(&mut rng, MUTATION_SEED, base, budget, kind, &mutant);
            if std::env::var_os("FATHOM_SHOW_MUTANTS").is_some() {
                eprintln!("mutant `{what}` at {budget} bits: {failures:?}");
            }
            !failures.is_empty()
        });
        assert!(
            caught,
            "the mutant `{what}` of {} was not caught",
            spec_name(base)
        );
    }
}

/// What `plan` got wrong on `base` at `budget` bits over fresh inputs of `kind`, with a staging.
fn failures_at(
    rng: &mut impl Rng,
    seed: u64,
    base: &PlanCase,
    budget: f32,
    kind: Inputs,
    plan: &CpuPlan,
) -> Vec<String> {
    let case = PlanCase {
        budget,
        ..base.clone()
    };
    let host = match kind {
        Inputs::Random => PlanHostInputs::random(rng, &case),
        Inputs::NearTies => near_tie_inputs(rng, &case),
        Inputs::ExactTies => exact_tie_inputs(rng, &case),
    };
    run_with(rng, seed, &case, plan, Staging::Planes, &host).0
}

fn spec_name(case: &PlanCase) -> String {
    use codegen::spec::Family;
    case.spec().kernel_name()
}

/// The rotated case the random-input mutants run on: a staging of 60 planes, which the plans
/// at 92 bits and one plane short of all fitting exceed.
fn mutation_base() -> PlanCase {
    PlanCase {
        rotate: true,
        threads: 256,
        stage_planes: 60,
        ..PlanCase::new(96, 4, 64, PlanMethod::Fathom)
    }
}

#[test]
fn plan_mutations_are_caught() {
    let base = mutation_base();
    let all_fit = all_fit_budget(&base);
    assert_caught(
        &base,
        &[48.0, 92.0, all_fit - 1.0],
        Inputs::Random,
        &[
            (
                "the rotation transposed",
                "fmaf(basis[i * D + e % D], qg[i], acc)",
                "fmaf(basis[(e % D) * D + i], qg[i], acc)",
            ),
            (
                "the bisection's low end 7 below the lowest level, not 9",
                "double lo = bottom - 9.0, hi = top;",
                "double lo = bottom - 7.0, hi = top;",
            ),
            (
                "a round's verdict taken the wrong way",
                "if (fits_at[n]) { hi = mid; n = 2 * n; } else { lo = mid; n = 2 * n + 1; }",
                "if (fits_at[n]) { hi = mid; n = 2 * n + 1; } else { lo = mid; n = 2 * n; }",
            ),
            (
                "shallow classes first in the slot order",
                "for (int u = 4; u > t; --u) slot += count[u];",
                "for (int u = 1; u < t; ++u) slot += count[u];",
            ),
            (
                "staged planes packed one a slot",
                "for (int u = 4; u > t; --u) prefix += u * count[u];",
                "for (int u = 4; u > t; --u) prefix += count[u];",
            ),
            (
                "a fifth class count written (past the last head's)",
                "if (threadIdx.x < 4) class_count[(size_t)bh * 4 + threadIdx.x] = count[4 - threadIdx.x];",
                "if (threadIdx.x < 5) class_count[(size_t)bh * 4 + threadIdx.x] = count[4 - threadIdx.x];",
            ),
            (
                "the overflow status never set",
                "if (staged && !fits && threadIdx.x == 0",
                "if (staged && !fits && threadIdx.x == 1024",
            ),
        ],
    );
}

/// The bisection's length is caught only where the water line lands within a last halving of
/// another channel's level: the near ties, whose every head's plan at 29 steps differs.
#[test]
fn bisection_mutations_are_caught_on_near_ties() {
    let base = PlanCase {
        threads: 256,
        ..PlanCase::new(64, 4, 64, PlanMethod::Fathom)
    };
    assert_caught(
        &base,
        &[48.0],
        Inputs::NearTies,
        &[
            (
                "one bisection step fewer",
                "constexpr int BISECTION_STEPS = 30;",
                "constexpr int BISECTION_STEPS = 29;",
            ),
            (
                "the last round one level short",
                "const int levels = min(LEVELS, BISECTION_STEPS - done);",
                "const int levels = min(LEVELS, BISECTION_STEPS - done - (done + LEVELS >= BISECTION_STEPS));",
            ),
        ],
    );
}

/// The depth comparisons `>=` turned to `>` change no plan unless a midpoint the bisection tries
/// is exactly a channel's level with another channel's level within the last step above it: the
/// exact ties.
#[test]
fn depth_comparison_mutation_is_caught_on_exact_ties() {
    let base = PlanCase {
        threads: 256,
        budget: 7.0,
        ..PlanCase::new(64, 4, 64, PlanMethod::Fathom)
    };
    assert_caught(
        &base,
        &[7.0],
        Inputs::ExactTies,
        &[(
            "the depth comparisons `>=` turned to `>`",
            "return (d >= 2.0) + (d >= 4.0) + (d >= 6.0) + (d >= 8.0);",
            "return (d > 2.0) + (d > 4.0) + (d > 6.0) + (d > 8.0);",
        )],
    );
}

/// 16-bit values as the words of a CPU buffer (a zero pads an odd count).
fn words16(x: &[u16]) -> Vec<u32> {
    x.chunks(2)
        .map(|p| u32::from(p[0]) | u32::from(*p.get(1).unwrap_or(&0)) << 16)
        .collect()
}

/// One case of a plan that scores the tail, `plan` built from `case.spec()` with the tail:
/// fresh stores, queries and bf16 keys; what differed from the reference plan and the f64 tail.
fn tail_case_failures(
    rng: &mut impl Rng,
    seed: u64,
    case: &PlanCase,
    plan: &CpuPlan,
    kv_rows: KvRows,
) -> Vec<String> {
    let (d, g, blk, ld) = (case.d, case.g, case.blk, 512);
    let n_total = [
        case.n_stored[0] + rng.gen_range(1..blk),
        rng.gen_range(150..ld),
        case.n_stored[2],
    ];
    let host = PlanHostInputs::random(rng, case);
    let stores = inputs::head_stores(rng, case.layout(), &case.n_stored, case.heads);
    // Fresh bf16 keys in [-2, 2) for every token of every (b, h), laid out as `kv_rows`.
    let keys: Vec<Vec<u16>> = (0..n_total.len() * case.heads)
        .map(|bh| {
            (0..n_total[bh / case.heads] * d)
                .map(|_| half::bf16::from_f32(rng.gen_range(-2.0f32..2.0)).to_bits())
                .collect()
        })
        .collect();
    let rows: Vec<Vec<u32>> = keys
        .iter()
        .map(|k| match kv_rows {
            KvRows::Separate => words16(k),
            KvRows::Adjacent => words16(&interleave(k, &vec![0; k.len()], d)),
        })
        .collect();
    let totals: Vec<i32> = n_total.iter().map(|&n| n as i32).collect();
    let tail = CpuTail {
        rows: &rows,
        n_total: &totals,
        ld_scores: ld,
    };
    let args = plan_args(case, &host, &stores, None, Some(tail));
    let label = format!("{} on the CPU: n_total {n_total:?}", plan.name());
    let (run, mut failures, _) = match run_and_check(rng, seed, case, &host, plan, &args, &label) {
        Ok(checked) => checked,
        Err(e) => return vec![e],
    };
    let scores = run.scores.expect("a plan with a tail returns the scores");
    for (bh, key) in keys.iter().enumerate() {
        let b = bh / case.heads;
        for gi in 0..g {
            let q = &host.queries[(bh * g + gi) * d..][..d];
            for t in 0..ld {
                let got = scores[(bh * g + gi) * ld + t];
                if t < case.n_stored[b] || t >= n_total[b] {
                    if !got.is_nan() {
                        failures.push(format!(
                            "{label}: ({bh}, {gi}) token {t} outside the tail written"
                        ));
                    }
                    continue;
                }
                let want: f64 = (0..d)
                    .map(|c| f64::from(q[c]) * half::bf16::from_bits(key[t * d + c]).to_f64())
                    .sum();
                let bound: f64 =
                    1e-5 * (1.0 + (0..d).map(|c| (f64::from(q[c]) * 2.0).abs()).sum::<f64>());
                // A NaN (a token the tail missed) fails too.
                if got.is_nan() || (f64::from(got) - want).abs() > bound {
                    failures.push(format!(
                        "{label}: ({bh}, {gi}) token {t}: {got} against {want}"
                    ));
                }
            }
        }
    }
    failures
}

/// The plan that also scores the tail (`PlanSpec::tail`, opt-in, `Tiles::tail_in_plan`): its
/// plan is the reference's as before (every output, poison guards and all), and its extra
/// blocks write exactly the tail's scores, `n_stored .. n_total` of each sequence, within fp32
/// rounding of the f64 dot products of the raw queries and bf16 keys, and nothing else of the
/// scores. Sequences with a partial block of tail, with nothing stored (a tail of several loop
/// steps) and with no tail; both placements, both row layouts, D of 64, 80 (padded row lanes),
/// 96 and 128, G of 1, 3, 4 and 7, 32 to 256 threads, raw and rotated. Mutants that must be
/// caught: the tail's first token skipped, every sequence's tail taken from the first's heads.
#[test]
fn a_plan_scoring_the_tail_plans_as_before_and_scores_exactly_the_tail() {
    let (mut rng, seed) = inputs::rng_and_seed("cpu_plan tail");
    let mut failures = Vec::new();
    let cases = [
        (
            128,
            4,
            64,
            PlanMethod::Fathom,
            false,
            256,
            Placement::Hbm,
            KvRows::Separate,
        ),
        (
            96,
            7,
            32,
            PlanMethod::Sparq { r: 16 },
            true,
            64,
            Placement::Host,
            KvRows::Adjacent,
        ),
        (
            64,
            1,
            128,
            PlanMethod::Uniform { t: 3 },
            false,
            32,
            Placement::Hbm,
            KvRows::Adjacent,
        ),
        (
            80,
            3,
            64,
            PlanMethod::Thumbnail,
            false,
            128,
            Placement::Host,
            KvRows::Separate,
        ),
    ];
    for (i, (d, g, blk, method, rotate, threads, placement, kv_rows)) in
        cases.into_iter().enumerate()
    {
        let case = PlanCase {
            rotate,
            threads,
            n_stored: vec![3 * blk, 0, 3 * blk],
            // The run tables shared among blocks too (`PlanSpec::run_blocks`): one block a
            // sequence scores its tail all the same.
            run_blocks: [1, 3, 8, 1][i],
            ..PlanCase::new(d, g, blk, method)
        };
        let spec = case.spec().with_tail(placement, kv_rows);
        let plan = CpuPlan::build(spec).expect("the plan builds for the CPU");
        failures.extend(tail_case_failures(&mut rng, seed, &case, &plan, kv_rows));
        if i > 0 {
            continue;
        }
        let source = render(&spec).unwrap();
        for (what, from, to) in [
            (
                "first tail token skipped",
                "ld_scores, start, end, 0u, 1u",
                "ld_scores, start + 1, end, 0u, 1u",
            ),
            (
                "every tail from sequence 0",
                "(int)blockIdx.y * n_heads + (int)blockIdx.x - n_heads",
                "(int)blockIdx.x - n_heads",
            ),
        ] {
            assert!(
                source.contains(from),
                "{what}: `{from}` is not in the source"
            );
            let mutant = CpuPlan::build_source(spec, &source.replacen(from, to, 1))
                .expect("the mutant builds");
            let caught = tail_case_failures(&mut rng, seed, &case, &mutant, kv_rows);
            assert!(
                !caught.is_empty(),
                "mutant not caught: {what} (FATHOM_TEST_SEED={seed})"
            );
        }
    }
    assert!(
        failures.is_empty(),
        "{} (FATHOM_TEST_SEED={seed})",
        failures.join("\n")
    );
}

/// `case` with fathom's direct water line (`PlanSpec::direct_line`).
fn direct(case: PlanCase) -> PlanCase {
    PlanCase {
        direct_line: true,
        ..case
    }
}

/// The direct water line (`PlanSpec::direct_line`) plans as the rounds of midpoints do, the
/// reference's plan: every raw case of both thread-count parts (every D with every thread
/// count, every G and block size), the rotated ones and the other head dimensions, at every
/// budget of `check_fathom` (the minimum, everything fitting exactly, one plane short, all-zero
/// queries).
#[test]
fn fathom_direct_line_matches_the_reference() {
    let (mut rng, seed) = inputs::rng_and_seed("fathom_direct_line_matches_the_reference");
    let mut failures = Vec::new();
    for case in fathom_cases(0).into_iter().chain(fathom_cases(1)) {
        failures.extend(check_fathom(&mut rng, seed, &direct(case)));
    }
    // (D, G, threads, BLK, rotated): the rotated cases of `HEAD_DIMS`, then the head dimensions
    // whose levels the first warp sorts four (80) and eight (192, 256) a lane, -inf past D in
    // 80 and 192.
    for (d, g, threads, block, rotate) in [
        (64, 7, 64, 32, true),
        (96, 1, 1024, 64, true),
        (128, 4, 256, 128, true),
        (80, 4, 32, 32, false),
        (192, 7, 256, 64, false),
        (256, 1, 1024, 128, false),
    ] {
        let case = PlanCase {
            rotate,
            threads,
            ..PlanCase::new(d, g, block, PlanMethod::Fathom)
        };
        failures.extend(check_fathom(&mut rng, seed, &direct(case)));
    }
    assert_none(failures);
}

/// The direct water line on the near ties (the plan after 29 halvings differs from the plan
/// after 30) and the exact ties (the line exactly a midpoint the bisection tries).
#[test]
fn fathom_direct_line_ties_match_the_reference() {
    let (mut rng, seed) = inputs::rng_and_seed("fathom_direct_line_ties_match_the_reference");
    let mut failures = near_tie_failures(&mut rng, seed, direct);
    failures.extend(exact_tie_failures(&mut rng, seed, &[32, 256, 1024], direct));
    assert_none(failures);
}

/// The direct water line's steps, broken one at a time, on the inputs where each shows.
#[test]
fn direct_line_mutations_are_caught() {
    let base = direct(mutation_base());
    let all_fit = all_fit_budget(&base);
    assert_caught(
        &base,
        &[min_budget(base.block()) as f32, 48.0, 92.0, all_fit - 1.0],
        Inputs::Random,
        &[
            (
                "a boundary's count one short",
                "if (bound[n + step - 1] >= v) n += step;",
                "if (bound[n + step - 1] > v) n += step;",
            ),
            (
                "the sort's pairs within a lane in the wrong order",
                "const bool descending = (i & k) == 0;",
                "const bool descending = (i & k) != 0;",
            ),
            (
                "the sort's pairs across lanes in the wrong order",
                "const bool keeps_larger = ((i & j) == 0) == ((i & k) == 0);",
                "const bool keeps_larger = ((i & j) == 0) != ((i & k) == 0);",
            ),
            (
                "the last level left out of the sort",
                "sorted[e] = c < D ? level[c] : -FATHOM_INF;",
                "sorted[e] = c < D - 1 ? level[c] : -FATHOM_INF;",
            ),
            (
                "the line the least boundary over the budget",
                "if (fathom_cost(planes | active << 16) > (double)budget) line = v;",
                "if (fathom_cost(planes | active << 16) <= (double)budget) line = v;",
            ),
            (
                "the scale cost left out of the boundaries' cost",
                "const int active = boundaries_at_least(bound[0], v);",
                "const int active = 0 * boundaries_at_least(bound[0], v);",
            ),
            (
                "the first warp's line left out of the block's",
                "for (int w = 0; w < WARPS; ++w) line = fmax(line, warp_line[w]);",
                "for (int w = 1; w < WARPS; ++w) line = fmax(line, warp_line[w]);",
            ),
            (
                "the bisection's low end 7 below the lowest level, not 9",
                "double lo = bottom - 9.0, hi = top;",
                "double lo = bottom - 7.0, hi = top;",
            ),
        ],
    );
    let near = direct(PlanCase {
        threads: 256,
        ..PlanCase::new(64, 4, 64, PlanMethod::Fathom)
    });
    assert_caught(
        &near,
        &[48.0],
        Inputs::NearTies,
        &[(
            "one bisection step fewer",
            "constexpr int BISECTION_STEPS = 30;",
            "constexpr int BISECTION_STEPS = 29;",
        )],
    );
}

/// The direct water line's window (a midpoint within EPS of T tried over every channel, as the
/// rounds try it) is taken by chance about once in a thousand plans, so it is widened here to
/// take every midpoint: its plans must still be the reference's on random inputs, near ties
/// and exact ties, and a mistake in it must show.
#[test]
fn direct_line_window_plans_as_the_rounds() {
    let (mut rng, seed) = inputs::rng_and_seed("direct_line_window_plans_as_the_rounds");
    let narrow = "const double eps = 0x1p-40 * fmax(fmax(fabs(top), fabs(bottom)), 8.0);";
    let wide = "const double eps = 0x1p+20 * fmax(fmax(fabs(top), fabs(bottom)), 8.0);";
    let widened = |case: &PlanCase| {
        let source = render(&case.spec()).expect("the plan renders");
        assert!(
            source.contains(narrow),
            "the window is in {}",
            spec_name(case)
        );
        source.replacen(narrow, wide, 1)
    };
    let mut failures = Vec::new();
    let random = direct(PlanCase {
        threads: 64,
        ..PlanCase::new(96, 7, 32, PlanMethod::Fathom)
    });
    let near = direct(PlanCase {
        threads: 1024,
        ..PlanCase::new(64, 4, 64, PlanMethod::Fathom)
    });
    let exact = direct(PlanCase {
        threads: 256,
        budget: 7.0,
        ..PlanCase::new(64, 4, 64, PlanMethod::Fathom)
    });
    let all_fit = all_fit_budget(&random);
    for (case, kind, budgets) in [
        (
            &random,
            Inputs::Random,
            vec![min_budget(random.block()) as f32, 48.0, 92.0, all_fit - 1.0],
        ),
        (&near, Inputs::NearTies, vec![48.0]),
        (&exact, Inputs::ExactTies, vec![7.0]),
    ] {
        let plan =
            CpuPlan::build_source(case.spec(), &widened(case)).expect("the widened plan builds");
        for budget in budgets {
            failures.extend(failures_at(&mut rng, seed, case, budget, kind, &plan));
        }
    }
    assert_none(failures);
    // A mistake in the window (half a warp's channels counted) is caught once it is taken.
    let spec = random.spec();
    let mutant = widened(&random).replacen(
        "for (int o = 16; o > 0; o /= 2) shares += __shfl_xor_sync(0xffffffffu, shares, o);\n                    fits",
        "for (int o = 16; o > 1; o /= 2) shares += __shfl_xor_sync(0xffffffffu, shares, o);\n                    fits",
        1,
    );
    assert_ne!(
        mutant,
        widened(&random),
        "the window's reduction is in the source"
    );
    let plan = CpuPlan::build_source(spec, &mutant).expect("the mutant builds");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(MUTATION_SEED);
    assert!(
        !failures_at(
            &mut rng,
            MUTATION_SEED,
            &random,
            48.0,
            Inputs::Random,
            &plan
        )
        .is_empty(),
        "the window's half reduction was not caught"
    );
}
