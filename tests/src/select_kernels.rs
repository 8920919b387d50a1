//! Launch helpers for the kernels after the scan (`oracle`, `landmark`, `select`, `fetch`,
//! `attention`; `templates/ABI.md`), shared by the GPU tests of those families and by the test
//! that chains them.
//!
//! Every kernel is rendered from its spec and compiled by NVRTC for the device's own
//! architecture. Arguments are plain device addresses (`u64`) in the order of the spec's launch
//! ABI, so a buffer in HBM and one in mapped host memory are passed alike. Outputs are poisoned
//! (every byte `0xff`) before a kernel runs, so an element it should have written and did not
//! shows up, and so does one it wrote but should not have.

use codegen::spec::launch::Launch;
use codegen::spec::select::{LOCAL, SINK};
use codegen::spec::{AttentionSpec, Family, FetchSpec, LandmarkSpec, OracleSpec, SelectSpec};
use reference::select::Selection;
use runtime::abi::{self, select_args, SelectBuffers};
use runtime::gpu::{DeviceBuffer, Gpu, GpuError, Module};
use runtime::launch::{DevicePtr, KernelArgs};

// The shared kernel-test kit lives in `kernel_check`; these names stay here for the tests that
// import them from this module.
pub(crate) use crate::kernel_check::{at, compile, i32_of, launch, out};
pub use crate::kernel_check::{
    dot_tolerance, relative_error, with_grid_x, HeadTable, KernelError, Mismatches, Placed, POISON,
    POISON_F32_BITS, POISON_I32, POISON_U16,
};

/// Tokens every query head selects beside its top-k: the sink and the local window (§6).
pub const ALWAYS: usize = (SINK + LOCAL) as usize;

/// The `oracle` kernel of `spec`.
pub struct OracleKernel {
    /// Its spec.
    pub spec: OracleSpec,
    module: Module,
}

/// The `oracle` kernel's parameters (`OracleSpec`'s launch ABI), addresses as `u64`.
pub struct OracleArgs {
    /// `[B*H]` pointers to bf16 keys `[capacity][D]`.
    pub k_rows: u64,
    /// Raw queries `[B][H][G][D]` fp32.
    pub q: u64,
    /// `[B]` first token to score, or `None` for NULL (0).
    pub range_start: Option<u64>,
    /// `[B]` one past the last token to score.
    pub range_end: u64,
    /// `[B][H][G][ld_scores]` fp32.
    pub scores: u64,
    /// Row stride of `scores`, in floats.
    pub ld_scores: usize,
    /// `H`.
    pub num_kv_heads: usize,
}

impl OracleKernel {
    /// Renders and compiles `spec`.
    pub fn load(gpu: &Gpu, spec: OracleSpec) -> Result<Self, KernelError> {
        Ok(OracleKernel {
            spec,
            module: compile(gpu, &spec)?,
        })
    }

    /// Queues one launch of the kernel.
    pub fn launch(&self, gpu: &Gpu, grid: Launch, a: &OracleArgs) -> Result<(), GpuError> {
        let args = abi::oracle::Args {
            k_rows: at(a.k_rows),
            q: at(a.q),
            range_start: at(a.range_start.unwrap_or(0)),
            range_end: at(a.range_end),
            scores: out(a.scores),
            ld_scores: i32_of(a.ld_scores, "ld_scores"),
            num_kv_heads: i32_of(a.num_kv_heads, "num_kv_heads"),
        }
        .args();
        launch(gpu, &self.module, &self.spec.kernel_name(), grid, &args)
    }
}

/// The two `landmark` entry points of `spec`.
pub struct LandmarkKernels {
    /// Their spec.
    pub spec: LandmarkSpec,
    module: Module,
}

/// The parameters of `<landmark>_build`.
pub struct LandmarkBuildArgs {
    /// `[B*H]` pointers to bf16 keys `[capacity][D]`.
    pub k_rows: u64,
    /// `[B*H]` pointers to fp16 means `[capacity/8][D]`.
    pub means: u64,
    /// `[B]`, or `None` for NULL (0).
    pub range_start: Option<u64>,
    /// `[B]`.
    pub range_end: u64,
    /// `H`.
    pub num_kv_heads: usize,
}

