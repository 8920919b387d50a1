//! `kernel-bench`: the transfer and scan kernels of one layer at a long context, against the
//! ceilings measured in the same run (SPEC §7, §9).
//!
//! For a preset (default `qwen3-8b`) at `--tokens` (default 1,048,576) it builds one layer's
//! store (random non-zero planes and scales, every KV head, one sequence) in mapped host memory
//! and in HBM, plans it on the GPU with the plan kernel (`fathom(B)` and `sparq(32)`), and times
//! with CUDA events (median of `--reps` runs after warm-up):
//! - `plan`: the plan kernel itself (`--plan-only` times nothing else);
//! - `gather`: the active runs of the plan from mapped host memory into HBM staging;
//! - the fused scan reading the planes straight from mapped host memory, for several tiles;
//! - the HBM scan of the same plans, for several tiles;
//!
//! and prints a table and a JSON record (GPU, driver, date, commit, every figure).
//! `--host-memory pinned|registered|vmm2m` picks how the host store is allocated
//! (`runtime::store::HostMemory`; default `pinned`, `cuMemHostAlloc`); `--tensor-cores` times
//! every scan tile on the tensor cores too (`ScanSpec::tensor_cores`); `--scan-peaks` times every
//! scan kernel also with the peaks of its 32-token halves (`ScanSpec::peaks`, name `_pk`, into a
//! buffer of `⌈ld_scores / 32⌉` keys a row), beside the same kernel without, for the overhead.
//!
//! `cargo run --release -p autotune --bin kernel-bench -- --commit $(git rev-parse --short HEAD)`

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use codegen::model::preset;
use codegen::spec::{GatherSpec, KernelSpec, Placement, PlanMethod, PlanSpec, ScanSpec};
use cudarc::driver::CudaFunction;
use runtime::abi;
use runtime::ceilings::{self, Ceilings};
use runtime::gpu::{DeviceBuffer, Gpu, GpuError, MappedBuffer};
use runtime::jit::{Jit, JitCache};
use runtime::launch::{DevicePtr, KernelArgs};
use runtime::store::device::copy;
use runtime::store::host_memory::HostBuffer;
use runtime::store::HostMemory;
use serde::Serialize;

const BLOCK: usize = 64;
const SEGMENT_WORDS: usize = 512;

struct Options {
    model: String,
    tokens: usize,
    reps: usize,
    commit: String,
    budgets: Vec<f32>,
    host_memory: HostMemory,
    /// Also time every scan tile on the tensor cores (`ScanSpec::tensor_cores`).
    tensor_cores: bool,
    /// Also time every scan kernel writing the peaks of its halves (`ScanSpec::peaks`).
    scan_peaks: bool,
    /// Time the plan kernels only (no gather, no scans).
    plan_only: bool,
}

fn parse_args() -> Result<Options, String> {
    parse(std::env::args().skip(1))
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut o = Options {
        model: "qwen3-8b".into(),
        tokens: 1 << 20,
        reps: 30,
        commit: "unknown".into(),
        budgets: vec![48.0],
        host_memory: HostMemory::Pinned,
        tensor_cores: false,
        scan_peaks: false,
        plan_only: false,
    };
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--model" => o.model = value()?,
            "--tokens" => o.tokens = value()?.parse().map_err(|e| format!("--tokens: {e}"))?,
            "--reps" => o.reps = value()?.parse().map_err(|e| format!("--reps: {e}"))?,
            "--commit" => o.commit = value()?,
            "--host-memory" => {
                o.host_memory = value()?
                    .parse()
                    .map_err(|e| format!("--host-memory: {e}"))?
            }
            "--tensor-cores" => o.tensor_cores = true,
            "--scan-peaks" => o.scan_peaks = true,
            "--plan-only" => o.plan_only = true,
            "--budgets" => {
                o.budgets = value()?
                    .split(',')
                    .map(|b| b.parse::<f32>().map_err(|e| format!("--budgets: {e}")))
                    .collect::<Result<_, _>>()?
            }
            other => {
                return Err(format!(
                    "unknown argument {other}; usage: kernel-bench [--model PRESET] [--tokens N] \
                     [--reps N] [--budgets 48,92] [--host-memory pinned|registered|vmm2m] [--tensor-cores] \
                     [--scan-peaks] [--plan-only] [--commit HASH]"
                ))
            }
        }
    }
    let segment = SEGMENT_WORDS * 64;
    if o.tokens == 0 || !o.tokens.is_multiple_of(segment) {
        return Err(format!(
            "--tokens must be a positive multiple of the segment ({segment} tokens)"
        ));
    }
    Ok(o)
}

