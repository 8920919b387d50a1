//! The specs of a step's stages: each stage's tile looked up in the tuning record, else the
//! decoder's defaults. The lookups run in a fixed order (transfer, fetch, attention, plan,
//! gather, scan, landmark, the ParisKV families, oracle, select), which is the order a plan's
//! `untuned` list names what a record did not answer.

use codegen::model::Basis;
use codegen::spec::pariskv::{self, RerankSelect};
use codegen::spec::{
    AttentionRows, AttentionSpec, Family, FetchSpec, GatherSpec, KernelSpec, KvRows, LandmarkSpec,
    OracleSpec, PariskvQuerySpec, PariskvRerankSpec, PariskvTopcSpec, PariskvVoteSpec, Placement,
    PlanSpec, ScanSpec, SelectSpec,
};

use super::{PariskvSpecs, PlanInputs, StepShape, StepSpecs};
use crate::step::request::Scoring;
use crate::step::StepError;
use crate::tuning::{fit_scan_tile, Tile, Tiles, Transfer, TuneKey, TunedFamily, Tuning};

/// Looks tiles up in the record, falling back to the defaults; remembers whether every lookup
/// was answered.
pub(super) struct TileChooser<'a> {
    pub(super) shape: StepShape,
    pub(super) tuning: Option<&'a dyn Tuning>,
    pub(super) bucket: u32,
    pub(super) tuned: bool,
    pub(super) untuned: Vec<&'static str>,
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

    /// The rerank's tile: a `Rerank` tile, or the `Threads` tile of a record written before it
    /// (the plain `_score` and the one-block top-k); `default` (the same tile with its threads
    /// left unset) when no record answers.
    fn rerank(
        &mut self,
        placement: Placement,
        default: PariskvRerankSpec,
    ) -> Result<PariskvRerankSpec, StepError> {
        let family = TunedFamily::PariskvRerank;
        match self.lookup(family, placement) {
            None => Ok(default),
            Some(Tile::Threads(threads)) => Ok(PariskvRerankSpec {
                threads,
                vector_loads: false,
                select: RerankSelect::Single,
                decode_table: false,
                ..default
            }),
            Some(Tile::Rerank {
                threads,
                vector_loads,
                multiblock,
                decode_table,
            }) => Ok(PariskvRerankSpec {
                threads,
                vector_loads,
                select: if multiblock {
                    RerankSelect::Multiblock
                } else {
                    RerankSelect::Single
                },
                decode_table,
                ..default
            }),
            Some(tile) => Err(Self::mismatch(family, tile)),
        }
    }
}

/// The transfer in effect: for a plane method over a host store, the request's, else the
/// record's, else fused; `None` otherwise.
pub(super) fn transfer(inputs: &PlanInputs<'_>, chooser: &mut TileChooser<'_>) -> Option<Transfer> {
    let planes = matches!(inputs.scoring, Scoring::Planes { .. });
    let (d, g) = (inputs.shape.head_dim, inputs.shape.group);
    match (planes, inputs.shape.placement) {
        (true, Placement::Host) => Some(inputs.transfer.unwrap_or_else(|| {
            let recorded = inputs.tuning.and_then(|t| t.transfer(d, g, chooser.bucket));
            chooser.note("transfer", recorded.is_some());
            recorded.unwrap_or(Transfer::Fused)
        })),
        _ => None,
    }
}

/// The specs of every stage the method runs, checked.
pub(super) fn step_specs(
    inputs: &PlanInputs<'_>,
    transfer: Option<Transfer>,
    chooser: &mut TileChooser<'_>,
) -> Result<StepSpecs, StepError> {
    let tiles = inputs.tiles;
    let (fetch, attention) = fetch_attention(inputs.shape, tiles, chooser)?;
    let mut specs = StepSpecs {
        plan: None,
        gather: None,
        scan: None,
        oracle: None,
        landmark: None,
        select: None,
        pariskv: None,
        fetch,
        attention,
    };
    if let Scoring::Planes { method, .. } = inputs.scoring {
        specs.plan = Some(plan(inputs.shape, method, tiles, chooser)?);
        if transfer == Some(Transfer::CopyKernel) {
            specs.gather = Some(gather(inputs.shape, tiles, chooser)?);
        }
        specs.scan = Some(scan(inputs.shape, transfer, tiles, chooser)?);
    }
    if inputs.scoring == Scoring::Landmark {
        specs.landmark = Some(landmark(inputs.shape, tiles, chooser)?);
    }
    let pariskv = matches!(inputs.scoring, Scoring::Pariskv { .. });
    if pariskv {
        specs.pariskv = Some(pariskv_specs(inputs, chooser)?);
    }
    if inputs.scoring != Scoring::Dense && !pariskv {
        let (oracle, mut select) = oracle_select(inputs, chooser)?;
        // A select that reads the scan's peaks needs the scan to write them; the methods
        // without a plane scan read the scores for theirs.
        match specs.scan.as_mut() {
            Some(scan) if select.algorithm.scan_peaks() => scan.peaks = true,
            _ => {
                select.algorithm = select.algorithm.without_scan_peaks();
                select.owned_tiles = tiles.owned_tiles_for(select.algorithm);
            }
        }
        specs.oracle = Some(oracle);
        specs.select = Some(select);
    }
    validate(&specs)?;
    Ok(specs)
}

