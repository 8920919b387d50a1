//! Launch helpers of the store-reading families (encode, plan, gather, scan) for the GPU tests,
//! and the CPU side of their contracts that the tests compare against: the keys and queries
//! rotated exactly as the kernels round them, and the run tables of `templates/ABI.md` built
//! from a depth plan.
//!
//! Every output buffer is poisoned (every byte 0xff) before a kernel runs, so an element the
//! kernel should have written and did not shows up as a mismatch. Every driver call is checked;
//! a failure panics with the kernel's name.

use codegen::spec::shape::LaunchDims;
use codegen::spec::{EncodeSpec, GatherSpec, KernelSpec, PlanSpec, ScanSpec};
use half::bf16;
use rand::Rng;
use reference::klt::Klt;
use reference::store::{HeadStore, StoreLayout, PLANES};
use runtime::abi;
use runtime::gpu::{Arg, DeviceBuffer, Gpu, Module};
use runtime::launch::{DevicePtr, DevicePtrMut, KernelArgs};

use crate::device_store::DeviceStore;
use crate::inputs;

/// The byte every output buffer is filled with before a kernel runs.
pub const POISON: u8 = 0xff;

/// An optional input: null when absent (the kernel does not read it).
pub fn optional_ptr<T>(buffer: Option<&DeviceBuffer<T>>) -> DevicePtr<T> {
    buffer.map_or(DevicePtr::null(), DeviceBuffer::ptr)
}

/// A compiled kernel: the module of one spec, compiled through the runtime's JIT cache (its
/// options, this GPU's architecture) in the tests' temporary directory ([`crate::kernel_ptx`]).
pub struct Kernel {
    module: Module,
    name: String,
}

impl Kernel {
    /// Renders, compiles and loads `spec`. The cache keeps its PTX for the rest of the test
    /// binary (the key follows the source, whose name carries every parameter), so a test that
    /// checks one spec on several inputs compiles it once.
    pub fn compile(gpu: &Gpu, spec: impl Into<KernelSpec>) -> Kernel {
        let spec: KernelSpec = spec.into();
        let name = spec.kernel_name();
        let ptx = crate::kernel_ptx(gpu, &spec).unwrap_or_else(|e| panic!("compiling {name}: {e}"));
        let module = gpu
            .load_ptx(&ptx)
            .unwrap_or_else(|e| panic!("loading {name}: {e}"));
        Kernel { module, name }
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Launches the kernel and waits for it, so that a fault is reported with its name.
    pub fn launch(&self, gpu: &Gpu, dims: LaunchDims, args: &[Arg]) {
        let function = self
            .module
            .function(&self.name)
            .unwrap_or_else(|e| panic!("{}: {e}", self.name));
        let (grid, block, shared) = dims;
        gpu.launch(&function, grid, block, shared, args)
            .unwrap_or_else(|e| panic!("launching {} on {grid:?}x{block:?}: {e}", self.name));
        gpu.synchronize()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.name));
    }
}

/// A device buffer holding `data`, with the failure named.
pub fn upload<T: Copy>(gpu: &Gpu, data: &[T], what: &str) -> DeviceBuffer<T> {
    gpu.upload(data)
        .unwrap_or_else(|e| panic!("uploading {what}: {e}"))
}

/// A poisoned device buffer of `len` elements.
pub fn poisoned<T: Copy>(gpu: &Gpu, len: usize, what: &str) -> DeviceBuffer<T> {
    gpu.filled(len, POISON)
        .unwrap_or_else(|e| panic!("allocating {what}: {e}"))
}

/// A buffer's contents on the host.
pub fn download<T: Copy + Default>(buffer: &DeviceBuffer<T>, what: &str) -> Vec<T> {
    buffer
        .download()
        .unwrap_or_else(|e| panic!("downloading {what}: {e}"))
}

