//! What is tuned: the cases (subject, shape, placement, context) of a run and the candidate
//! variants of each, drawn from one fixed grid and kept where the family's spec validates.
//!
//! # The grid and what is left out of it
//!
//! Every family's spec accepts any multiple of 32 up to 1,024 threads, and the select spec any
//! 1 to 32 items per thread: 1,024 select candidates alone per case, too many to time. The grid
//! keeps, with these reasons:
//!
//! - threads: powers of two. Every kernel strides or deals its work over whole warps, so its
//!   time follows warps per block smoothly; the powers of two sample that at factor-2 steps, as
//!   the scan and gather grids do. 32 threads (one warp per block) is left out of the families
//!   with large grids (select, oracle, landmark, fetch, attention): an SM holds at most 32
//!   blocks, so one-warp blocks cap it at half its warps, which a bandwidth-bound kernel cannot
//!   be faster with. The plan keeps 32: one warp finds the water line whatever the block size.
//! - select: items per thread in powers of two (the chunk, `threads × items`, in factor-2
//!   steps), and chunks of at least [`SELECT_MIN_CHUNK`] tokens: every block of the chunked
//!   passes clears and flushes a 2,048-bin histogram, more work than a smaller chunk's scores.
//!   Every select tile is tried as the plain variant and as the compacting one
//!   ([`SELECT_ALGORITHMS`]): which is faster depends on the chunk (its later passes launch the
//!   same chunked grids over far fewer tokens), so it is a tile parameter, not a separate case.
//!   The one-read variant is a third, in the default grid since it ran on the H200 (2026-12-02:
//!   exact in every case, 3x faster than the compacting one at 1M, a little faster at 32k).
//! - attention: rows per warp 1, 2, 4, 8 (the register arrays that keep rows in flight grow
//!   with it; the powers of two sample it).
//! - ParisKV (`pariskv_vote`, `pariskv_topc`, `pariskv_rerank`): threads 64..1024 in powers of
//!   two, as the row families (the vote and the top-C have large grids; the rerank's `_score`
//!   too, and its `_select` is one block per KV head, where more threads only help, so 1,024
//!   is in). The rerank's every thread count is tried with the plain `_score` and the
//!   whole-row one ([`RERANK_VECTOR_LOADS`], `PariskvRerankSpec::vector_loads`), the plain
//!   one winning ties. The many-block top-k (`PariskvRerankSpec::select`, `multiblock`) is tried
//!   beside each only when asked for ([`OptIn::pariskv_select_multiblock`],
//!   `--opt-in pariskv-select-multiblock`): its kernels have not yet run on a GPU.
//!   `pariskv_query` has no tile (one thread per centroid) and `pariskv_index` runs
//!   when keys enter the store, not in a step: neither is tuned.

use codegen::spec::pariskv::RerankSelect;
use codegen::spec::{
    AttentionSpec, FetchSpec, GatherSpec, KernelSpec, LandmarkSpec, OracleSpec, PariskvRerankSpec,
    PariskvTopcSpec, PariskvVoteSpec, Placement, PlanMethod, PlanSpec, ScanSpec, SelectAlgorithm,
    SelectSpec,
};
use reference::select::paper_k;
use runtime::step::{DecoderConfig, Transfer};
use runtime::tuning::context_bucket;
use runtime::tuning::{EntryKey, Subject, Variant};
use runtime::tuning::{Tile, TunedFamily};
use sha2::{Digest, Sha256};

/// Tokens per block and words per plane per segment of every store the tuner builds: the
/// runtime's defaults (`DecoderConfig`), which the recorded tiles are valid for.
pub const BLOCK: usize = 64;
/// See [`BLOCK`].
pub const SEGMENT_WORDS: usize = 512;

