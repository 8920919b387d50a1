//! Where records live and which one a process uses.
//!
//! A record is the file `<gpu-model>.json` (the model's name in lower case, every run of other
//! characters one `-`: `nvidia-h200.json`), looked for, in order, in
//! 1. `$FATHOM_TUNING_DIR`, when set;
//! 2. `<cache dir>/tuning`, the cache directory of `codegen::nvrtc::cache_dir` (where
//!    `autotune` writes by default);
//! 3. the repository's committed `runtime/records`, as compiled into this binary (so a
//!    binary carried to another machine still finds them).
//!
//! The first record whose header fits this process is used; one that does not fit is refused
//! with its reason, and the next place is tried.

use std::path::{Path, PathBuf};
use std::sync::Once;

use super::meta::{MetaCheck, RecordMeta};
use super::record::{RecordError, TuningRecord};
use crate::gpu::DeviceInfo;

/// The environment variable naming a directory searched before the others.
pub const TUNING_DIR_VAR: &str = "FATHOM_TUNING_DIR";

/// The file name of the record of a GPU model.
pub fn record_file_name(gpu_model: &str) -> String {
    let mut name = String::new();
    for c in gpu_model.trim().chars() {
        if c.is_ascii_alphanumeric() {
            name.push(c.to_ascii_lowercase());
        } else if !name.is_empty() && !name.ends_with('-') {
            name.push('-');
        }
    }
    let name = name.trim_end_matches('-');
    format!(
        "{}.json",
        if name.is_empty() { "unnamed-gpu" } else { name }
    )
}

include!(concat!(env!("OUT_DIR"), "/embedded_records.rs"));

/// The place name given to the records compiled into the binary.
pub const EMBEDDED_DIR: &str = "<compiled-in runtime/records>";

/// The directories searched, in order, before the compiled-in records (see the module
/// documentation).
pub fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = std::env::var_os(TUNING_DIR_VAR).filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(dir));
    }
    dirs.push(codegen::nvrtc::cache_dir().join("tuning"));
    dirs
}

/// What a search found.
#[derive(Debug)]
pub struct Located {
    /// The record used, and its file.
    pub record: Option<(PathBuf, TuningRecord)>,
    /// Records found but not used, each with why (unreadable or another header).
    pub refused: Vec<RecordError>,
    /// Every file looked at.
    pub searched: Vec<PathBuf>,
}

/// Finds the record of `current.gpu` in `dirs`, then in `embedded` (`(file name, contents)`),
/// whose header fits `current` (the candidate set aside: [`MetaCheck::Runtime`]).
pub fn find_record(dirs: &[PathBuf], embedded: &[(&str, &str)], current: &RecordMeta) -> Located {
    let name = record_file_name(&current.gpu);
    let mut found = Located {
        record: None,
        refused: Vec::new(),
        searched: Vec::new(),
    };
    let on_disk = dirs.iter().map(|dir| {
        let path = dir.join(&name);
        let read = path.is_file().then(|| TuningRecord::read(&path));
        (path, read)
    });
    let compiled_in = embedded
        .iter()
        .filter(|(file, _)| *file == name)
        .map(|(file, text)| {
            let path = Path::new(EMBEDDED_DIR).join(file);
            let read = TuningRecord::from_json(text, &path);
            (path, Some(read))
        });
    for (path, read) in on_disk.chain(compiled_in) {
        found.searched.push(path.clone());
        match read {
            None => continue,
            Some(Ok(record)) => match record.meta.check(current, MetaCheck::Runtime) {
                Ok(()) => {
                    found.record = Some((path, record));
                    break;
                }
                Err(reason) => found.refused.push(RecordError::Mismatch { path, reason }),
            },
            Some(Err(e)) => found.refused.push(e),
        }
    }
    found
}

