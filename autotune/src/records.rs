//! Where `autotune` writes its record, and how a new run joins the record already there.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use runtime::tuning::{
    record_file_name, EntryRecord, MetaCheck, RecordError, TuningRecord, TUNING_DIR_VAR,
};

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
/// the result there; also returns the keys of the record's entries that were kept over
/// `newer`'s. An entry of `newer` replaces the record's of the same key unless its candidates
/// are a strict subset of the record's: a `--quick` run (a thinner grid) does not undo what a
/// full run found. A record there whose header differs is refused with the reason and left
/// untouched.
pub fn merge_into(
    path: &Path,
    mut newer: TuningRecord,
) -> Result<(TuningRecord, Vec<String>), RecordError> {
    let mut kept = Vec::new();
    let merged = if path.exists() {
        let mut old = TuningRecord::read(path)?;
        newer.entries.retain(|entry| {
            let fuller = old.entry(&entry.key).is_some_and(|o| tried_fewer(entry, o));
            if fuller {
                kept.push(entry.key.to_string());
            }
            !fuller
        });
        old.merge(newer).map_err(|reason| RecordError::Mismatch {
            path: path.to_path_buf(),
            reason,
        })?;
        old
    } else {
        newer
    };
    merged.write(path)?;
    Ok((merged, kept))
}

/// Whether `newer` tried a strict subset of the candidates `older` tried.
fn tried_fewer(newer: &EntryRecord, older: &EntryRecord) -> bool {
    let names = |e: &EntryRecord| -> HashSet<String> {
        e.candidates.iter().map(|c| c.name.clone()).collect()
    };
    let (n, o) = (names(newer), names(older));
    n.len() < o.len() && n.is_subset(&o)
}

/// What [`merge_by_key`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyMerge {
    /// Entries of the partial run that took the place of the record's under the same key.
    pub replaced: Vec<String>,
    /// Entries of the partial run the record did not have.
    pub added: Vec<String>,
}

/// `autotune --merge FROM --into RECORD`: puts every entry of the record at `from` (a partial
/// run, e.g. `--only select/hbm/1m`, written to a scratch `--out`) in place of the entry of
/// the same key in the record at `into`, adds the others, and writes `into`. The headers must
/// agree on everything a runtime checks (GPU, compute capability, SMs, driver, NVRTC, fathom
/// version) but not on the candidate set: that is what lets a run with another grid (an
/// opt-in, a graduated candidate) refresh some entries of a record without re-making it; the
/// header, checksum included, stays `into`'s. `into` is left untouched when anything fails.
pub fn merge_by_key(from: &Path, into: &Path) -> Result<(TuningRecord, KeyMerge), RecordError> {
    let newer = TuningRecord::read(from)?;
    let mut record = TuningRecord::read(into)?;
    record
        .meta
        .check(&newer.meta, MetaCheck::Runtime)
        .map_err(|reason| RecordError::Mismatch {
            path: from.to_path_buf(),
            reason,
        })?;
    let mut merge = KeyMerge::default();
    if newer.ceilings.is_some() {
        record.ceilings = newer.ceilings;
    }
    for entry in newer.entries {
        let name = entry.key.to_string();
        if record.entry(&entry.key).is_some() {
            merge.replaced.push(name);
        } else {
            merge.added.push(name);
        }
        record.insert(entry);
    }
    record.write(into)?;
    Ok((record, merge))
}