/// Collects mismatches and fails with the first few, their indices and the seed.
pub struct Mismatches {
    label: String,
    seed: u64,
    total: usize,
    shown: Vec<String>,
}

/// Mismatches printed in a failure message.
const SHOWN: usize = 12;

impl Mismatches {
    /// An empty list for the check `label` of the run seeded with `seed`.
    pub fn new(label: impl Into<String>, seed: u64) -> Self {
        Mismatches {
            label: label.into(),
            seed,
            total: 0,
            shown: Vec::new(),
        }
    }

    /// Records a mismatch unless `ok`; `describe` names the element and both values.
    pub fn check(&mut self, ok: bool, describe: impl FnOnce() -> String) {
        if !ok {
            self.total += 1;
            if self.shown.len() < SHOWN {
                self.shown.push(describe());
            }
        }
    }

    /// Mismatches so far.
    pub fn count(&self) -> usize {
        self.total
    }

    /// What differed, if anything did: the label, the count, the seed and the first few.
    pub fn report(&self) -> Option<String> {
        (self.total > 0).then(|| {
            format!(
                "{}: {} mismatches (FATHOM_TEST_SEED={}); the first {}:\n  {}",
                self.label,
                self.total,
                self.seed,
                self.shown.len(),
                self.shown.join("\n  ")
            )
        })
    }

    /// Panics when there was any mismatch.
    pub fn assert_none(self) {
        if let Some(report) = self.report() {
            panic!("{report}");
        }
    }
}

/// An orthonormal basis per KV head, fitted by the reference KLT on random calibration rows
/// (correlated channels, so the basis is far from the identity): `[H][D][D]` as f32, row-major,
/// `R[i*D + j]` = component `i` of basis vector `j`.
pub fn rotations(rng: &mut impl Rng, heads: usize, d: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(heads * d * d);
    for _ in 0..heads {
        let keys = inputs::calibration_rows(rng, 2 * d, d);
        let queries: Vec<Vec<f64>> = (0..8)
            .map(|_| (0..d).map(|_| rng.gen_range(-1.0..1.0)).collect())
            .collect();
        let klt = Klt::fit(&keys, &queries).expect("random calibration rows are valid");
        out.extend(klt.basis_row_major().iter().map(|&x| x as f32));
    }
    out
}

/// `Rᵀx` exactly as the kernels compute it: coordinate `j` is `Σ_i R[i][j] x[i]`, f32 fma in
/// ascending `i` from 0.
pub fn rotate_f32(rot: &[f32], d: usize, x: &[f32]) -> Vec<f32> {
    (0..d)
        .map(|j| (0..d).fold(0.0f32, |acc, i| rot[i * d + j].mul_add(x[i], acc)))
        .collect()
}