/// A deterministic, non-zero stream of words.
struct Words(u64);

impl Words {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A finite fp16 scale in [2^-6, 2^1).
    fn scale(&mut self) -> u16 {
        let exponent = 9 + (self.next() % 7) as u16; // biased exponents 9..=15
        (exponent << 10) | (self.next() as u16 & 0x3ff)
    }
}

/// One layer's store in one placement: every segment of every head in two allocations.
struct Store {
    _words: Memory<u64>,
    _scales: Memory<u16>,
    seg_words: DeviceBuffer<u64>,
    seg_scales: DeviceBuffer<u64>,
    n_stored: DeviceBuffer<i32>,
}

enum Memory<T> {
    Device(DeviceBuffer<T>),
    Mapped(MappedBuffer<T>),
    /// Registered or VMM host memory, filled through the device.
    Host(HostBuffer),
}

impl<T> Memory<T> {
    fn addr(&self) -> u64 {
        match self {
            Memory::Device(b) => b.addr(),
            Memory::Mapped(b) => b.addr(),
            Memory::Host(b) => b.addr(),
        }
    }
}

/// `data` in host memory of `mode`.
fn host_copy<T: Copy>(gpu: &Gpu, mode: HostMemory, data: &[T]) -> Result<Memory<T>, GpuError> {
    if mode == HostMemory::Pinned {
        let mut m = gpu.mapped::<T>(data.len(), 0)?;
        m.as_mut_slice().copy_from_slice(data);
        return Ok(Memory::Mapped(m));
    }
    let bytes = std::mem::size_of_val(data);
    let buffer = HostBuffer::new(gpu, mode, bytes, "the kernel-bench store")?;
    copy(gpu, buffer.addr(), data.as_ptr() as u64, bytes)?;
    gpu.synchronize()?;
    Ok(Memory::Host(buffer))
}

fn build_store(
    gpu: &Gpu,
    placement: Placement,
    host_memory: HostMemory,
    heads: usize,
    d: usize,
    segments: usize,
    tokens: usize,
) -> Result<Store, GpuError> {
    let words_per_segment = d * 4 * SEGMENT_WORDS;
    let scales_per_segment = d * SEGMENT_WORDS * 64 / BLOCK;
    let mut rng = Words(0x5eed);
    let words: Vec<u64> = (0..heads * segments * words_per_segment)
        .map(|_| rng.next())
        .collect();
    let scales: Vec<u16> = (0..heads * segments * scales_per_segment)
        .map(|_| rng.scale())
        .collect();
    let (words, scales) = match placement {
        Placement::Hbm => (
            Memory::Device(gpu.upload(&words)?),
            Memory::Device(gpu.upload(&scales)?),
        ),
        Placement::Host => (
            host_copy(gpu, host_memory, &words)?,
            host_copy(gpu, host_memory, &scales)?,
        ),
    };
    let word_table: Vec<u64> = (0..heads * segments)
        .map(|i| words.addr() + (i * words_per_segment * 8) as u64)
        .collect();
    let scale_table: Vec<u64> = (0..heads * segments)
        .map(|i| scales.addr() + (i * scales_per_segment * 2) as u64)
        .collect();
    Ok(Store {
        seg_words: gpu.upload(&word_table)?,
        seg_scales: gpu.upload(&scale_table)?,
        n_stored: gpu.upload(&[tokens as i32])?,
        _words: words,
        _scales: scales,
    })
}

/// The function of a one-entry kernel, compiled by the JIT (into the run's temporary cache).
fn load(jit: &Jit, spec: impl Into<KernelSpec>) -> Result<(CudaFunction, String), String> {
    let spec = spec.into();
    let name = spec.kernel_name();
    let kernel = jit.kernel(&spec).map_err(|e| e.to_string())?;
    let function = kernel.function(&name).map_err(|e| e.to_string())?.clone();
    Ok((function, name))
}

