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
//!   one winning ties. Each is tried with the one-block top-k and the many-block one
//!   ([`RERANK_MULTIBLOCK`], `PariskvRerankSpec::select`), in the default grid since it ran on
//!   the H200 (2026-12-02: exact in every case, faster at every context: 1M 1.93 -> 1.71 ms in
//!   HBM, 2.57 -> 2.28 ms from host).
//!   `pariskv_query` has no tile (one thread per centroid) and `pariskv_index` runs
//!   when keys enter the store, not in a step: neither is tuned.

use codegen::spec::pariskv::RerankSelect;
use codegen::spec::{
    AttentionRows, AttentionSpec, FetchSpec, GatherSpec, KernelSpec, KvRows, LandmarkSpec,
    OracleSpec, PariskvRerankSpec, PariskvTopcSpec, PariskvVoteSpec, Placement, PlanMethod,
    PlanSpec, ScanSpec, SelectAlgorithm, SelectSpec,
};
use reference::select::paper_k;
use runtime::step::{DecoderConfig, Transfer};
use runtime::tuning::context_bucket;
use runtime::tuning::{EntryKey, EntryRecord, Subject, Variant};
use runtime::tuning::{Tile, Tiles, TunedFamily};
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
/// Every scan tile is tried plain and on the tensor cores (`ScanSpec::tensor_cores`; an opt-in
/// until the step's tests ran with it on the H200, 2026-12-05), the plain one winning a tie. A
/// tensor-core tile whose accumulators do not fit a thread's registers is refused by its spec.
pub const SCAN_TENSOR_CORES: [bool; 2] = [false, true];
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
/// one-read, the one-block select from the peaks of its row, and both peaks forms reading the
/// peaks the scan wrote (their case stands in for the scan, so their time leaves out the
/// scan's share: ~15 us a layer at 1M on the H100, against ~39 saved). The many-block select
/// from the peaks of each share ([`SelectAlgorithm::Peaks`]) is left out: it never won on the
/// H100 (the one-read select streams as fast at 1M, the one-block form wins short contexts);
/// the step still runs it for methods without a plane scan where a record says `scan_peaks`.
/// The resident select (one block a query head, the radix passes over keys held in registers)
/// is tried too: it won the HBM 32k select at every G on the H100 (2026-12-06).
pub const SELECT_ALGORITHMS: [SelectAlgorithm; 7] = [
    SelectAlgorithm::Radix,
    SelectAlgorithm::Compact,
    SelectAlgorithm::Onepass,
    SelectAlgorithm::PeaksHead,
    SelectAlgorithm::ScanPeaks,
    SelectAlgorithm::ScanPeaksHead,
    SelectAlgorithm::Resident,
];

/// Candidates a run tries only when asked for (`--opt-in NAME`): variants whose kernels pass
/// their CPU tests but have not yet run on a GPU, or ran exact but won nowhere, so that a
/// default run neither depends on them nor spends its time on them. A run with an opt-in has
/// its own candidate checksum ([`candidate_checksum`]); its record merges into one made
/// without only through `--merge`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OptIn {
    /// `select-fused`: every select tile also as the fused one-read variant
    /// ([`SelectAlgorithm::Fused`], `_final` folded into `_chunk`; exact on the H200 but no
    /// faster, 2026-12-03).
    pub select_fused: bool,
    /// `select-cluster`: every select tile also as the cluster variants
    /// ([`SelectAlgorithm::Cluster`], [`SelectAlgorithm::ScanPeaksCluster`]: a thread-block
    /// cluster of eight blocks a query head sharing its radix histograms through distributed
    /// shared memory; sm_90 only; exact on an H100 but 1.6-2x slower there than the one-block
    /// selects, 2026-12-06).
    pub select_cluster: bool,
    /// `attention-splits16`: every attention tile also with 16 blocks a query head
    /// ([`ATTENTION_SPLITS_OPT_IN`]; the kernels at 16 splits are exact on the GPU in
    /// `gpu_attention_split_matches_reference` and the step, but no faster on an H100:
    /// 12.96-12.99 us against 8 blocks' 12.64-12.74 at 32k / 128k / 1M, 2026-12-06).
    pub attention_splits16: bool,
}

