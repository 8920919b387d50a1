//! Walks a [`LaunchPlan`] on the stream: every operation's arguments, in the order of the
//! kernels' launch ABIs (`templates/ABI.md`, `codegen::spec`).

use codegen::spec::AttentionRows;
use cudarc::driver::CudaFunction;

use super::launches::{LaunchPlan, Operation, Role, WorkspaceSizes};
use super::workspace::{addr, Buf, Workspace};
use super::{Side, StepError};
use crate::abi::{self, select_args, SelectBuffers};
use crate::gpu::{Arg, Gpu};
use crate::jit::KernelSource;
use crate::launch::{DevicePtr, DevicePtrMut, KernelArgs};
use crate::pariskv::{retrieval_args, RetrievalBuffers, RetrievalInputs};
use crate::view::LayerView;
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

fn int(value: usize) -> i32 {
    // Sizes were checked against i32 when the view was (tokens) or are small (heads, k).
    i32::try_from(value).unwrap_or(i32::MAX)
}

/// A buffer the kernel reads, at its address (the step's inputs, the view's tables, a
/// workspace buffer: null when absent, which the launch plan's sizes rule out for every buffer
/// its launches use); the parameter's type gives the element type.
fn at<T>(addr: u64) -> DevicePtr<T> {
    DevicePtr::from_addr(addr)
}

/// A workspace buffer the kernel writes: the workspace is the step's own, written only by the
/// step's launches, in stream order.
fn output<T>(addr: u64) -> DevicePtrMut<T> {
    DevicePtrMut::from_addr(addr)
}

/// The sizes every launch of a step shares.
struct Sizes {
    heads: i32,
    max_seg: i32,
    ld: i32,
    k: i32,
}

/// Where one recording's launches read and write: the whole step's inputs, view tables and
/// workspace, or one head group's share of them ([`Target::group`]).
pub(crate) struct Target {
    inputs: Inputs,
    view: Tables,
    ws: Buffers,
}

/// The view's device tables, by address.
struct Tables {
    seg_words: u64,
    seg_scales: u64,
    n_stored: u64,
    n_total: u64,
    k_rows: u64,
    v_rows: u64,
    landmarks: u64,
}

/// The workspace's buffers the kernels take, by address (0: absent).
struct Buffers {
    q_store: u64,
    depths: u64,
    class_count: u64,
    runs: u64,
    staged_runs: u64,
    stage_words: u64,
    stage_scales: u64,
    plan_status: u64,
    scores: u64,
    peaks: u64,
    select_state: u64,
    chunk_counts: u64,
    select_candidates: u64,
    select_candidate_runs: u64,
    select_arrivals: u64,
    scratch: u64,
    sel: u64,
    sel_pos: u64,
    sel_count: u64,
    uni: u64,
    uni_count: u64,
    k_sel: u64,
    v_sel: u64,
    out: u64,
    attention_partials: u64,
    attention_arrivals: u64,
    dense_uni: u64,
    dense_sel: u64,
}

/// `base` advanced by `count` elements of `T`, or 0 when absent.
fn advanced<T>(base: u64, count: usize) -> u64 {
    if base == 0 {
        0
    } else {
        base + (count * std::mem::size_of::<T>()) as u64
    }
}

impl Target {
    /// The whole step's buffers.
    pub(crate) fn whole(ws: &Workspace, view: &LayerView<'_>, inputs: &Inputs) -> Target {
        Self::share(ws, view, inputs, None)
    }

    /// The buffers of head group `index` of a grouped step whose group plan is `group`
    /// (batch 1, `group.shape.kv_heads` KV heads a group): every per-head input and view table
    /// advanced by the group's first KV head, every workspace buffer by `index` times the group
    /// plan's size of it. Each group's share of the workspace is then disjoint from the others',
    /// and the per-head results (`sel`, `sel_pos`, `sel_count`, `uni`, `uni_count`, `out`) lie
    /// where the whole step would have written them, their strides depending on `k`, `G` and
    /// `D` only.
    pub(crate) fn group(
        ws: &Workspace,
        view: &LayerView<'_>,
        inputs: &Inputs,
        group: &LaunchPlan,
        index: usize,
    ) -> Target {
        Self::share(ws, view, inputs, Some((group, index)))
    }