/// Keys (token-major `[n][D]`) in the rotated store basis as the encode kernel forms them:
/// [`rotate_f32`] of the bf16 key, rounded to bf16 to nearest-even.
pub fn rotate_keys(rot: &[f32], d: usize, keys: &[bf16]) -> Vec<bf16> {
    keys.chunks_exact(d)
        .flat_map(|key| {
            let x: Vec<f32> = key.iter().map(|k| k.to_f32()).collect();
            rotate_f32(rot, d, &x)
                .into_iter()
                .map(bf16::from_f32)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The channels of a depth plan in run-slot order: depth 4 first, then 3, 2, 1, each by
/// channel, then the depth-0 channels by channel.
pub fn slot_order(depths: &[u8]) -> Vec<usize> {
    let mut order = Vec::with_capacity(depths.len());
    for t in [4u8, 3, 2, 1, 0] {
        order.extend((0..depths.len()).filter(|&c| depths[c] == t));
    }
    order
}

/// Channels of depth 4, 3, 2 and 1 (`class_count` of one head).
pub fn class_count(depths: &[u8]) -> [u32; 4] {
    let mut count = [0u32; 4];
    for &t in depths {
        if t > 0 {
            count[4 - t as usize] += 1;
        }
    }
    count
}

/// The shape of the run tables of one launch: `[B][H][max_seg][D][4]`.
#[derive(Clone, Copy, Debug)]
pub struct TableShape {
    pub batch: usize,
    pub heads: usize,
    pub max_seg: usize,
    /// The segment layout (`D`, `BLK`, `S`).
    pub layout: StoreLayout,
}

impl TableShape {
    /// The tables of `stores` (`[B][H]`, at least one head, one layout) with `max_seg`
    /// segments a head.
    pub fn of_stores(stores: &[Vec<HeadStore>], max_seg: usize) -> TableShape {
        TableShape {
            batch: stores.len(),
            heads: stores.first().map_or(0, Vec::len),
            max_seg,
            layout: *stores[0][0].layout(),
        }
    }

    /// `u64` entries of one run table.
    pub fn len(&self) -> usize {
        self.batch * self.heads * self.max_seg * self.layout.head_dim() * 4
    }

    /// Whether the table has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Index of slot `slot` of segment `s` of `(b, h)`.
    pub fn entry(&self, b: usize, h: usize, s: usize, slot: usize) -> usize {
        (((b * self.heads + h) * self.max_seg + s) * self.layout.head_dim() + slot) * 4
    }

    /// Segments holding stored tokens, `ceil(n_stored / 64S)` (at most `max_seg`).
    pub fn stored_segments(&self, n_stored: usize) -> usize {
        n_stored
            .div_ceil(self.layout.segment_tokens())
            .min(self.max_seg)
    }
}

/// Writes the source run table of `(b, h)` for its stored segments: slot `k` of segment `s`
/// is `{words + c*4*S words, scales + c*SPC scales, c, t_c}` for the `k`-th channel of
/// [`slot_order`]; `seg_words`/`seg_scales` are the head's segment addresses (`[max_seg]`).
/// Entries of other segments are left as they are.
pub fn write_source_runs(
    table: &mut [u64],
    shape: &TableShape,
    (b, h): (usize, usize),
    n_stored: usize,
    seg_words: &[u64],
    seg_scales: &[u64],
    depths: &[u8],
) {
    let layout = shape.layout;
    let (s_words, spc) = (layout.segment_words(), layout.scales_per_channel());
    for s in 0..shape.stored_segments(n_stored) {
        for (slot, &c) in slot_order(depths).iter().enumerate() {
            let e = shape.entry(b, h, s, slot);
            table[e] = seg_words[s] + (c * PLANES * s_words * 8) as u64;
            table[e + 1] = seg_scales[s] + (c * spc * 2) as u64;
            table[e + 2] = c as u64;
            table[e + 3] = u64::from(depths[c]);
        }
    }
}

/// Staging of the copy-kernel transfer (§7.2): per `(b, h, s)` a region of `planes * S` words
/// and `D * SPC` scales.
pub struct Staging {
    /// Capacity in planes per `(b, h, s)`.
    pub planes: usize,
    /// `[B*H*max_seg][planes * S]`, poisoned.
    pub words: DeviceBuffer<u64>,
    /// `[B*H*max_seg][D * SPC]`, poisoned.
    pub scales: DeviceBuffer<u16>,
}

impl Staging {
    /// Poisoned staging of `planes` planes per `(b, h, s)`.
    pub fn new(gpu: &Gpu, shape: &TableShape, planes: usize) -> Staging {
        let regions = shape.batch * shape.heads * shape.max_seg;
        let layout = shape.layout;
        Staging {
            planes,
            words: poisoned(
                gpu,
                regions * planes * layout.segment_words(),
                "staging words",
            ),
            scales: poisoned(gpu, regions * layout.scales_len(), "staging scales"),
        }
    }
}

/// Writes the staged run table of `(b, h)` for its stored segments: the same slots as the source
/// table, packed densely in slot order into the `(b, h, s)` region of the staging (planes at
/// the running sum of earlier slots' depths, scales at `slot * SPC`); every depth is 0 when the
/// plan's planes exceed the staging's capacity.
pub fn write_staged_runs(
    table: &mut [u64],
    shape: &TableShape,
    (b, h): (usize, usize),
    n_stored: usize,
    staging: (u64, u64, usize),
    depths: &[u8],
) {
    let (words_base, scales_base, planes) = staging;
    let layout = shape.layout;
    let (s_words, spc, d) = (
        layout.segment_words(),
        layout.scales_per_channel(),
        layout.head_dim(),
    );
    let fits = depths.iter().map(|&t| t as usize).sum::<usize>() <= planes;
    for s in 0..shape.stored_segments(n_stored) {
        let region = (b * shape.heads + h) * shape.max_seg + s;
        let mut prefix = 0usize;
        for (slot, &c) in slot_order(depths).iter().enumerate() {
            let t = depths[c] as usize;
            let e = shape.entry(b, h, s, slot);
            table[e] = words_base + ((region * planes * s_words + prefix * s_words) * 8) as u64;
            table[e + 1] = scales_base + ((region * d * spc + slot * spc) * 2) as u64;
            table[e + 2] = c as u64;
            table[e + 3] = if fits { t as u64 } else { 0 };
            prefix += t;
        }
    }
}

/// The segment addresses of a [`DeviceStore`], `[(b*H + h)*max_seg + s]`.
pub fn segment_addresses(store: &DeviceStore) -> (Vec<u64>, Vec<u64>) {
    (
        download(&store.seg_words, "segment word table"),
        download(&store.seg_scales, "segment scale table"),
    )
}

/// Source and (when `staging` is given) staged run tables and class counts of a whole launch,
/// built on the CPU from `depths[b][h]`, with the store's segment addresses.
pub fn run_tables(
    shape: &TableShape,
    store: &DeviceStore,
    n_stored: &[usize],
    depths: &[Vec<Vec<u8>>],
    staging: Option<&Staging>,
) -> (Vec<u64>, Option<Vec<u64>>, Vec<u32>) {
    let (seg_words, seg_scales) = segment_addresses(store);
    run_tables_at(
        shape,
        (&seg_words, &seg_scales),
        n_stored,
        depths,
        staging.map(|st| (st.words.addr(), st.scales.addr(), st.planes)),
    )
}

/// [`run_tables`] for segments at `seg_words`/`seg_scales` (`[(b*H + h)*max_seg + s]`) and a
/// staging of `(words address, scales address, planes)`, wherever they live (the CPU runs of
/// `plan_cpu` have their own addresses).
// `(b, h)` index the depths, the stores' addresses and the tables alike.
#[allow(clippy::needless_range_loop)]
pub fn run_tables_at(
    shape: &TableShape,
    (seg_words, seg_scales): (&[u64], &[u64]),
    n_stored: &[usize],
    depths: &[Vec<Vec<u8>>],
    staging: Option<(u64, u64, usize)>,
) -> (Vec<u64>, Option<Vec<u64>>, Vec<u32>) {
    let mut source = vec![u64::MAX; shape.len()];
    let mut staged = staging.map(|_| vec![u64::MAX; shape.len()]);
    let mut counts = Vec::with_capacity(shape.batch * shape.heads * 4);
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            let base = (b * shape.heads + h) * shape.max_seg;
            let plan = &depths[b][h];
            write_source_runs(
                &mut source,
                shape,
                (b, h),
                n_stored[b],
                &seg_words[base..base + shape.max_seg],
                &seg_scales[base..base + shape.max_seg],
                plan,
            );
            if let (Some(table), Some(st)) = (staged.as_mut(), staging) {
                write_staged_runs(table, shape, (b, h), n_stored[b], st, plan);
            }
            counts.extend(class_count(plan));
        }
    }
    (source, staged, counts)
}

/// The inputs of a plan launch beyond the store; `None` is passed as a null pointer.
pub struct PlanInputs<'a> {
    /// Raw queries `[B][H][G][D]`.
    pub queries: &'a [f32],
    /// `σ²` `[B][H][D]` (fathom).
    pub sigma2: Option<&'a [f32]>,
    /// Fixed channels `[H][D]` (double_sparsity).
    pub fixed_channels: Option<&'a [u8]>,
    /// Rotation `[H][D][D]` (rotated store).
    pub rotation: Option<&'a [f32]>,
    /// Bits per token (fathom).
    pub budget: f32,
}

