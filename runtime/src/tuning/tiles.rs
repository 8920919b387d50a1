//! The tuning vocabulary the step looks its launches up in: the families a record tunes
//! ([`TunedFamily`]), the lookup key ([`TuneKey`]), a winner ([`Tile`]), the record as the step
//! reads it ([`Tuning`]), and the defaults when no record answers ([`Tiles`], with a warning
//! printed once per process).

use std::sync::Once;

use codegen::spec::pariskv::RerankSelect;
use codegen::spec::{AttentionRows, Placement, ScanSpec, SelectAlgorithm};
use serde::{Deserialize, Serialize};

use super::Transfer;

/// The kernel families whose tiles a record may set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TunedFamily {
    Plan,
    Gather,
    Scan,
    Oracle,
    Landmark,
    Select,
    Fetch,
    Attention,
    /// `pariskv_vote`, the collision vote of `pariskv(k)` (threads).
    #[serde(rename = "pariskv_vote")]
    PariskvVote,
    /// `pariskv_topc`, the candidate top-C (threads of both entry points).
    #[serde(rename = "pariskv_topc")]
    PariskvTopc,
    /// `pariskv_rerank`, the rerank and the group's top-k (threads of both entry points).
    #[serde(rename = "pariskv_rerank")]
    PariskvRerank,
}

impl TunedFamily {
    /// Every family, in declaration order.
    pub const ALL: [TunedFamily; 11] = [
        TunedFamily::Plan,
        TunedFamily::Gather,
        TunedFamily::Scan,
        TunedFamily::Oracle,
        TunedFamily::Landmark,
        TunedFamily::Select,
        TunedFamily::Fetch,
        TunedFamily::Attention,
        TunedFamily::PariskvVote,
        TunedFamily::PariskvTopc,
        TunedFamily::PariskvRerank,
    ];

    /// The family called `name` (as [`TunedFamily::as_str`] spells it).
    pub fn from_name(name: &str) -> Option<TunedFamily> {
        Self::ALL.into_iter().find(|f| f.as_str() == name)
    }

    /// The family's name, as in `codegen::spec::Family::FAMILY`.
    pub fn as_str(self) -> &'static str {
        match self {
            TunedFamily::Plan => "plan",
            TunedFamily::Gather => "gather",
            TunedFamily::Scan => "scan",
            TunedFamily::Oracle => "oracle",
            TunedFamily::Landmark => "landmark",
            TunedFamily::Select => "select",
            TunedFamily::Fetch => "fetch",
            TunedFamily::Attention => "attention",
            TunedFamily::PariskvVote => "pariskv_vote",
            TunedFamily::PariskvTopc => "pariskv_topc",
            TunedFamily::PariskvRerank => "pariskv_rerank",
        }
    }
}

/// What a tuning lookup is keyed by: family, shape, placement of the memory the kernel reads,
/// and the context bucket `ceil(log2(max tokens))`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TuneKey {
    pub family: TunedFamily,
    pub head_dim: usize,
    pub group: usize,
    pub placement: Placement,
    pub context_bucket: u32,
}