impl OptIn {
    /// The names `--opt-in` takes.
    pub const NAMES: [&'static str; 3] = ["select-fused", "select-cluster", "attention-splits16"];

    /// Opt-ins that have joined the default grid, with when: a script that still names one is
    /// told to drop it rather than that it is unknown.
    pub const GRADUATED: [(&'static str, &'static str); 7] = [
        (
            "select-onepass",
            "the one-read select is in the default grid since it ran on the H200 on 2026-12-02",
        ),
        (
            "pariskv-select-multiblock",
            "the rerank's many-block top-k is in the default grid since it ran on the H200 on \
             2026-12-02",
        ),
        (
            "scan-tc",
            "the default grid tries every scan tile on the tensor cores too since the step's \
             tests ran with it on the H200 on 2026-12-05",
        ),
        (
            "select-peaks",
            "the one-block peaks select is in the default grid since it ran exact and \
             sanitizer-clean on a GPU (H100, 2026-12-05); the many-block one never won there",
        ),
        (
            "select-scan-peaks",
            "the selects reading the scan's peaks are in the default grid since they ran exact \
             and sanitizer-clean on a GPU and made the HBM step at 1M 11% faster (H100, \
             2026-12-05)",
        ),
        (
            "pariskv-decode-table",
            "the default grid tries every rerank tile with decode tables too since they ran \
             exact and sanitizer-clean on a GPU (H100, 2026-12-05)",
        ),
        (
            "select-resident",
            "the resident select is in the default grid since it ran exact and sanitizer-clean \
             on a GPU and won the HBM 32k select at every G (H100, 2026-12-06)",
        ),
    ];

    /// The opt-ins named by `names`; an unknown name is refused with the known ones.
    pub fn parse(names: &[String]) -> Result<OptIn, String> {
        let mut opt_in = OptIn::default();
        for name in names {
            match name.as_str() {
                "select-fused" => opt_in.select_fused = true,
                "select-cluster" => opt_in.select_cluster = true,
                "attention-splits16" => opt_in.attention_splits16 = true,
                _ => {
                    if let Some((_, since)) =
                        OptIn::GRADUATED.iter().find(|(n, _)| *n == name.as_str())
                    {
                        return Err(format!("--opt-in `{name}` is gone: {since}; drop the flag"));
                    }
                    return Err(format!(
                        "unknown --opt-in `{name}`; known: {}",
                        OptIn::NAMES.join(", ")
                    ));
                }
            }
        }
        Ok(opt_in)
    }

    /// The opt-ins under which `variant` is a candidate (none for a default candidate): a
    /// record may hold a winner that only an opt-in run tried (merged with `--merge`).
    pub fn needed_for(variant: &Variant) -> OptIn {
        match *variant {
            Variant::Tile(tile) if tile.select_algorithm() == Some(SelectAlgorithm::Fused) => {
                OptIn {
                    select_fused: true,
                    ..OptIn::default()
                }
            }
            Variant::Tile(tile)
                if tile
                    .select_algorithm()
                    .is_some_and(SelectAlgorithm::cluster) =>
            {
                OptIn {
                    select_cluster: true,
                    ..OptIn::default()
                }
            }
            Variant::Tile(Tile::Attention { splits, .. })
                if !ATTENTION_SPLITS.contains(&splits) =>
            {
                OptIn {
                    attention_splits16: true,
                    ..OptIn::default()
                }
            }
            _ => OptIn::default(),
        }
    }

    /// The blocks a query head tried for every attention tile: [`ATTENTION_SPLITS`], and
    /// [`ATTENTION_SPLITS_OPT_IN`] too with `attention-splits16`.
    pub fn attention_splits(self) -> Vec<u32> {
        let mut splits = ATTENTION_SPLITS.to_vec();
        if self.attention_splits16 {
            splits.extend(ATTENTION_SPLITS_OPT_IN);
        }
        splits
    }

    /// The select algorithms tried for every tile: [`SELECT_ALGORITHMS`], the fused one-read
    /// variant with `select-fused` and the cluster variants with `select-cluster`.
    pub fn select_algorithms(self) -> Vec<SelectAlgorithm> {
        let mut algorithms = SELECT_ALGORITHMS.to_vec();
        if self.select_fused {
            algorithms.push(SelectAlgorithm::Fused);
        }
        if self.select_cluster {
            algorithms.extend([SelectAlgorithm::Cluster, SelectAlgorithm::ScanPeaksCluster]);
        }
        algorithms
    }
}

/// Threads per block tried for attention.
pub const ATTENTION_THREADS: [u32; 5] = [64, 128, 256, 512, 1024];
/// Rows each warp loads before it computes, tried for attention.
pub const ATTENTION_ROWS: [u32; 4] = [1, 2, 4, 8];
/// Blocks per query head tried for attention (`AttentionSpec::splits`): with one block a head
/// a batch-1 step of a 32-head model fills a quarter of an H200's SMs.
pub const ATTENTION_SPLITS: [u32; 4] = [1, 2, 4, 8];
/// Blocks per query head tried for attention with `--opt-in attention-splits16`: at 8 (the
/// H100 record's winner at every context) a block of the HBM step at 32k still walks ~70 of a
/// head's ~550 rows in three rounds of dependent loads; 16 takes two. That was not the
/// attention's bound: 16 were no faster on the H100 (`bench/NOTES.md`, fifteenth session).
pub const ATTENTION_SPLITS_OPT_IN: [u32; 1] = [16];
/// Threads per block tried for the ParisKV vote, top-C and rerank.
pub const PARISKV_THREADS: [u32; 5] = [64, 128, 256, 512, 1024];
/// The rerank `_score` variants tried for every thread count: one thread a candidate, or whole
/// rows in 16-byte loads (`PariskvRerankSpec::vector_loads`).
pub const RERANK_VECTOR_LOADS: [bool; 2] = [false, true];
/// The rerank top-k variants tried for every tile: one block per KV head, or many
/// (`PariskvRerankSpec::select`).
pub const RERANK_MULTIBLOCK: [bool; 2] = [false, true];
/// The rerank `_score` operand layouts tried for every tile: as they are, and in tables laid
/// out for it (`PariskvRerankSpec::decode_table`: no stack array of levels, no bank conflicts
/// on `q̃`).
pub const RERANK_DECODE_TABLES: [bool; 2] = [false, true];

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
    /// The whole grid or `--quick`'s part of it (not part of the key).
    pub grid: Grid,
}

