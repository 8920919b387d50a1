//! Faults survived on the GPU (issue #7). Each test prints its seed (`FATHOM_TEST_SEED` replays
//! it) and fails, never passes, without a GPU.
//!
//! - `device_memory_runs_out_while_growing_an_hbm_store`: the test first takes all the device
//!   memory it can (1 GiB, then 64 MiB, then 1 MiB allocations until each fails); the next
//!   append that must grow a row region, and a prefill, fail with
//!   `GpuError::OutOfMemory { memory: "device" }` and change nothing (lengths, tokens in use,
//!   pool bytes in use); once the memory is given back the same append and prefill succeed, more
//!   appends cross block boundaries, and the store reads back equal to the reference store.
//! - `pinned_memory_runs_out_while_growing_a_host_store`: the same with a host-placement store;
//!   pinned memory is capped at what is held (`Gpu::limit_pinned`) rather than exhausted (taking
//!   the machine's RAM would starve it): the error is the same `OutOfMemory`, of `"pinned host"`
//!   memory. `..._a_registered_host_store` and `..._a_vmm_host_store`: the same with the store's
//!   host memory registered 2 MiB pages or VMM host memory (`StoreConfig::host_memory`,
//!   required), which the pinned ledger counts as it counts `cuMemHostAlloc`.
//! - `sequences_freed_in_random_order_return_memory_{hbm,host,host_registered,host_vmm}`: rounds of seeded random
//!   operations (create and prefill, continue a prefill, batched appends, free), contents
//!   checked against the reference after each round, then every sequence freed in random order
//!   and `trim()`: the store's own accounting is back to its baseline exactly, the pinned bytes
//!   of the context exactly, and the device's free memory (cuMemGetInfo, after a warm-up round)
//!   within 2 MiB (the driver's page; not compared under compute-sanitizer, whose own
//!   allocations it counts: `FATHOM_SANITIZER=1`, set by `scripts/sanitize.sh`).
//! - `two_streams_step_concurrently_as_one_after_another`: two sequences (one host placement,
//!   one HBM), each with its own store and decoder, decoded `fathom(48)` with an append per step,
//!   on two streams of one context (`Gpu::with_new_stream`) from two threads at once, equal bit
//!   for bit to the same steps run one job after the other on one stream.
//! - `a_mismatched_tuning_record_is_refused_and_the_next_place_used`: a record of this GPU
//!   model in `$FATHOM_TUNING_DIR` measured with another driver is refused by `Decoder::new`,
//!   which says why on standard error and plans with the next place's record (the compiled-in
//!   `runtime/records` one of this GPU model, when it fits) or else the defaults; the same record with this
//!   process's header is used (its scan tile shows in the plan), so the test sees the record.
//!   Runs in child processes, so that no test changes another's environment.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Barrier};

use codegen::model::ModelShape;
use codegen::spec::Placement;
use fathom_tests::kit::GpuTest;
use fathom_tests::select_kernels::Mismatches;
use fathom_tests::step_check::replay_difference;
use fathom_tests::step_setup::{qwen3_8b, sigma2_decoder};
use fathom_tests::store_check::{bits, check_contents, Chunk, Contents};
use fathom_tests::{gpu, gpu_test, inputs, under_sanitizer};
use half::bf16;
use rand::seq::SliceRandom;
use rand::Rng;
use runtime::gpu::{DeviceBuffer, Gpu, GpuError};
use runtime::jit::JitCache;
use runtime::step::{Decoder, DecoderConfig, HostStepOutput, Method, StepRequest};
use runtime::store::{HostMemory, KeyStore, SequenceId, StoreConfig, StoreError};
use runtime::tuning::locate::EMBEDDED_RECORDS;
use runtime::tuning::{context_bucket, fit_scan_tile};
use runtime::tuning::{
    find_record, record_file_name, CandidateRecord, EntryKey, EntryRecord, Outcome, RecordMeta,
    Subject, TuningRecord, Variant, Winner, TUNING_DIR_VAR,
};
use runtime::tuning::{Tile, TunedFamily};
use runtime::tuning::{TuneKey, Tuning};

