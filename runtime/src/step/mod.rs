//! SPEC §8: one decode step of one layer for a batch of sequences of different lengths.
//!
//! ```text
//! plan → transfer → scan → oracle (tail) → select (10 launches) → fetch → attention
//! ```
//!
//! Every stage is one launch for all KV heads of all sequences; grids and buffers are sized
//! from the host-known capacity ([`launches::token_capacity`] of the view's `max_tokens`) and
//! kernels read the real lengths from the view on the device, so a step reads nothing back
//! (except with the memcpy transfer, see [`Transfer::Memcpy`]) and can be captured in a CUDA
//! graph ([`Decoder::capture`]).
//!
//! Per method (§4):
//! - plane methods (`fathom`, `sparq`, `double_sparsity`, `loki`, `thumbnail`, `uniform`): the
//!   plan kernel writes the queries in the store basis, depths, class counts and run tables;
//!   in the host placement the transfer moves the planes (`fused`: the scan reads mapped host
//!   memory; `copy-kernel`: gather into HBM staging, then the HBM scan of the staged table;
//!   `memcpy`: the run tables are read back and one copy per active run is queued); the scan
//!   scores the stored tokens and the oracle kernel the tail `[n_stored, n_total)` exactly.
//! - `landmark`: the landmark scan of the view's means, then the tail.
//! - `oracle`: exact scores of `[0, n_total)`.
//! - `pariskv(k)` (§12): the store's ParisKV index (the view's [`LayerView::pariskv`], a store
//!   built with `StoreConfig::pariskv_index`) is searched by six launches: the query transform
//!   and centroid tiers, the collision vote over every retrievable token, the candidate top-C
//!   (count, write), the rerank of the candidates' codes and weights, and the select of the
//!   group's top-`k` with the sink and the window, written in the select family's layout; then
//!   the shared fetch and attention. Every query head of a group gets the same set. The
//!   method's `k` replaces the request's. Nothing is read back, so it can be captured; the
//!   index tables are in the view's placement (the histograms always in HBM), and the kernels
//!   read them in place, without a transfer. Head dimensions 64, 128 and 256.
//! - `dense`: no scoring and no selection: the counts are set to `n_total` by device copies
//!   and the row tables are the identity (written when the workspace grows), then fetch and
//!   attention over every token with `k = capacity − 36`. Its fetched rows cost `G·k·D·4`
//!   bytes per KV head (the fetch/attention ABI strides by `G*k + 36` rows), so `dense` at
//!   very long contexts needs a lot of HBM.
//!
//! `fathom`'s `σ²` is an input: the calibration's ([`Calibration::with_sigma2`]) or a device
//! buffer `[B][H][D]` passed with the request (the uncalibrated stand-in of §3, the mean over
//! stored blocks of `Δ²`, which the store can keep); it is not computed on the GPU here.
//!
//! Queries on the device are not checked for NaN before the step (that would need a
//! read-back); [`Decoder::step_host`] checks host queries, and [`StepOutput::check`] reports
//! non-finite outputs after the step.

pub mod calibration;
mod error;
mod execute;
mod foreign;
pub mod launches;
mod output;
pub mod request;
pub mod validate;
mod workspace;

#[cfg(test)]
mod pariskv_tests;
#[cfg(test)]
mod tests;

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use codegen::model::{Basis, ModelShape};
use codegen::spec::select::MAX_K;
use codegen::spec::shape::{BLOCKS, WORD_TOKENS};
use cudarc::driver::CudaStream;

pub use calibration::{Calibration, CalibrationError};
pub use error::StepError;
pub use foreign::{ForeignStep, HostSelections};
pub use launches::{fit_scan_to_one_wave, launch_plan, LaunchPlan, StepShape};
pub use output::{HostStepOutput, OutputLayout, StepOutput};
pub use request::{Method, Scoring, StepRequest, Transfer};

use crate::gpu::{DeviceBuffer, Gpu, GpuError, Graph, Marker};
use crate::jit::{Jit, KernelSource};
use crate::tuning::{Tiles, Tuning};
use crate::view::LayerView;
use execute::Inputs;
use output::OutputBuffers;
use validate::ViewShape;
use workspace::Workspace;

