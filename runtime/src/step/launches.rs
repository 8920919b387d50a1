//! The launch plan of one step as plain data: which kernels run, in which order, on which
//! grids, and how large every workspace buffer must be. Building it needs no GPU, so the CPU
//! tests check it; the executor only walks it.

mod specs;
mod stages;

use codegen::model::Basis;
use codegen::spec::launch::Launch;
use codegen::spec::select::{SelectStage, LOCAL, SINK};
use codegen::spec::{
    AttentionRows, AttentionSpec, FetchSpec, GatherSpec, KernelSpec, KvRows, LandmarkSpec,
    OracleSpec, PariskvQuerySpec, PariskvRerankSpec, PariskvTopcSpec, PariskvVoteSpec, Placement,
    PlanSpec, ScanSpec, SelectSpec,
};

use super::request::Scoring;
use super::StepError;
use crate::pariskv::{RetrievalSizes, Stage};
use crate::tuning::Transfer;
use crate::tuning::{context_bucket, Tiles, Tuning};
use specs::TileChooser;
use stages::Stages;

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
    /// How the K/V rows are laid out (the oracle, landmark and fetch kernels follow it).
    pub kv_rows: KvRows,
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
    /// One of the select launches (ten; twelve for the compacting variant, three for the
    /// one-read one).
    Select(SelectStage),
    /// One of the ParisKV retrieval launches (`pariskv`: six, more with the many-block top-k),
    /// which end in the select family's outputs.
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
    /// `u32` `[B][H][G][ld_peaks]`: the largest key of every 32-token half the scan scored,
    /// which a scan-peaks select reads (`ScanSpec::peaks`; 0 for the other selects).
    pub peaks: usize,
    /// `u32` select radix state (0 for the one-read select).
    pub select_state: usize,
    /// `u32` select per-chunk counts.
    pub chunk_counts: usize,
    /// `u32` `(index, key)` pairs of the compacting or one-read select's candidates (0 for the
    /// plain one).
    pub select_candidates: usize,
    /// `u32` `{offset, count}` per query head and chunk of the compacting select's candidates.
    pub select_candidate_runs: usize,
    /// `u32` per query head: the fused one-read select's arrival counters (allocated zeroed,
    /// left zero by every launch; 0 for the other selects).
    pub select_arrivals: usize,
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
    /// `f32` `[B*H*G][S][D+2]`: attention's partial results over S blocks a query head (0
    /// with one).
    pub attention_partials: usize,
    /// `u32` per query head: attention's arrival counters (allocated zeroed, left zero by
    /// every launch; 0 with one block a query head).
    pub attention_arrivals: usize,
    /// `dense`: `i32` `[B*H][G*k+36]` holding `0, 1, 2 ...` per row (the union of every token).
    pub dense_uni: usize,
    /// `dense`: `i32` `[B*H*G][k+36]` holding `0, 1, 2 ...` per row (every row position).
    pub dense_sel: usize,
    /// `pariskv`: the retrieval's buffers (all zero for the other methods).
    pub pariskv: RetrievalSizes,
}

