//! The GPU part of the benchmark: builds the stores, then times every cell and samples its
//! fidelity. Everything computed from the measurements lives in GPU-free modules.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use codegen::model::{Basis, ModelShape};
use codegen::spec::Placement;
use half::bf16;
use indicatif::{ProgressBar, ProgressStyle};
use reference::plans::{depth_plan, DepthPlan, Method, PlanContext};
use reference::select::paper_k;
use reference::store::BlockSize;
use reference::synthetic::{SyntheticHead, SyntheticSettings};
use runtime::ceilings::{self, Ceilings};
use runtime::gpu::{DeviceBuffer, Gpu, GpuError};
use runtime::jit::{Jit, JitError};
use runtime::step::{
    Calibration, CalibrationError, Decoder, DecoderConfig, StepError, StepGraph, StepRequest,
};
use runtime::store::StoreError;
use thiserror::Error;

use super::args::{context_label, Options, BLOCK, MIN_STEPS};
use super::data::{self, DataError, HeadCalibration};
use super::figures::{
    floor_ms, footprint_parts, group_bytes, median, pariskv_index_bytes, recall_k, steps_within,
    time_capped,
};
use super::record::{date_of, Generator, Header, Row};
use super::reference::{compare, context_truth, ContextTruth};
use super::stores::{compose, prefix_histograms, LayerTables, StoreSet};

/// Words per plane per segment of the stores (the decoder's default).
pub const SEGMENT_WORDS: usize = 512;
/// Device memory kept free beside a dense cell's workspace.
const HEADROOM: usize = 4 << 30;

