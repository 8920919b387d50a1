//! The rerank's many-block top-k (`PariskvRerankSpec::select = multiblock`: `_chunk`, `_merge`,
//! `_write`) run on the CPU, exactly as rendered (`cpu_cuda`: every CUDA thread a fiber, switched
//! in a seeded random order where threads wait for each other), against the reference
//! selection of the same candidate scores (`top_k_of`, ties by the lower token, with §12's sink,
//! window and every-token rules): identical `sel`, `sel_count`, `uni`, `uni_count`, `sel_pos`,
//! nothing written past the counts (`check_selection`, as on a GPU). Every case also runs the
//! one-block `_select` of the same spec on the same inputs, and the two must leave every output
//! buffer identical, poison included. These tests need a C++17 compiler (`c++`), not a GPU; the
//! GPU runs the whole retrieval with it in `gpu_pariskv.rs`.
//!
//! Small blocks (32 to 128 threads, 128 to 1,024 candidates a block) so that a few thousand
//! candidates are many `_chunk` blocks and `k` near `k_max` needs several `_merge` levels:
//! C = 0, C < k, C = k, one block, whole blocks, a partial last block, every retrievable token a
//! candidate; lengths at every boundary of `36 + k`; k from 0 to `k_max`; G = 1, 4, 7, 16;
//! D = 64, 96, 128; score families with wide ties, signed zeros, keys that differ only in their
//! lowest bits, every exponent, all negative. `mutations_are_caught` then breaks the rendered
//! source where a mistake is easy and checks that these cases notice each one.

use codegen::spec::pariskv::{select_chunk, RerankSelect};
use codegen::spec::{PariskvRerankSpec, Placement};
use fathom_tests::inputs;
use fathom_tests::pariskv_select_cpu::{reference_selection, CpuRerankArgs, CpuRerankSelect};
use fathom_tests::select_case::boundary_lengths;
use fathom_tests::select_kernels::{check_selection, Mismatches, ALWAYS};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

fn spec(head_dim: u32, group: u32, k_max: u32, threads: u32) -> PariskvRerankSpec {
    PariskvRerankSpec {
        head_dim,
        group,
        k_max,
        threads,
        placement: Placement::Hbm,
        vector_loads: false,
        select: RerankSelect::Multiblock,
        decode_table: false,
    }
}

/// How the candidates of a head score.
#[derive(Clone, Copy, Debug)]
enum Scores {
    /// Spread values, a few ties.
    Gaussian,
    /// Integers in -3..=3: wide ties at every key.
    SmallIntegers,
    /// 0.0 and -0.0 (equal), a few ±1.
    SignedZeros,
    /// One value: the top k are the first k candidates.
    Constant,
    /// One value's neighbours, 0 to 5 ulps above it: keys that differ only in their last bits.
    NearTies,
    /// Every exponent, both signs, subnormals and ±f64::MAX.
    Wide,
    /// All negative (their keys start with zero bits).
    Negative,
    /// A run of equal scores straddling the k-th place.
    Straddle,
}

const FAMILIES: [Scores; 8] = [
    Scores::Gaussian,
    Scores::SmallIntegers,
    Scores::SignedZeros,
    Scores::Constant,
    Scores::NearTies,
    Scores::Wide,
    Scores::Negative,
    Scores::Straddle,
];

fn scores(rng: &mut impl Rng, family: Scores, c: usize, k: usize) -> Vec<f64> {
    let gauss = |rng: &mut dyn rand::RngCore| -> f64 {
        (0..6).map(|_| rng.gen::<f64>()).sum::<f64>() - 3.0
    };
    match family {
        Scores::Gaussian => (0..c).map(|_| 3.7 * gauss(rng)).collect(),
        Scores::SmallIntegers => (0..c).map(|_| f64::from(rng.gen_range(-3..=3))).collect(),
        Scores::SignedZeros => (0..c)
            .map(|_| [0.0, -0.0, 0.0, -0.0, 1.0, -1.0][rng.gen_range(0..6)])
            .collect(),
        Scores::Constant => vec![0.625; c],
        Scores::NearTies => {
            let base = 1.3f64.to_bits();
            (0..c)
                .map(|_| f64::from_bits(base + rng.gen_range(0..6)))
                .collect()
        }
        Scores::Wide => (0..c)
            .map(|_| match rng.gen_range(0..10) {
                0 => f64::MAX,
                1 => -f64::MAX,
                2 => f64::from_bits(rng.gen_range(1..1 << 52)),
                _ => {
                    let e = rng.gen_range(-1000..1000);
                    let sign = if rng.gen() { 1.0 } else { -1.0 };
                    sign * rng.gen_range(1.0..2.0) * 2f64.powi(e)
                }
            })
            .collect(),
        Scores::Negative => (0..c).map(|_| -1e-3 - gauss(rng).abs()).collect(),
        Scores::Straddle => {
            let mut s: Vec<f64> = (0..c).map(|_| -10.0 - gauss(rng).abs()).collect();
            let top = k.saturating_sub(3).min(c);
            for v in s.iter_mut().take(top) {
                *v = 10.0 + gauss(rng).abs();
            }
            for v in s.iter_mut().skip(top).take(rng.gen_range(1..200)) {
                *v = 2.5;
            }
            s.shuffle(rng);
            s
        }
    }
}

