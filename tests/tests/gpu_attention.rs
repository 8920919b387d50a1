//! GPU tests of the `attention` kernel (SPEC §6: `o_h = softmax(scale · q_h·K_S) · V_S` per
//! query head over its own selected rows, read through `sel_pos`) against the f64 reference
//! `attention::attend`, and one chained test of the whole selection pipeline.
//!
//! Coverage:
//! - `gpu_attention_matches_reference`: G = 7 with D = 64, 128, 256, plus G = 1 and G = 8 at
//!   D = 128; the head dimensions that are not powers of two (80, 96, 192) and G = 16 at
//!   D = 64, 96, 128, 192; block sizes 32 to 1,024 threads and 1 to 8 rows per warp; k from 0 to 2048 (a full
//!   selection is `36 + k` rows, all distinct positions among the `G*k + 36` fetched rows); per
//!   launch some heads with fewer rows (1, a random count) and one with none (its output must be
//!   exactly 0); two softmax scales, `1/sqrt(D)` and 0.3. Every head with rows must have relative
//!   error `||o − ref|| / ||ref|| <= 1e-3` (fp32 logits, `expf` and accumulation over at most a
//!   few thousand rows give ~1e-6; the largest error is printed).
//! - `gpu_attention_split_matches_reference`: the same over 2 to 16 blocks a query head
//!   (`splits`), the last to arrive merging their partials; one row and no row among them, and
//!   the arrival counters left zero by every launch (the second launch runs on them).
//! - `gpu_attention_cluster_merge_matches_the_reference`: 2 to 8 splits merged in a
//!   thread-block cluster (`cluster_merge`, opt-in), the same checks.
//! - `gpu_attention_prefetched_rows_match_the_reference`: the rows prefetched into L2 before
//!   the first batch (`prefetch_rows`, opt-in), one block a head and several, the same checks.
//! - `gpu_attention_chain_oracle_select_fetch_attention_{hbm,host}`: B = 3 sequences of
//!   different lengths (one shorter than `36 + k`, so everything is selected), H = 2, G = 7 with
//!   D = 128 and G = 16 with D = 96, k = 512, K/V rows in HBM or in mapped host memory. On the
//!   GPU: oracle scores over
//!   `[NULL, n_total)` → select → fetch → attention. The oracle scores are checked against
//!   `score_exact` (fp32 rounding), the selection against `Selection::from_scores` on the same
//!   (GPU) scores exactly, the fetched rows byte for byte, and the outputs against
//!   `attend_group` over the original K/V rows within 1e-3.

use codegen::spec::{
    AttentionRows, AttentionSpec, FetchSpec, KvRows, OracleSpec, Placement, SelectSpec,
};
use fathom_tests::gpu_test;
use fathom_tests::inputs;
use fathom_tests::kit::GpuTest;
use fathom_tests::select_kernels::{
    check_selection, dot_tolerance, relative_error, AttentionArgs, AttentionKernel, FetchArgs,
    FetchKernel, HeadTable, Mismatches, OracleArgs, OracleKernel, SelectArgs, SelectKernels,
    ALWAYS, POISON,
};
use half::bf16;
use rand::seq::index::sample;
use rand::seq::SliceRandom;
use rand::Rng;
use reference::attention::{attend, attend_group, default_scale};
use reference::score::score_exact;
use reference::select::Selection;
use runtime::gpu::Gpu;

const BATCH: usize = 3;
const KV_HEADS: usize = 2;
/// The largest relative error accepted (SPEC §6 asks for fp32 math; ~1e-6 is expected).
const MAX_RELATIVE_ERROR: f64 = 1e-3;

fn bf16_bits(x: &[bf16]) -> Vec<u16> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// `n` bf16 value rows of `d` channels in [-1, 1).
fn values(rng: &mut impl Rng, n: usize, d: usize) -> Vec<bf16> {
    (0..n * d)
        .map(|_| bf16::from_f32(rng.gen_range(-1.0f32..1.0)))
        .collect()
}