    fn share(
        ws: &Workspace,
        view: &LayerView<'_>,
        inputs: &Inputs,
        group: Option<(&LaunchPlan, usize)>,
    ) -> Target {
        // The whole step is share 0: nothing is advanced.
        let (i, s, heads, g, d) = match group {
            Some((plan, i)) => {
                let shape = plan.shape;
                (
                    i,
                    plan.sizes,
                    i * shape.kv_heads,
                    shape.group,
                    shape.head_dim,
                )
            }
            None => (0, WorkspaceSizes::default(), 0, 0, 0),
        };
        let max_seg = view.max_seg;
        let inputs = Inputs {
            queries: advanced::<f32>(inputs.queries, heads * g * d),
            sigma2: advanced::<f32>(inputs.sigma2, heads * d),
            fixed: advanced::<u8>(inputs.fixed, heads * d),
            rotation: advanced::<f32>(inputs.rotation, heads * d * d),
            out: advanced::<f32>(inputs.out, heads * g * d),
            ..*inputs
        };
        let view = Tables {
            seg_words: advanced::<u64>(view.seg_words.addr(), heads * max_seg),
            seg_scales: advanced::<u64>(view.seg_scales.addr(), heads * max_seg),
            n_stored: view.n_stored.addr(),
            n_total: view.n_total.addr(),
            k_rows: advanced::<u64>(view.k_rows.addr(), heads),
            v_rows: advanced::<u64>(view.v_rows.addr(), heads),
            landmarks: advanced::<u64>(view.landmarks.map_or(0, |l| l.addr()), heads),
        };
        // Buffer `b`'s share: `i` times the group plan's elements of it.
        fn at<T>(b: &Buf<T>, i: usize, elements: usize) -> u64 {
            advanced::<T>(addr(b), i * elements)
        }
        let ws = Buffers {
            q_store: at(&ws.q_store, i, s.q_store),
            depths: at(&ws.depths, i, s.depths),
            class_count: at(&ws.class_count, i, s.class_count),
            runs: at(&ws.runs, i, s.runs),
            staged_runs: at(&ws.staged_runs, i, s.staged_runs),
            stage_words: at(&ws.stage_words, i, s.stage_words),
            stage_scales: at(&ws.stage_scales, i, s.stage_scales),
            plan_status: at(&ws.plan_status, i, s.plan_status),
            scores: at(&ws.scores, i, s.scores),
            peaks: at(&ws.peaks, i, s.peaks),
            select_state: at(&ws.select_state, i, s.select_state),
            chunk_counts: at(&ws.chunk_counts, i, s.chunk_counts),
            select_candidates: at(&ws.select_candidates, i, s.select_candidates),
            select_candidate_runs: at(&ws.select_candidate_runs, i, s.select_candidate_runs),
            select_arrivals: at(&ws.select_arrivals, i, s.select_arrivals),
            scratch: at(&ws.scratch, i, s.scratch),
            sel: at(&ws.sel, i, s.sel),
            sel_pos: at(&ws.sel_pos, i, s.sel),
            sel_count: at(&ws.sel_count, i, s.sel_count),
            uni: at(&ws.uni, i, s.uni),
            uni_count: at(&ws.uni_count, i, s.uni_count),
            k_sel: at(&ws.k_sel, i, s.rows),
            v_sel: at(&ws.v_sel, i, s.rows),
            out: at(&ws.out, i, s.out),
            attention_partials: at(&ws.attention_partials, i, s.attention_partials),
            attention_arrivals: at(&ws.attention_arrivals, i, s.attention_arrivals),
            dense_uni: at(&ws.dense_uni, i, s.dense_uni),
            dense_sel: at(&ws.dense_sel, i, s.dense_sel),
        };
        Target { inputs, view, ws }
    }
}