/// A tile: the launch parameters a family is specialised on beyond the shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tile {
    /// Threads per block (plan, oracle, landmark, fetch, and the ParisKV vote and top-C; the
    /// ParisKV rerank in records written before [`Tile::Rerank`], meaning its plain `_score`).
    Threads(u32),
    /// Words per tile, threads and whether it scores on the tensor cores (scan;
    /// `tensor_cores` is written only when set, so older records read and write back
    /// unchanged).
    Scan {
        tile_words: usize,
        threads: usize,
        #[serde(default, skip_serializing_if = "is_false")]
        tensor_cores: bool,
    },
    /// Loads in flight and threads (gather).
    Gather {
        loads_in_flight: usize,
        threads: usize,
    },
    /// Threads, scores per thread per chunk, and which variant runs (select): the compacting
    /// one (`compact`; `false` in records written before it existed), the one-read one
    /// (`onepass`; written only when set, so older records read and write back unchanged),
    /// that one with its `_final` folded into `_chunk` (`onepass` and `fused`, likewise), that
    /// one with its blocks' top-k from the peaks of their shares (`onepass` and `peaks`,
    /// likewise), that one with one block a query head writing the selection (`onepass`,
    /// `fused` and `peaks`), or with none the plain one; either peaks form with `scan_peaks`
    /// reads the peaks the scan wrote (likewise); `cluster` alone, the cluster variant (a
    /// thread-block cluster a query head, likewise), with `scan_peaks` its form reading the
    /// scan's peaks. A tile never sets `compact` with another, nor `cluster` with another but
    /// `scan_peaks`.
    Select {
        threads: u32,
        items_per_thread: u32,
        #[serde(default)]
        compact: bool,
        #[serde(default, skip_serializing_if = "is_false")]
        onepass: bool,
        #[serde(default, skip_serializing_if = "is_false")]
        fused: bool,
        #[serde(default, skip_serializing_if = "is_false")]
        peaks: bool,
        #[serde(default, skip_serializing_if = "is_false")]
        scan_peaks: bool,
        #[serde(default, skip_serializing_if = "is_false")]
        cluster: bool,
        #[serde(default, skip_serializing_if = "is_false")]
        resident: bool,
    },
    /// Threads, rows each warp loads before computing, and blocks per query head (attention;
    /// `splits` is written only when above 1, so older records read and write back unchanged).
    Attention {
        threads: u32,
        rows_per_warp: u32,
        #[serde(default = "one", skip_serializing_if = "is_one")]
        splits: u32,
    },
    /// Threads, whether `_score` reads whole rows in 16-byte loads (the ParisKV rerank,
    /// `PariskvRerankSpec::vector_loads`), whether the top-k runs over many blocks
    /// (`PariskvRerankSpec::select`, `multiblock`) and whether `_score` reads its operands from
    /// tables laid out for it (`PariskvRerankSpec::decode_table`; both written only when set, so
    /// older records read and write back unchanged).
    Rerank {
        threads: u32,
        #[serde(default)]
        vector_loads: bool,
        #[serde(default, skip_serializing_if = "is_false")]
        multiblock: bool,
        #[serde(default, skip_serializing_if = "is_false")]
        decode_table: bool,
    },
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn one() -> u32 {
    1
}

fn is_one(x: &u32) -> bool {
    *x == 1
}

impl Tile {
    /// A select tile of `algorithm`.
    pub fn select(threads: u32, items_per_thread: u32, algorithm: SelectAlgorithm) -> Tile {
        Tile::Select {
            threads,
            items_per_thread,
            compact: algorithm == SelectAlgorithm::Compact,
            onepass: algorithm.one_read(),
            fused: algorithm == SelectAlgorithm::Fused || algorithm.one_block(),
            peaks: algorithm.peaks(),
            scan_peaks: algorithm.scan_peaks(),
            cluster: algorithm.cluster(),
            resident: algorithm == SelectAlgorithm::Resident,
        }
    }

    /// `base` with this scan tile's words, threads and form; `None` for another family's tile.
    pub fn on_scan(&self, base: ScanSpec) -> Option<ScanSpec> {
        match *self {
            Tile::Scan {
                tile_words,
                threads,
                tensor_cores,
            } => Some(ScanSpec {
                tile_words,
                threads,
                tensor_cores,
                ..base
            }),
            _ => None,
        }
    }

    /// The algorithm of a select tile; `None` for another tile or one whose flags conflict.
    pub fn select_algorithm(&self) -> Option<SelectAlgorithm> {
        // The inverse of `Tile::select`: the algorithm whose flags these are.
        match *self {
            Tile::Select {
                threads,
                items_per_thread,
                ..
            } => SelectAlgorithm::ALL
                .into_iter()
                .find(|&a| Tile::select(threads, items_per_thread, a) == *self),
            _ => None,
        }
    }
}