/// The `g`-th query of KV head `kh`, as f64.
fn query(queries: &[f32], kh: usize, g: usize, group: usize, d: usize) -> Vec<f64> {
    let qh = kh * group + g;
    queries[qh * d..(qh + 1) * d]
        .iter()
        .map(|&x| f64::from(x))
        .collect()
}

/// One attention spec on fetched rows made up on the host.
fn attention_case(gpu: &Gpu, rng: &mut impl Rng, seed: u64, spec: AttentionSpec, k: usize) {
    let kernel = AttentionKernel::load(gpu, spec).expect("attention kernel compiles");
    let d = spec.head_dim as usize;
    let g = spec.group as usize;
    let kv = BATCH * KV_HEADS;
    let sc = k + ALWAYS;
    let uc = g * k + ALWAYS;
    let k_sel: Vec<Vec<bf16>> = (0..kv).map(|_| inputs::keys(rng, uc, d)).collect();
    let v_sel: Vec<Vec<bf16>> = (0..kv).map(|_| values(rng, uc, d)).collect();
    let flat =
        |rows: &[Vec<bf16>]| -> Vec<u16> { rows.iter().flat_map(|r| bf16_bits(r)).collect() };
    let k_dev = gpu.upload(&flat(&k_sel)).expect("upload k_sel");
    let v_dev = gpu.upload(&flat(&v_sel)).expect("upload v_sel");

    // Row counts: full selections, and per launch one head with none, one with one row, one
    // with a random count.
    let heads = kv * g;
    let mut counts: Vec<usize> = vec![sc; heads];
    let special: Vec<usize> = sample(rng, heads, 3.min(heads)).into_vec();
    for (i, &qh) in special.iter().enumerate() {
        counts[qh] = match i {
            0 => 0,
            1 => 1,
            _ => rng.gen_range(1..=sc),
        };
    }
    let mut sel_pos = vec![-1i32; heads * sc];
    let mut rows: Vec<Vec<usize>> = Vec::with_capacity(heads);
    for (qh, &count) in counts.iter().enumerate() {
        let mut r = sample(rng, uc, count).into_vec();
        r.sort_unstable();
        for (j, &p) in r.iter().enumerate() {
            sel_pos[qh * sc + j] = p as i32;
        }
        rows.push(r);
    }
    let queries = inputs::vectors(rng, heads, d);
    let pos_dev = gpu.upload(&sel_pos).expect("upload sel_pos");
    let counts_i32: Vec<i32> = counts.iter().map(|&c| c as i32).collect();
    let count_dev = gpu.upload(&counts_i32).expect("upload sel_count");
    let q_dev = gpu.upload(&queries).expect("upload queries");
    let grid = spec
        .launch(BATCH as u64, KV_HEADS as u64)
        .expect("attention geometry");

    // A split kernel's scratch: poisoned partials, zero counters that every launch must leave
    // zero (the second scale's launch runs on what the first left).
    let partials = gpu
        .filled::<f32>(spec.partial_words(heads as u64).max(1) as usize, POISON)
        .expect("partials");
    let arrivals = gpu
        .filled::<u32>(spec.arrival_words(heads as u64).max(1) as usize, 0)
        .expect("arrivals");
    for scale in [default_scale(d) as f32, 0.3f32] {
        let out = gpu.filled::<f32>(heads * d, POISON).expect("out");
        let args = AttentionArgs {
            k_sel: k_dev.addr(),
            v_sel: v_dev.addr(),
            sel_pos: pos_dev.addr(),
            sel_count: count_dev.addr(),
            q: q_dev.addr(),
            scale,
            out: out.addr(),
            k,
            partials: partials.addr(),
            arrivals: arrivals.addr(),
        };
        kernel.launch(gpu, grid, &args).expect("attention launch");
        gpu.synchronize().expect("attention runs");
        let got = out.download().expect("download out");
        let left = arrivals.download().expect("download arrivals");
        let mut m = Mismatches::new(
            format!(
                "attention D={d} G={g} threads {} rows/warp {} splits {} k={k} scale {scale}",
                spec.threads, spec.rows_per_warp, spec.splits
            ),
            seed,
        );
        m.check(left.iter().all(|&a| a == 0), || {
            format!(
                "arrival counters left {:?}, not zero",
                &left[..left.len().min(8)]
            )
        });
        let mut worst = 0.0f64;
        for qh in 0..heads {
            let kh = qh / g;
            let o = &got[qh * d..(qh + 1) * d];
            if rows[qh].is_empty() {
                m.check(o.iter().all(|&x| x == 0.0), || {
                    format!("query head {qh} has no rows; output {:?}", &o[..4.min(d)])
                });
                continue;
            }
            let q = query(&queries, kh, qh % g, g, d);
            let want = attend(&q, &k_sel[kh], &v_sel[kh], d, &rows[qh], f64::from(scale));
            let err = relative_error(o, &want);
            worst = worst.max(err);
            m.check(err <= MAX_RELATIVE_ERROR, || {
                let c = o
                    .iter()
                    .zip(&want)
                    .position(|(a, b)| (f64::from(*a) - b).abs() > 1e-3 * b.abs().max(1e-3))
                    .unwrap_or(0);
                format!(
                    "query head {qh} ({} rows): relative error {err:.3e}; channel {c}: {} vs {}",
                    rows[qh].len(),
                    o[c],
                    want[c]
                )
            });
        }
        eprintln!(
            "attention D={d} G={g} t{} r{} s{} k={k} scale {scale}: largest relative error {worst:.2e}",
            spec.threads, spec.rows_per_warp, spec.splits
        );
        m.finish();
    }
}