/// The parameters of `<landmark>_scan`.
pub struct LandmarkScanArgs {
    /// `[B*H]` pointers to fp16 means `[capacity/8][D]`.
    pub means: u64,
    /// Raw queries `[B][H][G][D]` fp32.
    pub q: u64,
    /// `[B]` stored tokens.
    pub n_stored: u64,
    /// `[B][H][G][ld_scores]` fp32.
    pub scores: u64,
    /// Row stride of `scores`, in floats.
    pub ld_scores: usize,
    /// `H`.
    pub num_kv_heads: usize,
}

impl LandmarkKernels {
    /// Renders and compiles `spec`.
    pub fn load(gpu: &Gpu, spec: LandmarkSpec) -> Result<Self, KernelError> {
        Ok(LandmarkKernels {
            spec,
            module: compile(gpu, &spec)?,
        })
    }

    /// Queues one launch of `_build`.
    pub fn build(&self, gpu: &Gpu, grid: Launch, a: &LandmarkBuildArgs) -> Result<(), GpuError> {
        let args = abi::landmark::BuildArgs {
            k_rows: at(a.k_rows),
            means: at(a.means),
            range_start: at(a.range_start.unwrap_or(0)),
            range_end: at(a.range_end),
            num_kv_heads: i32_of(a.num_kv_heads, "num_kv_heads"),
        }
        .args();
        launch(gpu, &self.module, &self.spec.build_entry(), grid, &args)
    }

    /// Queues one launch of `_scan`.
    pub fn scan(&self, gpu: &Gpu, grid: Launch, a: &LandmarkScanArgs) -> Result<(), GpuError> {
        let args = abi::landmark::ScanArgs {
            means: at(a.means),
            q: at(a.q),
            n_stored: at(a.n_stored),
            scores: out(a.scores),
            ld_scores: i32_of(a.ld_scores, "ld_scores"),
            num_kv_heads: i32_of(a.num_kv_heads, "num_kv_heads"),
        }
        .args();
        launch(gpu, &self.module, &self.spec.scan_entry(), grid, &args)
    }
}

/// The launches of a `select` spec (ten; twelve for the compacting variant, three for the
/// one-read one).
pub struct SelectKernels {
    /// Their spec.
    pub spec: SelectSpec,
    module: Module,
}

/// What a selection reads.
pub struct SelectArgs {
    /// `[B][H][G][ld_scores]` fp32, tokens `0 .. n_total[b]` valid and NaN-free.
    pub scores: u64,
    /// Row stride of `scores`, in floats.
    pub ld_scores: usize,
    /// `[B]` tokens per sequence.
    pub n_total: u64,
    /// `[B]` tokens the scan scored (scan-peaks variants; 0 for the others).
    pub n_stored: u64,
    /// `[B][H][G][ld_peaks]` the peaks the scan wrote (scan-peaks variants; 0 for the others).
    pub peaks: u64,
    /// Row stride of `peaks`, in words.
    pub ld_peaks: usize,
    /// The run-time k (at most the spec's `k_max`).
    pub k: usize,
    /// `B`.
    pub batch: usize,
    /// `H`.
    pub kv_heads: usize,
    /// The largest `n_total` (it sizes the chunked grids).
    pub max_tokens: usize,
}

/// A selection's outputs on the device, laid out as `SelectSpec` says.
pub struct SelectOutputs {
    /// `[B*H*G][k+36]` ascending selected tokens.
    pub sel: DeviceBuffer<i32>,
    /// `[B*H*G][k+36]` each selected token's position in its KV head's union.
    pub sel_pos: DeviceBuffer<i32>,
    /// `[B*H*G]`.
    pub sel_count: DeviceBuffer<i32>,
    /// `[B*H][G*k+36]` ascending, deduplicated union.
    pub uni: DeviceBuffer<i32>,
    /// `[B*H]`.
    pub uni_count: DeviceBuffer<i32>,
    /// The run-time k.
    pub k: usize,
    /// `G`.
    pub group: usize,
    /// The radix state the launches left (`SelectSpec::state_words_per_head` words per query
    /// head): kept so that a test can see which source a compacting selection read.
    pub state: DeviceBuffer<u32>,
    /// The fused select's arrival counters (allocated zeroed, as the step's workspace is).
    pub arrivals: DeviceBuffer<u32>,
}