/// The scan's words per tile tried.
pub const SCAN_TILE_WORDS: [usize; 6] = [4, 8, 16, 32, 64, 128];
/// Threads per block tried for the scan (with the tile, they set tokens per thread).
pub const SCAN_THREADS: [usize; 5] = [64, 128, 256, 512, 1024];
/// The gather's 16-byte loads in flight per thread tried.
pub const GATHER_LOADS: [usize; 4] = [1, 2, 4, 8];
/// Threads per block tried for the gather.
pub const GATHER_THREADS: [usize; 3] = [128, 256, 512];
/// Transfers tried. `memcpy` is left out: it reads the plan back to the host every step (the
/// runs are known only on the device) and cannot be captured in a graph, so it is never the
/// runtime's choice for a decode loop; `StepRequest::transfer` still selects it explicitly.
pub const TRANSFERS: [Transfer; 2] = [Transfer::Fused, Transfer::CopyKernel];
/// Threads per block tried for the plan (one block per KV head; see the module docs).
pub const PLAN_THREADS: [u32; 6] = [32, 64, 128, 256, 512, 1024];
/// Threads per block tried for the row families: oracle, landmark, fetch.
pub const ROW_THREADS: [u32; 5] = [64, 128, 256, 512, 1024];
/// Threads per block tried for the select kernels.
pub const SELECT_THREADS: [u32; 5] = [64, 128, 256, 512, 1024];
/// Scores per thread per chunk tried for the select kernels.
pub const SELECT_ITEMS: [u32; 6] = [1, 2, 4, 8, 16, 32];
/// The smallest select chunk (`threads × items`) tried, in tokens (see the module docs).
pub const SELECT_MIN_CHUNK: u32 = 1024;
/// The select variants tried for every tile: plain (five reads of the scores), compacting (two),
/// one-read.
pub const SELECT_ALGORITHMS: [SelectAlgorithm; 3] = [
    SelectAlgorithm::Radix,
    SelectAlgorithm::Compact,
    SelectAlgorithm::Onepass,
];

/// Candidates a run tries only when asked for (`--opt-in NAME`): variants whose kernels pass
/// their CPU tests but have not yet run on a GPU, so that a default run does not depend on
/// them. A run with an opt-in has its own candidate checksum ([`candidate_checksum`]), so its
/// record does not merge into one made without (write it to a scratch `--out`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OptIn {
    /// `pariskv-select-multiblock`: every rerank tile also with the many-block top-k.
    pub pariskv_select_multiblock: bool,
}

impl OptIn {
    /// The names `--opt-in` takes.
    pub const NAMES: [&'static str; 1] = ["pariskv-select-multiblock"];

    /// Opt-ins that have joined the default grid, with when: a script that still names one is
    /// told to drop it rather than that it is unknown.
    pub const GRADUATED: [(&'static str, &'static str); 1] = [(
        "select-onepass",
        "the one-read select is in the default grid since it ran on the H200 on 2026-12-02",
    )];

    /// The opt-ins named by `names`; an unknown name is refused with the known ones.
    pub fn parse(names: &[String]) -> Result<OptIn, String> {
        let mut opt_in = OptIn::default();
        for name in names {
            match name.as_str() {
                "pariskv-select-multiblock" => opt_in.pariskv_select_multiblock = true,
                other => {
                    if let Some((_, since)) = OptIn::GRADUATED.iter().find(|(n, _)| *n == other) {
                        return Err(format!(
                            "--opt-in `{other}` is gone: {since}; drop the flag"
                        ));
                    }
                    return Err(format!(
                        "unknown --opt-in `{other}`; known: {}",
                        OptIn::NAMES.join(", ")
                    ));
                }
            }
        }
        Ok(opt_in)
    }

    /// The select algorithms tried for every tile (no opt-in changes them now).
    pub fn select_algorithms(self) -> Vec<SelectAlgorithm> {
        SELECT_ALGORITHMS.to_vec()
    }

    /// The rerank top-k variants tried for every tile: one block per head, and many when asked.
    pub fn rerank_multiblock(self) -> Vec<bool> {
        if self.pariskv_select_multiblock {
            vec![false, true]
        } else {
            vec![false]
        }
    }
}
/// Threads per block tried for attention.
pub const ATTENTION_THREADS: [u32; 5] = [64, 128, 256, 512, 1024];
/// Rows each warp loads before it computes, tried for attention.
pub const ATTENTION_ROWS: [u32; 4] = [1, 2, 4, 8];
/// Threads per block tried for the ParisKV vote, top-C and rerank.
pub const PARISKV_THREADS: [u32; 5] = [64, 128, 256, 512, 1024];
/// The rerank `_score` variants tried for every thread count: one thread a candidate, or whole
/// rows in 16-byte loads (`PariskvRerankSpec::vector_loads`).
pub const RERANK_VECTOR_LOADS: [bool; 2] = [false, true];

/// The context lengths tuned by default: 32k, 128k and 1M tokens.
pub const CONTEXTS: [usize; 3] = [1 << 15, 1 << 17, 1 << 20];
/// The contexts of `--quick`.
pub const QUICK_CONTEXTS: [usize; 2] = [1 << 15, 1 << 17];

/// The `k` that select, fetch and attention are timed with at a context of `tokens`: the
/// paper's protocol ([`paper_k`]: 512 from 32k tokens on), which the presets' runs use.
pub fn bench_k(tokens: usize) -> usize {
    paper_k(tokens)
}

/// The select kernels' `k_max`: the decoder's default ([`DecoderConfig`]), which its select
/// spec carries.
pub fn bench_k_max() -> usize {
    DecoderConfig::default().k_max
}

/// One key to tune, with what the bench needs to build its inputs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Case {
    pub subject: Subject,
    pub head_dim: usize,
    pub group: usize,
    /// KV heads of the layer timed (the preset's): sets the grid size, not the key.
    pub kv_heads: usize,
    pub placement: Placement,
    pub tokens: usize,
    /// The opt-in candidates this run tries (not part of the key).
    pub opt_in: OptIn,
}

