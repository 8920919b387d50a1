//! fathom-soak: a long decode on the GPU (issue #7): 10,000 `fathom(48)` steps of one layer of
//! qwen3-8b's shape (8 KV heads, G = 4, D = 128) over one sequence in a host-placement store,
//! one appended token per step, checked against the f64 reference at sampled steps, with the
//! memory sampled throughout.
//!
//! - The sequence is prefilled with `--tokens − --steps` tokens and ends at `--tokens`
//!   (131,072 by default: 128k at the end), so the store's row region and segments (512-word,
//!   32,768-token segments) hold it from the first step: the store must not grow at all.
//! - Every step: write the token (in place, on the stream), append, a `fathom(48)` step with new
//!   random queries and `k = 256`, and `StepOutput::check` (a sync: no non-finite output).
//! - Every `--check-every` steps and the last: the step's selections and outputs of every KV
//!   head and query head against `reference::step::step_group` on reference stores fed
//!   the same tokens (`fathom_tests::step_check::check_step`: selections equal apart from ties
//!   within fp32 rounding, attention relative error <= 1e-3), on all cores.
//! - Every 50 steps: the device's free memory (cuMemGetInfo), the context's pinned bytes, the
//!   store's own accounting and the decoder's workspace. The store's accounting and the pinned
//!   bytes must not move at all after the first step; the device's free memory must not move
//!   by more than 2 MiB (the driver's page) while the workspace stays the same size (it grows
//!   when the context passes a token capacity, which steps up every 1/8 power of two; a growth
//!   itself moves the free memory by its allocations, rounded).
//!
//! A JSON summary goes to `--out` (GPU, driver, commit, steps, checks, largest errors, memory
//! range and drift, step times, wall time). Exits 1 when a check or the memory fails, 2 on an
//! error.
//!
//! `cargo run --release -p fathom-tests --bin fathom-soak -- --out soak.json --commit HASH`

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use codegen::spec::Placement;
use fathom_tests::inputs;
use fathom_tests::select_kernels::{relative_error, Mismatches};
use fathom_tests::step_check::{check_step, reference_steps, GroupData, StepCheck};
use fathom_tests::step_setup::{qwen3_8b, sigma2_decoder};
use fathom_tests::store_check::bits;
use half::bf16;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use reference::store::{BlockSize, HeadId, HeadStore, StoreLayout};
use runtime::gpu::Gpu;
use runtime::step::{HostStepOutput, Method, StepRequest};
use runtime::store::{KeyStore, StoreConfig};
use serde_json::json;

