//! Every kernel's argument list, once: one struct per entry point, generated at build time by
//! `fathom_macros::abi!` from the template's rendered signature (`templates/ABI.md`). A template
//! whose parameters change changes its struct, so every stale call site stops compiling; the
//! test `every_spec_has_a_generated_signature` renders the specs of every family and fails,
//! naming the family, on a signature no struct here covers (a variant to add below).
//!
//! One line per distinct signature of a family: the kernels of one family differ in sizes,
//! placements and methods, which the template bakes in, but not in their parameters, except
//! the plan that also scores the tail (`plan_tail`: `k_rows`, `n_total`, `scores`, `ld_scores`
//! after `status`), the scan that also writes the peaks of its 32-token halves (`scan_peaks`: `peaks`,
//! `ld_peaks` after `ld_scores`), the compacting select (`select_compact`), whose chunked stages also take the candidates,
//! the one-read select (`select_onepass`), whose `_chunk` and `_final` are its own, its fused
//! form (`select_fused`), whose `_chunk` also writes the selection, the one-block peaks select
//! (`select_peaks_head`, and the cluster select with it), whose `_chunk` writes only the
//! selection, both peaks forms reading the
//! scan's peaks (`select_scan_peaks`, `select_scan_peaks_head` and with it the scan-peaks
//! cluster select: their `_chunk` also takes `n_stored`, `peaks` and `ld_peaks`), attention
//! over several
//! blocks a query head (`attention_split`, `attention_store_split`: its partials and arrival
//! counters), and the
//! rerank's many-block top-k (`pariskv_rerank_mb`: `_chunk`, `_merge`, `_write`).

fathom_macros::abi! {
    #[fathom(runtime = crate)]
    pub mod kernels {
        encode = encode(head_dim = 128, block = 64, segment_words = 512, mode = bulk,
                        rotate = false, threads = 256);
        plan = plan(head_dim = 128, group = 4, block = 64, segment_words = 512,
                    method = fathom, rotate = false, threads = 256);
        plan_tail = plan(head_dim = 128, group = 4, block = 64, segment_words = 512,
                         method = fathom, rotate = false, threads = 256, tail = hbm);
        gather = gather(head_dim = 128, block = 64, segment_words = 512, loads_in_flight = 4,
                        threads = 256);
        scan = scan(head_dim = 128, group = 4, block = 64, segment_words = 512,
                    tile_words = 16, threads = 256, placement = hbm);
        scan_peaks = scan(head_dim = 128, group = 4, block = 64, segment_words = 512,
                          tile_words = 16, threads = 256, placement = hbm, peaks = true);
        oracle = oracle(head_dim = 128, group = 4, threads = 256, placement = hbm);
        landmark = landmark(head_dim = 128, group = 4, threads = 256, placement = hbm);
        select = select(group = 4, k_max = 2048, threads = 256, items_per_thread = 16,
                        algorithm = radix);
        select_compact = select(group = 4, k_max = 2048, threads = 256, items_per_thread = 16,
                                algorithm = compact);
        select_onepass = select(group = 4, k_max = 2048, threads = 256, items_per_thread = 16,
                                algorithm = onepass);
        select_fused = select(group = 4, k_max = 2048, threads = 256, items_per_thread = 16,
                              algorithm = fused);
        select_peaks_head = select(group = 4, k_max = 2048, threads = 256,
                                   items_per_thread = 16, algorithm = peaks_head);
        select_scan_peaks = select(group = 4, k_max = 2048, threads = 256,
                                   items_per_thread = 16, algorithm = scan_peaks);
        select_scan_peaks_head = select(group = 4, k_max = 2048, threads = 256,
                                        items_per_thread = 16, algorithm = scan_peaks_head);
        fetch = fetch(head_dim = 128, group = 4, threads = 256, placement = hbm);
        attention = attention(head_dim = 128, group = 4, threads = 256, rows_per_warp = 4);
        attention_store = attention(head_dim = 128, group = 4, threads = 256, rows_per_warp = 4,
                                    rows = store);
        attention_split = attention(head_dim = 128, group = 4, threads = 256, rows_per_warp = 4,
                                    splits = 4);
        attention_store_split = attention(head_dim = 128, group = 4, threads = 256,
                                          rows_per_warp = 4, rows = store, splits = 4);
        pariskv_index = pariskv_index(head_dim = 128, threads = 256, placement = hbm);
        pariskv_query = pariskv_query(head_dim = 128, group = 4);
        pariskv_vote = pariskv_vote(head_dim = 128, threads = 256, placement = hbm);
        pariskv_topc = pariskv_topc(head_dim = 128, threads = 256);
        pariskv_rerank = pariskv_rerank(head_dim = 128, group = 4, k_max = 2048, threads = 256,
                                        placement = hbm);
        pariskv_rerank_mb = pariskv_rerank(head_dim = 128, group = 4, k_max = 2048,
                                           threads = 256, placement = hbm,
                                           select = multiblock);
        mapped_read = mapped_read(loads_in_flight = 4, threads = 256);
        append_rows = append_rows(threads = 128);
        convert = convert(threads = 256);
    }
}