/// The decoder's fixed parameters: the store layout its kernels are specialised for, the
/// largest top-k and the default tiles.
///
/// ```
/// use runtime::step::DecoderConfig;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // The block and segment size must be the key store's.
/// let config = DecoderConfig {
///     k_max: 1024,
///     ..DecoderConfig::default()
/// };
/// config.validate()?;
/// assert!(DecoderConfig { block: 48, ..config }.validate().is_err());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecoderConfig {
    /// `BLK`, tokens per scale block: 32, 64 or 128.
    pub block: usize,
    /// `S`, words per plane per segment: even, holding whole blocks.
    pub segment_words: usize,
    /// The largest `k` a request may ask (the select kernel's `k_max`): 1 to 4096.
    pub k_max: usize,
    /// Tiles used where no tuning record answers.
    pub tiles: Tiles,
    /// Scores the tail (the tokens past the last encoded segment, exactly, by the oracle
    /// kernel) on a second stream beside the plan and the scan, which it does not depend on,
    /// instead of after the scan. Exact, but slower on the H100 (HBM 32k, fathom(48): 1.48 ->
    /// 1.59 ms a step, 2026-12-06): the select behind the cross-stream wait loses its
    /// programmatic launch. Off by default (`step-bench --overlap-tail`).
    pub overlap_tail: bool,
    /// Cuts a step's KV heads into this many groups and pipelines them on two streams: the
    /// plan runs once for every head, then each group's scan (and tail) on the main stream,
    /// and its select, fetch and attention on a second stream while the next group is
    /// scanned. It must divide the model's KV heads. It applies to steps of batch 1 whose
    /// scores are selected (every method but `dense` and `pariskv`), except with the memcpy
    /// transfer; the others run whole ([`Decoder::head_groups_for`]). Exact, but slower on the
    /// H100 (host 1M, fathom(48): 45.9 ms a step whole, 51.9 with 4 groups, 61.4 with 8,
    /// 2026-12-06): the select, union and attention take as long for one head as for eight, and
    /// the groups run them one after another. 1 (the default) runs every step whole
    /// (`step-bench --head-groups N`).
    pub head_groups: usize,
}

impl Default for DecoderConfig {
    /// BLK 64, S 512 (`codegen::kernels::KernelSetOptions`' default), k_max 2048.
    fn default() -> Self {
        DecoderConfig {
            block: 64,
            segment_words: 512,
            k_max: 2048,
            tiles: Tiles::default(),
            overlap_tail: false,
            head_groups: 1,
        }
    }
}

impl DecoderConfig {
    /// Checks every field, naming the first bad one.
    pub fn validate(&self) -> Result<(), StepError> {
        let bad = |field, got: usize, allowed: String| StepError::Config {
            field,
            got: got.to_string(),
            allowed,
        };
        if !BLOCKS.contains(&self.block) {
            return Err(bad("block", self.block, "32, 64 or 128 tokens".into()));
        }
        let s = self.segment_words;
        if s < 2 || !s.is_multiple_of(2) || !(s * WORD_TOKENS).is_multiple_of(self.block) {
            return Err(bad(
                "segment_words",
                s,
                format!(
                    "an even number of words, at least 2, holding whole {}-token blocks",
                    self.block
                ),
            ));
        }
        if !(1..=MAX_K as usize).contains(&self.k_max) {
            return Err(bad("k_max", self.k_max, format!("1 to {MAX_K}")));
        }
        if self.head_groups == 0 {
            return Err(bad(
                "head_groups",
                0,
                "1 (whole steps) or more, dividing the model's KV heads".into(),
            ));
        }
        if self.head_groups > 1 && self.overlap_tail {
            return Err(StepError::Config {
                field: "overlap_tail",
                got: "true".into(),
                allowed: format!(
                    "false with head_groups = {} (the tail runs in its group's scoring)",
                    self.head_groups
                ),
            });
        }
        Ok(())
    }
}

/// Calibration uploaded to the device, per layer (uploaded on a layer's first step).
#[derive(Default)]
struct DeviceCalibration {
    rotation: HashMap<usize, Arc<DeviceBuffer<f32>>>,
    fixed: HashMap<usize, Arc<DeviceBuffer<u8>>>,
    /// `[rows][H][D]`, the layer's `σ²` repeated for `rows` sequences.
    sigma2: HashMap<usize, Arc<DeviceBuffer<f32>>>,
}