/// The record for `device` in [`search_dirs`], for this process's NVRTC and fathom version;
/// `None` without one. Records refused are reported on standard error, once per process.
pub fn record_for(device: &DeviceInfo) -> Option<TuningRecord> {
    let nvrtc = codegen::nvrtc::version()
        .map_or_else(|_| "unknown".to_string(), |(a, b)| format!("{a}.{b}"));
    let current = RecordMeta::current(device, nvrtc, String::new());
    let found = find_record(&search_dirs(), EMBEDDED_RECORDS, &current);
    if !found.refused.is_empty() {
        static REPORTED: Once = Once::new();
        REPORTED.call_once(|| {
            for refusal in &found.refused {
                eprintln!("fathom: {refusal}; using defaults where no other record answers");
            }
        });
    }
    found.record.map(|(_, record)| record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuning::meta::MetaMismatch;

    fn meta(driver: &str) -> RecordMeta {
        RecordMeta {
            gpu: "NVIDIA H200".into(),
            compute_capability: "9.0".into(),
            multiprocessors: 132,
            driver: driver.into(),
            nvrtc: "13.0".into(),
            project_version: "0.1.0".into(),
            candidate_checksum: "abc".into(),
        }
    }

    #[test]
    fn file_names_are_the_model_in_lower_case() {
        assert_eq!(record_file_name("NVIDIA H200"), "nvidia-h200.json");
        assert_eq!(
            record_file_name(" NVIDIA GeForce RTX 4090 (D) "),
            "nvidia-geforce-rtx-4090-d.json"
        );
        assert_eq!(record_file_name("//"), "unnamed-gpu.json");
    }

    #[test]
    fn a_mismatched_record_is_refused_and_the_next_place_used() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let file = record_file_name("NVIDIA H200");
        TuningRecord::new(meta("12.8"))
            .write(&a.path().join(&file))
            .unwrap();
        TuningRecord::new(meta("13.0"))
            .write(&b.path().join(&file))
            .unwrap();
        let current = RecordMeta {
            candidate_checksum: String::new(),
            ..meta("13.0")
        };
        let dirs = [a.path().to_path_buf(), b.path().to_path_buf()];
        let found = find_record(&dirs, &[], &current);
        let (path, record) = found.record.expect("the second record fits");
        assert_eq!(path, b.path().join(&file));
        assert_eq!(record.meta.driver, "13.0");
        assert_eq!(found.refused.len(), 1);
        assert!(matches!(
            &found.refused[0],
            RecordError::Mismatch {
                reason: MetaMismatch::Driver { .. },
                ..
            }
        ));
        // Without the fitting one, nothing is used and the reason is kept.
        let found = find_record(&dirs[..1], &[], &current);
        assert!(found.record.is_none());
        assert!(
            found.refused[0].to_string().contains("driver"),
            "{}",
            found.refused[0]
        );
    }

    #[test]
    fn no_record_is_no_record() {
        let dir = tempfile::tempdir().unwrap();
        let found = find_record(&[dir.path().to_path_buf()], &[], &meta("13.0"));
        assert!(found.record.is_none() && found.refused.is_empty());
        assert_eq!(found.searched, [dir.path().join("nvidia-h200.json")]);
    }

    #[test]
    fn compiled_in_records_answer_last() {
        let text = serde_json::to_string(&TuningRecord::new(meta("13.0"))).unwrap();
        let embedded = [("nvidia-h200.json", text.as_str()), ("other.json", "{")];
        let dir = tempfile::tempdir().unwrap();
        let found = find_record(&[dir.path().to_path_buf()], &embedded, &meta("13.0"));
        let (path, _) = found.record.expect("the compiled-in record fits");
        assert!(path.starts_with(EMBEDDED_DIR), "{}", path.display());
        assert!(found.refused.is_empty(), "other GPUs' records are not read");
        // A record on disk that fits wins over the compiled-in one.
        TuningRecord::new(meta("13.0"))
            .write(&dir.path().join("nvidia-h200.json"))
            .unwrap();
        let found = find_record(&[dir.path().to_path_buf()], &embedded, &meta("13.0"));
        assert_eq!(found.record.unwrap().0, dir.path().join("nvidia-h200.json"));
        // A compiled-in record of another header is refused with its reason.
        let found = find_record(&[], &embedded, &meta("12.8"));
        assert!(found.record.is_none());
        assert!(found.refused[0].to_string().contains("driver"));
    }

    #[test]
    fn the_committed_records_parse() {
        assert!(
            !EMBEDDED_RECORDS.is_empty(),
            "runtime/records holds the H200 record"
        );
        for (file, text) in EMBEDDED_RECORDS {
            let record = TuningRecord::from_json(text, Path::new(file)).unwrap();
            assert_eq!(record_file_name(&record.meta.gpu), *file);
            assert!(!record.entries.is_empty(), "{file} has no entries");
        }
    }
}
