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
use std::time::{Duration, Instant};

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
    /// Timed runs of `variant` as many as `reps` asks ([`Reps::collect`]), in milliseconds.
    fn time(&mut self, case: &Case, variant: &Variant, reps: Reps) -> Result<Vec<f64>, String>;
}

/// How many timed runs a candidate gets: at least `min`, at most `max`, and none after `min`
/// once the runs so far add up to `budget_ms`. A 40 ms candidate (a host-memory kernel at 1M
/// tokens) is as well measured by 5 runs as a 40 us one by 25: its runs agree to well under
/// the noise floor, and 20 more of them would cost most of a second per candidate.
/// And a candidate whose fastest run is over `give_up_above_ms` stops after `min` runs too: the
/// tuner sets it to [`GIVE_UP`] times the fastest median of the case so far, which such a
/// candidate cannot tie unless the noise band is 100% (the records' widest so far: 89%).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reps {
    pub min: usize,
    pub max: usize,
    pub budget_ms: f64,
    pub give_up_above_ms: f64,
}

/// How many times the case's fastest median so far a candidate's fastest run may take before
/// it gets no more than the least runs. On the H100 record of 2026-12-06, 794 of 3,561
/// candidates were that slow, and their runs past the fifth were ~15 s of the run's 63 s of
/// timing.
pub const GIVE_UP: f64 = 2.0;

impl Reps {
    /// Exactly `n` runs, whatever they take.
    pub fn exactly(n: usize) -> Reps {
        Reps {
            min: n,
            max: n,
            budget_ms: f64::INFINITY,
            give_up_above_ms: f64::INFINITY,
        }
    }

    /// These reps for a candidate timed after one whose median was `fastest_ms` (the case's
    /// fastest so far): it gives up after `min` runs once its own fastest is over
    /// [`GIVE_UP`] times that.
    pub fn after_fastest(self, fastest_ms: Option<f64>) -> Reps {
        Reps {
            give_up_above_ms: fastest_ms.map_or(f64::INFINITY, |f| GIVE_UP * f),
            ..self
        }
    }

    /// Whether another run is due after `samples`.
    pub fn more(&self, samples: &[f64]) -> bool {
        let n = samples.len();
        if n < self.min.min(self.max) {
            return true;
        }
        let fastest = samples.iter().copied().fold(f64::INFINITY, f64::min);
        n < self.max
            && samples.iter().sum::<f64>() < self.budget_ms
            && fastest <= self.give_up_above_ms
    }

    /// Runs `run` (given the run's index, returning its milliseconds) while [`Reps::more`]
    /// says so; the first error ends it.
    pub fn collect<E>(&self, mut run: impl FnMut(usize) -> Result<f64, E>) -> Result<Vec<f64>, E> {
        let mut samples = Vec::with_capacity(self.max);
        while self.more(&samples) {
            samples.push(run(samples.len())?);
        }
        Ok(samples)
    }
}

/// How much to time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// Timed runs per candidate.
    pub reps: Reps,
    /// The least relative noise band (timers and clocks jitter even when the runs agree).
    pub noise_floor: f64,
}

impl Settings {
    /// A default run: up to 25 runs a candidate, 5 at least, a quarter of a second of GPU time.
    pub fn full() -> Settings {
        Settings {
            reps: Reps {
                min: 5,
                max: 25,
                budget_ms: 250.0,
                give_up_above_ms: f64::INFINITY,
            },
            noise_floor: 0.02,
        }
    }

    /// `--quick`: up to 10 runs, 5 at least, 50 ms.
    pub fn quick() -> Settings {
        Settings {
            reps: Reps {
                min: 5,
                max: 10,
                budget_ms: 50.0,
                give_up_above_ms: f64::INFINITY,
            },
            ..Settings::full()
        }
    }

    /// These settings with at most `max` runs a candidate (`--reps`; at least one).
    pub fn with_max_reps(mut self, max: usize) -> Settings {
        self.reps.max = max.max(1);
        self.reps.min = self.reps.min.min(self.reps.max);
        self
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings::full()
    }
}

/// What a stretch of the tuner's time was spent on (`--timings`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Measuring the link and HBM rates.
    Ceilings,
    /// Compiling (or loading from the kernel cache) every candidate of the run, in the
    /// background while the cases run: wall time, not part of the total.
    Compile,
    /// A case's inputs: reference stores and selections on the CPU, uploads, its own kernels.
    Prepare,
    /// One run of each candidate, compared with the reference.
    Verify,
    /// The timed runs.
    Time,
}

