//! SPEC §12: ParisKV retrieval, exact, as the second method over the same step pipeline.
//!
//! ParisKV ranks keys by a coarse-to-fine search over a data-independent index: every key is
//! normalised, rotated by a randomised Hadamard transform and split into `B = D/8` subspaces of
//! `m = 8` coordinates; each subspace stores the id of its nearest analytic centroid (a sign
//! pattern), a 4-bit direction code per coordinate and one bf16 weight. A query votes for keys
//! through per-subspace centroid tiers, the best-voted candidates are reranked with the 4-bit
//! estimator, and the top `k` join the sink and local window of §6.
//!
//! A head dimension that is not a power of two (80, 96, 192) is zero-padded to the next one,
//! `D_pad` ([`padded_dim`]), before the transform (§12): keys and queries keep their `D`
//! channels, and the rotation, the `B = D_pad/8` subspaces and the codes are those of `D_pad`
//! (the transform is orthonormal at `1/sqrt(D_pad)`, so `ŝ` still estimates `q̄·k`).
//!
//! Choices the spec leaves open, fixed here (the GPU kernels must match them):
//!
//! - **Sign vector** `s`: channel `c` is `-1` when the `c`-th `next_u32()` of
//!   `ChaCha8Rng::seed_from_u64(`[`SIGN_SEED`]`)` is odd, `+1` otherwise ([`signs`]). The same
//!   stream serves every layer and head, and `signs(64)` is a prefix of `signs(256)`.
//! - **Nibble** of coordinate `j`: `sign << 3 | level`, `sign = 1` when `ũ_j < 0` (so `-0.0` is
//!   positive, as for the centroid bit `ũ_j >= 0`); it decodes to `-a[level]` when `sign = 1`.
//! - **Packing**: the `D_pad` nibbles of a token (coordinate `c = 8b + j`) lie in `D_pad/2` bytes, byte
//!   `c/2` holding coordinate `c` in its low nibble when `c` is even and in its high nibble when
//!   `c` is odd.
//! - **Empty subspace**: when `r_b = 0` (also for the zero key) `u = 0`, every level is 0, every
//!   sign bit 0 (so the id is 255), `α_b = 0`, and the weight is defined as `w_b = 0`, so the
//!   subspace adds nothing to `ŝ`. `α_b = 0` only happens with `r_b = 0`: for `r_b > 0`, `u` is a
//!   unit vector and `α_b >= a[0] Σ|u_j| >= a[0] > 0`.
//! - **Retrievable tokens**: the tokens a scan may select, `SINK .. n_total - LOCAL` (§6's sink
//!   and local window are always selected and never scanned). `N_r` is their count. The index
//!   must hold at least every retrievable token (`index.len() >= n_total - LOCAL`) and no token
//!   beyond the sequence; the histograms count every indexed key, sink and window included,
//!   because the index keeps them as blocks enter the store.
//! - **Centroid ranking**: by `q̃_b · centroid` descending, ties by the lower id.
//! - **Tiers**: tier `i` of subspace `b` is the longest best-ranked prefix of centroids whose
//!   histogram counts sum to strictly less than `ceil(N_r ρ τ_i)` (empty when even the empty
//!   prefix does not qualify, i.e. the bound is 0). Bounds and `C` are computed in exact integer
//!   arithmetic (`ρ`, `β`, `τ` are hundredths), so there is no rounding to disagree about.
//! - **Thresholds of `N_r`** for `ρ` and `β`: "5k", "10k", "30k" are 5,000, 10,000, 30,000.
//! - **Candidates**: `C = min(ceil(β N_r), N_r)` retrievable tokens by votes descending, ties by
//!   the lower index. The winners are the top `min(k, C)` candidates by `ŝ`, ties by the lower
//!   index. When `n_total <= SINK + LOCAL + k` every token is selected (as §6).
//! - **Zero query mean**: `q̄/||q̄||` uses `max(||q̄||, 1e-8)` like the key side, so `q̄ = 0` gives
//!   `q̃ = 0`, every centroid ties (ranked by id) and every `ŝ = 0`.