/// Fetch (in the rows' placement) and attention (HBM): every method runs them.
fn fetch_attention(
    shape: StepShape,
    tiles: &Tiles,
    chooser: &mut TileChooser<'_>,
) -> Result<(FetchSpec, AttentionSpec), StepError> {
    let (head_dim, group) = (shape.head_dim as u32, shape.group as u32);
    let fetch = FetchSpec {
        head_dim,
        group,
        threads: chooser.threads(TunedFamily::Fetch, shape.placement, tiles.row_threads)?,
        placement: shape.placement,
        kv_rows: shape.kv_rows,
    };
    let (threads, rows_per_warp, splits) =
        match chooser.lookup(TunedFamily::Attention, Placement::Hbm) {
            None => (tiles.attention.0, tiles.attention.1, tiles.attention_splits),
            Some(Tile::Attention {
                threads,
                rows_per_warp,
                splits,
            }) => (threads, rows_per_warp, splits),
            Some(tile) => return Err(TileChooser::mismatch(TunedFamily::Attention, tile)),
        };
    // From the store itself only in HBM: the rows in host memory are fetched once, not read
    // by every query head of a group.
    let rows = match shape.placement {
        Placement::Hbm => tiles.attention_rows,
        Placement::Host => AttentionRows::Fetched,
    };
    let attention = AttentionSpec {
        head_dim,
        group,
        threads,
        rows_per_warp,
        rows,
        kv_rows: match rows {
            AttentionRows::Store => shape.kv_rows,
            AttentionRows::Fetched => KvRows::Separate,
        },
        splits,
        cluster_merge: tiles.attention_cluster_merge
            && (2..=codegen::spec::MAX_CLUSTER_SPLITS).contains(&splits),
        prefetch_rows: tiles.attention_prefetch_rows,
    };
    Ok((fetch, attention))
}

/// The plan of a plane method (HBM: it reads the queries and `σ²`, not the store).
fn plan(
    shape: StepShape,
    method: codegen::spec::PlanMethod,
    tiles: &Tiles,
    chooser: &mut TileChooser<'_>,
) -> Result<PlanSpec, StepError> {
    let threads =
        chooser.threads(TunedFamily::Plan, Placement::Hbm, tiles.plan_threads as u32)? as usize;
    // The tail's rows are read where they live, as the oracle reads them; a plan of more
    // threads than a tail allows leaves it to the oracle.
    let tail = tiles.tail_in_plan && threads <= PlanSpec::TAIL_MAX_THREADS;
    Ok(PlanSpec {
        head_dim: shape.head_dim,
        group: shape.group,
        block: shape.block,
        segment_words: shape.segment_words,
        method,
        rotate: shape.basis == Basis::Klt,
        threads,
        tail: tail.then_some(shape.placement),
        tail_kv_rows: if tail {
            shape.kv_rows
        } else {
            KvRows::Separate
        },
        batched_runs: tiles.plan_batched_runs,
        run_blocks: match tiles.plan_run_blocks {
            Some(blocks) => blocks,
            // The batched loads write a head's tables from one block.
            None if tiles.plan_batched_runs => 1,
            None => PlanSpec::run_blocks_for(shape.max_seg, shape.head_dim, threads),
        },
        paired_runs: tiles.plan_paired_runs && !tiles.plan_batched_runs,
        direct_line: tiles.plan_direct_line && method == codegen::spec::PlanMethod::Fathom,
    })
}

/// The gather of the copy-kernel transfer (it reads mapped host memory).
fn gather(
    shape: StepShape,
    tiles: &Tiles,
    chooser: &mut TileChooser<'_>,
) -> Result<GatherSpec, StepError> {
    let (loads_in_flight, threads) = match chooser.lookup(TunedFamily::Gather, Placement::Host) {
        None => tiles.gather,
        Some(Tile::Gather {
            loads_in_flight,
            threads,
        }) => (loads_in_flight, threads),
        Some(tile) => return Err(TileChooser::mismatch(TunedFamily::Gather, tile)),
    };
    Ok(GatherSpec {
        head_dim: shape.head_dim,
        block: shape.block,
        segment_words: shape.segment_words,
        loads_in_flight,
        threads,
    })
}