mod select_stages;

pub use kernels::*;
pub use select_stages::{select_args, SelectArgsError, SelectBuffers};

use crate::gpu::Arg;
use crate::launch::{DevicePtr, DevicePtrMut, KernelArgs};

/// What a plan that also scores the tail (`PlanSpec::tail`) takes after the plan's own
/// arguments: the key rows' table, the sequences' lengths, and the scores with their row stride.
#[derive(Clone, Copy, Debug)]
pub struct TailArgs {
    pub k_rows: DevicePtr<DevicePtr<u16>>,
    pub n_total: DevicePtr<i32>,
    pub scores: DevicePtrMut<f32>,
    pub ld_scores: i32,
}

/// The arguments of a plan: `args` as they are, or, for a plan that also scores the tail, with
/// `tail` after them, as `plan_tail` takes them.
pub fn plan_args(args: plan::Args, tail: Option<TailArgs>) -> Vec<Arg> {
    match tail {
        None => args.args(),
        Some(tail) => plan_tail::Args {
            q: args.q,
            sigma2: args.sigma2,
            fixed_channels: args.fixed_channels,
            rot: args.rot,
            budget: args.budget,
            seg_words: args.seg_words,
            seg_scales: args.seg_scales,
            max_seg: args.max_seg,
            n_stored: args.n_stored,
            n_heads: args.n_heads,
            q_store: args.q_store,
            depths: args.depths,
            class_count: args.class_count,
            runs: args.runs,
            staged_runs: args.staged_runs,
            stage_words: args.stage_words,
            stage_scales: args.stage_scales,
            stage_planes: args.stage_planes,
            status: args.status,
            k_rows: tail.k_rows,
            n_total: tail.n_total,
            scores: tail.scores,
            ld_scores: tail.ld_scores,
        }
        .args(),
    }
}

/// The arguments of a scan: `args` as they are, or, for a scan that also writes the peaks of
/// its 32-token halves (`ScanSpec::peaks`), with `peaks` (the buffer and its row stride in
/// words) after them, as `scan_peaks` takes them.
pub fn scan_args(args: scan::Args, peaks: Option<(DevicePtrMut<u32>, i32)>) -> Vec<Arg> {
    match peaks {
        None => args.args(),
        Some((peaks, ld_peaks)) => scan_peaks::Args {
            runs: args.runs,
            class_count: args.class_count,
            q_store: args.q_store,
            n_stored: args.n_stored,
            max_seg: args.max_seg,
            n_heads: args.n_heads,
            scores: args.scores,
            ld_scores: args.ld_scores,
            peaks,
            ld_peaks,
        }
        .args(),
    }
}

#[cfg(test)]
mod tests;
