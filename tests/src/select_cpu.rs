//! The launches of a `select` spec run on the CPU (`cpu_cuda`), laid out and poisoned as
//! `SelectKernels::run` does on a GPU, so that `check_selection` judges both alike.

use codegen::render::render;
use codegen::spec::select::{SelectParam, SelectStage};
use codegen::spec::{Family, SelectSpec};

use crate::cpu_cuda::{Entry, Launch, Program, Value};
use crate::select_case::scan_peaks_layout;
use crate::select_kernels::SelectHost;

/// What a selection reads, on the host.
pub struct CpuSelectArgs<'a> {
    /// `[B][H][G][ld_scores]` fp32.
    pub scores: &'a [f32],
    pub ld_scores: usize,
    /// `[B]`.
    pub n_total: &'a [i32],
    /// `[B]` tokens the scan scored (scan-peaks variants: the peaks of their halves are
    /// written as the scan would, every other peak word holds junk).
    pub n_stored: &'a [i32],
    pub k: usize,
    pub kv_heads: usize,
    /// The largest `n_total` (it sizes the chunked grids).
    pub max_tokens: usize,
    /// The one-read variant's blocks per query head in place of `SelectSpec::plan`'s choice
    /// (its kernels are correct for any number), so that a short test row can still be many
    /// times a block's buffer. The one-block peaks variant has one a query head and the
    /// cluster variant `CLUSTER_BLOCKS`, whatever this says.
    pub chunks: Option<u64>,
}

/// A select spec's kernels compiled for the CPU.
pub struct CpuSelect {
    pub spec: SelectSpec,
    program: Program,
}

/// The buffers of one run, in this order.
#[derive(Clone, Copy)]
enum Buf {
    Scores,
    NTotal,
    State,
    ChunkCounts,
    Candidates,
    CandidateRuns,
    Arrivals,
    Scratch,
    Sel,
    SelPos,
    SelCount,
    Uni,
    UniCount,
    NStored,
    Peaks,
}

impl CpuSelect {
    /// Renders `spec` and compiles it for the CPU.
    pub fn build(spec: SelectSpec) -> Result<Self, String> {
        Self::build_source(spec, &render(&spec).map_err(|e| e.to_string())?)
    }

    /// Compiles `source` as if it were `spec`'s rendering (a test may mutate the text).
    pub fn build_source(spec: SelectSpec, source: &str) -> Result<Self, String> {
        let mut entries: Vec<Entry> = Vec::new();
        for &stage in spec.stages() {
            let name = spec.entry(stage);
            if entries.iter().all(|e| e.name != name) {
                entries.push(Entry::from_source(source, name)?);
            }
        }
        let program = Program::build(source, entries)?;
        Ok(CpuSelect { spec, program })
    }

    /// Runs the launches of `SelectSpec::plan` over poisoned outputs and workspaces; `seed`
    /// orders the fibers.
    pub fn run(&self, a: &CpuSelectArgs<'_>, seed: u64) -> Result<SelectHost, String> {
        let spec = self.spec;
        let batch = a.n_total.len();
        let mut plan = spec
            .plan(
                batch as u64,
                a.kv_heads as u64,
                a.max_tokens as u64,
                a.k as u64,
            )
            .map_err(|e| e.to_string())?;
        // The one-block and cluster variants' blocks a query head are fixed.
        let fixed = spec.algorithm.writes_selection();
        if let Some(chunks) = a.chunks.filter(|_| !fixed) {
            assert!(
                spec.algorithm.one_read(),
                "only the one-read selects take chunks"
            );
            let heads = (batch * a.kv_heads) as u64 * u64::from(spec.group);
            plan.chunks = chunks;
            plan.chunk_count_words = heads * chunks;
            plan.candidate_words = heads * chunks * a.k as u64 * 2;
            for (stage, launch) in &mut plan.launches {
                if *stage == SelectStage::Chunk {
                    launch.grid[0] = u32::try_from(chunks).expect("a grid x");
                }
            }
        }
        let group = spec.group as usize;
        let words = |w: u64| usize::try_from(w).expect("sizes fit usize");
        let poison = |n: usize| vec![u32::MAX; n];
        let (scores, ld_scores, peaks, ld_peaks) = if spec.algorithm.scan_peaks() {
            scan_peaks_layout(a.scores, a.ld_scores, a.n_stored, a.kv_heads * group, seed)
        } else {
            (a.scores.to_vec(), a.ld_scores, Vec::new(), 0)
        };
        let mut buffers: Vec<Vec<u32>> = vec![
            scores.iter().map(|s| s.to_bits()).collect(),
            a.n_total.iter().map(|&n| n as u32).collect(),
            poison(words(plan.state_words)),
            poison(words(plan.chunk_count_words)),
            poison(words(plan.candidate_words)),
            poison(words(plan.candidate_run_words)),
            vec![0; words(plan.arrival_words)],
            poison(words(plan.scratch_words)),
            poison(words(plan.sel_words)),
            poison(words(plan.sel_words)),
            poison(batch * a.kv_heads * group),
            poison(words(plan.uni_words)),
            poison(batch * a.kv_heads),
            a.n_stored.iter().map(|&n| n as u32).collect(),
            peaks,
        ];
        let launches: Vec<Launch> = plan
            .launches
            .iter()
            .map(|&(stage, geometry): &(SelectStage, _)| Launch {
                entry: self.program.entry(&spec.entry(stage)),
                grid: geometry.grid,
                threads: geometry.block[0],
                args: spec
                    .params(stage)
                    .iter()
                    .map(|&param| match param {
                        SelectParam::Scores => Value::Buffer(Buf::Scores as usize),
                        SelectParam::LdScores => Value::Int(ld_scores as i64),
                        SelectParam::NTotal => Value::Buffer(Buf::NTotal as usize),
                        SelectParam::K => Value::Int(a.k as i64),
                        SelectParam::Pass => Value::Int(i64::from(stage.pass().unwrap_or(0))),
                        SelectParam::Chunks => Value::Int(plan.chunks as i64),
                        SelectParam::NumKvHeads => Value::Int(a.kv_heads as i64),
                        SelectParam::State => Value::Buffer(Buf::State as usize),
                        SelectParam::ChunkCounts => Value::Buffer(Buf::ChunkCounts as usize),
                        SelectParam::Candidates => Value::Buffer(Buf::Candidates as usize),
                        SelectParam::CandidateRuns => Value::Buffer(Buf::CandidateRuns as usize),
                        SelectParam::Scratch => Value::Buffer(Buf::Scratch as usize),
                        SelectParam::Sel => Value::Buffer(Buf::Sel as usize),
                        SelectParam::SelPos => Value::Buffer(Buf::SelPos as usize),
                        SelectParam::SelCount => Value::Buffer(Buf::SelCount as usize),
                        SelectParam::Uni => Value::Buffer(Buf::Uni as usize),
                        SelectParam::UniCount => Value::Buffer(Buf::UniCount as usize),
                        SelectParam::Arrivals => Value::Buffer(Buf::Arrivals as usize),
                        SelectParam::NStored => Value::Buffer(Buf::NStored as usize),
                        SelectParam::Peaks => Value::Buffer(Buf::Peaks as usize),
                        SelectParam::LdPeaks => Value::Int(ld_peaks as i64),
                    })
                    .collect(),
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
            k: a.k,
            group,
            arrivals: buffers[Buf::Arrivals as usize].clone(),
        })
    }

    /// The spec's name, for messages.
    pub fn name(&self) -> String {
        self.spec.kernel_name()
    }
}