use super::queries::QueryFault;
use half::bf16;
use thiserror::Error;

/// The sign vector and the head dimensions the index serves are part of the kernels' ABI, so
/// they live in `codegen` and the runtime uploads the same vector.
pub use codegen::spec::pariskv::{head_dims, signs, supports_head_dim, SIGN_SEED};

use super::attention::attend_group;
use super::metrics::winner_row_bytes;
use super::select::{top_k_of, Selection, LOCAL, SINK};

/// Coordinates per subspace `m`.
pub const SUBSPACE: usize = 8;
/// Analytic centroids per subspace (the sign patterns of `m = 8` coordinates).
pub const CENTROIDS: usize = 256;
/// Floor of a norm before dividing by it (keys and the query mean).
pub const NORM_FLOOR: f64 = 1e-8;
/// Direction-code thresholds: the level of `|u_j|` is how many of these lie strictly below it.
pub const THRESHOLDS: [f64; 7] = [0.0843, 0.1698, 0.2578, 0.3499, 0.4487, 0.5585, 0.6901];
/// Reconstruction magnitude of each level (Lloyd-Max levels of one coordinate of a uniform point
/// on the 7-sphere).
pub const LEVELS: [f64; 8] = [
    0.0420, 0.1266, 0.2130, 0.3025, 0.3973, 0.5001, 0.6169, 0.7633,
];
/// Mass fractions `τ` of the six tiers, in hundredths.
pub const TIER_PERCENT: [usize; 6] = [5, 15, 30, 50, 75, 100];
/// Bytes of one histogram bin as the reference stores it (a `u32` count).
pub const HISTOGRAM_BIN_BYTES: usize = 4;

/// Input the index or the query side refuses.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum PariskvError {
    #[error(
        "head dimension {head_dim} is not supported by the ParisKV index: it needs 64, 80, 96, \
         128, 192 or 256 (zero-padded to a power of two for the Hadamard transform, then \
         B = D_pad/8 subspaces of 8 coordinates)"
    )]
    HeadDim { head_dim: usize },
    #[error("{values} key values are not whole rows of {head_dim} channels")]
    KeyShape { values: usize, head_dim: usize },
    #[error("key {token} channel {channel} is {value}; keys must be finite")]
    NonFiniteKey {
        token: usize,
        channel: usize,
        value: f64,
    },
    #[error(
        "key {token} subspace {subspace}: weight {weight} overflows bf16; the key norm is too large"
    )]
    WeightOverflow {
        token: usize,
        subspace: usize,
        weight: f64,
    },
    #[error("no queries: a query group has 1..=16 query heads")]
    NoQueries,
    #[error("query {head} has {got} channels; the index has {want}")]
    QueryShape {
        head: usize,
        got: usize,
        want: usize,
    },
    #[error("query {head} channel {channel} is {value}; queries must be finite")]
    NonFiniteQuery {
        head: usize,
        channel: usize,
        value: f64,
    },
    #[error(
        "the index holds {indexed} tokens but the sequence has {n_total}; it must hold every \
         token that a scan may select (at least {needed}) and none beyond the sequence"
    )]
    IndexCoverage {
        indexed: usize,
        n_total: usize,
        needed: usize,
    },
    #[error(
        "the K/V rows hold {rows} tokens but the sequence has {tokens}; pass every token's rows"
    )]
    Rows { rows: usize, tokens: usize },
}

fn check_head_dim(head_dim: usize) -> Result<(), PariskvError> {
    if supports_head_dim(head_dim) {
        Ok(())
    } else {
        Err(PariskvError::HeadDim { head_dim })
    }
}