/// Queues every operation of `plan`. With `side` (a second stream,
/// [`super::DecoderConfig::overlap_tail`]), the tail's oracle runs there from the step's start,
/// beside the plan and the scan, and the main stream waits for it where the oracle stood.
pub(crate) fn record(
    gpu: &Gpu,
    side: Option<&Side>,
    plan: &LaunchPlan,
    functions: &[Option<CudaFunction>],
    ws: &Workspace,
    view: &LayerView<'_>,
    inputs: &Inputs,
) -> Result<(), StepError> {
    let t = Target::whole(ws, view, inputs);
    let ops: Vec<_> = plan.operations.iter().zip(functions).collect();
    let tail = Role::Oracle { whole: false };
    // The tail's scores go to columns the scan never writes (tokens past `n_stored`), and
    // nothing before the select reads them.
    let at = ops.iter().position(|(op, _)| op.role == tail);
    let (Some(side), Some(at)) = (side, at) else {
        return record_ops(gpu, plan, &ops, ws, view, &t);
    };
    side.gpu.wait_on(gpu, &side.fork)?;
    record_ops(&side.gpu, plan, &ops[at..=at], ws, view, &t)?;
    record_ops(gpu, plan, &ops[..at], ws, view, &t)?;
    gpu.wait_on(&side.gpu, &side.join)?;
    record_ops(gpu, plan, &ops[at + 1..], ws, view, &t)
}

/// Whether `role` works on the whole layer in a head-grouped step: the plan (one launch for
/// every head: it is latency-bound, so a launch a group would only lengthen the chain) and
/// what stages its planes.
fn whole_layer(role: Role) -> bool {
    matches!(role, Role::ClearStatus | Role::Plan { .. } | Role::Gather)
}

/// Whether `role` runs on the second stream in a head-grouped step: what follows the scores.
fn after_scores(role: Role) -> bool {
    matches!(role, Role::Select(_) | Role::Fetch | Role::Attention)
}

/// A launch plan and the functions of its operations.
pub(crate) type Planned<'a> = (&'a LaunchPlan, &'a [Option<CudaFunction>]);

/// The operations of `planned` whose role `keep` accepts, with their functions.
fn pick<'a>(
    (plan, functions): Planned<'a>,
    keep: impl Fn(Role) -> bool,
) -> Vec<(&'a Operation, &'a Option<CudaFunction>)> {
    plan.operations
        .iter()
        .zip(functions)
        .filter(|(op, _)| keep(op.role))
        .collect()
}

/// Queues a head-grouped step ([`super::DecoderConfig::head_groups`]): the plan of every head
/// from `whole`, then for each group of `group.shape.kv_heads` KV heads its scoring launches
/// (scan, tail) on the main stream and, behind a marker, its select, fetch and attention on
/// `side`'s stream, so that they run while the next group is scanned. The main stream waits
/// for the side's last launch at the end.
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_groups(
    gpu: &Gpu,
    side: &Side,
    whole: Planned<'_>,
    group: Planned<'_>,
    groups: usize,
    ws: &Workspace,
    view: &LayerView<'_>,
    inputs: &Inputs,
) -> Result<(), StepError> {
    let t = Target::whole(ws, view, inputs);
    record_ops(gpu, whole.0, &pick(whole, whole_layer), ws, view, &t)?;
    let scoring = pick(group, |r| !whole_layer(r) && !after_scores(r));
    let rest = pick(group, after_scores);
    for index in 0..groups {
        let t = Target::group(ws, view, inputs, group.0, index);
        record_ops(gpu, group.0, &scoring, ws, view, &t)?;
        side.gpu.wait_on(gpu, &side.fork)?;
        record_ops(&side.gpu, group.0, &rest, ws, view, &t)?;
    }
    gpu.wait_on(&side.gpu, &side.join)?;
    Ok(())
}