#[derive(Parser, Debug)]
#[command(about = "A long fathom(48) decode on the GPU, checked and with its memory watched")]
struct Args {
    /// Decode steps, one appended token each.
    #[arg(long, default_value_t = 10_000)]
    steps: usize,
    /// Tokens of the sequence after the last step (it is prefilled with tokens − steps).
    #[arg(long, default_value_t = 131_072)]
    tokens: usize,
    /// Check against the reference every this many steps (and at the last).
    #[arg(long, default_value_t = 500)]
    check_every: usize,
    /// Top-k per query head.
    #[arg(long, default_value_t = 256)]
    k: usize,
    /// Bits per token of fathom's plan.
    #[arg(long, default_value_t = 48.0)]
    bits: f64,
    /// The seed of every random draw (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// The commit the binary was built from (default: $FATHOM_COMMIT).
    #[arg(long)]
    commit: Option<String>,
    /// Where to write the JSON summary.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

const D: usize = 128;
const SEGMENT_WORDS: usize = 512;
const MAX_RELATIVE_ERROR: f64 = 1e-3;
/// Steps between memory samples.
const SAMPLE_EVERY: usize = 50;
/// The device's free memory may move this much beyond what the workspace explains.
const DEVICE_SLACK: i64 = 2 << 20;

/// One memory sample.
#[derive(Clone, Copy, Debug)]
struct Sample {
    step: usize,
    device_free: usize,
    pinned: usize,
    store_device: usize,
    store_pinned: usize,
    workspace: usize,
}

/// The smallest and largest of a field over the samples.
fn range(samples: &[Sample], f: impl Fn(&Sample) -> usize) -> (usize, usize) {
    let min = samples.iter().map(&f).min().unwrap_or(0);
    let max = samples.iter().map(&f).max().unwrap_or(0);
    (min, max)
}

/// The reference's view of the sequence: raw keys and values and the store of every head.
struct Reference {
    keys: Vec<Vec<bf16>>,
    values: Vec<Vec<bf16>>,
    stores: Vec<HeadStore>,
}

/// What the checks found.
#[derive(Default)]
struct Checks {
    done: usize,
    failed: usize,
    max_relative_error: f64,
    tied_selections: usize,
    first_failures: Vec<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("fathom-soak: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &Args) -> Result<bool, Box<dyn std::error::Error>> {
    let started = Instant::now();
    if args.steps == 0 || args.tokens <= args.steps || args.check_every == 0 {
        return Err(format!(
            "need steps >= 1, tokens > steps and check-every >= 1 (got steps {}, tokens {}, \
             check-every {})",
            args.steps, args.tokens, args.check_every
        )
        .into());
    }
    let seed = match args.seed {
        Some(seed) => seed,
        None => inputs::rng_and_seed("fathom-soak").1,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let commit = args
        .commit
        .clone()
        .or_else(|| std::env::var("FATHOM_COMMIT").ok())
        .unwrap_or_else(|| "unknown".into());
    let model = qwen3_8b(1);
    let (heads, group) = (model.kv_heads, model.group_size());
    assert_eq!(model.head_dim, D, "qwen3-8b has D = 128");
    let prefill = args.tokens - args.steps;

    let gpu = Arc::new(Gpu::open(0)?);
    let info = gpu.info().clone();
    let (major, minor) = codegen::nvrtc::version()?;
    eprintln!(
        "fathom-soak: {} (driver CUDA {}), NVRTC {major}.{minor}, seed {seed}, commit \
         {commit}: {} steps over {prefill} → {} tokens, fathom({}) k = {}",
        info.name,
        info.driver_cuda(),
        args.steps,
        args.tokens,
        args.bits,
        args.k
    );

    // The sequence on the host, and the reference stores of every head (on all cores).
    let layout = StoreLayout::new(D, BlockSize::B64, SEGMENT_WORDS)?;
    let keys: Vec<Vec<bf16>> = (0..heads)
        .map(|_| inputs::keys(&mut rng, prefill, D))
        .collect();
    let values: Vec<Vec<bf16>> = (0..heads)
        .map(|_| inputs::keys(&mut rng, prefill, D))
        .collect();
    let stores: Vec<HeadStore> = std::thread::scope(|scope| {
        let handles: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(h, k)| {
                scope.spawn(move || {
                    HeadStore::from_keys(
                        layout,
                        HeadId {
                            layer: 0,
                            kv_head: h,
                        },
                        k,
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("an encoding thread"))
            .collect::<Result<Vec<_>, _>>()
    })?;
    let mut reference = Reference {
        keys,
        values,
        stores,
    };
    // fathom's σ²: the uncalibrated stand-in of §3 at the start, fixed for the whole run.
    let sigma2: Vec<f32> = reference
        .stores
        .iter()
        .flat_map(|s| s.mean_square_scale().into_iter().map(|x| x as f32))
        .collect();
    eprintln!(
        "fathom-soak: reference ready after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let config = StoreConfig {
        segment_words: SEGMENT_WORDS,
        max_batch: 1,
        ..StoreConfig::new(model.clone(), Placement::Host, args.tokens)
    };
    let mut store = KeyStore::new(gpu.clone(), config)?;
    let id = store.create_sequence();
    {
        let k = gpu.upload(&bits(&reference.keys.concat()))?;
        let v = gpu.upload(&bits(&reference.values.concat()))?;
        store.prefill(id, 0, &k, &v)?;
    }
    let mut decoder = sigma2_decoder(gpu.clone(), model, sigma2.clone())?;
    let request = StepRequest::new(Method::Fathom { bits: args.bits }, args.k);
    let check = StepCheck {
        k: args.k,
        scale: 1.0 / (D as f64).sqrt(),
        rotated: false,
        max_relative_error: MAX_RELATIVE_ERROR,
        tensor_core_scan: false,
    };
    // The appended token, written in place on the stream before each append.
    let token_keys = gpu.filled::<u16>(heads * D, 0)?;
    let token_values = gpu.filled::<u16>(heads * D, 0)?;

    let mut samples: Vec<Sample> = Vec::new();
    let mut checks = Checks::default();
    let mut step_ms: Vec<f64> = Vec::with_capacity(args.steps);
    let loop_start = Instant::now();
    for step in 1..=args.steps {
        let t0 = Instant::now();
        let new_keys = inputs::keys(&mut rng, heads, D);
        let new_values = inputs::keys(&mut rng, heads, D);
        gpu.write(&token_keys, &bits(&new_keys))?;
        gpu.write(&token_values, &bits(&new_values))?;
        store.append(&[id], 0, &token_keys, &token_values)?;
        for h in 0..heads {
            let row = h * D..(h + 1) * D;
            reference.keys[h].extend(&new_keys[row.clone()]);
            reference.values[h].extend(&new_values[row.clone()]);
            reference.stores[h].append(&new_keys[row])?;
        }
        let queries = inputs::vectors(&mut rng, heads * group, D);
        let view = store.layer_view(&[id], 0)?;
        let out = decoder.step_host(&view, &queries, request)?;
        out.check()?;
        let checked = step % args.check_every == 0 || step == args.steps;
        let host = if checked { Some(out.download()?) } else { None };
        step_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        if let Some(host) = host {
            store.check()?;
            // The step's scan may be on the tensor cores (a record's entry at long contexts).
            let plan = decoder.launch_plan(&view, &request)?;
            check_against_reference(
                &host,
                &reference,
                &queries,
                &sigma2,
                group,
                &check.for_plan(&plan),
                args.bits,
                step,
                seed,
                &mut checks,
            );
        }
        if step == 1 || step % SAMPLE_EVERY == 0 || step == args.steps {
            let store_memory = store.memory();
            samples.push(Sample {
                step,
                device_free: gpu.memory()?.0,
                pinned: gpu.pinned_bytes(),
                store_device: store_memory.device_bytes,
                store_pinned: store_memory.pinned_bytes,
                workspace: decoder.workspace_bytes(),
            });
        }
        if step % 500 == 0 || step == args.steps {
            let last = samples.last().copied().expect("sampled at step 1");
            eprintln!(
                "step {step:>6}/{}  {:.2} ms/step  device free {} MiB  pinned {} MiB  \
                 workspace {} MiB  checks {}/{} ok  max rel. error {:.1e}",
                args.steps,
                loop_start.elapsed().as_secs_f64() * 1e3 / step as f64,
                last.device_free >> 20,
                last.pinned >> 20,
                last.workspace >> 20,
                checks.done - checks.failed,
                checks.done,
                checks.max_relative_error
            );
        }
    }
    store.check()?;

    // Memory: the store and the pinned bytes flat after the first step.
    let first = samples[0];
    let mut memory_failures = Vec::new();
    for s in &samples {
        if (s.pinned, s.store_device, s.store_pinned)
            != (first.pinned, first.store_device, first.store_pinned)
        {
            memory_failures.push(format!(
                "step {}: pinned {} / store device {} / store pinned {} bytes, at step {} {} / \
                 {} / {}",
                s.step,
                s.pinned,
                s.store_device,
                s.store_pinned,
                first.step,
                first.pinned,
                first.store_device,
                first.store_pinned
            ));
        }
    }
    // The device's free memory between workspace growths: a stretch of samples with the same
    // workspace must hold it (allocation rounding makes a growth itself inexact). Under
    // compute-sanitizer it counts the tool's own allocations: reported, not checked.
    let device_free_checked = !fathom_tests::under_sanitizer();
    let mut stretch = first;
    let mut unexplained_drift = 0i64;
    for s in &samples {
        if s.workspace != stretch.workspace {
            stretch = *s;
            continue;
        }
        let drift = stretch.device_free as i64 - s.device_free as i64;
        if drift.abs() > unexplained_drift.abs() {
            unexplained_drift = drift;
        }
        if device_free_checked && drift.abs() > DEVICE_SLACK {
            memory_failures.push(format!(
                "step {}: device memory in use grew {drift} bytes since step {}, with the same \
                 workspace",
                s.step, stretch.step
            ));
        }
    }
    let passed = checks.failed == 0 && checks.done > 0 && memory_failures.is_empty();
    let mut sorted = step_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let pct = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize];
    let (free_min, free_max) = range(&samples, |s| s.device_free);
    let (pinned_min, pinned_max) = range(&samples, |s| s.pinned);
    let (ws_min, ws_max) = range(&samples, |s| s.workspace);
    let summary = json!({
        "tool": "fathom-soak",
        "gpu": info.name,
        "compute_capability": info.compute_capability_text(),
        "arch": info.arch(),
        "driver_cuda": info.driver_cuda(),
        "nvrtc": format!("{major}.{minor}"),
        "commit": commit,
        "seed": seed,
        "model": "qwen3-8b, one layer (8 KV heads, G = 4, D = 128)",
        "placement": "host",
        "method": format!("fathom({})", args.bits),
        "k": args.k,
        "tokens_start": prefill,
        "tokens_end": args.tokens,
        "steps": args.steps,
        "checks": {
            "every": args.check_every,
            "done": checks.done,
            "failed": checks.failed,
            "heads_per_check": heads * group,
            "max_attention_relative_error": checks.max_relative_error,
            "tolerance": MAX_RELATIVE_ERROR,
            "selections_differing_by_ties": checks.tied_selections,
            "first_failures": checks.first_failures,
        },
        "memory": {
            "samples": samples.len(),
            "sample_every_steps": SAMPLE_EVERY,
            "device_free_min": free_min,
            "device_free_max": free_max,
            "device_free_drift_bytes": free_max - free_min,
            "device_drift_at_constant_workspace_bytes": unexplained_drift,
            "device_free_checked": device_free_checked,
            "workspace_min": ws_min,
            "workspace_max": ws_max,
            "pinned_min": pinned_min,
            "pinned_max": pinned_max,
            "store_device_bytes": first.store_device,
            "store_pinned_bytes": first.store_pinned,
            "failures": memory_failures,
        },
        "step_ms": {
            "mean": step_ms.iter().sum::<f64>() / step_ms.len() as f64,
            "p50": pct(0.5),
            "p99": pct(0.99),
            "max": pct(1.0),
        },
        "wall_s": started.elapsed().as_secs_f64(),
        "passed": passed,
    });
    let text = serde_json::to_string_pretty(&summary)?;
    println!("{text}");
    if let Some(path) = &args.out {
        std::fs::write(path, text + "\n")
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        eprintln!("fathom-soak: summary in {}", path.display());
    }
    for failure in checks.first_failures.iter().chain(&memory_failures) {
        eprintln!("fathom-soak: FAILED: {failure}");
    }
    eprintln!(
        "fathom-soak: {} in {:.1} s",
        if passed { "passed" } else { "FAILED" },
        started.elapsed().as_secs_f64()
    );
    Ok(passed)
}

/// Checks one step's results against the reference step of every KV head.
#[allow(clippy::too_many_arguments)]
fn check_against_reference(
    got: &HostStepOutput,
    reference: &Reference,
    queries: &[f32],
    sigma2: &[f32],
    group: usize,
    check: &StepCheck,
    bits: f64,
    step: usize,
    seed: u64,
    checks: &mut Checks,
) {
    let heads = reference.stores.len();
    let groups: Vec<GroupData<'_>> = (0..heads)
        .map(|h| GroupData {
            store: &reference.stores[h],
            keys: &reference.keys[h],
            values: &reference.values[h],
            queries: inputs::group_queries(queries, h, group, D),
            klt: None,
            sigma2: sigma2[h * D..(h + 1) * D]
                .iter()
                .map(|&x| f64::from(x))
                .collect(),
            double_sparsity: None,
        })
        .collect();
    let method = Method::Fathom { bits };
    let want = reference_steps(&groups, &[method], check);
    let mut m = Mismatches::new(format!("step {step}"), seed);
    check_step(check, method, got, &groups, &want[0], &mut m);
    for (h, reference_step) in want[0].iter().enumerate() {
        for g in 0..group {
            let same: bool = got
                .selected(0, h, g)
                .iter()
                .map(|&t| t as usize)
                .eq(reference_step.selection.heads[g].iter().copied());
            if same {
                let error = relative_error(got.output(0, h, g), &reference_step.outputs[g]);
                checks.max_relative_error = checks.max_relative_error.max(error);
            } else {
                checks.tied_selections += 1;
            }
        }
    }
    checks.done += 1;
    if m.count() > 0 {
        checks.failed += 1;
        if checks.first_failures.len() < 5 {
            checks.first_failures.extend(m.report());
        }
    }
}