fn store(gpu: &Arc<Gpu>, config: StoreConfig) -> KeyStore {
    KeyStore::new(gpu.clone(), config).unwrap_or_else(|e| panic!("building the store: {e}"))
}

/// Takes all the device memory it can, in ever smaller pieces.
fn take_device_memory(gpu: &Gpu) -> Vec<DeviceBuffer<u8>> {
    let mut taken = Vec::new();
    for piece in [1usize << 30, 1 << 26, 1 << 20] {
        loop {
            match gpu.filled::<u8>(piece, 0) {
                Ok(buffer) => taken.push(buffer),
                Err(GpuError::OutOfMemory {
                    memory: "device", ..
                }) => break,
                Err(e) => panic!("taking device memory: {e}"),
            }
        }
    }
    taken
}

fn is_out_of(e: &StoreError, memory: &str) -> bool {
    matches!(e, StoreError::Gpu(GpuError::OutOfMemory { memory: m, .. }) if *m == memory)
}

/// Runs a store of `placement` out of memory while it grows (see the module docs).
/// A store of `placement` whose host memory is `host`, required (so that a driver without it
/// fails the test instead of quietly testing `pinned`).
fn config_with(
    model: ModelShape,
    placement: Placement,
    host: HostMemory,
    capacity: usize,
) -> StoreConfig {
    StoreConfig {
        host_memory: host,
        require_host_memory: true,
        ..StoreConfig::new(model, placement, capacity)
    }
}

fn growth_runs_out(t: &mut GpuTest, placement: Placement, host: HostMemory) {
    let label = format!("out of memory, {} {host}", placement.as_str());
    let (gpu, seed, rng) = (t.gpu.clone(), t.seed, &mut t.rng);
    let model = qwen3_8b(1);
    let (heads, d) = (model.kv_heads, model.head_dim);
    let mut store = store(&gpu, config_with(model, placement, host, 1 << 20));
    assert_eq!(store.host_memory(), host, "{label}");
    let (a, b) = (store.create_sequence(), store.create_sequence());
    let (mut ca, mut cb) = (Contents::new(1, heads), Contents::new(1, heads));
    // 4096 tokens fill a row region exactly: the next append must grow it.
    let first = Chunk::new(&gpu, rng, heads, 4096, d);
    store
        .prefill(a, 0, &first.device_keys, &first.device_values)
        .unwrap_or_else(|e| panic!("{label}: prefill: {e}"));
    first.record(&mut ca, 0);
    // Everything the test uploads is uploaded before memory runs out.
    let tokens: Vec<Chunk> = (0..130)
        .map(|_| Chunk::new(&gpu, rng, heads, 1, d))
        .collect();
    let second = Chunk::new(&gpu, rng, heads, 1000, d);
    store.check().expect("valid keys");
    let in_use = store.memory().pool_bytes_in_use;

    let memory = match placement {
        Placement::Hbm => "device",
        Placement::Host => "pinned host",
    };
    let taken = match placement {
        Placement::Hbm => take_device_memory(&gpu),
        Placement::Host => {
            gpu.limit_pinned(Some(gpu.pinned_bytes()));
            Vec::new()
        }
    };
    let (free, total) = gpu.memory().expect("cuMemGetInfo");
    eprintln!(
        "{label}: took {} MiB; device free {} of {} MiB, pinned {} bytes",
        taken.iter().map(DeviceBuffer::len).sum::<usize>() >> 20,
        free >> 20,
        total >> 20,
        gpu.pinned_bytes()
    );
    let mut appended = 0;
    let failure = loop {
        assert!(
            appended < 64,
            "{label}: {appended} appends ran without growing (FATHOM_TEST_SEED={seed})"
        );
        let t = &tokens[appended];
        match store.append(&[a], 0, &t.device_keys, &t.device_values) {
            Ok(()) => {
                t.record_append(&mut [&mut ca], 0, d);
                appended += 1;
            }
            Err(e) => break e,
        }
    };
    eprintln!("{label}: append {appended} refused: {failure}");
    assert!(
        is_out_of(&failure, memory),
        "{label}: expected out of {memory} memory, got {failure:?}"
    );
    let n = ca.tokens(0, d);
    assert_eq!(store.lengths(a, 0).unwrap(), (n / 64 * 64, n), "{label}");
    assert_eq!(store.tokens_in_use(), n, "{label}: tokens in use");
    assert_eq!(store.memory().pool_bytes_in_use, in_use, "{label}: pools");
    let failure = store
        .prefill(b, 0, &second.device_keys, &second.device_values)
        .expect_err("a prefill with no memory to grow into");
    assert!(
        is_out_of(&failure, memory),
        "{label}: prefill: expected out of {memory} memory, got {failure:?}"
    );
    assert_eq!(store.lengths(b, 0).unwrap(), (0, 0), "{label}");
    assert_eq!(store.tokens_in_use(), n, "{label}: tokens in use");

    // Memory back: the same calls succeed, and the store holds exactly what it was given.
    drop(taken);
    gpu.limit_pinned(None);
    for t in &tokens[appended..] {
        store
            .append(&[a], 0, &t.device_keys, &t.device_values)
            .unwrap_or_else(|e| panic!("{label}: append after the fault: {e}"));
        t.record_append(&mut [&mut ca], 0, d);
    }
    store
        .prefill(b, 0, &second.device_keys, &second.device_values)
        .unwrap_or_else(|e| panic!("{label}: prefill after the fault: {e}"));
    second.record(&mut cb, 0);
    store.check().expect("valid keys");
    assert!(store.memory().pool_bytes_in_use > in_use);
    let mut m = Mismatches::new(format!("{label}: after the fault"), seed);
    check_contents(&gpu, &store, &[a, b], &[&ca, &cb], 0, &mut m);
    m.finish();
}

