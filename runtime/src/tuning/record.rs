//! The record itself: every candidate's outcome and the winner per key, read and written as
//! JSON, merged across runs, and read by the decoder through [`Tuning`].

use std::fmt;
use std::path::{Path, PathBuf};

use codegen::spec::{Placement, SelectAlgorithm};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::meta::{MetaCheck, MetaMismatch, RecordMeta};
use super::{Tile, Transfer, TuneKey, TunedFamily, Tuning};
use crate::ceilings::Ceilings;

/// What an entry tunes: a kernel family's tile, or the host-placement transfer strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Subject {
    /// The tile of one kernel family.
    Kernel(TunedFamily),
    /// How the planes of a host-placement store reach the scan.
    Transfer,
}

impl Subject {
    /// `"transfer"` or the family's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Subject::Kernel(f) => f.as_str(),
            Subject::Transfer => "transfer",
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<Subject> for String {
    fn from(s: Subject) -> String {
        s.as_str().to_string()
    }
}

impl TryFrom<String> for Subject {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        if name == "transfer" {
            return Ok(Subject::Transfer);
        }
        TunedFamily::from_name(&name)
            .map(Subject::Kernel)
            .ok_or_else(|| {
                let names: Vec<&str> = TunedFamily::ALL.iter().map(|f| f.as_str()).collect();
                format!(
                    "unknown subject {name:?}; allowed: transfer, {}",
                    names.join(", ")
                )
            })
    }
}

/// The key of one entry: subject, shape, placement of the memory read, context bucket
/// (`ceil(log2(tokens))`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EntryKey {
    pub subject: Subject,
    pub head_dim: usize,
    pub group: usize,
    pub placement: Placement,
    pub context_bucket: u32,
}

impl fmt::Display for EntryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} D={} G={} {} 2^{}",
            self.subject,
            self.head_dim,
            self.group,
            self.placement.as_str(),
            self.context_bucket
        )
    }
}

/// One candidate's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// A kernel tile.
    Tile(Tile),
    /// A transfer strategy.
    Transfer(Transfer),
}

impl Variant {
    /// A short name carrying every parameter (`scan w16 t256`, `scan w16 t256 tc`, `gather l4 t256`,
    /// `select t256 i16 compact`, `select t512 i8 onepass`, `select t512 i8 onepass fused`, `select t512 i8 onepass peaks`, `select t512 i8 onepass fused peaks`, `select t512 i8 onepass peaks scan`, `rerank t256 v16`, `rerank t512 mb`, `transfer fused`);
    /// candidates of one entry have distinct names.
    pub fn name(&self) -> String {
        match *self {
            Variant::Tile(Tile::Scan {
                tile_words,
                threads,
                tensor_cores,
            }) => format!(
                "scan w{tile_words} t{threads}{}",
                if tensor_cores { " tc" } else { "" }
            ),
            Variant::Tile(Tile::Gather {
                loads_in_flight,
                threads,
            }) => format!("gather l{loads_in_flight} t{threads}"),
            Variant::Tile(Tile::Threads(t)) => format!("threads t{t}"),
            Variant::Tile(
                tile @ Tile::Select {
                    threads,
                    items_per_thread,
                    ..
                },
            ) => format!(
                "select t{threads} i{items_per_thread}{}",
                match tile.select_algorithm() {
                    Some(SelectAlgorithm::Radix) => "",
                    Some(SelectAlgorithm::Compact) => " compact",
                    Some(SelectAlgorithm::Onepass) => " onepass",
                    Some(SelectAlgorithm::Fused) => " onepass fused",
                    Some(SelectAlgorithm::Peaks) => " onepass peaks",
                    Some(SelectAlgorithm::PeaksHead) => " onepass fused peaks",
                    Some(SelectAlgorithm::ScanPeaks) => " onepass peaks scan",
                    Some(SelectAlgorithm::ScanPeaksHead) => " onepass fused peaks scan",
                    Some(SelectAlgorithm::Cluster) => " cluster",
                    Some(SelectAlgorithm::ScanPeaksCluster) => " cluster scan",
                    Some(SelectAlgorithm::Resident) => " resident",
                    None => " conflicting flags",
                }
            ),
            Variant::Tile(Tile::Attention {
                threads,
                rows_per_warp,
                splits,
            }) => match splits {
                1 => format!("attention t{threads} r{rows_per_warp}"),
                s => format!("attention t{threads} r{rows_per_warp} s{s}"),
            },
            Variant::Tile(Tile::Rerank {
                threads,
                vector_loads,
                multiblock,
                decode_table,
            }) => format!(
                "rerank t{threads}{}{}{}",
                if vector_loads { " v16" } else { "" },
                if multiblock { " mb" } else { "" },
                if decode_table { " dt" } else { "" }
            ),
            Variant::Transfer(t) => format!("transfer {}", t.as_str()),
        }
    }
}

