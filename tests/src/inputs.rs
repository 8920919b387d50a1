//! Fresh random inputs, and the queries as the reference reads them. Each test run draws a new
//! seed (printed, so a failure can be replayed with `FATHOM_TEST_SEED`).

use half::bf16;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reference::store::{HeadId, HeadStore, StoreLayout};

/// A generator seeded from `FATHOM_TEST_SEED`, or from the clock; the seed is printed.
pub fn rng(test: &str) -> ChaCha8Rng {
    rng_and_seed(test).0
}

/// [`rng`] and its seed, for failure messages that name the seed.
pub fn rng_and_seed(test: &str) -> (ChaCha8Rng, u64) {
    let seed = std::env::var("FATHOM_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
        });
    eprintln!("{test}: FATHOM_TEST_SEED={seed}");
    (ChaCha8Rng::seed_from_u64(seed), seed)
}

/// `n` keys of `d` channels, token-major bf16, with per-channel scales spread over two orders of
/// magnitude and a few exactly-zero channels, so that plans differ between channels.
pub fn keys(rng: &mut impl Rng, n: usize, d: usize) -> Vec<bf16> {
    let scales: Vec<f32> = (0..d)
        .map(|c| {
            if c % 37 == 5 {
                0.0
            } else {
                10f32.powf(rng.gen_range(-1.0..1.0))
            }
        })
        .collect();
    (0..n * d)
        .map(|i| bf16::from_f32(scales[i % d] * rng.gen_range(-1.0f32..1.0)))
        .collect()
}

/// Correlated calibration rows of `d` channels: a few shared factors plus noise, so that the
/// KLT is far from the identity.
pub fn calibration_rows(rng: &mut impl Rng, rows: usize, d: usize) -> Vec<Vec<f64>> {
    let mixing: Vec<f64> = (0..d * 4).map(|_| rng.gen_range(-1.0..1.0)).collect();
    (0..rows)
        .map(|_| {
            let z: Vec<f64> = (0..4).map(|_| rng.gen_range(-1.0..1.0)).collect();
            (0..d)
                .map(|c| {
                    let shared: f64 = (0..4).map(|k| mixing[c * 4 + k] * z[k]).sum();
                    shared + 0.1 * rng.gen_range(-1.0..1.0)
                })
                .collect()
        })
        .collect()
}

/// `rows` fp32 vectors of `d` values in [-1, 1).
pub fn vectors(rng: &mut impl Rng, rows: usize, d: usize) -> Vec<f32> {
    (0..rows * d).map(|_| rng.gen_range(-1.0f32..1.0)).collect()
}

/// `n` bf16 values of `d` channels in [-1, 1), token-major.
pub fn values(rng: &mut impl Rng, n: usize, d: usize) -> Vec<bf16> {
    (0..n * d)
        .map(|_| bf16::from_f32(rng.gen_range(-1.0f32..1.0)))
        .collect()
}

/// The `group` queries `[G][D]` of KV head `bh` (`b·H + h`) of a `[B][H][G][D]` array, widened
/// to f64 as the reference reads them.
pub fn group_queries(queries: &[f32], bh: usize, group: usize, d: usize) -> Vec<Vec<f64>> {
    (0..group)
        .map(|g| {
            queries[(bh * group + g) * d..(bh * group + g + 1) * d]
                .iter()
                .map(|&x| f64::from(x))
                .collect()
        })
        .collect()
}

/// Reference stores of layer 0 of `n_stored[b]` random [`keys`] for every `(b, h)` of `heads`
/// KV heads, `[b][h]`.
pub fn head_stores(
    rng: &mut impl Rng,
    layout: StoreLayout,
    n_stored: &[usize],
    heads: usize,
) -> Vec<Vec<HeadStore>> {
    n_stored
        .iter()
        .map(|&n| {
            (0..heads)
                .map(|h| {
                    let id = HeadId {
                        layer: 0,
                        kv_head: h,
                    };
                    let keys = keys(rng, n, layout.head_dim());
                    HeadStore::from_keys(layout, id, &keys).expect("random keys encode")
                })
                .collect()
        })
        .collect()
}