gpu_test!(gpu_attention_matches_reference, |t| {
    // (D, G, threads, rows per warp, k); `None` for k draws one.
    let configs: [(u32, u32, u32, u32, Option<usize>); 15] = [
        (64, 7, 256, 4, None),
        (128, 7, 256, 4, None),
        (256, 7, 256, 4, Some(2048)),
        (128, 7, 128, 1, None),
        (256, 7, 1024, 8, None),
        (64, 7, 32, 2, Some(0)),
        (128, 1, 256, 4, Some(2048)),
        (128, 8, 64, 8, None),
        // Head dimensions that are not powers of two (each lane holds strided channel pairs,
        // some lanes fewer), and G = 16.
        (80, 5, 256, 4, None),
        (96, 1, 128, 2, Some(2048)),
        (96, 16, 256, 4, None),
        (192, 16, 1024, 8, None),
        (192, 3, 64, 1, Some(0)),
        (128, 16, 256, 4, None),
        (64, 16, 32, 8, None),
    ];
    for (head_dim, group, threads, rows_per_warp, k) in configs {
        let spec = AttentionSpec {
            head_dim,
            group,
            threads,
            rows_per_warp,
            rows: AttentionRows::Fetched,
            kv_rows: KvRows::Separate,
            splits: 1,
            cluster_merge: false,
            prefetch_rows: false,
        };
        let k = k.unwrap_or_else(|| t.rng.gen_range(1..=2048));
        attention_case(&t.gpu, &mut t.rng, t.seed, spec, k);
    }
});

/// A split case: (D, G, threads, rows per warp, splits, k; `None` for k draws one), the
/// partials merged through global memory or in a cluster.
type SplitCase = (u32, u32, u32, u32, u32, Option<usize>);

fn split_cases(t: &mut GpuTest, configs: &[SplitCase], cluster_merge: bool, prefetch_rows: bool) {
    for &(head_dim, group, threads, rows_per_warp, splits, k) in configs {
        let spec = AttentionSpec {
            head_dim,
            group,
            threads,
            rows_per_warp,
            rows: AttentionRows::Fetched,
            kv_rows: KvRows::Separate,
            splits,
            cluster_merge,
            prefetch_rows,
        };
        let k = k.unwrap_or_else(|| t.rng.gen_range(1..=2048));
        attention_case(&t.gpu, &mut t.rng, t.seed, spec, k);
    }
}