/// Why the run stopped (a cell's own failure is a row, not this).
#[derive(Debug, Error)]
pub enum BenchError {
    #[error("model: {0}")]
    Model(String),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    Jit(#[from] JitError),
    #[error(transparent)]
    Ceilings(#[from] ceilings::CeilingsError),
    #[error("key store: {0}")]
    Store(#[from] StoreError),
    #[error("decoder: {0}")]
    Step(#[from] StepError),
    #[error("calibration: {0}")]
    Calibration(#[from] CalibrationError),
    #[error(transparent)]
    Data(#[from] DataError),
    #[error("NVRTC version: {0}")]
    Nvrtc(String),
    /// A cell that is not run, and why (its row's status).
    #[error("skipped: {0}")]
    Skipped(String),
}

/// Everything the cells read.
struct Bench {
    gpu: Arc<Gpu>,
    jit: Arc<Jit>,
    options: Options,
    model: ModelShape,
    settings: Vec<SyntheticSettings>,
    /// `[slot][h]`: slot 0 keeps its keys and values (the fidelity sample); the others only
    /// their queries.
    heads: Vec<Vec<SyntheticHead>>,
    calibration: Vec<Vec<HeadCalibration>>,
    raw: HashMap<Placement, StoreSet>,
    klt: HashMap<Placement, StoreSet>,
    raw_decoder: Decoder,
    klt_decoder: Option<Decoder>,
    raw_calibration: Calibration,
    ceilings: Ceilings,
    truths: HashMap<usize, ContextTruth>,
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(&format!(
        "{what} [{{elapsed_precise}}] {{bar:40}} {{pos}}/{{len}} {{msg}}"
    )) {
        bar.set_style(style);
    }
    bar
}

fn slots_model(model: &ModelShape, slots: usize, basis: Basis) -> ModelShape {
    ModelShape {
        layers: slots,
        basis,
        ..model.clone()
    }
}

fn bits_of(keys: &[bf16]) -> Vec<u16> {
    keys.iter().map(|x| x.to_bits()).collect()
}

/// `[L][H][D]`-shaped per-layer data: layer `l` takes slot `l % slots`.
fn per_layer<T: Copy>(layers: usize, slots: usize, per_slot: impl Fn(usize) -> Vec<T>) -> Vec<T> {
    let data: Vec<Vec<T>> = (0..slots).map(&per_slot).collect();
    (0..layers).flat_map(|l| data[l % slots].clone()).collect()
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(4, usize::from)
}

impl Bench {
    fn new(options: Options) -> Result<Bench, BenchError> {
        let model =
            codegen::model::preset(&options.model).map_err(|e| BenchError::Model(e.to_string()))?;
        let gpu = Arc::new(Gpu::open(options.device)?);
        let jit = Arc::new(Jit::with_default_cache(gpu.clone())?);
        eprintln!("step-bench: {} on {}", model.name, gpu.info().name);
        let ceilings = ceilings::measure(&jit, 1 << 30, 20)?;
        eprintln!("step-bench: ceilings {ceilings:?}");
        if let Some(warning) = ceilings.mapped_read_warning() {
            eprintln!("step-bench: warning: {warning}");
        }
        eprintln!(
            "step-bench: K/V rows {}, attention rows {} in HBM",
            options.kv_rows, options.attention_rows
        );
        let (n, slots) = (options.max_context(), options.slots);
        let settings: Vec<SyntheticSettings> = (0..slots)
            .map(|s| data::settings(&model, options.seed, s, n))
            .collect();
        let progress = bar((slots * model.kv_heads) as u64, "generating");
        let mut heads = data::generate_slots(&settings, threads(), &|| progress.inc(1))?;
        progress.finish();
        let r = options
            .methods
            .iter()
            .find_map(|m| match m {
                Method::DoubleSparsity { r } => Some(*r),
                _ => None,
            })
            .unwrap_or(32);
        let calibration = heads
            .iter()
            .enumerate()
            .map(|(s, hs)| {
                hs.iter()
                    .enumerate()
                    .map(|(h, head)| data::calibrate(head, &settings[s], s, h, r))
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (d, hk, layers) = (model.head_dim, model.kv_heads, model.layers);
        let rotations_of = |s: usize| -> Vec<f32> {
            calibration[s]
                .iter()
                .flat_map(|c| c.klt.basis_row_major().into_iter().map(|x| x as f32))
                .collect()
        };
        let needs_klt = options
            .methods
            .iter()
            .any(|m| matches!(m, Method::Loki { .. }));
        let needs_pariskv = options
            .methods
            .iter()
            .any(|m| matches!(m, Method::Pariskv { .. }));
        let mut raw = HashMap::new();
        let mut klt = HashMap::new();
        for &placement in &options.placements {
            raw.insert(
                placement,
                StoreSet::new(
                    &gpu,
                    jit.as_ref(),
                    &slots_model(&model, slots, Basis::Raw),
                    placement,
                    options.host_memory,
                    options.kv_rows,
                    n + BLOCK,
                    None,
                    true,
                    needs_pariskv,
                )?,
            );
            if needs_klt {
                let rotations: Vec<f32> = (0..slots).flat_map(rotations_of).collect();
                klt.insert(
                    placement,
                    StoreSet::new(
                        &gpu,
                        jit.as_ref(),
                        &slots_model(&model, slots, Basis::Klt),
                        placement,
                        options.host_memory,
                        options.kv_rows,
                        n + BLOCK,
                        Some(rotations),
                        false,
                        false,
                    )?,
                );
            }
        }
        let progress = bar(slots as u64, "prefilling");
        for (s, slot) in heads.iter_mut().enumerate() {
            let keys: Vec<u16> = slot.iter().flat_map(|h| bits_of(&h.keys)).collect();
            let keys = gpu.upload(&keys)?;
            let values: Vec<u16> = slot.iter().flat_map(|h| bits_of(&h.values)).collect();
            let values = gpu.upload(&values)?;
            for set in raw.values_mut().chain(klt.values_mut()) {
                set.fill(s, &keys, &values)?;
            }
            if s > 0 {
                for h in slot.iter_mut() {
                    h.keys = Vec::new();
                    h.values = Vec::new();
                }
            }
            progress.inc(1);
        }
        progress.finish();
        let sigma2 = per_layer(layers, slots, |s| {
            calibration[s]
                .iter()
                .flat_map(|c| c.sigma2.iter().map(|&x| x as f32))
                .collect()
        });
        let masks = per_layer(layers, slots, |s| {
            calibration[s]
                .iter()
                .flat_map(|c| c.double_sparsity.mask())
                .collect()
        });
        let raw_calibration = Calibration::new(layers, hk, d)
            .with_sigma2(sigma2)?
            .with_double_sparsity(r, masks)?;
        let config = decoder_config(&options);
        let raw_decoder = Decoder::with_kernels(gpu.clone(), model.clone(), config, jit.clone())?
            .with_calibration(raw_calibration.clone())?;
        let klt_decoder = if needs_klt {
            let klt_model = ModelShape {
                basis: Basis::Klt,
                ..model.clone()
            };
            let calibration = Calibration::new(layers, hk, d).with_rotation(per_layer(
                layers,
                slots,
                rotations_of,
            ))?;
            Some(
                Decoder::with_kernels(gpu.clone(), klt_model, config, jit.clone())?
                    .with_calibration(calibration)?,
            )
        } else {
            None
        };
        Ok(Bench {
            gpu,
            jit,
            options,
            model,
            settings,
            heads,
            calibration,
            raw,
            klt,
            raw_decoder,
            klt_decoder,
            raw_calibration,
            ceilings,
            truths: HashMap::new(),
        })
    }

    /// Raw f32 queries `[H][G][D]` of `slot` at decode position `n`.
    fn slot_queries(&self, slot: usize, n: usize) -> Vec<Vec<Vec<f64>>> {
        let generated = self.settings[slot].n;
        let base = self.settings[slot].rope_base;
        self.heads[slot]
            .iter()
            .map(|h| data::queries_at(h, generated, n, base))
            .collect()
    }

    fn header(&self, date_unix: u64) -> Result<Header, BenchError> {
        let (major, minor) =
            codegen::nvrtc::version().map_err(|e| BenchError::Nvrtc(e.to_string()))?;
        let info = self.gpu.info();
        let s = &self.settings[0];
        Ok(Header {
            gpu: info.name.clone(),
            compute_capability: info.compute_capability_text(),
        driver_cuda: info.driver_cuda(),
            nvrtc: format!("{major}.{minor}"),
            commit: self.options.commit.clone(),
            host_memory: self.options.host_memory.to_string(),
            kv_rows: self.options.kv_rows.to_string(),
            attention_rows: self.options.attention_rows.to_string(),
            pariskv_query_blocks: self.options.pariskv_query_blocks,
            overlap_tail: self.options.overlap_tail,
            head_groups: self.options.head_groups,
            tail_in_plan: self.options.tail_in_plan,
            plan_batched_runs: self.options.plan_batched_runs,
            plan_run_blocks: self.options.plan_run_blocks,
            scan_stripes: self.options.scan_stripes,
            scan_one_wave: self.options.scan_one_wave,
            plan_paired_runs: self.options.plan_paired_runs,
            plan_direct_line: self.options.plan_direct_line,
            attention_cluster_merge: self.options.attention_cluster_merge,
            attention_prefetch_rows: self.options.attention_prefetch_rows,
            select_coarse_floor: self.options.select_coarse_floor,
            select_owned_tiles: self.options.select_owned_tiles,
            select_resident: self.options.select_resident,
            date: date_of(date_unix),
            date_unix,
            model: self.model.name.clone(),
            layers: self.model.layers,
            kv_heads: self.model.kv_heads,
            group: self.model.group_size(),
            head_dim: self.model.head_dim,
            block: BLOCK,
            segment_words: SEGMENT_WORDS,
            k: "paper_k(context): 512 from 32k tokens; pariskv(k) selects its own k. recall is \
                recall@k at the k the row's method selects (its recall_k)"
                .into(),
            steps: self.options.steps,
            cell_seconds: self.options.cell_seconds,
            ceilings: self.ceilings.clone(),
            floor_rates: vec![
                (
                    "host".into(),
                    "pinned copy (the link)".into(),
                    self.ceilings.pinned_copy_gbps,
                ),
                (
                    "hbm".into(),
                    runtime::ceilings::HBM_CEILING.into(),
                    self.ceilings.hbm_stream_gbps(),
                ),
            ],
            generator: Generator {
                describe: s.describe(),
                seed: self.options.seed,
                slots: self.options.slots,
                tokens: s.n,
                scale_sigma: s.scale_sigma,
                outlier_channels: s.outlier_channels,
                outlier_factor: s.outlier_factor,
                mean_factor: s.mean_factor,
                rope_base: s.rope_base,
                sink_tokens: s.sink_tokens,
                sink_norm: s.sink_norm,
                needles: s.needles,
                needle_norm: s.needle_norm,
                logit_std: s.logit_std,
                calibration: data::CALIBRATION_NOTE.into(),
            },
            sample: "layer 0 (slot 0), sequence 0, every query head; queries at the end of the \
                     window (the slot's queries moved by RoPE to position n); error vs f64 dense \
                     attention, recall@k vs the exact f64 top-k of tokens SINK..n-LOCAL at the row's \
                     recall_k (the method's own k: pariskv(k) its k, the others paper_k(n))"
                .into(),
        })
    }

    fn floor_rate(&self, placement: Placement) -> f64 {
        match placement {
            Placement::Host => self.ceilings.pinned_copy_gbps,
            Placement::Hbm => self.ceilings.hbm_stream_gbps(),
        }
    }
}

/// The inputs of every layer of one (placement, context, batch).
struct Inputs {
    layers: Vec<LayerTables>,
    klt_layers: Vec<LayerTables>,
    queries: Vec<DeviceBuffer<f32>>,
    sigma2: Vec<DeviceBuffer<f32>>,
}

fn flat_f32(rows: &[Vec<Vec<f64>>]) -> Vec<f32> {
    rows.iter().flatten().flatten().map(|&x| x as f32).collect()
}

impl Bench {
    fn inputs(&self, placement: Placement, n: usize, batch: usize) -> Result<Inputs, BenchError> {
        let slots = self.options.slots;
        let max_seg = n.div_ceil(SEGMENT_WORDS * 64);
        let queries_of: Vec<Vec<f32>> = (0..slots)
            .map(|s| flat_f32(&self.slot_queries(s, n)))
            .collect();
        let sigma2_of: Vec<Vec<f32>> = (0..slots)
            .map(|s| {
                self.calibration[s]
                    .iter()
                    .flat_map(|c| c.sigma2.iter().map(|&x| x as f32))
                    .collect()
            })
            .collect();
        let mut out = Inputs {
            layers: Vec::new(),
            klt_layers: Vec::new(),
            queries: Vec::new(),
            sigma2: Vec::new(),
        };
        // The ParisKV histograms of each slot's first n tokens (`[h][NS][256]`), when the raw
        // store keeps the index.
        let d = self.model.head_dim;
        let mut hist_of: Vec<Option<Vec<u32>>> = Vec::new();
        if let Some(set) = self.raw.get(&placement) {
            for slot in &set.slots {
                hist_of.push(match &slot.pariskv {
                    Some(index) => Some(prefix_histograms(&self.gpu, index, n, d)?),
                    None => None,
                });
            }
        }
        for l in 0..self.model.layers {
            let batch_slots: Vec<usize> = (0..batch).map(|b| (l + b) % slots).collect();
            for (sets, into, raw) in [
                (&self.raw, &mut out.layers, true),
                (&self.klt, &mut out.klt_layers, false),
            ] {
                if let Some(set) = sets.get(&placement) {
                    let tables: Vec<_> = batch_slots.iter().map(|&s| &set.slots[s]).collect();
                    let host = compose(&tables, max_seg).ok_or_else(|| {
                        BenchError::Model(format!("slot tables hold fewer than {max_seg} segments"))
                    })?;
                    let hist: Option<Vec<u32>> = if raw && host.pariskv.is_some() {
                        batch_slots
                            .iter()
                            .map(|&s| hist_of.get(s).cloned().flatten())
                            .collect::<Option<Vec<Vec<u32>>>>()
                            .map(|h| h.concat())
                    } else {
                        None
                    };
                    into.push(LayerTables::upload(
                        &self.gpu,
                        l,
                        batch,
                        &self.model,
                        placement,
                        max_seg,
                        n,
                        &host,
                        hist.as_deref(),
                    )?);
                }
            }
            let q: Vec<f32> = batch_slots
                .iter()
                .flat_map(|&s| queries_of[s].clone())
                .collect();
            out.queries.push(self.gpu.upload(&q)?);
            let s2: Vec<f32> = batch_slots
                .iter()
                .flat_map(|&s| sigma2_of[s].clone())
                .collect();
            out.sigma2.push(self.gpu.upload(&s2)?);
        }
        Ok(out)
    }

    fn truth(&mut self, n: usize) -> &ContextTruth {
        if !self.truths.contains_key(&n) {
            let queries = self.slot_queries(0, n);
            let scale = 1.0 / (self.model.head_dim as f64).sqrt();
            // One ranked truth serves every method: its prefixes are the smaller top-k's.
            let k = self
                .options
                .methods
                .iter()
                .filter_map(|&m| recall_k(m, n))
                .max()
                .unwrap_or_else(|| paper_k(n));
            let truth = context_truth(&self.heads[0], &queries, n, k, scale, threads());
            self.truths.insert(n, truth);
        }
        &self.truths[&n]
    }

    /// Bytes per step and bits per token of `method` on the sample, scaled to every layer and
    /// sequence; `union` is the sample's union size per KV head.
    fn bytes(&self, method: Method, n: usize, batch: usize, union: &[usize]) -> (u64, Option<f64>) {
        let (d, block) = (self.model.head_dim, BlockSize::B64);
        let queries = self.slot_queries(0, n);
        let (mut total, mut bits) = (0usize, Vec::new());
        for (h, cal) in self.calibration[0].iter().enumerate() {
            let loki = matches!(method, Method::Loki { .. });
            let store_queries: Vec<Vec<f64>> = if loki {
                queries[h]
                    .iter()
                    .filter_map(|q| cal.klt.rotate(q).ok())
                    .collect()
            } else {
                queries[h].clone()
            };
            let ctx = PlanContext {
                queries: &store_queries,
                sigma2: &cal.sigma2,
                block,
                basis: if loki { Basis::Klt } else { Basis::Raw },
                double_sparsity: Some(&cal.double_sparsity),
            };
            let plan = depth_plan(method, &ctx).ok();
            let depths = match &plan {
                Some(DepthPlan::Depths(p)) => {
                    bits.push(p.bits_per_token);
                    Some(p.depths.as_slice())
                }
                _ => None,
            };
            let u = union.get(h).copied().unwrap_or(0);
            total += group_bytes(method, depths, n, d, block, u).total();
        }
        let bits = match method {
            Method::Dense => Some(32.0 * d as f64),
            // The index bytes per token at this context (§12: they depend on N_r).
            Method::Pariskv { .. } => Some(pariskv_index_bytes(n, d) as f64 * 8.0 / n as f64),
            _ if !bits.is_empty() => Some(bits.iter().sum::<f64>() / bits.len() as f64),
            _ => method.bits_per_token(d, block),
        };
        ((total * self.model.layers * batch) as u64, bits)
    }
}

/// Timing of one cell.
struct Timing {
    gpu_ms: f64,
    wall_ms: f64,
    steps: usize,
    launch: &'static str,
}

/// Queues one step of every layer: graph replays, or eager steps.
fn step_all<'a>(
    gpu: &Gpu,
    decoder: &mut Decoder,
    graphs: &[StepGraph],
    layers: &[LayerTables],
    inputs: &'a Inputs,
    request: &dyn Fn(usize) -> StepRequest<'a>,
) -> Result<(), StepError> {
    if graphs.is_empty() {
        for (l, t) in layers.iter().enumerate() {
            decoder.step(&t.view(), &inputs.queries[l], request(l))?;
        }
    } else {
        for g in graphs {
            g.replay(gpu)?;
        }
    }
    Ok(())
}

fn time_cell<'a>(
    gpu: &Gpu,
    decoder: &mut Decoder,
    layers: &[LayerTables],
    inputs: &'a Inputs,
    request: &dyn Fn(usize) -> StepRequest<'a>,
    steps: usize,
    cell_seconds: f64,
) -> Result<Timing, StepError> {
    let mut graphs = Vec::new();
    for (l, t) in layers.iter().enumerate() {
        match decoder.capture(&t.view(), &inputs.queries[l], request(l)) {
            Ok(g) => graphs.push(g),
            Err(StepError::NotCapturable) => {
                graphs.clear();
                break;
            }
            Err(e) => return Err(e),
        }
    }
    let launch = if graphs.is_empty() { "eager" } else { "graph" };
    let start = Instant::now();
    step_all(gpu, decoder, &graphs, layers, inputs, request)?;
    gpu.synchronize()?;
    let warm = start.elapsed().as_secs_f64();
    if warm * 4.0 < cell_seconds {
        step_all(gpu, decoder, &graphs, layers, inputs, request)?;
        gpu.synchronize()?;
    }
    let steps = steps_within(steps, warm, cell_seconds, MIN_STEPS);
    let (mut gpu_ms, mut wall_ms) = (Vec::new(), Vec::new());
    for _ in 0..steps {
        let mut failure = None;
        let start = Instant::now();
        let ms = gpu.time_ms(|| {
            if let Err(e) = step_all(gpu, decoder, &graphs, layers, inputs, request) {
                failure = Some(e);
            }
            Ok(())
        })?;
        wall_ms.push(start.elapsed().as_secs_f64() * 1e3);
        if let Some(e) = failure {
            return Err(e);
        }
        gpu_ms.push(f64::from(ms));
    }
    Ok(Timing {
        gpu_ms: median(&gpu_ms).unwrap_or(f64::NAN),
        wall_ms: median(&wall_ms).unwrap_or(f64::NAN),
        steps,
        launch,
    })
}

impl Bench {
    /// [`Bench::cell`] with the progress bar's message before it and a line for a cell that did
    /// not run; `tag` follows the cell's name in the message (e.g. `" (standing)"`).
    fn reported_cell(
        &mut self,
        (method, placement, n, batch): (Method, Placement, usize, usize),
        inputs: &Inputs,
        progress: &ProgressBar,
        tag: &str,
    ) -> Row {
        progress.set_message(format!(
            "{method} {} {} b{batch}{tag}",
            placement.as_str(),
            context_label(n)
        ));
        let row = self.cell(method, placement, n, batch, inputs);
        if !row.ok() {
            progress.println(format!(
                "  {} {} {} b{batch}: {}",
                row.method,
                row.placement,
                context_label(n),
                row.status
            ));
        }
        progress.inc(1);
        row
    }

    fn cell(
        &mut self,
        method: Method,
        placement: Placement,
        n: usize,
        batch: usize,
        inputs: &Inputs,
    ) -> Row {
        let model = self.model.name.clone();
        let mut row = Row::not_run(
            &model,
            &method.to_string(),
            n,
            batch,
            placement.as_str(),
            String::new(),
        );
        match self.run_cell(method, placement, n, batch, inputs, &mut row) {
            Ok(()) => row.status = "ok".into(),
            Err(e @ BenchError::Skipped(_)) => row.status = e.to_string(),
            Err(e) => row.status = format!("failed: {e}"),
        }
        row
    }

    fn run_cell(
        &mut self,
        method: Method,
        placement: Placement,
        n: usize,
        batch: usize,
        inputs: &Inputs,
        row: &mut Row,
    ) -> Result<(), BenchError> {
        let k = paper_k(n);
        let loki = matches!(method, Method::Loki { .. });
        let fathom = matches!(method, Method::Fathom { .. });
        let layers = if loki {
            &inputs.klt_layers
        } else {
            &inputs.layers
        };
        // Timed as a decode loop runs it (no union where nothing reads it); the sample asks
        // for the union, whose sizes give the bytes.
        let request = |l: usize| StepRequest {
            sigma2: fathom.then(|| &inputs.sigma2[l]),
            union: false,
            ..StepRequest::new(method, k)
        };
        let sample = StepRequest {
            union: true,
            ..request(0)
        };
        let mut dense_decoder;
        let decoder: &mut Decoder = if loki {
            self.klt_decoder
                .as_mut()
                .ok_or_else(|| BenchError::Model("loki needs the KLT store".into()))?
        } else if method == Method::Dense {
            // Its own decoder, so that its workspace (every row of every token) is freed after.
            dense_decoder = Decoder::with_kernels(
                self.gpu.clone(),
                self.model.clone(),
                decoder_config(&self.options),
                self.jit.clone(),
            )?
            .with_calibration(self.raw_calibration.clone())?;
            let plan = dense_decoder.launch_plan(&layers[0].view(), &request(0))?;
            let need = plan.sizes.bytes();
            let (free, _) = self.gpu.memory()?;
            if need + HEADROOM > free {
                return Err(BenchError::Skipped(format!(
                    "needs {:.1} GiB of workspace, {:.1} GiB free",
                    need as f64 / f64::from(1u32 << 30),
                    free as f64 / f64::from(1u32 << 30)
                )));
            }
            &mut dense_decoder
        } else {
            &mut self.raw_decoder
        };
        let timing = time_cell(
            &self.gpu,
            decoder,
            layers,
            inputs,
            &request,
            self.options.steps,
            if time_capped(method) {
                self.options.cell_seconds
            } else {
                f64::INFINITY
            },
        )?;
        // The sample: layer 0 (slot 0), sequence 0.
        let out = decoder.step(&layers[0].view(), &inputs.queries[0], sample)?;
        out.check()?;
        let host = out.download()?;
        let union: Vec<usize> = (0..self.model.kv_heads)
            .map(|h| host.union(0, h).len())
            .collect();
        row.gpu_ms = Some(timing.gpu_ms);
        row.wall_ms = Some(timing.wall_ms);
        row.steps = timing.steps;
        row.launch = timing.launch.into();
        let sizes = decoder.launch_plan(&layers[0].view(), &request(0))?.sizes;
        let sets = if loki { &self.klt } else { &self.raw };
        if let Some(set) = sets.get(&placement) {
            let parts = footprint_parts(
                set.store.resident_footprint(n, self.model.layers).parts(),
                batch,
                sizes.parts(),
            );
            row.hbm_footprint_bytes = Some(parts.iter().map(|p| p.1).sum());
            row.hbm_footprint = Some(parts);
        }
        let (bytes, bits) = self.bytes(method, n, batch, &union);
        row.bytes_per_step = Some(bytes);
        row.bits = bits;
        row.floor_ms = floor_ms(bytes, self.floor_rate(placement));
        let at = recall_k(method, n);
        let truth = self.truth(n);
        let (error, recall) = compare(truth, &host, at);
        row.fidelity = Some(error);
        row.recall = recall;
        row.recall_k = recall.and(at);
        Ok(())
    }
}

/// Runs every cell of `options`; `write` is called with the header and the rows so far after
/// each (placement, context), so that a run cut short still leaves its record.
pub fn run<T>(
    options: Options,
    write: &mut dyn FnMut(&Header, &[Row]),
    finish: impl FnOnce(&Header, &[Row]) -> T,
) -> Result<T, BenchError> {
    let mut bench = Bench::new(options.clone())?;
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let header = bench.header(unix)?;
    let cells = options.placements.len()
        * options.contexts.len()
        * options.batches.len()
        * options.methods.len()
        + options.standing.iter().map(|s| s.3.len()).sum::<usize>();
    let progress = bar(cells as u64, "cells");
    let mut rows = Vec::new();
    for &placement in &options.placements {
        for &n in &options.contexts {
            for &batch in &options.batches {
                let inputs = bench.inputs(placement, n, batch)?;
                for &method in &options.methods {
                    let cell = (method, placement, n, batch);
                    rows.push(bench.reported_cell(cell, &inputs, &progress, ""));
                }
            }
            write(&header, &rows);
        }
    }
    for (placement, n, batch, methods) in &options.standing {
        let (placement, n, batch) = (*placement, *n, *batch);
        let inputs = bench.inputs(placement, n, batch)?;
        for &method in methods {
            let cell = (method, placement, n, batch);
            rows.push(bench.reported_cell(cell, &inputs, &progress, " (standing)"));
        }
        write(&header, &rows);
    }
    progress.finish();
    // Before `bench` goes: freeing a 1M-token pinned host store takes seconds (an H200 call of
    // 2026-12-06 wrote its last JSON, then ran into its timeout there), and the table should
    // not wait for it.
    Ok(finish(&header, &rows))
}

/// The decoders' configuration: the defaults, with attention's rows from `--attention-rows`,
/// the ParisKV query's blocks from `--pariskv-query-blocks`, `--overlap-tail`,
/// `--head-groups`, `--tail-in-plan`, the plan's run tables (`--plan-batched-runs`,
/// `--plan-run-blocks`) and `--select-coarse-floor`.
fn decoder_config(options: &Options) -> DecoderConfig {
    let mut config = DecoderConfig::default();
    config.tiles.attention_rows = options.attention_rows;
    config.tiles.pariskv_query_blocks = options.pariskv_query_blocks;
    config.overlap_tail = options.overlap_tail;
    config.head_groups = options.head_groups;
    config.tiles.tail_in_plan = options.tail_in_plan;
    config.tiles.plan_batched_runs = options.plan_batched_runs;
    config.tiles.plan_run_blocks = options.plan_run_blocks;
    config.tiles.scan_stripes = options.scan_stripes;
    config.tiles.scan_one_wave = options.scan_one_wave;
    config.tiles.plan_paired_runs = options.plan_paired_runs;
    config.tiles.plan_direct_line = options.plan_direct_line;
    config.tiles.attention_cluster_merge = options.attention_cluster_merge;
    config.tiles.attention_prefetch_rows = options.attention_prefetch_rows;
    config.tiles.select_coarse_floor = options.select_coarse_floor;
    config.tiles.select_owned_tiles = options.select_owned_tiles;
    config.tiles.select_resident = options.select_resident;
    config
}
