//! The tuner on a fake timer: enumeration, disqualification, noise band, simpler-wins, merge
//! and refusal, with no GPU.

use std::collections::HashMap;

use codegen::model::Basis;
use codegen::spec::{KvRows, Placement, SelectAlgorithm};
use runtime::pariskv::Stage;
use runtime::step::launches::{launch_plan, LaunchPlan, PlanInputs, Role, StepShape};
use runtime::step::{Method, Scoring, Transfer};
use runtime::tuning::{
    CandidateRecord, MetaMismatch, Outcome, RecordError, RecordMeta, Subject, TuningRecord, Variant,
};
use runtime::tuning::{Tile, Tiles, TuneKey, TunedFamily, Tuning};

use crate::candidates::{bench_k, bench_k_max, candidate_checksum, enumerate, Case, SUBJECTS};
use crate::records::merge_into;
use crate::tuner::{
    choose, simplicity, tune, tune_case, Bench, CaseInfo, Observer, Reps, Settings, Silent,
};

/// How the fake bench treats a candidate (by name); unnamed ones take `default_ms` exactly.
#[derive(Clone)]
enum Fake {
    /// Timings cycling through these values.
    Times(Vec<f64>),
    /// Verification finds a wrong answer.
    Wrong,
    /// Verification panics.
    Panics,
    /// Timing fails.
    TimeFails,
    /// Timing returns garbage.
    Garbage,
}

struct FakeBench {
    default_ms: f64,
    plan: HashMap<String, Fake>,
    prepare_fails: bool,
    timed: Vec<String>,
}

impl FakeBench {
    fn new(default_ms: f64) -> Self {
        FakeBench {
            default_ms,
            plan: HashMap::new(),
            prepare_fails: false,
            timed: Vec::new(),
        }
    }

    fn with(mut self, name: &str, fake: Fake) -> Self {
        self.plan.insert(name.to_string(), fake);
        self
    }
}

impl Bench for FakeBench {
    fn prepare(&mut self, _case: &Case) -> Result<CaseInfo, String> {
        if self.prepare_fails {
            return Err("out of device memory".into());
        }
        Ok(CaseInfo {
            bytes: Some(1_000_000),
            ceiling: Some(("hbm copy".into(), 4000.0)),
        })
    }

    fn verify(&mut self, _case: &Case, variant: &Variant) -> Result<(), String> {
        match self.plan.get(&variant.name()) {
            Some(Fake::Wrong) => Err("token 17: got 1.5, want 2.5".into()),
            Some(Fake::Panics) => panic!("index out of bounds"),
            _ => Ok(()),
        }
    }

    fn time(&mut self, _case: &Case, variant: &Variant, reps: Reps) -> Result<Vec<f64>, String> {
        self.timed.push(variant.name());
        match self.plan.get(&variant.name()) {
            Some(Fake::Times(t)) => reps.collect(|i| Ok(t[i % t.len()])),
            Some(Fake::TimeFails) => Err("launch failed: too many resources".into()),
            Some(Fake::Garbage) => Ok(vec![f64::NAN; reps.min]),
            _ => reps.collect(|_| Ok(self.default_ms)),
        }
    }
}

fn case(subject: Subject, placement: Placement, tokens: usize) -> Case {
    Case {
        subject,
        head_dim: 128,
        group: 4,
        kv_heads: 8,
        placement,
        tokens,
        opt_in: Default::default(),
        grid: Default::default(),
    }
}

fn hbm_scan() -> Case {
    case(Subject::Kernel(TunedFamily::Scan), Placement::Hbm, 1 << 17)
}

/// The shared test header, of this tuner's version and candidate set.
fn meta() -> RecordMeta {
    RecordMeta {
        project_version: env!("CARGO_PKG_VERSION").into(),
        candidate_checksum: candidate_checksum(Default::default()),
        ..RecordMeta::test_header()
    }
}

fn settings() -> Settings {
    Settings {
        reps: Reps::exactly(9),
        noise_floor: 0.02,
    }
}

fn outcome<'a>(entry: &'a [CandidateRecord], name: &str) -> &'a Outcome {
    &entry.iter().find(|c| c.name == name).unwrap().outcome
}

#[test]
fn every_enumerated_candidate_is_verified_and_timed_once() {
    let mut bench = FakeBench::new(1.0);
    let c = hbm_scan();
    let entry = tune_case(&mut bench, &c, &settings(), &mut crate::tuner::Silent);
    let names: Vec<String> = enumerate(&c).iter().map(Variant::name).collect();
    assert_eq!(bench.timed, names);
    assert_eq!(entry.candidates.len(), names.len());
    assert_eq!(entry.key, c.key());
    // 1 MB in 1 ms is 1 GB/s.
    match outcome(&entry.candidates, &names[0]) {
        Outcome::Timed { gbps, samples, .. } => {
            assert_eq!(*samples, 9);
            assert!((gbps.unwrap() - 1.0).abs() < 1e-9);
        }
        o => panic!("{o:?}"),
    }
}

