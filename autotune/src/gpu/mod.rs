//! The [`Bench`] of a real GPU: every candidate is checked against the f64 reference, then
//! timed with CUDA events.
//!
//! Timing ([`device::Device::time`]): two warm-up runs, then `reps` runs, each after the L2
//! cache is overwritten (a memset of [`FLUSH_BYTES`] outside the timed window), so that every
//! run reads its inputs fresh from HBM or host memory as a decode step does, not from a warm
//! L2.
//!
//! What each subject times and checks:
//! - the store subjects, on stores built from random keys through the reference store and
//!   planned on the device with `fathom(48)`, checked on a sample of tokens: a scan tile, the
//!   scan alone (source runs, in the case's placement, at the grid the step launches: fitted
//!   to one wave in HBM, `Tiles::scan_one_wave`); a gather tile, the gather alone (host
//!   to staging); a transfer, everything the transfer puts between the plan and the scores:
//!   `fused` is the host scan, `copy-kernel` the gather and the HBM scan of the staged runs,
//!   each with the best tile found earlier in the run (cases are ordered so that the scan and
//!   gather come first) or the runtime's default;
//! - `plan` (`plan.rs`): the plan kernel on that store;
//! - `select` (`select.rs`), `attention` (`attention.rs`), and `oracle`, `landmark`, `fetch`
//!   (`rows.rs`) on fresh random scores and K/V rows (`inputs.rs`);
//! - `pariskv_vote`, `pariskv_topc`, `pariskv_rerank` (`pariskv.rs`): each family's own launches
//!   on an index built on the device from the random keys of `inputs.rs` and on the outputs of
//!   a default retrieval chain, checked exactly against `reference::pariskv` on a
//!   sample of KV heads (the first and the last).

mod attention;
mod device;
mod inputs;
mod pariskv;
mod plan;
mod rows;
mod select;
mod store;

use std::collections::HashMap;
use std::sync::Arc;

use codegen::spec::shape::LaunchDims;
use codegen::spec::{GatherSpec, KernelSpec, Placement, ScanSpec};
use cudarc::driver::CudaFunction;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use reference::score::scan_tolerance;
use reference::store::HeadStore;
use runtime::abi;
use runtime::ceilings::Ceilings;
use runtime::gpu::{DeviceBuffer, Gpu};
use runtime::launch::KernelArgs;
use runtime::step::Transfer;
use runtime::tuning::fit_scan_tile;
use runtime::tuning::{EntryKey, EntryRecord, Subject, Variant};
use runtime::tuning::{Tile, Tiles, TunedFamily};

pub use device::{Device, FLUSH_BYTES};
pub use inputs::{HostRows, HostScores};
pub use store::{reference_stores, DevicePlan, DeviceStore, PlanSource, Staging, PLAN_BITS};

use crate::candidates::{gather_spec, scan_spec, Case, SEGMENT_WORDS};
use crate::tuner::{Bench, CaseInfo, Reps};
use device::{gpu_err, Launch};

/// Tokens of each head compared with the reference (plus the first and the last).
pub const SAMPLE_TOKENS: usize = 2048;

/// The inputs of the store cases of one (shape, heads, context, placement).
pub(crate) struct Prepared {
    ident: (usize, usize, usize, usize, Placement),
    pub(crate) store: DeviceStore,
    /// Where the staged run table points.
    pub(crate) staging: Staging,
    pub(crate) plan: DevicePlan,
    scores: DeviceBuffer<f32>,
    /// What a scan that writes the peaks of its 32-token halves writes them to
    /// (`[heads][G][ld_peaks]`), for the cases whose step has its select read them.
    peaks: DeviceBuffer<u32>,
    /// Token positions compared, and per `(h, g, sample)` the reference score and the
    /// tolerances of the plain and the tensor-core scan.
    sample: Vec<usize>,
    want: Vec<(f64, f64, f64)>,
}

/// Which bench a case belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Scan, gather, transfer: the store and its plan.
    Store,
    Plan,
    Select,
    Attention,
    /// Oracle, landmark, fetch.
    Rows,
    /// The ParisKV vote, top-C and rerank.
    Pariskv,
}