/// What a plan launch wrote, on the device (poisoned before the launch).
pub struct PlanOutputs {
    pub q_store: DeviceBuffer<f32>,
    pub depths: DeviceBuffer<u8>,
    pub class_count: DeviceBuffer<u32>,
    pub runs: DeviceBuffer<u64>,
    /// The staged run table, when staging was given.
    pub staged_runs: Option<DeviceBuffer<u64>>,
    /// `{1 = exceeds staging, b, h}`; zeroed before the launch (the kernel only sets it).
    pub status: DeviceBuffer<i32>,
}

/// Runs a plan kernel over `store` (all its sequences and heads) and returns its outputs.
pub fn run_plan(
    gpu: &Gpu,
    kernel: &Kernel,
    spec: &PlanSpec,
    shape: &TableShape,
    store: &DeviceStore,
    inputs: &PlanInputs<'_>,
    staging: Option<&Staging>,
) -> PlanOutputs {
    let (b, h, d, g) = (shape.batch, shape.heads, spec.head_dim, spec.group);
    assert_eq!(
        inputs.queries.len(),
        b * h * g * d,
        "queries are [B][H][G][D]"
    );
    let optional = |data: Option<&[f32]>, what| data.map(|x| upload(gpu, x, what));
    let queries = upload(gpu, inputs.queries, "queries");
    let sigma2 = optional(inputs.sigma2, "sigma2");
    let rotation = optional(inputs.rotation, "rotation");
    let fixed = inputs
        .fixed_channels
        .map(|x| upload(gpu, x, "fixed channels"));
    let mut out = PlanOutputs {
        q_store: poisoned(gpu, b * h * g * d, "q_store"),
        depths: poisoned(gpu, b * h * d, "depths"),
        class_count: poisoned(gpu, b * h * 4, "class_count"),
        runs: poisoned(gpu, shape.len(), "source runs"),
        staged_runs: staging.map(|_| poisoned(gpu, shape.len(), "staged runs")),
        status: upload(gpu, &[0i32; 3], "plan status"),
    };
    // The staging is the test's, written by this launch only.
    let staging_addr = |addr: fn(&Staging) -> u64| staging.map_or(0, addr);
    let args = abi::plan::Args {
        q: queries.ptr(),
        sigma2: optional_ptr(sigma2.as_ref()),
        fixed_channels: optional_ptr(fixed.as_ref()),
        rot: optional_ptr(rotation.as_ref()),
        budget: inputs.budget,
        seg_words: store.seg_words.ptr().cast(),
        seg_scales: store.seg_scales.ptr().cast(),
        max_seg: store.max_seg as i32,
        n_stored: store.n_stored.ptr(),
        n_heads: h as i32,
        q_store: out.q_store.ptr_mut(),
        depths: out.depths.ptr_mut(),
        class_count: out.class_count.ptr_mut(),
        runs: out.runs.ptr_mut(),
        staged_runs: out
            .staged_runs
            .as_mut()
            .map_or(DevicePtrMut::null(), DeviceBuffer::ptr_mut),
        stage_words: DevicePtrMut::from_addr(staging_addr(|s| s.words.addr())),
        stage_scales: DevicePtrMut::from_addr(staging_addr(|s| s.scales.addr())),
        stage_planes: staging.map_or(0, |s| s.planes as i32),
        status: out.status.ptr_mut(),
    }
    .args();
    kernel.launch(gpu, spec.launch_dims(b, h), &args);
    out
}

