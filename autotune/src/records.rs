//! Where `autotune` writes its record, and how a new run joins the record already there.

use std::path::{Path, PathBuf};

use runtime::tuning::{record_file_name, RecordError, TuningRecord, TUNING_DIR_VAR};

/// The directory records are written to by default: `$FATHOM_TUNING_DIR`, else
/// `<cache dir>/tuning` (both searched by the runtime, see `runtime::tuning::locate`).
pub fn default_dir() -> PathBuf {
    std::env::var_os(TUNING_DIR_VAR)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| codegen::nvrtc::cache_dir().join("tuning"))
}

/// The record file of `gpu_model` in `dir`.
pub fn record_path(dir: &Path, gpu_model: &str) -> PathBuf {
    dir.join(record_file_name(gpu_model))
}

/// Merges `newer` into the record at `path` (or takes it as is when there is none) and writes
/// the result there. A record there whose header differs is refused with the reason and left
/// untouched.
pub fn merge_into(path: &Path, newer: TuningRecord) -> Result<TuningRecord, RecordError> {
    let merged = if path.exists() {
        let mut old = TuningRecord::read(path)?;
        old.merge(newer).map_err(|reason| RecordError::Mismatch {
            path: path.to_path_buf(),
            reason,
        })?;
        old
    } else {
        newer
    };
    merged.write(path)?;
    Ok(merged)
}