/// How much of the grid a case tries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Grid {
    /// Every candidate.
    #[default]
    Full,
    /// `--quick`: the part of the grid where the winners have been ([`Grid::keeps`]).
    Quick,
}

impl Grid {
    /// Whether this grid tries `variant` of `subject` in `placement`.
    ///
    /// `--quick` keeps, of the families with the most kernels, the neighbourhood of every
    /// winner recorded on the H200 (2026-12-02, three shapes, three contexts; the tests check
    /// each is kept): the scan in HBM at 4-32 words a tile and 64-256 threads, on the tensor
    /// cores at 4-16 words and 64-256 threads (where it has won: at 1M, and on the H100 at 32k
    /// with G = 8, w4 t256, since the scans are timed at the step's one-wave grid, and at 128k
    /// with G = 4, w16 t256, since they are planned on synthetic layers), from host memory at
    /// 16-128 words and 256-1,024 threads, plain only (a tile of host memory needs more loads
    /// in flight than a tensor-core tile's registers allow);
    /// the one-read select at 256-1,024 threads and 2-16 items (it won every case on the H200,
    /// the radix and compacting ones lose 3x at 1M), the one-block selects from the peaks (of
    /// the scores or of the scan) at 256-1,024 threads and 4-8 items (where they won at 32k and
    /// 128k on the H100, 2026-12-05; the many-block ones win only at 1M, which `--quick` does
    /// not tune), the resident select at 256-1,024 threads and 16-32 items (where it won at 32k
    /// on the H100, 2026-12-06); attention at 128 or 256 threads, 4 or 8 rows a warp and 4 or 8
    /// blocks a query head (every attention winner since the split tiles); the rerank's
    /// whole-row `_score` with the many-block top-k (the winner everywhere) at 128-1,024 threads.
    /// The rest of the grid is small and kept whole. Its candidates are a subset of the full
    /// grid's, so a quick record is the full one's kind and the checksum is the same; the
    /// record keeps a fuller entry over a quick one (`records::merge_into`).
    pub fn keeps(self, subject: Subject, placement: Placement, variant: &Variant) -> bool {
        if self == Grid::Full {
            return true;
        }
        match (subject, variant) {
            (
                Subject::Kernel(TunedFamily::Scan),
                Variant::Tile(Tile::Scan {
                    tile_words,
                    threads,
                    tensor_cores,
                }),
            ) => match placement {
                Placement::Hbm if *tensor_cores => {
                    (4..=16).contains(tile_words) && (64..=256).contains(threads)
                }
                Placement::Hbm => (4..=32).contains(tile_words) && (64..=256).contains(threads),
                Placement::Host => {
                    !tensor_cores
                        && (16..=128).contains(tile_words)
                        && (256..=1024).contains(threads)
                }
            },
            (
                Subject::Kernel(TunedFamily::Select),
                Variant::Tile(
                    tile @ Tile::Select {
                        threads,
                        items_per_thread,
                        ..
                    },
                ),
            ) => {
                *threads >= 256
                    && match tile.select_algorithm() {
                        Some(SelectAlgorithm::Onepass) => (2..=16).contains(items_per_thread),
                        Some(SelectAlgorithm::PeaksHead | SelectAlgorithm::ScanPeaksHead) => {
                            (4..=8).contains(items_per_thread)
                        }
                        Some(SelectAlgorithm::Resident) => (16..=32).contains(items_per_thread),
                        _ => false,
                    }
            }
            (
                Subject::Kernel(TunedFamily::Attention),
                Variant::Tile(Tile::Attention {
                    threads,
                    rows_per_warp,
                    splits,
                }),
            ) => (128..=256).contains(threads) && *rows_per_warp >= 4 && *splits >= 4,
            (
                Subject::Kernel(TunedFamily::PariskvRerank),
                Variant::Tile(Tile::Rerank {
                    threads,
                    vector_loads,
                    multiblock,
                    ..
                }),
            ) => *vector_loads && *multiblock && *threads >= 128,
            _ => true,
        }
    }
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