#[test]
fn wrong_failing_and_panicking_candidates_are_disqualified_not_fatal() {
    let fast = "scan w16 t256";
    let mut bench = FakeBench::new(2.0)
        .with("scan w8 t128", Fake::Wrong)
        .with("scan w16 t128", Fake::Panics)
        .with("scan w32 t256", Fake::TimeFails)
        .with("scan w32 t512", Fake::Garbage)
        // Wrong but "fastest": must not win.
        .with("scan w8 t64", Fake::Wrong)
        .with(fast, Fake::Times(vec![1.0]));
    let entry = tune_case(
        &mut bench,
        &hbm_scan(),
        &settings(),
        &mut crate::tuner::Silent,
    );
    let reason = |name: &str| match outcome(&entry.candidates, name) {
        Outcome::Disqualified { reason } => reason.clone(),
        o => panic!("{name}: {o:?}"),
    };
    assert!(reason("scan w8 t128").starts_with("verify: token 17"));
    assert!(reason("scan w16 t128").contains("panicked: index out of bounds"));
    assert!(reason("scan w32 t256").starts_with("time: launch failed"));
    assert!(reason("scan w32 t512").contains("no usable timings"));
    // A disqualified candidate is never timed after failing verification.
    assert!(!bench.timed.contains(&"scan w8 t128".to_string()));
    assert_eq!(entry.winner.unwrap().name, fast);
}

#[test]
fn nothing_valid_means_no_winner() {
    let mut bench = FakeBench::new(1.0);
    bench.prepare_fails = true;
    let entry = tune_case(
        &mut bench,
        &hbm_scan(),
        &settings(),
        &mut crate::tuner::Silent,
    );
    assert!(entry.winner.is_none());
    assert!(entry.candidates.iter().all(|c| matches!(
        &c.outcome,
        Outcome::Disqualified { reason } if reason.contains("out of device memory")
    )));
    assert!(bench.timed.is_empty());
}

#[test]
fn the_simpler_candidate_wins_within_the_noise_band() {
    // The fastest (32 words, 512 threads) has a 10% interquartile spread; a simpler one is
    // 5% slower: a tie, and the simpler wins.
    let mut bench = FakeBench::new(3.0)
        .with("scan w32 t512", Fake::Times(vec![0.95, 1.0, 1.05]))
        .with("scan w16 t256", Fake::Times(vec![1.05]));
    let entry = tune_case(
        &mut bench,
        &hbm_scan(),
        &settings(),
        &mut crate::tuner::Silent,
    );
    let w = entry.winner.unwrap();
    assert_eq!(w.fastest, "scan w32 t512");
    assert_eq!(w.name, "scan w16 t256");
    assert!((w.noise_band - 0.10).abs() < 1e-9, "{}", w.noise_band);
    assert_eq!(w.within_noise.len(), 2);

    // With a quiet fastest, the floor (2%) holds and 5% slower is slower.
    let mut bench = FakeBench::new(3.0)
        .with("scan w32 t512", Fake::Times(vec![1.0]))
        .with("scan w16 t256", Fake::Times(vec![1.05]));
    let w = tune_case(
        &mut bench,
        &hbm_scan(),
        &settings(),
        &mut crate::tuner::Silent,
    )
    .winner
    .unwrap();
    assert_eq!((w.name.as_str(), w.noise_band), ("scan w32 t512", 0.02));
    assert_eq!(w.within_noise, ["scan w32 t512"]);
}

#[test]
fn simpler_is_fused_then_fewer_threads_then_smaller_tiles() {
    let t = |x| simplicity(&Variant::Transfer(x));
    assert!(t(Transfer::Fused) < t(Transfer::CopyKernel));
    assert!(t(Transfer::CopyKernel) < t(Transfer::Memcpy));
    let s = |tile_words, threads| {
        simplicity(&Variant::Tile(Tile::Scan {
            tile_words,
            threads,
            tensor_cores: false,
        }))
    };
    assert!(s(64, 256) < s(8, 512));
    assert!(s(8, 256) < s(16, 256));
    // The plain select before the compacting one, and that before the one-read one, whatever
    // their tiles.
    let select = |threads, items_per_thread, algorithm| {
        simplicity(&Variant::Tile(Tile::select(
            threads,
            items_per_thread,
            algorithm,
        )))
    };
    let (radix, compact, onepass) = (
        SelectAlgorithm::Radix,
        SelectAlgorithm::Compact,
        SelectAlgorithm::Onepass,
    );
    assert!(select(1024, 32, radix) < select(64, 16, compact));
    assert!(select(64, 16, compact) < select(128, 16, compact));
    assert!(select(256, 4, radix) < select(256, 8, radix));
    assert!(select(1024, 32, compact) < select(64, 1, onepass));
    // Exact ties between transfers go to fused.
    let mut bench = FakeBench::new(1.0);
    let c = case(Subject::Transfer, Placement::Host, 1 << 15);
    let w = tune_case(&mut bench, &c, &settings(), &mut crate::tuner::Silent)
        .winner
        .unwrap();
    assert_eq!(w.variant, Variant::Transfer(Transfer::Fused));
}