/// Runs decode steps of one model on one GPU. Holds the compiled kernels, the calibration and
/// a workspace that grows to the largest batch and context seen.
///
/// A step can also be captured once ([`Decoder::capture`]) and replayed
/// ([`StepGraph::replay`]) while [`StepGraph::serves`] the current view.
///
/// ```no_run
/// use std::sync::Arc;
/// use codegen::model::preset;
/// use runtime::gpu::Gpu;
/// use runtime::step::{Calibration, Decoder, DecoderConfig, Method, StepRequest};
/// use runtime::store::{KeyStore, SequenceId};
/// fn decode(
///     gpu: Arc<Gpu>,
///     store: &KeyStore,
///     batch: &[SequenceId],
///     queries: &[f32],  // [B][H][G][D] raw
///     sigma2: Vec<f32>, // [L][H][D], fathom's channel variances (§3)
/// ) -> Result<(), Box<dyn std::error::Error>> {
///     let model = preset("qwen3-8b")?;
///     let calibration = Calibration::new(model.layers, model.kv_heads, model.head_dim);
///     let mut decoder = Decoder::new(gpu, model, DecoderConfig::default())?
///         .with_calibration(calibration.with_sigma2(sigma2)?)?;
///     let view = store.layer_view(batch, 3)?; // layer 3
///     let request = StepRequest::new(Method::Fathom { bits: 48.0 }, 256);
///     let out = decoder.step_host(&view, queries, request)?.download()?;
///     println!("{:?}", out.selected(0, 0, 0)); // sequence 0, KV head 0, query head 0
///     Ok(())
/// }
/// ```
pub struct Decoder {
    gpu: Arc<Gpu>,
    model: ModelShape,
    config: DecoderConfig,
    kernels: Arc<dyn KernelSource>,
    tuning: Option<Box<dyn Tuning>>,
    calibration: Option<Calibration>,
    device_calibration: DeviceCalibration,
    workspace: Workspace,
    /// The queries of [`Decoder::step_host`].
    host_queries: Option<DeviceBuffer<f32>>,
    /// Blocks of a kernel the GPU holds at once, by entry name ([`Decoder::resident_blocks`]).
    resident: std::sync::Mutex<HashMap<String, usize>>,
    /// The ParisKV sign vector, uploaded on the first `pariskv` step.
    pariskv_signs: Option<Arc<DeviceBuffer<f32>>>,
    /// The second stream of [`DecoderConfig::overlap_tail`] and [`DecoderConfig::head_groups`],
    /// opened on the first step that needs it.
    side: Option<Side>,
}

/// The second stream of [`DecoderConfig::overlap_tail`] and [`DecoderConfig::head_groups`],
/// and the two markers of its fork (the side waits for the main stream) and join (the main
/// stream waits for the side), made once.
pub(crate) struct Side {
    pub gpu: Gpu,
    pub fork: Marker,
    pub join: Marker,
}

/// A step ready to queue: its plan, kernels and inputs.
struct Prepared {
    plan: LaunchPlan,
    functions: Vec<Option<cudarc::driver::CudaFunction>>,
    /// A head-grouped step ([`DecoderConfig::head_groups`]): the plan of one group's KV
    /// heads, its functions, and the number of groups.
    grouped: Option<(LaunchPlan, Vec<Option<cudarc::driver::CudaFunction>>, usize)>,
    inputs: Inputs,
    /// Calibration buffers the step reads (a graph keeps them alive).
    keep: Vec<Arc<dyn Any + Send + Sync>>,
}

impl Decoder {
    /// A decoder of `model` on `gpu`, loading kernels through a [`Jit`] on the default disk
    /// cache ([`Jit::with_default_cache`]). Fails with [`StepError::Jit`] when NVRTC cannot be
    /// found (the error lists where it looked and how to fix it).
    pub fn new(gpu: Arc<Gpu>, model: ModelShape, config: DecoderConfig) -> Result<Self, StepError> {
        // A bad model or configuration is reported before NVRTC is looked for.
        Self::check(&model, &config)?;
        let kernels = Arc::new(Jit::with_default_cache(gpu.clone())?);
        Self::with_kernels(gpu, model, config, kernels)
    }

