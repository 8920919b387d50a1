//! GPU tests of the `select` kernels (SPEC §6: sink ∪ local ∪ top-k per query head, ties to the
//! lower index; the sorted union per KV head) against the reference `Selection::from_scores`.
//!
//! The GPU and the reference get the same fp32 scores (the reference as the exact f64 values of
//! those floats), so the comparison is exact: identical `sel` (ascending) and `sel_count`,
//! identical `uni` (sorted, deduplicated) and `uni_count`, `sel_pos` equal to the reference's
//! row positions, `uni[sel_pos[j]] == sel[j]`, and nothing written past the counts (the outputs
//! and the workspaces are poisoned before the launches). See `check_selection`.
//!
//! Every case runs every variant of its tile on the same scores (`SelectSpec::algorithm`): the
//! plain (radix) select, the compacting one, the one-read one, its fused form, its peaks forms
//! and the cluster ones, and the four peaks forms again with the coarse floor
//! (`SelectSpec::coarse_floor`), which must give exactly the same outputs
//! (`FATHOM_SELECT_ALGORITHMS=peaks` runs only the variants it names; the coarse-floor forms
//! are `peaks_cf`, `peaks_head_cf`, `scan_peaks_cf` and `scan_peaks_head_cf`). The two
//! streaming peaks forms with owned tiles (`SelectSpec::owned_tiles`: `peaks_ot`, `peaks_cf_ot`,
//! `peaks_head_ot`, `peaks_head_cf_ot`; an opt-in measured no faster) run only when named
//! there. The one-read variants' logic is also run on the CPU by `cpu_select.rs`.
//!
//! Coverage:
//! - `gpu_select_random_scores_match_reference`: G = 1, 4, 7, 8, 16; B = 3 sequences of different lengths
//!   (longer than, shorter than and around `36 + k`), H = 2; k small and up to `k_max` = 2048;
//!   every score family below on some head.
//! - `gpu_select_ties_and_signed_zeros`: planted ties straddling the k-th score, spread over many
//!   chunks (chunks of 64 tokens, more chunks than threads, so `_write`'s offset loop runs
//!   several rounds), ties at ±0.0 (the same key: lower index wins), all-equal scores, negative
//!   scores, scores differing only in their lowest mantissa bits (decided by the third radix
//!   pass).
//! - `gpu_select_short_and_boundary_lengths`: n = 0, 1, 4, 5, 35, 36, 37, 36 + k − 1, 36 + k,
//!   36 + k + 1, 36 + k + 2, 2(36 + k) for k = 0, 1, 5, 300 and `k_max`, over G = 1, 4, 7, 8, 16.
//! - `gpu_select_million_token_contexts`: n = 1,048,576 + 1,000, 1,048,576 and ~700k in one
//!   launch, H = 1, G = 4, k = 2048 and k = 512, two chunk sizes (4,096 tokens per block of
//!   256 threads; 1,024 tokens per block of 512 threads, more chunks than threads).
//! - `gpu_select_compact_sources_and_fallbacks`: the compacting variant's three paths, checked
//!   through the source word it leaves in its state: Gaussian scores (candidates after pass 0),
//!   scores offset far from zero (one bin holds every token at pass 0: candidates after pass 1),
//!   all scores equal and a block of ties larger than the candidate buffer (the scores in every
//!   pass); G = 4 and 7, 100k to 200k tokens, chunks of 1,024 and 4,096 tokens.
//!
//! Score families (all NaN-free, as the kernels require): continuous uniform in [−10, 10); small
//! integers in [−4, 4] with ±0.0 (massive ties); a narrow cluster `1.0 + i ulp` (keys equal in
//! their top 21 bits); one constant; all ±0.0 with a few planted values; and a planted straddle:
//! fewer than k large scores, a block of exactly equal scores holding the k-th, the rest below;
//! for the compacting variant also Gaussian scores, scores offset to 1000 ± 1, and a straddle
//! whose ties outnumber the candidate buffer. The sink and the local window get scores like the others (often the largest), which must not
//! take top-k places.

use codegen::spec::select::COMPACT_SOURCE_WORD;
use codegen::spec::{Family, SelectAlgorithm, SelectSpec};
use fathom_tests::gpu_test;
use fathom_tests::select_case::{boundary_lengths, draw_n_stored, scan_peaks_layout, SelectCase};
use fathom_tests::select_kernels::{
    check_selection, Mismatches, SelectArgs, SelectKernels, ALWAYS,
};
use fathom_tests::select_scores::{Scores, FAMILIES, WIDE_TIES};
use fathom_tests::shapes::GROUPS;
use rand::seq::SliceRandom;
use rand::Rng;
use runtime::gpu::Gpu;