/// An autotune record, as the step reads it.
pub trait Tuning: Send {
    /// The winning tile of `key`, if the record has one.
    fn tile(&self, key: &TuneKey) -> Option<Tile>;
    /// The winning host-placement transfer for this shape and context bucket, if recorded.
    fn transfer(&self, head_dim: usize, group: usize, context_bucket: u32) -> Option<Transfer>;
}

/// The tiles used when no record answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tiles {
    pub plan_threads: usize,
    pub gather: (usize, usize),
    /// `(tile_words, threads)` of the scan reading HBM (staging too).
    pub scan_hbm: (usize, usize),
    /// `(tile_words, threads)` of the fused scan reading mapped host memory.
    pub scan_host: (usize, usize),
    /// `(tile_words, threads)` of the fused scan for query groups of more than 8 heads, whose
    /// accumulators need more registers than a thread of `scan_host`'s block has.
    pub scan_host_large_group: (usize, usize),
    pub row_threads: u32,
    /// `(threads, items_per_thread)`.
    pub select: (u32, u32),
    /// The select's algorithm: radix (five reads of the scores), compacting (two), one-read
    /// (one; opt-in until measured on a GPU).
    pub select_algorithm: SelectAlgorithm,
    /// `(threads, rows_per_warp)`.
    pub attention: (u32, u32),
    /// Attention's blocks per query head (`AttentionSpec::splits`) when no record answers.
    pub attention_splits: u32,
    /// Where attention reads the selected rows when the store is in HBM: straight from the
    /// store by token (the default: no fetch, and no union unless asked for; 0.20 ms a
    /// qwen3-8b step faster at 32k on the H200, `bench/results/step-h200-2026-12-02-e9a44d1-*`),
    /// or fetched into staging first. From host memory the rows are always fetched.
    pub attention_rows: AttentionRows,
    /// Threads of the ParisKV retrieval kernels with a tile (vote, top-C, rerank); the query
    /// kernel's block is fixed (one thread per centroid).
    pub pariskv_threads: u32,
    /// Whether the ParisKV rerank's `_score` reads whole rows in 16-byte loads.
    pub rerank_vector_loads: bool,
    /// How the ParisKV rerank finds its top-k: one block per KV head, or many.
    pub rerank_select: RerankSelect,
    /// Whether the ParisKV rerank's `_score` reads its operands from tables laid out for it.
    pub rerank_decode_table: bool,
    /// Blocks of the ParisKV query kernel per KV head (`PariskvQuerySpec::subspace_blocks`),
    /// each ranking a share of the subspaces; at most one a subspace is used.
    pub pariskv_query_blocks: u32,
    /// Whether the plan's launch also scores the tail (the tokens past the last encoded
    /// segment, `PlanSpec::tail`) in blocks beside its own, instead of an oracle launch after
    /// the scan: one launch fewer a layer for every plane method. On by default; false keeps
    /// the oracle's launch (`step-bench --tail-in-oracle`; the GPU tests
    /// `gpu_step_tail_in_the_oracle_g{4,7}`).
    pub tail_in_plan: bool,
    /// Whether the plan loads its run tables' segment pointers in batches before it stores
    /// the entries (`PlanSpec::batched_runs`): a round trip a batch instead of one an entry
    /// (16 a thread at 1M tokens). Opt-in: exact on an H100 but no faster there (HBM 1M
    /// 6.574 ms a step against 6.535 / 6.562 without, 2026-12-06, `bench/NOTES.md`), so the
    /// plan at 1M is not bound by those round trips (`step-bench --plan-batched-runs`; the
    /// GPU test `gpu_plan_batched_run_tables`).
    pub plan_batched_runs: bool,
    /// Blocks a (KV head, sequence) of the plan's launch that share its run tables
    /// (`PlanSpec::run_blocks`; 1 to `PlanSpec::MAX_RUN_BLOCKS`): each works out the same plan
    /// and writes its share of the entries, so that a long sequence's tables are written by
    /// several multiprocessors. `None`, the default: `PlanSpec::run_blocks_for` the shape (1
    /// up to 8 segments, 256k tokens, at D = 128; 4 at 1M: the HBM step at 1M 6.397 ms against 6.566 /
    /// 6.631 with one, H100, 2026-12-06, `bench/results/plan-run-blocks-h100-2026-12-06-e5d41f1-*`);
    /// `Some(n)`: n (`step-bench --plan-run-blocks N`; the GPU tests
    /// `gpu_plan_shared_run_tables`, `gpu_step_plan_run_blocks_g4`).
    pub plan_run_blocks: Option<usize>,
    /// Thread blocks a segment of the plane scan's launch (1 to the segment's tiles,
    /// `ScanSpec::segment_tiles`; uneven stripes differ by one tile). `None`, the default: the
    /// spec's stripes (`ScanSpec::stripe_tiles`: up to 8 tiles a block while the grid keeps
    /// 2,048 blocks), fitted to one wave of the GPU in HBM where `scan_one_wave` asks (the
    /// default). `Some(n)`: n, whatever the GPU (`step-bench --scan-stripes N`; the GPU test
    /// `gpu_step_scan_stripes_g4`).
    pub scan_stripes: Option<usize>,
    /// Whether the HBM plane scan's grid is fitted to one wave of the GPU where the spec's
    /// grid takes more (and `scan_stripes` is unset): the most stripes a segment whose blocks
    /// are all resident at once (the scan kernel's occupancy times the multiprocessors), so
    /// that no block waits for a slot and each runs longer (`launches::fit_scan_to_one_wave`).
    /// On by default: at 1M on an H100 the spec's 2,048 blocks (2.2 waves of the record's
    /// tile) took 103.8-104.5 us and 3 stripes a segment (768 blocks, one wave) 99.3-100.9;
    /// 2, 4, 5, 6, 7 and 10 were no faster, 4 (1.1 waves) 115.6
    /// (`bench/results/scan-stripes-h100-2026-12-07-8d3f916-*`); with the fit, 128k 21.73 ->
    /// 19.49 us (41 stripes), 256k 34.37 -> 32.13 (20), the HBM step 2.124 -> 2.054 ms at 128k,
    /// 2.865 -> 2.825 at 256k, 5.765 -> 5.627 at 1M (`bench/results/scan-one-wave-h100-2026-12-07-1bdca2d-*`);
    /// 32k's grid is one wave already; at batch 8 x 32k the HBM step 3.537 -> 3.363 ms
    /// (2026-12-07, `bench/results/refresh-onewave-h100-2026-12-07-f6f1a1e-es-*`). The
    /// autotuner times the HBM scan candidates at this grid too. `false`: the spec's grid
    /// (`step-bench --scan-spec-grid`).
    pub scan_one_wave: bool,
    /// Whether lane pairs write the plan's run-table entries, one 16-byte half a lane
    /// (`PlanSpec::paired_runs`): a warp's store then writes whole sectors. On by default
    /// (exact on an H100, memcheck clean; the plan at 1M 11.58 -> 10.94 us, the step within its
    /// noise, 2026-12-06); false writes an entry from one lane (`step-bench
    /// --plan-unpaired-runs`; the GPU tests `gpu_plan_paired_run_tables`,
    /// `gpu_step_plan_unpaired_runs_g4`); ignored with `plan_batched_runs`.
    pub plan_paired_runs: bool,
    /// Whether fathom's plan finds its water line directly (`PlanSpec::direct_line`): the
    /// channels' depth boundaries sorted by level (by one warp), the largest one over the
    /// budget found by binary searches and the 30 halvings replayed against it by every
    /// thread, two block barriers instead of one a bisection round; the same plan bit for bit.
    /// Opt-in: with the levels' ranks counted by every thread exact on an H100 but no faster
    /// (the plan 9.22 us at 32k both ways, 2026-12-07); the warp's sort that replaced the
    /// count is not yet timed (`step-bench --plan-direct-line`; the GPU tests
    /// `gpu_plan_direct_line_matches_reference`, `gpu_step_plan_direct_line_g{4,7}`); the
    /// other methods ignore it.
    pub plan_direct_line: bool,
    /// Whether attention's blocks of a query head merge their partials in a thread-block
    /// cluster (`AttentionSpec::cluster_merge`, taken where the head has 2 to 8 blocks; sm_90)
    /// instead of through global memory and an arrival count. Opt-in: exact on an H100 and
    /// memcheck clean, but no faster (the 32k attention 10.62 us against 10.59, the HBM step
    /// at 32k 1.400 / 1.411 ms against 1.391-1.406; 2026-12-06) (`step-bench
    /// --attention-cluster-merge`; the GPU tests
    /// `gpu_attention_cluster_merge_matches_the_reference`, `gpu_step_attention_cluster_merge_g4`).
    pub attention_cluster_merge: bool,
    /// Whether attention asks L2 for every row of a block's share before its first batch
    /// loads (`AttentionSpec::prefetch_rows`): the batches after the first then wait on L2,
    /// not on HBM. Opt-in: exact on an H100 but slower there (HBM 32k fathom(48) 1.318 ->
    /// 1.340 ms a step, 2026-12-07; `step-bench --attention-prefetch`; the GPU tests
    /// `gpu_attention_prefetched_rows_match_the_reference`,
    /// `gpu_step_attention_prefetch_rows_g4`).
    pub attention_prefetch_rows: bool,
    /// Whether a peaks select (`SelectAlgorithm::peaks`: the algorithm chosen, from a record
    /// or `select_algorithm`, is one of the four) takes its floor from two of the three radix
    /// passes over the peaks (`SelectSpec::coarse_floor`): a pass and three block barriers
    /// fewer, for more hot tiles and survivors; the other selects ignore it. On by default
    /// (exact on an H100, memcheck clean; the HBM step at 32k ~1.5% faster, the 32k select
    /// 17.22 -> 16.93 us and the 1M `_chunk` 31.39 -> 30.56, 2026-12-06); false takes the
    /// exact k-th peak (`step-bench --select-full-floor`; the GPU tests
    /// `gpu_step_select_coarse_floor_g{4,7}`, and `gpu_select`'s `_cf` forms).
    pub select_coarse_floor: bool,
    /// Whether a peaks select that streams the scores (`SelectAlgorithm::owns_tiles`: peaks,
    /// peaks_head) reads each peak tile from the one thread that owns it
    /// (`SelectSpec::owned_tiles`): peaks kept in registers for the radix passes, the same
    /// selection; the other selects ignore it. Opt-in: exact on an H100 and memcheck clean, but
    /// no faster (the 32k one-block `_chunk` 16.51 -> 16.77 us warm, 2% fewer warp
    /// instructions; the HBM step at 32k 1.372/1.374 -> 1.386/1.393 ms; 2026-12-06,
    /// `bench/results/owned-tiles-h100-2026-12-06-b1026a1-*`) (`step-bench
    /// --select-owned-tiles`; the GPU tests `gpu_step_select_owned_tiles_g{4,7}`, and
    /// `gpu_select`'s `_ot` forms).
    pub select_owned_tiles: bool,
    /// Whether a one-block select (`SelectAlgorithm::one_block`: the record's or
    /// `select_algorithm`'s, the short contexts' choice) runs as the resident select instead
    /// (`SelectAlgorithm::Resident` at [`Tiles::RESIDENT_SELECT`]: the radix passes over keys
    /// held in registers, a middle of up to 32,768 tokens read once), whatever the record
    /// says: an A/B for a card whose record predates the resident select, which autotune's
    /// default grid tries since it won the HBM 32k select on the H100 (2026-12-06: the `_chunk`
    /// 16.51 -> 14.53 us, the HBM step at 32k 1.363 -> 1.304 ms; rows of several tiles, as at
    /// 128k, are read again by every pass and are slower). Off by default (`step-bench
    /// --select-resident`; the GPU tests `gpu_step_resident_select_g4`,
    /// `gpu_step_select_resident_g7`, and `gpu_select`'s `resident` form).
    pub select_resident: bool,
}