/// Queues `ops` (operations of `plan` with their functions) on `gpu`'s stream, reading and
/// writing `t`'s buffers.
fn record_ops(
    gpu: &Gpu,
    plan: &LaunchPlan,
    ops: &[(&Operation, &Option<CudaFunction>)],
    ws: &Workspace,
    view: &LayerView<'_>,
    t: &Target,
) -> Result<(), StepError> {
    let shape = plan.shape;
    let n = Sizes {
        heads: int(shape.kv_heads),
        max_seg: int(shape.max_seg),
        ld: int(plan.ld_scores),
        k: int(plan.k),
    };
    let dense = plan.sizes.dense_uni > 0;
    let (uni, sel_pos) = if dense {
        (t.ws.dense_uni, t.ws.dense_sel)
    } else {
        (t.ws.uni, t.ws.sel_pos)
    };
    let retrieval = retrieval_parts(plan, ws, view, &t.inputs);
    for &(op, function) in ops {
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
                let staged_out = |x: u64| if staged { x } else { 0 };
                let args = abi::plan::Args {
                    q: at(t.inputs.queries),
                    sigma2: at(t.inputs.sigma2),
                    fixed_channels: at(t.inputs.fixed),
                    rot: at(t.inputs.rotation),
                    budget: t.inputs.budget,
                    seg_words: at(t.view.seg_words),
                    seg_scales: at(t.view.seg_scales),
                    max_seg: n.max_seg,
                    n_stored: at(t.view.n_stored),
                    n_heads: n.heads,
                    q_store: output(t.ws.q_store),
                    depths: output(t.ws.depths),
                    class_count: output(t.ws.class_count),
                    runs: output(t.ws.runs),
                    staged_runs: DevicePtrMut::from_addr(staged_out(t.ws.staged_runs)),
                    stage_words: DevicePtrMut::from_addr(staged_out(t.ws.stage_words)),
                    stage_scales: DevicePtrMut::from_addr(staged_out(t.ws.stage_scales)),
                    stage_planes: int(plan.stage_planes),
                    status: output(t.ws.plan_status),
                };
                // A plan that also scores the tail (`PlanSpec::tail`) writes its scores.
                let tail = plan.specs.plan.is_some_and(|p| p.tail.is_some());
                let tail = tail.then(|| abi::TailArgs {
                    k_rows: at(t.view.k_rows),
                    n_total: at(t.view.n_total),
                    scores: output(t.ws.scores),
                    ld_scores: n.ld,
                });
                abi::plan_args(args, tail)
            }
            Role::Gather => abi::gather::Args {
                src_runs: at(t.ws.runs),
                dst_runs: at(t.ws.staged_runs),
                class_count: at(t.ws.class_count),
                n_stored: at(t.view.n_stored),
                max_seg: n.max_seg,
                n_heads: n.heads,
            }
            .args(),
            Role::Scan { staged } => {
                let peaks = plan.specs.scan.is_some_and(|scan| scan.peaks);
                abi::scan_args(
                    abi::scan::Args {
                        runs: at(if staged { t.ws.staged_runs } else { t.ws.runs }),
                        class_count: at(t.ws.class_count),
                        q_store: at(t.ws.q_store),
                        n_stored: at(t.view.n_stored),
                        max_seg: n.max_seg,
                        n_heads: n.heads,
                        scores: output(t.ws.scores),
                        ld_scores: n.ld,
                    },
                    peaks.then(|| (output(t.ws.peaks), int(plan.ld_peaks))),
                )
            }
            Role::LandmarkScan => abi::landmark::ScanArgs {
                means: at(t.view.landmarks),
                q: at(t.inputs.queries),
                n_stored: at(t.view.n_stored),
                scores: output(t.ws.scores),
                ld_scores: n.ld,
                num_kv_heads: n.heads,
            }
            .args(),
            Role::Oracle { whole } => oracle_args(whole, t, &n),
            Role::Select(stage) => {
                let spec = plan
                    .specs
                    .select
                    .expect("a select launch has a select spec");
                let buffers = SelectBuffers {
                    scores: at(t.ws.scores),
                    ld_scores: n.ld,
                    n_total: at(t.view.n_total),
                    n_stored: at(t.view.n_stored),
                    peaks: at(t.ws.peaks),
                    ld_peaks: int(plan.ld_peaks),
                    k: n.k,
                    num_kv_heads: n.heads,
                    chunks: i32::try_from(plan.select_chunks).unwrap_or(i32::MAX),
                    state: output(t.ws.select_state),
                    chunk_counts: output(t.ws.chunk_counts),
                    // The workspace holds the `uint2` candidates as pairs of `u32`.
                    candidates: output::<u32>(t.ws.select_candidates).cast(),
                    candidate_runs: output(t.ws.select_candidate_runs),
                    arrivals: output(t.ws.select_arrivals),
                    scratch: output(t.ws.scratch),
                    sel: output(t.ws.sel),
                    sel_pos: output(t.ws.sel_pos),
                    sel_count: output(t.ws.sel_count),
                    uni: output(t.ws.uni),
                    uni_count: output(t.ws.uni_count),
                };
                select_args(spec.algorithm, stage, &buffers)?
            }
            Role::Pariskv(stage) => retrieval_args(stage, &retrieval.0, &retrieval.1),
            Role::Fetch => abi::fetch::Args {
                k_rows: at(t.view.k_rows),
                v_rows: at(t.view.v_rows),
                uni: at(uni),
                uni_count: at(t.ws.uni_count),
                k_sel: output(t.ws.k_sel),
                v_sel: output(t.ws.v_sel),
                k: n.k,
                num_kv_heads: n.heads,
            }
            .args(),
            Role::Attention => {
                // The caller's buffer when it lent one (`Inputs::out`), else the workspace's.
                let out = if t.inputs.out != 0 {
                    DevicePtrMut::from_addr(t.inputs.out)
                } else {
                    output(t.ws.out)
                };
                // `dense` selects every token: its row positions are its tokens.
                let sel = at(if dense { t.ws.dense_sel } else { t.ws.sel });
                let (k_rows, v_rows) = (at(t.view.k_rows), at(t.view.v_rows));
                let split = plan.specs.attention.splits > 1;
                match (plan.specs.attention.rows, split) {
                    (AttentionRows::Fetched, false) => abi::attention::Args {
                        k_sel: at(t.ws.k_sel),
                        v_sel: at(t.ws.v_sel),
                        sel_pos: at(sel_pos),
                        sel_count: at(t.ws.sel_count),
                        q: at(t.inputs.queries),
                        scale: t.inputs.scale,
                        out,
                        k: n.k,
                    }
                    .args(),
                    (AttentionRows::Fetched, true) => abi::attention_split::Args {
                        k_sel: at(t.ws.k_sel),
                        v_sel: at(t.ws.v_sel),
                        sel_pos: at(sel_pos),
                        sel_count: at(t.ws.sel_count),
                        q: at(t.inputs.queries),
                        scale: t.inputs.scale,
                        out,
                        k: n.k,
                        partials: output(t.ws.attention_partials),
                        arrivals: output(t.ws.attention_arrivals),
                    }
                    .args(),
                    (AttentionRows::Store, false) => abi::attention_store::Args {
                        k_rows,
                        v_rows,
                        sel,
                        sel_count: at(t.ws.sel_count),
                        q: at(t.inputs.queries),
                        scale: t.inputs.scale,
                        out,
                        k: n.k,
                    }
                    .args(),
                    (AttentionRows::Store, true) => abi::attention_store_split::Args {
                        k_rows,
                        v_rows,
                        sel,
                        sel_count: at(t.ws.sel_count),
                        q: at(t.inputs.queries),
                        scale: t.inputs.scale,
                        out,
                        k: n.k,
                        partials: output(t.ws.attention_partials),
                        arrivals: output(t.ws.attention_arrivals),
                    }
                    .args(),
                }
            }
        };
        launch(gpu, op, function, &args)?;
    }
    Ok(())
}

