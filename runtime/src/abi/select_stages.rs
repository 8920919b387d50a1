//! The select family's launches from one set of buffers: its stages take overlapping subsets
//! of them, and the compacting variant's chunked stages also the candidates, so the step, the
//! kernel tests and the autotuner name the buffers once and take each stage's argument struct
//! from here.

use codegen::spec::select::SelectStage;
use codegen::spec::SelectAlgorithm;

use thiserror::Error;

use super::kernels::{
    select, select_compact, select_fused, select_onepass, select_peaks_head, select_scan_peaks,
    select_scan_peaks_head,
};
use crate::gpu::Arg;
use crate::launch::{DevicePtr, DevicePtrMut, KernelArgs};

/// Everything a selection reads and writes (`templates/ABI.md`, "The selection pipeline").
#[derive(Clone, Copy, Debug)]
pub struct SelectBuffers {
    /// `[B][H][G][ld_scores]` fp32.
    pub scores: DevicePtr<f32>,
    /// Row stride of `scores`, in floats.
    pub ld_scores: i32,
    /// `[B]` tokens per sequence.
    pub n_total: DevicePtr<i32>,
    /// `[B]` tokens the scan scored (scan-peaks variants).
    pub n_stored: DevicePtr<i32>,
    /// `[B][H][G][ld_peaks]` the largest key of every 32-token half the scan scored
    /// (scan-peaks variants; `ScanSpec::peaks`).
    pub peaks: DevicePtr<u32>,
    /// Row stride of `peaks`, in words.
    pub ld_peaks: i32,
    /// The run-time k.
    pub k: i32,
    /// `H`.
    pub num_kv_heads: i32,
    /// Blocks per query head of the chunked stages (`SelectPlan::chunks`; the one-read
    /// variant's `_final` takes it).
    pub chunks: i32,
    /// The radix state workspace.
    pub state: DevicePtrMut<u32>,
    /// The per-chunk counts workspace.
    pub chunk_counts: DevicePtrMut<u32>,
    /// The candidates (compacting and one-read variants; unread by the plain one).
    pub candidates: DevicePtrMut<[u32; 2]>,
    /// Each chunk's run of candidates (compacting variant).
    pub candidate_runs: DevicePtrMut<u32>,
    /// Per query head, the `_chunk` blocks that have finished (fused one-read variant): zero
    /// before the first launch, left zero by every launch.
    pub arrivals: DevicePtrMut<u32>,
    /// The union's workspace.
    pub scratch: DevicePtrMut<i32>,
    /// `[B*H*G][k+36]`.
    pub sel: DevicePtrMut<i32>,
    /// `[B*H*G][k+36]`.
    pub sel_pos: DevicePtrMut<i32>,
    /// `[B*H*G]`.
    pub sel_count: DevicePtrMut<i32>,
    /// `[B*H][G*k+36]`.
    pub uni: DevicePtrMut<i32>,
    /// `[B*H]`.
    pub uni_count: DevicePtrMut<i32>,
}

/// Buffers a select cannot read as they were given.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SelectArgsError {
    #[error(
        "the {algorithm:?} select reads a query head's scores in 16-byte loads from the row's \
         start: scores at {scores:#x} with ld_scores = {ld_scores} floats leave rows unaligned; \
         the buffer must be 16-byte aligned and ld_scores a multiple of 4 (pad each row to \
         {padded} floats)"
    )]
    MisalignedScores {
        algorithm: SelectAlgorithm,
        scores: u64,
        ld_scores: i32,
        padded: i64,
    },
}

/// The arguments of `stage` of the select of `algorithm`.
///
/// # Errors
/// [`SelectArgsError::MisalignedScores`] when `algorithm` reads whole 16-byte score rows (the
/// scan-peaks selects) and `b` does not lay them out so.
pub fn select_args(
    algorithm: SelectAlgorithm,
    stage: SelectStage,
    b: &SelectBuffers,
) -> Result<Vec<Arg>, SelectArgsError> {
    let aligned_rows = matches!(
        algorithm,
        SelectAlgorithm::ScanPeaks | SelectAlgorithm::ScanPeaksHead
    );
    let scores = b.scores.addr();
    if aligned_rows && (b.ld_scores % 4 != 0 || !scores.is_multiple_of(16)) {
        return Err(SelectArgsError::MisalignedScores {
            algorithm,
            scores,
            ld_scores: b.ld_scores,
            padded: (i64::from(b.ld_scores) + 3) / 4 * 4,
        });
    }
    Ok(stage_args(algorithm, stage, b))
}