#[test]
fn choose_ignores_disqualified_and_needs_a_timed_candidate() {
    let dq = CandidateRecord {
        name: "scan w8 t64".into(),
        variant: Variant::Tile(Tile::Scan {
            tile_words: 8,
            threads: 64,
            tensor_cores: false,
        }),
        outcome: Outcome::Disqualified {
            reason: "wrong".into(),
        },
    };
    assert!(choose(std::slice::from_ref(&dq), 0.02).is_none());
}

struct Count(usize, usize);

impl Observer for Count {
    fn case_started(&mut self, _: &Case, n: usize) {
        self.0 += n;
    }
    fn candidate_done(&mut self, _: &Case, _: &CandidateRecord) {
        self.1 += 1;
    }
}

#[test]
fn a_run_reports_progress_and_its_record_answers_the_runtime() {
    let cases = [
        hbm_scan(),
        case(Subject::Transfer, Placement::Host, 1 << 20),
        case(
            Subject::Kernel(TunedFamily::Gather),
            Placement::Host,
            1 << 20,
        ),
    ];
    let mut bench = FakeBench::new(1.0)
        .with("transfer fused", Fake::Times(vec![2.0]))
        .with("gather l8 t128", Fake::Times(vec![0.5]));
    let mut count = Count(0, 0);
    let record = tune(&mut bench, &cases, meta(), &settings(), &mut count);
    assert_eq!(count.0, count.1);
    assert!(count.0 > 0);
    assert_eq!(record.entries.len(), 3);
    assert_eq!(record.transfer(128, 4, 20), Some(Transfer::CopyKernel));
    let key = TuneKey {
        family: TunedFamily::Gather,
        head_dim: 128,
        group: 4,
        placement: Placement::Host,
        context_bucket: 20,
    };
    assert_eq!(
        record.tile(&key),
        Some(Tile::Gather {
            loads_in_flight: 8,
            threads: 128
        })
    );
}

#[test]
fn rerunning_merges_and_a_mismatched_record_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nvidia-h200.json");
    let a = case(Subject::Kernel(TunedFamily::Scan), Placement::Hbm, 1 << 15);
    let b = case(Subject::Kernel(TunedFamily::Scan), Placement::Hbm, 1 << 20);
    let first = tune(
        &mut FakeBench::new(1.0).with("scan w8 t64", Fake::Times(vec![0.1])),
        &[a.clone(), b.clone()],
        meta(),
        &settings(),
        &mut crate::tuner::Silent,
    );
    merge_into(&path, first).unwrap();
    // A second run of one case replaces that entry only.
    let second = tune(
        &mut FakeBench::new(1.0).with("scan w16 t128", Fake::Times(vec![0.1])),
        std::slice::from_ref(&b),
        meta(),
        &settings(),
        &mut crate::tuner::Silent,
    );
    let (merged, kept) = merge_into(&path, second).unwrap();
    assert!(kept.is_empty(), "{kept:?}");
    assert_eq!(merged, TuningRecord::read(&path).unwrap());
    assert_eq!(merged.entries.len(), 2);
    let winner = |c: &Case| merged.entry(&c.key()).unwrap().winner.clone().unwrap().name;
    assert_eq!(winner(&a), "scan w8 t64");
    assert_eq!(winner(&b), "scan w16 t128");

    // Another candidate set: refused with the reason, the file untouched.
    let before = std::fs::read_to_string(&path).unwrap();
    let other = tune(
        &mut FakeBench::new(1.0),
        &[a],
        RecordMeta {
            candidate_checksum: "0".repeat(64),
            ..meta()
        },
        &settings(),
        &mut crate::tuner::Silent,
    );
    match merge_into(&path, other) {
        Err(RecordError::Mismatch {
            reason: MetaMismatch::CandidateSet { .. },
            ..
        }) => {}
        r => panic!("{r:?}"),
    }
    assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
}