/// A plan on the device: run tables (source and staged), class counts, queries.
struct DevicePlan {
    runs: DeviceBuffer<u64>,
    staged_runs: DeviceBuffer<u64>,
    class_count: DeviceBuffer<u32>,
    q_store: DeviceBuffer<f32>,
    /// Bytes of planes and scales the plan reads in one step (all heads).
    bytes: usize,
    bits_per_token: f64,
    /// The plan kernel's median time over the bench's reps, its name, function and threads.
    ms: f64,
    name: String,
    function: CudaFunction,
    threads: u32,
}

#[allow(clippy::too_many_arguments)]
fn plan(
    jit: &Jit,
    store: &Store,
    method: PlanMethod,
    budget: f32,
    heads: usize,
    d: usize,
    g: usize,
    segments: usize,
    tokens: usize,
    staging: (&DeviceBuffer<u64>, &DeviceBuffer<u16>, usize),
    reps: usize,
) -> Result<DevicePlan, String> {
    let spec = PlanSpec {
        block: BLOCK,
        segment_words: SEGMENT_WORDS,
        ..PlanSpec::new(d, g, method, false)
    };
    let gpu: &Gpu = jit.gpu();
    let (function, name) = load(jit, spec)?;
    let mut rng = Words(0x9e11);
    let unit = |w: u64| (w >> 11) as f32 / (1u64 << 53) as f32;
    let queries: Vec<f32> = (0..heads * g * d)
        .map(|_| unit(rng.next()) * 2.0 - 1.0)
        .collect();
    // Channel variances spread over two orders of magnitude, like real keys.
    let sigma2: Vec<f32> = (0..heads * d)
        .map(|_| 10f32.powf(unit(rng.next()) * 2.0 - 1.0))
        .collect();
    let e = |x: GpuError| x.to_string();
    let table = heads * segments * d * 4;
    let (runs, staged_runs) = (
        gpu.filled(table, 0xff).map_err(e)?,
        gpu.filled(table, 0xff).map_err(e)?,
    );
    let class_count = gpu.filled(heads * 4, 0xff).map_err(e)?;
    let q_store = gpu.filled(heads * g * d, 0xff).map_err(e)?;
    let q = gpu.upload(&queries).map_err(e)?;
    let s2 = gpu.upload(&sigma2).map_err(e)?;
    let depths = gpu.filled::<u8>(heads * d, 0xff).map_err(e)?;
    let status = gpu.upload(&[0i32; 3]).map_err(e)?;
    // The plan's outputs and the staging are this bench's, written by this launch only.
    let args = abi::plan::Args {
        q: q.ptr(),
        sigma2: s2.ptr(),
        fixed_channels: DevicePtr::null(),
        rot: DevicePtr::null(),
        budget,
        seg_words: store.seg_words.ptr().cast(),
        seg_scales: store.seg_scales.ptr().cast(),
        max_seg: segments as i32,
        n_stored: store.n_stored.ptr(),
        n_heads: heads as i32,
        q_store: q_store.shared_ptr_mut(),
        depths: depths.shared_ptr_mut(),
        class_count: class_count.shared_ptr_mut(),
        runs: runs.shared_ptr_mut(),
        staged_runs: staged_runs.shared_ptr_mut(),
        stage_words: staging.0.shared_ptr_mut(),
        stage_scales: staging.1.shared_ptr_mut(),
        stage_planes: staging.2 as i32,
        status: status.shared_ptr_mut(),
    }
    .args();
    let (grid, block, shared) = spec.launch_dims(1, heads);
    gpu.launch(&function, grid, block, shared, &args)
        .map_err(e)?;
    gpu.synchronize().map_err(e)?;
    let status = status.download().map_err(e)?;
    if status[0] != 0 {
        return Err(format!("plan {name}: staging too small, status {status:?}"));
    }
    // Every launch writes the same outputs from the same inputs.
    let ms = time(gpu, reps, &|| {
        gpu.launch(&function, grid, block, shared, &args)
    })
    .map_err(e)?;
    let depths = depths.download().map_err(e)?;
    let planes: usize = depths.iter().map(|&t| t as usize).sum();
    let active = depths.iter().filter(|&&t| t > 0).count();
    let scale_blocks = tokens / BLOCK;
    let bytes = planes * (tokens / 64) * 8 + active * scale_blocks * 2;
    let bits_per_token = (planes as f64 + active as f64 * 16.0 / BLOCK as f64) / heads as f64;
    Ok(DevicePlan {
        runs,
        staged_runs,
        class_count,
        q_store,
        bytes,
        bits_per_token,
        ms,
        name,
        function,
        threads: spec.threads as u32,
    })
}

