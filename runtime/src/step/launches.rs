//! The launch plan of one step as plain data: which kernels run, in which order, on which
//! grids, and how large every workspace buffer must be. Building it needs no GPU, so the CPU
//! tests check it; the executor only walks it.

use codegen::model::Basis;
use codegen::spec::launch::Launch;
use codegen::spec::select::{SelectStage, LOCAL, SINK};
use codegen::spec::shape::scales_per_channel;
use codegen::spec::{
    AttentionSpec, Family, FetchSpec, GatherSpec, KernelSpec, LandmarkSpec, OracleSpec,
    PariskvQuerySpec, PariskvRerankSpec, PariskvTopcSpec, PariskvVoteSpec, Placement, PlanSpec,
    ScanSpec, SelectSpec,
};

use super::request::{Scoring, Transfer};
use super::tuning::{context_bucket, fit_scan_tile, Tile, Tiles, TuneKey, TunedFamily, Tuning};
use super::StepError;
use crate::pariskv::{RetrievalSizes, Stage};

/// Tokens every query head selects beside its top-k (§6).
pub const ALWAYS: usize = (SINK + LOCAL) as usize;
/// The smallest token capacity a workspace is sized for.
pub const MIN_TOKEN_CAPACITY: usize = 4096;

/// The token capacity that serves contexts of up to `tokens`: at least
/// [`MIN_TOKEN_CAPACITY`], else `tokens` rounded up to a multiple of an eighth of its power of
/// two (at most 12.5% spare). Workspaces and grids are sized from it, so a step, and a graph
/// captured for it, serve every context up to the capacity without reallocation.
pub fn token_capacity(tokens: usize) -> usize {
    if tokens <= MIN_TOKEN_CAPACITY {
        return MIN_TOKEN_CAPACITY;
    }
    let unit = 1usize << (usize::BITS - 1 - tokens.leading_zeros() - 3);
    tokens.div_ceil(unit) * unit
}

/// What a step's launches depend on, all known on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepShape {
    /// `B`.
    pub batch: usize,
    /// `H`, KV heads.
    pub kv_heads: usize,
    /// `D`.
    pub head_dim: usize,
    /// `G`.
    pub group: usize,
    /// `BLK`.
    pub block: usize,
    /// `S`, words per plane per segment.
    pub segment_words: usize,
    /// Segments per (sequence, head) of the view's tables.
    pub max_seg: usize,
    /// The largest `n_total` of the batch.
    pub max_tokens: usize,
    /// Where the store and the K/V rows live.
    pub placement: Placement,
    /// The store basis (a rotated store plans on rotated queries).
    pub basis: Basis,
}

/// What one operation of the step does; the executor maps it to its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Zero the plan's staging status word (a memset).
    ClearStatus,
    /// The plan kernel; `staged`: it also writes the staged run table.
    Plan { staged: bool },
    /// The gather kernel (copy-kernel transfer).
    Gather,
    /// One copy per active run (memcpy transfer), issued from the plan read back.
    RunCopies,
    /// The plane scan of the source (`staged = false`) or staged run table.
    Scan { staged: bool },
    /// Landmark scores of the stored tokens.
    LandmarkScan,
    /// Exact scores: of the tail `[n_stored, n_total)`, or of every token (`whole`).
    Oracle { whole: bool },
    /// One of the select launches (ten, or twelve for the compacting variant).
    Select(SelectStage),
    /// One of the six ParisKV retrieval launches (`pariskv`), which end in the select
    /// family's outputs.
    Pariskv(Stage),
    /// `dense`: the counts of every head set to `n_total` by device copies.
    DenseCounts,
    /// The winner rows into HBM.
    Fetch,
    /// Exact attention over the selected rows.
    Attention,
}

/// A kernel launch: the spec (its module), the entry point and the geometry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelLaunch {
    pub spec: KernelSpec,
    pub entry: String,
    pub launch: Launch,
}

/// One operation of the step, in stream order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    pub role: Role,
    /// The kernel, for the roles that launch one.
    pub kernel: Option<KernelLaunch>,
}