gpu_test!(device_memory_runs_out_while_growing_an_hbm_store, |t| {
    growth_runs_out(&mut t, Placement::Hbm, HostMemory::Pinned);
});

gpu_test!(pinned_memory_runs_out_while_growing_a_host_store, |t| {
    growth_runs_out(&mut t, Placement::Host, HostMemory::Pinned);
});

gpu_test!(
    pinned_memory_runs_out_while_growing_a_registered_host_store,
    |t| {
        growth_runs_out(&mut t, Placement::Host, HostMemory::Registered);
    }
);

gpu_test!(pinned_memory_runs_out_while_growing_a_vmm_host_store, |t| {
    growth_runs_out(&mut t, Placement::Host, HostMemory::Vmm2M);
});

/// Rounds of random operations, each ending with every sequence freed (see the module docs).
fn random_frees(t: &mut GpuTest, placement: Placement, host: HostMemory) {
    const LAYERS: usize = 2;
    const ROUNDS: usize = 6;
    const OPS: usize = 60;
    const MAX_BATCH: usize = 16;
    let label = format!("random frees, {} {host}", placement.as_str());
    let (gpu, seed, rng) = (t.gpu.clone(), t.seed, &mut t.rng);
    let model = qwen3_8b(LAYERS);
    let (heads, d) = (model.kv_heads, model.head_dim);
    let config = StoreConfig {
        // 512-token segments: sequences span many, slabs fill and empty.
        segment_words: 8,
        max_batch: MAX_BATCH,
        ..config_with(model, placement, host, 1 << 18)
    };
    let mut store = store(&gpu, config);
    let store_baseline = store.memory();
    let mut baseline: Option<(usize, usize)> = None;
    let mut max_drift = 0i64;
    for round in 0..ROUNDS {
        let mut live: Vec<(SequenceId, Contents)> = Vec::new();
        let (mut created, mut freed) = (0, 0);
        for _ in 0..OPS {
            let op = rng.gen_range(0..10);
            if live.is_empty() || op < 2 {
                let id = store.create_sequence();
                let mut c = Contents::new(LAYERS, heads);
                for layer in 0..LAYERS {
                    let n = rng.gen_range(1..2500);
                    let chunk = Chunk::new(&gpu, rng, heads, n, d);
                    store
                        .prefill(id, layer, &chunk.device_keys, &chunk.device_values)
                        .unwrap_or_else(|e| panic!("{label}: prefill: {e}"));
                    chunk.record(&mut c, layer);
                }
                live.push((id, c));
                created += 1;
            } else if op < 6 {
                live.shuffle(rng);
                let batch = rng.gen_range(1..=live.len().min(MAX_BATCH));
                let layer = rng.gen_range(0..LAYERS);
                let chunk = Chunk::new(&gpu, rng, batch * heads, 1, d);
                let ids: Vec<SequenceId> = live[..batch].iter().map(|(id, _)| *id).collect();
                store
                    .append(&ids, layer, &chunk.device_keys, &chunk.device_values)
                    .unwrap_or_else(|e| panic!("{label}: append: {e}"));
                let mut contents: Vec<&mut Contents> =
                    live[..batch].iter_mut().map(|(_, c)| c).collect();
                chunk.record_append(&mut contents, layer, d);
            } else if op < 8 {
                let at = rng.gen_range(0..live.len());
                let layer = rng.gen_range(0..LAYERS);
                let n = rng.gen_range(1..700);
                let chunk = Chunk::new(&gpu, rng, heads, n, d);
                let (id, c) = &mut live[at];
                store
                    .prefill(*id, layer, &chunk.device_keys, &chunk.device_values)
                    .unwrap_or_else(|e| panic!("{label}: continued prefill: {e}"));
                chunk.record(c, layer);
            } else {
                let (id, _) = live.swap_remove(rng.gen_range(0..live.len()));
                store.free_sequence(id).expect("a live sequence");
                freed += 1;
            }
        }
        store
            .check()
            .unwrap_or_else(|e| panic!("{label}: check: {e}"));
        let mut m = Mismatches::new(format!("{label}, round {round}"), seed);
        for group in live.chunks(MAX_BATCH) {
            let ids: Vec<SequenceId> = group.iter().map(|(id, _)| *id).collect();
            let contents: Vec<&Contents> = group.iter().map(|(_, c)| c).collect();
            for layer in 0..LAYERS {
                check_contents(&gpu, &store, &ids, &contents, layer, &mut m);
            }
        }
        m.finish();
        let used = store.memory();
        live.shuffle(rng);
        for (id, _) in live.drain(..) {
            store.free_sequence(id).expect("a live sequence");
        }
        assert_eq!(store.tokens_in_use(), 0, "{label}: tokens in use");
        assert_eq!(store.memory().pool_bytes_in_use, 0, "{label}: pool bytes");
        store.trim().expect("trim");
        assert_eq!(
            store.memory(),
            store_baseline,
            "{label}, round {round}: the store's memory after freeing and trimming \
             (FATHOM_TEST_SEED={seed})"
        );
        let free = gpu.memory().expect("cuMemGetInfo").0;
        let pinned = gpu.pinned_bytes();
        eprintln!(
            "{label}, round {round}: {created} created, {freed} freed early; held {} device + \
             {} pinned bytes before freeing; device free {free}, pinned {pinned}",
            used.device_bytes, used.pinned_bytes
        );
        match baseline {
            // The first round also warms the driver up (modules, local memory of launches).
            None => baseline = Some((free, pinned)),
            Some((free0, pinned0)) => {
                assert_eq!(
                    pinned, pinned0,
                    "{label}, round {round}: pinned bytes back to the baseline"
                );
                if under_sanitizer() {
                    eprintln!("{label}: under compute-sanitizer: device free memory not compared");
                    continue;
                }
                let drift = free as i64 - free0 as i64;
                max_drift = max_drift.max(drift.abs());
                assert!(
                    drift.abs() <= 2 << 20,
                    "{label}, round {round}: device free memory {free} vs {free0} after round 0 \
                     (drift {drift} bytes; FATHOM_TEST_SEED={seed})"
                );
            }
        }
    }
    eprintln!("{label}: largest device free-memory drift {max_drift} bytes");
}