impl Case {
    /// The record key of this case.
    pub fn key(&self) -> EntryKey {
        EntryKey {
            subject: self.subject,
            head_dim: self.head_dim,
            group: self.group,
            placement: self.placement,
            context_bucket: context_bucket(self.tokens),
        }
    }
}

const fn kernel(family: TunedFamily) -> Subject {
    Subject::Kernel(family)
}

/// The subjects and placements tuned, each under the key the step looks it up by
/// (`runtime::step::launches`): the scan in both placements; where the store is in host
/// memory, the gather (the copy-kernel transfer) and the choice of transfer; the plan, select
/// and attention under HBM (they read only device memory); oracle, landmark and fetch in both
/// placements of the K/V rows they read.
///
/// In this order, which is the order of a run for each shape and context: the three
/// host-placement store subjects and the plan share one store and plan, and the transfer is
/// timed with the scan and gather tiles tuned before it; select, attention and fetch share one
/// set of scores and its selection; the row families of one placement share its K/V rows; the
/// ParisKV families share one index (built on the device from random keys), HBM first, then
/// the vote and rerank reading its rows from host memory (the top-C reads only the votes, in
/// device memory, so it is looked up under HBM only).
pub const SUBJECTS: [(Subject, Placement); 18] = [
    (kernel(TunedFamily::Scan), Placement::Hbm),
    (kernel(TunedFamily::Scan), Placement::Host),
    (kernel(TunedFamily::Gather), Placement::Host),
    (Subject::Transfer, Placement::Host),
    (kernel(TunedFamily::Plan), Placement::Hbm),
    (kernel(TunedFamily::Select), Placement::Hbm),
    (kernel(TunedFamily::Attention), Placement::Hbm),
    (kernel(TunedFamily::Oracle), Placement::Hbm),
    (kernel(TunedFamily::Landmark), Placement::Hbm),
    (kernel(TunedFamily::Fetch), Placement::Hbm),
    (kernel(TunedFamily::Oracle), Placement::Host),
    (kernel(TunedFamily::Landmark), Placement::Host),
    (kernel(TunedFamily::Fetch), Placement::Host),
    (kernel(TunedFamily::PariskvVote), Placement::Hbm),
    (kernel(TunedFamily::PariskvTopc), Placement::Hbm),
    (kernel(TunedFamily::PariskvRerank), Placement::Hbm),
    (kernel(TunedFamily::PariskvVote), Placement::Host),
    (kernel(TunedFamily::PariskvRerank), Placement::Host),
];

fn threads(list: &[u32]) -> Vec<Variant> {
    list.iter()
        .map(|&t| Variant::Tile(Tile::Threads(t)))
        .collect()
}

/// Every candidate of the default grid for `subject` in `placement`, before any shape is
/// applied.
pub fn grid(subject: Subject, placement: Placement) -> Vec<Variant> {
    grid_with(subject, placement, OptIn::default())
}