/// The transform's length `D_pad` of a head dimension: `D` rounded up to a power of two.
pub fn padded_dim(head_dim: usize) -> usize {
    head_dim.next_power_of_two()
}

/// Subspaces `B = D_pad/8` of a head dimension.
pub fn subspaces(head_dim: usize) -> usize {
    padded_dim(head_dim) / SUBSPACE
}

/// Index bytes per token per KV head: ids `B`, codes `D_pad/2`, bf16 weights `2B` (112 at
/// D = 128, and at D = 80 and 96, which pad to 128).
pub fn index_bytes_per_token(head_dim: usize) -> usize {
    let b = subspaces(head_dim);
    b + padded_dim(head_dim) / 2 + 2 * b
}

/// Entry `(i, j)` of the Sylvester Hadamard matrix in natural order: `(-1)^popcount(i & j)`.
pub fn hadamard_entry(i: usize, j: usize) -> f64 {
    if (i & j).count_ones().is_multiple_of(2) {
        1.0
    } else {
        -1.0
    }
}

/// The fast Walsh–Hadamard transform in place: `x ← H x` with `H` the Sylvester matrix in
/// natural order (unnormalised). Panics unless `x.len()` is a power of two (internal use only;
/// head dimensions are checked before).
pub fn fwht(x: &mut [f64]) {
    let n = x.len();
    assert!(n.is_power_of_two(), "FWHT length {n} is not a power of two");
    let mut h = 1;
    while h < n {
        for start in (0..n).step_by(2 * h) {
            for i in start..start + h {
                let (a, b) = (x[i], x[i + h]);
                x[i] = a + b;
                x[i + h] = a - b;
            }
        }
        h *= 2;
    }
}

/// `H (s ⊙ x / max(||x||, 1e-8)) / sqrt(D_pad)` and `||x||`: the rotation of §12 applied to a
/// key or the query mean, `x` zero-padded to the length of `signs` (`D_pad`, a power of two, at
/// least `x.len()`).
pub fn rotate(x: &[f64], signs: &[f64]) -> (Vec<f64>, f64) {
    let norm = x.iter().map(|v| v * v).sum::<f64>().sqrt();
    let inv = 1.0 / norm.max(NORM_FLOOR);
    let padded = x.iter().copied().chain(std::iter::repeat(0.0));
    let mut u: Vec<f64> = padded.zip(signs).map(|(v, s)| s * v * inv).collect();
    fwht(&mut u);
    let scale = 1.0 / (u.len() as f64).sqrt();
    u.iter_mut().for_each(|v| *v *= scale);
    (u, norm)
}

/// The encoding of one subspace `ũ_b` of a rotated key.
#[derive(Clone, Debug, PartialEq)]
pub struct SubspaceCode {
    /// Nearest centroid: `Σ_j [ũ_j >= 0] 2^j`.
    pub id: u8,
    /// Per coordinate `sign << 3 | level`.
    pub nibbles: [u8; SUBSPACE],
    /// `r_b = ||ũ_b||`.
    pub r: f64,
    /// `α_b = Σ_j a[level_j] |u_j|` (0 when `r_b = 0`).
    pub alpha: f64,
}

impl SubspaceCode {
    /// `w_b = ||k|| r_b / α_b` in f64 before bf16 rounding; 0 when `r_b = 0` (module docs).
    pub fn weight(&self, key_norm: f64) -> f64 {
        if self.r == 0.0 || self.alpha == 0.0 {
            0.0
        } else {
            key_norm * self.r / self.alpha
        }
    }
}

/// The level of a coordinate magnitude: how many [`THRESHOLDS`] lie strictly below it.
pub fn level(magnitude: f64) -> u8 {
    THRESHOLDS.iter().filter(|&&t| t < magnitude).count() as u8
}