impl Phase {
    /// Every phase, in the order of a run.
    pub const ALL: [Phase; 5] = [
        Phase::Ceilings,
        Phase::Compile,
        Phase::Prepare,
        Phase::Verify,
        Phase::Time,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Ceilings => "ceilings",
            Phase::Compile => "compile",
            Phase::Prepare => "prepare",
            Phase::Verify => "verify",
            Phase::Time => "time",
        }
    }
}

/// What the tuner reports as it goes (a progress bar, log lines, timings); every method does
/// nothing by default.
pub trait Observer {
    /// `case` begins, with `candidates` candidates.
    fn case_started(&mut self, _case: &Case, _candidates: usize) {}
    /// A candidate of `case` is done.
    fn candidate_done(&mut self, _case: &Case, _candidate: &CandidateRecord) {}
    /// `phase` of `case` took `took`.
    fn phase_done(&mut self, _case: &Case, _phase: Phase, _took: Duration) {}
    /// `case` is done: its entry, and the time it took in all.
    fn case_done(&mut self, _case: &Case, _entry: &EntryRecord, _took: Duration) {}
}

/// Seconds spent per phase, summed over a run (`--timings`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timings {
    spent: Vec<(Phase, Duration)>,
}

impl Timings {
    /// Adds `took` to `phase`.
    pub fn add(&mut self, phase: Phase, took: Duration) {
        match self.spent.iter_mut().find(|(p, _)| *p == phase) {
            Some((_, d)) => *d += took,
            None => self.spent.push((phase, took)),
        }
    }

    /// The time spent in `phase`.
    pub fn of(&self, phase: Phase) -> Duration {
        self.spent
            .iter()
            .find(|(p, _)| *p == phase)
            .map_or(Duration::ZERO, |(_, d)| *d)
    }

    /// `phase  seconds  share` lines of every phase, and the total. The compile runs beside
    /// the others ([`Phase::Compile`]): its line has its wall time and no share, and the total
    /// leaves it out.
    pub fn summary(&self) -> String {
        let total: Duration = self
            .spent
            .iter()
            .filter(|(p, _)| *p != Phase::Compile)
            .map(|(_, d)| *d)
            .sum();
        let mut out = String::from("phase       seconds  share\n");
        for phase in Phase::ALL {
            let d = self.of(phase).as_secs_f64();
            if phase == Phase::Compile {
                out.push_str(&format!(
                    "{:<10} {:>8.1}  (in the background)\n",
                    phase.name(),
                    d
                ));
                continue;
            }
            let share = if total.is_zero() {
                0.0
            } else {
                100.0 * d / total.as_secs_f64()
            };
            out.push_str(&format!(
                "{:<10} {:>8.1} {:>5.0}%\n",
                phase.name(),
                d,
                share
            ));
        }
        out.push_str(&format!("{:<10} {:>8.1}\n", "total", total.as_secs_f64()));
        out
    }
}

impl Observer for Timings {
    fn phase_done(&mut self, _case: &Case, phase: Phase, took: Duration) {
        self.add(phase, took);
    }
}

/// The log line of a finished case, for output that is not a terminal, with where its time
/// went (`phases`, the case's own):
/// `[12/117] scan/hbm/128k d128 g4: 48 candidates, best w16 t256 0.081 ms (3.2 s: prepare 1.1,
/// verify 0.9, time 1.2)`.
pub fn case_line(
    index: usize,
    cases: usize,
    case: &Case,
    entry: &EntryRecord,
    took: Duration,
    phases: &Timings,
) -> String {
    let timed = entry
        .candidates
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Timed { .. }))
        .count();
    let disqualified = entry.candidates.len() - timed;
    let best = match &entry.winner {
        Some(w) => format!("best {} {:.4} ms", w.name, w.median_ms),
        None => "no winner".to_string(),
    };
    let dq = if disqualified > 0 {
        format!(" ({disqualified} disqualified)")
    } else {
        String::new()
    };
    let spent: Vec<String> = [Phase::Prepare, Phase::Verify, Phase::Time]
        .iter()
        .map(|&p| format!("{} {:.1}", p.name(), phases.of(p).as_secs_f64()))
        .collect();
    format!(
        "[{index}/{cases}] {} d{} g{}: {} candidates{dq}, {best} ({:.1} s: {})",
        case.key(),
        case.head_dim,
        case.group,
        entry.candidates.len(),
        took.as_secs_f64(),
        spent.join(", ")
    )
}

