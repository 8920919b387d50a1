//! SPEC §6: selection and union.
//!
//! Every query head keeps the attention sink (the first [`SINK`] tokens) and the local window
//! (the last [`LOCAL`] tokens), plus the top-`k` of the remaining tokens by its score, ties
//! broken by the lower index. A query group fetches only the union of its heads' sets.

use std::cmp::Ordering;

/// Tokens at the start of the sequence that every head always attends to (the attention sink).
pub const SINK: usize = 4;
/// Tokens at the end of the sequence that every head always attends to (the local window).
pub const LOCAL: usize = 32;

/// The `k` of the paper's protocol for a context of `context` tokens.
///
/// The paper fixes three points: 128 at 4k, 256 at 16k and 512 at 32k and above. Between them
/// this is a step function that keeps the value of the largest protocol point not above
/// `context` (so 4k..16k gives 128 and 16k..32k gives 256); below 4k it is 128 too, where
/// [`select_head`] keeps every token anyway once `context <= 36 + 128`.
pub fn paper_k(context: usize) -> usize {
    const K_16K: usize = 16 * 1024;
    const K_32K: usize = 32 * 1024;
    if context >= K_32K {
        512
    } else if context >= K_16K {
        256
    } else {
        128
    }
}

/// Orders tokens by descending score, ties (and `-0.0` against `0.0`) by ascending index.
///
/// A NaN score ranks below every number, so a broken score can never push out a real one.
fn rank_order(scores: &[f64], a: usize, b: usize) -> Ordering {
    let (sa, sb) = (scores[a], scores[b]);
    let by_score = match (sa.is_nan(), sb.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => sb.partial_cmp(&sa).expect("neither score is NaN"),
    };
    by_score.then(a.cmp(&b))
}

/// The `k` highest-scoring indices of `candidates`, ties by lower index, in rank order.
pub fn top_k_of(
    scores: &[f64],
    candidates: impl IntoIterator<Item = usize>,
    k: usize,
) -> Vec<usize> {
    let mut ranked: Vec<usize> = candidates.into_iter().collect();
    ranked.sort_by(|&a, &b| rank_order(scores, a, b));
    ranked.truncate(k);
    ranked
}

/// The selected set `S_h` of one query head, ascending: sink ∪ local ∪ top-`k` of the rest.
///
/// `scores` holds one score per token of the sequence (`n = scores.len()`). When
/// `n <= SINK + LOCAL + k` every token is selected (this covers `n < SINK + LOCAL`, where the
/// sink and the window overlap).
pub fn select_head(scores: &[f64], k: usize) -> Vec<usize> {
    let n = scores.len();
    if n <= SINK + LOCAL + k {
        return (0..n).collect();
    }
    let middle = SINK..n - LOCAL;
    let mut selected: Vec<usize> = (0..SINK).collect();
    let mut top = top_k_of(scores, middle, k);
    top.sort_unstable();
    selected.extend(top);
    selected.extend(n - LOCAL..n);
    selected
}

/// The union of sets of token indices, sorted ascending without duplicates.
pub fn union(sets: &[Vec<usize>]) -> Vec<usize> {
    let mut all: Vec<usize> = sets.iter().flatten().copied().collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// The selection of one query group (the `G` heads of one KV head).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// `S_h` per query head, ascending token indices.
    pub heads: Vec<Vec<usize>>,
    /// `U = ∪_h S_h`, ascending: the K and V rows that are fetched.
    pub union: Vec<usize>,
    /// For each head, the position within `union` of each token of `heads[h]` (same order), so
    /// that attention can run over the fetched rows.
    pub rows: Vec<Vec<usize>>,
}

impl Selection {
    /// Selects from one score vector per query head (`scores[h]`, all of the same length).
    pub fn from_scores(scores: &[Vec<f64>], k: usize) -> Self {
        let heads = scores.iter().map(|s| select_head(s, k)).collect();
        Selection::from_sets(heads)
    }

