//! Fresh random inputs of the benches after the scan, made on the host once per shape and
//! context and shared by the subjects that read them: the scores a selection is made from and
//! its reference selection (select, attention, fetch), the bf16 K/V rows (attention, oracle,
//! landmark, fetch) and the raw queries.

use std::sync::Arc;

use half::bf16;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reference::select::Selection;

/// `per` items made by `make(index, seed)` on as many threads as there are items.
fn in_parallel<T: Send>(per: usize, make: impl Fn(usize) -> T + Sync) -> Result<Vec<T>, String> {
    std::thread::scope(|scope| {
        let make = &make;
        let workers: Vec<_> = (0..per).map(|i| scope.spawn(move || make(i))).collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .map_err(|_| "making the inputs panicked".to_string())
            })
            .collect()
    })
}

/// `n` bf16 rows of `d` channels from random bits: random sign and mantissa, magnitudes in
/// [1/16, 1) (exponents 123..=126), so every value is finite and dot products stay moderate.
fn random_rows(seed: u64, n: usize, d: usize) -> Vec<bf16> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(n * d);
    while out.len() < n * d {
        let mut word = rng.next_u64();
        for _ in 0..4 {
            let r = word as u16;
            word >>= 16;
            let bits = (r & 0x8000) | ((123 + ((r >> 7) & 3)) << 7) | (r & 0x7f);
            out.push(bf16::from_bits(bits));
        }
    }
    out.truncate(n * d);
    out
}

/// The K and V rows of every KV head of one layer, token-major `[n][D]` each.
pub struct HostRows {
    pub head_dim: usize,
    pub tokens: usize,
    pub keys: Vec<Vec<bf16>>,
    pub values: Vec<Vec<bf16>>,
}

impl HostRows {
    /// Rows of `heads` KV heads of `tokens` tokens, made on all cores.
    pub fn new(head_dim: usize, heads: usize, tokens: usize) -> Result<Self, String> {
        let mut both = in_parallel(2 * heads, |i| {
            random_rows(0x4b56 + i as u64, tokens, head_dim)
        })?;
        let values = both.split_off(heads);
        Ok(HostRows {
            head_dim,
            tokens,
            keys: both,
            values,
        })
    }

    /// KV heads.
    pub fn heads(&self) -> usize {
        self.keys.len()
    }
}

/// Raw queries `[H][G][D]` in [-1, 1), the same for every context of a shape.
pub fn queries(head_dim: usize, group: usize, heads: usize) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(0x9e12 ^ (head_dim * 64 + group) as u64);
    (0..heads * group * head_dim)
        .map(|_| rng.gen_range(-1.0f32..1.0))
        .collect()
}

/// The query of query head `g` of KV head `h`, widened.
pub fn query(queries: &[f32], h: usize, g: usize, group: usize, d: usize) -> Vec<f64> {
    let qh = h * group + g;
    queries[qh * d..(qh + 1) * d]
        .iter()
        .map(|&x| f64::from(x))
        .collect()
}

/// Scores of every query head and the reference selection made from them.
pub struct HostScores {
    pub group: usize,
    pub tokens: usize,
    /// The run-time k selected with.
    pub k: usize,
    /// `[H*G]` rows of `tokens` scores.
    pub scores: Vec<Vec<f32>>,
    /// Per KV head, the reference selection of its `G` query heads.
    pub selections: Vec<Selection>,
}

/// One approximately normal score (the sum of four uniforms), as the scan's sums of many
/// channel terms are; finite and NaN-free, as the select kernels require.
fn score(rng: &mut ChaCha8Rng) -> f32 {
    let sum: f32 = (0..4).map(|_| rng.gen_range(-1.0f32..1.0)).sum();
    sum * 4.0
}

impl HostScores {
    /// Fresh scores of `heads × group` query heads over `tokens` tokens and their reference
    /// selection of `k` (`reference::select`), made on all cores.
    pub fn new(group: usize, heads: usize, tokens: usize, k: usize) -> Result<Self, String> {
        let scores = in_parallel(heads * group, |qh| {
            let mut rng = ChaCha8Rng::seed_from_u64(0x5e1 ^ ((qh as u64) << 32) ^ tokens as u64);
            (0..tokens).map(|_| score(&mut rng)).collect::<Vec<f32>>()
        })?;
        let selections = in_parallel(heads, |h| {
            let wide: Vec<Vec<f64>> = scores[h * group..(h + 1) * group]
                .iter()
                .map(|row| row.iter().map(|&s| f64::from(s)).collect())
                .collect();
            Selection::from_scores(&wide, k)
        })?;
        Ok(HostScores {
            group,
            tokens,
            k,
            scores,
            selections,
        })
    }

