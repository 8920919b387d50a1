//! The tuner proper, free of any GPU: every candidate of a case is verified, then timed,
//! through a [`Bench`]; a candidate that fails either way is disqualified with the reason; the
//! winner is the simplest candidate within the noise band of the fastest.
//!
//! # Noise band
//!
//! The band is the fastest candidate's relative interquartile range `(p75 − p25) / median`
//! over its timed runs, and at least [`Settings::noise_floor`]. A candidate whose median is
//! within `fastest × (1 + band)` is a tie with the fastest.
//!
//! # Simpler
//!
//! Among ties, the winner is the smallest by [`simplicity`]: for transfers, `fused` (one
//! kernel, no staging) before `copy-kernel` (a second kernel and staging memory) before
//! `memcpy` (a host synchronisation per step); for tiles, the plain select before the
//! compacting one, then fewer threads per block, then the smaller tile (words per tile, loads
//! in flight, items or rows per thread). Fewer threads and
//! smaller tiles mean smaller grids' tails, fewer registers and less shared memory per block,
//! so they degrade more gracefully on shapes and contexts that were not timed.

use std::panic::{catch_unwind, AssertUnwindSafe};

use runtime::step::Transfer;
use runtime::tuning::Tile;
use runtime::tuning::{
    CandidateRecord, EntryRecord, Outcome, RecordMeta, TuningRecord, Variant, Winner,
};

use crate::candidates::{enumerate, Case};
use crate::stats::Spread;

/// What a case's inputs are measured against.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseInfo {
    /// Bytes one run of a candidate moves, for GB/s.
    pub bytes: Option<u64>,
    /// The ceiling (name, GB/s) the candidates are judged against.
    pub ceiling: Option<(String, f64)>,
}

/// Runs candidates: on the GPU ([`crate::gpu::GpuBench`]) or on a fake timer in tests.
pub trait Bench {
    /// Builds the inputs of `case` (store, plan, reference scores), before its candidates.
    fn prepare(&mut self, case: &Case) -> Result<CaseInfo, String>;
    /// Builds and runs `variant` once on the prepared inputs and compares its output with the
    /// reference; the reason it is wrong or failed otherwise.
    fn verify(&mut self, case: &Case, variant: &Variant) -> Result<(), String>;
    /// `reps` timed runs of `variant`, in milliseconds, each on fresh inputs.
    fn time(&mut self, case: &Case, variant: &Variant, reps: usize) -> Result<Vec<f64>, String>;
}

/// How much to time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// Timed runs per candidate.
    pub reps: usize,
    /// The least relative noise band (timers and clocks jitter even when the runs agree).
    pub noise_floor: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            reps: 25,
            noise_floor: 0.02,
        }
    }
}

/// What the tuner reports as it goes (a progress bar); every method does nothing by default.
pub trait Observer {
    /// `case` begins, with `candidates` candidates.
    fn case_started(&mut self, _case: &Case, _candidates: usize) {}
    /// A candidate of `case` is done.
    fn candidate_done(&mut self, _case: &Case, _candidate: &CandidateRecord) {}
}

/// An observer that ignores everything.
pub struct Silent;

impl Observer for Silent {}

/// The ordering of "simpler" among ties (see the module documentation): smaller is simpler.
pub fn simplicity(variant: &Variant) -> (u8, usize, usize) {
    match *variant {
        Variant::Transfer(t) => (
            match t {
                Transfer::Fused => 0,
                Transfer::CopyKernel => 1,
                Transfer::Memcpy => 2,
            },
            0,
            0,
        ),
        Variant::Tile(tile) => {
            // The plain select before the compacting one (more launches, more workspace): a
            // compacting tile wins only when it is faster beyond noise.
            let (kind, threads, size) = match tile {
                Tile::Scan {
                    tile_words,
                    threads,
                } => (0, threads, tile_words),
                Tile::Gather {
                    loads_in_flight,
                    threads,
                } => (0, threads, loads_in_flight),
                Tile::Threads(t) => (0, t as usize, 0),
                Tile::Select {
                    threads,
                    items_per_thread,
                    compact,
                } => (
                    u8::from(compact),
                    threads as usize,
                    items_per_thread as usize,
                ),
                Tile::Attention {
                    threads,
                    rows_per_warp,
                } => (0, threads as usize, rows_per_warp as usize),
                // Likewise the plain `_score` before the whole-row one.
                Tile::Rerank {
                    threads,
                    vector_loads,
                } => (u8::from(vector_loads), threads as usize, 0),
            };
            (kind, threads, size)
        }
    }
}