fn median(mut v: Vec<f32>) -> f64 {
    v.sort_by(f32::total_cmp);
    v[v.len() / 2] as f64
}

/// Median event time of `reps` launches after two warm-ups.
fn time(
    gpu: &Gpu,
    reps: usize,
    launch: &dyn Fn() -> Result<(), GpuError>,
) -> Result<f64, GpuError> {
    launch()?;
    launch()?;
    gpu.synchronize()?;
    let runs = (0..reps)
        .map(|_| gpu.time_ms(launch))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(median(runs))
}

#[derive(Serialize)]
struct Row {
    kernel: String,
    what: String,
    placement: &'static str,
    plan: String,
    bits_per_token: f64,
    bytes: usize,
    ms: f64,
    gbps: f64,
    /// Registers per thread, local (spill) bytes per thread, static shared bytes per block, and
    /// the thread blocks one multiprocessor holds at once.
    registers: i32,
    local_bytes: i32,
    shared_bytes: i32,
    blocks_per_sm: u32,
    /// Achieved rate over the ceiling it is bounded by (pinned copy for host, HBM copy for HBM,
    /// counting the HBM copy's read bytes only, as the scan only reads).
    of_ceiling: f64,
}

#[derive(Serialize)]
struct Record {
    /// How the host store was allocated (`pinned`, `registered`, `vmm2m`).
    host_memory: String,
    gpu: String,
    compute_capability: String,
    driver_cuda: String,
    nvrtc: String,
    date_unix: u64,
    commit: String,
    model: String,
    tokens: usize,
    kv_heads: usize,
    group: usize,
    head_dim: usize,
    block: usize,
    segment_words: usize,
    reps: usize,
    ceilings: Ceilings,
    rows: Vec<Row>,
    /// HBM scan time of sparq(32) over that of each fathom plan, best tile of each.
    hbm_speedup_over_sparq32: Vec<(String, f64)>,
}

