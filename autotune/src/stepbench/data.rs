//! The synthetic layers (SPEC §11) every store slot holds, their calibration, and the queries
//! of a context: generated on the CPU, all cores, a KV head per job.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use codegen::model::ModelShape;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use reference::klt::Klt;
use reference::plans::{channel_variance, CalibrationError, DoubleSparsityCalibration};
use reference::select::SINK;
use reference::synthetic::{
    apply_rope, generate_head, rope_turn, SyntheticError, SyntheticHead, SyntheticSettings,
};
use thiserror::Error;

/// Why the data could not be made.
#[derive(Debug, Error)]
pub enum DataError {
    #[error("synthetic generator: {0}")]
    Synthetic(#[from] SyntheticError),
    #[error("calibration of slot {slot}, KV head {kv_head}: {source}")]
    Calibration {
        slot: usize,
        kv_head: usize,
        source: CalibrationError,
    },
    #[error("a generator thread panicked")]
    Panicked,
}

/// Calibration keys are taken from the first this many tokens (every context holds them).
pub const CALIBRATION_WINDOW: usize = 32 << 10;
/// Calibration key rows per KV head (strided over the window).
pub const CALIBRATION_KEYS: usize = 4096;
/// Calibration queries per query head.
pub const CALIBRATION_QUERIES: usize = 16;

/// How calibration is fitted, for the record.
pub const CALIBRATION_NOTE: &str = "per slot and KV head: sigma^2 (channel variance), the KLT \
basis and double_sparsity's channels fitted on 4096 keys strided over the first 32k tokens and \
16 fresh queries per query head drawn from the head's channel statistics (mu + sigma z) at \
positions spread over the second half of the longest context; the evaluated queries are not \
used";

/// The settings of slot `slot`: the preset's shape, `n` tokens, seed `seed + slot`, every
/// other setting at the generator's default.
pub fn settings(shape: &ModelShape, seed: u64, slot: usize, n: usize) -> SyntheticSettings {
    SyntheticSettings {
        seed: seed.wrapping_add(slot as u64),
        n,
        head_dim: shape.head_dim,
        kv_heads: shape.kv_heads,
        group: shape.group_size(),
        ..SyntheticSettings::default()
    }
}

/// Generates every KV head of every slot on `threads` threads; `done` is called after each
/// head. Returns `[slot][kv_head]`.
pub fn generate_slots(
    settings: &[SyntheticSettings],
    threads: usize,
    done: &(dyn Fn() + Sync),
) -> Result<Vec<Vec<SyntheticHead>>, DataError> {
    let jobs: Vec<(usize, usize)> = settings
        .iter()
        .enumerate()
        .flat_map(|(s, set)| (0..set.kv_heads).map(move |h| (s, h)))
        .collect();
    let results: Mutex<Vec<Option<Result<SyntheticHead, SyntheticError>>>> =
        Mutex::new((0..jobs.len()).map(|_| None).collect());
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1).min(jobs.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(s, h)) = jobs.get(i) else { break };
                let head = generate_head(&settings[s], h);
                if let Ok(mut r) = results.lock() {
                    r[i] = Some(head);
                }
                done();
            });
        }
    });
    let results = results.into_inner().map_err(|_| DataError::Panicked)?;
    let mut out: Vec<Vec<SyntheticHead>> = settings.iter().map(|_| Vec::new()).collect();
    for ((s, _), r) in jobs.iter().zip(results) {
        out[*s].push(r.ok_or(DataError::Panicked)??);
    }
    Ok(out)
}

/// `x` (at some position) turned by RoPE through `delta` positions (negative: back), rounded
/// to f32 as a kernel receives queries.
pub fn rope_shift(x: &[f64], delta: i64, base: f64) -> Vec<f64> {
    rope_turn(x, delta as f64, base)
        .into_iter()
        .map(|v| v as f32 as f64)
        .collect()
}

/// The queries of a head generated for `generated` tokens, moved to decode position `n` (the
/// end of a window of the first `n` tokens): `[g][D]`.
pub fn queries_at(head: &SyntheticHead, generated: usize, n: usize, base: f64) -> Vec<Vec<f64>> {
    queries_moved(&head.queries, generated, n, base)
}

/// `queries`, generated at position `generated`, moved to decode position `n`.
pub fn queries_moved(queries: &[Vec<f64>], generated: usize, n: usize, base: f64) -> Vec<Vec<f64>> {
    let delta = n as i64 - generated as i64;
    queries
        .iter()
        .map(|q| {
            if delta == 0 {
                q.clone()
            } else {
                rope_shift(q, delta, base)
            }
        })
        .collect()
}

/// The calibration of one KV head: raw-basis `σ²`, the KLT basis, double_sparsity's channels.
pub struct HeadCalibration {
    pub sigma2: Vec<f64>,
    pub klt: Klt,
    pub double_sparsity: DoubleSparsityCalibration,
}

/// Fits one head's calibration (see [`CALIBRATION_NOTE`]); `r` is double_sparsity's.
pub fn calibrate(
    head: &SyntheticHead,
    settings: &SyntheticSettings,
    slot: usize,
    kv_head: usize,
    r: usize,
) -> Result<HeadCalibration, DataError> {
    let err = |source| DataError::Calibration {
        slot,
        kv_head,
        source,
    };
    let d = settings.head_dim;
    let n = head.keys.len() / d;
    let window = n.min(CALIBRATION_WINDOW);
    let first = SINK.min(window);
    let stride = ((window - first) / CALIBRATION_KEYS).max(1);
    let keys: Vec<Vec<f64>> = (first..window)
        .step_by(stride)
        .map(|i| {
            head.keys[i * d..(i + 1) * d]
                .iter()
                .map(|x| x.to_f64())
                .collect()
        })
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(settings.seed ^ 0xca1b);
    rng.set_stream(kv_head as u64);
    let count = CALIBRATION_QUERIES * settings.group;
    let queries: Vec<Vec<f64>> = (0..count)
        .map(|i| {
            let pre: Vec<f64> = head
                .channel_means
                .iter()
                .zip(&head.channel_scales)
                .map(|(m, s)| {
                    let z: f64 = StandardNormal.sample(&mut rng);
                    m + s * z
                })
                .collect();
            let position = n / 2 + i * (n - n / 2) / count.max(1);
            apply_rope(&pre, position, settings.rope_base)
        })
        .collect();
    Ok(HeadCalibration {
        sigma2: channel_variance(&keys).map_err(err)?,
        klt: Klt::fit(&keys, &queries).map_err(err)?,
        double_sparsity: DoubleSparsityCalibration::fit(&queries, &keys, r).map_err(err)?,
    })
}