    /// A decoder loading its kernels from `kernels` (e.g. a [`Jit`] shared with the key store,
    /// or a test's own source), which must load them on `gpu`. Tiles and the transfer come
    /// from the autotune record of the GPU's model where one fits ([`crate::tuning`]), else
    /// from `config.tiles`, with a warning once.
    pub fn with_kernels(
        gpu: Arc<Gpu>,
        model: ModelShape,
        config: DecoderConfig,
        kernels: Arc<dyn KernelSource>,
    ) -> Result<Self, StepError> {
        Self::check(&model, &config)?;
        // The record of this GPU model, if one fits (`crate::tuning::locate`); `with_tuning`
        // replaces it.
        let tuning = crate::tuning::record_for(gpu.info()).map(|r| Box::new(r) as Box<dyn Tuning>);
        Ok(Decoder {
            gpu,
            model,
            config,
            kernels,
            tuning,
            calibration: None,
            device_calibration: DeviceCalibration::default(),
            workspace: Workspace::default(),
            host_queries: None,
            resident: Default::default(),
            pariskv_signs: None,
            side: None,
        })
    }

    fn check(model: &ModelShape, config: &DecoderConfig) -> Result<(), StepError> {
        model
            .validate()
            .map_err(|e| StepError::Model(e.to_string()))?;
        config.validate()?;
        if !model.kv_heads.is_multiple_of(config.head_groups) {
            let divisors: Vec<String> = (1..=model.kv_heads)
                .filter(|d| model.kv_heads.is_multiple_of(*d))
                .map(|d| d.to_string())
                .collect();
            return Err(StepError::Config {
                field: "head_groups",
                got: config.head_groups.to_string(),
                allowed: format!(
                    "a divisor of {}'s {} KV heads: {}",
                    model.name,
                    model.kv_heads,
                    divisors.join(", ")
                ),
            });
        }
        Ok(())
    }

    /// Uses `calibration` (it must be of this model's layers, KV heads and head dimension).
    pub fn with_calibration(mut self, calibration: Calibration) -> Result<Self, StepError> {
        let want = (self.model.layers, self.model.kv_heads, self.model.head_dim);
        if calibration.dims() != want {
            return Err(CalibrationError::Model {
                got: calibration.dims(),
                want,
            }
            .into());
        }
        self.calibration = Some(calibration);
        self.device_calibration = DeviceCalibration::default();
        Ok(self)
    }

    /// Takes tiles and the transfer from `tuning` where it has them.
    pub fn with_tuning(mut self, tuning: Box<dyn Tuning>) -> Self {
        self.tuning = Some(tuning);
        self
    }

    /// The model.
    pub fn model(&self) -> &ModelShape {
        &self.model
    }

    /// The config.
    pub fn config(&self) -> &DecoderConfig {
        &self.config
    }

    /// Device bytes the workspace holds now.
    pub fn workspace_bytes(&self) -> usize {
        self.workspace.bytes()
    }

    /// The launch plan a step over `view` with `request` would run (validating everything the
    /// step validates, except the queries buffer). With the store in HBM it loads the scan's
    /// kernel, whose occupancy fits its grid to one wave (`Tiles::scan_one_wave`).
    pub fn launch_plan(
        &self,
        view: &LayerView<'_>,
        request: &StepRequest<'_>,
    ) -> Result<LaunchPlan, StepError> {
        self.plan_for(&ViewShape::of(view), request)
    }

    /// How many head groups a step over `view` with `request` runs in
    /// ([`DecoderConfig::head_groups`], or 1 where grouping does not apply: a batch of several
    /// sequences, `dense`, `pariskv`, the memcpy transfer).
    pub fn head_groups_for(
        &self,
        view: &LayerView<'_>,
        request: &StepRequest<'_>,
    ) -> Result<usize, StepError> {
        let v = ViewShape::of(view);
        let plan = self.plan_for(&v, request)?;
        Ok(self
            .group_plan(&v, request, &plan)?
            .map_or(1, |(_, groups)| groups))
    }

    fn plan_for(&self, v: &ViewShape, request: &StepRequest<'_>) -> Result<LaunchPlan, StepError> {
        let plan = self.plan_heads(v, request, v.kv_heads)?;
        if !plan.tuned {
            let what = format!(
                "{} (D = {}, G = {}) on {}",
                self.model.name,
                self.model.head_dim,
                self.model.group_size(),
                self.gpu.info().name
            );
            if self.tuning.is_none() {
                crate::tuning::warn_untuned(&what);
            } else {
                crate::tuning::warn_partly_tuned(&what, &plan.untuned);
            }
        }
        Ok(plan)
    }

