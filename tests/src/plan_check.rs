//! What the plan tests (`gpu_plan.rs` on a GPU, `cpu_plan.rs` on the CPU) share: a case, its
//! random inputs, the reference's depths and the checks of every output of a plan launch
//! (SPEC §3, §4, §7; `templates/plan.cu.tera`) against the f64 reference planner
//! (`reference::plans::depth_plan`, which water-fills with `planner::water_fill` for `fathom`).

use codegen::model::Basis;
use codegen::spec::{KvRows, PlanMethod, PlanSpec};
use rand::Rng;
use reference::plans::{depth_plan, DepthPlan, DoubleSparsityCalibration, Method, PlanContext};
use reference::store::{BlockSize, StoreLayout};

use crate::inputs;
use crate::store_kernels::{rotate_f32, rotations, run_tables_at, Mismatches, TableShape};

/// Segment words: small segments, so that a few blocks span several of them.
pub const SEGMENT_WORDS: usize = 2;

/// Channels `double_sparsity` reads in these tests.
pub const DSPARSITY_R: usize = 32;

/// One plan launch to check.
#[derive(Clone, Debug)]
pub struct PlanCase {
    pub d: usize,
    pub g: usize,
    pub blk: usize,
    pub method: PlanMethod,
    pub rotate: bool,
    pub budget: f32,
    /// Stored tokens per sequence (whole blocks); `B` is its length.
    pub n_stored: Vec<usize>,
    pub heads: usize,
    /// `(b, h)` whose queries are all zero.
    pub zero_queries: Vec<(usize, usize)>,
    /// Staging capacity in planes per `(b, h, s)`.
    pub stage_planes: usize,
    /// Threads per block (the bisection's rounds and midpoints per warp follow it).
    pub threads: usize,
    /// `PlanSpec::batched_runs`: the run tables' segment pointers loaded in batches.
    pub batched_runs: bool,
    /// `PlanSpec::run_blocks`: blocks a (KV head, sequence) that share its run tables.
    pub run_blocks: usize,
    /// `PlanSpec::paired_runs`: each run-table entry written by a lane pair.
    pub paired_runs: bool,
    /// `PlanSpec::direct_line`: fathom's water line from its sorted depth boundaries.
    pub direct_line: bool,
}

impl PlanCase {
    pub fn new(d: usize, g: usize, blk: usize, method: PlanMethod) -> PlanCase {
        PlanCase {
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
            batched_runs: false,
            run_blocks: 1,
            paired_runs: false,
            direct_line: false,
        }
    }

    pub fn spec(&self) -> PlanSpec {
        PlanSpec {
            head_dim: self.d,
            group: self.g,
            block: self.blk,
            segment_words: SEGMENT_WORDS,
            method: self.method,
            rotate: self.rotate,
            threads: self.threads,
            tail: None,
            tail_kv_rows: KvRows::Separate,
            batched_runs: self.batched_runs,
            run_blocks: self.run_blocks,
            paired_runs: self.paired_runs,
            direct_line: self.direct_line,
        }
    }

    pub fn block(&self) -> BlockSize {
        BlockSize::from_tokens(self.blk).unwrap()
    }

    pub fn layout(&self) -> StoreLayout {
        StoreLayout::new(self.d, self.block(), SEGMENT_WORDS).unwrap()
    }
}

