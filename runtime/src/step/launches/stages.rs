//! The operations of a step, stage by stage, and the workspace each stage needs: scoring
//! (plan, transfer, scan; landmark; oracle), selection (select, ParisKV or dense), then fetch
//! and attention.

use codegen::spec::launch::Launch;
use codegen::spec::select::SelectStage;
use codegen::spec::shape::{scales_per_channel, LaunchDims};
use codegen::spec::{
    AttentionRows, Family, GatherSpec, KernelSpec, LandmarkSpec, OracleSpec, PlanSpec, ScanSpec,
    SelectSpec,
};

use super::ALWAYS;
use super::{KernelLaunch, Operation, PariskvSpecs, Role, StepShape, StepSpecs, WorkspaceSizes};
use crate::pariskv::{RetrievalSizes, Stage};
use crate::step::StepError;
use crate::tuning::Transfer;

/// A launch of `spec`'s `entry`.
fn kernel(spec: KernelSpec, entry: String, launch: Launch) -> Option<KernelLaunch> {
    Some(KernelLaunch {
        spec,
        entry,
        launch,
    })
}

/// A launch shape as the store-reading families give it.
fn dims(((gx, gy, gz), (tx, ty, tz), shared): LaunchDims) -> Launch {
    Launch {
        grid: [gx, gy, gz],
        block: [tx, ty, tz],
        shared_bytes: shared,
    }
}

/// The operations so far and the workspace they need.
pub(super) struct Stages {
    pub(super) shape: StepShape,
    /// Tokens per sequence the grids and buffers serve.
    pub(super) capacity: usize,
    pub(super) ops: Vec<Operation>,
    pub(super) sizes: WorkspaceSizes,
}

impl Stages {
    /// No operations yet; the selection, row and output buffers every method uses for `k`.
    pub(super) fn new(shape: StepShape, capacity: usize, k: usize) -> Stages {
        let (b, h, g, d) = (shape.batch, shape.kv_heads, shape.group, shape.head_dim);
        Stages {
            shape,
            capacity,
            ops: Vec::new(),
            sizes: WorkspaceSizes {
                sel_count: b * h * g,
                uni_count: b * h,
                rows: b * h * (g * k + ALWAYS) * d,
                out: b * h * g * d,
                ..WorkspaceSizes::default()
            },
        }
    }

    fn push(&mut self, role: Role, kernel: Option<KernelLaunch>) {
        self.ops.push(Operation { role, kernel });
    }

    fn batch_heads(&self) -> (u64, u64) {
        (self.shape.batch as u64, self.shape.kv_heads as u64)
    }

    /// The plan of a plane method, and its buffers (with staging when the transfer stages).
    pub(super) fn plan(&mut self, plan: PlanSpec, staged: bool, stage_planes: usize) {
        let s = self.shape;
        let (b, h, g, d) = (s.batch, s.kv_heads, s.group, s.head_dim);
        let table = b * h * s.max_seg * d * 4;
        self.sizes.q_store = b * h * g * d;
        self.sizes.depths = b * h * d;
        self.sizes.class_count = b * h * 4;
        self.sizes.runs = table;
        self.sizes.plan_status = 3;
        if staged {
            let regions = b * h * s.max_seg;
            self.sizes.staged_runs = table;
            self.sizes.stage_words = regions * stage_planes * s.segment_words;
            self.sizes.stage_scales = regions * d * scales_per_channel(s.segment_words, s.block);
            self.push(Role::ClearStatus, None);
        }
        self.push(
            Role::Plan { staged },
            kernel(
                plan.into(),
                KernelSpec::from(plan).kernel_name(),
                dims(plan.launch_dims(b, h)),
            ),
        );
    }

    /// How the planes of a host store reach the scan: the gather kernel, or run copies.
    pub(super) fn transfer(&mut self, transfer: Option<Transfer>, gather: Option<GatherSpec>) {
        let s = self.shape;
        match transfer {
            Some(Transfer::CopyKernel) => {
                let gather = gather.expect("copy-kernel has a gather spec");
                self.push(
                    Role::Gather,
                    kernel(
                        gather.into(),
                        KernelSpec::from(gather).kernel_name(),
                        dims(gather.launch_dims(s.batch, s.kv_heads, s.max_seg)),
                    ),
                );
            }
            Some(Transfer::Memcpy) => self.push(Role::RunCopies, None),
            _ => {}
        }
    }

    /// The plane scan, with `stripes` thread blocks a segment when asked
    /// (`Tiles::scan_stripes`), else the spec's grid.
    pub(super) fn scan(
        &mut self,
        scan: ScanSpec,
        staged: bool,
        stripes: Option<usize>,
    ) -> Result<(), StepError> {
        let s = self.shape;
        let launch = match stripes {
            None => scan.launch_dims(s.batch, s.kv_heads, s.max_seg),
            Some(n) if (1..=scan.segment_tiles()).contains(&n) => {
                scan.launch_dims_striped(s.batch, s.kv_heads, s.max_seg, n)
            }
            Some(n) => {
                return Err(StepError::Config {
                    field: "scan_stripes",
                    got: n.to_string(),
                    allowed: format!(
                        "1 to {} thread blocks a segment (the scan's tiles a segment: {} words \
                         of {}-word tiles)",
                        scan.segment_tiles(),
                        scan.segment_words,
                        scan.tile_words
                    ),
                })
            }
        };
        self.push(
            Role::Scan { staged },
            kernel(
                scan.into(),
                KernelSpec::from(scan).kernel_name(),
                dims(launch),
            ),
        );
        Ok(())
    }