    /// The plan of a step over `kv_heads` of the view's KV heads (all of them, or one head
    /// group's).
    fn plan_heads(
        &self,
        v: &ViewShape,
        request: &StepRequest<'_>,
        kv_heads: usize,
    ) -> Result<LaunchPlan, StepError> {
        validate::check_view(&self.model, v)?;
        let scoring = Scoring::of(
            request.method,
            self.model.head_dim,
            self.config.block,
            self.model.basis,
        )?;
        validate::check_needs(
            &scoring,
            &request.method.to_string(),
            self.model.basis,
            v,
            self.calibration.as_ref(),
            request.sigma2.map(|s| s.len()),
        )?;
        let mut plan = launch_plan(&launches::PlanInputs {
            shape: StepShape {
                batch: v.batch,
                kv_heads,
                head_dim: v.head_dim,
                group: self.model.group_size(),
                block: self.config.block,
                segment_words: self.config.segment_words,
                max_seg: v.max_seg,
                max_tokens: v.max_tokens,
                placement: v.placement,
                basis: self.model.basis,
                kv_rows: v.kv_rows,
            },
            scoring,
            transfer: request.transfer,
            k: request.k,
            k_max: self.config.k_max,
            union: request.union,
            tiles: &self.config.tiles,
            tuning: self.tuning.as_deref(),
        })?;
        let tiles = &self.config.tiles;
        if tiles.scan_one_wave && tiles.scan_stripes.is_none() {
            launches::fit_scan_to_one_wave(&mut plan, |scan| self.resident_blocks(scan))?;
        }
        Ok(plan)
    }

    /// How many blocks of `kernel` the GPU holds at once: its occupancy at its block and
    /// shared memory, times the multiprocessors; asked of the driver once a kernel (its entry
    /// name carries its spec, which fixes the block), not every step.
    fn resident_blocks(&self, kernel: &launches::KernelLaunch) -> Result<usize, StepError> {
        let mut known = self
            .resident
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(&blocks) = known.get(&kernel.entry) {
            return Ok(blocks);
        }
        let function = self.kernels.function(&kernel.spec, &kernel.entry)?;
        let threads = kernel.launch.block.iter().product::<u32>();
        let blocks =
            self.gpu
                .resident_blocks(&function, threads, kernel.launch.shared_bytes as usize)?;
        known.insert(kernel.entry.clone(), blocks);
        Ok(blocks)
    }

    /// The plan of one head group when `plan` (the whole step's) is grouped
    /// ([`DecoderConfig::head_groups`]), else `None`.
    fn group_plan(
        &self,
        v: &ViewShape,
        request: &StepRequest<'_>,
        plan: &LaunchPlan,
    ) -> Result<Option<(LaunchPlan, usize)>, StepError> {
        let groups = self.config.head_groups;
        let groupable = groups > 1
            && v.batch == 1
            && plan.specs.select.is_some()
            && plan.transfer != Some(Transfer::Memcpy);
        if !groupable {
            return Ok(None);
        }
        let group = self.plan_heads(v, request, v.kv_heads / groups)?;
        Ok(launches::groups_share_the_plan(plan, &group, groups).then_some((group, groups)))
    }