fn kind(case: &Case) -> Kind {
    match case.subject {
        Subject::Kernel(TunedFamily::Plan) => Kind::Plan,
        Subject::Kernel(TunedFamily::Select) => Kind::Select,
        Subject::Kernel(TunedFamily::Attention) => Kind::Attention,
        Subject::Kernel(TunedFamily::Oracle | TunedFamily::Landmark | TunedFamily::Fetch) => {
            Kind::Rows
        }
        Subject::Kernel(
            TunedFamily::PariskvVote | TunedFamily::PariskvTopc | TunedFamily::PariskvRerank,
        ) => Kind::Pariskv,
        Subject::Kernel(TunedFamily::Scan | TunedFamily::Gather) | Subject::Transfer => Kind::Store,
    }
}

/// Times candidates on one GPU.
pub struct GpuBench {
    dev: Device,
    /// Reference stores by (head dimension, tokens), as many heads as any case asked for:
    /// encoding 1M tokens on the CPU is the slowest part of a case, so it is done once.
    references: HashMap<(usize, usize), Vec<HeadStore>>,
    /// `PlanSource::Synthetic`'s layer of the last shape planned.
    synthetic: Option<store::SyntheticLayer>,
    prepared: Option<Prepared>,
    winners: HashMap<EntryKey, Tile>,
    inputs: inputs::Inputs,
    /// Where the store cases' plan takes its queries and variances from.
    plan_source: PlanSource,
    select: select::SelectBench,
    attention: attention::AttentionBench,
    rows: rows::RowsBench,
    pariskv: pariskv::PariskvBench,
}

impl GpuBench {
    /// A bench on `gpu`, judging rates against `ceilings`, loading kernels through a
    /// `runtime::jit::Jit` on the default kernel cache.
    pub fn new(gpu: Arc<Gpu>, ceilings: Ceilings) -> Result<Self, String> {
        Ok(GpuBench {
            dev: Device::new(gpu, ceilings)?,
            references: HashMap::new(),
            synthetic: None,
            prepared: None,
            winners: HashMap::new(),
            inputs: inputs::Inputs::default(),
            plan_source: PlanSource::default(),
            select: select::SelectBench::default(),
            attention: attention::AttentionBench::default(),
            rows: rows::RowsBench::default(),
            pariskv: pariskv::PariskvBench::default(),
        })
    }

    /// Plans the store cases (scan, gather, transfer, plan) on the queries and variances of
    /// `source` (`autotune --plan-inputs`).
    pub fn set_plan_source(&mut self, source: PlanSource) {
        self.plan_source = source;
    }

    /// Compiles (or loads from the kernel cache) every spec of `specs` on all cores; a spec that
    /// fails is reported by its candidate's verification.
    pub fn preload(&self, specs: &[KernelSpec]) {
        self.dev.preload(specs);
    }

    /// [`Device::preload_in_background`].
    pub fn preload_in_background(
        &self,
        specs: Vec<KernelSpec>,
        threads: usize,
    ) -> std::thread::JoinHandle<std::time::Duration> {
        self.dev.preload_in_background(specs, threads)
    }

    /// Uses the winning tile of `entry` for later cases that need that family as a part.
    pub fn adopt(&mut self, entry: &EntryRecord) {
        if let Some(Variant::Tile(tile)) = entry.winner.as_ref().map(|w| w.variant) {
            self.winners.insert(entry.key, tile);
        }
    }

    fn tile(&self, case: &Case, family: TunedFamily, placement: Placement) -> Option<Tile> {
        let key = EntryKey {
            subject: Subject::Kernel(family),
            placement,
            ..case.key()
        };
        self.winners.get(&key).copied()
    }

    /// The scan of `case`'s shape in `placement`: the adopted winner, else the default.
    fn part_scan(&self, case: &Case, placement: Placement) -> ScanSpec {
        let (w, t) = fit_scan_tile(Tiles::default().scan(placement, case.group), SEGMENT_WORDS);
        let case = Case {
            placement,
            ..case.clone()
        };
        let default = ScanSpec {
            peaks: self.scan_peaks(&case),
            ..scan_spec(&case, w, t, false)
        };
        self.tile(&case, TunedFamily::Scan, placement)
            .and_then(|tile| tile.on_scan(default))
            .unwrap_or(default)
    }

    /// Whether the step of `case`'s shape and context has its scan write the peaks of its
    /// 32-token halves, as `runtime::step::launches` decides it: the select it runs (the one
    /// adopted in this run, the selects being tuned before the scans; else the one of the
    /// record the runtime reads, adopted before the run; else the runtime's default) reads
    /// them. A scan candidate is timed so, since the peaks cost it registers
    /// and stores (at 1M on an H100 the record's two best tiles swap places with them).
    fn scan_peaks(&self, case: &Case) -> bool {
        Tiles::default()
            .select_for(self.tile(case, TunedFamily::Select, Placement::Hbm))
            .is_ok_and(|(_, _, algorithm)| algorithm.scan_peaks())
    }