    pub(super) fn landmark(&mut self, landmark: LandmarkSpec) -> Result<(), StepError> {
        let (bw, bh) = self.batch_heads();
        let launch = landmark.launch_scan(bw, bh, self.capacity as u64)?;
        self.push(
            Role::LandmarkScan,
            kernel(landmark.into(), landmark.scan_entry(), launch),
        );
        Ok(())
    }

    /// The oracle over every token (`whole`, the oracle method) or over the tail.
    pub(super) fn oracle(&mut self, oracle: OracleSpec, whole: bool) -> Result<(), StepError> {
        let (bw, bh) = self.batch_heads();
        // The tail is shorter than a block; the oracle's blocks stride, so any grid is correct.
        let rows = if whole {
            self.capacity
        } else {
            self.shape.block
        };
        let launch = oracle.launch(bw, bh, rows as u64)?;
        self.push(
            Role::Oracle { whole },
            kernel(
                oracle.into(),
                KernelSpec::from(oracle).kernel_name(),
                launch,
            ),
        );
        Ok(())
    }

    /// The select's stages over the scores of every query head (without `_union` unless
    /// `union`), and its buffers; the blocks per query head of its chunked launches.
    pub(super) fn select(
        &mut self,
        select: SelectSpec,
        k: usize,
        union: bool,
    ) -> Result<usize, StepError> {
        let (bw, bh) = self.batch_heads();
        let bhg = self.shape.batch * self.shape.kv_heads * self.shape.group;
        self.sizes.scores = bhg * self.capacity;
        if select.algorithm.scan_peaks() {
            self.sizes.peaks = bhg * codegen::spec::peaks::ld_peaks(self.capacity);
        }
        let plan = select.plan(bw, bh, self.capacity as u64, k as u64)?;
        self.sizes.select_state = plan.state_words as usize;
        self.sizes.chunk_counts = plan.chunk_count_words as usize;
        self.sizes.select_candidates = plan.candidate_words as usize;
        self.sizes.select_candidate_runs = plan.candidate_run_words as usize;
        self.sizes.select_arrivals = plan.arrival_words as usize;
        self.sizes.scratch = plan.scratch_words as usize;
        self.sizes.sel = plan.sel_words as usize;
        self.sizes.uni = plan.uni_words as usize;
        for (stage, launch) in plan.launches {
            if stage == SelectStage::Union && !union {
                continue;
            }
            self.push(
                Role::Select(stage),
                kernel(select.into(), select.entry(stage), launch),
            );
        }
        Ok(plan.chunks as usize)
    }

    /// The ParisKV retrieval launches (six, or more with the many-block top-k), and their
    /// buffers.
    pub(super) fn pariskv(&mut self, pk: PariskvSpecs, k: usize) -> Result<(), StepError> {
        let (bw, bh) = self.batch_heads();
        let s = self.shape;
        let (b, h, g, d) = (s.batch, s.kv_heads, s.group, s.head_dim);
        let capacity = self.capacity;
        let (topc, chunk_words) = pk.topc.launch(bw, bh, capacity as u64)?;
        let retrieval = RetrievalSizes::new(b * h, d, capacity, chunk_words as usize);
        let select = pk
            .rerank
            .select_plan(bw, bh, retrieval.ld_cand as u64, k as u64)?;
        let retrieval = retrieval.with_select(&select);
        self.sizes.pariskv = retrieval;
        self.sizes.sel = b * h * g * (k + ALWAYS);
        self.sizes.uni = b * h * (g * k + ALWAYS);
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
        ];
        for (stage, spec, entry, launch) in launches {
            self.push(Role::Pariskv(stage), kernel(spec, entry, launch));
        }
        for (step, launch) in select.launches {
            self.push(
                Role::Pariskv(Stage::RerankSelect(step)),
                kernel(pk.rerank.into(), pk.rerank.select_step_entry(step), launch),
            );
        }
        Ok(())
    }

    /// `dense`: every token is selected; the host writes the counts.
    pub(super) fn dense(&mut self, k: usize) {
        let s = self.shape;
        let (b, h, g) = (s.batch, s.kv_heads, s.group);
        self.sizes.dense_uni = b * h * (g * k + ALWAYS);
        self.sizes.dense_sel = b * h * g * (k + ALWAYS);
        self.push(Role::DenseCounts, None);
    }

    /// The rows of the union, then exact attention. `dense` has at most `capacity` rows per
    /// head however large its stride, so its fetch grid is sized for that many.
    pub(super) fn fetch_attention(
        &mut self,
        specs: &StepSpecs,
        k: usize,
        dense: bool,
    ) -> Result<(), StepError> {
        let (bw, bh) = self.batch_heads();
        let fetch_k = if dense {
            (self.capacity - ALWAYS).div_ceil(self.shape.group)
        } else {
            k
        };
        let attention = specs.attention;
        if attention.rows == AttentionRows::Store {
            // Attention reads the store's rows by token: nothing to fetch, no rows to hold.
            self.sizes.rows = 0;
        } else {
            let fetch = specs.fetch;
            let launch = fetch.launch(bw, bh, fetch_k as u64)?;
            self.push(
                Role::Fetch,
                kernel(fetch.into(), KernelSpec::from(fetch).kernel_name(), launch),
            );
        }
        let launch = attention.launch(bw, bh)?;
        let heads = bw * bh * attention.group as u64;
        self.sizes.attention_partials = attention.partial_words(heads) as usize;
        self.sizes.attention_arrivals = attention.arrival_words(heads) as usize;
        self.push(
            Role::Attention,
            kernel(
                attention.into(),
                KernelSpec::from(attention).kernel_name(),
                launch,
            ),
        );
        Ok(())
    }
}