/// A selection's outputs copied to the host.
#[derive(Clone, Debug)]
pub struct SelectHost {
    pub sel: Vec<i32>,
    pub sel_pos: Vec<i32>,
    pub sel_count: Vec<i32>,
    pub uni: Vec<i32>,
    pub uni_count: Vec<i32>,
    /// The run-time k.
    pub k: usize,
    /// `G`.
    pub group: usize,
    /// The fused select's arrival counters as the launches left them (none for the others):
    /// every launch must leave them zero.
    pub arrivals: Vec<u32>,
}

impl SelectOutputs {
    /// Copies every output to the host (synchronous).
    pub fn download(&self) -> Result<SelectHost, GpuError> {
        Ok(SelectHost {
            sel: self.sel.download()?,
            sel_pos: self.sel_pos.download()?,
            sel_count: self.sel_count.download()?,
            uni: self.uni.download()?,
            uni_count: self.uni_count.download()?,
            k: self.k,
            group: self.group,
            arrivals: self.arrivals.download()?,
        })
    }
}

impl SelectKernels {
    /// Renders and compiles `spec`.
    pub fn load(gpu: &Gpu, spec: SelectSpec) -> Result<Self, KernelError> {
        Ok(SelectKernels {
            spec,
            module: compile(gpu, &spec)?,
        })
    }

    /// Allocates the outputs and the workspaces (three, five for the compacting variant), all
    /// poisoned (the workspaces need no zeroing, so garbage in them must not matter), and
    /// queues the launches of `SelectSpec::plan` in order.
    pub fn run(&self, gpu: &Gpu, a: &SelectArgs) -> Result<SelectOutputs, KernelError> {
        let plan = self.spec.plan(
            a.batch as u64,
            a.kv_heads as u64,
            a.max_tokens as u64,
            a.k as u64,
        )?;
        let words = |w: u64| usize::try_from(w).expect("buffer sizes fit usize");
        let state = gpu.filled::<u32>(words(plan.state_words.max(1)), POISON)?;
        let chunk_counts = gpu.filled::<u32>(words(plan.chunk_count_words), POISON)?;
        let scratch = gpu.filled::<i32>(words(plan.scratch_words), POISON)?;
        // The plain variant never reads these; one word keeps the allocation non-empty.
        let candidates = gpu.filled::<u32>(words(plan.candidate_words.max(1)), POISON)?;
        let candidate_runs = gpu.filled::<u32>(words(plan.candidate_run_words.max(1)), POISON)?;
        // The one workspace that must start zeroed; the launches must leave it so.
        let arrivals = gpu.filled::<u32>(words(plan.arrival_words.max(1)), 0)?;
        let group = self.spec.group as usize;
        let query_heads = a.batch * a.kv_heads * group;
        let out = SelectOutputs {
            sel: gpu.filled(words(plan.sel_words), POISON)?,
            sel_pos: gpu.filled(words(plan.sel_words), POISON)?,
            sel_count: gpu.filled(query_heads, POISON)?,
            uni: gpu.filled(words(plan.uni_words), POISON)?,
            uni_count: gpu.filled(a.batch * a.kv_heads, POISON)?,
            k: a.k,
            group,
            state,
            arrivals,
        };
        let mut out = out;
        let (mut chunk_counts, mut scratch) = (chunk_counts, scratch);
        let (mut candidates, mut candidate_runs) = (candidates, candidate_runs);
        let buffers = SelectBuffers {
            scores: DevicePtr::from_addr(a.scores),
            ld_scores: i32_of(a.ld_scores, "ld_scores"),
            n_total: DevicePtr::from_addr(a.n_total),
            n_stored: DevicePtr::from_addr(a.n_stored),
            peaks: DevicePtr::from_addr(a.peaks),
            ld_peaks: i32_of(a.ld_peaks, "ld_peaks"),
            k: i32_of(a.k, "k"),
            num_kv_heads: i32_of(a.kv_heads, "num_kv_heads"),
            chunks: i32_of(words(plan.chunks), "chunks"),
            state: out.state.ptr_mut(),
            chunk_counts: chunk_counts.ptr_mut(),
            // `uint2` candidates, allocated as pairs of `u32`.
            candidates: candidates.ptr_mut().cast(),
            candidate_runs: candidate_runs.ptr_mut(),
            arrivals: out.arrivals.ptr_mut(),
            scratch: scratch.ptr_mut(),
            sel: out.sel.ptr_mut(),
            sel_pos: out.sel_pos.ptr_mut(),
            sel_count: out.sel_count.ptr_mut(),
            uni: out.uni.ptr_mut(),
            uni_count: out.uni_count.ptr_mut(),
        };
        for (stage, grid) in plan.launches {
            let args = select_args(self.spec.algorithm, stage, &buffers)?;
            launch(gpu, &self.module, &self.spec.entry(stage), grid, &args)?;
        }
        // The workspaces are freed on return: wait until the launches that use them are done.
        gpu.synchronize()?;
        Ok(out)
    }
}