    /// The case of a record entry's key, at the entry's context, with the opt-ins its winner
    /// needs (one merged from an opt-in run is a candidate of that opt-in) and `grid`. The KV
    /// heads are not part of the key: `kv_heads` is what the caller builds inputs for.
    pub fn of_entry(entry: &EntryRecord, kv_heads: usize, grid: Grid) -> Case {
        Case {
            subject: entry.key.subject,
            head_dim: entry.key.head_dim,
            group: entry.key.group,
            kv_heads,
            placement: entry.key.placement,
            tokens: 1 << entry.key.context_bucket,
            opt_in: entry
                .winner
                .as_ref()
                .map_or_else(OptIn::default, |w| OptIn::needed_for(&w.variant)),
            grid,
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
/// In this order, which is the order of a run for each shape and context: the select first,
/// since whether a scan is timed writing its peaks follows the select the step will run (the
/// scan-peaks selects read them); the three
/// host-placement store subjects and the plan share one store and plan, and the transfer is
/// timed with the scan and gather tiles tuned before it; select, attention and fetch share one
/// set of scores and its selection (kept on the host between them); the row families of one placement share its K/V rows; the
/// ParisKV families share one index (built on the device from random keys), HBM first, then
/// the vote and rerank reading its rows from host memory (the top-C reads only the votes, in
/// device memory, so it is looked up under HBM only).
pub const SUBJECTS: [(Subject, Placement); 18] = [
    (kernel(TunedFamily::Select), Placement::Hbm),
    (kernel(TunedFamily::Scan), Placement::Hbm),
    (kernel(TunedFamily::Scan), Placement::Host),
    (kernel(TunedFamily::Gather), Placement::Host),
    (Subject::Transfer, Placement::Host),
    (kernel(TunedFamily::Plan), Placement::Hbm),
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
                SCAN_THREADS.iter().flat_map(move |&threads| {
                    SCAN_TENSOR_CORES.iter().map(move |&tensor_cores| {
                        Variant::Tile(Tile::Scan {
                            tile_words,
                            threads,
                            tensor_cores,
                        })
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
            let decode_tables = RERANK_DECODE_TABLES;
            let mut variants = Vec::new();
            for &threads in &PARISKV_THREADS {
                for &vector_loads in &RERANK_VECTOR_LOADS {
                    for &multiblock in &RERANK_MULTIBLOCK {
                        for &decode_table in &decode_tables {
                            variants.push(Variant::Tile(Tile::Rerank {
                                threads,
                                vector_loads,
                                multiblock,
                                decode_table,
                            }));
                        }
                    }
                }
            }
            variants
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
                let splits = opt_in.attention_splits();
                ATTENTION_ROWS.iter().flat_map(move |&rows_per_warp| {
                    splits.clone().into_iter().map(move |splits| {
                        Variant::Tile(Tile::Attention {
                            threads,
                            rows_per_warp,
                            splits,
                        })
                    })
                })
            })
            .collect(),
    }
}

/// The candidates of `case`: the grid's variants (with its opt-ins, in its part of the grid)
/// whose spec validates for its shape.
pub fn enumerate(case: &Case) -> Vec<Variant> {
    grid_with(case.subject, case.placement, case.opt_in)
        .into_iter()
        .filter(|v| case.grid.keeps(case.subject, case.placement, v))
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
                tensor_cores,
            },
        ) => scan_spec(case, tile_words, threads, tensor_cores).into(),
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
        (TunedFamily::PariskvRerank, Tile::Threads(threads)) => rerank_spec(
            case,
            Tile::Rerank {
                threads,
                vector_loads: false,
                multiblock: false,
                decode_table: false,
            },
        )?
        .into(),
        (TunedFamily::PariskvRerank, tile @ Tile::Rerank { .. }) => rerank_spec(case, tile)?.into(),
        (
            TunedFamily::Select,
            tile @ Tile::Select {
                threads,
                items_per_thread,
                ..
            },
        ) => {
            let algorithm = tile.select_algorithm().ok_or_else(mismatch)?;
            SelectSpec {
                group: g32,
                k_max: bench_k_max() as u32,
                threads,
                items_per_thread,
                algorithm,
                // Timed as the step runs it.
                coarse_floor: Tiles::default().coarse_floor_for(algorithm),
                owned_tiles: Tiles::default().owned_tiles_for(algorithm),
            }
            .into()
        }
        (
            TunedFamily::Attention,
            Tile::Attention {
                threads,
                rows_per_warp,
                splits,
            },
        ) => AttentionSpec {
            head_dim: d32,
            group: g32,
            threads,
            rows_per_warp,
            rows: AttentionRows::Fetched,
            kv_rows: KvRows::Separate,
            splits,
            cluster_merge: false,
            prefetch_rows: false,
        }
        .into(),
        _ => return Err(mismatch()),
    })
}

