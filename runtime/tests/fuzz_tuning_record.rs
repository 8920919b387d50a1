//! Property fuzzing of autotune record loading (issue #7): a record is outside input (a file
//! copied between machines, cut short by a full disk, edited by hand, written by another
//! version), so every byte string must load as a record or be refused with a typed error, and a
//! record of another GPU, driver or version must be refused with its reason; never a panic.
//! The seed corpus is the committed H200 record (`runtime/records/nvidia-h200.json`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use proptest::prelude::*;
use runtime::tuning::locate::EMBEDDED_RECORDS;
use runtime::tuning::{find_record, record_file_name, MetaCheck, RecordError, TuningRecord};
use runtime::tuning::{TuneKey, TunedFamily, Tuning};

/// The committed record's text: the corpus every damage starts from.
fn corpus() -> &'static str {
    EMBEDDED_RECORDS
        .iter()
        .find(|(file, _)| *file == "nvidia-h200.json")
        .map(|(_, text)| *text)
        .expect("the H200 record is committed")
}

/// One way of damaging a good file.
#[derive(Clone, Debug)]
enum Damage {
    Truncate(usize),
    Flip(usize, u8),
    Remove(usize, usize),
    Append(String),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        any::<usize>().prop_map(Damage::Truncate),
        (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Damage::Flip(i, x)),
        (any::<usize>(), 1usize..400).prop_map(|(i, n)| Damage::Remove(i, n)),
        "\\PC{0,40}".prop_map(Damage::Append),
    ]
}

fn apply(text: &str, damage: &Damage) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    let len = bytes.len();
    match damage {
        Damage::Truncate(at) => bytes.truncate(at % (len + 1)),
        Damage::Flip(at, x) => bytes[at % len] ^= x,
        Damage::Remove(at, n) => {
            let start = at % len;
            bytes.drain(start..(start + n).min(len));
        }
        Damage::Append(tail) => bytes.extend_from_slice(tail.as_bytes()),
    }
    bytes
}

/// Loads `bytes` as a record file; a panic is a test failure with the input named.
fn load(bytes: &[u8]) -> Result<TuningRecord, RecordError> {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let path = dir.path().join("nvidia-h200.json");
    std::fs::write(&path, bytes).expect("write the damaged record");
    catch_unwind(AssertUnwindSafe(|| TuningRecord::read(&path)))
        .unwrap_or_else(|_| panic!("reading {} bytes panicked", bytes.len()))
}

/// Every lookup the step makes, on a loaded record: none may panic.
fn look_up_everything(record: &TuningRecord) {
    for family in TunedFamily::ALL {
        for bucket in 0..32 {
            for placement in [
                codegen::spec::Placement::Host,
                codegen::spec::Placement::Hbm,
            ] {
                let key = TuneKey {
                    family,
                    head_dim: 128,
                    group: 4,
                    placement,
                    context_bucket: bucket,
                };
                let _ = record.tile(&key);
            }
            let _ = record.transfer(128, 4, bucket);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_damaged_record_loads_or_is_refused(damage in damage()) {
        let bytes = apply(corpus(), &damage);
        match load(&bytes) {
            Ok(record) => look_up_everything(&record),
            Err(e) => {
                let message = e.to_string();
                prop_assert!(message.contains("nvidia-h200.json"), "{message}");
                prop_assert!(
                    matches!(e, RecordError::Parse { .. } | RecordError::Io { .. }),
                    "{message}"
                );
            }
        }
    }

    #[test]
    fn any_json_value_is_not_a_record_unless_it_is_one(text in "\\PC{0,200}") {
        let path = Path::new("fuzz.json");
        let parsed = catch_unwind(|| TuningRecord::from_json(&text, path))
            .unwrap_or_else(|_| panic!("parsing {text:?} panicked"));
        if let Ok(record) = parsed {
            look_up_everything(&record);
        }
    }

    #[test]
    fn a_record_of_another_header_is_refused_with_its_reason(
        field in 0usize..6,
        other in "[a-zA-Z0-9 .]{1,12}",
        sms in any::<i32>(),
    ) {
        let good = TuningRecord::from_json(corpus(), Path::new("nvidia-h200.json"))
            .expect("the corpus loads");
        let current = good.meta.clone();
        let mut meta = current.clone();
        match field {
            0 => meta.gpu = other.clone(),
            1 => meta.compute_capability = other.clone(),
            2 => meta.multiprocessors = sms,
            3 => meta.driver = other.clone(),
            4 => meta.nvrtc = other.clone(),
            _ => meta.project_version = other.clone(),
        }
        let changed = meta != current;
        let check = meta.check(&current, MetaCheck::Runtime);
        prop_assert_eq!(check.is_err(), changed);
        if changed {
            // Through the search, as the runtime reads it: refused, the reason kept.
            let dir = tempfile::tempdir().expect("a scratch directory");
            let record = TuningRecord { meta, ..good };
            let file = dir.path().join(record_file_name(&current.gpu));
            record.write(&file).expect("write the record");
            let found = find_record(&[dir.path().to_path_buf()], &[], &current);
            prop_assert!(found.record.is_none());
            prop_assert_eq!(found.refused.len(), 1);
            let why = found.refused[0].to_string();
            prop_assert!(why.contains("refused"), "{}", why);
        }
    }
}

#[test]
fn every_truncation_of_the_record_is_refused_or_loads() {
    let text = corpus();
    // Every prefix near the start and the end, and a stride through the middle.
    let len = text.len();
    let cuts = (0..200)
        .chain((200..len.saturating_sub(200)).step_by(4099))
        .chain(len.saturating_sub(200)..len);
    for cut in cuts {
        match load(&text.as_bytes()[..cut]) {
            Ok(record) => look_up_everything(&record),
            Err(e) => assert!(matches!(e, RecordError::Parse { .. }), "cut {cut}: {e}"),
        }
    }
}
