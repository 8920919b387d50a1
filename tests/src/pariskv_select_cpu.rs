//! The top-k of a `pariskv_rerank` spec (its `_select`, or the many-block `_chunk`, `_merge`,
//! `_write`) run on the CPU (`cpu_cuda`), over given candidate scores, laid out and poisoned as
//! `PariskvKernels::retrieve` does on a GPU, so that `check_selection` judges both alike; and
//! the reference selection those scores give (`reference::select::top_k_of` and §12's sink,
//! window and every-token rules, as `reference::pariskv::pariskv_select` applies them).

use codegen::render::render;
use codegen::spec::pariskv::RerankSelectStep;
use codegen::spec::{Family, PariskvRerankSpec};
use reference::select::{top_k_of, Selection, LOCAL, SINK};

use crate::cpu_cuda::{Entry, Launch, Program, Value};
use crate::select_kernels::SelectHost;

/// What a top-k reads, on the host.
pub struct CpuRerankArgs<'a> {
    /// `[B*H][ld_cand]` `ŝ` of the candidates, in list order.
    pub cand_score: &'a [f64],
    /// `[B*H][ld_cand]` the candidates, ascending tokens.
    pub cand: &'a [i32],
    /// `[B*H]` `C`.
    pub cand_count: &'a [i32],
    pub ld_cand: usize,
    /// `[B]`.
    pub n_total: &'a [i32],
    pub k: usize,
    pub kv_heads: usize,
}

/// A rerank spec's top-k compiled for the CPU.
pub struct CpuRerankSelect {
    pub spec: PariskvRerankSpec,
    program: Program,
}

/// The buffers of one run, in this order.
#[derive(Clone, Copy)]
enum Buf {
    CandScore,
    Cand,
    CandCount,
    NTotal,
    Slots0,
    Slots1,
    Counts0,
    Counts1,
    Sel,
    SelPos,
    SelCount,
    Uni,
    UniCount,
}

/// The arguments of `step`.
fn args(step: RerankSelectStep, a: &CpuRerankArgs<'_>) -> Vec<Value> {
    use Value::{Buffer as B, Int as I};
    let slots = |i: Option<usize>| B([Buf::Slots0, Buf::Slots1][i.expect("a buffer")] as usize);
    let counts = |i: Option<usize>| B([Buf::Counts0, Buf::Counts1][i.expect("a buffer")] as usize);
    let (ld, k, h) = (a.ld_cand as i64, a.k as i64, a.kv_heads as i64);
    let chunks = I(i64::from(step.chunks_read()));
    let outputs = [
        B(Buf::Sel as usize),
        B(Buf::SelPos as usize),
        B(Buf::SelCount as usize),
        B(Buf::Uni as usize),
        B(Buf::UniCount as usize),
        I(h),
    ];
    let (score, cand, count, n) = (
        B(Buf::CandScore as usize),
        B(Buf::Cand as usize),
        B(Buf::CandCount as usize),
        B(Buf::NTotal as usize),
    );
    match step {
        RerankSelectStep::Select => [score, cand, count, I(ld), n, I(k)]
            .into_iter()
            .chain(outputs)
            .collect(),
        RerankSelectStep::Chunk => vec![
            score,
            count,
            I(ld),
            n,
            I(k),
            slots(step.writes()),
            counts(step.writes()),
            I(h),
        ],
        RerankSelectStep::Merge { .. } => vec![
            slots(step.reads()),
            counts(step.reads()),
            chunks,
            n,
            I(k),
            slots(step.writes()),
            counts(step.writes()),
            I(h),
        ],
        RerankSelectStep::Write { .. } => [
            slots(step.reads()),
            counts(step.reads()),
            chunks,
            cand,
            count,
            I(ld),
            n,
            I(k),
        ]
        .into_iter()
        .chain(outputs)
        .collect(),
    }
}

impl CpuRerankSelect {
    /// Renders `spec` and compiles it for the CPU.
    pub fn build(spec: PariskvRerankSpec) -> Result<Self, String> {
        Self::build_source(spec, &render(&spec).map_err(|e| e.to_string())?)
    }