gpu_test!(gpu_attention_split_matches_reference, |t| {
    // Every launch has a head with no row, one with one row (fewer rows than splits) and one
    // with a random count.
    let configs: [SplitCase; 9] = [
        (128, 4, 512, 8, 4, Some(512)),
        (128, 4, 256, 4, 8, Some(512)),
        (128, 7, 256, 4, 2, None),
        (64, 7, 128, 2, 16, None),
        (96, 16, 256, 4, 3, None),
        (256, 1, 1024, 8, 5, Some(2048)),
        (192, 3, 64, 1, 4, Some(0)),
        (80, 5, 32, 8, 16, Some(7)),
        (128, 8, 512, 8, 8, None),
    ];
    split_cases(&mut t, &configs, false, false);
});

// The splits merged in a thread-block cluster (`cluster_merge`, opt-in; 2 to 8 splits): the
// same checks at as many splits as a cluster may have; the partials and counters are never
// touched.
gpu_test!(gpu_attention_cluster_merge_matches_the_reference, |t| {
    let configs: [SplitCase; 7] = [
        (128, 4, 512, 8, 4, Some(512)),
        (128, 4, 128, 8, 8, Some(512)),
        (128, 7, 256, 4, 2, None),
        (96, 16, 256, 4, 3, None),
        (256, 1, 1024, 8, 5, Some(2048)),
        (192, 3, 64, 1, 4, Some(0)),
        (80, 5, 32, 8, 7, Some(7)),
    ];
    split_cases(&mut t, &configs, true, false);
});

// The rows prefetched into L2 before the first batch (`prefetch_rows`, opt-in): the same checks
// at one block a head and at several, rows of 160 bytes (D = 80, not a line's multiple) and of
// 512, G = 7 and 16, no row at all.
gpu_test!(gpu_attention_prefetched_rows_match_the_reference, |t| {
    let configs: [SplitCase; 8] = [
        (128, 4, 128, 4, 8, Some(512)),
        (128, 4, 1024, 8, 1, Some(512)),
        (128, 7, 256, 4, 2, None),
        (80, 5, 32, 8, 16, Some(7)),
        (96, 16, 256, 4, 1, None),
        (256, 1, 1024, 8, 5, Some(2048)),
        (192, 3, 64, 1, 4, Some(0)),
        (64, 7, 128, 2, 1, None),
    ];
    split_cases(&mut t, &configs, false, true);
});

/// oracle → select → fetch → attention on the GPU against the reference on the same scores, at
/// G = 7 (D = 128) and at D = 96 with G = 16.
fn chain(t: &mut GpuTest, placement: Placement) {
    for (d, g) in [(128, 7), (96, 16)] {
        chain_case(&t.gpu, &mut t.rng, t.seed, placement, d, g);
    }
}