    fn part_gather(&self, case: &Case) -> GatherSpec {
        let (l, t) = match self.tile(case, TunedFamily::Gather, Placement::Host) {
            Some(Tile::Gather {
                loads_in_flight,
                threads,
            }) => (loads_in_flight, threads),
            _ => Tiles::default().gather,
        };
        gather_spec(case, l, t)
    }

    fn prepared(&self) -> Result<&Prepared, String> {
        self.prepared
            .as_ref()
            .ok_or_else(|| "the case was not prepared".to_string())
    }

    /// The kernels a store `variant` runs, in order, each with whether its scan reads the
    /// staged run table; `checking` adds what makes a gather's output comparable with the
    /// reference (the HBM scan of what it staged).
    fn parts(
        &self,
        case: &Case,
        variant: &Variant,
        checking: bool,
    ) -> Result<Vec<(KernelSpec, bool)>, String> {
        Ok(match *variant {
            Variant::Tile(Tile::Scan {
                tile_words,
                threads,
                tensor_cores,
            }) => vec![(
                ScanSpec {
                    peaks: self.scan_peaks(case),
                    ..scan_spec(case, tile_words, threads, tensor_cores)
                }
                .into(),
                false,
            )],
            Variant::Tile(Tile::Gather {
                loads_in_flight,
                threads,
            }) => {
                let mut parts = vec![(gather_spec(case, loads_in_flight, threads).into(), false)];
                if checking {
                    parts.push((self.part_scan(case, Placement::Hbm).into(), true));
                }
                parts
            }
            Variant::Transfer(Transfer::Fused) => {
                vec![(self.part_scan(case, Placement::Host).into(), false)]
            }
            Variant::Transfer(Transfer::CopyKernel) => vec![
                (self.part_gather(case).into(), false),
                (self.part_scan(case, Placement::Hbm).into(), true),
            ],
            other => return Err(format!("{} is not timed by this bench", other.name())),
        })
    }

    /// The launch of scan `s` as the step makes it: in HBM, fitted to one wave of this GPU
    /// where the spec's grid takes more (`Tiles::scan_one_wave`), so that a candidate is timed
    /// at the grid it will run at.
    fn scan_grid(
        &self,
        s: &ScanSpec,
        f: &CudaFunction,
        heads: usize,
        max_seg: usize,
    ) -> Result<LaunchDims, String> {
        let dims = s.launch_dims(1, heads, max_seg);
        if s.placement != Placement::Hbm || !Tiles::default().scan_one_wave {
            return Ok(dims);
        }
        let ((stripes, segments, columns), (threads, _, _), shared) = dims;
        let resident = self
            .dev
            .gpu
            .resident_blocks(f, threads, shared as usize)
            .map_err(gpu_err)?;
        Ok(
            match s.one_wave_stripes(stripes as usize, (segments * columns) as usize, resident) {
                Some(fit) => s.launch_dims_striped(1, heads, max_seg, fit),
                None => dims,
            },
        )
    }

    /// The launches of store `parts`: (function, grid, block, arguments).
    fn launches(&self, case: &Case, parts: Vec<(KernelSpec, bool)>) -> Result<Vec<Launch>, String> {
        let heads = case.kv_heads;
        let mut out = Vec::new();
        for (spec, staged) in parts {
            let f = self.dev.function(spec)?;
            let p = self.prepared()?;
            let max_seg = p.store.max_seg;
            let (grid, block, args) = match spec {
                KernelSpec::Scan(s) => {
                    let (grid, block, _) = self.scan_grid(&s, &f, heads, max_seg)?;
                    let runs = if staged {
                        &p.plan.staged_runs
                    } else {
                        &p.plan.runs
                    };
                    let args = abi::scan::Args {
                        runs: runs.ptr(),
                        class_count: p.plan.class_count.ptr(),
                        q_store: p.plan.q_store.ptr(),
                        n_stored: p.store.n_stored.ptr(),
                        max_seg: max_seg as i32,
                        n_heads: heads as i32,
                        // The prepared scores and peaks are the bench's, written by its
                        // launches only.
                        scores: p.scores.shared_ptr_mut(),
                        ld_scores: case.tokens as i32,
                    };
                    let peaks = s.peaks.then(|| {
                        let ld_peaks = codegen::spec::peaks::ld_peaks(case.tokens);
                        (p.peaks.shared_ptr_mut(), ld_peaks as i32)
                    });
                    let args = abi::scan_args(args, peaks);
                    (grid, block, args)
                }
                KernelSpec::Gather(g) => {
                    let (grid, block, _) = g.launch_dims(1, heads, max_seg);
                    let args = abi::gather::Args {
                        src_runs: p.plan.runs.ptr(),
                        dst_runs: p.plan.staged_runs.ptr(),
                        class_count: p.plan.class_count.ptr(),
                        n_stored: p.store.n_stored.ptr(),
                        max_seg: max_seg as i32,
                        n_heads: heads as i32,
                    }
                    .args();
                    (grid, block, args)
                }
                other => {
                    return Err(format!(
                        "{} is not timed by this bench",
                        other.kernel_name()
                    ))
                }
            };
            out.push((f, grid, block, args));
        }
        Ok(out)
    }