pub fn reference_method(method: PlanMethod, budget: f32, r_dsparsity: usize) -> Method {
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

/// The host inputs of a case beyond its store.
pub struct PlanHostInputs {
    /// Raw queries `[B][H][G][D]`.
    pub queries: Vec<f32>,
    /// `σ²` `[B][H][D]` (passed to `fathom` only).
    pub sigma2: Vec<f32>,
    /// `[H][D][D]` when the case rotates.
    pub rotation: Option<Vec<f32>>,
    pub calibrations: Vec<DoubleSparsityCalibration>,
    /// The calibrations' masks `[H][D]` (passed to `double_sparsity` only).
    pub fixed: Vec<u8>,
}

impl PlanHostInputs {
    /// Fresh random inputs: queries with per-channel scales over two orders of magnitude (so
    /// that importances spread; the case's `zero_queries` all zero), `σ²` with a few channels
    /// exactly 0, a KLT basis per head when the case rotates, a calibration per head.
    pub fn random(rng: &mut impl Rng, case: &PlanCase) -> PlanHostInputs {
        let (d, g) = (case.d, case.g);
        let (batch, heads) = (case.n_stored.len(), case.heads);
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
        PlanHostInputs {
            queries,
            sigma2,
            rotation,
            calibrations,
            fixed,
        }
    }

    /// `σ²` as the case's launch gets it.
    pub fn sigma2_arg(&self, case: &PlanCase) -> Option<&[f32]> {
        (case.method == PlanMethod::Fathom).then_some(&self.sigma2[..])
    }

    /// The fixed channels as the case's launch gets them.
    pub fn fixed_arg(&self, case: &PlanCase) -> Option<&[u8]> {
        (case.method == PlanMethod::DoubleSparsity).then_some(&self.fixed[..])
    }
}

/// What a plan launch wrote, on the host.
pub struct PlanResult {
    pub q_store: Vec<f32>,
    pub depths: Vec<u8>,
    pub class_count: Vec<u32>,
    pub runs: Vec<u64>,
    /// The staged run table, when the launch had one.
    pub staged_runs: Option<Vec<u64>>,
    pub status: [i32; 3],
}

/// Where the launch's store and staging lived: the segment addresses
/// `[(b*H + h)*max_seg + s]` of words and scales, and the staging's
/// `(words address, scales address, planes)` when it had one.
pub struct PlanAddresses<'a> {
    pub seg_words: &'a [u64],
    pub seg_scales: &'a [u64],
    pub staging: Option<(u64, u64, usize)>,
}

