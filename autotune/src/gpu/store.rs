//! The inputs every candidate of a case reads: reference stores of random keys, their copy in
//! device or mapped host memory in the layout of `templates/ABI.md`, and a `fathom(48)` plan
//! made on the device by the plan kernel.

use codegen::spec::{Placement, PlanSpec};
use cudarc::driver::CudaFunction;
use half::bf16;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reference::store::{BlockSize, HeadId, HeadStore, StoreLayout};
use runtime::abi;
use runtime::gpu::{Arg, DeviceBuffer, Gpu, MappedBuffer};
use runtime::launch::{DevicePtr, KernelArgs};

use crate::candidates::{BLOCK, SEGMENT_WORDS};

/// The plan budget every candidate is timed with, in bits per token: the plan decides which
/// runs are read, not how fast a variant reads them.
pub const PLAN_BITS: f32 = 48.0;

/// Where the queries and channel variances of the store cases' plan come from (`autotune
/// --plan-inputs`). The plan decides how many runs a scan step reads and at which depths, so
/// the two give the scan different work at the same bits: `random` reads ~34 channels almost
/// all at depth 1 at qwen3-8b's shape, `synthetic` ~22 over depths 1 to 4, as step-bench's
/// plans do (CPU, 2026-12-07). `synthetic` is the default since 2026-12-07 (twenty-seventh
/// session): on an H100 the HBM 1M scan's candidates timed on it ranked as the step runs them
/// (w8 t64 tc 99.97 us, t128 104.13; ncu in the step 99.68 and 104.19), while on random plans
/// t128 came first (107.94 against 109.41).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanSource {
    /// Uniform queries and variances 10^U(-1, 1), seeded by the context (every record made
    /// before 2026-12-07's twenty-seventh session).
    Random,
    /// step-bench's (SPEC §11 synthetic layers, `stepbench::data`): each KV head generated for
    /// the calibration window, its variances fitted as step-bench fits them, its queries moved
    /// to the case's context by RoPE.
    #[default]
    Synthetic,
}

/// The seed of `PlanSource::Synthetic`'s layer: step-bench's default (`--seed`).
const SYNTHETIC_SEED: u64 = 0x5eed;

/// `n` random keys of `d` channels (token-major), channel scales spread over two orders of
/// magnitude like real keys.
fn random_keys(rng: &mut ChaCha8Rng, n: usize, d: usize) -> Vec<bf16> {
    let scales: Vec<f32> = (0..d)
        .map(|_| 10f32.powf(rng.gen_range(-1.0..1.0)))
        .collect();
    (0..n * d)
        .map(|i| bf16::from_f32(scales[i % d] * rng.gen_range(-1.0f32..1.0)))
        .collect()
}

/// Reference stores of `heads` KV heads of `tokens` random keys each, built on all cores.
pub fn reference_stores(d: usize, heads: usize, tokens: usize) -> Result<Vec<HeadStore>, String> {
    let block = match BLOCK {
        32 => BlockSize::B32,
        64 => BlockSize::B64,
        _ => BlockSize::B128,
    };
    let layout = StoreLayout::new(d, block, SEGMENT_WORDS).map_err(|e| e.to_string())?;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..heads)
            .map(|h| {
                scope.spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(0x7e57 + h as u64);
                    let keys = random_keys(&mut rng, tokens, d);
                    let id = HeadId {
                        layer: 0,
                        kv_head: h,
                    };
                    HeadStore::from_keys(layout, id, &keys).map_err(|e| e.to_string())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .map_err(|_| "encoding a store panicked".to_string())?
            })
            .collect()
    })
}

/// Memory of a segment (or of rows): on the device or mapped from the host.
pub(crate) enum Memory<T> {
    Device(DeviceBuffer<T>),
    Mapped(MappedBuffer<T>),
}

