//! The exact checks of a ParisKV candidate's outputs against the reference retrieval of the
//! sampled heads: votes and histograms, candidates, rerank scores, and the selection.

use codegen::spec::pariskv::vote_bins;
use reference::pariskv::Retrieval;
use reference::select::{LOCAL, SINK};
use runtime::step::launches::ALWAYS;

/// Votes of the retrievable tokens and their histogram, per sampled head.
pub(super) fn check_votes(
    votes: &[u16],
    hist: &[u32],
    ld_votes: usize,
    head_dim: usize,
    reference: &[(usize, Retrieval)],
) -> Result<(), String> {
    let bins = vote_bins(head_dim as u32) as usize;
    for (h, r) in reference {
        let row = &votes[h * ld_votes..(h + 1) * ld_votes];
        let mut want_hist = vec![0u32; bins];
        for (t, &v) in r.retrievable.clone().zip(&r.votes) {
            if u32::from(row[t]) != v {
                return Err(format!(
                    "kv head {h} token {t}: vote {}, reference {v}",
                    row[t]
                ));
            }
            want_hist[v as usize] += 1;
        }
        let got = &hist[h * bins..(h + 1) * bins];
        if got != want_hist.as_slice() {
            return Err(format!("kv head {h}: the vote histogram differs"));
        }
    }
    Ok(())
}

/// The `C` candidates, ascending, per sampled head.
pub(super) fn check_candidates(
    cand: &[i32],
    cand_count: &[i32],
    ld_cand: usize,
    reference: &[(usize, Retrieval)],
) -> Result<(), String> {
    for (h, r) in reference {
        let c = r.candidates.len();
        if cand_count[*h] as usize != c {
            return Err(format!(
                "kv head {h}: cand_count {}, reference {c}",
                cand_count[*h]
            ));
        }
        let mut want = r.candidates.clone();
        want.sort_unstable();
        let got = &cand[h * ld_cand..h * ld_cand + c];
        if let Some(j) = (0..c).find(|&j| got[j] as usize != want[j]) {
            return Err(format!(
                "kv head {h}: cand[{j}] = {}, reference {}",
                got[j], want[j]
            ));
        }
    }
    Ok(())
}

/// `ŝ` of every candidate (in the chain's ascending order), equal as f64.
pub(super) fn check_scores(
    cand: &[i32],
    score: &[f64],
    ld_cand: usize,
    reference: &[(usize, Retrieval)],
) -> Result<(), String> {
    for (h, r) in reference {
        let mut want: Vec<(usize, f64)> = r
            .candidates
            .iter()
            .copied()
            .zip(r.estimates.iter().copied())
            .collect();
        want.sort_unstable_by_key(|&(t, _)| t);
        for (j, &(t, s)) in want.iter().enumerate() {
            let at = h * ld_cand + j;
            // `==`: -0.0 equals 0.0, NaN (the poison) equals nothing.
            if cand[at] as usize != t || score[at] != s {
                return Err(format!(
                    "kv head {h} candidate {j} (token {t}): ŝ {}, reference {s}",
                    score[at]
                ));
            }
        }
    }
    Ok(())
}

/// The select family's outputs of a rerank, on the host.
pub(super) struct SelectionHost {
    pub(super) sel: Vec<i32>,
    pub(super) sel_pos: Vec<i32>,
    pub(super) sel_count: Vec<i32>,
    pub(super) uni: Vec<i32>,
    pub(super) uni_count: Vec<i32>,
}

/// Every query head of a sampled group selects sink ∪ winners ∪ window, ascending, with
/// `sel_pos[j] = j`, and the union is the same set.
pub(super) fn check_selection(
    got: &SelectionHost,
    group: usize,
    k: usize,
    n: usize,
    reference: &[(usize, Retrieval)],
) -> Result<(), String> {
    let (sink, local) = (SINK, LOCAL);
    let (sc, uc) = (k + ALWAYS, group * k + ALWAYS);
    for (h, r) in reference {
        let want: Vec<usize> = if n <= ALWAYS + k {
            (0..n).collect()
        } else {
            let mut winners = r.winners.clone();
            winners.sort_unstable();
            (0..sink).chain(winners).chain(n - local..n).collect()
        };
        if got.uni_count[*h] as usize != want.len() {
            return Err(format!(
                "kv head {h}: uni_count {}, reference {}",
                got.uni_count[*h],
                want.len()
            ));
        }
        for (j, &t) in want.iter().enumerate() {
            if got.uni[h * uc + j] as usize != t {
                return Err(format!(
                    "kv head {h}: uni[{j}] = {}, reference {t}",
                    got.uni[h * uc + j]
                ));
            }
        }
        for g in 0..group {
            let qh = h * group + g;
            if got.sel_count[qh] as usize != want.len() {
                return Err(format!(
                    "query head {qh}: sel_count {}, reference {}",
                    got.sel_count[qh],
                    want.len()
                ));
            }
            for (j, &t) in want.iter().enumerate() {
                let (token, pos) = (got.sel[qh * sc + j], got.sel_pos[qh * sc + j]);
                if token as usize != t || pos as usize != j {
                    return Err(format!(
                        "query head {qh}: sel[{j}] = {token}, sel_pos[{j}] = {pos}; reference \
                         {t}, {j}"
                    ));
                }
            }
        }
    }
    Ok(())
}