    /// Compares the sampled scores with the reference, within the tolerance of the plain or
    /// the tensor-core scan.
    fn compare(&self, case: &Case, tensor_cores: bool) -> Result<(), String> {
        let p = self.prepared()?;
        self.dev.read_back(&p.scores, |scores| {
            compare_sample(p, case, tensor_cores, scores)
        })?
    }

    /// Builds (or keeps) the store, staging and plan of a store or plan case.
    fn prepare_store(&mut self, case: &Case) -> Result<CaseInfo, String> {
        let (d, g, heads, n) = (case.head_dim, case.group, case.kv_heads, case.tokens);
        let store_placement = match case.subject {
            Subject::Kernel(TunedFamily::Scan) => case.placement,
            _ => Placement::Host,
        };
        let ident = (d, g, heads, n, store_placement);
        if self.prepared.as_ref().map(|p| p.ident) != Some(ident) {
            // Free the previous case's memory before allocating this one's.
            self.prepared = None;
            if self.references.get(&(d, n)).is_none_or(|r| r.len() < heads) {
                self.references
                    .insert((d, n), reference_stores(d, heads, n)?);
            }
            let stores = &self.references[&(d, n)][..heads];
            let gpu = &self.dev.gpu;
            let store = DeviceStore::new(gpu, store_placement, stores)?;
            let staging = Staging::new(gpu, heads, store.max_seg, d)?;
            let plan_spec = store::plan_spec(d, g);
            let plan_kernel = self.dev.function(plan_spec.into())?;
            let inputs =
                store::PlanInputs::new(gpu, heads, g, d, n, self.plan_source, &mut self.synthetic)?;
            let plan = store::plan(gpu, &plan_kernel, plan_spec, &store, &staging, inputs)?;
            let mut rng = ChaCha8Rng::seed_from_u64(n as u64);
            let mut sample: Vec<usize> = (0..n).collect::<Vec<_>>();
            sample.shuffle(&mut rng);
            sample.truncate(SAMPLE_TOKENS);
            sample.extend([0, n - 1]);
            let want = reference_sample(stores, &plan, g, &sample);
            let scores = gpu.filled(heads * g * n, 0xff).map_err(gpu_err)?;
            let peaks = gpu
                .filled(heads * g * codegen::spec::peaks::ld_peaks(n), 0xff)
                .map_err(gpu_err)?;
            self.prepared = Some(Prepared {
                ident,
                store,
                staging,
                plan,
                scores,
                peaks,
                sample,
                want,
            });
        }
        // Compile every candidate of the case on all cores now; one that fails is disqualified
        // when it is verified, by its own error.
        let specs: Vec<KernelSpec> = crate::candidates::enumerate(case)
            .iter()
            .flat_map(|v| match kind(case) {
                Kind::Plan => crate::candidates::tile_spec(case, v)
                    .map(|s| vec![s])
                    .unwrap_or_default(),
                _ => self
                    .parts(case, v, true)
                    .map(|parts| parts.into_iter().map(|(s, _)| s).collect())
                    .unwrap_or_default(),
            })
            .collect();
        self.dev.preload(&specs);
        let p = self.prepared()?;
        if kind(case) == Kind::Plan {
            // The plan's output is tables, not a stream of bytes: no rate to judge.
            return Ok(CaseInfo {
                bytes: None,
                ceiling: None,
            });
        }
        let ceiling = match (case.subject, case.placement) {
            (Subject::Kernel(TunedFamily::Scan), Placement::Hbm) => {
                self.dev.read_ceiling(Placement::Hbm)
            }
            _ => (
                "pinned copy".to_string(),
                self.dev.ceilings.pinned_copy_gbps,
            ),
        };
        Ok(CaseInfo {
            bytes: Some(p.plan.bytes),
            ceiling: Some(ceiling),
        })
    }
}