#[test]
fn a_quick_run_does_not_replace_a_full_entry_but_fills_a_missing_one_and_a_full_run_replaces_it() {
    use crate::candidates::Grid;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nvidia-h200.json");
    let full = case(Subject::Kernel(TunedFamily::Scan), Placement::Hbm, 1 << 15);
    let quick = |c: &Case| Case {
        grid: Grid::Quick,
        ..c.clone()
    };
    let other = case(
        Subject::Kernel(TunedFamily::Select),
        Placement::Hbm,
        1 << 15,
    );
    assert!(enumerate(&quick(&full)).len() < enumerate(&full).len());
    let run = |fast: &str, cases: &[Case]| {
        tune(
            &mut FakeBench::new(1.0).with(fast, Fake::Times(vec![0.1])),
            cases,
            meta(),
            &settings(),
            &mut crate::tuner::Silent,
        )
    };
    // w128 t1024 is outside the quick grid of the scan in HBM.
    merge_into(&path, run("scan w128 t1024", std::slice::from_ref(&full))).unwrap();
    let (merged, kept) =
        merge_into(&path, run("scan w8 t128", &[quick(&full), quick(&other)])).unwrap();
    assert_eq!(kept, vec![full.key().to_string()]);
    let winner =
        |r: &TuningRecord, c: &Case| r.entry(&c.key()).unwrap().winner.clone().unwrap().name;
    assert_eq!(winner(&merged, &full), "scan w128 t1024");
    assert!(merged.entry(&other.key()).is_some(), "a new key is added");
    // A full run replaces the quick entry, and a quick entry replaces a quick one.
    let (merged, kept) =
        merge_into(&path, run("select t1024 i8 onepass", &[quick(&other)])).unwrap();
    assert!(kept.is_empty());
    assert_eq!(winner(&merged, &other), "select t1024 i8 onepass");
    let (merged, kept) =
        merge_into(&path, run("select t64 i16", std::slice::from_ref(&other))).unwrap();
    assert!(kept.is_empty());
    assert_eq!(winner(&merged, &other), "select t64 i16");
}

#[test]
fn a_slow_candidate_stops_after_the_least_runs_once_its_budget_is_spent() {
    let reps = Reps {
        min: 5,
        max: 25,
        budget_ms: 250.0,
        give_up_above_ms: f64::INFINITY,
    };
    let count = |ms: f64| reps.collect(|_| Ok::<_, ()>(ms)).unwrap().len();
    assert_eq!(count(0.01), 25, "a fast kernel gets every run");
    assert_eq!(count(40.0), 7, "runs stop once 250 ms are spent");
    assert_eq!(count(1000.0), 5, "but never before the least");
    assert_eq!(
        Reps::exactly(9)
            .collect(|_| Ok::<_, ()>(1e9))
            .unwrap()
            .len(),
        9
    );
    // The first error ends the runs.
    let mut calls = 0;
    let r = reps.collect(|i| {
        calls += 1;
        if i == 2 {
            Err("fault")
        } else {
            Ok(1.0)
        }
    });
    assert_eq!((r, calls), (Err("fault"), 3));
    // --reps below the least lowers the least too.
    let s = crate::tuner::Settings::full().with_max_reps(3);
    assert_eq!((s.reps.min, s.reps.max), (3, 3));
    assert_eq!(crate::tuner::Settings::quick().with_max_reps(0).reps.max, 1);
}

#[test]
fn merge_by_key_takes_a_partial_run_of_another_grid_and_refuses_another_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let (into, from) = (
        dir.path().join("nvidia-h200.json"),
        dir.path().join("partial.json"),
    );
    let a = case(Subject::Kernel(TunedFamily::Scan), Placement::Hbm, 1 << 15);
    let b = case(Subject::Kernel(TunedFamily::Scan), Placement::Hbm, 1 << 20);
    let c = case(Subject::Kernel(TunedFamily::Scan), Placement::Host, 1 << 20);
    let full = tune(
        &mut FakeBench::new(1.0).with("scan w8 t64", Fake::Times(vec![0.1])),
        &[a.clone(), b.clone()],
        meta(),
        &settings(),
        &mut crate::tuner::Silent,
    );
    full.write(&into).unwrap();
    // A partial run with another candidate set (say an opt-in): b again, and c.
    let partial = tune(
        &mut FakeBench::new(1.0).with("scan w16 t128", Fake::Times(vec![0.1])),
        &[b.clone(), c.clone()],
        RecordMeta {
            candidate_checksum: "1".repeat(64),
            ..meta()
        },
        &settings(),
        &mut crate::tuner::Silent,
    );
    partial.write(&from).unwrap();
    let (merged, report) = crate::records::merge_by_key(&from, &into).unwrap();
    assert_eq!(report.replaced, vec![b.key().to_string()]);
    assert_eq!(report.added, vec![c.key().to_string()]);
    assert_eq!(merged, TuningRecord::read(&into).unwrap());
    assert_eq!(merged.meta, meta(), "the header stays the record's");
    let winner = |k: &Case| merged.entry(&k.key()).unwrap().winner.clone().unwrap().name;
    assert_eq!(winner(&a), "scan w8 t64");
    assert_eq!(winner(&b), "scan w16 t128");
    assert_eq!(winner(&c), "scan w16 t128");

    // Another GPU's run: refused, naming it, the record untouched.
    let before = std::fs::read_to_string(&into).unwrap();
    let mut other = TuningRecord::read(&from).unwrap();
    other.meta.gpu = "NVIDIA A100-SXM4-80GB".into();
    other.write(&from).unwrap();
    match crate::records::merge_by_key(&from, &into) {
        Err(RecordError::Mismatch {
            reason: MetaMismatch::Gpu { .. },
            ..
        }) => {}
        r => panic!("{r:?}"),
    }
    assert_eq!(std::fs::read_to_string(&into).unwrap(), before);
}