impl<T: Copy> Memory<T> {
    /// `data` copied into `placement`.
    pub(crate) fn new(gpu: &Gpu, placement: Placement, data: &[T]) -> Result<Self, String> {
        let e = |x: runtime::gpu::GpuError| x.to_string();
        Ok(match placement {
            Placement::Hbm => Memory::Device(gpu.upload(data).map_err(e)?),
            Placement::Host => {
                let mut mapped = gpu.mapped::<T>(data.len(), 0).map_err(e)?;
                mapped.as_mut_slice().copy_from_slice(data);
                Memory::Mapped(mapped)
            }
        })
    }

    /// The address a kernel reads it through.
    pub(crate) fn addr(&self) -> u64 {
        match self {
            Memory::Device(b) => b.addr(),
            Memory::Mapped(b) => b.addr(),
        }
    }
}

/// One sequence's store of one layer (every head) in one placement, with its segment tables.
pub struct DeviceStore {
    _words: Vec<Memory<u64>>,
    _scales: Vec<Memory<u16>>,
    /// `[h * max_seg + s]` addresses of each segment's words.
    pub seg_words: DeviceBuffer<u64>,
    /// The same for scales.
    pub seg_scales: DeviceBuffer<u64>,
    /// Stored tokens of the sequence.
    pub n_stored: DeviceBuffer<i32>,
    pub max_seg: usize,
    /// KV heads.
    pub heads: usize,
}

impl DeviceStore {
    /// Copies `stores` (one per head, equally long) into `placement`.
    pub fn new(gpu: &Gpu, placement: Placement, stores: &[HeadStore]) -> Result<Self, String> {
        let e = |x: runtime::gpu::GpuError| x.to_string();
        let max_seg = stores.first().map_or(0, |s| s.segments().len());
        let (mut words, mut scales) = (Vec::new(), Vec::new());
        let mut word_table = vec![0u64; stores.len() * max_seg];
        let mut scale_table = vec![0u64; stores.len() * max_seg];
        for (h, store) in stores.iter().enumerate() {
            for (s, segment) in store.segments().iter().enumerate() {
                let w = Memory::new(gpu, placement, &segment.words)?;
                let sc = Memory::new(gpu, placement, &segment.scales)?;
                word_table[h * max_seg + s] = w.addr();
                scale_table[h * max_seg + s] = sc.addr();
                words.push(w);
                scales.push(sc);
            }
        }
        let n = stores.first().map_or(0, |s| s.stored_tokens()) as i32;
        Ok(DeviceStore {
            _words: words,
            _scales: scales,
            seg_words: gpu.upload(&word_table).map_err(e)?,
            seg_scales: gpu.upload(&scale_table).map_err(e)?,
            n_stored: gpu.upload(&[n]).map_err(e)?,
            max_seg,
            heads: stores.len(),
        })
    }
}

/// Staging in HBM for the copy-kernel transfer: every plane of every segment of every head.
pub struct Staging {
    pub words: DeviceBuffer<u64>,
    pub scales: DeviceBuffer<u16>,
    /// Planes per (head, segment).
    pub planes: usize,
}

impl Staging {
    /// Staging for `heads` heads of `max_seg` segments of head dimension `d`.
    pub fn new(gpu: &Gpu, heads: usize, max_seg: usize, d: usize) -> Result<Self, String> {
        let e = |x: runtime::gpu::GpuError| x.to_string();
        let planes = 4 * d;
        Ok(Staging {
            words: gpu
                .filled(heads * max_seg * planes * SEGMENT_WORDS, 0xff)
                .map_err(e)?,
            scales: gpu
                .filled(heads * max_seg * d * SEGMENT_WORDS * 64 / BLOCK, 0xff)
                .map_err(e)?,
            planes,
        })
    }
}