/// Runs a gather kernel: the active runs of `source_runs` into the staging `staged_runs` points at.
#[allow(clippy::too_many_arguments)]
pub fn run_gather(
    gpu: &Gpu,
    kernel: &Kernel,
    spec: &GatherSpec,
    shape: &TableShape,
    source_runs: &DeviceBuffer<u64>,
    staged_runs: &DeviceBuffer<u64>,
    class_count: &DeviceBuffer<u32>,
    n_stored: &DeviceBuffer<i32>,
) {
    let args = abi::gather::Args {
        src_runs: source_runs.ptr(),
        dst_runs: staged_runs.ptr(),
        class_count: class_count.ptr(),
        n_stored: n_stored.ptr(),
        max_seg: shape.max_seg as i32,
        n_heads: shape.heads as i32,
    }
    .args();
    kernel.launch(
        gpu,
        spec.launch_dims(shape.batch, shape.heads, shape.max_seg),
        &args,
    );
}

/// The run table a scan reads: runs, class counts, queries in the store basis, `n_stored`.
type ScanTables<'a> = (
    &'a DeviceBuffer<u64>,
    &'a DeviceBuffer<u32>,
    &'a DeviceBuffer<f32>,
    &'a DeviceBuffer<i32>,
);

/// Launches `kernel` over `tables` into `scores` (and `peaks`, for a scan that writes them).
fn launch_scan(
    gpu: &Gpu,
    (kernel, spec, shape): (&Kernel, &ScanSpec, &TableShape),
    (runs, class_count, q_store, n_stored): ScanTables<'_>,
    (scores, ld_scores): (&mut DeviceBuffer<f32>, usize),
    peaks: Option<(DevicePtrMut<u32>, i32)>,
) {
    let args = abi::scan_args(
        abi::scan::Args {
            runs: runs.ptr(),
            class_count: class_count.ptr(),
            q_store: q_store.ptr(),
            n_stored: n_stored.ptr(),
            max_seg: shape.max_seg as i32,
            n_heads: shape.heads as i32,
            scores: scores.ptr_mut(),
            ld_scores: ld_scores as i32,
        },
        peaks,
    );
    kernel.launch(
        gpu,
        spec.launch_dims(shape.batch, shape.heads, shape.max_seg),
        &args,
    );
}