/// Every candidate of the grid for `subject` in `placement` with the candidates of `opt_in`.
pub fn grid_with(subject: Subject, placement: Placement, opt_in: OptIn) -> Vec<Variant> {
    let algorithms = opt_in.select_algorithms();
    match subject {
        Subject::Kernel(TunedFamily::Scan) => SCAN_TILE_WORDS
            .iter()
            .flat_map(|&tile_words| {
                SCAN_THREADS.iter().map(move |&threads| {
                    Variant::Tile(Tile::Scan {
                        tile_words,
                        threads,
                    })
                })
            })
            .collect(),
        Subject::Kernel(TunedFamily::Gather) => GATHER_LOADS
            .iter()
            .flat_map(|&loads_in_flight| {
                GATHER_THREADS.iter().map(move |&threads| {
                    Variant::Tile(Tile::Gather {
                        loads_in_flight,
                        threads,
                    })
                })
            })
            .collect(),
        Subject::Transfer if placement == Placement::Host => {
            TRANSFERS.iter().map(|&t| Variant::Transfer(t)).collect()
        }
        Subject::Transfer => Vec::new(),
        Subject::Kernel(TunedFamily::Plan) => threads(&PLAN_THREADS),
        Subject::Kernel(TunedFamily::Oracle | TunedFamily::Landmark | TunedFamily::Fetch) => {
            threads(&ROW_THREADS)
        }
        Subject::Kernel(TunedFamily::PariskvVote | TunedFamily::PariskvTopc) => {
            threads(&PARISKV_THREADS)
        }
        Subject::Kernel(TunedFamily::PariskvRerank) => {
            let multiblock = opt_in.rerank_multiblock();
            PARISKV_THREADS
                .iter()
                .flat_map(|&threads| {
                    let multiblock = multiblock.clone();
                    RERANK_VECTOR_LOADS.iter().flat_map(move |&vector_loads| {
                        multiblock.clone().into_iter().map(move |multiblock| {
                            Variant::Tile(Tile::Rerank {
                                threads,
                                vector_loads,
                                multiblock,
                            })
                        })
                    })
                })
                .collect()
        }
        Subject::Kernel(TunedFamily::Select) => SELECT_THREADS
            .iter()
            .flat_map(|&threads| {
                let algorithms = algorithms.clone();
                SELECT_ITEMS
                    .iter()
                    .filter(move |&&items| threads * items >= SELECT_MIN_CHUNK)
                    .flat_map(move |&items_per_thread| {
                        algorithms.clone().into_iter().map(move |algorithm| {
                            Variant::Tile(Tile::select(threads, items_per_thread, algorithm))
                        })
                    })
            })
            .collect(),
        Subject::Kernel(TunedFamily::Attention) => ATTENTION_THREADS
            .iter()
            .flat_map(|&threads| {
                ATTENTION_ROWS.iter().map(move |&rows_per_warp| {
                    Variant::Tile(Tile::Attention {
                        threads,
                        rows_per_warp,
                    })
                })
            })
            .collect(),
    }
}

/// The candidates of `case`: the grid's variants (with its opt-ins) whose spec validates for its
/// shape.
pub fn enumerate(case: &Case) -> Vec<Variant> {
    grid_with(case.subject, case.placement, case.opt_in)
        .into_iter()
        .filter(|v| match v {
            Variant::Transfer(_) => true,
            Variant::Tile(_) => tile_spec(case, v).is_ok_and(|s| s.validate().is_ok()),
        })
        .collect()
}

/// The kernels of every tile candidate of `cases`, each once (first appearance), so that a run can
/// compile them all in parallel before it times anything: the cases then find them loaded.
pub fn run_specs(cases: &[Case]) -> Vec<KernelSpec> {
    let mut seen = std::collections::HashSet::new();
    cases
        .iter()
        .flat_map(|case| {
            enumerate(case)
                .into_iter()
                .filter_map(move |v| tile_spec(case, &v).ok())
        })
        .filter(|spec| seen.insert(*spec))
        .collect()
}