/// What a plan kernel writes, in device memory.
pub struct PlanOutputs {
    /// Queries in the store basis, `[H][G][D]`.
    pub q_store: DeviceBuffer<f32>,
    /// `[H][D]`.
    pub depths: DeviceBuffer<u8>,
    pub class_count: DeviceBuffer<u32>,
    /// Source run table, `[H][max_seg][D][4]`.
    pub runs: DeviceBuffer<u64>,
    /// Staged run table (into [`Staging`]).
    pub staged_runs: DeviceBuffer<u64>,
    /// `[3]`: `{1 = staging too small, b, h}`, 0 when it fits.
    pub status: DeviceBuffer<i32>,
}

impl PlanOutputs {
    /// Outputs for `store` and `group` query heads, every byte poisoned (the status zeroed).
    pub fn new(gpu: &Gpu, store: &DeviceStore, group: usize, d: usize) -> Result<Self, String> {
        let e = |x: runtime::gpu::GpuError| x.to_string();
        let heads = store.heads;
        let table = heads * store.max_seg * d * 4;
        Ok(PlanOutputs {
            q_store: gpu.filled(heads * group * d, 0xff).map_err(e)?,
            depths: gpu.filled(heads * d, 0xff).map_err(e)?,
            class_count: gpu.filled(heads * 4, 0xff).map_err(e)?,
            runs: gpu.filled(table, 0xff).map_err(e)?,
            staged_runs: gpu.filled(table, 0xff).map_err(e)?,
            status: gpu.upload(&[0i32; 3]).map_err(e)?,
        })
    }
}

/// The inputs of a plan (`PlanSource`): raw queries and channel variances, on the device and
/// on the host, of `group` query heads a KV head at a context of `tokens`.
pub struct PlanInputs {
    pub group: usize,
    pub tokens: usize,
    pub queries: Vec<f32>,
    pub sigma2: Vec<f32>,
    pub q: DeviceBuffer<f32>,
    pub s2: DeviceBuffer<f32>,
}

impl PlanInputs {
    /// Queries of `heads × group` query heads and variances of `heads × d` channels for a
    /// context of `tokens`, from `source`; `layers` keeps the synthetic layer of the last shape asked for (a run asks each shape
    /// for every context and placement in turn).
    pub fn new(
        gpu: &Gpu,
        heads: usize,
        group: usize,
        d: usize,
        tokens: usize,
        source: PlanSource,
        layers: &mut Option<SyntheticLayer>,
    ) -> Result<Self, String> {
        let e = |x: runtime::gpu::GpuError| x.to_string();
        let (queries, sigma2) = match source {
            PlanSource::Random => random_plan_inputs(heads, group, d, tokens),
            PlanSource::Synthetic => {
                SyntheticLayer::keep(layers, heads, group, d, tokens)?.plan_inputs(tokens)
            }
        };
        Ok(PlanInputs {
            group,
            tokens,
            q: gpu.upload(&queries).map_err(e)?,
            s2: gpu.upload(&sigma2).map_err(e)?,
            queries,
            sigma2,
        })
    }
}

/// `PlanSource::Random`'s queries `[heads][group][d]` and variances `[heads][d]`.
pub fn random_plan_inputs(
    heads: usize,
    group: usize,
    d: usize,
    tokens: usize,
) -> (Vec<f32>, Vec<f32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(0x9e11 ^ tokens as u64);
    let queries: Vec<f32> = (0..heads * group * d)
        .map(|_| rng.gen_range(-1.0f32..1.0))
        .collect();
    let sigma2: Vec<f32> = (0..heads * d)
        .map(|_| 10f32.powf(rng.gen_range(-1.0f32..1.0)))
        .collect();
    (queries, sigma2)
}

/// `PlanSource::Synthetic`'s layer of one shape, generated for the calibration window: each
/// KV head's variances and its queries at the window's end. Every context past the window
/// shares it (a context's queries are these moved by RoPE), so a run generates it once a shape
/// (~1 s on two cores; it was generated for every case, 18 times in a default run).
pub struct SyntheticLayer {
    /// (heads, group, d, generated tokens).
    shape: (usize, usize, usize, usize),
    rope_base: f64,
    /// `[heads][group][d]`, at position `generated`.
    queries: Vec<Vec<Vec<f64>>>,
    /// `[heads][d]`.
    sigma2: Vec<f32>,
}