/// Runs a scan kernel over a run table and returns the scores `[B][H][G][ld_scores]` (poisoned
/// before the launch, so tokens at and past `n_stored[b]` must still be poison).
#[allow(clippy::too_many_arguments)]
pub fn run_scan(
    gpu: &Gpu,
    kernel: &Kernel,
    spec: &ScanSpec,
    shape: &TableShape,
    runs: &DeviceBuffer<u64>,
    class_count: &DeviceBuffer<u32>,
    q_store: &DeviceBuffer<f32>,
    n_stored: &DeviceBuffer<i32>,
    ld_scores: usize,
) -> Vec<f32> {
    let rows = shape.batch * shape.heads * spec.group;
    let mut scores = poisoned::<f32>(gpu, rows * ld_scores, "scores");
    launch_scan(
        gpu,
        (kernel, spec, shape),
        (runs, class_count, q_store, n_stored),
        (&mut scores, ld_scores),
        None,
    );
    download(&scores, "scores")
}

/// Runs a scan that also writes the peaks of its 32-token halves (`ScanSpec::peaks`, the
/// `runtime::abi::scan_peaks` arguments): the scores as [`run_scan`] returns them, and the peaks
/// `[B][H][G][ld_peaks]`, every entry `peaks_poison` before the launch.
#[allow(clippy::too_many_arguments)]
pub fn run_scan_peaks(
    gpu: &Gpu,
    kernel: &Kernel,
    spec: &ScanSpec,
    shape: &TableShape,
    runs: &DeviceBuffer<u64>,
    class_count: &DeviceBuffer<u32>,
    q_store: &DeviceBuffer<f32>,
    n_stored: &DeviceBuffer<i32>,
    (ld_scores, ld_peaks): (usize, usize),
    peaks_poison: u32,
) -> (Vec<f32>, Vec<u32>) {
    assert!(spec.peaks, "{}: a scan without peaks", kernel.name());
    let rows = shape.batch * shape.heads * spec.group;
    let mut scores = poisoned::<f32>(gpu, rows * ld_scores, "scores");
    let mut peaks = upload(gpu, &vec![peaks_poison; rows * ld_peaks], "peaks");
    launch_scan(
        gpu,
        (kernel, spec, shape),
        (runs, class_count, q_store, n_stored),
        (&mut scores, ld_scores),
        Some((peaks.ptr_mut(), ld_peaks as i32)),
    );
    (download(&scores, "scores"), download(&peaks, "peaks"))
}

