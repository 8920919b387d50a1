//! Walks a [`LaunchPlan`] on the stream: every operation's arguments, in the order of the
//! kernels' launch ABIs (`templates/ABI.md`, `codegen::spec`).

use cudarc::driver::CudaFunction;

use super::launches::{LaunchPlan, Role};
use super::workspace::{addr, Workspace};
use super::StepError;
use crate::gpu::{Arg, Gpu};
use crate::jit::KernelSource;
use crate::pariskv::{retrieval_args, RetrievalBuffers, RetrievalInputs};
use crate::view::LayerView;
use codegen::spec::select::SelectParam;
use codegen::spec::shape::{scales_per_channel, WORD_TOKENS};

/// The step's inputs beyond the view and the workspace, as kernel arguments.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Inputs {
    /// Raw queries `[B][H][G][D]`.
    pub queries: u64,
    /// `σ²` `[B][H][D]` (fathom), else 0.
    pub sigma2: u64,
    /// Fixed channels `[H][D]` (double_sparsity), else 0.
    pub fixed: u64,
    /// Rotations `[H][D][D]` (rotated store), else 0.
    pub rotation: u64,
    /// Bits per token (fathom).
    pub budget: f32,
    /// The softmax scale.
    pub scale: f32,
    /// The ParisKV sign vector `[D]` (pariskv), else 0.
    pub signs: u64,
    /// Where attention writes `[B][H][G][D]` fp32: a caller's buffer, or 0 for the
    /// workspace's.
    pub out: u64,
}

/// The kernel function of every operation (`None` for the copies and memsets), loaded before
/// anything is queued: loading a module is not something to do while capturing.
pub(crate) fn resolve(
    source: &dyn KernelSource,
    plan: &LaunchPlan,
) -> Result<Vec<Option<CudaFunction>>, StepError> {
    plan.operations
        .iter()
        .map(|op| {
            op.kernel
                .as_ref()
                .map(|k| source.function(&k.spec, &k.entry).map_err(StepError::from))
                .transpose()
        })
        .collect()
}

fn int(value: usize) -> Arg {
    // Sizes were checked against i32 when the view was (tokens) or are small (heads, k).
    Arg::I32(i32::try_from(value).unwrap_or(i32::MAX))
}