fn run(o: &Options) -> Result<Record, String> {
    let shape = preset(&o.model).map_err(|e| e.to_string())?;
    let (heads, d, g) = (shape.kv_heads, shape.head_dim, shape.group_size());
    let segments = o.tokens / (SEGMENT_WORDS * 64);
    let gpu = Arc::new(Gpu::open(0).map_err(|e| e.to_string())?);
    // Every kernel is compiled by the JIT into a cache of this run's own: a measurement never
    // reads PTX that another build left.
    let cache = tempfile::tempdir().map_err(|e| e.to_string())?;
    let jit = Jit::new(gpu.clone(), JitCache::new(cache.path().to_path_buf()))
        .map_err(|e| e.to_string())?;
    let e = |x: GpuError| x.to_string();
    eprintln!(
        "kernel-bench: {} at {} tokens on {}",
        o.model,
        o.tokens,
        gpu.info().name
    );
    let ceilings = ceilings::measure(&jit, 1 << 30, o.reps).map_err(|x| x.to_string())?;
    eprintln!("kernel-bench: ceilings {ceilings:?}");
    let stage_planes = 4 * d;
    let stage_words = gpu
        .filled::<u64>(heads * segments * stage_planes * SEGMENT_WORDS, 0xff)
        .map_err(e)?;
    let stage_scales = gpu
        .filled::<u16>(heads * segments * d * SEGMENT_WORDS * 64 / BLOCK, 0xff)
        .map_err(e)?;
    let staging = (&stage_words, &stage_scales, stage_planes);
    let host = build_store(
        &gpu,
        Placement::Host,
        o.host_memory,
        heads,
        d,
        segments,
        o.tokens,
    )
    .map_err(e)?;
    let hbm = build_store(
        &gpu,
        Placement::Hbm,
        HostMemory::Pinned,
        heads,
        d,
        segments,
        o.tokens,
    )
    .map_err(e)?;
    let mut methods: Vec<(String, PlanMethod, f32)> = o
        .budgets
        .iter()
        .map(|&b| (format!("fathom({b})"), PlanMethod::Fathom, b))
        .collect();
    methods.push(("sparq(32)".into(), PlanMethod::Sparq { r: 32 }, 0.0));
    let ld_scores = o.tokens;
    let scores = gpu.filled::<f32>(heads * g * ld_scores, 0xff).map_err(e)?;
    // The peaks of every 32-token half of every row, for `--scan-peaks`.
    let ld_peaks = ld_scores.div_ceil(32);
    let peaks = if o.scan_peaks {
        Some(gpu.filled::<u32>(heads * g * ld_peaks, 0xff).map_err(e)?)
    } else {
        None
    };
    let gather_spec = GatherSpec {
        block: BLOCK,
        segment_words: SEGMENT_WORDS,
        ..GatherSpec::new(d)
    };
    let (gather, gather_name) = load(&jit, gather_spec)?;
    let host_tiles = [(64, 1024), (16, 256), (32, 512), (32, 256)];
    let hbm_tiles = [(16, 256), (8, 256), (8, 128), (8, 64), (16, 512), (32, 512)];
    let variants: &[bool] = if o.tensor_cores {
        &[false, true]
    } else {
        &[false]
    };
    let peaks_variants: &[bool] = if o.scan_peaks {
        &[false, true]
    } else {
        &[false]
    };
    let mut rows = Vec::new();
    let mut best_hbm: Vec<(String, f64)> = Vec::new();
    for (label, method, budget) in &methods {
        for (placement, store) in [(Placement::Host, &host), (Placement::Hbm, &hbm)] {
            let p = plan(
                &jit, store, *method, *budget, heads, d, g, segments, o.tokens, staging, o.reps,
            )?;
            let ceiling = match placement {
                Placement::Host => ceilings.pinned_copy_gbps,
                Placement::Hbm => ceilings.hbm_stream_gbps(),
            };
            let mut push = |kernel: String, what: &str, ms: f64, f: &CudaFunction, threads: u32| {
                let (registers, local_bytes, shared_bytes) = (
                    f.num_regs().unwrap_or(-1),
                    f.local_size_bytes().unwrap_or(-1),
                    f.shared_size_bytes().unwrap_or(-1),
                );
                let blocks_per_sm = f
                    .occupancy_max_active_blocks_per_multiprocessor(threads, 0, None)
                    .unwrap_or(0);
                // The plan reads no planes: no rate.
                let streams = !what.starts_with("plan");
                let gbps = if streams {
                    p.bytes as f64 / (ms * 1e-3) / 1e9
                } else {
                    0.0
                };
                eprintln!(
                    "  {label:>12} {:>4} {what:<14} {ms:8.3} ms {gbps:8.1} GB/s  {kernel}",
                    placement.as_str()
                );
                rows.push(Row {
                    kernel,
                    what: what.into(),
                    placement: placement.as_str(),
                    plan: label.clone(),
                    bits_per_token: p.bits_per_token,
                    bytes: p.bytes,
                    ms,
                    gbps,
                    registers,
                    local_bytes,
                    shared_bytes,
                    blocks_per_sm,
                    of_ceiling: gbps / ceiling,
                });
                ms
            };
            push(p.name.clone(), "plan", p.ms, &p.function, p.threads);
            if o.plan_only {
                continue;
            }
            if placement == Placement::Host {
                let args = abi::gather::Args {
                    src_runs: p.runs.ptr(),
                    dst_runs: p.staged_runs.ptr(),
                    class_count: p.class_count.ptr(),
                    n_stored: store.n_stored.ptr(),
                    max_seg: segments as i32,
                    n_heads: heads as i32,
                }
                .args();
                let (grid, block, shared) = gather_spec.launch_dims(1, heads, segments);
                let ms = time(&gpu, o.reps, &|| {
                    gpu.launch(&gather, grid, block, shared, &args)
                })
                .map_err(e)?;
                push(gather_name.clone(), "gather", ms, &gather, block.0);
            }
            let tiles: &[(usize, usize)] = match placement {
                Placement::Host => &host_tiles,
                Placement::Hbm => &hbm_tiles,
            };
            let mut best = f64::INFINITY;
            let specs = tiles.iter().flat_map(|&(tile_words, threads)| {
                variants.iter().flat_map(move |&tensor_cores| {
                    peaks_variants.iter().map(move |&peaks| ScanSpec {
                        block: BLOCK,
                        segment_words: SEGMENT_WORDS,
                        tile_words,
                        threads,
                        tensor_cores,
                        peaks,
                        ..ScanSpec::new(d, g, placement)
                    })
                })
            });
            for spec in specs {
                let (tile_words, threads) = (spec.tile_words, spec.threads);
                let (function, name) = match load(&jit, spec) {
                    Ok(m) => m,
                    Err(err) => {
                        eprintln!("  skipping {tile_words}x{threads}: {err}");
                        continue;
                    }
                };
                let peak_args = match (spec.peaks, &peaks) {
                    (true, Some(peaks)) => Some((peaks.shared_ptr_mut(), ld_peaks as i32)),
                    _ => None,
                };
                // Every tile writes the same scores (and peaks), one launch at a time.
                let args = abi::scan_args(
                    abi::scan::Args {
                        runs: p.runs.ptr(),
                        class_count: p.class_count.ptr(),
                        q_store: p.q_store.ptr(),
                        n_stored: store.n_stored.ptr(),
                        max_seg: segments as i32,
                        n_heads: heads as i32,
                        scores: scores.shared_ptr_mut(),
                        ld_scores: ld_scores as i32,
                    },
                    peak_args,
                );
                let (grid, block, shared) = spec.launch_dims(1, heads, segments);
                let ms = time(&gpu, o.reps, &|| {
                    gpu.launch(&function, grid, block, shared, &args)
                })
                .map_err(e)?;
                let what = match (placement, spec.peaks) {
                    (Placement::Host, false) => "fused scan",
                    (Placement::Host, true) => "fused scan pk",
                    (Placement::Hbm, false) => "hbm scan",
                    (Placement::Hbm, true) => "hbm scan pk",
                };
                let ms = push(name, what, ms, &function, threads as u32);
                if !spec.peaks {
                    // The speedup over sparq(32) compares the scans without peaks.
                    best = best.min(ms);
                }
            }
            if placement == Placement::Hbm {
                best_hbm.push((label.clone(), best));
            }
        }
    }
    let sparq = best_hbm
        .iter()
        .find(|(l, _)| l == "sparq(32)")
        .map_or(f64::NAN, |(_, t)| *t);
    let (major, minor) = codegen::nvrtc::version().map_err(|e| e.to_string())?;
    let info = gpu.info();
    Ok(Record {
        host_memory: o.host_memory.to_string(),
        gpu: info.name.clone(),
        compute_capability: info.compute_capability_text(),
        driver_cuda: info.driver_cuda(),
        nvrtc: format!("{major}.{minor}"),
        date_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        commit: o.commit.clone(),
        model: o.model.clone(),
        tokens: o.tokens,
        kv_heads: heads,
        group: g,
        head_dim: d,
        block: BLOCK,
        segment_words: SEGMENT_WORDS,
        reps: o.reps,
        ceilings,
        hbm_speedup_over_sparq32: best_hbm
            .iter()
            .filter(|(l, _)| l != "sparq(32)")
            .map(|(l, t)| (l.clone(), sparq / t))
            .collect(),
        rows,
    })
}

fn main() -> std::process::ExitCode {
    let options = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("kernel-bench: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match run(&options) {
        Ok(record) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&record).unwrap_or_default()
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kernel-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(args: &[&str]) -> Result<Options, String> {
        parse(args.iter().map(|a| a.to_string()))
    }

    #[test]
    fn scan_peaks_is_off_unless_asked() {
        let o = parsed(&[]).unwrap();
        assert!(!o.scan_peaks && !o.tensor_cores);
        let o = parsed(&["--scan-peaks", "--tokens", "65536"]).unwrap();
        assert!(o.scan_peaks && !o.tensor_cores);
        assert_eq!(o.tokens, 65536);
        assert!(parsed(&["--plan-only"]).unwrap().plan_only);
        let o = parsed(&["--tensor-cores", "--scan-peaks"]).unwrap();
        assert!(o.scan_peaks && o.tensor_cores);
        let usage = parsed(&["--peaks"]).err().unwrap();
        assert!(usage.contains("[--scan-peaks]"), "{usage}");
    }
}
