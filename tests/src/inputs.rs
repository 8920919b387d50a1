//! Fresh random inputs. Each test run draws a new seed (printed, so a failure can be replayed
//! with `FATHOM_TEST_SEED`).

use half::bf16;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A generator seeded from `FATHOM_TEST_SEED`, or from the clock; the seed is printed.
pub fn rng(test: &str) -> ChaCha8Rng {
    seeded_rng(test).0
}

/// [`rng`] and its seed, for failure messages that must name it.
pub fn seeded_rng(test: &str) -> (ChaCha8Rng, u64) {
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

/// `rows` fp32 vectors of `d` values in [-1, 1).
pub fn vectors(rng: &mut impl Rng, rows: usize, d: usize) -> Vec<f32> {
    (0..rows * d).map(|_| rng.gen_range(-1.0f32..1.0)).collect()
}