/// Queues every operation of `plan`.
pub(crate) fn record(
    gpu: &Gpu,
    plan: &LaunchPlan,
    functions: &[Option<CudaFunction>],
    ws: &Workspace,
    view: &LayerView<'_>,
    inputs: &Inputs,
) -> Result<(), StepError> {
    let shape = plan.shape;
    let heads = int(shape.kv_heads);
    let max_seg = int(shape.max_seg);
    let ld = int(plan.ld_scores);
    let k = int(plan.k);
    let dense = plan.sizes.dense_uni > 0;
    let (uni, sel_pos) = if dense {
        (addr(&ws.dense_uni), addr(&ws.dense_sel))
    } else {
        (addr(&ws.uni), addr(&ws.sel_pos))
    };
    let p = Arg::Ptr;
    let retrieval = retrieval_parts(plan, ws, view, inputs);
    for (op, function) in plan.operations.iter().zip(functions) {
        let args: Vec<Arg> = match op.role {
            Role::ClearStatus => {
                if let Some(status) = &ws.plan_status {
                    gpu.fill(status, 0)?;
                }
                continue;
            }
            Role::RunCopies => {
                run_copies(gpu, plan, ws, view)?;
                continue;
            }
            Role::DenseCounts => {
                dense_counts(gpu, plan, ws, view)?;
                continue;
            }
            Role::Plan { staged } => {
                let staged_arg = |x: u64| if staged { x } else { 0 };
                vec![
                    p(inputs.queries),
                    p(inputs.sigma2),
                    p(inputs.fixed),
                    p(inputs.rotation),
                    Arg::F32(inputs.budget),
                    view.seg_words.arg(),
                    view.seg_scales.arg(),
                    max_seg,
                    view.n_stored.arg(),
                    heads,
                    p(addr(&ws.q_store)),
                    p(addr(&ws.depths)),
                    p(addr(&ws.class_count)),
                    p(addr(&ws.runs)),
                    p(staged_arg(addr(&ws.staged_runs))),
                    p(staged_arg(addr(&ws.stage_words))),
                    p(staged_arg(addr(&ws.stage_scales))),
                    int(plan.stage_planes),
                    p(addr(&ws.plan_status)),
                ]
            }
            Role::Gather => vec![
                p(addr(&ws.runs)),
                p(addr(&ws.staged_runs)),
                p(addr(&ws.class_count)),
                view.n_stored.arg(),
                max_seg,
                heads,
            ],
            Role::Scan { staged } => vec![
                p(addr(if staged { &ws.staged_runs } else { &ws.runs })),
                p(addr(&ws.class_count)),
                p(addr(&ws.q_store)),
                view.n_stored.arg(),
                max_seg,
                heads,
                p(addr(&ws.scores)),
                ld,
            ],
            Role::LandmarkScan => vec![
                p(view.landmarks.map_or(0, |l| l.addr())),
                p(inputs.queries),
                view.n_stored.arg(),
                p(addr(&ws.scores)),
                ld,
                heads,
            ],
            Role::Oracle { whole } => vec![
                view.k_rows.arg(),
                p(inputs.queries),
                p(if whole { 0 } else { view.n_stored.addr() }),
                view.n_total.arg(),
                p(addr(&ws.scores)),
                ld,
                heads,
            ],
            Role::Select(stage) => {
                let spec = plan
                    .specs
                    .select
                    .expect("a select launch has a select spec");
                spec.params(stage)
                    .iter()
                    .map(|&param| match param {
                        SelectParam::Scores => p(addr(&ws.scores)),
                        SelectParam::LdScores => ld,
                        SelectParam::NTotal => view.n_total.arg(),
                        SelectParam::K => k,
                        SelectParam::Pass => Arg::I32(i32::from(stage.pass().unwrap_or(0))),
                        SelectParam::NumKvHeads => heads,
                        SelectParam::State => p(addr(&ws.select_state)),
                        SelectParam::ChunkCounts => p(addr(&ws.chunk_counts)),
                        SelectParam::Candidates => p(addr(&ws.select_candidates)),
                        SelectParam::CandidateRuns => p(addr(&ws.select_candidate_runs)),
                        SelectParam::Scratch => p(addr(&ws.scratch)),
                        SelectParam::Sel => p(addr(&ws.sel)),
                        SelectParam::SelPos => p(addr(&ws.sel_pos)),
                        SelectParam::SelCount => p(addr(&ws.sel_count)),
                        SelectParam::Uni => p(addr(&ws.uni)),
                        SelectParam::UniCount => p(addr(&ws.uni_count)),
                    })
                    .collect()
            }
            Role::Pariskv(stage) => retrieval_args(stage, &retrieval.0, &retrieval.1),
            Role::Fetch => vec![
                view.k_rows.arg(),
                view.v_rows.arg(),
                p(uni),
                p(addr(&ws.uni_count)),
                p(addr(&ws.k_sel)),
                p(addr(&ws.v_sel)),
                k,
                heads,
            ],
            Role::Attention => vec![
                p(addr(&ws.k_sel)),
                p(addr(&ws.v_sel)),
                p(sel_pos),
                p(addr(&ws.sel_count)),
                p(inputs.queries),
                Arg::F32(inputs.scale),
                p(if inputs.out != 0 {
                    inputs.out
                } else {
                    addr(&ws.out)
                }),
                k,
            ],
        };
        let (Some(function), Some(kernel)) = (function, &op.kernel) else {
            unreachable!("every kernel role has its launch and function");
        };
        let l = kernel.launch;
        gpu.launch(
            function,
            (l.grid[0], l.grid[1], l.grid[2]),
            (l.block[0], l.block[1], l.block[2]),
            l.shared_bytes,
            &args,
        )?;
    }
    Ok(())
}