/// The kernel spec a tile candidate of `case` builds (for select, the spec of all its stages;
/// for landmark, the spec whose `_scan` entry the step runs; for the ParisKV top-C and rerank,
/// the spec of both entry points); why there is none otherwise.
pub fn tile_spec(case: &Case, variant: &Variant) -> Result<KernelSpec, String> {
    let (d, g) = (case.head_dim, case.group);
    let (d32, g32) = (d as u32, g as u32);
    let mismatch = || {
        format!(
            "{} is not a candidate of {}",
            variant.name(),
            case.subject.as_str()
        )
    };
    let Variant::Tile(tile) = *variant else {
        return Err(mismatch());
    };
    let Subject::Kernel(family) = case.subject else {
        return Err(mismatch());
    };
    Ok(match (family, tile) {
        (
            TunedFamily::Scan,
            Tile::Scan {
                tile_words,
                threads,
            },
        ) => scan_spec(case, tile_words, threads).into(),
        (
            TunedFamily::Gather,
            Tile::Gather {
                loads_in_flight,
                threads,
            },
        ) => gather_spec(case, loads_in_flight, threads).into(),
        (TunedFamily::Plan, Tile::Threads(t)) => plan_spec(d, g, t as usize).into(),
        (TunedFamily::Oracle, Tile::Threads(t)) => {
            OracleSpec::new(d32, g32, t, case.placement).into()
        }
        (TunedFamily::Landmark, Tile::Threads(t)) => {
            LandmarkSpec::new(d32, g32, t, case.placement).into()
        }
        (TunedFamily::Fetch, Tile::Threads(t)) => {
            FetchSpec::new(d32, g32, t, case.placement).into()
        }
        (TunedFamily::PariskvVote, Tile::Threads(threads)) => PariskvVoteSpec {
            head_dim: d32,
            threads,
            placement: case.placement,
        }
        .into(),
        (TunedFamily::PariskvTopc, Tile::Threads(threads)) => PariskvTopcSpec {
            head_dim: d32,
            threads,
        }
        .into(),
        (TunedFamily::PariskvRerank, Tile::Threads(threads)) => {
            rerank_spec(case, threads, false, RerankSelect::Single).into()
        }
        (
            TunedFamily::PariskvRerank,
            Tile::Rerank {
                threads,
                vector_loads,
                multiblock,
            },
        ) => {
            let select = if multiblock {
                RerankSelect::Multiblock
            } else {
                RerankSelect::Single
            };
            rerank_spec(case, threads, vector_loads, select).into()
        }
        (
            TunedFamily::Select,
            tile @ Tile::Select {
                threads,
                items_per_thread,
                ..
            },
        ) => SelectSpec {
            group: g32,
            k_max: bench_k_max() as u32,
            threads,
            items_per_thread,
            algorithm: tile.select_algorithm().ok_or_else(mismatch)?,
        }
        .into(),
        (
            TunedFamily::Attention,
            Tile::Attention {
                threads,
                rows_per_warp,
            },
        ) => AttentionSpec {
            head_dim: d32,
            group: g32,
            threads,
            rows_per_warp,
        }
        .into(),
        _ => return Err(mismatch()),
    })
}

/// The scan spec of a case and tile.
pub fn scan_spec(case: &Case, tile_words: usize, threads: usize) -> ScanSpec {
    ScanSpec {
        block: BLOCK,
        segment_words: SEGMENT_WORDS,
        tile_words,
        threads,
        ..ScanSpec::new(case.head_dim, case.group, case.placement)
    }
}

/// The gather spec of a case and tile.
pub fn gather_spec(case: &Case, loads_in_flight: usize, threads: usize) -> GatherSpec {
    GatherSpec {
        block: BLOCK,
        segment_words: SEGMENT_WORDS,
        loads_in_flight,
        threads,
        ..GatherSpec::new(case.head_dim)
    }
}

/// The rerank spec of a case, its threads, `_score` variant and top-k, at the decoder's
/// `k_max`.
pub fn rerank_spec(
    case: &Case,
    threads: u32,
    vector_loads: bool,
    select: RerankSelect,
) -> PariskvRerankSpec {
    PariskvRerankSpec {
        head_dim: case.head_dim as u32,
        group: case.group as u32,
        k_max: bench_k_max() as u32,
        threads,
        placement: case.placement,
        vector_loads,
        select,
    }
}

/// The plan kernel every store is planned with, and whose threads are tuned: `fathom` without
/// rotation on the tuner's block and segment (every method of a shape shares the tuned
/// threads, as the step's lookup does).
pub fn plan_spec(head_dim: usize, group: usize, threads: usize) -> PlanSpec {
    PlanSpec {
        block: BLOCK,
        segment_words: SEGMENT_WORDS,
        threads,
        ..PlanSpec::new(head_dim, group, PlanMethod::Fathom, false)
    }
}

