//! The header of a record: what it was measured on and against which candidate set, and the
//! typed reasons a record is refused.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::gpu::DeviceInfo;

/// What a record was measured on. Two records merge, and a runtime uses a record, only when
/// their headers agree (see [`RecordMeta::check`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordMeta {
    /// The GPU model's name as the driver reports it; records are keyed by model, never by
    /// device index.
    pub gpu: String,
    /// `"major.minor"`.
    pub compute_capability: String,
    /// Streaming multiprocessors (two boards of one name may differ).
    pub multiprocessors: i32,
    /// The driver's CUDA version, `"major.minor"`.
    pub driver: String,
    /// The NVRTC version that compiled the candidates, `"major.minor"`.
    pub nvrtc: String,
    /// The fathom version that generated the candidates' code.
    pub project_version: String,
    /// sha256 (hex) of the sorted names of the whole candidate grid; empty where unknown (the
    /// runtime does not enumerate candidates).
    pub candidate_checksum: String,
}

/// How much of the header must agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaCheck {
    /// Everything, the candidate set included: merging a new run into a record.
    Full,
    /// Everything but the candidate set: a runtime reading winners, whose tiles stay valid
    /// when the tuner's grid changes.
    Runtime,
}

/// Why a record does not fit: the first field of the header that differs.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum MetaMismatch {
    #[error("the record is for the GPU {recorded:?}, this is a {current:?}")]
    Gpu { recorded: String, current: String },
    #[error("the record is for compute capability {recorded}, this GPU has {current}")]
    ComputeCapability { recorded: String, current: String },
    #[error("the record is for {recorded} multiprocessors, this GPU has {current}")]
    Multiprocessors { recorded: i32, current: i32 },
    #[error("the record was measured with driver CUDA {recorded}, this driver is CUDA {current}")]
    Driver { recorded: String, current: String },
    #[error("the record was measured with NVRTC {recorded}, this process loads NVRTC {current}")]
    Nvrtc { recorded: String, current: String },
    #[error("the record was measured by fathom {recorded}, this is fathom {current}")]
    ProjectVersion { recorded: String, current: String },
    #[error(
        "the record's candidate set (checksum {recorded}) differs from this tuner's ({current}); \
         delete the record or tune into a new one"
    )]
    CandidateSet { recorded: String, current: String },
}

impl RecordMeta {
    /// The header of the current process on `device`, with `nvrtc` (`"major.minor"`, or
    /// `"unknown"`) and a candidate checksum (empty for the runtime).
    pub fn current(device: &DeviceInfo, nvrtc: String, candidate_checksum: String) -> Self {
        RecordMeta {
            gpu: device.name.clone(),
            compute_capability: device.compute_capability_text(),
            multiprocessors: device.multiprocessors,
            driver: device.driver_cuda(),
            nvrtc,
            project_version: env!("CARGO_PKG_VERSION").to_string(),
            candidate_checksum,
        }
    }

    /// Checks that a record with this header may be used where `current` holds; the reason of
    /// the first difference otherwise.
    pub fn check(&self, current: &RecordMeta, how: MetaCheck) -> Result<(), MetaMismatch> {
        let pair = |r: &String, c: &String| (r.clone(), c.clone());
        if self.gpu != current.gpu {
            let (recorded, current) = pair(&self.gpu, &current.gpu);
            return Err(MetaMismatch::Gpu { recorded, current });
        }
        if self.compute_capability != current.compute_capability {
            let (recorded, current) = pair(&self.compute_capability, &current.compute_capability);
            return Err(MetaMismatch::ComputeCapability { recorded, current });
        }
        if self.multiprocessors != current.multiprocessors {
            return Err(MetaMismatch::Multiprocessors {
                recorded: self.multiprocessors,
                current: current.multiprocessors,
            });
        }
        if self.driver != current.driver {
            let (recorded, current) = pair(&self.driver, &current.driver);
            return Err(MetaMismatch::Driver { recorded, current });
        }
        if self.nvrtc != current.nvrtc {
            let (recorded, current) = pair(&self.nvrtc, &current.nvrtc);
            return Err(MetaMismatch::Nvrtc { recorded, current });
        }
        if self.project_version != current.project_version {
            let (recorded, current) = pair(&self.project_version, &current.project_version);
            return Err(MetaMismatch::ProjectVersion { recorded, current });
        }
        if how == MetaCheck::Full && self.candidate_checksum != current.candidate_checksum {
            let (recorded, current) = pair(&self.candidate_checksum, &current.candidate_checksum);
            return Err(MetaMismatch::CandidateSet { recorded, current });
        }
        Ok(())
    }
}

impl RecordMeta {
    /// A header of an H200 (CUDA and NVRTC 13.0, fathom 0.1.0, candidate checksum `"abc"`)
    /// for the tests of this crate and of the tuner, which vary single fields of it.
    #[doc(hidden)]
    pub fn test_header() -> RecordMeta {
        RecordMeta {
            gpu: "NVIDIA H200".into(),
            compute_capability: "9.0".into(),
            multiprocessors: 132,
            driver: "13.0".into(),
            nvrtc: "13.0".into(),
            project_version: "0.1.0".into(),
            candidate_checksum: "abc".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> RecordMeta {
        RecordMeta::test_header()
    }

    #[test]
    fn every_field_is_a_typed_reason() {
        let base = meta();
        assert_eq!(base.check(&base, MetaCheck::Full), Ok(()));
        type Is = fn(&MetaMismatch) -> bool;
        let cases: Vec<(RecordMeta, Is)> = vec![
            (
                RecordMeta {
                    gpu: "NVIDIA A100".into(),
                    ..meta()
                },
                |e| matches!(e, MetaMismatch::Gpu { .. }),
            ),
            (
                RecordMeta {
                    compute_capability: "8.0".into(),
                    ..meta()
                },
                |e| matches!(e, MetaMismatch::ComputeCapability { .. }),
            ),
            (
                RecordMeta {
                    multiprocessors: 114,
                    ..meta()
                },
                |e| matches!(e, MetaMismatch::Multiprocessors { .. }),
            ),
            (
                RecordMeta {
                    driver: "12.8".into(),
                    ..meta()
                },
                |e| matches!(e, MetaMismatch::Driver { .. }),
            ),
            (
                RecordMeta {
                    nvrtc: "12.9".into(),
                    ..meta()
                },
                |e| matches!(e, MetaMismatch::Nvrtc { .. }),
            ),
            (
                RecordMeta {
                    project_version: "0.2.0".into(),
                    ..meta()
                },
                |e| matches!(e, MetaMismatch::ProjectVersion { .. }),
            ),
            (
                RecordMeta {
                    candidate_checksum: "def".into(),
                    ..meta()
                },
                |e| matches!(e, MetaMismatch::CandidateSet { .. }),
            ),
        ];
        for (other, is) in cases {
            let err = base.check(&other, MetaCheck::Full).unwrap_err();
            assert!(is(&err), "{err}");
            assert!(!err.to_string().is_empty());
        }
    }

    #[test]
    fn the_runtime_ignores_the_candidate_set() {
        let other = RecordMeta {
            candidate_checksum: String::new(),
            ..meta()
        };
        assert_eq!(meta().check(&other, MetaCheck::Runtime), Ok(()));
        assert!(meta().check(&other, MetaCheck::Full).is_err());
    }
}