/// H in the launches of these tests (the million-token test uses 1).
const KV_HEADS: usize = 2;

/// What a case gave beyond its checks: each query head's score family, and for the compacting
/// variant the source word each query head's state ended with (0: the scores, `1 + p`: the
/// candidates of `_filter(p)`).
struct CaseResult {
    families: Vec<Scores>,
    sources: Vec<u32>,
}

/// One launch of each spec of `variants` over `lengths` (one per sequence) with run-time `k`;
/// every head's scores from `families` (cycled), the same for every variant. Compares each with
/// the reference: failures panic.
#[allow(clippy::too_many_arguments)]
fn select_case(
    gpu: &Gpu,
    variants: &[SelectKernels],
    rng: &mut impl Rng,
    seed: u64,
    (lengths, kv_heads): (&[usize], usize),
    k: usize,
    families: &[Scores],
    what: &str,
) -> CaseResult {
    // A tile whose specs refuse every algorithm FATHOM_SELECT_ALGORITHMS names (the cluster
    // selects at 32 threads) has nothing to run; the other tiles test those algorithms.
    let Some(first) = variants.first() else {
        eprintln!("{what}: no variant of FATHOM_SELECT_ALGORITHMS fits this tile: not run");
        return CaseResult {
            families: Vec::new(),
            sources: Vec::new(),
        };
    };
    let g = first.spec.group as usize;
    let batch = lengths.len();
    let query_heads = batch * kv_heads * g;
    let c = SelectCase::draw(rng, lengths, kv_heads, g, k, families);
    let (ld, max_n, used) = (c.ld, c.max_n, c.families);

    let scores = gpu.upload(&c.scores).expect("upload scores");
    let n_total = gpu.upload(&c.n_total).expect("upload n_total");
    // The scan-peaks variants read aligned rows and the peaks a scan of some of each
    // sequence's tokens would write (junk elsewhere).
    let n_stored = draw_n_stored(rng, &c.n_total);
    let (laid, ld_laid, peaks, ld_peaks) =
        scan_peaks_layout(&c.scores, ld, &n_stored, kv_heads * g, seed);
    let laid = gpu.upload(&laid).expect("upload aligned scores");
    let peaks = gpu.upload(&peaks).expect("upload peaks");
    let n_stored_dev = gpu.upload(&n_stored).expect("upload n_stored");
    let mut sources = Vec::new();
    for kernels in variants {
        assert_eq!(kernels.spec.group as usize, g, "the variants share a group");
        let scan_peaks = kernels.spec.algorithm.scan_peaks();
        let out = kernels
            .run(
                gpu,
                &SelectArgs {
                    scores: if scan_peaks {
                        laid.addr()
                    } else {
                        scores.addr()
                    },
                    ld_scores: if scan_peaks { ld_laid } else { ld },
                    n_total: n_total.addr(),
                    n_stored: n_stored_dev.addr(),
                    peaks: peaks.addr(),
                    ld_peaks,
                    k,
                    batch,
                    kv_heads,
                    max_tokens: max_n,
                },
            )
            .expect("select runs");
        let got = out.download().expect("download selection");
        let mut m = Mismatches::new(
            format!(
            "select {what}: {} G={g} H={kv_heads} k={k} lengths {lengths:?} (scan-peaks stored \
             {n_stored:?}), score families by query head {used:?}",
            kernels.spec.kernel_name()
        ),
            seed,
        );
        check_selection(&got, &c.reference, &mut m);
        m.finish();
        if kernels.spec.compact() {
            let state = out.state.download().expect("download state");
            let words = kernels.spec.state_words_per_head() as usize;
            sources = (0..query_heads)
                .map(|qh| state[qh * words + COMPACT_SOURCE_WORD as usize])
                .collect();
        }
    }
    CaseResult {
        families: used,
        sources,
    }
}