/// How many candidates a head of `n_r` retrievable tokens has: the edges around `k` and the
/// block size, or any number up to `n_r`.
fn candidate_count(rng: &mut impl Rng, n_r: usize, k: usize, chunk: usize) -> usize {
    let blocks = rng.gen_range(1..4);
    let pick = [
        0,
        1,
        k.saturating_sub(1),
        k,
        k + 1,
        chunk,
        blocks * chunk,
        blocks * chunk + 1,
        blocks * chunk - 1,
        n_r,
        rng.gen_range(0..=n_r),
        rng.gen_range(0..=n_r),
    ];
    pick[rng.gen_range(0..pick.len())].min(n_r)
}

/// Candidates of every (sequence, KV head), their scores, and the reference selections.
struct Inputs {
    cand_score: Vec<f64>,
    cand: Vec<i32>,
    cand_count: Vec<i32>,
    ld_cand: usize,
    n_total: Vec<i32>,
    what: String,
}

fn draw(
    rng: &mut impl Rng,
    lengths: &[usize],
    kv_heads: usize,
    k: usize,
    chunk: usize,
    families: &[Scores],
) -> (Inputs, Vec<Vec<f64>>, Vec<Vec<i32>>) {
    let heads = lengths.len() * kv_heads;
    let mut lists = Vec::with_capacity(heads);
    let mut all_scores = Vec::with_capacity(heads);
    let mut used = Vec::new();
    for head in 0..heads {
        let n = lengths[head / kv_heads];
        let n_r = n.saturating_sub(ALWAYS);
        let c = candidate_count(rng, n_r, k, chunk);
        let mut list: Vec<i32> = rand::seq::index::sample(rng, n_r, c)
            .into_iter()
            .map(|i| (i + 4) as i32)
            .collect();
        list.sort_unstable();
        let family = families[rng.gen_range(0..families.len())];
        used.push((c, family));
        all_scores.push(scores(rng, family, c, k));
        lists.push(list);
    }
    // Rows with room to spare, so that no row is aligned to anything in particular.
    let ld_cand = lists.iter().map(Vec::len).max().unwrap_or(0) + 3;
    let mut cand = vec![-7; heads * ld_cand];
    // Past C the scores are the largest there is: a kernel that read one would select it.
    let mut cand_score = vec![f64::MAX; heads * ld_cand];
    for (head, (list, s)) in lists.iter().zip(&all_scores).enumerate() {
        cand[head * ld_cand..head * ld_cand + list.len()].copy_from_slice(list);
        cand_score[head * ld_cand..head * ld_cand + s.len()].copy_from_slice(s);
    }
    let inputs = Inputs {
        cand_score,
        cand,
        cand_count: lists.iter().map(|l| l.len() as i32).collect(),
        ld_cand,
        n_total: lengths.iter().map(|&n| n as i32).collect(),
        what: format!("lengths {lengths:?}, (C, scores) {used:?}"),
    };
    (inputs, all_scores, lists)
}