/// The reconstruction `±a[level]` of a nibble.
pub fn decode_nibble(nibble: u8) -> f64 {
    let magnitude = LEVELS[usize::from(nibble & 7)];
    if nibble & 8 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

/// Encodes one subspace `ũ_b` (8 coordinates) of a rotated key.
pub fn encode_subspace(sub: &[f64]) -> SubspaceCode {
    assert_eq!(sub.len(), SUBSPACE, "a subspace has {SUBSPACE} coordinates");
    let id = sub
        .iter()
        .enumerate()
        .filter(|(_, &v)| v >= 0.0)
        .fold(0u8, |id, (j, _)| id | (1 << j));
    let r = sub.iter().map(|v| v * v).sum::<f64>().sqrt();
    let mut nibbles = [0u8; SUBSPACE];
    let mut alpha = 0.0;
    if r > 0.0 {
        for (nibble, &v) in nibbles.iter_mut().zip(sub) {
            let u = v / r;
            let lvl = level(u.abs());
            *nibble = (u8::from(v < 0.0) << 3) | lvl;
            alpha += LEVELS[usize::from(lvl)] * u.abs();
        }
    }
    SubspaceCode {
        id,
        nibbles,
        r,
        alpha,
    }
}

/// The ParisKV index of one (layer, KV head): per token `B` centroid ids, `D_pad` packed nibbles
/// and `B` bf16 weights, and per subspace a histogram of centroid ids.
#[derive(Clone, Debug, PartialEq)]
pub struct PariskvIndex {
    head_dim: usize,
    signs: Vec<f64>,
    /// `[n][B]` centroid ids.
    ids: Vec<u8>,
    /// `[n][D_pad/2]` packed nibbles (module docs give the order).
    codes: Vec<u8>,
    /// `[n][B]` bf16 weights.
    weights: Vec<bf16>,
    /// `[B][256]` key counts per centroid id.
    histograms: Vec<u32>,
}

/// One token's index row, encoded before anything is stored (so a bad row stores nothing).
struct Row {
    ids: Vec<u8>,
    codes: Vec<u8>,
    weights: Vec<bf16>,
}

impl PariskvIndex {
    /// An empty index for keys of `head_dim` channels.
    pub fn new(head_dim: usize) -> Result<Self, PariskvError> {
        check_head_dim(head_dim)?;
        Ok(PariskvIndex {
            head_dim,
            signs: signs(padded_dim(head_dim)),
            ids: Vec::new(),
            codes: Vec::new(),
            weights: Vec::new(),
            histograms: vec![0; subspaces(head_dim) * CENTROIDS],
        })
    }

    /// The index of a prefill: token-major bf16 keys `[n][D]`.
    pub fn build(keys: &[bf16], head_dim: usize) -> Result<Self, PariskvError> {
        let mut index = PariskvIndex::new(head_dim)?;
        index.append(keys)?;
        Ok(index)
    }

    /// Indexes the keys of an appended block (token-major `[n][D]`, any `n`). Every row is
    /// checked and encoded first: on error the index is unchanged.
    pub fn append(&mut self, keys: &[bf16]) -> Result<(), PariskvError> {
        let d = self.head_dim;
        if !keys.len().is_multiple_of(d) {
            return Err(PariskvError::KeyShape {
                values: keys.len(),
                head_dim: d,
            });
        }
        let first = self.len();
        let rows = keys
            .chunks_exact(d)
            .enumerate()
            .map(|(i, key)| self.encode_row(first + i, key))
            .collect::<Result<Vec<_>, _>>()?;
        for row in rows {
            for (b, &id) in row.ids.iter().enumerate() {
                self.histograms[b * CENTROIDS + usize::from(id)] += 1;
            }
            self.ids.extend(row.ids);
            self.codes.extend(row.codes);
            self.weights.extend(row.weights);
        }
        Ok(())
    }

    fn encode_row(&self, token: usize, key: &[bf16]) -> Result<Row, PariskvError> {
        let k: Vec<f64> = key.iter().map(|x| x.to_f64()).collect();
        if let Some(channel) = k.iter().position(|x| !x.is_finite()) {
            return Err(PariskvError::NonFiniteKey {
                token,
                channel,
                value: k[channel],
            });
        }
        let (u, norm) = rotate(&k, &self.signs);
        let b_count = subspaces(self.head_dim);
        let mut row = Row {
            ids: Vec::with_capacity(b_count),
            codes: vec![0; self.padded_dim() / 2],
            weights: Vec::with_capacity(b_count),
        };
        for (b, sub) in u.chunks_exact(SUBSPACE).enumerate() {
            let code = encode_subspace(sub);
            let weight = code.weight(norm);
            let stored = bf16::from_f64(weight);
            if !stored.is_finite() {
                return Err(PariskvError::WeightOverflow {
                    token,
                    subspace: b,
                    weight,
                });
            }
            for (j, &nibble) in code.nibbles.iter().enumerate() {
                let c = b * SUBSPACE + j;
                row.codes[c / 2] |= nibble << (4 * (c % 2));
            }
            row.ids.push(code.id);
            row.weights.push(stored);
        }
        Ok(row)
    }

    /// Tokens indexed.
    pub fn len(&self) -> usize {
        self.ids.len() / subspaces(self.head_dim)
    }

    /// Whether no token is indexed.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Head dimension `D`.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// The transform's length `D_pad` ([`padded_dim`]).
    pub fn padded_dim(&self) -> usize {
        padded_dim(self.head_dim)
    }

    /// Subspaces `B = D/8`.
    pub fn subspaces(&self) -> usize {
        subspaces(self.head_dim)
    }

    /// The sign vector `s` used by this index (`D_pad` entries).
    pub fn signs(&self) -> &[f64] {
        &self.signs
    }

    /// Centroid ids of `token`, one per subspace.
    pub fn ids(&self, token: usize) -> &[u8] {
        let b = self.subspaces();
        &self.ids[token * b..(token + 1) * b]
    }

    /// Packed nibbles of `token`, `D_pad/2` bytes.
    pub fn codes(&self, token: usize) -> &[u8] {
        let half = self.padded_dim() / 2;
        &self.codes[token * half..(token + 1) * half]
    }

    /// The nibble of coordinate `c = 8b + j` of `token`.
    pub fn nibble(&self, token: usize, c: usize) -> u8 {
        (self.codes(token)[c / 2] >> (4 * (c % 2))) & 0xF
    }

    /// bf16 weights `w_b` of `token`.
    pub fn weights(&self, token: usize) -> &[bf16] {
        let b = self.subspaces();
        &self.weights[token * b..(token + 1) * b]
    }

    /// The histogram of subspace `b`: keys per centroid id.
    pub fn histogram(&self, b: usize) -> &[u32] {
        &self.histograms[b * CENTROIDS..(b + 1) * CENTROIDS]
    }

    /// The estimator `ŝ = ||q̄|| Σ_b w_b Σ_j q̃_{b,j} (±a[level_j])` of `q̄ · k_token`.
    pub fn estimate(&self, token: usize, q_norm: f64, q_tilde: &[f64]) -> f64 {
        let weights = self.weights(token);
        let sum: f64 = (0..self.subspaces())
            .map(|b| {
                let inner: f64 = (0..SUBSPACE)
                    .map(|j| {
                        let c = b * SUBSPACE + j;
                        q_tilde[c] * decode_nibble(self.nibble(token, c))
                    })
                    .sum();
                weights[b].to_f64() * inner
            })
            .sum();
        q_norm * sum
    }
}

/// `ρ` and `β` by `N_r`, in hundredths: (ρ, β).
pub fn rho_beta_percent(n_r: usize) -> (usize, usize) {
    if n_r < 5_000 {
        (50, 50)
    } else if n_r < 10_000 {
        (30, 25)
    } else if n_r < 30_000 {
        (25, 20)
    } else {
        (20, 10)
    }
}

/// The tier bounds `ceil(N_r ρ τ_i)`, exact.
pub fn tier_bounds(n_r: usize) -> [usize; 6] {
    let (rho, _) = rho_beta_percent(n_r);
    TIER_PERCENT.map(|tau| (n_r * rho * tau).div_ceil(100 * 100))
}

/// Candidates `C = min(ceil(β N_r), N_r)`, exact.
pub fn candidate_count(n_r: usize) -> usize {
    let (_, beta) = rho_beta_percent(n_r);
    (n_r * beta).div_ceil(100).min(n_r)
}

/// The 256 centroid ids of one subspace ranked by `q̃_b · centroid` descending, ties by the
/// lower id (`-0.0` equal to `0.0`); the centroid of id `c` has `+1/sqrt(8)` at coordinate `j` when bit `j` is set and
/// `-1/sqrt(8)` otherwise.
pub fn rank_centroids(q_sub: &[f64]) -> Vec<u8> {
    let inv = 1.0 / (SUBSPACE as f64).sqrt();
    let score = |id: usize| -> f64 {
        q_sub
            .iter()
            .enumerate()
            .map(|(j, q)| if id >> j & 1 == 1 { q * inv } else { -q * inv })
            .sum()
    };
    let scores: Vec<f64> = (0..CENTROIDS).map(score).collect();
    let mut ids: Vec<usize> = (0..CENTROIDS).collect();
    // `partial_cmp`, not `total_cmp`: a score of `-0.0` ties with `0.0` (the zero query), and
    // scores are finite because queries are checked.
    ids.sort_by(|&a, &b| {
        scores[b]
            .partial_cmp(&scores[a])
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.cmp(&b))
    });
    ids.into_iter().map(|id| id as u8).collect()
}