/// Every variant of one tile: each algorithm (`SelectAlgorithm::ALL`: plain, compacting,
/// one-read, fused, the peaks forms, cluster), then each peaks form with the coarse floor
/// (`SelectSpec::coarse_floor`), then the two that stream the scores with owned tiles
/// (`SelectSpec::owned_tiles`), without and with the coarse floor.
fn variants(group: u32, k_max: u32, threads: u32, items_per_thread: u32) -> Vec<SelectSpec> {
    let plain = SelectAlgorithm::ALL.map(|algorithm| SelectSpec {
        group,
        k_max,
        threads,
        items_per_thread,
        algorithm,
        coarse_floor: false,
        owned_tiles: false,
    });
    let coarse = plain
        .into_iter()
        .filter(|spec| spec.algorithm.peaks())
        .map(|spec| SelectSpec {
            coarse_floor: true,
            ..spec
        });
    let owned = [false, true].into_iter().flat_map(move |coarse_floor| {
        plain
            .into_iter()
            .filter(|spec| spec.algorithm.owns_tiles())
            .map(move |spec| SelectSpec {
                coarse_floor,
                owned_tiles: true,
                ..spec
            })
    });
    plain.into_iter().chain(coarse).chain(owned).collect()
}

/// The name `FATHOM_SELECT_ALGORITHMS` knows a variant by: its algorithm as specs spell it,
/// with `_cf` after it for the coarse floor (`peaks_cf`, `peaks_head_cf`, `scan_peaks_cf`,
/// `scan_peaks_head_cf`) and `_ot` after that for owned tiles (`peaks_ot`, `peaks_cf_ot`,
/// `peaks_head_ot`, `peaks_head_cf_ot`).
fn variant_name(spec: &SelectSpec) -> String {
    let cf = if spec.coarse_floor { "_cf" } else { "" };
    let ot = if spec.owned_tiles { "_ot" } else { "" };
    format!("{}{cf}{ot}", spec.algorithm.as_str())
}

/// Every variant of one tile (`variants`) but the owned-tiles forms, or those that
/// `FATHOM_SELECT_ALGORITHMS` names (comma-separated, as `variant_name` spells them: `peaks` is
/// the peaks select without the coarse floor, `peaks_cf` with it, `peaks_cf_ot` with owned
/// tiles too), for a call that tests one new variant without the others' time. The owned-tiles
/// forms run only when named: they are an opt-in measured no faster (exact on an H100,
/// 2026-12-06), and four more variants would take this binary past the ~450 s the whole-suite
/// calls give it (`gpu_step_select_owned_tiles_g{4,7}` run them in every suite). The cluster
/// variants are left out of the tiles their specs refuse (32 threads: their histograms are
/// more than 32 entries a thread); every other tile here has them.
fn load(gpu: &Gpu, group: u32, k_max: u32, threads: u32, items: u32) -> Vec<SelectKernels> {
    let only = std::env::var("FATHOM_SELECT_ALGORITHMS").ok();
    let known: Vec<String> = variants(group, k_max, threads, items)
        .iter()
        .map(variant_name)
        .collect();
    let wanted = |spec: &SelectSpec| match &only {
        None => !spec.owned_tiles,
        Some(names) => {
            let names: Vec<&str> = names.split(',').map(str::trim).collect();
            for name in &names {
                assert!(
                    known.iter().any(|k| k == name),
                    "FATHOM_SELECT_ALGORITHMS names `{name}`; known: {known:?}"
                );
            }
            names.contains(&variant_name(spec).as_str())
        }
    };
    variants(group, k_max, threads, items)
        .into_iter()
        .filter(wanted)
        .filter(|spec| !spec.algorithm.radix_blocks() || threads > 32)
        .map(|spec| SelectKernels::load(gpu, spec).expect("select kernels compile"))
        .collect()
}

gpu_test!(gpu_select_random_scores_match_reference, |t| {
    for g in GROUPS {
        let kernels = load(&t.gpu, g, 2048, 256, 16);
        for k in [t.rng.gen_range(1..64), t.rng.gen_range(64..=2048), 2048] {
            let mut lengths = vec![
                ALWAYS + k + t.rng.gen_range(1..60_000),
                t.rng.gen_range(37..ALWAYS + k + 3),
                ALWAYS + k + t.rng.gen_range(1..3),
            ];
            lengths.shuffle(&mut t.rng);
            select_case(
                &t.gpu,
                &kernels,
                &mut t.rng,
                t.seed,
                (&lengths, KV_HEADS),
                k,
                &FAMILIES,
                "random scores",
            );
        }
    }
});