    /// Validates, plans, grows the workspace, uploads calibration and loads kernels: all that
    /// may allocate or synchronise, done before anything of the step is queued.
    fn prepare(
        &mut self,
        view: &LayerView<'_>,
        queries: &DeviceBuffer<f32>,
        request: &StepRequest<'_>,
    ) -> Result<Prepared, StepError> {
        let v = ViewShape::of(view);
        let plan = self.plan_for(&v, request)?;
        validate::check_query_len(&v, self.model.group_size(), queries.len())?;
        let group = self.group_plan(&v, request, &plan)?;
        let shape = plan.shape;
        self.workspace.ensure(
            &self.gpu,
            &plan.sizes,
            shape.batch * shape.kv_heads,
            shape.group,
            plan.k,
        )?;
        if let Some((group, groups)) = &group {
            // Every group's share of each buffer, side by side.
            let sizes = group.sizes.times(*groups);
            let kv_heads = shape.batch * shape.kv_heads;
            self.workspace
                .ensure(&self.gpu, &sizes, kv_heads, shape.group, plan.k)?;
        }
        let mut inputs = Inputs {
            queries: queries.addr(),
            sigma2: 0,
            fixed: 0,
            rotation: 0,
            budget: 0.0,
            scale: request
                .scale
                .unwrap_or(1.0 / (self.model.head_dim as f32).sqrt()),
            signs: 0,
            out: 0,
        };
        let mut keep: Vec<Arc<dyn Any + Send + Sync>> = Vec::new();
        if let Scoring::Pariskv { .. } = plan.scoring {
            let signs = match &self.pariskv_signs {
                Some(signs) => signs.clone(),
                None => {
                    let signs = Arc::new(crate::pariskv::device_signs(
                        &self.gpu,
                        self.model.head_dim,
                    )?);
                    self.pariskv_signs = Some(signs.clone());
                    signs
                }
            };
            inputs.signs = signs.addr();
            keep.push(signs);
        }
        if let Scoring::Planes {
            method,
            budget,
            fixed_r,
            ..
        } = plan.scoring
        {
            inputs.budget = budget;
            let layer = v.layer;
            // check_needs made sure the calibration holds what is read below.
            let calibration = self.calibration.as_ref();
            if self.model.basis == Basis::Klt {
                let data = calibration
                    .and_then(|c| c.rotation(layer))
                    .unwrap_or_default();
                let buffer = cached(
                    &self.gpu,
                    &mut self.device_calibration.rotation,
                    layer,
                    || data.to_vec(),
                )?;
                inputs.rotation = buffer.addr();
                keep.push(buffer);
            }
            if fixed_r.is_some() {
                let data = calibration
                    .and_then(|c| c.double_sparsity(layer))
                    .map_or(&[][..], |(_, m)| m);
                let buffer = cached(&self.gpu, &mut self.device_calibration.fixed, layer, || {
                    data.to_vec()
                })?;
                inputs.fixed = buffer.addr();
                keep.push(buffer);
            }
            if method == codegen::spec::PlanMethod::Fathom {
                if let Some(sigma2) = request.sigma2 {
                    inputs.sigma2 = sigma2.addr();
                } else {
                    let data = calibration
                        .and_then(|c| c.sigma2(layer))
                        .unwrap_or_default();
                    let want = v.batch * data.len();
                    let map = &mut self.device_calibration.sigma2;
                    if map.get(&layer).is_some_and(|b| b.len() < want) {
                        self.gpu.refuse_while_capturing("growing the σ² buffer")?;
                        map.remove(&layer);
                    }
                    let buffer = cached(&self.gpu, map, layer, || data.repeat(v.batch))?;
                    inputs.sigma2 = buffer.addr();
                    keep.push(buffer);
                }
            }
        }
        let functions = execute::resolve(self.kernels.as_ref(), &plan)?;
        let grouped = match group {
            Some((group, groups)) => {
                let functions = execute::resolve(self.kernels.as_ref(), &group)?;
                Some((group, functions, groups))
            }
            None => None,
        };
        Ok(Prepared {
            plan,
            functions,
            grouped,
            inputs,
            keep,
        })
    }

    /// Prepares one step over `view` and queues it: the one road of [`Decoder::step`],
    /// [`Decoder::step_host`] and [`Decoder::step_tensors`]. With `out`, the attention kernel
    /// writes its output there (a caller's f32 tensor) instead of into the workspace.
    fn queue(
        &mut self,
        view: &LayerView<'_>,
        queries: &DeviceBuffer<f32>,
        request: &StepRequest<'_>,
        out: Option<u64>,
    ) -> Result<(OutputBuffers, OutputLayout), StepError> {
        let mut prepared = self.prepare(view, queries, request)?;
        if let Some(out) = out {
            prepared.inputs.out = out;
        }
        self.open_side()?;
        self.record(&prepared, view)?;
        Ok(self.outputs(&prepared.plan))
    }

    /// Opens the second stream of [`DecoderConfig::overlap_tail`] and
    /// [`DecoderConfig::head_groups`] once, outside any capture.
    fn open_side(&mut self) -> Result<(), StepError> {
        let wanted = self.config.overlap_tail || self.config.head_groups > 1;
        if wanted && self.side.is_none() {
            self.gpu
                .refuse_while_capturing("opening the step's second stream")?;
            let gpu = self.gpu.with_new_stream()?;
            let (fork, join) = (gpu.marker()?, gpu.marker()?);
            self.side = Some(Side { gpu, fork, join });
        }
        Ok(())
    }