fn chain_case(gpu: &Gpu, rng: &mut impl Rng, seed: u64, placement: Placement, d: usize, g: usize) {
    let k = 512usize;
    let kv = BATCH * KV_HEADS;
    let heads = kv * g;
    let oracle = OracleKernel::load(
        gpu,
        OracleSpec {
            head_dim: d as u32,
            group: g as u32,
            threads: 256,
            placement,
            kv_rows: codegen::spec::KvRows::Separate,
        },
    )
    .expect("oracle compiles");
    let select = SelectKernels::load(
        gpu,
        SelectSpec {
            group: g as u32,
            k_max: 2048,
            threads: 256,
            items_per_thread: 16,
            algorithm: codegen::spec::SelectAlgorithm::Radix,
            coarse_floor: false,
            owned_tiles: false,
        },
    )
    .expect("select compiles");
    let fetch = FetchKernel::load(
        gpu,
        FetchSpec {
            head_dim: d as u32,
            group: g as u32,
            threads: 256,
            placement,
            kv_rows: codegen::spec::KvRows::Separate,
        },
    )
    .expect("fetch compiles");
    let attention = AttentionKernel::load(
        gpu,
        AttentionSpec {
            head_dim: d as u32,
            group: g as u32,
            threads: 256,
            rows_per_warp: 4,
            rows: AttentionRows::Fetched,
            kv_rows: KvRows::Separate,
            splits: 1,
            cluster_merge: false,
            prefetch_rows: false,
        },
    )
    .expect("attention compiles");

    let mut lengths = vec![
        rng.gen_range(30_000..50_000),
        rng.gen_range(2_000..5_000),
        rng.gen_range(40..ALWAYS + k),
    ];
    lengths.shuffle(rng);
    let max_n = *lengths.iter().max().expect("three sequences");
    let keys: Vec<Vec<bf16>> = (0..kv)
        .map(|kh| inputs::keys(rng, lengths[kh / KV_HEADS], d))
        .collect();
    let vals: Vec<Vec<bf16>> = (0..kv)
        .map(|kh| values(rng, lengths[kh / KV_HEADS], d))
        .collect();
    let queries = inputs::vectors(rng, heads, d);
    let k_rows = HeadTable::upload(
        gpu,
        placement,
        &keys.iter().map(|k| bf16_bits(k)).collect::<Vec<_>>(),
    )
    .expect("upload keys");
    let v_rows = HeadTable::upload(
        gpu,
        placement,
        &vals.iter().map(|v| bf16_bits(v)).collect::<Vec<_>>(),
    )
    .expect("upload values");
    let q = gpu.upload(&queries).expect("upload queries");
    let totals: Vec<i32> = lengths.iter().map(|&n| n as i32).collect();
    let n_total = gpu.upload(&totals).expect("upload n_total");
    let what = format!(
        "chain {} D={d} G={g} lengths {lengths:?}",
        placement.as_str()
    );

    // Oracle scores of every token.
    let ld = max_n;
    let scores = gpu.filled::<f32>(heads * ld, POISON).expect("scores");
    let grid = oracle
        .spec
        .launch(BATCH as u64, KV_HEADS as u64, max_n as u64)
        .expect("oracle geometry");
    oracle
        .launch(
            gpu,
            grid,
            &OracleArgs {
                k_rows: k_rows.addr(),
                q: q.addr(),
                range_start: None,
                range_end: n_total.addr(),
                scores: scores.addr(),
                ld_scores: ld,
                num_kv_heads: KV_HEADS,
            },
        )
        .expect("oracle launch");
    gpu.synchronize().expect("oracle runs");
    let got_scores = scores.download().expect("download scores");
    let mut m = Mismatches::new(format!("{what}: oracle scores"), seed);
    let mut per_kv: Vec<Vec<Vec<f64>>> = Vec::with_capacity(kv);
    for kh in 0..kv {
        let n = lengths[kh / KV_HEADS];
        let qs = inputs::group_queries(&queries, kh, g, d);
        let exact = score_exact(&keys[kh], d, 0..n, &qs);
        let mut gpu_heads = Vec::with_capacity(g);
        for (h, q) in qs.iter().enumerate() {
            let row = &got_scores[(kh * g + h) * ld..(kh * g + h) * ld + n];
            for (i, &s) in row.iter().enumerate() {
                let key = &keys[kh][i * d..(i + 1) * d];
                let tol = dot_tolerance(q, key.iter().map(|x| x.to_f64()));
                m.check((f64::from(s) - exact[h][i]).abs() <= tol, || {
                    format!("kv head {kh} g {h} token {i}: {s} vs {}", exact[h][i])
                });
            }
            gpu_heads.push(row.iter().map(|&s| f64::from(s)).collect());
        }
        per_kv.push(gpu_heads);
    }
    m.finish();

    // Selection on the same scores.
    let reference: Vec<Selection> = per_kv
        .iter()
        .map(|heads| Selection::from_scores(heads, k))
        .collect();
    let selected = select
        .run(
            gpu,
            &SelectArgs {
                scores: scores.addr(),
                ld_scores: ld,
                n_total: n_total.addr(),
                n_stored: 0,
                peaks: 0,
                ld_peaks: 0,
                k,
                batch: BATCH,
                kv_heads: KV_HEADS,
                max_tokens: max_n,
            },
        )
        .expect("select runs");
    let got_sel = selected.download().expect("download selection");
    let mut m = Mismatches::new(format!("{what}: selection"), seed);
    check_selection(&got_sel, &reference, &mut m);
    m.finish();

    // Fetch the union rows.
    let uc = g * k + ALWAYS;
    let k_sel = gpu.filled::<u16>(kv * uc * d, POISON).expect("k_sel");
    let v_sel = gpu.filled::<u16>(kv * uc * d, POISON).expect("v_sel");
    let grid = fetch
        .spec
        .launch(BATCH as u64, KV_HEADS as u64, k as u64)
        .expect("fetch geometry");
    fetch
        .launch(
            gpu,
            grid,
            &FetchArgs {
                k_rows: k_rows.addr(),
                v_rows: v_rows.addr(),
                uni: selected.uni.addr(),
                uni_count: selected.uni_count.addr(),
                k_sel: k_sel.addr(),
                v_sel: v_sel.addr(),
                k,
                num_kv_heads: KV_HEADS,
            },
        )
        .expect("fetch launch");
    gpu.synchronize().expect("fetch runs");
    let got_k = k_sel.download().expect("download k_sel");
    let got_v = v_sel.download().expect("download v_sel");
    let mut m = Mismatches::new(format!("{what}: fetched rows"), seed);
    for (kh, reference) in reference.iter().enumerate() {
        for (u, &t) in reference.union.iter().enumerate() {
            let at = (kh * uc + u) * d;
            m.check(
                got_k[at..at + d] == bf16_bits(&keys[kh][t * d..(t + 1) * d]),
                || format!("kv head {kh}: K row {u} is not token {t}'s"),
            );
            m.check(
                got_v[at..at + d] == bf16_bits(&vals[kh][t * d..(t + 1) * d]),
                || format!("kv head {kh}: V row {u} is not token {t}'s"),
            );
        }
    }
    m.finish();

    // Attention over each head's own rows.
    let scale = default_scale(d);
    let out = gpu.filled::<f32>(heads * d, POISON).expect("out");
    let grid = attention
        .spec
        .launch(BATCH as u64, KV_HEADS as u64)
        .expect("attention geometry");
    attention
        .launch(
            gpu,
            grid,
            &AttentionArgs {
                k_sel: k_sel.addr(),
                v_sel: v_sel.addr(),
                sel_pos: selected.sel_pos.addr(),
                sel_count: selected.sel_count.addr(),
                q: q.addr(),
                scale: scale as f32,
                out: out.addr(),
                k,
                partials: 0,
                arrivals: 0,
            },
        )
        .expect("attention launch");
    gpu.synchronize().expect("attention runs");
    let got = out.download().expect("download out");
    let mut m = Mismatches::new(format!("{what}: attention"), seed);
    let mut worst = 0.0f64;
    for (kh, selection) in reference.iter().enumerate() {
        let qs = inputs::group_queries(&queries, kh, g, d);
        let want = attend_group(&qs, &keys[kh], &vals[kh], d, selection, scale);
        for (h, w) in want.iter().enumerate() {
            let qh = kh * g + h;
            let err = relative_error(&got[qh * d..(qh + 1) * d], w);
            worst = worst.max(err);
            m.check(err <= MAX_RELATIVE_ERROR, || {
                format!("kv head {kh} g {h}: relative error {err:.3e}")
            });
        }
    }
    eprintln!("{what}: largest relative attention error {worst:.2e}");
    m.finish();
}

gpu_test!(gpu_attention_chain_oracle_select_fetch_attention_hbm, |t| {
    chain(&mut t, Placement::Hbm);
});

gpu_test!(
    gpu_attention_chain_oracle_select_fetch_attention_host,
    |t| {
        chain(&mut t, Placement::Host);
    }
);