impl Default for Tiles {
    /// The defaults of `codegen::kernels::kernels_for`: short scan tiles in HBM (arithmetic
    /// bound), long ones from host memory (latency bound), 256 threads elsewhere.
    fn default() -> Self {
        Tiles {
            plan_threads: 256,
            gather: (4, 256),
            scan_hbm: (16, 256),
            scan_host: (64, 1024),
            scan_host_large_group: (32, 512),
            row_threads: 256,
            // Without a record, the select that reads the peaks the scan wrote (methods without
            // a plane scan run its streaming form, `SelectAlgorithm::without_scan_peaks`): on
            // the H100 (2026-12-05, a46678c) t512 i4 took 32 x 1M in 55.9 us and 32 x 32k in
            // 38.4 (the radix select's best tiles: 682 and 73.5), and the HBM step without a
            // record was 3.23 ms at 32k with the radix default.
            select: (512, 4),
            select_algorithm: SelectAlgorithm::ScanPeaks,
            attention: (256, 4),
            attention_splits: 1,
            attention_rows: AttentionRows::Store,
            pariskv_threads: crate::pariskv::THREADS,
            // The rerank as autotune finds it fastest at every context in HBM and all but 1M
            // from host memory (H100, 2026-12-05, f75ce70: whole rows, many blocks, decode
            // tables; HBM 1M 0.1375 ms against 1.88 without the tables).
            rerank_vector_loads: true,
            rerank_select: RerankSelect::Multiblock,
            rerank_decode_table: true,
            // One block a subspace (clamped to the head's subspaces): pariskv(100)'s HBM step at
            // 1M took 9.22 ms split over 16 blocks a head against 11.30 with one block ranking
            // the 16 subspaces in turn (H100, 2026-12-05, db8722f,
            // `bench/results/record-peaks-h100-2026-12-05-db8722f-step-pk-q*`).
            pariskv_query_blocks: 16,
            // One launch fewer a layer: the HBM step at 32k took 1.399 ms against 1.431 and
            // 1.451 with the oracle's launch (H100, 2026-12-06, c3b2949; 1M and host 1M within
            // noise), `bench/results/tail-plan-h100-2026-12-06-c3b2949-*`.
            tail_in_plan: true,
            plan_batched_runs: false,
            plan_run_blocks: None,
            scan_stripes: None,
            scan_one_wave: true,
            // Whole sectors a warp's store: the plan at 1M 11.58 -> 10.94 us (ncu, H100,
            // 2026-12-06, `bench/results/opt-ins-h100-2026-12-06-c4d0baa-*`).
            plan_paired_runs: true,
            plan_direct_line: false,
            attention_cluster_merge: false,
            attention_prefetch_rows: false,
            // Three block barriers fewer: the HBM step at 32k 1.373-1.379 ms against
            // 1.391-1.406 (H100, 2026-12-06, `bench/results/opt-ins-h100-2026-12-06-c4d0baa-*`).
            select_coarse_floor: true,
            select_owned_tiles: false,
            select_resident: false,
        }
    }
}