/// Tier lengths of one subspace: for each bound, the longest prefix of `ranking` whose histogram
/// counts sum to strictly less than the bound (0 when the bound is 0).
pub fn tier_lengths(histogram: &[u32], ranking: &[u8], bounds: &[usize; 6]) -> [usize; 6] {
    bounds.map(|bound| {
        let mut total = 0usize;
        let mut length = 0;
        for &id in ranking {
            total += histogram[usize::from(id)] as usize;
            if total >= bound {
                break;
            }
            length += 1;
        }
        if bound == 0 {
            0
        } else {
            length
        }
    })
}

/// Everything the query side of one query group computes, kept for inspection and tests.
#[derive(Clone, Debug, PartialEq)]
pub struct Retrieval {
    /// Mean of the group's queries `q̄`.
    pub q_mean: Vec<f64>,
    /// `||q̄||`.
    pub q_norm: f64,
    /// `q̃`, the rotated unit query mean (`D_pad` coordinates).
    pub q_tilde: Vec<f64>,
    /// Retrievable tokens, `SINK .. n_total - LOCAL` (empty when the sequence is shorter).
    pub retrievable: std::ops::Range<usize>,
    /// Centroid ranking per subspace, `[B][256]`.
    pub rankings: Vec<Vec<u8>>,
    /// Tier lengths (best-ranked prefix lengths) per subspace, `[B][6]`.
    pub tiers: Vec<[usize; 6]>,
    /// Votes of each retrievable token, in token order.
    pub votes: Vec<u32>,
    /// The `C` candidates, in vote rank order.
    pub candidates: Vec<usize>,
    /// `ŝ` of each candidate, same order.
    pub estimates: Vec<f64>,
    /// The top `min(k, C)` candidates by `ŝ`, in rank order.
    pub winners: Vec<usize>,
}