fn stage_args(algorithm: SelectAlgorithm, stage: SelectStage, b: &SelectBuffers) -> Vec<Arg> {
    let pass = i32::from(stage.pass().unwrap_or(0));
    let compact = algorithm == SelectAlgorithm::Compact;
    // `_init`, `_pick` and `_union` have one signature in both variants (`runtime::abi`'s test
    // checks it), so both take them from the plain variant's structs.
    match (stage, compact) {
        (SelectStage::Init, _) => select::InitArgs {
            n_total: b.n_total,
            k: b.k,
            state: b.state,
            sel_count: b.sel_count,
            num_kv_heads: b.num_kv_heads,
        }
        .args(),
        (SelectStage::Pick(_), _) => select::PickArgs {
            state: b.state,
            pass,
        }
        .args(),
        (SelectStage::Union, _) => select::UnionArgs {
            sel: b.sel.as_const(),
            sel_count: b.sel_count.as_const(),
            sel_pos: b.sel_pos,
            uni: b.uni,
            uni_count: b.uni_count,
            scratch: b.scratch,
            k: b.k,
        }
        .args(),
        // The plain variant has no `_filter` stage (`SelectStage::order(false)`).
        (SelectStage::Hist(_) | SelectStage::Filter(_), false) => select::HistArgs {
            scores: b.scores,
            ld_scores: b.ld_scores,
            n_total: b.n_total,
            state: b.state,
            pass,
            num_kv_heads: b.num_kv_heads,
        }
        .args(),
        (SelectStage::Count, false) => select::CountArgs {
            scores: b.scores,
            ld_scores: b.ld_scores,
            n_total: b.n_total,
            state: b.state.as_const(),
            chunk_counts: b.chunk_counts,
            num_kv_heads: b.num_kv_heads,
        }
        .args(),
        (SelectStage::Write, false) => select::WriteArgs {
            scores: b.scores,
            ld_scores: b.ld_scores,
            n_total: b.n_total,
            state: b.state.as_const(),
            chunk_counts: b.chunk_counts.as_const(),
            sel: b.sel,
            k: b.k,
            num_kv_heads: b.num_kv_heads,
        }
        .args(),
        (SelectStage::Chunk, _) if algorithm == SelectAlgorithm::Fused => select_fused::ChunkArgs {
            scores: b.scores,
            ld_scores: b.ld_scores,
            n_total: b.n_total,
            k: b.k,
            candidates: b.candidates,
            chunk_counts: b.chunk_counts,
            arrivals: b.arrivals,
            sel: b.sel,
            sel_count: b.sel_count,
            num_kv_heads: b.num_kv_heads,
        }
        .args(),
        // The cluster and resident selects' `_chunk` has the one-block peaks select's parameters.
        (SelectStage::Chunk, _)
            if matches!(
                algorithm,
                SelectAlgorithm::PeaksHead | SelectAlgorithm::Cluster | SelectAlgorithm::Resident
            ) =>
        {
            select_peaks_head::ChunkArgs {
                scores: b.scores,
                ld_scores: b.ld_scores,
                n_total: b.n_total,
                k: b.k,
                sel: b.sel,
                sel_count: b.sel_count,
                num_kv_heads: b.num_kv_heads,
            }
            .args()
        }
        (SelectStage::Chunk, _) if algorithm == SelectAlgorithm::ScanPeaks => {
            select_scan_peaks::ChunkArgs {
                scores: b.scores,
                ld_scores: b.ld_scores,
                n_total: b.n_total,
                n_stored: b.n_stored,
                peaks: b.peaks,
                ld_peaks: b.ld_peaks,
                k: b.k,
                candidates: b.candidates,
                chunk_counts: b.chunk_counts,
                num_kv_heads: b.num_kv_heads,
            }
            .args()
        }
        // The scan-peaks cluster select's `_chunk` has the one-block scan-peaks select's.
        (SelectStage::Chunk, _)
            if matches!(
                algorithm,
                SelectAlgorithm::ScanPeaksHead | SelectAlgorithm::ScanPeaksCluster
            ) =>
        {
            select_scan_peaks_head::ChunkArgs {
                scores: b.scores,
                ld_scores: b.ld_scores,
                n_total: b.n_total,
                n_stored: b.n_stored,
                peaks: b.peaks,
                ld_peaks: b.ld_peaks,
                k: b.k,
                sel: b.sel,
                sel_count: b.sel_count,
                num_kv_heads: b.num_kv_heads,
            }
            .args()
        }
        (SelectStage::Chunk, _) => select_onepass::ChunkArgs {
            scores: b.scores,
            ld_scores: b.ld_scores,
            n_total: b.n_total,
            k: b.k,
            candidates: b.candidates,
            chunk_counts: b.chunk_counts,
            num_kv_heads: b.num_kv_heads,
        }
        .args(),
        (SelectStage::Final, _) => select_onepass::FinalArgs {
            candidates: b.candidates.as_const(),
            chunk_counts: b.chunk_counts.as_const(),
            chunks: b.chunks,
            n_total: b.n_total,
            sel: b.sel,
            sel_count: b.sel_count,
            k: b.k,
            num_kv_heads: b.num_kv_heads,
        }
        .args(),
        (SelectStage::Hist(_), true) => select_compact::HistArgs {
            scores: b.scores,
            ld_scores: b.ld_scores,
            n_total: b.n_total,
            state: b.state,
            candidates: b.candidates.as_const(),
            candidate_runs: b.candidate_runs.as_const(),
            pass,
            num_kv_heads: b.num_kv_heads,
        }
        .args(),
        (SelectStage::Filter(_), true) => select_compact::FilterArgs {
            scores: b.scores,
            ld_scores: b.ld_scores,
            n_total: b.n_total,
            state: b.state,
            candidates: b.candidates,
            candidate_runs: b.candidate_runs,
            pass,
            num_kv_heads: b.num_kv_heads,
        }
        .args(),
        (SelectStage::Count, true) => select_compact::CountArgs {
            scores: b.scores,
            ld_scores: b.ld_scores,
            n_total: b.n_total,
            state: b.state.as_const(),
            candidates: b.candidates.as_const(),
            candidate_runs: b.candidate_runs.as_const(),
            chunk_counts: b.chunk_counts,
            num_kv_heads: b.num_kv_heads,
        }
        .args(),
        (SelectStage::Write, true) => select_compact::WriteArgs {
            scores: b.scores,
            ld_scores: b.ld_scores,
            n_total: b.n_total,
            state: b.state.as_const(),
            candidates: b.candidates.as_const(),
            candidate_runs: b.candidate_runs.as_const(),
            chunk_counts: b.chunk_counts.as_const(),
            sel: b.sel,
            k: b.k,
            num_kv_heads: b.num_kv_heads,
        }
        .args(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codegen::spec::SelectSpec;

    /// The argument lists equal `SelectSpec::params`, codegen's description of each stage's
    /// list, position by position, in every variant.
    #[test]
    fn every_stage_matches_the_spec_s_parameter_list() {
        use codegen::spec::select::SelectParam as P;
        let b = SelectBuffers {
            // Aligned as the scan-peaks selects ask (16 bytes, rows of a multiple of 4).
            scores: DevicePtr::from_addr(64),
            ld_scores: 28,
            n_total: DevicePtr::from_addr(3),
            n_stored: DevicePtr::from_addr(19),
            peaks: DevicePtr::from_addr(20),
            ld_peaks: 21,
            k: 4,
            num_kv_heads: 6,
            chunks: 17,
            state: DevicePtrMut::from_addr(7),
            chunk_counts: DevicePtrMut::from_addr(8),
            candidates: DevicePtrMut::from_addr(9),
            candidate_runs: DevicePtrMut::from_addr(10),
            scratch: DevicePtrMut::from_addr(11),
            sel: DevicePtrMut::from_addr(12),
            sel_pos: DevicePtrMut::from_addr(13),
            sel_count: DevicePtrMut::from_addr(14),
            uni: DevicePtrMut::from_addr(15),
            uni_count: DevicePtrMut::from_addr(16),
            arrivals: DevicePtrMut::from_addr(18),
        };
        for algorithm in SelectAlgorithm::ALL {
            let spec = SelectSpec {
                group: 4,
                k_max: 2048,
                threads: 256,
                items_per_thread: 16,
                algorithm,
                coarse_floor: false,
                owned_tiles: false,
            };
            for &stage in spec.stages() {
                let pass = u64::from(stage.pass().unwrap_or(0));
                let want: Vec<u64> = spec
                    .params(stage)
                    .iter()
                    .map(|p| match p {
                        P::Scores => 64,
                        P::LdScores => 28,
                        P::NTotal => 3,
                        P::K => 4,
                        P::Pass => pass,
                        P::Chunks => 17,
                        P::NumKvHeads => 6,
                        P::State => 7,
                        P::ChunkCounts => 8,
                        P::Candidates => 9,
                        P::CandidateRuns => 10,
                        P::Scratch => 11,
                        P::Sel => 12,
                        P::SelPos => 13,
                        P::SelCount => 14,
                        P::Uni => 15,
                        P::UniCount => 16,
                        P::Arrivals => 18,
                        P::NStored => 19,
                        P::Peaks => 20,
                        P::LdPeaks => 21,
                    })
                    .collect();
                let got: Vec<u64> = select_args(algorithm, stage, &b)
                    .expect("aligned rows")
                    .into_iter()
                    .map(|a| match a {
                        Arg::Ptr(v) | Arg::U64(v) => v,
                        Arg::I32(v) => v as u64,
                        other => panic!("{stage:?}: unexpected {other:?}"),
                    })
                    .collect();
                assert_eq!(got, want, "{algorithm:?}, {stage:?}");
            }
        }
    }

    /// The selects that read whole 16-byte score rows refuse rows that are not; the others,
    /// whose loads start at each row's aligned start, take any stride.
    #[test]
    fn misaligned_score_rows_are_refused_by_the_selects_that_need_them() {
        let b = |scores: u64, ld_scores: i32| SelectBuffers {
            scores: DevicePtr::from_addr(scores),
            ld_scores,
            n_total: DevicePtr::from_addr(0),
            n_stored: DevicePtr::from_addr(0),
            peaks: DevicePtr::from_addr(0),
            ld_peaks: 1,
            k: 1,
            num_kv_heads: 1,
            chunks: 1,
            state: DevicePtrMut::from_addr(0),
            chunk_counts: DevicePtrMut::from_addr(0),
            candidates: DevicePtrMut::from_addr(0),
            candidate_runs: DevicePtrMut::from_addr(0),
            scratch: DevicePtrMut::from_addr(0),
            sel: DevicePtrMut::from_addr(0),
            sel_pos: DevicePtrMut::from_addr(0),
            sel_count: DevicePtrMut::from_addr(0),
            uni: DevicePtrMut::from_addr(0),
            uni_count: DevicePtrMut::from_addr(0),
            arrivals: DevicePtrMut::from_addr(0),
        };
        let chunk = SelectStage::Chunk;
        for algorithm in [SelectAlgorithm::ScanPeaks, SelectAlgorithm::ScanPeaksHead] {
            assert!(select_args(algorithm, chunk, &b(256, 1024)).is_ok());
            let err = select_args(algorithm, chunk, &b(256, 1023)).unwrap_err();
            assert_eq!(
                err,
                SelectArgsError::MisalignedScores {
                    algorithm,
                    scores: 256,
                    ld_scores: 1023,
                    padded: 1024,
                }
            );
            let message = err.to_string();
            assert!(message.contains("ld_scores = 1023"), "{message}");
            assert!(message.contains("pad each row to 1024 floats"), "{message}");
            assert!(select_args(algorithm, chunk, &b(260, 1024)).is_err());
        }
        for algorithm in [SelectAlgorithm::Onepass, SelectAlgorithm::Peaks] {
            assert!(select_args(algorithm, chunk, &b(260, 1023)).is_ok());
        }
    }
}