/// Compares a GPU selection with the reference selection of every KV head (`want[b*H + h]`, its
/// `G` heads in order): identical `sel` (ascending) and `sel_count`, identical `uni` and
/// `uni_count`, `sel_pos` equal to the reference's row positions and `uni[sel_pos[j]] ==
/// sel[j]`, and every element past the counts still poisoned (the kernels write nothing there).
pub fn check_selection(got: &SelectHost, want: &[Selection], m: &mut Mismatches) {
    let g_count = got.group;
    let sc = got.k + ALWAYS;
    let uc = g_count * got.k + ALWAYS;
    m.check(got.arrivals.iter().all(|&a| a == 0), || {
        format!(
            "the arrival counters were left at {:?}, not zero",
            got.arrivals
        )
    });
    for (kh, reference) in want.iter().enumerate() {
        assert_eq!(
            reference.heads.len(),
            g_count,
            "one reference set per query head"
        );
        let uni = &got.uni[kh * uc..(kh + 1) * uc];
        let uni_count = got.uni_count[kh];
        m.check(uni_count as usize == reference.union.len(), || {
            format!(
                "kv head {kh}: uni_count {uni_count}, reference {}",
                reference.union.len()
            )
        });
        for (u, &token) in uni.iter().enumerate() {
            let expect = reference.union.get(u).map_or(POISON_I32, |&t| t as i32);
            m.check(token == expect, || {
                format!("kv head {kh}: uni[{u}] = {token}, reference {expect} (poison = -1)")
            });
        }
        for g in 0..g_count {
            let qh = kh * g_count + g;
            let count = got.sel_count[qh];
            let set = &reference.heads[g];
            let rows = &reference.rows[g];
            m.check(count as usize == set.len(), || {
                format!(
                    "query head {qh} (kv head {kh}, g {g}): sel_count {count}, reference {}",
                    set.len()
                )
            });
            let sel = &got.sel[qh * sc..(qh + 1) * sc];
            let pos = &got.sel_pos[qh * sc..(qh + 1) * sc];
            for j in 0..sc {
                let expect = set.get(j).map_or(POISON_I32, |&t| t as i32);
                let expect_pos = rows.get(j).map_or(POISON_I32, |&r| r as i32);
                m.check(sel[j] == expect, || {
                    format!("query head {qh}: sel[{j}] = {}, reference {expect}", sel[j])
                });
                m.check(pos[j] == expect_pos, || {
                    format!(
                        "query head {qh}: sel_pos[{j}] = {}, reference {expect_pos}",
                        pos[j]
                    )
                });
                if j < set.len() {
                    let back = usize::try_from(pos[j])
                        .ok()
                        .and_then(|p| uni.get(p))
                        .copied();
                    m.check(back == Some(sel[j]), || {
                        format!(
                            "query head {qh}: uni[sel_pos[{j}] = {}] = {back:?}, sel[{j}] = {}",
                            pos[j], sel[j]
                        )
                    });
                }
            }
        }
    }
}