/// Checks `q_store`: the raw queries bit for bit; with a rotation, `Rᵀq` bit for bit as f32 fma
/// in ascending `i` computes it, and within fp32 rounding of the f64 product
/// (`|q' - Rᵀq| <= (D + 1)·2⁻²⁴·Σ_i |R_ij q_i|`).
pub fn check_q_store(
    label: &str,
    seed: u64,
    case: &PlanCase,
    host: &PlanHostInputs,
    q_store: &[f32],
) -> Option<String> {
    let (d, g, heads) = (case.d, case.g, case.heads);
    let batch = case.n_stored.len();
    let mut bad = Mismatches::new(format!("{label}: q_store"), seed);
    for bh in 0..batch * heads {
        for gi in 0..g {
            let row = (bh * g + gi) * d;
            let q = &host.queries[row..row + d];
            let got = &q_store[row..row + d];
            let want = match host.rotation.as_deref() {
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
                if let Some(r) = host.rotation.as_deref() {
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
    bad.report()
}

/// The reference's depths `[b][h][D]`, computed from the same f32 inputs the kernel planned
/// from (its own `q_store` and the `σ²`, widened to f64).
pub fn expected_depths(
    label: &str,
    case: &PlanCase,
    host: &PlanHostInputs,
    q_store: &[f32],
) -> Vec<Vec<Vec<u8>>> {
    let (d, g, heads) = (case.d, case.g, case.heads);
    let batch = case.n_stored.len();
    let mut expected: Vec<Vec<Vec<u8>>> = vec![Vec::new(); batch];
    for (b, plans) in expected.iter_mut().enumerate() {
        for h in 0..heads {
            let bh = b * heads + h;
            let group = inputs::group_queries(q_store, bh, g, d);
            let s2: Vec<f64> = match case.method {
                PlanMethod::Fathom => host.sigma2[bh * d..(bh + 1) * d]
                    .iter()
                    .map(|&x| f64::from(x))
                    .collect(),
                _ => vec![1.0; d],
            };
            let ctx = PlanContext {
                queries: &group,
                sigma2: &s2,
                block: case.block(),
                basis: if case.rotate { Basis::Klt } else { Basis::Raw },
                double_sparsity: Some(&host.calibrations[h]),
            };
            let method = reference_method(case.method, case.budget, DSPARSITY_R);
            match depth_plan(method, &ctx) {
                Ok(DepthPlan::Depths(plan)) => plans.push(plan.depths),
                other => panic!("{label}: the reference plan of {method} is {other:?}"),
            }
        }
    }
    expected
}

/// Checks every output of a plan launch of `case`: `q_store` ([`check_q_store`]), `depths`
/// against the reference's ([`expected_depths`]), `class_count`, the source and (when the
/// launch had one) the staged run table entry by entry (slots of segments past the store keep
/// their poison), and the status (`{1, b, h}` for one of the heads whose planes exceed the
/// staging, else zeros). Returns the first stage's mismatches (empty when all agree) and the
/// expected depths `[b][h]` (empty when `q_store` already differed).
// `(b, h)` index the outputs and the expected depths alike.
#[allow(clippy::needless_range_loop)]
pub fn check_plan(
    label: &str,
    seed: u64,
    case: &PlanCase,
    host: &PlanHostInputs,
    out: &PlanResult,
    at: &PlanAddresses<'_>,
    shape: &TableShape,
) -> (Option<String>, Vec<Vec<Vec<u8>>>) {
    let (d, heads) = (case.d, case.heads);
    let batch = case.n_stored.len();
    if let Some(report) = check_q_store(label, seed, case, host, &out.q_store) {
        return (Some(report), Vec::new());
    }
    let expected = expected_depths(label, case, host, &out.q_store);
    let mut bad = Mismatches::new(format!("{label}: depths"), seed);
    for b in 0..batch {
        for h in 0..heads {
            let bh = b * heads + h;
            for c in 0..d {
                let (got, want) = (out.depths[bh * d + c], expected[b][h][c]);
                bad.check(got == want, || {
                    format!("b {b} h {h} channel {c}: depth {got}, want {want}")
                });
            }
        }
    }
    if let Some(report) = bad.report() {
        return (Some(report), expected);
    }

    let (want_runs, want_staged, want_counts) = run_tables_at(
        shape,
        (at.seg_words, at.seg_scales),
        &case.n_stored,
        &expected,
        at.staging,
    );
    let mut bad = Mismatches::new(format!("{label}: class_count"), seed);
    for (i, (got, want)) in out.class_count.iter().zip(&want_counts).enumerate() {
        bad.check(got == want, || {
            format!("(b, h) {} depth {}: {got}, want {want}", i / 4, 4 - i % 4)
        });
    }
    if let Some(report) = bad.report() {
        return (Some(report), expected);
    }
    let mut tables = vec![("source runs", &out.runs, want_runs)];
    match (&out.staged_runs, want_staged) {
        (Some(got), Some(want)) => tables.push(("staged runs", got, want)),
        (None, None) => {}
        _ => panic!("{label}: a staged table without a staging, or the reverse"),
    }
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
        if let Some(report) = bad.report() {
            return (Some(report), expected);
        }
    }

    // Status: set only when there is a staging and some head's planes exceed it.
    let status = out.status;
    let over: Vec<(usize, usize)> = match at.staging {
        None => Vec::new(),
        Some((_, _, planes)) => (0..batch)
            .flat_map(|b| (0..heads).map(move |h| (b, h)))
            .filter(|&(b, h)| expected[b][h].iter().map(|&t| t as usize).sum::<usize>() > planes)
            .collect(),
    };
    let ok = if over.is_empty() {
        status == [0; 3]
    } else {
        status[0] == 1 && over.contains(&(status[1] as usize, status[2] as usize))
    };
    let report = (!ok).then(|| {
        format!(
            "{label}: status {status:?}, want {} (FATHOM_TEST_SEED={seed})",
            if over.is_empty() {
                "[0, 0, 0]".to_string()
            } else {
                format!("1 and one of {over:?}")
            }
        )
    });
    (report, expected)
}