/// Writable segments for the encode kernel: `B*H*max_seg` segments of one layout in two device
/// buffers (poisoned), and the segment tables that point into them.
pub struct EncodeTarget {
    pub layout: StoreLayout,
    pub batch: usize,
    pub heads: usize,
    pub max_seg: usize,
    pub words: DeviceBuffer<u64>,
    pub scales: DeviceBuffer<u16>,
    pub seg_words: DeviceBuffer<u64>,
    pub seg_scales: DeviceBuffer<u64>,
}

impl EncodeTarget {
    /// Poisoned segments for `batch` sequences of `heads` heads, `max_seg` each.
    pub fn new(gpu: &Gpu, layout: StoreLayout, batch: usize, heads: usize, max_seg: usize) -> Self {
        let segments = batch * heads * max_seg;
        let words = poisoned::<u64>(gpu, segments * layout.words_len(), "segment words");
        let scales = poisoned::<u16>(gpu, segments * layout.scales_len(), "segment scales");
        let word_table: Vec<u64> = (0..segments)
            .map(|i| words.addr() + (i * layout.words_len() * 8) as u64)
            .collect();
        let scale_table: Vec<u64> = (0..segments)
            .map(|i| scales.addr() + (i * layout.scales_len() * 2) as u64)
            .collect();
        EncodeTarget {
            layout,
            batch,
            heads,
            max_seg,
            seg_words: upload(gpu, &word_table, "segment word table"),
            seg_scales: upload(gpu, &scale_table, "segment scale table"),
            words,
            scales,
        }
    }

    /// The words and scales of every segment on the host: `[(b*H + h)*max_seg + s]`.
    pub fn download(&self) -> (Vec<u64>, Vec<u16>) {
        (
            download(&self.words, "segment words"),
            download(&self.scales, "segment scales"),
        )
    }

    /// The index of segment `s` of `(b, h)` in the tables.
    pub fn segment(&self, b: usize, h: usize, s: usize) -> usize {
        (b * self.heads + h) * self.max_seg + s
    }
}

/// bf16 keys of every `(b, h)` on the device (raw basis, token-major `[n][D]`) and the
/// `k_rows` pointer table.
pub struct DeviceKeys {
    _rows: Vec<DeviceBuffer<u16>>,
    pub table: DeviceBuffer<u64>,
}

impl DeviceKeys {
    /// Uploads `keys[b][h]`.
    pub fn new(gpu: &Gpu, keys: &[Vec<Vec<bf16>>]) -> Self {
        let mut rows = Vec::new();
        let mut table = Vec::new();
        for sequence in keys {
            for head in sequence {
                let bits: Vec<u16> = head.iter().map(|k| k.to_bits()).collect();
                let buffer = upload(gpu, &bits, "keys");
                table.push(buffer.addr());
                rows.push(buffer);
            }
        }
        DeviceKeys {
            table: upload(gpu, &table, "k_rows table"),
            _rows: rows,
        }
    }
}