/// One top-k over `lengths` (one per sequence) of `kv_heads` KV heads; the report of what
/// differed from the reference or from the one-block `_select`, if anything did.
fn case(
    many: &CpuRerankSelect,
    single: Option<&CpuRerankSelect>,
    rng: &mut impl Rng,
    seed: u64,
    (lengths, kv_heads): (&[usize], usize),
    k: usize,
    families: &[Scores],
) -> Option<String> {
    let spec = many.spec;
    let chunk = select_chunk(spec.threads, spec.k_max) as usize;
    let (inputs, scores, lists) = draw(rng, lengths, kv_heads, k, chunk, families);
    let g = spec.group as usize;
    let reference: Vec<_> = (0..lengths.len() * kv_heads)
        .map(|head| {
            let n = lengths[head / kv_heads];
            reference_selection(n, &lists[head], &scores[head], k, g)
        })
        .collect();
    let args = CpuRerankArgs {
        cand_score: &inputs.cand_score,
        cand: &inputs.cand,
        cand_count: &inputs.cand_count,
        ld_cand: inputs.ld_cand,
        n_total: &inputs.n_total,
        k,
        kv_heads,
    };
    let what = format!(
        "{} on the CPU: k={k} H={kv_heads} {}",
        many.name(),
        inputs.what
    );
    let got = match many.run(&args, seed) {
        Ok(got) => got,
        Err(e) => return Some(format!("{what}: {e}")),
    };
    let mut m = Mismatches::new(what.clone(), seed);
    check_selection(&got, &reference, &mut m);
    if let Some(single) = single {
        match single.run(&args, seed) {
            Ok(one) => {
                m.check(one.sel == got.sel, || "sel differs from _select's".into());
                m.check(one.sel_pos == got.sel_pos, || {
                    "sel_pos differs from _select's".into()
                });
                m.check(one.sel_count == got.sel_count, || {
                    "sel_count differs from _select's".into()
                });
                m.check(one.uni == got.uni, || "uni differs from _select's".into());
                m.check(one.uni_count == got.uni_count, || {
                    "uni_count differs from _select's".into()
                });
            }
            Err(e) => return Some(format!("{what}: _select: {e}")),
        }
    }
    m.report()
}

/// The cases every spec runs: boundary lengths and long rows for k = 0, 1, a few, `k_max`.
fn cases(
    many: &CpuRerankSelect,
    single: &CpuRerankSelect,
    rng: &mut impl Rng,
    seed: u64,
) -> Vec<String> {
    let k_max = many.spec.k_max as usize;
    let chunk = select_chunk(many.spec.threads, many.spec.k_max) as usize;
    let mut failures = Vec::new();
    for k in [0, 1, rng.gen_range(2..k_max.max(3)), k_max] {
        // The select's edges, then rows of more than one chunk.
        let mut lengths = boundary_lengths(k);
        lengths.extend([
            ALWAYS + chunk + rng.gen_range(0..chunk),
            rng.gen_range(2_000..4_000),
            rng.gen_range(4_000..7_000),
        ]);
        lengths.shuffle(rng);
        for part in lengths.chunks(3) {
            failures.extend(case(many, Some(single), rng, seed, (part, 2), k, &FAMILIES));
        }
    }
    failures
}