    /// KV heads.
    pub fn heads(&self) -> usize {
        self.selections.len()
    }

    /// `UC = G*k + 36`, the union capacity per KV head.
    pub fn union_capacity(&self) -> usize {
        self.group * self.k + runtime::step::launches::ALWAYS
    }

    /// `SC = k + 36`, the selection capacity per query head.
    pub fn selection_capacity(&self) -> usize {
        self.k + runtime::step::launches::ALWAYS
    }

    /// `uni` `[H][UC]` and `uni_count` `[H]` as the select kernels lay them out (unused slots
    /// `-1`).
    pub fn unions(&self) -> (Vec<i32>, Vec<i32>) {
        let uc = self.union_capacity();
        let mut uni = vec![-1i32; self.heads() * uc];
        let mut count = Vec::with_capacity(self.heads());
        for (h, s) in self.selections.iter().enumerate() {
            for (u, &t) in s.union.iter().enumerate() {
                uni[h * uc + u] = t as i32;
            }
            count.push(s.union.len() as i32);
        }
        (uni, count)
    }

    /// `sel_pos` `[H*G][SC]` and `sel_count` `[H*G]` as the select kernels lay them out.
    pub fn positions(&self) -> (Vec<i32>, Vec<i32>) {
        let sc = self.selection_capacity();
        let g = self.group;
        let mut pos = vec![-1i32; self.heads() * g * sc];
        let mut count = Vec::with_capacity(self.heads() * g);
        for (h, s) in self.selections.iter().enumerate() {
            for (gi, rows) in s.rows.iter().enumerate() {
                let qh = h * g + gi;
                for (j, &r) in rows.iter().enumerate() {
                    pos[qh * sc + j] = r as i32;
                }
                count.push(rows.len() as i32);
            }
        }
        (pos, count)
    }
}

/// The inputs of the latest shape and context, kept while consecutive cases share them.
#[derive(Default)]
pub struct Inputs {
    rows: Option<Arc<HostRows>>,
    scores: Option<Arc<HostScores>>,
}

impl Inputs {
    /// The K/V rows of `(d, heads, tokens)`, made when the last ones were of another shape.
    pub fn rows(&mut self, d: usize, heads: usize, tokens: usize) -> Result<Arc<HostRows>, String> {
        match &self.rows {
            Some(r) if (r.head_dim, r.heads(), r.tokens) == (d, heads, tokens) => Ok(r.clone()),
            _ => {
                // Free the previous rows before making these.
                self.rows = None;
                let rows = Arc::new(HostRows::new(d, heads, tokens)?);
                self.rows = Some(rows.clone());
                Ok(rows)
            }
        }
    }

    /// The scores and selection of `(g, heads, tokens, k)`, made when the last ones differ.
    pub fn scores(
        &mut self,
        g: usize,
        heads: usize,
        tokens: usize,
        k: usize,
    ) -> Result<Arc<HostScores>, String> {
        match &self.scores {
            Some(s) if (s.group, s.heads(), s.tokens, s.k) == (g, heads, tokens, k) => {
                Ok(s.clone())
            }
            _ => {
                self.scores = None;
                let scores = Arc::new(HostScores::new(g, heads, tokens, k)?);
                self.scores = Some(scores.clone());
                Ok(scores)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::step::launches::ALWAYS;

    #[test]
    fn rows_are_finite_and_moderate_and_heads_differ() {
        let rows = HostRows::new(64, 2, 100).unwrap();
        for head in rows.keys.iter().chain(&rows.values) {
            assert_eq!(head.len(), 6400);
            assert!(head.iter().all(|x| {
                let a = x.to_f64().abs();
                (1.0 / 16.0..1.0).contains(&a)
            }));
        }
        assert_ne!(rows.keys[0], rows.keys[1]);
        assert_ne!(rows.keys[0], rows.values[0]);
    }

    #[test]
    fn layouts_follow_the_reference_selection() {
        let (g, heads, n, k) = (3, 2, 500, 20);
        let s = HostScores::new(g, heads, n, k).unwrap();
        assert_eq!(s.scores.len(), heads * g);
        let (uni, uni_count) = s.unions();
        let (pos, count) = s.positions();
        let (uc, sc) = (g * k + ALWAYS, k + ALWAYS);
        for h in 0..heads {
            let sel = &s.selections[h];
            assert_eq!(uni_count[h] as usize, sel.union.len());
            for gi in 0..g {
                let qh = h * g + gi;
                assert_eq!(count[qh] as usize, k + ALWAYS);
                for j in 0..count[qh] as usize {
                    let u = pos[qh * sc + j] as usize;
                    assert_eq!(uni[h * uc + u] as usize, sel.heads[gi][j]);
                }
            }
        }
    }
}
