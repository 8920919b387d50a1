//! One layer of qwen3-8b's shape: a key store filled with synthetic keys, then a `fathom(48)`
//! step and a dense step. `cargo run --release -p fathom-runtime --example quickstart`
use std::{process::ExitCode, sync::Arc};

use codegen::{model::preset, spec::Placement};
use reference::store::{BlockSize, HeadId, HeadStore, StoreLayout};
use reference::synthetic::{generate, SyntheticSettings};
use runtime::gpu::Gpu;
use runtime::step::{Calibration, Decoder, DecoderConfig, Method, StepRequest};
use runtime::store::{KeyStore, StoreConfig};

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = Arc::new(Gpu::open(0)?);
    let mut model = preset("qwen3-8b")?; // 8 KV heads, G = 4, D = 128
    model.layers = 1;
    // Keys, values and queries with the structure of real ones; the defaults have the same
    // KV heads, G and D.
    let n = 32_768;
    let kv = generate(&SyntheticSettings {
        n,
        ..Default::default()
    })?;
    let bits = |x: &[half::bf16]| x.iter().map(|v| v.to_bits()).collect::<Vec<u16>>();
    let keys: Vec<u16> = kv.heads.iter().flat_map(|h| bits(&h.keys)).collect(); // [H][n][D]
    let values: Vec<u16> = kv.heads.iter().flat_map(|h| bits(&h.values)).collect();

    let config = StoreConfig::new(model.clone(), Placement::Hbm, 1 << 20);
    let mut store = KeyStore::new(gpu.clone(), config)?;
    let seq = store.create_sequence();
    store.prefill(seq, 0, &gpu.upload(&keys)?, &gpu.upload(&values)?)?;

    // fathom plans with σ² per channel; uncalibrated, each head's mean square block scale.
    let layout = StoreLayout::new(model.head_dim, BlockSize::B64, 512)?;
    let mut sigma2 = Vec::new();
    for (kv_head, h) in kv.heads.iter().enumerate() {
        let head = HeadStore::from_keys(layout, HeadId { layer: 0, kv_head }, &h.keys)?;
        sigma2.extend(head.mean_square_scale().iter().map(|&s| s as f32));
    }
    let calibration = Calibration::new(1, model.kv_heads, model.head_dim).with_sigma2(sigma2)?;
    let decoder = Decoder::new(gpu, model, DecoderConfig::default())?;
    let mut decoder = decoder.with_calibration(calibration)?;

    let queries: Vec<f32> = kv.queries().concat().iter().map(|&q| q as f32).collect();
    let view = store.layer_view(&[seq], 0)?;
    let fathom = StepRequest::new(Method::Fathom { bits: 48.0 }, 256);
    let sparse = decoder.step_host(&view, &queries, fathom)?.download()?;
    let dense = StepRequest::new(Method::Dense, 0);
    let dense = decoder.step_host(&view, &queries, dense)?.download()?;

    let picked = sparse.selected(0, 0, 0); // sequence 0, KV head 0, query head 0
    println!("query head 0 picked {} of {n} tokens:", picked.len());
    println!("  {:?} ...", &picked[..16]);
    println!("  needles at {:?}", kv.heads[0].needles);
    let (mut diff, mut norm) = (0.0, 0.0);
    for (a, b) in sparse.out.iter().zip(&dense.out) {
        (diff, norm) = (diff + (a - b) * (a - b), norm + b * b);
    }
    let error = (diff / norm).sqrt();
    println!("fathom(48) vs dense attention: relative error {error:.1e}");
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart: {e}");
            ExitCode::FAILURE
        }
    }
}
