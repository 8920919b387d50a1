//! The GPU test kit: what every GPU test starts from, so that a test states only what it checks.
//!
//! ```text
//! use fathom_tests::gpu_test;
//!
//! gpu_test!(gpu_encode_one_block, |t| {
//!     for blk in BLOCKS {
//!         bulk_case(&t.gpu, &mut t.rng, t.seed, 128, blk, false);
//!     }
//! });
//! ```
//!
//! [`gpu_test!`](crate::gpu_test) writes the test function of that name with `#[test]` and
//! `#[ignore = "needs a CUDA GPU"]` (the packer and `scripts/test.sh -- --ignored` pick GPU tests
//! by that attribute, and logs and scripts filter by the name), and hands the body a [`GpuTest`]:
//! the device, opened before anything else so that the test fails, never passes, without one,
//! and a generator seeded and named after the test.

use std::sync::Arc;

use rand_chacha::ChaCha8Rng;
use runtime::gpu::Gpu;

use crate::inputs;

/// What a GPU test is handed (its fields are public so that a body borrows them apart:
/// `case(&t.gpu, &mut t.rng, t.seed)`).
pub struct GpuTest {
    /// The test function's name: its seed line says it, and failure messages may.
    pub name: &'static str,
    /// Device 0, on a stream of its own.
    pub gpu: Arc<Gpu>,
    /// Seeded from `FATHOM_TEST_SEED` or the clock ([`inputs::rng_and_seed`]).
    pub rng: ChaCha8Rng,
    /// The seed of `rng`, which every failure message names so that it can be replayed.
    pub seed: u64,
}

impl GpuTest {
    /// Opens the GPU (panicking without one) and seeds the generator, printing the seed under
    /// `name`.
    pub fn new(name: &'static str) -> GpuTest {
        let gpu = Arc::new(crate::gpu());
        let (rng, seed) = inputs::rng_and_seed(name);
        GpuTest {
            name,
            gpu,
            rng,
            seed,
        }
    }
}

/// A GPU test: `gpu_test!(name, |t| body)` is the test `name`, ignored unless GPU tests are
/// asked for, whose body gets `t`, a [`GpuTest`](crate::kit::GpuTest) named `name`. The
/// closure-like form keeps the body an expression, which rustfmt formats.
#[macro_export]
macro_rules! gpu_test {
    ($name:ident, |$t:ident| $body:expr $(,)?) => {
        #[test]
        #[ignore = "needs a CUDA GPU"]
        fn $name() {
            #[allow(unused_mut)]
            let mut $t = $crate::kit::GpuTest::new(stringify!($name));
            $body
        }
    };
}