fn assert_none(failures: Vec<String>) {
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn many_block_top_k_matches_the_reference_and_select() {
    let (mut rng, seed) = inputs::rng_and_seed("many_block_top_k_matches_the_reference_and_select");
    // (D, G, k_max, threads): 128 to 1,024 candidates a block, 4 or 8 a thread; at k = k_max
    // the 96/64 spec merges two slots a block.
    for (d, g, k_max, threads) in [
        (128, 4, 40, 32),
        (64, 7, 100, 64),
        (96, 1, 64, 32),
        (128, 16, 300, 128),
        (128, 2, 120, 32),
    ] {
        let many = spec(d, g, k_max, threads);
        let single = PariskvRerankSpec {
            select: RerankSelect::Single,
            ..many
        };
        let many = CpuRerankSelect::build(many).expect("builds");
        let single = CpuRerankSelect::build(single).expect("builds");
        assert_none(cases(&many, &single, &mut rng, seed));
    }
}

/// One long sequence whose candidates all tie (or nearly), at `k` from 1 to `k_max`: the
/// lowest tokens must win in every block and at every merge.
#[test]
fn many_block_top_k_breaks_wide_ties_by_token() {
    let (mut rng, seed) = inputs::rng_and_seed("many_block_top_k_breaks_wide_ties_by_token");
    let many = CpuRerankSelect::build(spec(128, 4, 64, 32)).expect("builds");
    let mut failures = Vec::new();
    for k in [1, 17, 63, 64] {
        let lengths = [rng.gen_range(8_000..9_000), ALWAYS + k + 1];
        for families in [
            [Scores::Constant],
            [Scores::NearTies],
            [Scores::SignedZeros],
        ] {
            failures.extend(case(
                &many,
                None,
                &mut rng,
                seed,
                (&lengths, 1),
                k,
                &families,
            ));
        }
    }
    assert_none(failures);
}

/// The inputs of `mutations_are_caught`.
const MUTATION_SEED: u64 = 11;

/// Breaks the rendered many-block top-k where a mistake is easy to make, one change at a time;
/// the cases of this file must catch each (a mismatch, or the CPU run refusing the kernel).
#[test]
fn mutations_are_caught() {
    let spec = spec(128, 4, 40, 32);
    let source = codegen::render::render(&spec).expect("renders");
    let mutations: [(&str, &str, &str); 12] = [
        (
            "one tie too many",
            "else if (t.equal(key[i]) && equal_before < t.need)",
            "else if (t.equal(key[i]) && equal_before <= t.need)",
        ),
        (
            "a winner above the threshold placed after every tie",
            "emit(i, above_before + min(equal_before, t.need));",
            "emit(i, above_before + equal_before);",
        ),
        (
            "a stop before the digit is taken whole",
            "s.done = c == need - cum;",
            "s.done = c >= need - cum;",
        ),
        (
            "the radix select without its last digit",
            "for (int pass = 0; pass < 64 / RADIX_BITS; ++pass) {",
            "for (int pass = 0; pass < 64 / RADIX_BITS - 1; ++pass) {",
        ),
        (
            "the picked digit forgets the prefix above it",
            "s.mask = mask | ((unsigned long long)(RADIX_BINS - 1) << shift);",
            "s.mask = (unsigned long long)(RADIX_BINS - 1) << shift;",
        ),
        (
            "a slot read past its count",
            "(unsigned int)j < __ldg(counts + (size_t)head * chunks + slot)",
            "(unsigned int)j <= __ldg(counts + (size_t)head * chunks + slot)",
        ),
        (
            "a merge that reads one slot too few",
            "const int fan_in = CHUNK / kk;",
            "const int fan_in = CHUNK / kk - 1;",
        ),
        (
            "a merge block that starts one slot late",
            "const int first_slot = (int)blockIdx.x * (CHUNK / kk);",
            "const int first_slot = (int)blockIdx.x * (CHUNK / kk) + 1;",
        ),
        (
            "a chunk's positions counted from the chunk",
            "position[i] = (unsigned int)e;",
            "position[i] = (unsigned int)(e - first);",
        ),
        (
            "an empty chunk's slot count left unwritten",
            "if (threadIdx.x == 0) slot_counts[slot] = 0u;",
            "",
        ),
        (
            "the window placed after k winners when there are fewer",
            "put(SINK + m + j, n - LOCAL + j);",
            "put(SINK + kk + j, n - LOCAL + j);",
        ),
        (
            "a candidate past C",
            "key[i] = e < c ? order_key(__ldg(scores + e)) : 0ull;",
            "key[i] = e <= c ? order_key(__ldg(scores + e)) : 0ull;",
        ),
    ];
    let families = [
        Scores::NearTies,
        Scores::Straddle,
        Scores::Gaussian,
        Scores::SmallIntegers,
        Scores::Negative,
    ];
    let mut missed = Vec::new();
    for (what, from, to) in mutations {
        assert_eq!(
            source.matches(from).count(),
            1,
            "{what}: `{from}` once in the source"
        );
        let many = CpuRerankSelect::build_source(spec, &source.replacen(from, to, 1))
            .expect("the mutant builds");
        // A fixed seed: which inputs catch a mutant must not change between runs.
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(MUTATION_SEED);
        let mut caught = false;
        // k = 40: three slots a merge block, so 3,000 candidates take two merges.
        for k in [40, 7, 1, 25] {
            let lengths = [ALWAYS + k + 1, rng.gen_range(3_000..4_000), 1_500];
            if case(&many, None, &mut rng, 1, (&lengths, 2), k, &families).is_some() {
                caught = true;
                break;
            }
        }
        if !caught {
            missed.push(what);
        }
    }
    assert!(missed.is_empty(), "mutations the cases miss: {missed:?}");
}