/// Every case of one shape and context, as a run orders them.
fn all_subjects(tokens: usize) -> Vec<Case> {
    SUBJECTS
        .iter()
        .map(|&(subject, placement)| case(subject, placement, tokens))
        .collect()
}

/// A fake bench on which `fastest` (one per subject, by name and subject) is fastest.
fn fastest_per_subject(fastest: &[(Subject, &str)]) -> impl Bench {
    struct PerSubject(Vec<(Subject, String)>, FakeBench);
    impl Bench for PerSubject {
        fn prepare(&mut self, case: &Case) -> Result<CaseInfo, String> {
            self.1.prepare(case)
        }
        fn verify(&mut self, case: &Case, variant: &Variant) -> Result<(), String> {
            self.1.verify(case, variant)
        }
        fn time(&mut self, case: &Case, v: &Variant, reps: Reps) -> Result<Vec<f64>, String> {
            let fast = self
                .0
                .iter()
                .any(|(s, name)| *s == case.subject && *name == v.name());
            reps.collect(|_| Ok(if fast { 0.5 } else { 1.0 }))
        }
    }
    PerSubject(
        fastest.iter().map(|&(s, n)| (s, n.to_string())).collect(),
        FakeBench::new(1.0),
    )
}

#[test]
fn the_new_subjects_are_verified_timed_and_disqualified_like_the_scan() {
    let select = case(
        Subject::Kernel(TunedFamily::Select),
        Placement::Hbm,
        1 << 20,
    );
    // A wrong select candidate that would be fastest must not win; a failing attention
    // candidate is reported, not fatal.
    let mut bench = FakeBench::new(2.0)
        .with("select t1024 i32", Fake::Wrong)
        .with("select t512 i16", Fake::Times(vec![1.0]))
        .with("select t256 i32", Fake::Times(vec![1.01]));
    let entry = tune_case(&mut bench, &select, &settings(), &mut crate::tuner::Silent);
    assert_eq!(entry.candidates.len(), enumerate(&select).len());
    let w = entry.winner.unwrap();
    // 1% slower is within the 2% floor, and 256 threads is simpler than 512.
    assert_eq!(
        (w.fastest.as_str(), w.name.as_str()),
        ("select t512 i16", "select t256 i32")
    );
    assert!(matches!(
        outcome(&entry.candidates, "select t1024 i32"),
        Outcome::Disqualified { reason } if reason.starts_with("verify:")
    ));

    let attention = case(
        Subject::Kernel(TunedFamily::Attention),
        Placement::Hbm,
        1 << 15,
    );
    let mut bench = FakeBench::new(1.0).with("attention t64 r1", Fake::TimeFails);
    let entry = tune_case(
        &mut bench,
        &attention,
        &settings(),
        &mut crate::tuner::Silent,
    );
    assert!(matches!(
        outcome(&entry.candidates, "attention t64 r1"),
        Outcome::Disqualified { reason } if reason.contains("too many resources")
    ));
    // Exact ties: the fewest threads, then the fewest rows per warp.
    assert_eq!(entry.winner.unwrap().name, "attention t64 r2");

    // A row family: every thread count is verified, then timed.
    let fetch = case(
        Subject::Kernel(TunedFamily::Fetch),
        Placement::Host,
        1 << 17,
    );
    let mut bench = FakeBench::new(1.0).with("threads t512", Fake::Times(vec![0.5]));
    let entry = tune_case(&mut bench, &fetch, &settings(), &mut crate::tuner::Silent);
    assert_eq!(bench.timed.len(), 5);
    assert_eq!(
        entry.winner.unwrap().variant,
        Variant::Tile(Tile::Threads(512))
    );
}

