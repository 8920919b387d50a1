//! Families of fp32 scores for the select tests (GPU and CPU): all NaN-free, as the kernels
//! require, and chosen so that every path of every select variant is taken somewhere.

use rand::seq::SliceRandom;
use rand::Rng;

use crate::select_kernels::ALWAYS;

/// The families of scores a head can get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scores {
    Uniform,
    SmallIntegers,
    Cluster,
    Constant,
    SignedZeros,
    Straddle,
    /// Standard normal: the threshold digit's bin is small.
    Gaussian,
    /// `1000 ± 1`: every token shares the top digit.
    Offset,
    /// A straddle whose ties outnumber `WIDE_TIES` tokens.
    WideTies,
    /// `k` copies of one value among the first 512 middle tokens, one token a single ulp above
    /// it in the last quarter, the rest below: the top-k holds the late token, which a
    /// running floor must not have raised past.
    NextAbove,
    /// Every middle token `-(1 + its place in a random order)`, the sink and the window 10:
    /// the largest peaks of 32-token halves are small integers far apart, so one peak raised
    /// by the sink moves the k-th largest even where it is known only to its first 22 bits.
    Ranks,
}

/// Ties of `Scores::WideTies`: more than the candidates of `k_max` = 1024 (8,192).
pub const WIDE_TIES: usize = 20_000;

/// The families every select case cycles through.
pub const FAMILIES: [Scores; 6] = [
    Scores::Uniform,
    Scores::SmallIntegers,
    Scores::Cluster,
    Scores::Constant,
    Scores::SignedZeros,
    Scores::Straddle,
];

fn signed_zero(rng: &mut impl Rng) -> f32 {
    if rng.gen() {
        0.0
    } else {
        -0.0
    }
}

/// The smallest float above `v` (finite, NaN-free `v`; -0.0 and +0.0 alike).
fn next_up(v: f32) -> f32 {
    if v == 0.0 {
        f32::from_bits(1)
    } else if v > 0.0 {
        f32::from_bits(v.to_bits() + 1)
    } else {
        f32::from_bits(v.to_bits() - 1)
    }
}

/// `n` scores of `family` for a top-`k` selection.
pub fn scores(rng: &mut impl Rng, family: Scores, n: usize, k: usize) -> Vec<f32> {
    match family {
        Scores::Uniform => (0..n).map(|_| rng.gen_range(-10.0f32..10.0)).collect(),
        Scores::SmallIntegers => (0..n)
            .map(|_| match rng.gen_range(-4i32..=4) {
                0 => signed_zero(rng),
                v => v as f32,
            })
            .collect(),
        Scores::Cluster => (0..n)
            .map(|_| f32::from_bits(0x3f80_0000 + rng.gen_range(0..2048u32)))
            .collect(),
        Scores::Constant => {
            let v = rng.gen_range(-3.0f32..3.0);
            vec![v; n]
        }
        Scores::SignedZeros => (0..n)
            .map(|_| match rng.gen_range(0..50) {
                0 => rng.gen_range(0.5f32..2.0),
                1 => -rng.gen_range(0.5f32..2.0),
                _ => signed_zero(rng),
            })
            .collect(),
        Scores::Gaussian => (0..n)
            .map(|_| {
                // Box-Muller.
                let (u, v): (f64, f64) = (rng.gen_range(f64::MIN_POSITIVE..1.0), rng.gen());
                ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
            })
            .collect(),
        Scores::Offset => (0..n)
            .map(|_| 1000.0 + rng.gen_range(-1.0f32..1.0))
            .collect(),
        Scores::NextAbove => {
            let v = rng.gen_range(-1.0f32..1.0);
            let mut s: Vec<f32> = (0..n).map(|_| v - rng.gen_range(0.001f32..5.0)).collect();
            let middle = n.saturating_sub(ALWAYS);
            if middle < 4 * k.max(1) || k == 0 {
                return s;
            }
            let early: Vec<usize> = (4..4 + middle.min(512)).collect();
            for &i in early.choose_multiple(rng, k.min(early.len())) {
                s[i] = v;
            }
            let late = rng.gen_range(4 + middle - middle / 4..4 + middle);
            s[late] = next_up(v);
            s
        }
        Scores::Ranks => {
            let mut places: Vec<usize> = (0..n.saturating_sub(ALWAYS)).collect();
            places.shuffle(rng);
            let mut s = vec![10.0f32; n];
            for (i, place) in places.into_iter().enumerate() {
                s[4 + i] = -(1.0 + place as f32);
            }
            s
        }
        Scores::Straddle | Scores::WideTies => {
            // Below the tie value everywhere, then `above` larger scores and a block of ties
            // that holds the k-th largest of the middle, placed at random.
            let tie = rng.gen_range(-1.0f32..1.0);
            let mut s: Vec<f32> = (0..n).map(|_| tie - rng.gen_range(0.001f32..5.0)).collect();
            let middle = n.saturating_sub(ALWAYS);
            if middle == 0 {
                return s;
            }
            // Fewer than k above, so that the ties hold the k-th largest (with k above it
            // would be one of them, and the ties would not matter).
            let above = match k.min(middle) {
                0 => 0,
                most => rng.gen_range(0..most),
            };
            let extra = match family {
                Scores::WideTies => WIDE_TIES + rng.gen_range(1..2000),
                _ => rng.gen_range(1..2000),
            };
            let tied = (k - above.min(k) + extra).min(middle - above);
            let mut slots: Vec<usize> = (4..4 + middle).collect();
            slots.shuffle(rng);
            for &i in &slots[..above] {
                s[i] = tie + rng.gen_range(0.001f32..5.0);
            }
            for &i in &slots[above..above + tied] {
                s[i] = tie;
            }
            // The sink and the window score above everything: they must not take top-k places.
            for i in (0..4.min(n)).chain(n - 32.min(n)..n) {
                s[i] = tie + 10.0;
            }
            s
        }
    }
}