/// Runs an encode kernel (bulk: `range_a` = first token, `range_b` = token count; append:
/// `n_stored`, `n_total`) and returns its status `{kind, b, h, token, channel}`.
#[allow(clippy::too_many_arguments)]
pub fn run_encode(
    gpu: &Gpu,
    kernel: &Kernel,
    spec: &EncodeSpec,
    keys: &DeviceKeys,
    rotation: Option<&DeviceBuffer<f32>>,
    target: &EncodeTarget,
    range_a: &[i32],
    range_b: &[i32],
) -> [i32; 5] {
    assert_eq!(range_a.len(), target.batch);
    assert_eq!(range_b.len(), target.batch);
    let a = upload(gpu, range_a, "range_a");
    let b = upload(gpu, range_b, "range_b");
    let mut status = upload(gpu, &[0i32; 5], "encode status");
    let args = abi::encode::Args {
        k_rows: keys.table.ptr().cast(),
        rot: optional_ptr(rotation),
        seg_words: target.seg_words.ptr().cast(),
        seg_scales: target.seg_scales.ptr().cast(),
        max_seg: target.max_seg as i32,
        range_a: a.ptr(),
        range_b: b.ptr(),
        n_heads: target.heads as i32,
        status: status.ptr_mut(),
    }
    .args();
    let max_tokens = range_b.iter().copied().max().unwrap_or(0).max(0) as usize;
    kernel.launch(
        gpu,
        spec.launch_dims(target.batch, target.heads, max_tokens),
        &args,
    );
    let status = download(&status, "encode status");
    [status[0], status[1], status[2], status[3], status[4]]
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use reference::store::BlockSize;

    /// The CPU tables the GPU tests compare against are themselves consistent: slots in class
    /// order, and staged runs packed densely without overlap inside their region.
    #[test]
    fn staged_runs_pack_densely_in_slot_order() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let layout = StoreLayout::new(64, BlockSize::B32, 4).unwrap();
        let shape = TableShape {
            batch: 2,
            heads: 3,
            max_seg: 3,
            layout,
        };
        let depths: Vec<u8> = (0..64).map(|_| rng.gen_range(0..=4)).collect();
        let order = slot_order(&depths);
        assert!(order.windows(2).all(|w| {
            let (a, b) = (depths[w[0]], depths[w[1]]);
            (a == b && w[0] < w[1]) || (a != 0 && (b == 0 || b < a))
        }));
        let counts = class_count(&depths);
        let planes: usize = depths.iter().map(|&t| t as usize).sum();
        assert_eq!(
            counts
                .iter()
                .enumerate()
                .map(|(i, &n)| (4 - i) * n as usize)
                .sum::<usize>(),
            planes
        );
        let mut table = vec![u64::MAX; shape.len()];
        let (words, scales) = (1 << 20, 1 << 30);
        write_staged_runs(
            &mut table,
            &shape,
            (1, 2),
            300,
            (words, scales, planes),
            &depths,
        );
        let s_words = layout.segment_words() as u64;
        for s in 0..shape.max_seg {
            let region = ((3 + 2) * shape.max_seg + s) as u64;
            let mut next = words + region * planes as u64 * s_words * 8;
            for (slot, &channel) in order.iter().enumerate() {
                let e = shape.entry(1, 2, s, slot);
                if s >= shape.stored_segments(300) {
                    assert_eq!(table[e..e + 4], [u64::MAX; 4]);
                    continue;
                }
                assert_eq!(table[e], next, "segment {s} slot {slot}");
                assert_eq!(table[e + 2], channel as u64);
                next += table[e + 3] * s_words * 8;
                let spc = layout.scales_per_channel() as u64;
                assert_eq!(
                    table[e + 1],
                    scales + (region * 64 * spc + slot as u64 * spc) * 2
                );
            }
        }
    }
}