#[test]
fn the_pariskv_subjects_are_verified_timed_and_disqualified_like_the_others() {
    for (family, placement) in [
        (TunedFamily::PariskvVote, Placement::Host),
        (TunedFamily::PariskvTopc, Placement::Hbm),
        (TunedFamily::PariskvRerank, Placement::Hbm),
    ] {
        let c = case(Subject::Kernel(family), placement, 1 << 20);
        // The rerank's tiles carry their `_score` and top-k variants too.
        let kind = match family {
            TunedFamily::PariskvRerank => "rerank",
            _ => "threads",
        };
        let candidates = crate::candidates::enumerate(&c).len();
        let name = |t: u32| format!("{kind} t{t}");
        // A wrong candidate that would be fastest does not win; one whose launch fails is
        // reported, not fatal; the rest are timed once each.
        let mut bench = FakeBench::new(2.0)
            .with(&name(1024), Fake::Wrong)
            .with(&name(64), Fake::TimeFails)
            .with(&name(512), Fake::Times(vec![1.0]))
            .with(&name(256), Fake::Times(vec![1.01]));
        let entry = tune_case(&mut bench, &c, &settings(), &mut crate::tuner::Silent);
        assert_eq!(entry.candidates.len(), candidates, "{family:?}");
        assert_eq!(
            bench.timed.len(),
            candidates - 1,
            "the wrong one is not timed"
        );
        assert!(matches!(
            outcome(&entry.candidates, &name(1024)),
            Outcome::Disqualified { reason } if reason.starts_with("verify:")
        ));
        assert!(matches!(
            outcome(&entry.candidates, &name(64)),
            Outcome::Disqualified { reason } if reason.contains("too many resources")
        ));
        let w = entry.winner.unwrap();
        // 1% slower is within the 2% floor, and 256 threads is simpler than 512.
        assert_eq!(
            (w.fastest.as_str(), w.name.as_str()),
            (name(512).as_str(), name(256).as_str())
        );
        assert_eq!(entry.key.subject, Subject::Kernel(family));
        assert_eq!(entry.key.placement, placement);
        assert_eq!(entry.key.context_bucket, 20);
    }
}

/// A whole-row rerank `_score` that is not faster beyond noise loses to the plain one of its
/// threads; one that is faster wins.
#[test]
fn the_whole_row_rerank_wins_only_beyond_noise() {
    let c = case(
        Subject::Kernel(TunedFamily::PariskvRerank),
        Placement::Host,
        1 << 20,
    );
    for (wide_ms, winner) in [(0.99, "rerank t256"), (0.5, "rerank t256 v16")] {
        let mut bench = FakeBench::new(2.0)
            .with("rerank t256", Fake::Times(vec![1.0]))
            .with("rerank t256 v16", Fake::Times(vec![wide_ms]));
        let entry = tune_case(&mut bench, &c, &settings(), &mut crate::tuner::Silent);
        assert_eq!(entry.winner.unwrap().name, winner, "v16 at {wide_ms} ms");
    }
}

fn step_shape(placement: Placement, tokens: usize) -> StepShape {
    StepShape {
        batch: 1,
        kv_heads: 8,
        head_dim: 128,
        group: 4,
        block: crate::candidates::BLOCK,
        segment_words: crate::candidates::SEGMENT_WORDS,
        max_seg: tokens.div_ceil(64 * crate::candidates::SEGMENT_WORDS),
        max_tokens: tokens,
        placement,
        basis: Basis::Raw,
        kv_rows: KvRows::Separate,
    }
}

fn step_plan(
    record: &TuningRecord,
    placement: Placement,
    method: Method,
    tokens: usize,
) -> LaunchPlan {
    let shape = step_shape(placement, tokens);
    launch_plan(&PlanInputs {
        shape,
        scoring: Scoring::of(method, 128, shape.block, Basis::Raw).unwrap(),
        transfer: None,
        k: bench_k(tokens),
        k_max: bench_k_max(),
        union: true,
        tiles: &Tiles::default(),
        tuning: Some(record),
    })
    .unwrap()
}