gpu_test!(sequences_freed_in_random_order_return_memory_hbm, |t| {
    random_frees(&mut t, Placement::Hbm, HostMemory::Pinned);
});

gpu_test!(sequences_freed_in_random_order_return_memory_host, |t| {
    random_frees(&mut t, Placement::Host, HostMemory::Pinned);
});

gpu_test!(
    sequences_freed_in_random_order_return_memory_host_registered,
    |t| {
        random_frees(&mut t, Placement::Host, HostMemory::Registered);
    }
);

gpu_test!(
    sequences_freed_in_random_order_return_memory_host_vmm,
    |t| {
        random_frees(&mut t, Placement::Host, HostMemory::Vmm2M);
    }
);

/// One sequence decoded step by step: everything on the host, so that it can go to a thread.
struct Job {
    placement: Placement,
    /// `[h]` raw keys and values `[n][D]` of the prefill.
    keys: Vec<Vec<bf16>>,
    values: Vec<Vec<bf16>>,
    /// Per step, the appended token's keys and values `[H][D]`.
    appends: Vec<(Vec<bf16>, Vec<bf16>)>,
    /// Per step (one more than appends: a step before the first append), queries `[H][G][D]`.
    queries: Vec<Vec<f32>>,
    /// `[L = 1][H][D]`.
    sigma2: Vec<f32>,
}

