//! CPU benchmark of kernel rendering (Tera, no NVRTC): every kernel of the qwen3-8b default set,
//! and one scan spec alone. Runs on any machine.

use std::hint::black_box;

use codegen::model::preset;
use codegen::spec::{KernelSpec, Placement, ScanSpec};
use codegen::{kernels_for, render_any, KernelSetOptions};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};

/// The preset whose default set is rendered.
const MODEL: &str = "qwen3-8b";

fn render(c: &mut Criterion) {
    let shape = preset(MODEL).expect("the qwen3-8b preset exists");
    let options = KernelSetOptions::default();
    let set = kernels_for(&shape, &options);
    let scan: KernelSpec = ScanSpec {
        block: options.block,
        segment_words: options.segment_words,
        ..ScanSpec::new(shape.head_dim, shape.group_size(), Placement::Hbm)
    }
    .into();

    let mut bench = c.benchmark_group("render");
    // A whole set takes a tenth of a second: flat sampling keeps a short run within its time.
    bench.sampling_mode(SamplingMode::Flat).sample_size(20);
    // One element is one kernel's CUDA C source.
    bench.throughput(Throughput::Elements(set.len() as u64));
    bench.bench_function(format!("{MODEL}/default_set"), |b| {
        b.iter(|| {
            for spec in &set {
                black_box(render_any(black_box(spec)).expect("default specs render"));
            }
        })
    });
    bench.throughput(Throughput::Elements(1));
    bench.bench_function(format!("{MODEL}/scan_hbm"), |b| {
        b.iter(|| black_box(render_any(black_box(&scan)).expect("scan spec renders")))
    });
    bench.finish();
}

criterion_group!(benches, render);
criterion_main!(benches);