/// What became of a candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Outcome {
    /// Verified, then timed.
    Timed {
        /// Median of the timed runs, in milliseconds.
        median_ms: f64,
        /// First and third quartiles, in milliseconds.
        p25_ms: f64,
        p75_ms: f64,
        /// Timed runs.
        samples: usize,
        /// Achieved rate over the entry's bytes, in GB/s, where the entry has bytes.
        gbps: Option<f64>,
    },
    /// Failed to build, failed to run, or gave a wrong answer: never a winner.
    Disqualified { reason: String },
}

impl Outcome {
    /// The median time of a timed candidate.
    pub fn median_ms(&self) -> Option<f64> {
        match self {
            Outcome::Timed { median_ms, .. } => Some(*median_ms),
            Outcome::Disqualified { .. } => None,
        }
    }
}

/// One candidate of an entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CandidateRecord {
    pub name: String,
    pub variant: Variant,
    pub outcome: Outcome,
}

/// The chosen candidate of an entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Winner {
    pub name: String,
    pub variant: Variant,
    pub median_ms: f64,
    /// The fastest candidate by median (the winner when nothing simpler is within noise).
    pub fastest: String,
    /// Relative noise band: candidates within `fastest × (1 + noise_band)` are ties.
    pub noise_band: f64,
    /// Every candidate within the band, the winner included: the simplest of them wins.
    pub within_noise: Vec<String>,
}

/// Every candidate of one key and its winner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EntryRecord {
    pub key: EntryKey,
    /// Tokens of the context the candidates were timed at.
    pub tokens: usize,
    /// Bytes one run of a candidate moves (for GB/s), where it is defined.
    pub bytes: Option<u64>,
    /// The ceiling the candidates are judged against, in GB/s, and its name.
    pub ceiling: Option<(String, f64)>,
    pub candidates: Vec<CandidateRecord>,
    /// `None` when every candidate was disqualified.
    pub winner: Option<Winner>,
}

/// A failure to read or write a record, naming the file.
#[derive(Debug, Error)]
pub enum RecordError {
    #[error("cannot {action} the tuning record {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the tuning record {path} is not valid JSON of a record: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("the tuning record {path} is refused: {reason}")]
    Mismatch { path: PathBuf, reason: MetaMismatch },
}

/// What `autotune` measured on one GPU model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuningRecord {
    pub meta: RecordMeta,
    /// The ceilings measured in the latest run.
    pub ceilings: Option<Ceilings>,
    /// Sorted by key, one per key.
    pub entries: Vec<EntryRecord>,
}

impl TuningRecord {
    /// An empty record with header `meta`.
    pub fn new(meta: RecordMeta) -> Self {
        TuningRecord {
            meta,
            ceilings: None,
            entries: Vec::new(),
        }
    }