#[test]
fn a_record_of_every_subject_answers_every_lookup_of_the_step() {
    let tokens = 1 << 17;
    let fast = [
        (Subject::Kernel(TunedFamily::Scan), "scan w32 t512"),
        (Subject::Kernel(TunedFamily::Plan), "threads t64"),
        (Subject::Kernel(TunedFamily::Select), "select t512 i8"),
        (Subject::Kernel(TunedFamily::Attention), "attention t128 r2"),
        (Subject::Kernel(TunedFamily::Oracle), "threads t512"),
        (Subject::Kernel(TunedFamily::Landmark), "threads t1024"),
        (Subject::Kernel(TunedFamily::Fetch), "threads t128"),
        (Subject::Transfer, "transfer copy-kernel"),
        (Subject::Kernel(TunedFamily::Gather), "gather l2 t128"),
        (Subject::Kernel(TunedFamily::PariskvVote), "threads t512"),
        (Subject::Kernel(TunedFamily::PariskvTopc), "threads t1024"),
        (
            Subject::Kernel(TunedFamily::PariskvRerank),
            "rerank t64 v16",
        ),
    ];
    let mut bench = fastest_per_subject(&fast);
    let record = tune(
        &mut bench,
        &all_subjects(tokens),
        meta(),
        &settings(),
        &mut crate::tuner::Silent,
    );
    for placement in [Placement::Hbm, Placement::Host] {
        // A plane method: plan, (gather,) scan, oracle of the tail, select, fetch, attention.
        let plan = step_plan(&record, placement, Method::Fathom { bits: 48.0 }, tokens);
        assert!(
            plan.tuned,
            "{placement:?}: a lookup fell back to the defaults"
        );
        let s = plan.specs;
        assert_eq!(s.plan.unwrap().threads, 64);
        let scan = s.scan.unwrap();
        assert_eq!((scan.tile_words, scan.threads), (32, 512));
        let select = s.select.unwrap();
        assert_eq!((select.threads, select.items_per_thread), (512, 8));
        assert_eq!((s.attention.threads, s.attention.rows_per_warp), (128, 2));
        assert_eq!(s.oracle.unwrap().threads, 512);
        assert_eq!(s.fetch.threads, 128);
        if placement == Placement::Host {
            assert_eq!(plan.transfer, Some(Transfer::CopyKernel));
            assert_eq!(
                s.gather.map(|g| (g.loads_in_flight, g.threads)),
                Some((2, 128))
            );
        }
        // The launches carry the tuned tiles: the select chunk sets the chunked grids.
        for op in &plan.operations {
            let Some(kernel) = &op.kernel else { continue };
            let block = kernel.launch.block[0];
            match op.role {
                Role::Select(_) => assert_eq!(block, 512),
                Role::Attention => assert_eq!(block, 128),
                Role::Fetch => assert_eq!(block, 128),
                Role::Plan { .. } => assert_eq!(block, 64),
                _ => {}
            }
            if let Role::Select(codegen::spec::select::SelectStage::Count) = op.role {
                assert_eq!(kernel.launch.grid[0] as usize, tokens.div_ceil(512 * 8));
            }
        }
        // Landmark and oracle scoring find their own tiles in this placement.
        let landmark = step_plan(&record, placement, Method::Landmark, tokens);
        assert!(landmark.tuned);
        assert_eq!(landmark.specs.landmark.unwrap().threads, 1024);
        let oracle = step_plan(&record, placement, Method::Oracle, tokens);
        assert!(oracle.tuned);
        assert_eq!(oracle.specs.oracle.unwrap().threads, 512);
        // pariskv(k): vote, top-C and rerank from the record, fetch and attention too.
        let pariskv = step_plan(&record, placement, Method::Pariskv { k: 100 }, tokens);
        assert!(pariskv.tuned, "{placement:?}: {:?}", pariskv.untuned);
        let pk = pariskv.specs.pariskv.unwrap();
        assert_eq!(
            (pk.vote.threads, pk.topc.threads, pk.rerank.threads),
            (512, 1024, 64)
        );
        // The whole-row `_score` won, and its name says so.
        assert!(pk.rerank.vector_loads);
        assert!(pk.rerank.score_entry().ends_with("_v16_score"));
        for op in &pariskv.operations {
            let Some(kernel) = &op.kernel else { continue };
            let want = match op.role {
                Role::Pariskv(Stage::Vote) => 512,
                Role::Pariskv(Stage::TopcCount | Stage::TopcWrite) => 1024,
                Role::Pariskv(Stage::RerankScore | Stage::RerankSelect(_)) => 64,
                _ => continue,
            };
            assert_eq!(kernel.launch.block[0], want, "{:?}", op.role);
        }
    }
    // Another context bucket is served by the nearest tuned one.
    let far = step_plan(&record, Placement::Host, Method::Landmark, 1 << 20);
    assert_eq!(far.specs.select.unwrap().threads, 512);
}

/// A clock that moves one second every time it is read.
struct Ticks(std::cell::Cell<u64>);

impl crate::tuner::Clock for Ticks {
    fn now(&self) -> std::time::Duration {
        let t = self.0.get() + 1;
        self.0.set(t);
        std::time::Duration::from_secs(t)
    }
}

#[test]
fn timings_sum_every_phase_of_every_candidate_on_a_fake_clock() {
    use crate::tuner::{tune_case_clocked, Phase, Timings};
    let c = hbm_scan();
    let names: Vec<String> = enumerate(&c).iter().map(Variant::name).collect();
    let n = names.len() as u64;
    assert!(n >= 3);
    // One candidate is wrong: verified, never timed.
    let mut bench = FakeBench::new(1.0).with(&names[1], Fake::Wrong);
    let mut timings = Timings::default();
    let clock = Ticks(std::cell::Cell::new(0));
    let entry = tune_case_clocked(&mut bench, &c, &settings(), &mut timings, &clock);
    let secs = |p| timings.of(p).as_secs();
    // Each phase spans two readings of the clock: one second each.
    assert_eq!(secs(Phase::Prepare), 1);
    assert_eq!(secs(Phase::Verify), n);
    assert_eq!(secs(Phase::Time), n - 1);
    assert_eq!(secs(Phase::Compile), 0);
    // The compile runs beside the cases: its line has no share and the total leaves it out.
    timings.add(Phase::Compile, std::time::Duration::from_secs(1000));
    assert_eq!(entry.candidates.len() as u64, n);
    let summary = timings.summary();
    assert!(
        summary.contains("prepare") && summary.contains("total"),
        "{summary}"
    );
    let total_line = summary.lines().last().unwrap();
    assert!(
        total_line.contains(&format!("{:.1}", (2 * n) as f64)),
        "{summary}"
    );
    let compile = summary.lines().find(|l| l.starts_with("compile")).unwrap();
    assert!(
        compile.contains("1000.0") && compile.contains("in the background"),
        "{summary}"
    );
}