/// Whether the scores of a store variant's `parts` come from a tensor-core scan: the last scan
/// among them writes them (a gather's or a transfer's check runs the run's best HBM scan).
fn scores_from_tensor_cores(parts: &[(KernelSpec, bool)]) -> bool {
    parts
        .iter()
        .rev()
        .find_map(|(k, _)| match k {
            KernelSpec::Scan(s) => Some(s.tensor_cores),
            _ => None,
        })
        .unwrap_or(false)
}

/// The sampled scores of a scan candidate against the reference, within the tolerance of the
/// plain or the tensor-core scan.
fn compare_sample(
    p: &Prepared,
    case: &Case,
    tensor_cores: bool,
    scores: &[f32],
) -> Result<(), String> {
    let (g, n) = (case.group, case.tokens);
    let mut k = 0;
    for h in 0..case.kv_heads {
        for gi in 0..g {
            let row = &scores[(h * g + gi) * n..(h * g + gi + 1) * n];
            for &i in &p.sample {
                let (want, plain, tc) = p.want[k];
                let bound = if tensor_cores { tc } else { plain };
                k += 1;
                let got = row[i];
                // NaN is a mismatch too.
                let within = (f64::from(got) - want).abs() <= bound;
                if !within {
                    return Err(format!(
                        "head {h} query {gi} token {i}: {got}, want {want} (tolerance {bound:.3e})"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The reference score of each sampled token, with the tolerances of the plain and the
/// tensor-core scan (`reference::score::scan_tolerance`, the bounds of the scan's tests): the
/// sum of `q_c · x̂_c` over the plan's active channels, as `score_stored` forms it from the
/// reference's own decode (computed for the sample only: all of a 1M-token head would take
/// longer than tuning it).
fn reference_sample(
    stores: &[HeadStore],
    plan: &DevicePlan,
    g: usize,
    sample: &[usize],
) -> Vec<(f64, f64, f64)> {
    let d = stores[0].layout().head_dim();
    let mut out = Vec::new();
    for (h, store) in stores.iter().enumerate() {
        let depths = &plan.depths[h * d..(h + 1) * d];
        for gi in 0..g {
            let q: Vec<f64> = plan.queries[(h * g + gi) * d..(h * g + gi + 1) * d]
                .iter()
                .map(|&x| f64::from(x))
                .collect();
            for &i in sample {
                let sum: f64 = depths
                    .iter()
                    .enumerate()
                    .filter(|&(_, &t)| t > 0)
                    .map(|(c, &t)| q[c] * store.decode(i, c, t))
                    .sum();
                out.push((
                    sum,
                    scan_tolerance(store, depths, &q, i, false),
                    scan_tolerance(store, depths, &q, i, true),
                ));
            }
        }
    }
    out
}

impl Bench for GpuBench {
    fn prepare(&mut self, case: &Case) -> Result<CaseInfo, String> {
        // Cases of one bench follow each other: free what the others hold (gigabytes of rows
        // and stores at 1M tokens) before this one allocates.
        let k = kind(case);
        if !matches!(k, Kind::Store | Kind::Plan) {
            self.prepared = None;
        }
        if k != Kind::Select {
            self.select.release();
        }
        if k != Kind::Attention {
            self.attention.release();
        }
        if k != Kind::Rows {
            self.rows.release();
        }
        if k != Kind::Pariskv {
            self.pariskv.release();
        }
        match k {
            Kind::Store | Kind::Plan => self.prepare_store(case),
            Kind::Select => self.select.prepare(&self.dev, &mut self.inputs, case),
            Kind::Attention => self.attention.prepare(&self.dev, &mut self.inputs, case),
            Kind::Rows => self.rows.prepare(&self.dev, &mut self.inputs, case),
            Kind::Pariskv => self.pariskv.prepare(&self.dev, &mut self.inputs, case),
        }
    }

    fn verify(&mut self, case: &Case, variant: &Variant) -> Result<(), String> {
        let dev = &self.dev;
        match kind(case) {
            Kind::Store => {
                let parts = self.parts(case, variant, true)?;
                // The bound is that of the scan that wrote the scores: a gather or transfer is
                // checked through the run's best scan tile, which may be a tensor-core one.
                let tensor_cores = scores_from_tensor_cores(&parts);
                let launches = self.launches(case, parts)?;
                dev.gpu
                    .fill(&self.prepared()?.scores, 0xff)
                    .map_err(gpu_err)?;
                dev.run_once(&launches)?;
                self.compare(case, tensor_cores)
            }
            Kind::Plan => {
                let p = self.prepared()?;
                let (launches, out) = plan::candidate(dev, p, case, variant)?;
                dev.run_once(&launches)?;
                plan::check(p, case, &out)
            }
            Kind::Select => {
                let (launches, out) = self.select.candidate(dev, case, variant)?;
                dev.run_once(&launches)?;
                self.select.check(&out)
            }
            Kind::Attention => {
                let (launches, out) = self.attention.candidate(dev, case, variant)?;
                dev.run_once(&launches)?;
                self.attention.check(case, &out)
            }
            Kind::Rows => {
                let (launches, out) = self.rows.candidate(dev, case, variant)?;
                dev.run_once(&launches)?;
                self.rows.check(dev, case, &out)
            }
            Kind::Pariskv => {
                let (launches, out) = self.pariskv.candidate(dev, case, variant)?;
                dev.run_once(&launches)?;
                self.pariskv.check(case, &out)
            }
        }
    }

    fn time(&mut self, case: &Case, variant: &Variant, reps: Reps) -> Result<Vec<f64>, String> {
        let dev = &self.dev;
        // The outputs stay alive until the timed runs are done.
        match kind(case) {
            Kind::Store => {
                let parts = self.parts(case, variant, false)?;
                dev.time(&self.launches(case, parts)?, reps)
            }
            Kind::Plan => {
                let (launches, _out) = plan::candidate(dev, self.prepared()?, case, variant)?;
                dev.time(&launches, reps)
            }
            Kind::Select => {
                let (launches, _out) = self.select.candidate(dev, case, variant)?;
                dev.time(&launches, reps)
            }
            Kind::Attention => {
                let (launches, _out) = self.attention.candidate(dev, case, variant)?;
                dev.time(&launches, reps)
            }
            Kind::Rows => {
                let (launches, _out) = self.rows.candidate(dev, case, variant)?;
                dev.time(&launches, reps)
            }
            Kind::Pariskv => {
                let (launches, _out) = self.pariskv.candidate(dev, case, variant)?;
                dev.time(&launches, reps)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidates::SUBJECTS;

    /// A gather checked through a tensor-core scan is held to the tensor-core bound: with the
    /// plain one, every gather of the 2026-12-08 H100 record was disqualified at G = 4 and 8.
    #[test]
    fn a_check_takes_the_bound_of_the_scan_that_wrote_the_scores() {
        let case = Case {
            subject: Subject::Kernel(TunedFamily::Gather),
            head_dim: 128,
            group: 4,
            kv_heads: 8,
            placement: Placement::Host,
            tokens: 1 << 17,
            opt_in: Default::default(),
            grid: Default::default(),
        };
        let gather: KernelSpec = gather_spec(&case, 4, 128).into();
        let scan = |tc: bool| -> KernelSpec {
            let hbm = Case {
                placement: Placement::Hbm,
                ..case.clone()
            };
            scan_spec(&hbm, 2, 128, tc).into()
        };
        assert!(scores_from_tensor_cores(&[
            (gather, false),
            (scan(true), true)
        ]));
        assert!(!scores_from_tensor_cores(&[
            (gather, false),
            (scan(false), true)
        ]));
        assert!(scores_from_tensor_cores(&[(scan(true), false)]));
        assert!(!scores_from_tensor_cores(&[(gather, false)]));
    }

    #[test]
    fn every_subject_has_a_bench() {
        for &(subject, placement) in &SUBJECTS {
            let case = Case {
                subject,
                head_dim: 128,
                group: 4,
                kv_heads: 8,
                placement,
                tokens: 1 << 15,
                opt_in: Default::default(),
                grid: Default::default(),
            };
            let k = kind(&case);
            match subject {
                Subject::Transfer => assert_eq!(k, Kind::Store),
                Subject::Kernel(f) => assert_eq!(
                    k == Kind::Store,
                    matches!(f, TunedFamily::Scan | TunedFamily::Gather),
                    "{f:?}"
                ),
            }
        }
    }
}