/// A panic inside the bench is one candidate's failure, not the run's.
fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        Err(format!("panicked: {message}"))
    })
}

fn run_candidate(
    bench: &mut dyn Bench,
    case: &Case,
    variant: &Variant,
    info: &CaseInfo,
    settings: &Settings,
) -> Outcome {
    let disqualified = |stage: &str, reason: String| Outcome::Disqualified {
        reason: format!("{stage}: {reason}"),
    };
    if let Err(reason) = guarded(|| bench.verify(case, variant)) {
        return disqualified("verify", reason);
    }
    let samples = match guarded(|| bench.time(case, variant, settings.reps)) {
        Ok(s) => s,
        Err(reason) => return disqualified("time", reason),
    };
    match Spread::of(&samples) {
        None => disqualified(
            "time",
            format!("no usable timings (not all finite and positive): {samples:?}"),
        ),
        Some(s) => Outcome::Timed {
            median_ms: s.median,
            p25_ms: s.p25,
            p75_ms: s.p75,
            samples: s.samples,
            gbps: info.bytes.map(|b| b as f64 / (s.median * 1e-3) / 1e9),
        },
    }
}

/// The winner among `candidates` (see the module documentation); `None` when none was timed.
pub fn choose(candidates: &[CandidateRecord], noise_floor: f64) -> Option<Winner> {
    let timed = |c: &&CandidateRecord| matches!(c.outcome, Outcome::Timed { .. });
    let fastest = candidates.iter().filter(timed).min_by(|a, b| {
        let (x, y) = (a.outcome.median_ms(), b.outcome.median_ms());
        x.partial_cmp(&y).expect("timed medians are finite")
    })?;
    let Outcome::Timed {
        median_ms,
        p25_ms,
        p75_ms,
        ..
    } = fastest.outcome
    else {
        unreachable!("filtered to timed candidates")
    };
    let band = ((p75_ms - p25_ms) / median_ms).max(noise_floor);
    let limit = median_ms * (1.0 + band);
    let ties: Vec<&CandidateRecord> = candidates
        .iter()
        .filter(timed)
        .filter(|c| c.outcome.median_ms().is_some_and(|m| m <= limit))
        .collect();
    let winner = ties
        .iter()
        .min_by_key(|c| (simplicity(&c.variant), c.name.clone()))
        .expect("the fastest is among the ties");
    Some(Winner {
        name: winner.name.clone(),
        variant: winner.variant,
        median_ms: winner.outcome.median_ms().expect("timed"),
        fastest: fastest.name.clone(),
        noise_band: band,
        within_noise: ties.iter().map(|c| c.name.clone()).collect(),
    })
}

/// Tunes one case: every candidate of [`enumerate`], verified then timed.
pub fn tune_case(
    bench: &mut dyn Bench,
    case: &Case,
    settings: &Settings,
    observer: &mut dyn Observer,
) -> EntryRecord {
    let variants = enumerate(case);
    observer.case_started(case, variants.len());
    let prepared = guarded(|| bench.prepare(case));
    let info = prepared.clone().unwrap_or(CaseInfo {
        bytes: None,
        ceiling: None,
    });
    let mut candidates = Vec::with_capacity(variants.len());
    for variant in &variants {
        let outcome = match &prepared {
            Ok(_) => run_candidate(bench, case, variant, &info, settings),
            Err(reason) => Outcome::Disqualified {
                reason: format!("prepare: {reason}"),
            },
        };
        let candidate = CandidateRecord {
            name: variant.name(),
            variant: *variant,
            outcome,
        };
        observer.candidate_done(case, &candidate);
        candidates.push(candidate);
    }
    EntryRecord {
        key: case.key(),
        tokens: case.tokens,
        bytes: info.bytes,
        ceiling: info.ceiling,
        winner: choose(&candidates, settings.noise_floor),
        candidates,
    }
}

/// Tunes every case into a new record with header `meta`.
pub fn tune(
    bench: &mut dyn Bench,
    cases: &[Case],
    meta: RecordMeta,
    settings: &Settings,
    observer: &mut dyn Observer,
) -> TuningRecord {
    let mut record = TuningRecord::new(meta);
    for case in cases {
        record.insert(tune_case(bench, case, settings, observer));
    }
    record
}