/// Launches the kernel of `op` on `gpu`'s stream with `args`.
fn launch(
    gpu: &Gpu,
    op: &Operation,
    function: &Option<CudaFunction>,
    args: &[Arg],
) -> Result<(), StepError> {
    let (Some(function), Some(kernel)) = (function, &op.kernel) else {
        unreachable!("every kernel role has its launch and function");
    };
    let l = kernel.launch;
    gpu.launch(
        function,
        (l.grid[0], l.grid[1], l.grid[2]),
        (l.block[0], l.block[1], l.block[2]),
        l.shared_bytes,
        args,
    )?;
    Ok(())
}

/// The oracle's arguments: exact scores of every token (`whole`, the oracle method) or of the
/// tail, the tokens past `n_stored`.
fn oracle_args(whole: bool, t: &Target, n: &Sizes) -> Vec<Arg> {
    abi::oracle::Args {
        k_rows: at(t.view.k_rows),
        q: at(t.inputs.queries),
        range_start: at(if whole { 0 } else { t.view.n_stored }),
        range_end: at(t.view.n_total),
        scores: output(t.ws.scores),
        ld_scores: n.ld,
        num_kv_heads: n.heads,
    }
    .args()
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
    let (select_slots, select_counts) =
        sizes.select_halves(addr(&ws.pk_select_slots), addr(&ws.pk_select_counts));
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
        select_slots,
        select_counts,
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