    /// Builds the union and row positions of given per-head sets (each ascending).
    pub fn from_sets(heads: Vec<Vec<usize>>) -> Self {
        let union = union(&heads);
        let rows = heads
            .iter()
            .map(|set| {
                set.iter()
                    .map(|token| {
                        union
                            .binary_search(token)
                            .expect("every head's token is in the union")
                    })
                    .collect()
            })
            .collect();
        Selection { heads, union, rows }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn paper_k_protocol_points() {
        assert_eq!(paper_k(4096), 128);
        assert_eq!(paper_k(1000), 128);
        assert_eq!(paper_k(16383), 128);
        assert_eq!(paper_k(16384), 256);
        assert_eq!(paper_k(32767), 256);
        assert_eq!(paper_k(32768), 512);
        assert_eq!(paper_k(1 << 20), 512);
    }

    #[test]
    fn picks_highest_middle_scores() {
        let n = 100;
        let mut scores = vec![0.0; n];
        // Tokens in the sink or window score highest but are selected anyway; the top-2 of the
        // middle must be 50 and 10.
        scores[1] = 100.0;
        scores[90] = 100.0;
        scores[50] = 9.0;
        scores[10] = 8.0;
        scores[11] = 7.0;
        let s = select_head(&scores, 2);
        let mut expect: Vec<usize> = vec![0, 1, 2, 3, 10, 50];
        expect.extend(n - LOCAL..n);
        assert_eq!(s, expect);
    }

    #[test]
    fn ties_go_to_lower_index_and_nan_ranks_last() {
        let n = 60;
        let mut scores = vec![1.0; n];
        scores[5] = f64::NAN;
        scores[20] = -0.0;
        let s = select_head(&scores, 3);
        assert_eq!(&s[SINK..SINK + 3], &[4, 6, 7]);
        assert_eq!(top_k_of(&[0.0, -0.0, 0.0], 0..3, 2), vec![0, 1]);
    }

    #[test]
    fn short_sequences_keep_everything() {
        for n in 0..=SINK + LOCAL {
            assert_eq!(select_head(&vec![0.5; n], 0), (0..n).collect::<Vec<_>>());
        }
        assert_eq!(select_head(&[0.5; 40], 3).len(), 39);
    }

    #[test]
    fn selection_rows_point_into_union() {
        let sel = Selection::from_sets(vec![vec![0, 3, 9], vec![1, 3, 7]]);
        assert_eq!(sel.union, vec![0, 1, 3, 7, 9]);
        assert_eq!(sel.rows, vec![vec![0, 2, 4], vec![1, 2, 3]]);
    }

    proptest! {
        #[test]
        fn selection_properties(
            scores in prop::collection::vec(-4i32..4, 0..200),
            k in 0usize..50,
        ) {
            // Small integer scores force many ties.
            let scores: Vec<f64> = scores.into_iter().map(f64::from).collect();
            let n = scores.len();
            let s = select_head(&scores, k);
            prop_assert!(s.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(s.iter().all(|&i| i < n));
            prop_assert_eq!(s.len(), n.min(SINK + LOCAL + k));
            for i in (0..n.min(SINK)).chain(n.saturating_sub(LOCAL)..n) {
                prop_assert!(s.contains(&i));
            }
            if n > SINK + LOCAL + k {
                // Every chosen middle token outranks every rejected one, ties by index.
                let chosen: Vec<usize> = s.iter().copied().filter(|&i| (SINK..n - LOCAL).contains(&i)).collect();
                for r in (SINK..n - LOCAL).filter(|i| !chosen.contains(i)) {
                    for &c in &chosen {
                        prop_assert!(scores[c] > scores[r] || (scores[c] == scores[r] && c < r));
                    }
                }
            }
        }

        #[test]
        fn union_is_sorted_dedup_superset(
            sets in prop::collection::vec(prop::collection::vec(0usize..100, 0..30), 0..6),
        ) {
            let u = union(&sets);
            prop_assert!(u.windows(2).all(|w| w[0] < w[1]));
            for set in &sets {
                for i in set {
                    prop_assert!(u.contains(i));
                }
            }
            for i in &u {
                prop_assert!(sets.iter().any(|s| s.contains(i)));
            }
        }

        #[test]
        fn selection_rows_recover_tokens(
            scores in prop::collection::vec(prop::collection::vec(-100.0f64..100.0, 80), 1..5),
            k in 0usize..20,
        ) {
            let sel = Selection::from_scores(&scores, k);
            prop_assert!(sel.union.len() <= scores.len() * k + SINK + LOCAL);
            for (set, rows) in sel.heads.iter().zip(&sel.rows) {
                let back: Vec<usize> = rows.iter().map(|&r| sel.union[r]).collect();
                prop_assert_eq!(&back, set);
            }
        }
    }
}