fn check_queries(queries: &[Vec<f64>], d: usize) -> Result<(), PariskvError> {
    if queries.is_empty() {
        return Err(PariskvError::NoQueries);
    }
    super::queries::check_queries(queries, d).map_err(|fault| match fault {
        QueryFault::Shape { head, got, want } => PariskvError::QueryShape { head, got, want },
        QueryFault::NonFinite {
            head,
            channel,
            value,
        } => PariskvError::NonFiniteQuery {
            head,
            channel,
            value,
        },
    })
}

/// Runs the query side of §12 for one query group over a sequence of `n_total` tokens.
pub fn retrieve(
    index: &PariskvIndex,
    queries: &[Vec<f64>],
    n_total: usize,
    k: usize,
) -> Result<Retrieval, PariskvError> {
    let d = index.head_dim();
    check_queries(queries, d)?;
    let needed = n_total.saturating_sub(LOCAL);
    if index.len() < needed || index.len() > n_total {
        return Err(PariskvError::IndexCoverage {
            indexed: index.len(),
            n_total,
            needed,
        });
    }
    let g = queries.len() as f64;
    let q_mean: Vec<f64> = (0..d)
        .map(|c| queries.iter().map(|q| q[c]).sum::<f64>() / g)
        .collect();
    let (q_tilde, q_norm) = rotate(&q_mean, index.signs());

    let retrievable = SINK.min(needed)..needed;
    let n_r = retrievable.len();
    let bounds = tier_bounds(n_r);
    let b_count = index.subspaces();
    let rankings: Vec<Vec<u8>> = q_tilde.chunks_exact(SUBSPACE).map(rank_centroids).collect();
    let tiers: Vec<[usize; 6]> = (0..b_count)
        .map(|b| tier_lengths(index.histogram(b), &rankings[b], &bounds))
        .collect();
    // tiers_holding[b][id]: how many tiers of subspace b contain centroid id.
    let tiers_holding: Vec<[u32; CENTROIDS]> = (0..b_count)
        .map(|b| {
            let mut holding = [0u32; CENTROIDS];
            for (position, &id) in rankings[b].iter().enumerate() {
                holding[usize::from(id)] =
                    tiers[b].iter().filter(|&&l| position < l).count() as u32;
            }
            holding
        })
        .collect();
    let votes: Vec<u32> = retrievable
        .clone()
        .map(|t| {
            index
                .ids(t)
                .iter()
                .zip(&tiers_holding)
                .map(|(&id, holding)| holding[usize::from(id)])
                .sum()
        })
        .collect();

    let mut candidates: Vec<usize> = retrievable.clone().collect();
    let vote_of = |t: usize| votes[t - retrievable.start];
    candidates.sort_by(|&a, &b| vote_of(b).cmp(&vote_of(a)).then(a.cmp(&b)));
    candidates.truncate(candidate_count(n_r));

    let estimates: Vec<f64> = candidates
        .iter()
        .map(|&t| index.estimate(t, q_norm, &q_tilde))
        .collect();
    let mut by_token = vec![f64::NEG_INFINITY; n_total];
    for (&t, &s) in candidates.iter().zip(&estimates) {
        by_token[t] = s;
    }
    let winners = top_k_of(&by_token, candidates.iter().copied(), k);
    Ok(Retrieval {
        q_mean,
        q_norm,
        q_tilde,
        retrievable,
        rankings,
        tiers,
        votes,
        candidates,
        estimates,
        winners,
    })
}