impl SyntheticLayer {
    fn generate(heads: usize, group: usize, d: usize, generated: usize) -> Result<Self, String> {
        use crate::stepbench::data;
        let settings = reference::synthetic::SyntheticSettings {
            seed: SYNTHETIC_SEED,
            n: generated,
            head_dim: d,
            kv_heads: heads,
            group,
            ..Default::default()
        };
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let slots = data::generate_slots(std::slice::from_ref(&settings), threads, &|| {})
            .map_err(|e| e.to_string())?;
        let (mut queries, mut sigma2) = (Vec::new(), Vec::new());
        for (h, head) in slots[0].iter().enumerate() {
            // double_sparsity's channels are fitted too but not read: r = 1 costs least.
            let calibration =
                data::calibrate(head, &settings, 0, h, 1).map_err(|e| e.to_string())?;
            sigma2.extend(calibration.sigma2.iter().map(|&v| v as f32));
            queries.push(head.queries.clone());
        }
        let values: usize = queries.iter().flatten().map(Vec::len).sum();
        if values != heads * group * d || sigma2.len() != heads * d {
            return Err(format!(
                "synthetic plan inputs: {values} query and {} variance values for {heads} KV \
                 heads, G = {group}, D = {d}",
                sigma2.len()
            ));
        }
        Ok(SyntheticLayer {
            shape: (heads, group, d, generated),
            rope_base: settings.rope_base,
            queries,
            sigma2,
        })
    }

    /// The layer of this shape for a context of `tokens`, from `kept` where it holds it (else
    /// generated and kept there).
    fn keep(
        kept: &mut Option<SyntheticLayer>,
        heads: usize,
        group: usize,
        d: usize,
        tokens: usize,
    ) -> Result<&SyntheticLayer, String> {
        // The variances are fitted on the calibration window only: no more tokens are needed.
        let generated = tokens.min(crate::stepbench::data::CALIBRATION_WINDOW);
        let shape = (heads, group, d, generated);
        if kept.as_ref().map(|l| l.shape) != Some(shape) {
            *kept = None;
            *kept = Some(SyntheticLayer::generate(heads, group, d, generated)?);
        }
        Ok(kept.as_ref().expect("kept above"))
    }

    /// Queries `[heads][group][d]` at decode position `tokens` and variances `[heads][d]`.
    fn plan_inputs(&self, tokens: usize) -> (Vec<f32>, Vec<f32>) {
        let generated = self.shape.3;
        let queries = self
            .queries
            .iter()
            .flat_map(|head| {
                crate::stepbench::data::queries_moved(head, generated, tokens, self.rope_base)
            })
            .flatten()
            .map(|v| v as f32)
            .collect();
        (queries, self.sigma2.clone())
    }
}

/// `PlanSource::Synthetic`'s queries `[heads][group][d]` and variances `[heads][d]`, generated
/// afresh.
#[cfg(test)]
pub fn synthetic_plan_inputs(
    heads: usize,
    group: usize,
    d: usize,
    tokens: usize,
) -> Result<(Vec<f32>, Vec<f32>), String> {
    Ok(SyntheticLayer::keep(&mut None, heads, group, d, tokens)?.plan_inputs(tokens))
}