const STEPS: usize = 16;
const K: usize = 256;

impl Job {
    fn new(rng: &mut impl Rng, placement: Placement, n: usize) -> Job {
        let m = qwen3_8b(1);
        let (heads, d, g) = (m.kv_heads, m.head_dim, m.group_size());
        Job {
            placement,
            keys: (0..heads).map(|_| inputs::keys(rng, n, d)).collect(),
            values: (0..heads).map(|_| inputs::keys(rng, n, d)).collect(),
            appends: (0..STEPS)
                .map(|_| (inputs::keys(rng, heads, d), inputs::keys(rng, heads, d)))
                .collect(),
            queries: (0..=STEPS)
                .map(|_| inputs::vectors(rng, heads * g, d))
                .collect(),
            sigma2: (0..heads * d)
                .map(|_| rng.gen_range(0.01f32..4.0))
                .collect(),
        }
    }
}

/// Runs `job` on `gpu`'s stream with its own store and decoder; waits at `start` (if any) once
/// everything is built and the first step has run, so that two jobs step at the same time.
fn run_job(gpu: &Arc<Gpu>, job: &Job, start: Option<&Barrier>) -> Vec<HostStepOutput> {
    let model = qwen3_8b(1);
    let mut store = store(gpu, StoreConfig::new(model.clone(), job.placement, 1 << 18));
    let id = store.create_sequence();
    let upload = |x: &[bf16]| gpu.upload(&bits(x)).expect("upload");
    let (k, v) = (upload(&job.keys.concat()), upload(&job.values.concat()));
    store.prefill(id, 0, &k, &v).expect("prefill");
    let tokens: Vec<_> = job
        .appends
        .iter()
        .map(|(k, v)| (upload(k), upload(v)))
        .collect();
    let mut decoder =
        sigma2_decoder(gpu.clone(), model, job.sigma2.clone()).expect("a calibrated decoder");
    let request = StepRequest::new(Method::Fathom { bits: 48.0 }, K);
    let mut step = |store: &KeyStore, i: usize| -> HostStepOutput {
        let view = store.layer_view(&[id], 0).expect("a view");
        let out = decoder
            .step_host(&view, &job.queries[i], request)
            .unwrap_or_else(|e| panic!("step {i}: {e}"));
        out.check().unwrap_or_else(|e| panic!("step {i}: {e}"));
        out.download().expect("download")
    };
    let mut outputs = vec![step(&store, 0)];
    if let Some(start) = start {
        start.wait();
    }
    for (i, (k, v)) in tokens.iter().enumerate() {
        store.append(&[id], 0, k, v).expect("append");
        outputs.push(step(&store, i + 1));
    }
    store.check().expect("valid keys");
    outputs
}