/// The scan: fused from host memory with the fused transfer, else over HBM (the store or the
/// staging); the default tile is fitted to the segment.
fn scan(
    shape: StepShape,
    transfer: Option<Transfer>,
    tiles: &Tiles,
    chooser: &mut TileChooser<'_>,
) -> Result<ScanSpec, StepError> {
    let placement = if transfer == Some(Transfer::Fused) {
        Placement::Host
    } else {
        Placement::Hbm
    };
    let (tile_words, threads) =
        fit_scan_tile(tiles.scan(placement, shape.group), shape.segment_words);
    let default = ScanSpec {
        head_dim: shape.head_dim,
        group: shape.group,
        block: shape.block,
        segment_words: shape.segment_words,
        tile_words,
        threads,
        placement,
        tensor_cores: false,
        peaks: false,
    };
    match chooser.lookup(TunedFamily::Scan, placement) {
        None => Ok(default),
        Some(tile) => tile
            .on_scan(default)
            .ok_or_else(|| TileChooser::mismatch(TunedFamily::Scan, tile)),
    }
}

fn landmark(
    shape: StepShape,
    tiles: &Tiles,
    chooser: &mut TileChooser<'_>,
) -> Result<LandmarkSpec, StepError> {
    Ok(LandmarkSpec {
        head_dim: shape.head_dim as u32,
        group: shape.group as u32,
        threads: chooser.threads(TunedFamily::Landmark, shape.placement, tiles.row_threads)?,
        placement: shape.placement,
        kv_rows: shape.kv_rows,
    })
}

/// The ParisKV retrieval. Vote and rerank read the index rows, in the rows' placement (the
/// rerank's `_select` reads device memory only, but its `_score` dominates the family's memory
/// traffic); the top-C reads only the votes, in device memory.
fn pariskv_specs(
    inputs: &PlanInputs<'_>,
    chooser: &mut TileChooser<'_>,
) -> Result<PariskvSpecs, StepError> {
    let shape = inputs.shape;
    let (head_dim, group) = (shape.head_dim as u32, shape.group as u32);
    let placement = shape.placement;
    let default = inputs.tiles.pariskv_threads;
    let tiles = inputs.tiles;
    let mut rerank = chooser.rerank(
        placement,
        PariskvRerankSpec {
            head_dim,
            group,
            k_max: inputs.k_max as u32,
            threads: default,
            placement,
            vector_loads: tiles.rerank_vector_loads,
            select: tiles.rerank_select,
            decode_table: tiles.rerank_decode_table,
        },
    )?;
    // A many-block top-k that cannot hold two k_max a block at these threads (a tile tuned at
    // a smaller k_max) falls back to the one-block top-k: the outputs are the same.
    if rerank.validate().is_err() {
        rerank.select = RerankSelect::Single;
    }
    Ok(PariskvSpecs {
        query: PariskvQuerySpec {
            subspace_blocks: tiles
                .pariskv_query_blocks
                .clamp(1, pariskv::subspaces(head_dim)),
            ..PariskvQuerySpec::new(head_dim, group)
        },
        vote: PariskvVoteSpec {
            head_dim,
            threads: chooser.threads(TunedFamily::PariskvVote, placement, default)?,
            placement,
        },
        topc: PariskvTopcSpec {
            head_dim,
            threads: chooser.threads(TunedFamily::PariskvTopc, Placement::Hbm, default)?,
        },
        rerank,
    })
}

/// The oracle (the tail, or every token for `oracle`) and the select of every method with
/// scores.
fn oracle_select(
    inputs: &PlanInputs<'_>,
    chooser: &mut TileChooser<'_>,
) -> Result<(OracleSpec, SelectSpec), StepError> {
    let shape = inputs.shape;
    let tiles = inputs.tiles;
    let (head_dim, group) = (shape.head_dim as u32, shape.group as u32);
    let oracle = OracleSpec {
        head_dim,
        group,
        threads: chooser.threads(TunedFamily::Oracle, shape.placement, tiles.row_threads)?,
        placement: shape.placement,
        kv_rows: shape.kv_rows,
    };
    let (threads, items_per_thread, algorithm) = tiles
        .select_for(chooser.lookup(TunedFamily::Select, Placement::Hbm))
        .map_err(|tile| TileChooser::mismatch(TunedFamily::Select, tile))?;
    let select = SelectSpec {
        group,
        k_max: inputs.k_max as u32,
        threads,
        items_per_thread,
        algorithm,
        coarse_floor: tiles.coarse_floor_for(algorithm),
        owned_tiles: tiles.owned_tiles_for(algorithm),
    };
    Ok((oracle, select))
}

fn validate(specs: &StepSpecs) -> Result<(), StepError> {
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