/// The plan kernel's arguments (its launch ABI, `codegen::spec::plan`) for `fathom(PLAN_BITS)`
/// without rotation, writing both run tables.
pub fn plan_args(
    inputs: &PlanInputs,
    store: &DeviceStore,
    staging: &Staging,
    out: &PlanOutputs,
) -> Vec<Arg> {
    // The outputs and the staging are the bench's, written by this launch only.
    abi::plan::Args {
        q: inputs.q.ptr(),
        sigma2: inputs.s2.ptr(),
        fixed_channels: DevicePtr::null(),
        rot: DevicePtr::null(),
        budget: PLAN_BITS,
        seg_words: store.seg_words.ptr().cast(),
        seg_scales: store.seg_scales.ptr().cast(),
        max_seg: store.max_seg as i32,
        n_stored: store.n_stored.ptr(),
        n_heads: store.heads as i32,
        q_store: out.q_store.shared_ptr_mut(),
        depths: out.depths.shared_ptr_mut(),
        class_count: out.class_count.shared_ptr_mut(),
        runs: out.runs.shared_ptr_mut(),
        staged_runs: out.staged_runs.shared_ptr_mut(),
        stage_words: staging.words.shared_ptr_mut(),
        stage_scales: staging.scales.shared_ptr_mut(),
        stage_planes: staging.planes as i32,
        status: out.status.shared_ptr_mut(),
    }
    .args()
}

/// A plan on the device and what verification needs of it.
pub struct DevicePlan {
    /// The inputs it was made from (the plan bench plans them again).
    pub inputs: PlanInputs,
    /// Source run table, `[H][max_seg][D][4]`.
    pub runs: DeviceBuffer<u64>,
    /// Staged run table (into [`Staging`]).
    pub staged_runs: DeviceBuffer<u64>,
    pub class_count: DeviceBuffer<u32>,
    /// Queries in the store basis, `[H][G][D]`.
    pub q_store: DeviceBuffer<f32>,
    /// Depths `[H][D]` and queries `[H][G][D]`, downloaded.
    pub depths: Vec<u8>,
    pub queries: Vec<f32>,
    /// Bytes of planes and scales the plan reads in one step (all heads).
    pub bytes: u64,
}

/// The plan kernel of every case: `fathom` without rotation, on the tuner's block and segment,
/// with the runtime's default threads.
pub fn plan_spec(d: usize, group: usize) -> PlanSpec {
    crate::candidates::plan_spec(d, group, runtime::tuning::Tiles::default().plan_threads)
}