/// The `fetch` kernel of `spec`.
pub struct FetchKernel {
    /// Its spec.
    pub spec: FetchSpec,
    module: Module,
}

/// The `fetch` kernel's parameters.
pub struct FetchArgs {
    /// `[B*H]` pointers to bf16 keys `[capacity][D]`.
    pub k_rows: u64,
    /// `[B*H]` pointers to bf16 values `[capacity][D]`.
    pub v_rows: u64,
    /// `[B*H][G*k+36]` union tokens.
    pub uni: u64,
    /// `[B*H]`.
    pub uni_count: u64,
    /// `[B*H][G*k+36][D]` bf16 output.
    pub k_sel: u64,
    /// The same for the values.
    pub v_sel: u64,
    /// The run-time k given to `select`.
    pub k: usize,
    /// `H`.
    pub num_kv_heads: usize,
}

impl FetchKernel {
    /// Renders and compiles `spec`.
    pub fn load(gpu: &Gpu, spec: FetchSpec) -> Result<Self, KernelError> {
        Ok(FetchKernel {
            spec,
            module: compile(gpu, &spec)?,
        })
    }

    /// Queues one launch.
    pub fn launch(&self, gpu: &Gpu, grid: Launch, a: &FetchArgs) -> Result<(), GpuError> {
        let args = abi::fetch::Args {
            k_rows: at(a.k_rows),
            v_rows: at(a.v_rows),
            uni: at(a.uni),
            uni_count: at(a.uni_count),
            k_sel: out(a.k_sel),
            v_sel: out(a.v_sel),
            k: i32_of(a.k, "k"),
            num_kv_heads: i32_of(a.num_kv_heads, "num_kv_heads"),
        }
        .args();
        launch(gpu, &self.module, &self.spec.kernel_name(), grid, &args)
    }
}

/// The `attention` kernel of `spec`.
pub struct AttentionKernel {
    /// Its spec.
    pub spec: AttentionSpec,
    module: Module,
}

/// The `attention` kernel's parameters.
pub struct AttentionArgs {
    /// `[B*H][G*k+36][D]` bf16 keys, from `fetch`.
    pub k_sel: u64,
    /// The same for the values.
    pub v_sel: u64,
    /// `[B*H*G][k+36]` row positions, from `select`.
    pub sel_pos: u64,
    /// `[B*H*G]`.
    pub sel_count: u64,
    /// Raw queries `[B][H][G][D]` fp32.
    pub q: u64,
    /// The softmax scale.
    pub scale: f32,
    /// `[B][H][G][D]` fp32 output.
    pub out: u64,
    /// The run-time k given to `select`.
    pub k: usize,
    /// With `splits` > 1: `[B*H*G][S][D+2]` f32 partials ([`AttentionSpec::partial_words`])
    /// and `[B*H*G]` u32 arrival counters, zero before the launch (0 and 0 with one split).
    pub partials: u64,
    pub arrivals: u64,
}

impl AttentionKernel {
    /// Renders and compiles `spec`.
    pub fn load(gpu: &Gpu, spec: AttentionSpec) -> Result<Self, KernelError> {
        Ok(AttentionKernel {
            spec,
            module: compile(gpu, &spec)?,
        })
    }