#[test]
fn a_finished_case_is_one_log_line() {
    use crate::tuner::case_line;
    let c = hbm_scan();
    let names: Vec<String> = enumerate(&c).iter().map(Variant::name).collect();
    let mut bench = FakeBench::new(2.0)
        .with(&names[0], Fake::Times(vec![0.081]))
        .with(&names[1], Fake::Wrong);
    let entry = tune_case(&mut bench, &c, &settings(), &mut crate::tuner::Silent);
    let mut phases = crate::tuner::Timings::default();
    phases.add(
        crate::tuner::Phase::Prepare,
        std::time::Duration::from_millis(1100),
    );
    phases.add(
        crate::tuner::Phase::Verify,
        std::time::Duration::from_millis(900),
    );
    phases.add(
        crate::tuner::Phase::Time,
        std::time::Duration::from_millis(1200),
    );
    let line = case_line(
        12,
        117,
        &c,
        &entry,
        std::time::Duration::from_millis(3200),
        &phases,
    );
    let want = format!(
        "[12/117] {} d128 g4: {} candidates (1 disqualified), best {} 0.0810 ms \
         (3.2 s: prepare 1.1, verify 0.9, time 1.2)",
        c.key(),
        names.len(),
        names[0]
    );
    assert_eq!(line, want);
    assert!(!line.contains('\n'));
}

#[test]
fn the_run_compiles_each_candidate_kernel_once() {
    use crate::candidates::{run_specs, tile_spec};
    let cases = crate::selection::select(&["qwen3-8b".to_string()], &[], true).unwrap();
    let specs = run_specs(&cases);
    let set: std::collections::HashSet<_> = specs.iter().collect();
    assert_eq!(set.len(), specs.len(), "no spec twice");
    for case in &cases {
        for v in enumerate(case) {
            if let Ok(spec) = tile_spec(case, &v) {
                assert!(
                    set.contains(&spec),
                    "{} {}: not compiled up front",
                    case.key(),
                    v.name()
                );
            }
        }
    }
    // Contexts share kernels: fewer specs than tile candidates.
    let candidates: usize = cases.iter().map(|c| enumerate(c).len()).sum();
    assert!(
        specs.len() < candidates,
        "{} specs of {candidates}",
        specs.len()
    );
}

#[test]
fn a_candidate_twice_as_slow_as_the_fastest_so_far_gets_only_the_least_runs() {
    let reps = Settings::full().reps;
    let count = |r: Reps, ms: &[f64]| r.collect(|i| Ok::<_, ()>(ms[i % ms.len()])).unwrap().len();
    assert_eq!(
        count(reps.after_fastest(None), &[0.1]),
        25,
        "the first candidate"
    );
    assert_eq!(
        count(reps.after_fastest(Some(0.1)), &[0.19]),
        25,
        "under twice"
    );
    assert_eq!(
        count(reps.after_fastest(Some(0.1)), &[0.21]),
        5,
        "over twice"
    );
    // Its fastest run decides: one run within twice keeps it going.
    assert_eq!(count(reps.after_fastest(Some(0.1)), &[0.3, 0.3, 0.15]), 25);
    let few = Settings::full().with_max_reps(3).reps;
    assert_eq!(
        count(few.after_fastest(Some(0.1)), &[1.0]),
        3,
        "never under the least"
    );

    // In a case: the tuner gives each candidate the fastest median before it.
    let c = hbm_scan();
    let names: Vec<String> = enumerate(&c).iter().map(|v| v.name()).collect();
    let (first, slow, close) = (&names[0], &names[1], &names[2]);
    let mut bench = FakeBench::new(0.1)
        .with(first, Fake::Times(vec![0.1]))
        .with(slow, Fake::Times(vec![0.25]))
        .with(close, Fake::Times(vec![0.15]));
    let entry = tune_case(&mut bench, &c, &Settings::full(), &mut Silent);
    let samples = |name: &str| match entry.candidates.iter().find(|x| x.name == name) {
        Some(CandidateRecord {
            outcome: Outcome::Timed { samples, .. },
            ..
        }) => *samples,
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(samples(first), 25);
    assert_eq!(samples(slow), 5, "2.5x the fastest so far");
    assert_eq!(samples(close), 25, "1.5x the fastest so far");
    assert_eq!(entry.winner.unwrap().median_ms, 0.1);
}