impl Tiles {
    /// The scan tile of `placement` for query groups of `group` heads (as
    /// `codegen::spec::ScanSpec::new` picks it).
    pub fn scan(&self, placement: Placement, group: usize) -> (usize, usize) {
        match placement {
            Placement::Hbm => self.scan_hbm,
            Placement::Host if group > 8 => self.scan_host_large_group,
            Placement::Host => self.scan_host,
        }
    }

    /// Whether a select of `algorithm` runs with the coarse floor (`SelectSpec::coarse_floor`)
    /// under these tiles: only the peaks algorithms have a floor to coarsen.
    pub fn coarse_floor_for(&self, algorithm: SelectAlgorithm) -> bool {
        self.select_coarse_floor && algorithm.peaks()
    }

    /// Whether a select of `algorithm` reads its peak tiles from owned tiles
    /// (`SelectSpec::owned_tiles`) under these tiles: only the peaks selects that stream the
    /// scores have tiles to own.
    pub fn owned_tiles_for(&self, algorithm: SelectAlgorithm) -> bool {
        self.select_owned_tiles && algorithm.owns_tiles()
    }

    /// `(threads, items_per_thread)` of the resident select that [`Tiles::select_resident`]
    /// runs: a middle of 32,768 tokens in one tile, 32 keys a thread (62 registers, no spill).
    pub const RESIDENT_SELECT: (u32, u32) = (1024, 32);