gpu_test!(two_streams_step_concurrently_as_one_after_another, |t| {
    let first = t.gpu.clone();
    let second = Arc::new(first.with_new_stream().expect("a second stream"));
    assert!(!Arc::ptr_eq(first.stream(), second.stream()));
    let (short, long) = (
        t.rng.gen_range(40_000..60_000),
        t.rng.gen_range(80_000..100_000),
    );
    let jobs = [
        Job::new(&mut t.rng, Placement::Host, short),
        Job::new(&mut t.rng, Placement::Hbm, long),
    ];
    let serial: Vec<Vec<HostStepOutput>> = jobs.iter().map(|j| run_job(&first, j, None)).collect();
    for (j, outputs) in serial.iter().enumerate() {
        for (i, out) in outputs.iter().enumerate() {
            let picked = out.selected(0, 0, 0).len();
            assert!(
                picked >= K && out.out.iter().all(|x| x.is_finite()),
                "job {j} step {i}: {picked} tokens selected, outputs finite: {}",
                out.out.iter().all(|x| x.is_finite())
            );
        }
    }
    for attempt in 0..2 {
        let start = Barrier::new(2);
        let concurrent: Vec<Vec<HostStepOutput>> = std::thread::scope(|scope| {
            let handles: Vec<_> = jobs
                .iter()
                .zip([&first, &second])
                .map(|(job, gpu)| {
                    let start = &start;
                    scope.spawn(move || run_job(gpu, job, Some(start)))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        for (j, (a, b)) in serial.iter().zip(&concurrent).enumerate() {
            assert_eq!(a.len(), b.len());
            for (i, (a, b)) in a.iter().zip(b).enumerate() {
                if let Some(difference) = replay_difference(a, b) {
                    panic!(
                        "attempt {attempt}, job {j} ({}), step {i}: concurrent differs from \
                         serial: {difference} (FATHOM_TEST_SEED={})",
                        jobs[j].placement.as_str(),
                        t.seed
                    );
                }
            }
        }
    }
});

/// Set in a child of the tuning test: the scratch directory.
const TUNING_CHILD_DIR: &str = "FATHOM_FAULT_TUNING_DIR";
/// The scan tile of the records written here, unlike the default HBM scan tile (16, 256).
const RECORDED_SCAN: (usize, usize) = (32, 512);
/// Tokens of the tuning child's sequence.
const CHILD_TOKENS: usize = 5000;

/// A record with `meta` whose only entry sets the HBM scan tile of qwen3-8b's shape.
fn scan_record(meta: RecordMeta) -> TuningRecord {
    let (tile_words, threads) = RECORDED_SCAN;
    let variant = Variant::Tile(Tile::Scan {
        tile_words,
        threads,
        tensor_cores: false,
    });
    let mut record = TuningRecord::new(meta);
    record.insert(EntryRecord {
        key: EntryKey {
            subject: Subject::Kernel(TunedFamily::Scan),
            head_dim: 128,
            group: 4,
            placement: Placement::Hbm,
            context_bucket: 13,
        },
        tokens: 1 << 13,
        bytes: None,
        ceiling: None,
        candidates: vec![CandidateRecord {
            name: variant.name(),
            variant,
            outcome: Outcome::Timed {
                median_ms: 0.1,
                p25_ms: 0.1,
                p75_ms: 0.1,
                samples: 10,
                gbps: None,
            },
        }],
        winner: Some(Winner {
            name: variant.name(),
            variant,
            median_ms: 0.1,
            fastest: variant.name(),
            noise_band: 0.02,
            within_noise: vec![variant.name()],
        }),
    });
    record
}

/// The child half of the tuning test; does nothing unless started by it. Plans a step through
/// a `Decoder` built by `Decoder::new` (which reads the record) and prints the scan tile.
#[test]
fn tuning_child() {
    if std::env::var_os(TUNING_CHILD_DIR).is_none() {
        return;
    }
    let gpu = Arc::new(gpu());
    let model = qwen3_8b(1);
    let (heads, d) = (model.kv_heads, model.head_dim);
    let mut store = store(
        &gpu,
        StoreConfig::new(model.clone(), Placement::Hbm, 1 << 16),
    );
    let id = store.create_sequence();
    let mut rng = inputs::rng("tuning child");
    let chunk = Chunk::new(&gpu, &mut rng, heads, CHILD_TOKENS, d);
    store
        .prefill(id, 0, &chunk.device_keys, &chunk.device_values)
        .expect("prefill");
    let decoder =
        Decoder::new(gpu.clone(), model, DecoderConfig::default()).expect("a decoder of qwen3-8b");
    let view = store.layer_view(&[id], 0).expect("a view");
    let plan = decoder
        .launch_plan(&view, &StepRequest::new(Method::Sparq { r: 16 }, 256))
        .expect("a plan");
    let scan = plan.specs.scan.expect("sparq scans planes");
    println!(
        "tuning-child scan={},{} tuned={}",
        scan.tile_words, scan.threads, plan.tuned
    );
}

/// Runs the tuning child with `dir` as `$FATHOM_TUNING_DIR`; its stdout and stderr.
fn tuning_child_run(dir: &Path, cache: &Path, nvrtc: &Path) -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        .args(["tuning_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(TUNING_CHILD_DIR, dir)
        .env(TUNING_DIR_VAR, dir)
        // No other record: an empty cache directory; the kernels from the usual disk cache and
        // the NVRTC this process loaded.
        .env("FATHOM_CACHE_DIR", cache)
        .env("FATHOM_KERNEL_CACHE", JitCache::default_dir())
        .env("FATHOM_NVRTC", nvrtc)
        .output()
        .expect("the child starts");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the tuning child failed:\n{text}");
    text
}

fn scan_tile(text: &str) -> (usize, usize) {
    let line = text
        .lines()
        .find_map(|l| l.split_once("tuning-child scan=").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("the child printed no plan:\n{text}"));
    let tile = line.split_whitespace().next().unwrap_or_default();
    let (w, t) = tile.split_once(',').expect("w,t");
    (w.parse().expect("words"), t.parse().expect("threads"))
}

gpu_test!(
    a_mismatched_tuning_record_is_refused_and_the_next_place_used,
    |t| {
        let nvrtc = codegen::nvrtc::load().expect("NVRTC").path.clone();
        let (major, minor) = codegen::nvrtc::version().expect("NVRTC's version");
        let current = RecordMeta::current(t.gpu.info(), format!("{major}.{minor}"), String::new());
        drop(t.gpu);
        let file = record_file_name(&current.gpu);
        let root = tempfile::tempdir().unwrap();
        let (fits, mismatched, cache) = (
            root.path().join("fits"),
            root.path().join("mismatched"),
            root.path().join("cache"),
        );
        let other_driver = RecordMeta {
            driver: "1.0".into(),
            ..current.clone()
        };
        scan_record(other_driver)
            .write(&mismatched.join(&file))
            .unwrap();
        scan_record(current.clone())
            .write(&fits.join(&file))
            .unwrap();

        let text = tuning_child_run(&fits, &cache, &nvrtc);
        assert_eq!(
            scan_tile(&text),
            RECORDED_SCAN,
            "a record with this process's header sets the scan tile:\n{text}"
        );

        let text = tuning_child_run(&mismatched, &cache, &nvrtc);
        // The next place: the record compiled into the binary, where one of this GPU fits.
        let next = find_record(&[], EMBEDDED_RECORDS, &current).record;
        let key = TuneKey {
            family: TunedFamily::Scan,
            head_dim: 128,
            group: 4,
            placement: Placement::Hbm,
            context_bucket: context_bucket(CHILD_TOKENS),
        };
        let segment_words = DecoderConfig::default().segment_words;
        let want = match next.as_ref().and_then(|(_, r)| r.tile(&key)) {
            Some(Tile::Scan {
                tile_words,
                threads,
                ..
            }) => fit_scan_tile((tile_words, threads), segment_words),
            _ => fit_scan_tile(runtime::tuning::Tiles::default().scan_hbm, segment_words),
        };
        assert_ne!(
            want, RECORDED_SCAN,
            "the next place's tile equals the refused one: pick another RECORDED_SCAN"
        );
        assert_eq!(
            scan_tile(&text),
            want,
            "after the refusal the next place's tile (else the default) is used:\n{text}"
        );
        if next.is_none() {
            assert!(text.contains("tuned=false"), "{text}");
        }
        let path = mismatched.join(&file).display().to_string();
        for want in [
            format!("the tuning record {path} is refused"),
            "the record was measured with driver CUDA 1.0".to_string(),
            "using defaults".to_string(),
        ] {
            assert!(
                text.contains(&want),
                "the refusal says {want:?}; the child printed:\n{text}"
            );
        }
    }
);