    /// Queues the launches of `prepared` on the decoder's stream (or records them, during a
    /// capture).
    fn record(&self, prepared: &Prepared, view: &LayerView<'_>) -> Result<(), StepError> {
        if let (Some((group, functions, groups)), Some(side)) =
            (&prepared.grouped, self.side.as_ref())
        {
            return execute::record_groups(
                &self.gpu,
                side,
                (&prepared.plan, &prepared.functions),
                (group, functions),
                *groups,
                &self.workspace,
                view,
                &prepared.inputs,
            );
        }
        execute::record(
            &self.gpu,
            self.side.as_ref(),
            &prepared.plan,
            &prepared.functions,
            &self.workspace,
            view,
            &prepared.inputs,
        )
    }

    fn outputs(&self, plan: &LaunchPlan) -> (OutputBuffers, OutputLayout) {
        let ws = &self.workspace;
        let get = |b: &workspace::Buf<i32>| b.clone().expect("the launch plan sized every output");
        let dense = plan.sizes.dense_uni > 0;
        let buffers = OutputBuffers {
            sel: get(if dense { &ws.dense_sel } else { &ws.sel }),
            sel_pos: get(if dense { &ws.dense_sel } else { &ws.sel_pos }),
            sel_count: get(&ws.sel_count),
            uni: get(if dense { &ws.dense_uni } else { &ws.uni }),
            uni_count: get(&ws.uni_count),
            out: ws.out.clone().expect("the launch plan sizes the output"),
            plan_status: if plan.stage_planes > 0 {
                ws.plan_status.clone()
            } else {
                None
            },
        };
        let layout = OutputLayout {
            batch: plan.shape.batch,
            kv_heads: plan.shape.kv_heads,
            group: plan.shape.group,
            head_dim: plan.shape.head_dim,
            k: plan.k,
            union: plan.union,
        };
        (buffers, layout)
    }

    /// Queues one step over `view` with the raw `queries` `[B][H][G][D]` (query head `h` of KV
    /// head `h / G`) and returns its results on the device. Nothing is read back (except with
    /// [`Transfer::Memcpy`]); the workspace grows, outside the queued work, when this batch or
    /// context is larger than any before.
    pub fn step(
        &mut self,
        view: &LayerView<'_>,
        queries: &DeviceBuffer<f32>,
        request: StepRequest<'_>,
    ) -> Result<StepOutput<'_>, StepError> {
        let (buffers, layout) = self.queue(view, queries, &request, None)?;
        Ok(StepOutput {
            buffers,
            layout,
            gpu: &self.gpu,
        })
    }

    /// [`Decoder::step`] with queries from the host: their shape and finiteness are checked
    /// first, then they are copied (ordered on the stream) into a buffer the decoder keeps.
    pub fn step_host(
        &mut self,
        view: &LayerView<'_>,
        queries: &[f32],
        request: StepRequest<'_>,
    ) -> Result<StepOutput<'_>, StepError> {
        validate::check_host_queries(&ViewShape::of(view), self.model.group_size(), queries)?;
        let fits = self
            .host_queries
            .as_ref()
            .is_some_and(|b| b.len() == queries.len());
        if !fits {
            self.host_queries = None;
            self.host_queries = Some(self.gpu.zeroed_async(queries.len())?);
        }
        let buffer = self.host_queries.take().expect("allocated above");
        let result = self
            .gpu
            .write(&buffer, queries)
            .map_err(StepError::from)
            .and_then(|()| self.queue(view, &buffer, &request, None));
        self.host_queries = Some(buffer);
        let (buffers, layout) = result?;
        Ok(StepOutput {
            buffers,
            layout,
            gpu: &self.gpu,
        })
    }

    /// Captures one step into a CUDA graph: everything that allocates, uploads or compiles
    /// happens first, then the step's launches are recorded (not run). The graph reads the
    /// view's, the queries' and `σ²`'s buffers at their current addresses whenever it is
    /// replayed: keep them alive and update them in place. It serves later views of the same
    /// tables (a store's `layer_view` of the same layer and batch, after appends) up to its
    /// token capacity and `max_seg` ([`StepGraph::serves`]). The memcpy transfer cannot be
    /// captured.
    pub fn capture(
        &mut self,
        view: &LayerView<'_>,
        queries: &DeviceBuffer<f32>,
        request: StepRequest<'_>,
    ) -> Result<StepGraph, StepError> {
        let prepared = self.prepare(view, queries, &request)?;
        if !prepared.plan.capturable {
            return Err(StepError::NotCapturable);
        }
        self.open_side()?;
        self.gpu.begin_capture()?;
        let recorded = self.record(&prepared, view);
        // End the capture whatever happened, so that the stream is usable again.
        let graph = self.gpu.end_capture();
        recorded?;
        let graph = graph?;
        let (outputs, layout) = self.outputs(&prepared.plan);
        let mut keep = self.workspace.keep_alive();
        keep.extend(prepared.keep);
        Ok(StepGraph {
            graph,
            stream: self.gpu.stream().clone(),
            _keep: keep,
            outputs,
            layout,
            token_capacity: prepared.plan.token_capacity,
            view: ViewShape::of(view),
            tables: table_addrs(view),
        })
    }
}