/// A clock for the phases (the tests give a fake one).
pub trait Clock {
    /// Time since some fixed start.
    fn now(&self) -> Duration;
}

/// The process's monotonic clock.
pub struct WallClock(Instant);

impl Default for WallClock {
    fn default() -> Self {
        WallClock(Instant::now())
    }
}

impl Clock for WallClock {
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
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
            // The plain select before the compacting one (more launches, more workspace) and
            // the one-read one (newest): another variant wins only when it is faster beyond
            // noise.
            let (kind, threads, size) = match tile {
                // The plain scan before the tensor-core one (fewer moving parts wins a tie).
                Tile::Scan {
                    tile_words,
                    threads,
                    tensor_cores,
                } => (u8::from(tensor_cores), threads, tile_words),
                Tile::Gather {
                    loads_in_flight,
                    threads,
                } => (0, threads, loads_in_flight),
                Tile::Threads(t) => (0, t as usize, 0),
                Tile::Select {
                    threads,
                    items_per_thread,
                    compact,
                    onepass,
                    fused,
                    peaks,
                    scan_peaks,
                    cluster,
                    resident,
                } => (
                    u8::from(compact)
                        + 2 * u8::from(onepass)
                        + u8::from(fused)
                        + 2 * u8::from(peaks)
                        + 2 * u8::from(scan_peaks)
                        + 3 * u8::from(cluster)
                        + 3 * u8::from(resident),
                    threads as usize,
                    items_per_thread as usize,
                ),
                // One block per query head before several (a workspace and a merge more).
                Tile::Attention {
                    threads,
                    rows_per_warp,
                    splits,
                } => (
                    u8::from(splits > 1),
                    threads as usize,
                    rows_per_warp as usize,
                ),
                // Likewise the plain `_score` before the whole-row one, the one-block top-k
                // before the many-block one, and `_score`'s operands as they are before their
                // tables.
                Tile::Rerank {
                    threads,
                    vector_loads,
                    multiblock,
                    decode_table,
                } => (
                    u8::from(vector_loads) + 2 * u8::from(multiblock) + 4 * u8::from(decode_table),
                    threads as usize,
                    0,
                ),
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
    reps: Reps,
    observer: &mut dyn Observer,
    clock: &dyn Clock,
) -> Outcome {
    let disqualified = |stage: &str, reason: String| Outcome::Disqualified {
        reason: format!("{stage}: {reason}"),
    };
    let t0 = clock.now();
    let verified = guarded(|| bench.verify(case, variant));
    let t1 = clock.now();
    observer.phase_done(case, Phase::Verify, t1.saturating_sub(t0));
    if let Err(reason) = verified {
        return disqualified("verify", reason);
    }
    let timed = guarded(|| bench.time(case, variant, reps));
    observer.phase_done(case, Phase::Time, clock.now().saturating_sub(t1));
    let samples = match timed {
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
    tune_case_clocked(bench, case, settings, observer, &WallClock::default())
}

/// [`tune_case`], reporting the time of each phase as `clock` measures it.
pub fn tune_case_clocked(
    bench: &mut dyn Bench,
    case: &Case,
    settings: &Settings,
    observer: &mut dyn Observer,
    clock: &dyn Clock,
) -> EntryRecord {
    let start = clock.now();
    let variants = enumerate(case);
    observer.case_started(case, variants.len());
    let prepared = guarded(|| bench.prepare(case));
    let prepared_at = clock.now();
    observer.phase_done(case, Phase::Prepare, prepared_at.saturating_sub(start));
    let info = prepared.clone().unwrap_or(CaseInfo {
        bytes: None,
        ceiling: None,
    });
    let mut candidates: Vec<CandidateRecord> = Vec::with_capacity(variants.len());
    for variant in &variants {
        let fastest = candidates
            .iter()
            .filter_map(|c| c.outcome.median_ms())
            .reduce(f64::min);
        let reps = settings.reps.after_fastest(fastest);
        let outcome = match &prepared {
            Ok(_) => run_candidate(bench, case, variant, &info, reps, observer, clock),
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
    let entry = EntryRecord {
        key: case.key(),
        tokens: case.tokens,
        bytes: info.bytes,
        ceiling: info.ceiling,
        winner: choose(&candidates, settings.noise_floor),
        candidates,
    };
    observer.case_done(case, &entry, clock.now().saturating_sub(start));
    entry
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