    /// Queues one launch.
    pub fn launch(&self, gpu: &Gpu, grid: Launch, a: &AttentionArgs) -> Result<(), GpuError> {
        let args = if self.spec.splits > 1 {
            abi::attention_split::Args {
                k_sel: at(a.k_sel),
                v_sel: at(a.v_sel),
                sel_pos: at(a.sel_pos),
                sel_count: at(a.sel_count),
                q: at(a.q),
                scale: a.scale,
                out: out(a.out),
                k: i32_of(a.k, "k"),
                partials: out(a.partials),
                arrivals: out(a.arrivals),
            }
            .args()
        } else {
            abi::attention::Args {
                k_sel: at(a.k_sel),
                v_sel: at(a.v_sel),
                sel_pos: at(a.sel_pos),
                sel_count: at(a.sel_count),
                q: at(a.q),
                scale: a.scale,
                out: out(a.out),
                k: i32_of(a.k, "k"),
            }
            .args()
        };
        launch(gpu, &self.module, &self.spec.kernel_name(), grid, &args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The outputs a correct `select` writes for `want`, laid out as the ABI says, poison
    /// elsewhere.
    fn laid_out(want: &[Selection], k: usize, group: usize) -> SelectHost {
        let (sc, uc) = (k + ALWAYS, group * k + ALWAYS);
        let mut host = SelectHost {
            sel: vec![POISON_I32; want.len() * group * sc],
            sel_pos: vec![POISON_I32; want.len() * group * sc],
            sel_count: vec![0; want.len() * group],
            uni: vec![POISON_I32; want.len() * uc],
            uni_count: vec![0; want.len()],
            k,
            group,
            arrivals: Vec::new(),
        };
        for (kh, s) in want.iter().enumerate() {
            host.uni_count[kh] = s.union.len() as i32;
            for (u, &t) in s.union.iter().enumerate() {
                host.uni[kh * uc + u] = t as i32;
            }
            for g in 0..group {
                let qh = kh * group + g;
                host.sel_count[qh] = s.heads[g].len() as i32;
                for (j, (&t, &r)) in s.heads[g].iter().zip(&s.rows[g]).enumerate() {
                    host.sel[qh * sc + j] = t as i32;
                    host.sel_pos[qh * sc + j] = r as i32;
                }
            }
        }
        host
    }

    fn selections(k: usize, group: usize) -> Vec<Selection> {
        [300usize, 20, 50]
            .iter()
            .map(|&n| {
                let heads: Vec<Vec<f64>> = (0..group)
                    .map(|g| (0..n).map(|i| ((i * 7 + g * 13) % 17) as f64).collect())
                    .collect();
                Selection::from_scores(&heads, k)
            })
            .collect()
    }

    #[test]
    fn a_correct_selection_passes() {
        let want = selections(10, 3);
        let mut m = Mismatches::new("correct", 0);
        check_selection(&laid_out(&want, 10, 3), &want, &mut m);
        assert_eq!(m.count(), 0);
    }

    #[test]
    fn every_kind_of_wrong_selection_fails() {
        let want = selections(10, 3);
        let good = laid_out(&want, 10, 3);
        const SC: usize = 10 + ALWAYS;
        type Corruption = Box<dyn Fn(&mut SelectHost)>;
        let corruptions: Vec<Corruption> = vec![
            Box::new(|h| h.sel[5] += 1),
            Box::new(|h| h.sel_pos[SC + 3] += 1),
            Box::new(|h| h.sel_count[2] -= 1),
            Box::new(|h| h.uni_count[1] += 1),
            Box::new(|h| h.uni[4] = 1000),
            // A write past the counts: the 20-token sequence selects 20 of 46 rows.
            Box::new(|h| h.sel[3 * SC + 30] = 7),
            Box::new(|h| h.uni[(3 * 10 + ALWAYS) + 25] = 7),
        ];
        for (i, corrupt) in corruptions.iter().enumerate() {
            let mut bad = good.clone();
            corrupt(&mut bad);
            let mut m = Mismatches::new("corrupted", 0);
            check_selection(&bad, &want, &mut m);
            assert!(m.count() > 0, "corruption {i} went unnoticed");
        }
    }

    #[test]
    fn dot_tolerance_is_fp32_rounding_of_the_magnitude() {
        let q = vec![1.0; 128];
        let tol = dot_tolerance(&q, vec![2.0; 128]);
        // 128 · 2⁻²⁴ relative to Σ|q·k| = 256, within 1%.
        let expect = 128.0 * 2f64.powi(-24) * 256.0;
        assert!((tol / expect - 1.0).abs() < 0.01, "{tol} vs {expect}");
    }
}