/// Plans `store` (every head of it) with `fathom(PLAN_BITS)` on the device with `function`,
/// the kernel of `spec`, on `inputs` (of the store's heads and the spec's head dimension).
pub fn plan(
    gpu: &Gpu,
    function: &CudaFunction,
    spec: PlanSpec,
    store: &DeviceStore,
    staging: &Staging,
    inputs: PlanInputs,
) -> Result<DevicePlan, String> {
    let e = |x: runtime::gpu::GpuError| x.to_string();
    let (heads, d) = (store.heads, spec.head_dim);
    let (group, tokens) = (inputs.group, inputs.tokens);
    let out = PlanOutputs::new(gpu, store, group, d)?;
    let args = plan_args(&inputs, store, staging, &out);
    let (grid, block, shared) = spec.launch_dims(1, heads);
    gpu.launch(function, grid, block, shared, &args)
        .map_err(e)?;
    gpu.synchronize().map_err(e)?;
    let status = out.status.download().map_err(e)?;
    if status[0] != 0 {
        return Err(format!("plan: staging too small, status {status:?}"));
    }
    let depths = out.depths.download().map_err(e)?;
    let planes: usize = depths.iter().map(|&t| t as usize).sum();
    let active = depths.iter().filter(|&&t| t > 0).count();
    let bytes = planes * (tokens / 64) * 8 + active * (tokens / BLOCK) * 2;
    Ok(DevicePlan {
        queries: out.q_store.download().map_err(e)?,
        inputs,
        runs: out.runs,
        staged_runs: out.staged_runs,
        class_count: out.class_count,
        q_store: out.q_store,
        depths,
        bytes: bytes as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use reference::planner::water_fill;

    /// The active channels of each KV head's `fathom(PLAN_BITS)` plan on these inputs.
    fn active(queries: &[f32], sigma2: &[f32], group: usize, d: usize) -> Vec<usize> {
        let widen = |x: &[f32]| x.iter().map(|&v| v as f64).collect::<Vec<f64>>();
        sigma2
            .chunks(d)
            .zip(queries.chunks(group * d))
            .map(|(s2, q)| {
                let q: Vec<Vec<f64>> = q.chunks(d).map(widen).collect();
                water_fill(&q, &widen(s2), PLAN_BITS as f64, BlockSize::B64)
                    .expect("a plan")
                    .active_channels()
            })
            .collect()
    }

    /// Every head dimension and group size a model may bring (`--config`) gets synthetic plan
    /// inputs, the default's, at a context under the calibration window and at one over it.
    #[test]
    fn synthetic_plan_inputs_exist_for_every_shape() {
        for d in [64, 80, 96, 128, 192, 256] {
            for (group, tokens) in [(1, 1000), (7, 40_000), (16, 2048)] {
                let (q, s2) = synthetic_plan_inputs(1, group, d, tokens)
                    .unwrap_or_else(|e| panic!("D = {d}, G = {group}, {tokens} tokens: {e}"));
                assert_eq!((q.len(), s2.len()), (group * d, d));
                assert!(
                    q.iter().chain(&s2).all(|v| v.is_finite()),
                    "D = {d}, G = {group}"
                );
                let widen = |x: &[f32]| x.iter().map(|&v| v as f64).collect::<Vec<f64>>();
                let queries: Vec<Vec<f64>> = q.chunks(d).map(widen).collect();
                let plan = water_fill(&queries, &widen(&s2), PLAN_BITS as f64, BlockSize::B64);
                assert!(plan.is_ok(), "D = {d}, G = {group}: {plan:?}");
            }
        }
    }

    /// A run keeps one shape's layer for all its contexts: what it plans on is what a fresh
    /// generation gives, context by context, and a new shape is generated anew.
    #[test]
    fn a_kept_synthetic_layer_plans_as_a_fresh_one() {
        let mut kept = None;
        for (heads, group, tokens) in [
            (2, 4, 40_000),
            (2, 4, 70_000),
            (2, 4, 5_000),
            (3, 4, 70_000),
            (3, 7, 70_000),
        ] {
            let from_kept = SyntheticLayer::keep(&mut kept, heads, group, 64, tokens)
                .unwrap()
                .plan_inputs(tokens);
            assert_eq!(
                from_kept,
                synthetic_plan_inputs(heads, group, 64, tokens).unwrap(),
                "{heads} KV heads, G = {group}, {tokens} tokens"
            );
        }
    }

    #[test]
    fn synthetic_plan_inputs_read_fewer_channels_than_random_ones() {
        let (heads, group, d, tokens) = (2, 4, 128, 4096);
        let (q, s2) = synthetic_plan_inputs(heads, group, d, tokens).unwrap();
        assert_eq!((q.len(), s2.len()), (heads * group * d, heads * d));
        assert!(q.iter().all(|v| v.is_finite()));
        assert!(s2.iter().all(|&v| v.is_finite() && v >= 0.0));
        // Deterministic: the same inputs for the same case.
        assert_eq!(
            synthetic_plan_inputs(heads, group, d, tokens).unwrap(),
            (q.clone(), s2.clone())
        );
        let (rq, rs2) = random_plan_inputs(heads, group, d, tokens);
        let (synthetic, random) = (active(&q, &s2, group, d), active(&rq, &rs2, group, d));
        // The step's plans read fewer channels at more depths than the random ones at the
        // same bits (~22 against ~34 at qwen3-8b's shape).
        let mean = |x: &[usize]| x.iter().sum::<usize>() as f64 / x.len() as f64;
        assert!(
            mean(&synthetic) + 5.0 < mean(&random),
            "synthetic {synthetic:?} random {random:?}"
        );
    }
}