    /// The entry of `key`.
    pub fn entry(&self, key: &EntryKey) -> Option<&EntryRecord> {
        self.entries
            .binary_search_by(|e| e.key.cmp(key))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// Adds `entry`, replacing the one of its key.
    pub fn insert(&mut self, entry: EntryRecord) {
        match self.entries.binary_search_by(|e| e.key.cmp(&entry.key)) {
            Ok(i) => self.entries[i] = entry,
            Err(i) => self.entries.insert(i, entry),
        }
    }

    /// Merges a newer run into this record: its entries replace those of the same key, the
    /// others stay; its ceilings replace these. Refused, leaving this record as it was, when
    /// the headers differ in anything (the candidate set included).
    pub fn merge(&mut self, newer: TuningRecord) -> Result<(), MetaMismatch> {
        self.meta.check(&newer.meta, MetaCheck::Full)?;
        if newer.ceilings.is_some() {
            self.ceilings = newer.ceilings;
        }
        for entry in newer.entries {
            self.insert(entry);
        }
        Ok(())
    }

    /// The winner of the entry nearest to `key` in context bucket among those of its subject,
    /// shape and placement (a tie goes to the larger context, whose tile holds more tokens).
    fn nearest_winner(&self, mut key: EntryKey) -> Option<&Winner> {
        let wanted = key.context_bucket;
        key.context_bucket = 0;
        let start = self.entries.partition_point(|e| e.key < key);
        self.entries[start..]
            .iter()
            .take_while(|e| {
                EntryKey {
                    context_bucket: 0,
                    ..e.key
                } == key
            })
            .filter_map(|e| e.winner.as_ref().map(|w| (e.key.context_bucket, w)))
            .min_by_key(|(bucket, _)| (bucket.abs_diff(wanted), u32::MAX - bucket))
            .map(|(_, w)| w)
    }

    /// Parses a record; `path` names it in errors.
    pub fn from_json(text: &str, path: &Path) -> Result<Self, RecordError> {
        let mut record: TuningRecord =
            serde_json::from_str(text).map_err(|source| RecordError::Parse {
                path: path.to_path_buf(),
                source,
            })?;
        // A hand-edited file may be out of order; lookups bisect.
        record.entries.sort_by_key(|e| e.key);
        record
            .entries
            .dedup_by(|later, earlier| later.key == earlier.key);
        Ok(record)
    }

    /// Reads the record at `path`.
    pub fn read(path: &Path) -> Result<Self, RecordError> {
        let text = std::fs::read_to_string(path).map_err(|source| RecordError::Io {
            action: "read",
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_json(&text, path)
    }

    /// Writes the record to `path` (creating its directory), through a temporary file renamed
    /// into place so that a reader never sees half a record.
    pub fn write(&self, path: &Path) -> Result<(), RecordError> {
        let io = |action: &'static str| {
            move |source| RecordError::Io {
                action,
                path: path.to_path_buf(),
                source,
            }
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io("create the directory of"))?;
        }
        let text = serde_json::to_string_pretty(self).expect("a record serialises");
        let tmp = path.with_extension(format!("json.tmp{}", std::process::id()));
        std::fs::write(&tmp, text + "\n").map_err(io("write"))?;
        std::fs::rename(&tmp, path).map_err(io("replace"))
    }
}

impl Tuning for TuningRecord {
    fn tile(&self, key: &TuneKey) -> Option<Tile> {
        let key = EntryKey {
            subject: Subject::Kernel(key.family),
            head_dim: key.head_dim,
            group: key.group,
            placement: key.placement,
            context_bucket: key.context_bucket,
        };
        match self.nearest_winner(key)?.variant {
            Variant::Tile(tile) => Some(tile),
            Variant::Transfer(_) => None,
        }
    }

