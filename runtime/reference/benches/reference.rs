//! CPU benchmarks of the f64 reference: the §3 water-filling planner over every KV head of one
//! qwen3-8b layer, `sparq(32)` for comparison, and the §2 encoder on one head of 32k tokens.
//!
//! Inputs are the §11 synthetic keys and queries, with σ² from each head's store
//! (`mean_square_scale`, the uncalibrated stand-in of §3), so the planner sees the spread of
//! importances it meets in a real layer rather than uniform noise.

use std::hint::black_box;

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use half::bf16;
use reference::model::{preset, ModelShape};
use reference::planner::water_fill;
use reference::plans::{depth_plan, Method, PlanContext};
use reference::store::{BlockSize, HeadId, HeadStore, StoreLayout};
use reference::synthetic::{generate_head, SyntheticSettings};

/// The model whose layer shape every benchmark uses.
const MODEL: &str = "qwen3-8b";
/// Budgets (bits per token per KV head) of the benchmark protocol.
const BUDGETS: [f64; 2] = [48.0, 92.0];
/// Tokens the σ² of each head is estimated from: enough blocks for a stable mean.
const SIGMA_TOKENS: usize = 4096;
/// Tokens of the encoder benchmark: one segment of the default store (S = 512 words).
const ENCODE_TOKENS: usize = 32_768;

fn shape() -> ModelShape {
    preset(MODEL).expect("the qwen3-8b preset exists")
}

/// The store layout of the default kernel set, so the encoder fills whole segments as in serving.
fn layout(shape: &ModelShape) -> StoreLayout {
    let options = codegen::KernelSetOptions::default();
    let block = BlockSize::from_tokens(options.block).expect("default block size is valid");
    StoreLayout::new(shape.head_dim, block, options.segment_words).expect("default layout is valid")
}

fn settings(shape: &ModelShape, n: usize) -> SyntheticSettings {
    SyntheticSettings {
        n,
        head_dim: shape.head_dim,
        kv_heads: shape.kv_heads,
        group: shape.group_size(),
        ..SyntheticSettings::default()
    }
}

/// One query group: the `G` queries of a KV head and its channel variances.
struct Group {
    queries: Vec<Vec<f64>>,
    sigma2: Vec<f64>,
}

/// Every query group of one layer.
fn layer_groups(shape: &ModelShape, layout: StoreLayout) -> Vec<Group> {
    let settings = settings(shape, SIGMA_TOKENS);
    (0..shape.kv_heads)
        .map(|kv_head| {
            let head = generate_head(&settings, kv_head).expect("valid synthetic settings");
            let id = HeadId { layer: 0, kv_head };
            let store = HeadStore::from_keys(layout, id, &head.keys).expect("finite keys");
            Group {
                queries: head.queries,
                sigma2: store.mean_square_scale(),
            }
        })
        .collect()
}

fn planner(c: &mut Criterion) {
    let shape = shape();
    let layout = layout(&shape);
    let block = layout.block();
    let groups = layer_groups(&shape, layout);

    let mut bench = c.benchmark_group("planner/layer");
    // One element is one query group (a KV head's G queries): a layer plans H_kv of them.
    bench.throughput(Throughput::Elements(groups.len() as u64));
    for budget in BUDGETS {
        bench.bench_with_input(
            BenchmarkId::new("water_fill", budget),
            &budget,
            |b, &budget| {
                b.iter(|| {
                    for g in &groups {
                        let plan = water_fill(&g.queries, &g.sigma2, black_box(budget), block)
                            .expect("valid plan input");
                        black_box(plan);
                    }
                })
            },
        );
    }
    let method = Method::Sparq { r: 32 };
    bench.bench_function(BenchmarkId::new("depth_plan", method), |b| {
        b.iter(|| {
            for g in &groups {
                let ctx = PlanContext {
                    queries: &g.queries,
                    sigma2: &g.sigma2,
                    block,
                    basis: shape.basis,
                    double_sparsity: None,
                };
                black_box(depth_plan(black_box(method), &ctx).expect("valid plan input"));
            }
        })
    });
    bench.finish();
}

fn encoder(c: &mut Criterion) {
    let shape = shape();
    let layout = layout(&shape);
    let head = generate_head(&settings(&shape, ENCODE_TOKENS), 0).expect("valid settings");
    let keys: &[bf16] = &head.keys;
    let d = shape.head_dim;
    let id = HeadId::default();

    let mut bench = c.benchmark_group("encoder/head");
    bench.throughput(Throughput::Elements(ENCODE_TOKENS as u64));
    // Tens of milliseconds per iteration: flat sampling keeps a short run within its time.
    bench.sampling_mode(SamplingMode::Flat).sample_size(20);
    // The bulk path: a prefill's keys encoded at once.
    bench.bench_function(BenchmarkId::new("from_keys", ENCODE_TOKENS), |b| {
        b.iter(|| black_box(HeadStore::from_keys(layout, id, black_box(keys)).expect("finite")))
    });
    // The decode path: one token per step, a block encoded whenever the tail fills.
    bench.bench_function(BenchmarkId::new("append_per_token", ENCODE_TOKENS), |b| {
        b.iter(|| {
            let mut store = HeadStore::new(layout, id);
            for token in keys.chunks_exact(d) {
                store.append(black_box(token)).expect("finite");
            }
            black_box(store)
        })
    });
    bench.finish();
}

criterion_group!(benches, planner, encoder);
criterion_main!(benches);