gpu_test!(gpu_select_ties_and_signed_zeros, |t| {
    let tie_families = [
        Scores::Straddle,
        Scores::SmallIntegers,
        Scores::SignedZeros,
        Scores::Constant,
        Scores::Cluster,
    ];
    // Chunks of 64 tokens: ties span many chunks, and there are more chunks than threads.
    let configs = [(64, 1), (256, 16), (32, 3)];
    for (i, g) in GROUPS.into_iter().enumerate() {
        let (threads, items) = configs[i % configs.len()];
        let kernels = load(&t.gpu, g, 1024, threads, items);
        for k in [t.rng.gen_range(1..40), t.rng.gen_range(200..=1024)] {
            let mut lengths = vec![
                t.rng.gen_range(20_000..40_000),
                ALWAYS + k + t.rng.gen_range(1..5_000),
                t.rng.gen_range(5_000..10_000).max(ALWAYS + k + 1),
            ];
            lengths.shuffle(&mut t.rng);
            select_case(
                &t.gpu,
                &kernels,
                &mut t.rng,
                t.seed,
                (&lengths, KV_HEADS),
                k,
                &tie_families,
                "ties",
            );
        }
    }
});

gpu_test!(gpu_select_short_and_boundary_lengths, |t| {
    let k_max = 300u32;
    for (i, g) in GROUPS.into_iter().enumerate() {
        let kernels = load(&t.gpu, g, k_max, 128, 4);
        let big = (i == 0).then(|| load(&t.gpu, g, 2048, 256, 16));
        for (k, kernels) in [
            (0, &kernels),
            (1, &kernels),
            (5, &kernels),
            (k_max as usize, &kernels),
            (2048, big.as_ref().unwrap_or(&kernels)),
        ] {
            if kernels
                .first()
                .is_some_and(|first| k > first.spec.k_max as usize)
            {
                continue;
            }
            let mut lengths = boundary_lengths(k);
            lengths.shuffle(&mut t.rng);
            for triple in lengths.chunks(3) {
                select_case(
                    &t.gpu,
                    kernels,
                    &mut t.rng,
                    t.seed,
                    (triple, KV_HEADS),
                    k,
                    &FAMILIES,
                    "boundary lengths",
                );
            }
        }
    }
});

gpu_test!(gpu_select_million_token_contexts, |t| {
    let families = [
        Scores::Uniform,
        Scores::Cluster,
        Scores::SmallIntegers,
        Scores::Straddle,
    ];
    for (k, threads, items) in [(2048, 256, 16), (512, 512, 2)] {
        let kernels = load(&t.gpu, 4, 2048, threads, items);
        let mut lengths = vec![(1 << 20) + 1000, 1 << 20, t.rng.gen_range(600_000..800_000)];
        lengths.shuffle(&mut t.rng);
        select_case(
            &t.gpu,
            &kernels,
            &mut t.rng,
            t.seed,
            (&lengths, 1),
            k,
            &families,
            "long contexts",
        );
    }
});

gpu_test!(gpu_select_compact_sources_and_fallbacks, |t| {
    let families = [
        Scores::Gaussian,
        Scores::Offset,
        Scores::Constant,
        Scores::WideTies,
        Scores::Straddle,
        Scores::SmallIntegers,
    ];
    for (g, threads, items) in [(4, 256, 16), (7, 1024, 1)] {
        let variants = load(&t.gpu, g, 1024, threads, items);
        let Some(compact) = variants.iter().find(|v| v.spec.compact()) else {
            eprintln!("the compacting variant is not among FATHOM_SELECT_ALGORITHMS: not run");
            return;
        };
        let candidates = compact.spec.candidates() as usize;
        assert!(
            WIDE_TIES > candidates,
            "the wide ties overflow the candidates"
        );
        for k in [512, t.rng.gen_range(1..64)] {
            let mut lengths = vec![
                100_000,
                t.rng.gen_range(100_000..200_000),
                200_000 - t.rng.gen_range(0..100),
            ];
            lengths.shuffle(&mut t.rng);
            let result = select_case(
                &t.gpu,
                &variants,
                &mut t.rng,
                t.seed,
                (&lengths, 1),
                k,
                &families,
                "compact sources",
            );
            // At these lengths: a Gaussian's top bin holds a few thousand tokens at most; 1000 ±
            // 1 is one bin at pass 0 and n/32 per bin at pass 1; equal scores are one bin in
            // every pass.
            for (qh, (family, &source)) in result.families.iter().zip(&result.sources).enumerate() {
                let want = match family {
                    Scores::Gaussian => Some(1),
                    Scores::Offset => Some(2),
                    Scores::Constant | Scores::WideTies => Some(0),
                    _ => None,
                };
                if let Some(want) = want {
                    assert_eq!(
                        source, want,
                        "seed {}: query head {qh} ({family:?}, G={g} k={k} lengths \
                         {lengths:?}) read source {source}, expected {want}",
                        t.seed
                    );
                }
            }
        }
    }
});