impl WorkspaceSizes {
    /// Device bytes of the workspace by what they hold (SPEC §9's HBM footprint): `plan`
    /// (queries in the store basis, depths, class counts, status), `staging` (run tables,
    /// staged planes and scales), `scores`, `selections` (the select's workspaces, `sel`,
    /// `sel_pos`, the union and their counts), `rows` (the fetched K/V rows), `out`, `dense`
    /// (its row tables) and `pariskv` (the retrieval's buffers). They sum to
    /// [`WorkspaceSizes::bytes`].
    pub fn parts(&self) -> [(&'static str, usize); 8] {
        [
            (
                "plan",
                4 * (self.q_store + self.class_count + self.plan_status) + self.depths,
            ),
            (
                "staging",
                8 * (self.runs + self.staged_runs + self.stage_words) + 2 * self.stage_scales,
            ),
            ("scores", 4 * (self.scores + self.peaks)),
            (
                "selections",
                4 * (self.select_state + self.chunk_counts + self.scratch + 2 * self.sel)
                    + 4 * (self.select_candidates + self.select_candidate_runs)
                    + 4 * (self.select_arrivals + self.sel_count + self.uni + self.uni_count),
            ),
            ("rows", 2 * 2 * self.rows),
            (
                "out",
                4 * (self.out + self.attention_partials + self.attention_arrivals),
            ),
            ("dense", 4 * (self.dense_uni + self.dense_sel)),
            ("pariskv", self.pariskv.bytes()),
        ]
    }

    /// Every buffer `n` times as long: the shares of `n` head groups side by side
    /// (`DecoderConfig::head_groups`; `pariskv`'s retrieval buffers, which no grouped step
    /// uses, stay as they are).
    pub fn times(&self, n: usize) -> WorkspaceSizes {
        WorkspaceSizes {
            q_store: n * self.q_store,
            depths: n * self.depths,
            class_count: n * self.class_count,
            runs: n * self.runs,
            staged_runs: n * self.staged_runs,
            stage_words: n * self.stage_words,
            stage_scales: n * self.stage_scales,
            plan_status: n * self.plan_status,
            scores: n * self.scores,
            peaks: n * self.peaks,
            select_state: n * self.select_state,
            chunk_counts: n * self.chunk_counts,
            select_candidates: n * self.select_candidates,
            select_candidate_runs: n * self.select_candidate_runs,
            select_arrivals: n * self.select_arrivals,
            scratch: n * self.scratch,
            sel: n * self.sel,
            sel_count: n * self.sel_count,
            uni: n * self.uni,
            uni_count: n * self.uni_count,
            rows: n * self.rows,
            out: n * self.out,
            attention_partials: n * self.attention_partials,
            attention_arrivals: n * self.attention_arrivals,
            dense_uni: n * self.dense_uni,
            dense_sel: n * self.dense_sel,
            pariskv: self.pariskv,
        }
    }

    /// Device bytes of the whole workspace.
    pub fn bytes(&self) -> usize {
        4 * (self.q_store + self.class_count + self.plan_status + self.scores + self.peaks)
            + self.depths
            + 8 * (self.runs + self.staged_runs + self.stage_words)
            + 2 * (self.stage_scales + 2 * self.rows)
            + 4 * (self.select_state + self.chunk_counts + self.scratch + 2 * self.sel)
            + 4 * (self.select_candidates + self.select_candidate_runs + self.select_arrivals)
            + 4 * (self.sel_count + self.uni + self.uni_count + self.out)
            + 4 * (self.attention_partials + self.attention_arrivals)
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
    /// Row stride of the peaks (`WorkspaceSizes::peaks`), in words.
    pub ld_peaks: usize,
    /// Blocks per query head of the select's chunked launches (`SelectPlan::chunks`; 0
    /// without a select), which the one-read variant's `_final` takes as `chunks`.
    pub select_chunks: usize,
    /// The `k` the select, fetch and attention kernels get (for `dense`, `capacity − 36`, so
    /// that every token is a row; for `pariskv(k)`, the method's `k`).
    pub k: usize,
    /// Planes of staging per (sequence, head, segment) (0 without staging).
    pub stage_planes: usize,
    /// Whether the step writes `uni`, `uni_count` and `sel_pos`: always, except when the
    /// request did not ask for them and nothing reads them (attention from the store's rows).
    pub union: bool,
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
    /// [`super::StepRequest::union`]: whether the union is asked for where nothing needs it.
    pub union: bool,
    pub tiles: &'a Tiles,
    pub tuning: Option<&'a dyn Tuning>,
}

/// Builds the launch plan of a step (no GPU needed): the specs of its stages
/// (`launches/specs.rs`), then their operations stage by stage (`launches/stages.rs`).
pub fn launch_plan(inputs: &PlanInputs<'_>) -> Result<LaunchPlan, StepError> {
    let shape = inputs.shape;
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
    let transfer = specs::transfer(inputs, &mut chooser);
    let staged = matches!(transfer, Some(Transfer::Memcpy | Transfer::CopyKernel));
    let specs = specs::step_specs(inputs, transfer, &mut chooser)?;

    let dense = inputs.scoring == Scoring::Dense;
    let k = if dense { capacity - ALWAYS } else { asked_k };
    let stage_planes = match inputs.scoring {
        Scoring::Planes { max_planes, .. } if staged => max_planes,
        _ => 0,
    };
    let mut stages = Stages::new(shape, capacity, k);
    // Scoring.
    if let (Some(plan), Some(scan)) = (specs.plan, specs.scan) {
        stages.plan(plan, staged, stage_planes);
        stages.transfer(transfer, specs.gather);
        stages.scan(scan, staged, inputs.tiles.scan_stripes)?;
    }
    if let Some(landmark) = specs.landmark {
        stages.landmark(landmark)?;
    }
    // A plan that scores the tail (`Tiles::tail_in_plan`) leaves the oracle nothing to do (the
    // `oracle` method, which scores every token, has no plan).
    let tail_in_plan = specs.plan.is_some_and(|plan| plan.tail.is_some());
    if let Some(oracle) = specs.oracle.filter(|_| !tail_in_plan) {
        stages.oracle(oracle, inputs.scoring == Scoring::Oracle)?;
    }
    // Selection.
    // The fetch reads the union; attention from the store's rows reads only the sets.
    let union =
        inputs.union || specs.select.is_none() || specs.attention.rows == AttentionRows::Fetched;
    let mut select_chunks = 0;
    if let Some(select) = specs.select {
        select_chunks = stages.select(select, k, union)?;
    } else if let Some(pk) = specs.pariskv {
        stages.pariskv(pk, k)?;
    } else {
        stages.dense(k);
    }
    // Rows and attention.
    stages.fetch_attention(&specs, k, dense)?;

    Ok(LaunchPlan {
        shape,
        scoring: inputs.scoring,
        transfer,
        specs,
        operations: stages.ops,
        sizes: stages.sizes,
        token_capacity: capacity,
        ld_scores: capacity,
        ld_peaks: codegen::spec::peaks::ld_peaks(capacity),
        select_chunks,
        k,
        stage_planes,
        union,
        capturable: transfer != Some(Transfer::Memcpy),
        tuned: chooser.tuned,
        untuned: chooser.untuned,
    })
}

/// Fits the HBM plane scan's grid to one wave (`Tiles::scan_one_wave`): where the plan's scan
/// launches more blocks than `resident` gives for it (how many the GPU holds at once: the
/// kernel's occupancy times the multiprocessors), the most stripes a segment whose grid still
/// fits (at most the segment's tiles); a plan whose scan already fits, or where not even one
/// stripe a segment would, is left as it is, as is a scan of the host placement (bound by the
/// link, not timed this way), for which `resident` is not asked. Returns the stripes it set.
pub fn fit_scan_to_one_wave<E>(
    plan: &mut LaunchPlan,
    resident: impl FnOnce(&KernelLaunch) -> Result<usize, E>,
) -> Result<Option<usize>, E> {
    let Some(scan) = plan.specs.scan.filter(|s| s.placement == Placement::Hbm) else {
        return Ok(None);
    };
    let Some(kernel) = plan
        .operations
        .iter_mut()
        .filter(|op| matches!(op.role, Role::Scan { .. }))
        .find_map(|op| op.kernel.as_mut())
    else {
        return Ok(None);
    };
    let resident = resident(kernel)?;
    let [stripes, segments, heads] = kernel.launch.grid.map(|d| d as usize);
    let fit = scan.one_wave_stripes(stripes, segments * heads, resident);
    if let Some(fit) = fit {
        kernel.launch.grid[0] = fit as u32;
    }
    Ok(fit)
}

/// Whether `groups` head groups of `group`'s plan make up the step of `whole`'s, so that the
/// whole step's plan launch can feed every group's scan and the groups' results land where the
/// whole step's would: the group's heads are a `groups`-th of the whole's, the two agree on
/// everything a group's launches index by (`k`, the score and peak strides, the union), and
/// every buffer the whole step's plan writes, or a caller reads, is `groups` group shares
/// long (per-head layouts).
pub fn groups_share_the_plan(whole: &LaunchPlan, group: &LaunchPlan, groups: usize) -> bool {
    let (w, g) = (&whole.sizes, &group.sizes.times(groups));
    whole.shape.batch == 1
        && group.shape.kv_heads * groups == whole.shape.kv_heads
        && (whole.k, whole.ld_scores, whole.ld_peaks, whole.union)
            == (group.k, group.ld_scores, group.ld_peaks, group.union)
        && whole.transfer == group.transfer
        && whole.stage_planes == group.stage_planes
        && [w.q_store, w.depths, w.class_count, w.runs, w.staged_runs]
            == [g.q_store, g.depths, g.class_count, g.runs, g.staged_runs]
        && [w.stage_words, w.stage_scales, w.sel, w.sel_count, w.uni]
            == [g.stage_words, g.stage_scales, g.sel, g.sel_count, g.uni]
        && [w.uni_count, w.out] == [g.uni_count, g.out]
}

#[cfg(test)]
mod footprint_tests {
    use super::*;

    #[test]
    fn the_workspace_parts_sum_to_its_bytes() {
        // Distinct primes per field, so that a field left out or counted at the wrong element
        // size changes the sum.
        let primes = [
            2usize, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73,
            79, 83, 89, 97, 101, 103, 107, 109, 113, 127, 131, 137, 139, 149, 151, 157, 163, 167,
            173,
        ];
        let mut p = primes.iter().map(|&x| x * 1000);
        let mut next = || p.next().expect("enough primes");
        let sizes = WorkspaceSizes {
            q_store: next(),
            depths: next(),
            class_count: next(),
            runs: next(),
            staged_runs: next(),
            stage_words: next(),
            stage_scales: next(),
            plan_status: next(),
            scores: next(),
            peaks: next(),
            select_state: next(),
            chunk_counts: next(),
            select_candidates: next(),
            select_candidate_runs: next(),
            select_arrivals: next(),
            scratch: next(),
            sel: next(),
            sel_count: next(),
            uni: next(),
            uni_count: next(),
            rows: next(),
            out: next(),
            attention_partials: next(),
            attention_arrivals: next(),
            dense_uni: next(),
            dense_sel: next(),
            pariskv: crate::pariskv::RetrievalSizes {
                q_tilde: next(),
                q_norm: next(),
                tiers: next(),
                tier_len: next(),
                vote_hist: next(),
                votes: next(),
                ld_votes: next(),
                chunk_counts: next(),
                cand: next(),
                cand_count: next(),
                cand_score: next(),
                ld_cand: next(),
                select_slots: next(),
                select_counts: next(),
            },
        };
        let parts = sizes.parts();
        assert_eq!(parts.iter().map(|&(_, b)| b).sum::<usize>(), sizes.bytes());
        assert_eq!(parts[2], ("scores", 4 * (sizes.scores + sizes.peaks)));
        assert_eq!(
            parts[4],
            ("rows", 4 * sizes.rows),
            "k_sel and v_sel, bf16 each"
        );
    }
}