    fn transfer(&self, head_dim: usize, group: usize, context_bucket: u32) -> Option<Transfer> {
        let key = EntryKey {
            subject: Subject::Transfer,
            head_dim,
            group,
            placement: Placement::Host,
            context_bucket,
        };
        match self.nearest_winner(key)?.variant {
            Variant::Transfer(t) => Some(t),
            Variant::Tile(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> RecordMeta {
        RecordMeta::test_header()
    }

    fn entry(subject: Subject, placement: Placement, bucket: u32, variant: Variant) -> EntryRecord {
        EntryRecord {
            key: EntryKey {
                subject,
                head_dim: 128,
                group: 4,
                placement,
                context_bucket: bucket,
            },
            tokens: 1 << bucket,
            bytes: Some(1000),
            ceiling: Some(("pinned copy".into(), 50.0)),
            candidates: vec![CandidateRecord {
                name: variant.name(),
                variant,
                outcome: Outcome::Timed {
                    median_ms: 1.0,
                    p25_ms: 0.9,
                    p75_ms: 1.1,
                    samples: 10,
                    gbps: Some(1e-3),
                },
            }],
            winner: Some(Winner {
                name: variant.name(),
                variant,
                median_ms: 1.0,
                fastest: variant.name(),
                noise_band: 0.02,
                within_noise: vec![variant.name()],
            }),
        }
    }

    fn scan(tile_words: usize, threads: usize) -> Variant {
        Variant::Tile(Tile::Scan {
            tile_words,
            threads,
            tensor_cores: false,
        })
    }

    fn key(bucket: u32) -> TuneKey {
        TuneKey {
            family: TunedFamily::Scan,
            head_dim: 128,
            group: 4,
            placement: Placement::Hbm,
            context_bucket: bucket,
        }
    }

    fn record() -> TuningRecord {
        let mut r = TuningRecord::new(meta());
        r.insert(entry(
            Subject::Kernel(TunedFamily::Scan),
            Placement::Hbm,
            15,
            scan(8, 128),
        ));
        r.insert(entry(
            Subject::Kernel(TunedFamily::Scan),
            Placement::Hbm,
            20,
            scan(32, 512),
        ));
        r.insert(entry(
            Subject::Transfer,
            Placement::Host,
            17,
            Variant::Transfer(Transfer::CopyKernel),
        ));
        r
    }

    #[test]
    fn lookups_take_the_nearest_bucket_of_the_same_key() {
        let r = record();
        let tile = |b| r.tile(&key(b));
        assert_eq!(
            tile(15),
            Some(Tile::Scan {
                tile_words: 8,
                threads: 128,
                tensor_cores: false,
            })
        );
        assert_eq!(
            tile(16),
            Some(Tile::Scan {
                tile_words: 8,
                threads: 128,
                tensor_cores: false,
            })
        );
        assert_eq!(
            tile(19),
            Some(Tile::Scan {
                tile_words: 32,
                threads: 512,
                tensor_cores: false,
            })
        );
        assert_eq!(
            tile(30),
            Some(Tile::Scan {
                tile_words: 32,
                threads: 512,
                tensor_cores: false,
            })
        );
        // Another shape or placement has no entry.
        assert_eq!(
            r.tile(&TuneKey {
                group: 8,
                ..key(15)
            }),
            None
        );
        assert_eq!(
            r.tile(&TuneKey {
                placement: Placement::Host,
                ..key(15)
            }),
            None
        );
        assert_eq!(r.transfer(128, 4, 20), Some(Transfer::CopyKernel));
        assert_eq!(r.transfer(64, 4, 20), None);
    }

    #[test]
    fn a_tie_in_distance_goes_to_the_larger_context() {
        let mut r = TuningRecord::new(meta());
        r.insert(entry(
            Subject::Kernel(TunedFamily::Scan),
            Placement::Hbm,
            16,
            scan(8, 128),
        ));
        r.insert(entry(
            Subject::Kernel(TunedFamily::Scan),
            Placement::Hbm,
            18,
            scan(32, 512),
        ));
        assert_eq!(
            r.tile(&key(17)),
            Some(Tile::Scan {
                tile_words: 32,
                threads: 512,
                tensor_cores: false,
            })
        );
    }

    #[test]
    fn json_round_trips_and_names_subjects() {
        let r = record();
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains("\"subject\":\"transfer\""), "{text}");
        assert!(text.contains("\"copy-kernel\""), "{text}");
        let back = TuningRecord::from_json(&text, Path::new("x.json")).unwrap();
        assert_eq!(back, r);
        let bad = text.replace("\"subject\":\"transfer\"", "\"subject\":\"teleport\"");
        let err = TuningRecord::from_json(&bad, Path::new("x.json")).unwrap_err();
        assert!(err.to_string().contains("teleport"), "{err}");
    }

    #[test]
    fn merge_replaces_entries_of_the_same_key_and_keeps_the_rest() {
        let mut old = record();
        let mut newer = TuningRecord::new(meta());
        newer.insert(entry(
            Subject::Kernel(TunedFamily::Scan),
            Placement::Hbm,
            15,
            scan(16, 256),
        ));
        old.merge(newer).unwrap();
        assert_eq!(old.entries.len(), 3);
        assert_eq!(
            old.tile(&key(15)),
            Some(Tile::Scan {
                tile_words: 16,
                threads: 256,
                tensor_cores: false,
            })
        );
        assert_eq!(
            old.tile(&key(20)),
            Some(Tile::Scan {
                tile_words: 32,
                threads: 512,
                tensor_cores: false,
            })
        );
    }

    #[test]
    fn merge_refuses_another_header_and_changes_nothing() {
        let mut old = record();
        let before = old.clone();
        let mut newer = TuningRecord::new(RecordMeta {
            driver: "12.8".into(),
            ..meta()
        });
        newer.insert(entry(
            Subject::Kernel(TunedFamily::Scan),
            Placement::Hbm,
            15,
            scan(16, 256),
        ));
        let err = old.merge(newer).unwrap_err();
        assert!(matches!(err, MetaMismatch::Driver { .. }), "{err}");
        assert_eq!(old, before);
    }

    #[test]
    fn write_then_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/nvidia-h200.json");
        record().write(&path).unwrap();
        assert_eq!(TuningRecord::read(&path).unwrap(), record());
        let missing = TuningRecord::read(&dir.path().join("none.json")).unwrap_err();
        assert!(matches!(missing, RecordError::Io { .. }), "{missing}");
    }
}