/// The selected set of every head of the group from a retrieval: sink ∪ local ∪ winners (the
/// same set for all `heads`), or every token when `n_total <= SINK + LOCAL + k`.
fn selection_of(retrieval: &Retrieval, heads: usize, n_total: usize, k: usize) -> Selection {
    let set: Vec<usize> = if n_total <= SINK + LOCAL + k {
        (0..n_total).collect()
    } else {
        let mut set: Vec<usize> = (0..SINK).collect();
        let mut winners = retrieval.winners.clone();
        winners.sort_unstable();
        set.extend(winners);
        set.extend(n_total - LOCAL..n_total);
        set
    };
    Selection::from_sets(vec![set; heads])
}

/// The §12 selection of one query group: every head gets sink ∪ local ∪ the group's top-`k`.
pub fn pariskv_select(
    index: &PariskvIndex,
    queries: &[Vec<f64>],
    n_total: usize,
    k: usize,
) -> Result<Selection, PariskvError> {
    let retrieval = retrieve(index, queries, n_total, k)?;
    Ok(selection_of(&retrieval, queries.len(), n_total, k))
}

/// Bytes one query group's ParisKV step reads (§9's accounting, for §12).
///
/// Counted: every histogram bin (`B * 256 * 4`, read to build the tiers), the centroid ids of
/// every retrievable token (`N_r * B`, read to vote), the codes and weights of every candidate
/// (`C * (D_pad/2 + 2B)`, read to rerank), and the bf16 K and V rows of the union. Not counted: the
/// queries, rankings, tiers, votes and scores (on-chip or tiny), and the index rows of the sink
/// and window (never scanned).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PariskvBytes {
    /// Histogram bins.
    pub histograms: usize,
    /// Centroid ids of the retrievable tokens.
    pub ids: usize,
    /// Codes and weights of the candidates.
    pub rerank: usize,
    /// bf16 K and V rows of the union.
    pub rows: usize,
}