/// Elements of every workspace buffer (0: the step does not use it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkspaceSizes {
    /// `f32` `[B][H][G][D]`.
    pub q_store: usize,
    /// `u8` `[B][H][D]`.
    pub depths: usize,
    /// `u32` `[B][H][4]`.
    pub class_count: usize,
    /// `u64` `[B][H][max_seg][D][4]`, the source run table.
    pub runs: usize,
    /// `u64`, the staged run table (same shape).
    pub staged_runs: usize,
    /// `u64` `[B*H*max_seg][planes * S]`.
    pub stage_words: usize,
    /// `u16` `[B*H*max_seg][D * SPC]`.
    pub stage_scales: usize,
    /// `i32` `[3]`.
    pub plan_status: usize,
    /// `f32` `[B][H][G][ld_scores]`.
    pub scores: usize,
    /// `u32` select radix state.
    pub select_state: usize,
    /// `u32` select per-chunk counts.
    pub chunk_counts: usize,
    /// `u32` `(index, key)` pairs of the compacting select's candidates (0 for the plain one).
    pub select_candidates: usize,
    /// `u32` `{offset, count}` per query head and chunk of the compacting select's candidates.
    pub select_candidate_runs: usize,
    /// `i32` union scratch.
    pub scratch: usize,
    /// `i32` `[B*H*G][k+36]` (`sel` and `sel_pos` each).
    pub sel: usize,
    /// `i32` `[B*H*G]`.
    pub sel_count: usize,
    /// `i32` `[B*H][G*k+36]`.
    pub uni: usize,
    /// `i32` `[B*H]`.
    pub uni_count: usize,
    /// `u16` `[B*H][G*k+36][D]` (`k_sel` and `v_sel` each).
    pub rows: usize,
    /// `f32` `[B][H][G][D]`.
    pub out: usize,
    /// `dense`: `i32` `[B*H][G*k+36]` holding `0, 1, 2 ...` per row (the union of every token).
    pub dense_uni: usize,
    /// `dense`: `i32` `[B*H*G][k+36]` holding `0, 1, 2 ...` per row (every row position).
    pub dense_sel: usize,
    /// `pariskv`: the retrieval's buffers (all zero for the other methods).
    pub pariskv: RetrievalSizes,
}

impl WorkspaceSizes {
    /// Device bytes of the whole workspace.
    pub fn bytes(&self) -> usize {
        4 * (self.q_store + self.class_count + self.plan_status + self.scores)
            + self.depths
            + 8 * (self.runs + self.staged_runs + self.stage_words)
            + 2 * (self.stage_scales + 2 * self.rows)
            + 4 * (self.select_state + self.chunk_counts + self.scratch + 2 * self.sel)
            + 4 * (self.select_candidates + self.select_candidate_runs)
            + 4 * (self.sel_count + self.uni + self.uni_count + self.out)
            + 4 * (self.dense_uni + self.dense_sel)
            + self.pariskv.bytes()
    }
}

/// The ParisKV kernels of a `pariskv` step (§12), in launch order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PariskvSpecs {
    pub query: PariskvQuerySpec,
    pub vote: PariskvVoteSpec,
    pub topc: PariskvTopcSpec,
    pub rerank: PariskvRerankSpec,
}

/// The kernels of a step, after tiles are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepSpecs {
    pub plan: Option<PlanSpec>,
    pub gather: Option<GatherSpec>,
    pub scan: Option<ScanSpec>,
    pub oracle: Option<OracleSpec>,
    pub landmark: Option<LandmarkSpec>,
    pub select: Option<SelectSpec>,
    /// The retrieval kernels of `pariskv`.
    pub pariskv: Option<PariskvSpecs>,
    pub fetch: FetchSpec,
    pub attention: AttentionSpec,
}

/// Everything one step launches and needs.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchPlan {
    pub shape: StepShape,
    pub scoring: Scoring,
    /// The transfer in effect (`None`: the store is in HBM, or the method reads no planes).
    pub transfer: Option<Transfer>,
    pub specs: StepSpecs,
    pub operations: Vec<Operation>,
    pub sizes: WorkspaceSizes,
    /// Tokens per sequence the grids and buffers serve.
    pub token_capacity: usize,
    /// Row stride of the scores, in floats.
    pub ld_scores: usize,
    /// The `k` the select, fetch and attention kernels get (for `dense`, `capacity − 36`, so
    /// that every token is a row; for `pariskv(k)`, the method's `k`).
    pub k: usize,
    /// Planes of staging per (sequence, head, segment) (0 without staging).
    pub stage_planes: usize,
    /// Whether the step can be captured in a CUDA graph (not with the memcpy transfer).
    pub capturable: bool,
    /// Whether a tuning record answered every lookup.
    pub tuned: bool,
    /// What a record was asked for and did not answer (families, or `transfer`), in lookup
    /// order; empty without a record or when it answered everything.
    pub untuned: Vec<&'static str>,
}