    /// The select the step runs, `(threads, items_per_thread, algorithm)`, for the select tile a
    /// record holds (`None`: these tiles' default), made resident where these tiles ask
    /// ([`Tiles::resident_for`]); `Err` gives back a tile that is not a select's or whose
    /// flags name no algorithm. The one rule of the step (`launches`) and of the autotuner,
    /// which times a scan writing its peaks where this select reads them.
    pub fn select_for(&self, recorded: Option<Tile>) -> Result<(u32, u32, SelectAlgorithm), Tile> {
        let chosen = match recorded {
            None => (self.select.0, self.select.1, self.select_algorithm),
            Some(
                tile @ Tile::Select {
                    threads,
                    items_per_thread,
                    ..
                },
            ) => match tile.select_algorithm() {
                Some(algorithm) => (threads, items_per_thread, algorithm),
                None => return Err(tile),
            },
            Some(tile) => return Err(tile),
        };
        Ok(self.resident_for(chosen))
    }

    /// The select tile to run for a chosen `(threads, items_per_thread, algorithm)` under these
    /// tiles: a one-block select becomes the resident one with `select_resident`.
    pub fn resident_for(&self, tile: (u32, u32, SelectAlgorithm)) -> (u32, u32, SelectAlgorithm) {
        if self.select_resident && tile.2.one_block() {
            let (threads, items) = Self::RESIDENT_SELECT;
            (threads, items, SelectAlgorithm::Resident)
        } else {
            tile
        }
    }
}

