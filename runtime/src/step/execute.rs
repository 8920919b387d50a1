//! Walks a [`LaunchPlan`] on the stream: every operation's arguments, in the order of the
//! kernels' launch ABIs (`templates/ABI.md`, `codegen::spec`).

use codegen::spec::AttentionRows;
use cudarc::driver::CudaFunction;

use super::launches::{LaunchPlan, Operation, Role};
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

/// A buffer the kernel reads, at a raw address (the step's inputs, the view's tables); the
/// parameter's type gives the element type.
fn at<T>(addr: u64) -> DevicePtr<T> {
    DevicePtr::from_addr(addr)
}

/// A workspace buffer the kernel reads (null when absent: the launch plan sizes every buffer
/// its launches use).
fn input<T>(buffer: &Buf<T>) -> DevicePtr<T> {
    DevicePtr::from_addr(addr(buffer))
}

/// A workspace buffer the kernel writes: the workspace is the step's own, written only by the
/// step's launches, in stream order.
fn output<T>(buffer: &Buf<T>) -> DevicePtrMut<T> {
    DevicePtrMut::from_addr(addr(buffer))
}

/// The sizes every launch of a step shares.
struct Sizes {
    heads: i32,
    max_seg: i32,
    ld: i32,
    k: i32,
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
    let shape = plan.shape;
    let n = Sizes {
        heads: int(shape.kv_heads),
        max_seg: int(shape.max_seg),
        ld: int(plan.ld_scores),
        k: int(plan.k),
    };
    let dense = plan.sizes.dense_uni > 0;
    let (uni, sel_pos) = if dense {
        (&ws.dense_uni, &ws.dense_sel)
    } else {
        (&ws.uni, &ws.sel_pos)
    };
    let retrieval = retrieval_parts(plan, ws, view, inputs);
    let tail = Role::Oracle { whole: false };
    // The tail's scores go to columns the scan never writes (tokens past `n_stored`), and
    // nothing before the select reads them.
    let side = side.filter(|_| plan.operations.iter().any(|op| op.role == tail));
    if let Some(side) = side {
        side.gpu.wait_on(gpu, &side.fork)?;
        for (op, function) in plan.operations.iter().zip(functions) {
            if op.role == tail {
                let args = oracle_args(false, view, inputs, ws, &n);
                launch(&side.gpu, op, function, &args)?;
            }
        }
    }
    for (op, function) in plan.operations.iter().zip(functions) {
        if let (Some(side), true) = (side, op.role == tail) {
            gpu.wait_on(&side.gpu, &side.join)?;
            continue;
        }
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
                abi::plan::Args {
                    q: at(inputs.queries),
                    sigma2: at(inputs.sigma2),
                    fixed_channels: at(inputs.fixed),
                    rot: at(inputs.rotation),
                    budget: inputs.budget,
                    seg_words: view.seg_words.ptr().cast(),
                    seg_scales: view.seg_scales.ptr().cast(),
                    max_seg: n.max_seg,
                    n_stored: view.n_stored.ptr(),
                    n_heads: n.heads,
                    q_store: output(&ws.q_store),
                    depths: output(&ws.depths),
                    class_count: output(&ws.class_count),
                    runs: output(&ws.runs),
                    staged_runs: DevicePtrMut::from_addr(staged_out(addr(&ws.staged_runs))),
                    stage_words: DevicePtrMut::from_addr(staged_out(addr(&ws.stage_words))),
                    stage_scales: DevicePtrMut::from_addr(staged_out(addr(&ws.stage_scales))),
                    stage_planes: int(plan.stage_planes),
                    status: output(&ws.plan_status),
                }
                .args()
            }
            Role::Gather => abi::gather::Args {
                src_runs: input(&ws.runs),
                dst_runs: input(&ws.staged_runs),
                class_count: input(&ws.class_count),
                n_stored: view.n_stored.ptr(),
                max_seg: n.max_seg,
                n_heads: n.heads,
            }
            .args(),
            Role::Scan { staged } => {
                let peaks = plan.specs.scan.is_some_and(|scan| scan.peaks);
                abi::scan_args(
                    abi::scan::Args {
                        runs: input(if staged { &ws.staged_runs } else { &ws.runs }),
                        class_count: input(&ws.class_count),
                        q_store: input(&ws.q_store),
                        n_stored: view.n_stored.ptr(),
                        max_seg: n.max_seg,
                        n_heads: n.heads,
                        scores: output(&ws.scores),
                        ld_scores: n.ld,
                    },
                    peaks.then(|| (output(&ws.peaks), int(plan.ld_peaks))),
                )
            }
            Role::LandmarkScan => abi::landmark::ScanArgs {
                means: at(view.landmarks.map_or(0, |l| l.addr())),
                q: at(inputs.queries),
                n_stored: view.n_stored.ptr(),
                scores: output(&ws.scores),
                ld_scores: n.ld,
                num_kv_heads: n.heads,
            }
            .args(),
            Role::Oracle { whole } => oracle_args(whole, view, inputs, ws, &n),
            Role::Select(stage) => {
                let spec = plan
                    .specs
                    .select
                    .expect("a select launch has a select spec");
                let buffers = SelectBuffers {
                    scores: input(&ws.scores),
                    ld_scores: n.ld,
                    n_total: view.n_total.ptr(),
                    n_stored: view.n_stored.ptr(),
                    peaks: input(&ws.peaks),
                    ld_peaks: int(plan.ld_peaks),
                    k: n.k,
                    num_kv_heads: n.heads,
                    chunks: i32::try_from(plan.select_chunks).unwrap_or(i32::MAX),
                    state: output(&ws.select_state),
                    chunk_counts: output(&ws.chunk_counts),
                    // The workspace holds the `uint2` candidates as pairs of `u32`.
                    candidates: output(&ws.select_candidates).cast(),
                    candidate_runs: output(&ws.select_candidate_runs),
                    arrivals: output(&ws.select_arrivals),
                    scratch: output(&ws.scratch),
                    sel: output(&ws.sel),
                    sel_pos: output(&ws.sel_pos),
                    sel_count: output(&ws.sel_count),
                    uni: output(&ws.uni),
                    uni_count: output(&ws.uni_count),
                };
                select_args(spec.algorithm, stage, &buffers)?
            }
            Role::Pariskv(stage) => retrieval_args(stage, &retrieval.0, &retrieval.1),
            Role::Fetch => abi::fetch::Args {
                k_rows: view.k_rows.ptr().cast(),
                v_rows: view.v_rows.ptr().cast(),
                uni: input(uni),
                uni_count: input(&ws.uni_count),
                k_sel: output(&ws.k_sel),
                v_sel: output(&ws.v_sel),
                k: n.k,
                num_kv_heads: n.heads,
            }
            .args(),
            Role::Attention => {
                // The caller's buffer when it lent one (`Inputs::out`), else the workspace's.
                let out = if inputs.out != 0 {
                    DevicePtrMut::from_addr(inputs.out)
                } else {
                    output(&ws.out)
                };
                // `dense` selects every token: its row positions are its tokens.
                let sel = input(if dense { &ws.dense_sel } else { &ws.sel });
                let (k_rows, v_rows) = (view.k_rows.ptr().cast(), view.v_rows.ptr().cast());
                let split = plan.specs.attention.splits > 1;
                match (plan.specs.attention.rows, split) {
                    (AttentionRows::Fetched, false) => abi::attention::Args {
                        k_sel: input(&ws.k_sel),
                        v_sel: input(&ws.v_sel),
                        sel_pos: input(sel_pos),
                        sel_count: input(&ws.sel_count),
                        q: at(inputs.queries),
                        scale: inputs.scale,
                        out,
                        k: n.k,
                    }
                    .args(),
                    (AttentionRows::Fetched, true) => abi::attention_split::Args {
                        k_sel: input(&ws.k_sel),
                        v_sel: input(&ws.v_sel),
                        sel_pos: input(sel_pos),
                        sel_count: input(&ws.sel_count),
                        q: at(inputs.queries),
                        scale: inputs.scale,
                        out,
                        k: n.k,
                        partials: output(&ws.attention_partials),
                        arrivals: output(&ws.attention_arrivals),
                    }
                    .args(),
                    (AttentionRows::Store, false) => abi::attention_store::Args {
                        k_rows,
                        v_rows,
                        sel,
                        sel_count: input(&ws.sel_count),
                        q: at(inputs.queries),
                        scale: inputs.scale,
                        out,
                        k: n.k,
                    }
                    .args(),
                    (AttentionRows::Store, true) => abi::attention_store_split::Args {
                        k_rows,
                        v_rows,
                        sel,
                        sel_count: input(&ws.sel_count),
                        q: at(inputs.queries),
                        scale: inputs.scale,
                        out,
                        k: n.k,
                        partials: output(&ws.attention_partials),
                        arrivals: output(&ws.attention_arrivals),
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
fn oracle_args(
    whole: bool,
    view: &LayerView<'_>,
    inputs: &Inputs,
    ws: &Workspace,
    n: &Sizes,
) -> Vec<Arg> {
    abi::oracle::Args {
        k_rows: view.k_rows.ptr().cast(),
        q: at(inputs.queries),
        range_start: at(if whole { 0 } else { view.n_stored.addr() }),
        range_end: view.n_total.ptr(),
        scores: output(&ws.scores),
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