/// The decoder's fixed parameters that a plan depends on.
#[derive(Clone, Copy)]
pub struct PlanInputs<'a> {
    pub shape: StepShape,
    pub scoring: Scoring,
    /// The transfer asked for (`None`: the record's, else fused).
    pub transfer: Option<Transfer>,
    pub k: usize,
    pub k_max: usize,
    pub tiles: &'a Tiles,
    pub tuning: Option<&'a dyn Tuning>,
}

/// Looks tiles up in the record, falling back to the defaults; remembers whether every lookup
/// was answered.
struct TileChooser<'a> {
    shape: StepShape,
    tuning: Option<&'a dyn Tuning>,
    bucket: u32,
    tuned: bool,
    untuned: Vec<&'static str>,
}

impl TileChooser<'_> {
    fn lookup(&mut self, family: TunedFamily, placement: Placement) -> Option<Tile> {
        let key = TuneKey {
            family,
            head_dim: self.shape.head_dim,
            group: self.shape.group,
            placement,
            context_bucket: self.bucket,
        };
        let tile = self.tuning.and_then(|t| t.tile(&key));
        self.note(family.as_str(), tile.is_some());
        tile
    }

    fn note(&mut self, what: &'static str, answered: bool) {
        self.tuned &= answered;
        if self.tuning.is_some() && !answered && !self.untuned.contains(&what) {
            self.untuned.push(what);
        }
    }

    fn mismatch(family: TunedFamily, tile: Tile) -> StepError {
        StepError::Tuning {
            family: family.as_str(),
            tile: format!("{tile:?}"),
        }
    }

    fn threads(
        &mut self,
        family: TunedFamily,
        placement: Placement,
        default: u32,
    ) -> Result<u32, StepError> {
        match self.lookup(family, placement) {
            None => Ok(default),
            Some(Tile::Threads(t)) => Ok(t),
            Some(tile) => Err(Self::mismatch(family, tile)),
        }
    }
}