/// sha256 (hex) of the sorted names of the whole grid with the candidates of `opt_in` (every
/// subject and placement, with the context lists, the store's block and segment, and the `k`
/// and `k_max` of the selection): it changes exactly when what a run may try changes, whatever
/// `--model`, `--config` or `--quick` narrowed it to, so that runs narrowed differently merge
/// into one record. Without opt-ins it is the checksum of the default grid.
pub fn candidate_checksum(opt_in: OptIn) -> String {
    let mut names: Vec<String> = SUBJECTS
        .iter()
        .flat_map(|&(subject, placement)| {
            grid_with(subject, placement, opt_in)
                .into_iter()
                .map(move |v| format!("{subject} {} {}", placement.as_str(), v.name()))
        })
        .collect();
    names.extend(CONTEXTS.iter().map(|t| format!("context {t}")));
    names.extend(QUICK_CONTEXTS.iter().map(|t| format!("quick context {t}")));
    names.extend(
        CONTEXTS
            .iter()
            .chain(&QUICK_CONTEXTS)
            .map(|&t| format!("k at {t}: {}", bench_k(t))),
    );
    names.push(format!("select k_max {}", bench_k_max()));
    names.push(format!("store b{BLOCK} s{SEGMENT_WORDS}"));
    names.sort();
    names.dedup();
    let mut hash = Sha256::new();
    for name in &names {
        hash.update(name.as_bytes());
        hash.update(b"\n");
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use codegen::spec::Family;

    fn case(subject: Subject, placement: Placement, group: usize) -> Case {
        Case {
            opt_in: OptIn::default(),
            subject,
            head_dim: 128,
            group,
            kv_heads: 8,
            placement,
            tokens: 1 << 15,
        }
    }

    #[test]
    fn scan_candidates_are_the_valid_part_of_the_grid() {
        for placement in [Placement::Hbm, Placement::Host] {
            let c = case(Subject::Kernel(TunedFamily::Scan), placement, 4);
            let all = grid(c.subject, c.placement);
            let valid = enumerate(&c);
            assert!(!valid.is_empty() && valid.len() < all.len());
            for v in &all {
                let Variant::Tile(Tile::Scan {
                    tile_words,
                    threads,
                }) = *v
                else {
                    panic!("{v:?}")
                };
                let ok = scan_spec(&c, tile_words, threads).validate().is_ok();
                assert_eq!(valid.contains(v), ok, "{}", v.name());
                // Tokens per thread outside 1, 2, 4, 8 never survive.
                if ok {
                    assert!([1, 2, 4, 8].contains(&(tile_words * 64 / threads)));
                }
            }
        }
    }

    #[test]
    fn gather_and_transfer_candidates() {
        let g = enumerate(&case(
            Subject::Kernel(TunedFamily::Gather),
            Placement::Host,
            4,
        ));
        assert_eq!(g.len(), GATHER_LOADS.len() * GATHER_THREADS.len());
        let t = enumerate(&case(Subject::Transfer, Placement::Host, 4));
        assert_eq!(
            t,
            [
                Variant::Transfer(Transfer::Fused),
                Variant::Transfer(Transfer::CopyKernel)
            ]
        );
        // The transfer is a host-placement choice only.
        assert!(enumerate(&case(Subject::Transfer, Placement::Hbm, 4)).is_empty());
    }

    /// Every preset's distinct (D, G), and the extremes the specs allow.
    fn shapes() -> Vec<(usize, usize)> {
        let mut shapes: Vec<(usize, usize)> = codegen::model::presets()
            .iter()
            .map(|p| (p.shape().head_dim, p.shape().group_size()))
            .collect();
        shapes.extend([(64, 1), (256, 8)]);
        shapes.sort();
        shapes.dedup();
        shapes
    }

    #[test]
    fn every_candidate_of_every_subject_validates_for_every_shape() {
        for (d, g) in shapes() {
            for &(subject, placement) in &SUBJECTS {
                let c = Case {
                    head_dim: d,
                    group: g,
                    ..case(subject, placement, g)
                };
                let all = grid(subject, placement);
                let valid = enumerate(&c);
                assert!(!valid.is_empty(), "{subject} {placement:?} D={d} G={g}");
                for v in &valid {
                    if let Variant::Tile(_) = v {
                        let spec = tile_spec(&c, v).unwrap();
                        assert_eq!(spec.family(), subject.as_str());
                        spec.validate()
                            .unwrap_or_else(|e| panic!("{} D={d} G={g}: {e}", v.name()));
                    }
                }
                // Only the scan's grid holds tiles a shape refuses (tiles a segment cannot
                // hold); every other family's grid is valid as a whole.
                if subject != Subject::Kernel(TunedFamily::Scan) {
                    assert_eq!(valid, all, "{subject} {placement:?}");
                }
            }
        }
    }

    #[test]
    fn the_new_grids_have_their_stated_sizes() {
        let size =
            |family, placement| enumerate(&case(Subject::Kernel(family), placement, 4)).len();
        assert_eq!(size(TunedFamily::Plan, Placement::Hbm), 6);
        assert_eq!(size(TunedFamily::Select, Placement::Hbm), 60);
        assert_eq!(size(TunedFamily::Attention, Placement::Hbm), 20);
        for family in [
            TunedFamily::Oracle,
            TunedFamily::Landmark,
            TunedFamily::Fetch,
        ] {
            for placement in [Placement::Hbm, Placement::Host] {
                assert_eq!(size(family, placement), 5, "{family:?} {placement:?}");
            }
        }
        for &(subject, placement) in &SUBJECTS {
            if let Subject::Kernel(
                f @ (TunedFamily::PariskvVote
                | TunedFamily::PariskvTopc
                | TunedFamily::PariskvRerank),
            ) = subject
            {
                // The rerank's two `_score` variants at every thread count.
                let variants = if f == TunedFamily::PariskvRerank {
                    2
                } else {
                    1
                };
                assert_eq!(
                    size(f, placement),
                    variants * PARISKV_THREADS.len(),
                    "{f:?}"
                );
            }
        }
    }

    /// The ParisKV subjects are keyed as the step looks them up: vote and rerank in both
    /// placements of the index rows, the top-C in HBM only; their specs are the step's (the
    /// rerank at the decoder's `k_max`), and the default threads are among the candidates.
    #[test]
    fn pariskv_subjects_follow_the_steps_lookups() {
        let pariskv: Vec<(TunedFamily, Placement)> = SUBJECTS
            .iter()
            .filter_map(|&(s, p)| match s {
                Subject::Kernel(f) if f.as_str().starts_with("pariskv") => Some((f, p)),
                _ => None,
            })
            .collect();
        assert_eq!(
            pariskv,
            [
                (TunedFamily::PariskvVote, Placement::Hbm),
                (TunedFamily::PariskvTopc, Placement::Hbm),
                (TunedFamily::PariskvRerank, Placement::Hbm),
                (TunedFamily::PariskvVote, Placement::Host),
                (TunedFamily::PariskvRerank, Placement::Host),
            ]
        );
        let defaults = runtime::tuning::Tiles::default();
        for (family, placement) in pariskv {
            let default = Variant::Tile(match family {
                TunedFamily::PariskvRerank => Tile::Rerank {
                    threads: defaults.pariskv_threads,
                    vector_loads: defaults.rerank_vector_loads,
                    multiblock: false,
                },
                _ => Tile::Threads(defaults.pariskv_threads),
            });
            let c = case(Subject::Kernel(family), placement, 7);
            assert!(enumerate(&c).contains(&default), "{family:?}");
            let spec = tile_spec(&c, &Variant::Tile(Tile::Threads(512))).unwrap();
            assert_eq!(spec.family(), family.as_str());
            match spec {
                KernelSpec::PariskvVote(s) => {
                    assert_eq!((s.threads, s.placement, s.head_dim), (512, placement, 128))
                }
                KernelSpec::PariskvTopc(s) => assert_eq!((s.threads, s.head_dim), (512, 128)),
                KernelSpec::PariskvRerank(s) => {
                    assert_eq!((s.threads, s.placement, s.group), (512, placement, 7));
                    assert_eq!(s.k_max as usize, bench_k_max());
                    assert!(!s.vector_loads);
                    let wide = Tile::Rerank {
                        threads: 256,
                        vector_loads: true,
                        multiblock: false,
                    };
                    assert!(enumerate(&c).contains(&Variant::Tile(wide)));
                    match tile_spec(&c, &Variant::Tile(wide)).unwrap() {
                        KernelSpec::PariskvRerank(s) => {
                            assert_eq!((s.threads, s.vector_loads), (256, true))
                        }
                        other => panic!("{other:?}"),
                    }
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn the_select_grid_is_the_spec_domain_less_the_stated_prunes() {
        for opt_in in [
            OptIn::default(),
            OptIn::parse(&["pariskv-select-multiblock".into()]).unwrap(),
        ] {
            let c = Case {
                opt_in,
                ..case(Subject::Kernel(TunedFamily::Select), Placement::Hbm, 7)
            };
            let valid = enumerate(&c);
            let mut domain = 0;
            for threads in 1..=1100u32 {
                for items_per_thread in 0..=40u32 {
                    for algorithm in SelectAlgorithm::ALL {
                        let spec = SelectSpec {
                            group: 7,
                            k_max: bench_k_max() as u32,
                            threads,
                            items_per_thread,
                            algorithm,
                        };
                        let tile =
                            Variant::Tile(Tile::select(threads, items_per_thread, algorithm));
                        if spec.validate().is_err() {
                            assert!(!valid.contains(&tile), "{}", tile.name());
                            continue;
                        }
                        domain += 1;
                        let kept = threads.is_power_of_two()
                            && threads >= 64
                            && items_per_thread.is_power_of_two()
                            && threads * items_per_thread >= SELECT_MIN_CHUNK;
                        assert_eq!(valid.contains(&tile), kept, "{}", tile.name());
                    }
                }
            }
            // Multiples of 32 up to 1,024 threads, 1 to 32 items, the plain and compacting
            // variants: the spec's whole domain; the one-read variant wherever its buffer holds
            // k_max = 2048 (from 64 threads on).
            assert_eq!(domain, 32 * 32 * 2 + 31 * 32);
            // The runtime's default select tile is among the candidates.
            let defaults = runtime::tuning::Tiles::default();
            let (threads, items_per_thread) = defaults.select;
            assert!(valid.contains(&Variant::Tile(Tile::select(
                threads,
                items_per_thread,
                defaults.select_algorithm,
            ))));
            // Every tile is tried as each of the three variants, whatever the opt-ins.
            assert_eq!(valid.len(), 20 * 3);
        }
    }

    #[test]
    fn a_graduated_opt_in_is_refused_with_why_and_an_unknown_one_with_the_known_ones() {
        assert_eq!(OptIn::parse(&[]).unwrap(), OptIn::default());
        let e = OptIn::parse(&["select-onepass".to_string()]).unwrap_err();
        assert!(e.contains("default grid") && e.contains("drop"), "{e}");
        let e = OptIn::parse(&["select-fast".to_string()]).unwrap_err();
        assert!(
            e.contains("select-fast") && e.contains("pariskv-select-multiblock"),
            "{e}"
        );
        // The default grid holds every select tile as the one-read variant too.
        let select = grid(Subject::Kernel(TunedFamily::Select), Placement::Hbm);
        let onepass = select
            .iter()
            .filter(|v| v.name().ends_with("onepass"))
            .count();
        assert_eq!(onepass * 3, select.len());
    }

    #[test]
    fn the_defaults_of_every_family_are_candidates() {
        let t = runtime::tuning::Tiles::default();
        let has = |family, placement, tile| {
            enumerate(&case(Subject::Kernel(family), placement, 4)).contains(&Variant::Tile(tile))
        };
        assert!(has(
            TunedFamily::Plan,
            Placement::Hbm,
            Tile::Threads(t.plan_threads as u32)
        ));
        let (threads, rows_per_warp) = t.attention;
        assert!(has(
            TunedFamily::Attention,
            Placement::Hbm,
            Tile::Attention {
                threads,
                rows_per_warp
            }
        ));
        for family in [
            TunedFamily::Oracle,
            TunedFamily::Landmark,
            TunedFamily::Fetch,
        ] {
            assert!(has(family, Placement::Host, Tile::Threads(t.row_threads)));
        }
    }

    #[test]
    fn a_tile_of_another_family_has_no_spec() {
        let c = case(Subject::Kernel(TunedFamily::Select), Placement::Hbm, 4);
        assert!(tile_spec(&c, &Variant::Tile(Tile::Threads(256))).is_err());
        assert!(tile_spec(&c, &Variant::Transfer(Transfer::Fused)).is_err());
    }

    #[test]
    fn names_are_distinct_and_the_checksum_is_stable_hex() {
        for &(s, p) in &SUBJECTS {
            let mut names: Vec<String> = grid(s, p).iter().map(Variant::name).collect();
            let n = names.len();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), n);
        }
        let sum = candidate_checksum(OptIn::default());
        assert_eq!(sum.len(), 64);
        assert!(sum.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(sum, candidate_checksum(OptIn::default()));
    }

    #[test]
    fn keys_carry_the_context_bucket_and_k_follows_the_paper() {
        let mut c = case(Subject::Kernel(TunedFamily::Scan), Placement::Hbm, 7);
        c.tokens = 1 << 20;
        assert_eq!(c.key().context_bucket, 20);
        assert_eq!(c.key().group, 7);
        assert!(CONTEXTS.iter().all(|&t| bench_k(t) == 512));
        assert!(bench_k(1 << 15) <= bench_k_max());
    }
}