/// What the ParisKV launches read and write: the view's index and lengths, the queries, and the
/// workspace's buffers at the plan's strides (unused by the other methods).
fn retrieval_parts(
    plan: &LaunchPlan,
    ws: &Workspace,
    view: &LayerView<'_>,
    inputs: &Inputs,
) -> (RetrievalInputs, RetrievalBuffers) {
    let a = RetrievalInputs {
        index: view.pariskv.map(|t| t.tables()).unwrap_or_default(),
        queries: inputs.queries,
        signs: inputs.signs,
        n_total: view.n_total.addr(),
        kv_heads: plan.shape.kv_heads,
        k: plan.k,
    };
    let sizes = &plan.sizes.pariskv;
    let w = RetrievalBuffers {
        q_tilde: addr(&ws.pk_q_tilde),
        q_norm: addr(&ws.pk_q_norm),
        tiers: addr(&ws.pk_tiers),
        tier_len: addr(&ws.pk_tier_len),
        vote_hist: addr(&ws.pk_vote_hist),
        votes: addr(&ws.pk_votes),
        ld_votes: sizes.ld_votes,
        chunk_counts: addr(&ws.pk_chunk_counts),
        cand: addr(&ws.pk_cand),
        cand_count: addr(&ws.pk_cand_count),
        cand_score: addr(&ws.pk_cand_score),
        ld_cand: sizes.ld_cand,
        sel: addr(&ws.sel),
        sel_pos: addr(&ws.sel_pos),
        sel_count: addr(&ws.sel_count),
        uni: addr(&ws.uni),
        uni_count: addr(&ws.uni_count),
    };
    (a, w)
}

/// The memcpy transfer (§7.1): reads the plan's run tables and the stored lengths back (the
/// step's one host synchronisation), then queues one copy per active run (its planes, then
/// its scales) from the store into the staging the staged table points at.
fn run_copies(
    gpu: &Gpu,
    plan: &LaunchPlan,
    ws: &Workspace,
    view: &LayerView<'_>,
) -> Result<(), StepError> {
    let shape = plan.shape;
    let (Some(runs), Some(staged), Some(counts)) = (&ws.runs, &ws.staged_runs, &ws.class_count)
    else {
        unreachable!("the memcpy transfer's plan sizes its run tables");
    };
    // Read back after the plan, waiting for this stream only.
    let all = usize::MAX;
    let (runs, staged) = (gpu.download(runs, all)?, gpu.download(staged, all)?);
    let (counts, n_stored) = (
        gpu.download(counts, all)?,
        gpu.download(view.n_stored, all)?,
    );
    let (s, d) = (shape.segment_words, shape.head_dim);
    let scale_bytes = 2 * scales_per_channel(s, shape.block);
    for (b, &stored) in n_stored.iter().enumerate().take(shape.batch) {
        let segments = (stored.max(0) as usize)
            .div_ceil(WORD_TOKENS * s)
            .min(shape.max_seg);
        for h in 0..shape.kv_heads {
            let bh = b * shape.kv_heads + h;
            let active: u32 = counts[bh * 4..bh * 4 + 4].iter().sum();
            for seg in 0..segments {
                for slot in 0..active as usize {
                    let e = ((bh * shape.max_seg + seg) * d + slot) * 4;
                    let depth = staged[e + 3] as usize;
                    if depth == 0 {
                        continue;
                    }
                    // SAFETY: the plan wrote both tables for stored segments: the source runs
                    // lie in the view's segments, the staged ones in the workspace's staging,
                    // each `depth * S` words and `SPC` scales long.
                    unsafe {
                        gpu.copy_raw(staged[e], runs[e], depth * s * 8)?;
                        gpu.copy_raw(staged[e + 1], runs[e + 1], scale_bytes)?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// `dense`: every query head selects all `n_total[b]` tokens and every union holds them, so
/// the counts are `n_total[b]`, broadcast by device copies that double the filled prefix
/// (`1 + ceil(log2(H*G))` copies per sequence), which a graph can hold.
fn dense_counts(
    gpu: &Gpu,
    plan: &LaunchPlan,
    ws: &Workspace,
    view: &LayerView<'_>,
) -> Result<(), StepError> {
    let shape = plan.shape;
    let per_sequence = [
        (addr(&ws.sel_count), shape.kv_heads * shape.group),
        (addr(&ws.uni_count), shape.kv_heads),
    ];
    for b in 0..shape.batch {
        let n_total = view.n_total.addr() + 4 * b as u64;
        for (base, len) in per_sequence {
            let first = base + (4 * b * len) as u64;
            // SAFETY: `n_total` has B entries (checked with the view); the count buffers hold
            // `B*H*G` and `B*H` entries (sized by the launch plan).
            unsafe {
                gpu.copy_raw(first, n_total, 4)?;
                let mut filled = 1;
                while filled < len {
                    let chunk = filled.min(len - filled);
                    gpu.copy_raw(first + 4 * filled as u64, first, 4 * chunk)?;
                    filled += chunk;
                }
            }
        }
    }
    Ok(())
}
