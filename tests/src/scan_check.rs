//! What the scan tests share, on a GPU (`gpu_scan.rs`) and on the CPU emulator
//! (`cpu_scan.rs`): the cases, the reference plans of §6's check, and the checks of a scan's
//! outputs against the f64 reference scores (`reference::score::score_stored`) and of its peaks
//! against its own scores.

use codegen::spec::peaks::order_key;
use codegen::spec::{Placement, ScanSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reference::model::Basis;
use reference::plans::{depth_plan, DepthPlan, Method, PlanContext};
use reference::score::{scan_tolerance, score_stored};
use reference::store::{BlockSize, HeadStore, StoreLayout, PLANES};

use crate::inputs;
use crate::store_kernels::Mismatches;

/// The plans of §6's check: which one a `(b, h)` gets cycles through [`PLANS`].
#[derive(Clone, Copy, Debug)]
pub enum PlanKind {
    /// `fathom` at this budget (bits per token) with the uncalibrated `σ²` (the mean square
    /// scale).
    Fathom(f64),
    /// `sparq(r)`.
    Sparq(usize),
    /// Every channel at depth 4.
    Uniform4,
    /// Every channel at depth 0: the scores must be exactly 0.
    Zero,
    /// Every channel at a depth drawn uniformly from 0 to 4 by a generator of this seed: every
    /// depth class in one plan.
    Random(u64),
}

/// The plans a batch cycles through.
pub const PLANS: [PlanKind; 6] = [
    PlanKind::Fathom(24.0),
    PlanKind::Fathom(48.0),
    PlanKind::Fathom(92.0),
    PlanKind::Sparq(32),
    PlanKind::Uniform4,
    PlanKind::Zero,
];

/// The reference plan of `kind` for one head: queries `[G][D]` (store basis, f64 of the f32
/// the kernel reads) and the store's mean square scale as `σ²`.
pub fn reference_depths(kind: PlanKind, store: &HeadStore, queries: &[Vec<f64>]) -> Vec<u8> {
    let d = store.layout().head_dim();
    let sigma2 = store.mean_square_scale();
    let method = match kind {
        PlanKind::Fathom(bits) => Method::Fathom { bits },
        PlanKind::Sparq(r) => Method::Sparq { r },
        PlanKind::Uniform4 => Method::Uniform { t: 4 },
        PlanKind::Zero => return vec![0; d],
        PlanKind::Random(seed) => {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            return (0..d).map(|_| rng.gen_range(0..=PLANES as u8)).collect();
        }
    };
    let ctx = PlanContext {
        queries,
        sigma2: &sigma2,
        block: store.layout().block(),
        basis: Basis::Raw,
        double_sparsity: None,
    };
    match depth_plan(method, &ctx) {
        Ok(DepthPlan::Depths(plan)) => plan.depths,
        other => panic!("the reference plan of {method} is {other:?}"),
    }
}

/// The depths `[b][h]` of a batch: `(b, h)` gets `kinds[(offset + b·H + h) % kinds.len()]`
/// for its queries (`[B][H][G][D]`).
pub fn batch_depths(
    kinds: &[PlanKind],
    offset: usize,
    stores: &[Vec<HeadStore>],
    queries: &[f32],
    g: usize,
) -> Vec<Vec<Vec<u8>>> {
    let heads = stores.first().map_or(0, Vec::len);
    stores
        .iter()
        .enumerate()
        .map(|(b, sequence)| {
            sequence
                .iter()
                .enumerate()
                .map(|(h, store)| {
                    let d = store.layout().head_dim();
                    let kind = kinds[(offset + b * heads + h) % kinds.len()];
                    let rows = inputs::group_queries(queries, b * heads + h, g, d);
                    reference_depths(kind, store, &rows)
                })
                .collect()
        })
        .collect()
}

/// A scan check: shape, tiling, placement and the batch's stored lengths.
#[derive(Clone, Debug)]
pub struct ScanCase {
    pub d: usize,
    pub g: usize,
    pub blk: usize,
    pub segment_words: usize,
    pub tile_words: usize,
    pub threads: usize,
    pub placement: Placement,
    pub n_stored: Vec<usize>,
    pub heads: usize,
    /// The tensor-core variant (`ScanSpec::tensor_cores`).
    pub tensor_cores: bool,
    /// Also with peaks (`ScanSpec::peaks`): the scan runs without and with them, the scores the
    /// same bit for bit ([`check_same_scores`]) and the peaks checked ([`check_peaks`]).
    pub peaks: bool,
}

impl ScanCase {
    /// The store layout of the case and each sequence's stored tokens in whole blocks (the
    /// stores hold whole blocks: `n_stored` rounded up; the scan is told `n_stored`).
    pub fn layout_and_stored(&self) -> (StoreLayout, Vec<usize>) {
        let block = BlockSize::from_tokens(self.blk).expect("a case's block is a valid size");
        let layout =
            StoreLayout::new(self.d, block, self.segment_words).expect("a case's layout is valid");
        let stored = self
            .n_stored
            .iter()
            .map(|&n| n.next_multiple_of(self.blk))
            .collect();
        (layout, stored)
    }

    /// The scan spec of the case.
    pub fn spec(&self) -> ScanSpec {
        ScanSpec {
            head_dim: self.d,
            group: self.g,
            block: self.blk,
            segment_words: self.segment_words,
            tile_words: self.tile_words,
            threads: self.threads,
            placement: self.placement,
            tensor_cores: self.tensor_cores,
            peaks: self.peaks,
        }
    }
}

/// One score against the reference value.
#[allow(clippy::too_many_arguments)]
pub fn check_score(
    bad: &mut Mismatches,
    store: &HeadStore,
    depths: &[u8],
    q: &[f64],
    (b, h, g, token): (usize, usize, usize, usize),
    got: f32,
    want: f64,
    tensor_cores: bool,
) {
    let bound = scan_tolerance(store, depths, q, token, tensor_cores);
    let error = (f64::from(got) - want).abs();
    bad.check(error <= bound, || {
        format!("b {b} h {h} head {g} token {token}: {got}, want {want} (|error| {error:.3e} > {bound:.3e})")
    });
}

/// Compares every score of the first `n_scored[b]` tokens with `score_stored`, and checks the
/// poison past them (up to `ld_scores`): what differed.
#[allow(clippy::too_many_arguments)]
#[must_use]
pub fn compare_scores(
    scores: &[f32],
    n_scored: &[usize],
    stores: &[Vec<HeadStore>],
    depths: &[Vec<Vec<u8>>],
    queries: &[f32],
    g: usize,
    ld_scores: usize,
    label: &str,
    seed: u64,
    tensor_cores: bool,
) -> Mismatches {
    let heads = stores[0].len();
    let mut bad = Mismatches::new(format!("{label}: scores"), seed);
    for (b, sequence) in stores.iter().enumerate() {
        for (h, store) in sequence.iter().enumerate() {
            let d = store.layout().head_dim();
            let bh = b * heads + h;
            let rows = inputs::group_queries(queries, bh, g, d);
            let want = score_stored(store, &depths[b][h], &rows);
            for gi in 0..g {
                let row = &scores[(bh * g + gi) * ld_scores..(bh * g + gi + 1) * ld_scores];
                for (i, &got) in row.iter().enumerate() {
                    if i < n_scored[b] {
                        check_score(
                            &mut bad,
                            store,
                            &depths[b][h],
                            &rows[gi],
                            (b, h, gi, i),
                            got,
                            want[gi][i],
                            tensor_cores,
                        );
                    } else {
                        bad.check(got.to_bits() == u32::MAX, || {
                            format!("b {b} h {h} head {gi} token {i} past n_stored: written {got}")
                        });
                    }
                }
            }
        }
    }
    bad
}

/// Checks that a scan with peaks wrote the same scores, bit for bit, as the scan without.
#[must_use]
pub fn check_same_scores(
    with: &[f32],
    without: &[f32],
    ld_scores: usize,
    label: &str,
    seed: u64,
) -> Mismatches {
    let mut bad = Mismatches::new(format!("{label}: scores with peaks"), seed);
    for (i, (with, without)) in with.iter().zip(without).enumerate() {
        bad.check(with.to_bits() == without.to_bits(), || {
            format!(
                "row {} token {}: {with} with peaks, {without} without",
                i / ld_scores,
                i % ld_scores
            )
        });
    }
    bad
}

/// What a peaks buffer holds before the scan: no key of a score the tests make (it would be
/// a score of about 6e18).
pub const PEAKS_POISON: u32 = 0xDEAD_BEEF;

/// Checks the peaks `[B][H][G][ld_peaks]` against the kernel's own `scores`: entry `i` of a row
/// is the largest order key of its scores of tokens `32i .. 32i + 31` below `n_scored[b]`, or
/// the poison where the half holds no such token.
#[allow(clippy::too_many_arguments)]
#[must_use]
pub fn check_peaks(
    scores: &[f32],
    peaks: &[u32],
    n_scored: &[usize],
    heads: usize,
    g: usize,
    (ld_scores, ld_peaks): (usize, usize),
    label: &str,
    seed: u64,
) -> Mismatches {
    let mut bad = Mismatches::new(format!("{label}: peaks"), seed);
    for (b, &n) in n_scored.iter().enumerate() {
        for h in 0..heads {
            for gi in 0..g {
                let row = (b * heads + h) * g + gi;
                let scores = &scores[row * ld_scores..(row + 1) * ld_scores];
                let peaks = &peaks[row * ld_peaks..(row + 1) * ld_peaks];
                for (i, &got) in peaks.iter().enumerate() {
                    let half = 32 * i..(32 * i + 32).min(n);
                    let want = if half.is_empty() {
                        PEAKS_POISON
                    } else {
                        scores[half].iter().map(|&s| order_key(s)).max().unwrap()
                    };
                    bad.check(got == want, || {
                        format!(
                            "b {b} h {h} head {gi} half {i} (tokens {}..{}, n {n}): \
                             {got:#010x}, want {want:#010x}",
                            32 * i,
                            32 * i + 32
                        )
                    });
                }
            }
        }
    }
    bad
}