/// Builds the launch plan of a step (no GPU needed).
pub fn launch_plan(inputs: &PlanInputs<'_>) -> Result<LaunchPlan, StepError> {
    let shape = inputs.shape;
    let (b, h, d, g) = (shape.batch, shape.kv_heads, shape.head_dim, shape.group);
    // `pariskv(k)` carries its own k; the request's is ignored.
    let asked_k = match inputs.scoring {
        Scoring::Pariskv { k } => k,
        _ => inputs.k,
    };
    if asked_k > inputs.k_max && inputs.scoring != Scoring::Dense {
        return Err(StepError::K {
            k: asked_k,
            k_max: inputs.k_max,
        });
    }
    let capacity = token_capacity(shape.max_tokens);
    let mut chooser = TileChooser {
        shape,
        tuning: inputs.tuning,
        bucket: context_bucket(shape.max_tokens),
        tuned: inputs.tuning.is_some(),
        untuned: Vec::new(),
    };
    let tiles = inputs.tiles;
    let planes = matches!(inputs.scoring, Scoring::Planes { .. });
    let transfer = match (planes, shape.placement) {
        (true, Placement::Host) => Some(inputs.transfer.unwrap_or_else(|| {
            let recorded = inputs.tuning.and_then(|t| t.transfer(d, g, chooser.bucket));
            chooser.note("transfer", recorded.is_some());
            recorded.unwrap_or(Transfer::Fused)
        })),
        _ => None,
    };
    let staged = matches!(transfer, Some(Transfer::Memcpy | Transfer::CopyKernel));
    let row_placement = shape.placement;
    let (head_dim, group) = (d as u32, g as u32);

    // Specs of the stages this method runs.
    let mut specs = StepSpecs {
        plan: None,
        gather: None,
        scan: None,
        oracle: None,
        landmark: None,
        select: None,
        pariskv: None,
        fetch: FetchSpec {
            head_dim,
            group,
            threads: chooser.threads(TunedFamily::Fetch, row_placement, tiles.row_threads)?,
            placement: row_placement,
        },
        attention: {
            let (threads, rows_per_warp) =
                match chooser.lookup(TunedFamily::Attention, Placement::Hbm) {
                    None => tiles.attention,
                    Some(Tile::Attention {
                        threads,
                        rows_per_warp,
                    }) => (threads, rows_per_warp),
                    Some(tile) => return Err(TileChooser::mismatch(TunedFamily::Attention, tile)),
                };
            AttentionSpec {
                head_dim,
                group,
                threads,
                rows_per_warp,
            }
        },
    };
    if let Scoring::Planes { method, .. } = inputs.scoring {
        specs.plan = Some(PlanSpec {
            head_dim: d,
            group: g,
            block: shape.block,
            segment_words: shape.segment_words,
            method,
            rotate: shape.basis == Basis::Klt,
            threads: chooser.threads(
                TunedFamily::Plan,
                Placement::Hbm,
                tiles.plan_threads as u32,
            )? as usize,
        });
        if transfer == Some(Transfer::CopyKernel) {
            let (loads_in_flight, threads) =
                match chooser.lookup(TunedFamily::Gather, Placement::Host) {
                    None => tiles.gather,
                    Some(Tile::Gather {
                        loads_in_flight,
                        threads,
                    }) => (loads_in_flight, threads),
                    Some(tile) => return Err(TileChooser::mismatch(TunedFamily::Gather, tile)),
                };
            specs.gather = Some(GatherSpec {
                head_dim: d,
                block: shape.block,
                segment_words: shape.segment_words,
                loads_in_flight,
                threads,
            });
        }
        let scan_placement = if transfer == Some(Transfer::Fused) {
            Placement::Host
        } else {
            Placement::Hbm
        };
        let default = tiles.scan(scan_placement, g);
        let (tile_words, threads) = match chooser.lookup(TunedFamily::Scan, scan_placement) {
            None => fit_scan_tile(default, shape.segment_words),
            Some(Tile::Scan {
                tile_words,
                threads,
            }) => (tile_words, threads),
            Some(tile) => return Err(TileChooser::mismatch(TunedFamily::Scan, tile)),
        };
        specs.scan = Some(ScanSpec {
            head_dim: d,
            group: g,
            block: shape.block,
            segment_words: shape.segment_words,
            tile_words,
            threads,
            placement: scan_placement,
        });
    }
    if inputs.scoring == Scoring::Landmark {
        specs.landmark = Some(LandmarkSpec {
            head_dim,
            group,
            threads: chooser.threads(TunedFamily::Landmark, row_placement, tiles.row_threads)?,
            placement: row_placement,
        });
    }
    let pariskv = matches!(inputs.scoring, Scoring::Pariskv { .. });
    if pariskv {
        // Vote and rerank read the index rows, in the rows' placement (the rerank's `_select`
        // reads device memory only, but its `_score` dominates the family's memory traffic);
        // the top-C reads only the votes, in device memory.
        let default = tiles.pariskv_threads;
        specs.pariskv = Some(PariskvSpecs {
            query: PariskvQuerySpec { head_dim, group },
            vote: PariskvVoteSpec {
                head_dim,
                threads: chooser.threads(TunedFamily::PariskvVote, row_placement, default)?,
                placement: row_placement,
            },
            topc: PariskvTopcSpec {
                head_dim,
                threads: chooser.threads(TunedFamily::PariskvTopc, Placement::Hbm, default)?,
            },
            rerank: PariskvRerankSpec {
                head_dim,
                group,
                k_max: inputs.k_max as u32,
                threads: chooser.threads(TunedFamily::PariskvRerank, row_placement, default)?,
                placement: row_placement,
            },
        });
    }
    if inputs.scoring != Scoring::Dense && !pariskv {
        specs.oracle = Some(OracleSpec {
            head_dim,
            group,
            threads: chooser.threads(TunedFamily::Oracle, row_placement, tiles.row_threads)?,
            placement: row_placement,
        });
        let (threads, items_per_thread, compact) =
            match chooser.lookup(TunedFamily::Select, Placement::Hbm) {
                None => (tiles.select.0, tiles.select.1, tiles.select_compact),
                Some(Tile::Select {
                    threads,
                    items_per_thread,
                    compact,
                }) => (threads, items_per_thread, compact),
                Some(tile) => return Err(TileChooser::mismatch(TunedFamily::Select, tile)),
            };
        specs.select = Some(SelectSpec {
            group,
            k_max: inputs.k_max as u32,
            threads,
            items_per_thread,
            compact,
        });
    }
    validate_specs(&specs)?;

    let dense = inputs.scoring == Scoring::Dense;
    let k = if dense { capacity - ALWAYS } else { asked_k };
    let stage_planes = match inputs.scoring {
        Scoring::Planes { max_planes, .. } if staged => max_planes,
        _ => 0,
    };
    let (bw, bh, bhg) = (b as u64, h as u64, (b * h * g) as u64);
    let mut ops = Vec::new();
    let kernel = |spec: KernelSpec, entry: String, launch: Launch| {
        Some(KernelLaunch {
            spec,
            entry,
            launch,
        })
    };
    let dims = |((gx, gy, gz), (tx, ty, tz), shared): codegen::spec::shape::LaunchDims| Launch {
        grid: [gx, gy, gz],
        block: [tx, ty, tz],
        shared_bytes: shared,
    };
    let mut sizes = WorkspaceSizes {
        sel_count: b * h * g,
        uni_count: b * h,
        rows: b * h * (g * k + ALWAYS) * d,
        out: b * h * g * d,
        ..WorkspaceSizes::default()
    };

    // Scoring.
    if let (Some(plan), Some(scan)) = (specs.plan, specs.scan) {
        let table = b * h * shape.max_seg * d * 4;
        sizes.q_store = b * h * g * d;
        sizes.depths = b * h * d;
        sizes.class_count = b * h * 4;
        sizes.runs = table;
        sizes.plan_status = 3;
        if staged {
            let regions = b * h * shape.max_seg;
            sizes.staged_runs = table;
            sizes.stage_words = regions * stage_planes * shape.segment_words;
            sizes.stage_scales = regions * d * scales_per_channel(shape.segment_words, shape.block);
            ops.push(Operation {
                role: Role::ClearStatus,
                kernel: None,
            });
        }
        ops.push(Operation {
            role: Role::Plan { staged },
            kernel: kernel(
                plan.into(),
                KernelSpec::from(plan).kernel_name(),
                dims(plan.launch_dims(b, h)),
            ),
        });
        match transfer {
            Some(Transfer::CopyKernel) => {
                let gather = specs.gather.expect("copy-kernel has a gather spec");
                ops.push(Operation {
                    role: Role::Gather,
                    kernel: kernel(
                        gather.into(),
                        KernelSpec::from(gather).kernel_name(),
                        dims(gather.launch_dims(b, h, shape.max_seg)),
                    ),
                });
            }
            Some(Transfer::Memcpy) => ops.push(Operation {
                role: Role::RunCopies,
                kernel: None,
            }),
            _ => {}
        }
        ops.push(Operation {
            role: Role::Scan { staged },
            kernel: kernel(
                scan.into(),
                KernelSpec::from(scan).kernel_name(),
                dims(scan.launch_dims(b, h, shape.max_seg)),
            ),
        });
    }
    if let Some(landmark) = specs.landmark {
        ops.push(Operation {
            role: Role::LandmarkScan,
            kernel: kernel(
                landmark.into(),
                landmark.scan_entry(),
                landmark.launch_scan(bw, bh, capacity as u64)?,
            ),
        });
    }
    if let Some(oracle) = specs.oracle {
        let whole = inputs.scoring == Scoring::Oracle;
        // The tail is shorter than a block; the oracle's blocks stride, so any grid is correct.
        let rows = if whole { capacity } else { shape.block };
        ops.push(Operation {
            role: Role::Oracle { whole },
            kernel: kernel(
                oracle.into(),
                KernelSpec::from(oracle).kernel_name(),
                oracle.launch(bw, bh, rows as u64)?,
            ),
        });
    }

    // Selection.
    if let Some(select) = specs.select {
        sizes.scores = bhg as usize * capacity;
        let plan = select.plan(bw, bh, capacity as u64, k as u64)?;
        sizes.select_state = plan.state_words as usize;
        sizes.chunk_counts = plan.chunk_count_words as usize;
        sizes.select_candidates = plan.candidate_words as usize;
        sizes.select_candidate_runs = plan.candidate_run_words as usize;
        sizes.scratch = plan.scratch_words as usize;
        sizes.sel = plan.sel_words as usize;
        sizes.uni = plan.uni_words as usize;
        for (stage, launch) in plan.launches {
            ops.push(Operation {
                role: Role::Select(stage),
                kernel: kernel(select.into(), select.entry(stage), launch),
            });
        }
    } else if let Some(pk) = specs.pariskv {
        let (topc, chunk_words) = pk.topc.launch(bw, bh, capacity as u64)?;
        let retrieval = RetrievalSizes::new(b * h, d, capacity, chunk_words as usize);
        sizes.pariskv = retrieval;
        sizes.sel = b * h * g * (k + ALWAYS);
        sizes.uni = b * h * (g * k + ALWAYS);
        let launches = [
            (Stage::Query, pk.query.into(), pk.query.kernel_name(), {
                pk.query.launch(bw, bh)?
            }),
            (
                Stage::Vote,
                pk.vote.into(),
                pk.vote.kernel_name(),
                pk.vote.launch(bw, bh, capacity as u64)?,
            ),
            (
                Stage::TopcCount,
                pk.topc.into(),
                pk.topc.count_entry(),
                topc,
            ),
            (
                Stage::TopcWrite,
                pk.topc.into(),
                pk.topc.write_entry(),
                topc,
            ),
            (
                Stage::RerankScore,
                pk.rerank.into(),
                pk.rerank.score_entry(),
                pk.rerank.launch_score(bw, bh, retrieval.ld_cand as u64)?,
            ),
            (
                Stage::RerankSelect,
                pk.rerank.into(),
                pk.rerank.select_entry(),
                pk.rerank.launch_select(bw, bh)?,
            ),
        ];
        for (stage, spec, entry, launch) in launches {
            ops.push(Operation {
                role: Role::Pariskv(stage),
                kernel: kernel(spec, entry, launch),
            });
        }
    } else {
        sizes.dense_uni = b * h * (g * k + ALWAYS);
        sizes.dense_sel = b * h * g * (k + ALWAYS);
        ops.push(Operation {
            role: Role::DenseCounts,
            kernel: None,
        });
    }

    // Rows and attention. `dense` has at most `capacity` rows per head however large its
    // stride, so its fetch grid is sized for that many.
    let fetch_k = if dense {
        (capacity - ALWAYS).div_ceil(g)
    } else {
        k
    };
    let fetch = specs.fetch;
    ops.push(Operation {
        role: Role::Fetch,
        kernel: kernel(
            fetch.into(),
            KernelSpec::from(fetch).kernel_name(),
            fetch.launch(bw, bh, fetch_k as u64)?,
        ),
    });
    let attention = specs.attention;
    ops.push(Operation {
        role: Role::Attention,
        kernel: kernel(
            attention.into(),
            KernelSpec::from(attention).kernel_name(),
            attention.launch(bw, bh)?,
        ),
    });

    Ok(LaunchPlan {
        shape,
        scoring: inputs.scoring,
        transfer,
        specs,
        operations: ops,
        sizes,
        token_capacity: capacity,
        ld_scores: capacity,
        k,
        stage_planes,
        capturable: transfer != Some(Transfer::Memcpy),
        tuned: chooser.tuned,
        untuned: chooser.untuned,
    })
}

fn validate_specs(specs: &StepSpecs) -> Result<(), StepError> {
    if let Some(pk) = specs.pariskv {
        let all: [KernelSpec; 4] = [
            pk.query.into(),
            pk.vote.into(),
            pk.topc.into(),
            pk.rerank.into(),
        ];
        for spec in all {
            spec.validate()?;
        }
    }
    let all: [Option<KernelSpec>; 8] = [
        specs.plan.map(Into::into),
        specs.gather.map(Into::into),
        specs.scan.map(Into::into),
        specs.oracle.map(Into::into),
        specs.landmark.map(Into::into),
        specs.select.map(Into::into),
        Some(specs.fetch.into()),
        Some(specs.attention.into()),
    ];
    for spec in all.into_iter().flatten() {
        spec.validate()?;
    }
    Ok(())
}