impl PariskvBytes {
    /// Everything counted.
    pub fn total(&self) -> usize {
        self.histograms + self.ids + self.rerank + self.rows
    }
}

/// One query group's inputs to [`pariskv_step`].
#[derive(Clone, Copy, Debug)]
pub struct PariskvInput<'a> {
    /// The index of this KV head.
    pub index: &'a PariskvIndex,
    /// bf16 K rows, `[n][D]`, at least `n_total` tokens.
    pub keys: &'a [bf16],
    /// bf16 V rows, `[n][D]`, at least `n_total` tokens.
    pub values: &'a [bf16],
    /// The `G` queries.
    pub queries: &'a [Vec<f64>],
    /// Tokens of the sequence.
    pub n_total: usize,
}

/// What one query group's ParisKV step computes.
#[derive(Clone, Debug)]
pub struct PariskvStep {
    /// The query side's intermediate results.
    pub retrieval: Retrieval,
    /// Per-head sets (identical) and their union.
    pub selection: Selection,
    /// Attention output per query head over its set (§6).
    pub outputs: Vec<Vec<f64>>,
    /// Bytes read.
    pub bytes: PariskvBytes,
}

/// One query group's step with ParisKV selection: retrieve, select, attend (§6 exact attention
/// with softmax scale `scale`).
pub fn pariskv_step(
    input: &PariskvInput<'_>,
    k: usize,
    scale: f64,
) -> Result<PariskvStep, PariskvError> {
    let index = input.index;
    let d = index.head_dim();
    let n_total = input.n_total;
    for rows in [input.keys.len() / d, input.values.len() / d] {
        if rows < n_total {
            return Err(PariskvError::Rows {
                rows,
                tokens: n_total,
            });
        }
    }
    let retrieval = retrieve(index, input.queries, n_total, k)?;
    let selection = selection_of(&retrieval, input.queries.len(), n_total, k);
    let outputs = if n_total == 0 {
        vec![Vec::new(); input.queries.len()]
    } else {
        attend_group(
            input.queries,
            input.keys,
            input.values,
            d,
            &selection,
            scale,
        )
    };
    let b_count = index.subspaces();
    let bytes = PariskvBytes {
        histograms: b_count * CENTROIDS * HISTOGRAM_BIN_BYTES,
        ids: retrieval.retrievable.len() * b_count,
        rerank: retrieval.candidates.len() * (index.padded_dim() / 2 + 2 * b_count),
        rows: winner_row_bytes(selection.union.len(), d),
    };
    Ok(PariskvStep {
        retrieval,
        selection,
        outputs,
        bytes,
    })
}

#[cfg(test)]
mod tests;