    /// Compiles `source` as if it were `spec`'s rendering (a test may mutate the text).
    pub fn build_source(spec: PariskvRerankSpec, source: &str) -> Result<Self, String> {
        let entries = spec
            .select_step_kinds()
            .into_iter()
            .map(|step| Entry::from_source(source, spec.select_step_entry(step)))
            .collect::<Result<_, _>>()?;
        let program = Program::build(source, entries)?;
        Ok(CpuRerankSelect { spec, program })
    }

    /// Runs the launches of `PariskvRerankSpec::select_plan` over poisoned outputs and
    /// workspaces; `seed` orders the fibers.
    pub fn run(&self, a: &CpuRerankArgs<'_>, seed: u64) -> Result<SelectHost, String> {
        let spec = self.spec;
        let batch = a.n_total.len();
        let heads = batch * a.kv_heads;
        assert_eq!(a.cand_count.len(), heads, "one C per (sequence, KV head)");
        assert_eq!(a.cand.len(), heads * a.ld_cand);
        assert_eq!(a.cand_score.len(), heads * a.ld_cand);
        let plan = spec
            .select_plan(
                batch as u64,
                a.kv_heads as u64,
                a.ld_cand as u64,
                a.k as u64,
            )
            .map_err(|e| e.to_string())?;
        let g = spec.group as usize;
        let k = a.k.min(spec.k_max as usize);
        let (sc, uc) = (k + SINK + LOCAL, g * k + SINK + LOCAL);
        let words = |w: u64| usize::try_from(w).expect("sizes fit usize").max(1);
        let poison = |n: usize| vec![u32::MAX; n];
        let ints = |v: &[i32]| v.iter().map(|&x| x as u32).collect::<Vec<u32>>();
        let mut buffers: Vec<Vec<u32>> = vec![
            a.cand_score
                .iter()
                .flat_map(|s| {
                    let bits = s.to_bits();
                    [bits as u32, (bits >> 32) as u32]
                })
                .collect(),
            ints(a.cand),
            ints(a.cand_count),
            ints(a.n_total),
            poison(2 * words(plan.slot_words)),
            poison(2 * words(plan.slot_words)),
            poison(words(plan.count_words)),
            poison(words(plan.count_words)),
            poison(heads * g * sc),
            poison(heads * g * sc),
            poison(heads * g),
            poison(heads * uc),
            poison(heads),
        ];
        let launches: Vec<Launch> = plan
            .launches
            .iter()
            .map(|&(step, geometry)| Launch {
                entry: self.program.entry(&spec.select_step_entry(step)),
                grid: geometry.grid,
                threads: geometry.block[0],
                args: args(step, a),
            })
            .collect();
        self.program.run(&mut buffers, &launches, seed)?;
        let ints = |b: Buf| buffers[b as usize].iter().map(|&w| w as i32).collect();
        Ok(SelectHost {
            sel: ints(Buf::Sel),
            sel_pos: ints(Buf::SelPos),
            sel_count: ints(Buf::SelCount),
            uni: ints(Buf::Uni),
            uni_count: ints(Buf::UniCount),
            k,
            group: g,
            arrivals: Vec::new(),
        })
    }

    /// The spec's name, for messages.
    pub fn name(&self) -> String {
        self.spec.kernel_name()
    }
}

/// The reference selection of one (sequence, KV head) of `n` tokens whose candidates (ascending
/// tokens) score `scores`, for `group` query heads: every token when `n <= 36 + k`, else the
/// sink, the top `min(k, C)` candidates by score (ties by the lower token) and the window.
pub fn reference_selection(
    n: usize,
    candidates: &[i32],
    scores: &[f64],
    k: usize,
    group: usize,
) -> Selection {
    let set: Vec<usize> = if n <= SINK + LOCAL + k {
        (0..n).collect()
    } else {
        let mut by_token = vec![f64::NEG_INFINITY; n];
        for (&t, &s) in candidates.iter().zip(scores) {
            by_token[t as usize] = s;
        }
        let mut winners = top_k_of(&by_token, candidates.iter().map(|&t| t as usize), k);
        winners.sort_unstable();
        (0..SINK).chain(winners).chain(n - LOCAL..n).collect()
    };
    Selection::from_sets(vec![set; group])
}
