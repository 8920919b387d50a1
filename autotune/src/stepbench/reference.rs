//! The f64 yardstick of the sampled step (layer slot 0, sequence 0, every query head): dense
//! attention and the exact top-k over the window's candidates, and how a GPU step compares.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use reference::attention::{dense, dot_bf16};
use reference::metrics::fidelity;
use reference::select::{top_k_of, LOCAL, SINK};
use reference::synthetic::SyntheticHead;
use runtime::step::HostStepOutput;

use super::figures::recall;

/// What one query head should get.
#[derive(Clone, Debug, PartialEq)]
pub struct QueryTruth {
    /// Dense attention over the window.
    pub output: Vec<f64>,
    /// The exact top-`k` of `SINK..n - LOCAL` (the tokens the top-k chooses from, §6), in
    /// rank order (score descending, ties by the lower index), so that its first `j` tokens
    /// are the exact top-`j` for any `j <= k`: one truth serves every method's own `k`.
    pub top: Vec<usize>,
}

impl QueryTruth {
    /// The exact top-`k` (all of [`QueryTruth::top`] when `k` is larger).
    pub fn top_at(&self, k: usize) -> &[usize] {
        &self.top[..k.min(self.top.len())]
    }
}

/// Every query head of the sample at one context: `[h * G + g]`.
#[derive(Clone, Debug, PartialEq)]
pub struct ContextTruth {
    pub n: usize,
    /// The largest `k` a recall can be measured at ([`QueryTruth::top`]'s length).
    pub k: usize,
    pub group: usize,
    pub queries: Vec<QueryTruth>,
}

/// Computes the truth of `heads` over their first `n` tokens for `queries` `[h][g][D]`, with
/// the ranked top-`k` (`k`: the largest recall@k wanted at this context), on `threads` threads
/// (a query head per job).
pub fn context_truth(
    heads: &[SyntheticHead],
    queries: &[Vec<Vec<f64>>],
    n: usize,
    k: usize,
    scale: f64,
    threads: usize,
) -> ContextTruth {
    let group = queries.first().map_or(0, Vec::len);
    let jobs: Vec<(usize, usize)> = (0..heads.len())
        .flat_map(|h| (0..group).map(move |g| (h, g)))
        .collect();
    let out: Mutex<Vec<Option<QueryTruth>>> = Mutex::new(vec![None; jobs.len()]);
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1).min(jobs.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(h, g)) = jobs.get(i) else { break };
                let head = &heads[h];
                let q = &queries[h][g];
                let d = q.len();
                let scores: Vec<f64> = head.keys[..n * d]
                    .chunks_exact(d)
                    .map(|row| dot_bf16(q, row))
                    .collect();
                let candidates = SINK..n.saturating_sub(LOCAL).max(SINK);
                let top = top_k_of(&scores, candidates, k);
                let truth = QueryTruth {
                    output: dense(q, &head.keys, &head.values, d, n, scale),
                    top,
                };
                if let Ok(mut o) = out.lock() {
                    o[i] = Some(truth);
                }
            });
        }
    });
    let queries = out
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.expect("every job ran"))
        .collect();
    ContextTruth {
        n,
        k,
        group,
        queries,
    }
}

/// Mean relative error and mean recall@`recall_k` of sequence 0 of `out` against `truth`: the
/// share of the exact top-`recall_k` that the selection holds (recall left out when
/// `recall_k` is `None`: dense selects every token). `recall_k` is the method's own `k`
/// ([`super::figures::recall_k`]); at most `truth.k` is measured.
pub fn compare(
    truth: &ContextTruth,
    out: &HostStepOutput,
    recall_k: Option<usize>,
) -> (f64, Option<f64>) {
    let (mut error, mut recalls) = (0.0, Vec::new());
    for (i, t) in truth.queries.iter().enumerate() {
        let (h, g) = (i / truth.group, i % truth.group);
        let got: Vec<f64> = out.output(0, h, g).iter().map(|&x| f64::from(x)).collect();
        error += fidelity(&got, &t.output);
        if let Some(k) = recall_k {
            recalls.extend(recall(out.selected(0, h, g), t.top_at(k)));
        }
    }
    let count = truth.queries.len().max(1) as f64;
    let recall = (!recalls.is_empty()).then(|| recalls.iter().sum::<f64>() / recalls.len() as f64);
    (error / count, recall)
}