/// The buffer of `layer` in `map`, uploaded from `data()` on first use.
fn cached<T: Copy + Send + Sync + 'static>(
    gpu: &Gpu,
    map: &mut HashMap<usize, Arc<DeviceBuffer<T>>>,
    layer: usize,
    data: impl FnOnce() -> Vec<T>,
) -> Result<Arc<DeviceBuffer<T>>, GpuError> {
    if let Some(buffer) = map.get(&layer) {
        return Ok(buffer.clone());
    }
    let buffer = Arc::new(gpu.upload_async(&data())?);
    map.insert(layer, buffer.clone());
    Ok(buffer)
}

/// A captured step. Replaying it runs the same launches on the same buffers; its results are
/// read through [`StepGraph::output`].
pub struct StepGraph {
    graph: Graph,
    stream: Arc<CudaStream>,
    /// Every buffer the launches write or read that the decoder owns.
    _keep: Vec<Arc<dyn Any + Send + Sync>>,
    outputs: OutputBuffers,
    layout: OutputLayout,
    token_capacity: usize,
    view: ViewShape,
    /// Addresses of the view's tables: the replay reads these buffers.
    tables: [u64; 11],
}

/// The addresses of `view`'s tables, which a captured step reads on every replay.
fn table_addrs(view: &LayerView<'_>) -> [u64; 11] {
    let index = view.pariskv.map(|p| p.tables()).unwrap_or_default();
    [
        index.ids,
        index.codes,
        index.weights,
        index.hist,
        view.seg_words.addr(),
        view.seg_scales.addr(),
        view.n_stored.addr(),
        view.n_total.addr(),
        view.k_rows.addr(),
        view.v_rows.addr(),
        view.landmarks.map_or(0, DeviceBuffer::addr),
    ]
}

impl StepGraph {
    /// Queues one replay on `gpu`'s stream (the one it was captured on).
    pub fn replay(&self, gpu: &Gpu) -> Result<(), StepError> {
        if !Arc::ptr_eq(gpu.stream(), &self.stream) {
            return Err(StepError::WrongGpu);
        }
        Ok(self.graph.launch()?)
    }

    /// The largest context per sequence the graph's grids and buffers serve.
    pub fn token_capacity(&self) -> usize {
        self.token_capacity
    }

    /// Whether a replay serves `view` now: the same layer, batch and table buffers (for a
    /// [`crate::store::KeyStore`]: a `layer_view` of the same layer of the same store, which
    /// rewrites that layer's tables in place), the same `max_seg`, and no sequence longer than
    /// the capacity. After appends the replay reads the new lengths and rows; once a sequence
    /// gains a segment past the captured `max_seg` or outgrows the capacity, capture again.
    pub fn serves(&self, view: &LayerView<'_>) -> Result<(), StepError> {
        let now = ViewShape::of(view);
        if now.max_tokens > self.token_capacity {
            return Err(StepError::GraphCapacity {
                capacity: self.token_capacity,
                tokens: now.max_tokens,
            });
        }
        let same = ViewShape {
            max_tokens: self.view.max_tokens,
            ..now
        } == self.view
            && table_addrs(view) == self.tables;
        if !same {
            return Err(StepError::ViewShape {
                field: "layer, batch or tables",
                got: now.batch,
                want: format!(
                    "the captured view's (layer {}, batch {}, max_seg {}, the same table buffers)",
                    self.view.layer, self.view.batch, self.view.max_seg
                ),
            });
        }
        Ok(())
    }

    /// The results of the last replay.
    pub fn output<'a>(&'a self, gpu: &'a Gpu) -> StepOutput<'a> {
        StepOutput {
            buffers: self.outputs.clone(),
            layout: self.layout,
            gpu,
        }
    }
}