pub use codegen::spec::scan::fit_scan_tile;

/// `ceil(log2(tokens))`, 0 for at most one token.
pub fn context_bucket(tokens: usize) -> u32 {
    tokens.max(1).next_power_of_two().trailing_zeros()
}

/// Prints, once per process, which lookups the record in use did not answer (they use the
/// default tiles or transfer) and how to tune them.
pub(crate) fn warn_partly_tuned(what: &str, missing: &[&str]) {
    static WARNED: Once = Once::new();
    WARNED.call_once(|| {
        eprintln!(
            "fathom: the autotune record has no entry for {} of {what}; those use the \
             defaults. Re-run `cargo run --release -p autotune` on this GPU to tune them.",
            missing.join(", ")
        );
    });
}

/// Prints, once per process, that default tiles are in use and how to tune.
pub(crate) fn warn_untuned(what: &str) {
    static WARNED: Once = Once::new();
    WARNED.call_once(|| {
        eprintln!(
            "fathom: no autotune record for {what}; using default tiles and transfer. Tune this \
             GPU with `cargo run --release -p autotune` (records are read from \
             $FATHOM_TUNING_DIR, <cache dir>/tuning and the repository's runtime/records)."
        );
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_for_takes_the_recorded_select_or_the_default_and_refuses_other_tiles() {
        for resident in [false, true] {
            let tiles = Tiles {
                select_resident: resident,
                ..Tiles::default()
            };
            let default = (tiles.select.0, tiles.select.1, tiles.select_algorithm);
            assert_eq!(tiles.select_for(None), Ok(tiles.resident_for(default)));
            for algorithm in SelectAlgorithm::ALL {
                let tile = Tile::select(512, 4, algorithm);
                assert_eq!(
                    tiles.select_for(Some(tile)),
                    Ok(tiles.resident_for((512, 4, algorithm))),
                    "{algorithm:?}"
                );
            }
        }
        let scan = Tile::Scan {
            tile_words: 8,
            threads: 128,
            tensor_cores: true,
        };
        assert_eq!(Tiles::default().select_for(Some(scan)), Err(scan));
    }
}