/// The scan spec of a case and tile.
pub fn scan_spec(case: &Case, tile_words: usize, threads: usize, tensor_cores: bool) -> ScanSpec {
    ScanSpec {
        block: BLOCK,
        segment_words: SEGMENT_WORDS,
        tile_words,
        threads,
        tensor_cores,
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

/// The rerank spec of a case and a `Rerank` tile, at the decoder's `k_max`.
pub fn rerank_spec(case: &Case, tile: Tile) -> Result<PariskvRerankSpec, String> {
    let Tile::Rerank {
        threads,
        vector_loads,
        multiblock,
        decode_table,
    } = tile
    else {
        return Err(format!("{tile:?} is not a rerank tile"));
    };
    Ok(PariskvRerankSpec {
        head_dim: case.head_dim as u32,
        group: case.group as u32,
        k_max: bench_k_max() as u32,
        threads,
        placement: case.placement,
        vector_loads,
        select: if multiblock {
            RerankSelect::Multiblock
        } else {
            RerankSelect::Single
        },
        decode_table,
    })
}

/// The plan kernel every store is planned with, and whose threads are tuned: `fathom` without
/// rotation on the tuner's block and segment (every method of a shape shares the tuned
/// threads, as the step's lookup does), its water line found as the step finds it
/// (`Tiles::plan_direct_line`).
pub fn plan_spec(head_dim: usize, group: usize, threads: usize) -> PlanSpec {
    PlanSpec {
        block: BLOCK,
        segment_words: SEGMENT_WORDS,
        threads,
        direct_line: Tiles::default().plan_direct_line,
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
    names.push(format!(
        "select coarse floor {}",
        Tiles::default().select_coarse_floor
    ));
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
#[path = "candidates_tests.rs"]
mod tests;
