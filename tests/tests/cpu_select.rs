//! The one-read selects (`algorithm: onepass`; `fused`, whose last block per query head
//! does `_final`'s work; `peaks`, whose blocks take their top-k from the peaks of their shares,
//! its other forms, and the four peaks forms also with the coarse floor, `coarse_floor`) run
//! on the CPU, exactly as rendered (`cpu_cuda`: every CUDA thread a fiber, switched in a seeded
//! random order where threads wait for each other), against the reference
//! `Selection::from_scores`: identical `sel`, `sel_count`, `uni`, `uni_count`, `sel_pos` the
//! reference's row positions, nothing written past the counts (`check_selection`, as on a GPU).
//! These tests need a C++17 compiler (`c++`), not a GPU; the GPU runs the same cases in
//! `gpu_select.rs`.
//!
//! Small blocks (32 to 128 threads, 1 to 8 items) so that a few thousand tokens are many tiles
//! and many blocks per query head: odd tiles (3 items: scalar loads; 2: pairs), score rows
//! that are not 16-byte aligned (the stride is `max_n + 7`), lengths at every boundary of
//! `36 + k`, k from 0 to `k_max`, G = 1, 4, 7, 8, 16, every score family, ties wider than the block
//! buffer; peak tiles wider than a warp's loads. `onepass_mutations_are_caught`,
//! `fused_mutations_are_caught`, `peaks_mutations_are_caught` and
//! `peaks_coarse_floor_mutations_are_caught` (among others) then break the
//! rendered sources in the places a mistake is easy and check that these cases notice each one
//! (the fused variant's arrival counters must also be left zero: `check_selection`).

use codegen::spec::{SelectAlgorithm, SelectSpec};
use fathom_tests::inputs;
use fathom_tests::select_case::{boundary_lengths, draw_n_stored, SelectCase};
use fathom_tests::select_cpu::{CpuSelect, CpuSelectArgs};
use fathom_tests::select_kernels::{check_selection, Mismatches, ALWAYS};
use fathom_tests::select_scores::{Scores, FAMILIES};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

fn onepass(group: u32, k_max: u32, threads: u32, items_per_thread: u32) -> SelectSpec {
    SelectSpec {
        group,
        k_max,
        threads,
        items_per_thread,
        algorithm: SelectAlgorithm::Onepass,
        coarse_floor: false,
        owned_tiles: false,
    }
}

/// The one-read variants of a tile: onepass, fused, peaks, peaks with one block a query head,
/// and both peaks forms reading the scan's peaks.
fn one_read(group: u32, k_max: u32, threads: u32, items_per_thread: u32) -> [SelectSpec; 6] {
    let spec = onepass(group, k_max, threads, items_per_thread);
    [
        spec,
        SelectSpec {
            algorithm: SelectAlgorithm::Fused,
            ..spec
        },
        SelectSpec {
            algorithm: SelectAlgorithm::Peaks,
            ..spec
        },
        SelectSpec {
            algorithm: SelectAlgorithm::PeaksHead,
            ..spec
        },
        SelectSpec {
            algorithm: SelectAlgorithm::ScanPeaks,
            ..spec
        },
        SelectSpec {
            algorithm: SelectAlgorithm::ScanPeaksHead,
            ..spec
        },
    ]
}

/// `one_read`'s variants, then its four peaks forms again with the coarse floor
/// (`coarse_floor`: the k-th peak's top 22 bits from two of the three radix passes, a lower
/// floor, so more hot tiles and survivors and the same selection).
fn one_read_and_coarse(
    group: u32,
    k_max: u32,
    threads: u32,
    items_per_thread: u32,
) -> [SelectSpec; 10] {
    let plain = one_read(group, k_max, threads, items_per_thread);
    let coarse = plain
        .iter()
        .filter(|s| s.algorithm.peaks())
        .map(|&s| SelectSpec {
            coarse_floor: true,
            ..s
        });
    let all: Vec<SelectSpec> = plain.iter().copied().chain(coarse).collect();
    all.try_into().expect("six variants and four peaks forms")
}

/// The two peaks forms that stream the scores, with owned tiles (`owned_tiles`: each peak
/// tile's peak taken by one thread), plain and with the coarse floor.
fn owned(group: u32, k_max: u32, threads: u32, items_per_thread: u32) -> [SelectSpec; 4] {
    let [_, _, peaks, peaks_head, ..] = one_read(group, k_max, threads, items_per_thread);
    [
        (peaks, false),
        (peaks_head, false),
        (peaks, true),
        (peaks_head, true),
    ]
    .map(|(spec, coarse_floor)| SelectSpec {
        coarse_floor,
        owned_tiles: true,
        ..spec
    })
}

/// Tokens the scan scored of each sequence for a scan-peaks select (`draw_n_stored`);
/// `n_total` itself for the other variants (which do not read it), without drawing.
fn n_stored_for(spec: SelectSpec, rng: &mut impl Rng, n_total: &[i32]) -> Vec<i32> {
    if spec.algorithm.scan_peaks() {
        draw_n_stored(rng, n_total)
    } else {
        n_total.to_vec()
    }
}

/// One selection over `lengths` (one per sequence) of `kv_heads` KV heads with run-time `k`,
/// each query head's scores from `families` (cycled from a random start); the report of what
/// differed from the reference, if anything did.
fn case(
    select: &CpuSelect,
    rng: &mut impl Rng,
    seed: u64,
    (lengths, kv_heads, chunks): (&[usize], usize, Option<u64>),
    k: usize,
    families: &[Scores],
) -> Option<String> {
    let g = select.spec.group as usize;
    let c = SelectCase::draw(rng, lengths, kv_heads, g, k, families);
    let n_stored = n_stored_for(select.spec, rng, &c.n_total);
    let what = format!(
        "{} on the CPU: k={k} H={kv_heads} chunks {chunks:?} lengths {lengths:?} (stored \
         {n_stored:?}), families {:?}",
        select.name(),
        c.families
    );
    let got = match select.run(
        &CpuSelectArgs {
            scores: &c.scores,
            ld_scores: c.ld,
            n_total: &c.n_total,
            n_stored: &n_stored,
            k,
            kv_heads,
            max_tokens: c.max_n,
            chunks,
        },
        seed,
    ) {
        Ok(got) => got,
        Err(e) => return Some(format!("{what}: {e}")),
    };
    let mut m = Mismatches::new(what, seed);
    check_selection(&got, &c.reference, &mut m);
    m.report()
}

/// The cases every spec runs: boundary lengths, then long rows, for k = 0, 1, a few, `k_max`;
/// the plan's blocks per query head, one, or three.
fn cases(select: &CpuSelect, rng: &mut impl Rng, seed: u64, families: &[Scores]) -> Vec<String> {
    let k_max = select.spec.k_max as usize;
    let mut failures = Vec::new();
    for k in [0, 1, rng.gen_range(2..k_max.max(3)), k_max] {
        let mut lengths = boundary_lengths(k);
        lengths.extend([rng.gen_range(2_000..6_000), rng.gen_range(6_000..12_000)]);
        lengths.shuffle(rng);
        for (part, chunks) in lengths
            .chunks(3)
            .zip([None, Some(1), Some(3), None, Some(2)])
        {
            failures.extend(case(select, rng, seed, (part, 2, chunks), k, families));
        }
    }
    failures
}

/// Every score family, and the ones only the one-read selects' tests draw.
fn every_family() -> Vec<Scores> {
    let mut families = FAMILIES.to_vec();
    families.extend([Scores::Gaussian, Scores::Offset, Scores::NextAbove]);
    families
}

/// Families with ties at the k-th score wider than a block's buffer or a block's run:
/// WideTies ties 20,000 tokens, Constant every token, SmallIntegers and SignedZeros thousands.
const TIE_FAMILIES: [Scores; 5] = [
    Scores::WideTies,
    Scores::Constant,
    Scores::SmallIntegers,
    Scores::SignedZeros,
    Scores::Straddle,
];

fn assert_none(failures: Vec<String>) {
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every spec `specs` makes of each `(G, k_max, threads, items)` tile against the reference on
/// every family (`cases`), drawn from the seed of `test`.
fn every_family_matches<const N: usize>(
    test: &str,
    tiles: &[(u32, u32, u32, u32)],
    specs: impl Fn(u32, u32, u32, u32) -> [SelectSpec; N],
) {
    let (mut rng, seed) = inputs::rng_and_seed(test);
    let families = every_family();
    for &(g, k_max, threads, items) in tiles {
        for spec in specs(g, k_max, threads, items) {
            let select = CpuSelect::build(spec).expect("builds");
            assert_none(cases(&select, &mut rng, seed, &families));
        }
    }
}

/// (G, k_max, threads, items) of the every-family tests: float4 loads, scalar loads, pairs;
/// buffers of one to 32 entries per thread.
const EVERY_FAMILY_TILES: [(u32, u32, u32, u32); 4] = [
    (4, 96, 64, 4),
    (1, 32, 32, 3),
    (7, 200, 128, 2),
    (8, 48, 32, 8),
];

#[test]
fn onepass_matches_the_reference_on_every_family() {
    every_family_matches(
        "onepass_matches_the_reference_on_every_family",
        &EVERY_FAMILY_TILES,
        one_read_and_coarse,
    );
}

#[test]
fn owned_tiles_match_the_reference_on_every_family() {
    every_family_matches(
        "owned_tiles_match_the_reference_on_every_family",
        &EVERY_FAMILY_TILES,
        owned,
    );
}

#[test]
fn onepass_ties_wider_than_the_block_buffer() {
    let (mut rng, seed) = inputs::rng_and_seed("onepass_ties_wider_than_the_block_buffer");
    // A 32-thread block holds 1,024 candidates, fewer than TIE_FAMILIES' ties.
    let families = TIE_FAMILIES;
    let mut failures = Vec::new();
    // The owned-tiles forms too (their hot tiles cut the buffer as the streaming form's do).
    for spec in one_read_and_coarse(4, 64, 32, 4)
        .into_iter()
        .chain(owned(4, 64, 32, 4))
    {
        let select = CpuSelect::build(spec).expect("builds");
        for k in [1, 17, 64] {
            let lengths = [rng.gen_range(21_000..24_000), ALWAYS + k + 1, 3_000];
            for chunks in [None, Some(1), Some(3)] {
                failures.extend(case(
                    &select,
                    &mut rng,
                    seed,
                    (&lengths, 1, chunks),
                    k,
                    &families,
                ));
            }
        }
    }
    assert_none(failures);
}

/// The union searches sets that do not fit its shared memory where they are, in global memory:
/// the same outputs when the sets it can stage are cut to a few entries (the source says so in
/// one constant), so that every case takes that road.
#[test]
fn union_searched_in_global_memory_matches_the_reference() {
    let (mut rng, seed) =
        inputs::rng_and_seed("union_searched_in_global_memory_matches_the_reference");
    let from = "constexpr int UNION_STAGED_MAX = 11776;";
    for (g, k_max, threads, items) in [(4, 40, 32, 4), (7, 24, 64, 2)] {
        let spec = onepass(g, k_max, threads, items);
        let source = codegen::render::render(&spec).expect("renders");
        assert_eq!(
            source.matches(from).count(),
            1,
            "`{from}` once in the source"
        );
        let source = source.replacen(from, "constexpr int UNION_STAGED_MAX = 3;", 1);
        let select = CpuSelect::build_source(spec, &source).expect("builds");
        assert_none(cases(&select, &mut rng, seed, &FAMILIES));
    }
}

/// The inputs of `onepass_mutations_are_caught`.
const MUTATION_SEED: u64 = 7;

/// Breaks the rendered source where a mistake is easy to make, one change at a time; the cases
/// of this file must catch each (a mismatch, or the CPU run refusing the kernel).
#[test]
fn onepass_mutations_are_caught() {
    let spec = onepass(4, 40, 32, 4);
    let mutations: [(&str, &str, &str); 24] = [
        (
            "the floor one above K",
            "r.floor = kth + 1u;",
            "r.floor = kth + 2u;",
        ),
        (
            "a score at the floor dropped",
            "return score[i] >= r.floor_score; }",
            "return score[i] > r.floor_score; }",
        ),
        (
            "a negative floor's score taken as positive",
            "floor & 0x80000000u ? floor & 0x7fffffffu : ~floor",
            "floor & 0x7fffffffu",
        ),
        (
            "one tie too many kept from the buffer",
            "if (bkey[q] == kth && equal_before < need)",
            "if (bkey[q] == kth && equal_before <= need)",
        ),
        (
            "a tile token placed after every tie",
            "tpos[i] = (int)(above_before + min(equal_before, need));",
            "tpos[i] = (int)(above_before + equal_before);",
        ),
        (
            "an append that does not advance",
            "                ++at;\n",
            "\n",
        ),
        (
            "a slot read past its count",
            "(unsigned int)(p - slot * kk) < load_written<FROM_L2>(slot_count + slot)",
            "(unsigned int)(p - slot * kk) <= load_written<FROM_L2>(slot_count + slot)",
        ),
        (
            "a load missing between two blocks",
            "const int end = min(begin + share, end_load);",
            "const int end = min(begin + share - 1, end_load);",
        ),
        (
            "the window's first token in the middle",
            "const int lo = SINK, hi = n - LOCAL;",
            "const int lo = SINK, hi = n - LOCAL + 1;",
        ),
        (
            "the radix select without its last digit",
            "for (int pass = 0; pass < 3; ++pass) {",
            "for (int pass = 0; pass < 2; ++pass) {",
        ),
        (
            "the row taken as aligned",
            "const int off = (int)((reinterpret_cast<size_t>(row) / sizeof(float)) % VEC);",
            "const int off = 0;",
        ),
        (
            "a compaction offset that counts its own part",
            "__reduce_add_sync(FULL_MASK, lane < warp ? buffer_of : 0u)",
            "__reduce_add_sync(FULL_MASK, lane <= warp ? buffer_of : 0u)",
        ),
        (
            "a last cut skipped by one",
            "if (r.count > r.k) {",
            "if (r.count > r.k + 1) {",
        ),
        (
            "a digit's own keys counted as above it",
            "s.found[1] = need - cum;",
            "s.found[1] = need - cum - c;",
        ),
        (
            "the digit search from the smaller end",
            "for (int d = lo + PICK - 1; d >= lo; --d) {",
            "for (int d = lo; d < lo + PICK; ++d) {",
        ),
        (
            "a pass's bins left for the next pass",
            "*reinterpret_cast<uint2*>(&s.hist[lo + j]) = make_uint2(0u, 0u);",
            "(void)0;",
        ),
        (
            "a top-k started on unzeroed bins",
            "for (int d = threadIdx.x; d < BINS; d += THREADS) s.hist[d] = 0u;",
            "(void)0;",
        ),
        (
            "an appended key's first digit not counted",
            "atomicAdd(&s.hist[first_digit(key)], 1u);",
            "(void)0;",
        ),
        (
            "a kept buffer token's first digit not counted",
            "atomicAdd(&s.hist[first_digit(bkey[q])], 1u);",
            "(void)0;",
        ),
        (
            "a kept tile token's first digit not counted",
            "atomicAdd(&s.hist[first_digit(tkey[i])], 1u);",
            "(void)0;",
        ),
        (
            "a cut's tile left out of the first pass",
            "count_keys(s.hist, tkey, 0, 0u);",
            "(void)0;",
        ),
        (
            "a union search that passes equal tokens",
            "lists[e * sel_cap + c - 1] < bound[e]) at[e] = c;",
            "lists[e * sel_cap + c - 1] <= bound[e]) at[e] = c;",
        ),
        (
            "an earlier set's equal token merged after",
            "bound[e] = e < g ? v + 1 : v;",
            "bound[e] = v;",
        ),
        (
            "a thread's run of the merge compared with nothing before it",
            "begin > 0 && begin < end ? merged[begin - 1] : -1;",
            "-1;",
        ),
    ];
    assert_caught(spec, &mutations);
}

/// A barrier's work undone where only several warps can tell: half the blocks of a CPU run take
/// their four warps one at a time from barrier to barrier, so a warp that reads a shared word
/// after the barrier finds it already rewritten by a warp that ran on to the next tile.
#[test]
fn onepass_multiwarp_mutations_are_caught() {
    assert_caught(
        onepass(4, 40, 128, 2),
        &[(
            "a tile's survivors counted over the last tile's",
            "r.parity ^= 1;",
            "(void)0;",
        )],
    );
}

/// Fails naming every mutation of `spec`'s rendered source (what, from, to) that the cases of
/// this file do not catch.
fn assert_caught(spec: SelectSpec, mutations: &[(&str, &str, &str)]) {
    let source = codegen::render::render(&spec).expect("renders");
    let families = [
        Scores::NextAbove,
        Scores::Cluster,
        Scores::Straddle,
        Scores::Uniform,
        Scores::SmallIntegers,
        Scores::WideTies,
        Scores::Ranks,
    ];
    let mut missed = Vec::new();
    for &(what, from, to) in mutations {
        assert_eq!(
            source.matches(from).count(),
            1,
            "{what}: `{from}` once in the source"
        );
        let select = CpuSelect::build_source(spec, &source.replacen(from, to, 1))
            .expect("the mutant builds");
        // A fixed seed: which inputs catch a mutant must not change between runs.
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(MUTATION_SEED);
        let mut caught = false;
        // One or two blocks per query head: every block's share is many times its buffer, so
        // the running floor and the cuts with a tile are exercised.
        for (k, chunks) in [(1, 2), (7, 1), (40, 2), (20, 1), (40, 1), (3, 1)] {
            // The longest row has a stride that is not a multiple of 4 floats; the shortest
            // has nothing to rank.
            let lengths = [
                ALWAYS + k + 1,
                rng.gen_range(3_000..4_000),
                23_002,
                ALWAYS + k,
            ];
            if case(
                &select,
                &mut rng,
                1,
                (&lengths, 1, Some(chunks)),
                k,
                &families,
            )
            .is_some()
            {
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

/// The fused variant's own steps, broken one at a time. (The blocks of a CPU run take turns,
/// so the order of the arrivals against the slots' writes is the GPU tests' and racecheck's to
/// judge.)
#[test]
fn fused_mutations_are_caught() {
    let [_, spec, ..] = one_read(4, 40, 32, 4);
    assert_caught(
        spec,
        &[
            (
                "the counter not reset for the next launch",
                "if (last) arrivals[head] = 0u;",
                "",
            ),
            (
                "the last block's own floor one above its k-th key",
                "r.floor > 1u ? r.floor - 1u : 1u;",
                "r.floor;",
            ),
            (
                "the last block's merge one slot short",
                "(int)gridDim.x, kk, floor);",
                "(int)gridDim.x - 1, kk, floor);",
            ),
            (
                "the arrivals counted on another query head's counter",
                "atomicAdd(arrivals + head, 1u)",
                "atomicAdd(arrivals + (head ^ 1), 1u)",
            ),
            (
                "a one-block query head's top-k not written",
                "        write_top_k(s, r, out);\n        return;",
                "        return;",
            ),
            (
                "a query head without ranking left unwritten",
                "if (blockIdx.x == 0) write_fixed(out, sel_count + head, n, kk);",
                "",
            ),
        ],
    );
}

/// The peaks variant's own steps, broken one at a time: its 32-thread block lists 512 hot tiles
/// a segment, and the 23,002-token row of one block has 719 peak tiles of 32 tokens, so the
/// second segment is exercised.
#[test]
fn peaks_mutations_are_caught() {
    let [_, _, spec, ..] = one_read(4, 40, 32, 4);
    assert_caught(
        spec,
        &[
            (
                "the floor at the (k-1)-th peak",
                "kth_key(s, peak, (unsigned int)kk)",
                "kth_key(s, peak, (unsigned int)kk - 1u)",
            ),
            (
                "a tile whose peak is the k-th taken as cold",
                "peak[q] >= kth_peak && peak[q] != 0u",
                "peak[q] > kth_peak && peak[q] != 0u",
            ),
            (
                "a peak over half its tile",
                "for (int w = 1; w < lanes; w <<= 1)",
                "for (int w = 1; w < lanes / 2; w <<= 1)",
            ),
            (
                "a load's peak put on the next tile",
                "atomicMax(&s.key[(VEC * (l - begin)) >> shift], m);",
                "atomicMax(&s.key[min((VEC * (l - begin + 1)) >> shift, CAP - 1)], m);",
            ),
            (
                "the window's scores in the peaks",
                "if (first >= lo && first + VEC <= hi) return peak_of(v);",
                "if (first >= lo) return peak_of(v);",
            ),
            (
                "the row's last load's peak taken over all its scores",
                "l == first_load || l == last_load ?",
                "l == first_load ?",
            ),
            (
                "the row's first load's peak taken over all its scores",
                "l == first_load || l == last_load ?",
                "l == last_load ?",
            ),
            (
                "a thread's next batch read from this batch's loads",
                "next[j] = __ldg(at + ROUND + j * THREADS);",
                "next[j] = __ldg(at + j * THREADS);",
            ),
            (
                "the block's last load left out of the hot tiles",
                "if (at < tokens) {",
                "if (at + VEC < tokens) {",
            ),
            (
                "the second segment of peak tiles skipped",
                "for (int seg = 0; seg * HOT_CAP < peaks; ++seg) {",
                "for (int seg = 0; seg < 1; ++seg) {",
            ),
            (
                "a listed tile's number not made relative to its segment",
                "(unsigned short)(w * 32 + __ffs(bits) - 1 - seg * HOT_CAP);",
                "(unsigned short)(w * 32 + __ffs(bits) - 1);",
            ),
            (
                "a hot tile's position taken from the wrong end of its tile",
                "+ (p & p_mask);\n                    tile.first[j]",
                "+ (p_mask - (p & p_mask));\n                    tile.first[j]",
            ),
        ],
    );
}

/// The peaks variant's barriers, each removed where only several warps can tell (see
/// `onepass_multiwarp_mutations_are_caught`). (The barrier between setting the hot bits and
/// listing them is not among them: a listing that counts another warp's bits before they are
/// set reads the emulator's poison, all ones, and only leaves gaps of tiles past the share,
/// which read nothing; on a GPU it would read the last block's bits.)
#[test]
fn peaks_multiwarp_mutations_are_caught() {
    let [_, _, peaks, _, scan_peaks, _] = one_read(4, 40, 256, 2);
    assert_caught(
        scan_peaks,
        &[(
            "the scan's peaks read before every warp has folded its own",
            "    __syncthreads();\n    return top_k_of_hot(",
            "    return top_k_of_hot(",
        )],
    );
    let spec = peaks;
    assert_caught(
        spec,
        &[
            (
                "the peaks read before every warp has written its own",
                "    __syncthreads();\n    return top_k_of_hot(",
                "    return top_k_of_hot(",
            ),
            (
                "a segment's list read before it is whole",
                "    __syncthreads();\n    return (int)total;",
                "    return (int)total;",
            ),
        ],
    );
}

/// Peak tiles wider than a warp's loads (a share of more than 32 x CAP tokens, as a block of a
/// long sequence in a large batch gets): a tile's peak is then gathered over several warps'
/// loads and rounds by the shared atomic alone (with owned tiles, by one thread over several
/// batches of loads). 32 and 64 threads (buffers of 1,024 and 2,048), float4 and scalar loads,
/// one block per query head over 150k to 260k tokens: tiles of 128 to 256 tokens. Then the
/// same with the coarse floor.
#[test]
fn peaks_tiles_wider_than_a_warp() {
    let (mut rng, seed) = inputs::rng_and_seed("peaks_tiles_wider_than_a_warp");
    let families = [Scores::Gaussian, Scores::SmallIntegers, Scores::Straddle];
    let mut failures = Vec::new();
    // The owned-tiles forms (the last two) read such a tile in several batches of loads.
    let tiles = [
        (32, 4, SelectAlgorithm::Peaks, false),
        (64, 1, SelectAlgorithm::PeaksHead, false),
        (32, 4, SelectAlgorithm::ScanPeaks, false),
        (64, 2, SelectAlgorithm::ScanPeaksHead, false),
        (32, 4, SelectAlgorithm::Peaks, true),
        (64, 1, SelectAlgorithm::PeaksHead, true),
    ];
    for (coarse_floor, (threads, items, algorithm, owned_tiles)) in [false, true]
        .into_iter()
        .flat_map(|c| tiles.map(|t| (c, t)))
    {
        let spec = SelectSpec {
            algorithm,
            coarse_floor,
            owned_tiles,
            ..onepass(1, 16, threads, items)
        };
        let select = CpuSelect::build(spec).expect("builds");
        for k in [1, 16] {
            let lengths = [rng.gen_range(150_000..260_000)];
            failures.extend(case(
                &select,
                &mut rng,
                seed,
                (&lengths, 1, Some(1)),
                k,
                &families,
            ));
        }
    }
    assert_none(failures);
}

/// The coarse floor's own steps (`coarse_floor`; the rest of its block top-k is the peaks
/// variant's, whose mutations are caught above), broken one at a time: a floor above the k-th
/// peak's top 22 bits (which is above K for every row), and the tiles whose peak is the floor
/// taken as cold (a floor that is K itself where K's last 10 bits are zero, as for small
/// integers).
#[test]
fn peaks_coarse_floor_mutations_are_caught() {
    let [.., peaks, peaks_head, scan_peaks, scan_peaks_head] = one_read_and_coarse(4, 40, 32, 4);
    for spec in [peaks, peaks_head, scan_peaks, scan_peaks_head] {
        assert!(spec.coarse_floor && spec.algorithm.peaks());
    }
    assert_caught(
        peaks,
        &[
            (
                "the coarse floor one unit of its last kept bit above K's top 22 bits",
                "return max(prefix, 1u);",
                "return max(prefix + 1024u, 1u);",
            ),
            (
                "a tile whose peak is the coarse floor taken as cold",
                "peak[q] >= kth_peak && peak[q] != 0u",
                "peak[q] > kth_peak && peak[q] != 0u",
            ),
        ],
    );
    assert_caught(
        scan_peaks_head,
        &[(
            "the coarse floor one unit of its last kept bit above K's top 22 bits",
            "return max(prefix, 1u);",
            "return max(prefix + 1024u, 1u);",
        )],
    );
}

/// The one-block peaks variant's own steps (its block top-k is the peaks variant's, whose
/// mutations are caught above), broken one at a time.
#[test]
fn peaks_head_mutations_are_caught() {
    let [_, _, _, spec, ..] = one_read(4, 40, 32, 4);
    assert_caught(
        spec,
        &[
            (
                "the top-k not written",
                "    write_top_k(s, r, out);\n}",
                "}",
            ),
            (
                "the selection written at another query head's row",
                "int* out = sel + (size_t)head * (kk + ALWAYS);",
                "int* out = sel + (size_t)(head ^ 1) * (kk + ALWAYS);",
            ),
            (
                "a query head's sequence taken as the first",
                "const int b = head / (num_kv_heads * G);\n    const int n = n_total[b] > 0 ? n_total[b] : 0;\n    const int kk = clamp_k(k);\n    int* out",
                "const int b = 0 * head / (num_kv_heads * G);\n    const int n = n_total[b] > 0 ? n_total[b] : 0;\n    const int kk = clamp_k(k);\n    int* out",
            ),
        ],
    );
}

/// The owned-tiles forms' own steps (their hot tiles are the streaming form's, whose
/// mutations are caught above), broken one at a time.
#[test]
fn owned_tiles_mutations_are_caught() {
    let [peaks, peaks_head, ..] = owned(4, 40, 32, 4);
    let mutations: &[(&str, &str, &str)] = &[
        (
            "a tile's edge loads taken whole (the sink's and the window's tokens in its peak)",
            "const bool middle = loads_in_middle(first, l1 - l0, lo, hi);",
            "const bool middle = true;",
        ),
        (
            "a tile too many counted as holding a token",
            "((a - base) >> shift) + 1) : 0u;",
            "((a - base) >> shift) + 2) : 0u;",
        ),
        (
            "a whole tile's peak from the first score of each load",
            "top = fmaxf(top, score_of(v[j], c));",
            "top = fmaxf(top, score_of(v[j], 0));",
        ),
        (
            "a tile's peak from its first batch of loads only",
            "for (int l = l0; l < l1; l += OWNED_BATCH) {",
            "for (int l = l0; l < l1; l += 1 << 30) {",
        ),
    ];
    assert_caught(peaks, mutations);
    assert_caught(peaks_head, &mutations[..2]);
}

/// The scan-peaks variant's own steps (it shares the hot tiles with the peaks variant, whose
/// mutations are caught above), broken one at a time: which halves it takes from the scan and
/// which from the scores. The peak words the scan did not write hold junk (`CpuSelect::run`),
/// and the cases store all, some or none of each row.
#[test]
fn scan_peaks_mutations_are_caught() {
    let [.., spec, _] = one_read(4, 40, 32, 4);
    assert_eq!(spec.algorithm, SelectAlgorithm::ScanPeaks);
    assert_caught(
        spec,
        &[
            (
                "the sink's half taken from the scan",
                "half < h1 && half >= 1 && half < stored_end",
                "half < h1 && half >= 0 && half < stored_end",
            ),
            (
                "halves past n_stored taken from the scan",
                "const int stored_end = min(max(n_stored, 0), hi) / 32;",
                "const int stored_end = hi / 32;",
            ),
            (
                "the sink's scores in its half's peak",
                "token >= lo && token < hi ? order_key(row[token])",
                "token < hi ? order_key(row[token])",
            ),
            (
                "only the sink's half taken from the scores",
                "for (int u = warp; u < others; u += WARPS) {",
                "for (int u = warp; u < sink_half; u += WARPS) {",
            ),
            (
                "a block's share one half short",
                "const int h1 = min(h0 + share, end_half);",
                "const int h1 = min(h0 + share, end_half - 1);",
            ),
        ],
    );
}

/// A half that holds both middle and window tokens must be taken from the scores: the scan's
/// peak of it counts the window (which `Straddle` scores above everything, so a floor at it
/// would drop the true top-k). Rows whose middle does not end on a half, every token stored.
#[test]
fn scan_peaks_window_half_is_taken_from_the_scores() {
    let [.., spec, _] = one_read(4, 40, 32, 4);
    let source = codegen::render::render(&spec).expect("renders");
    let from = "const int stored_end = min(max(n_stored, 0), hi) / 32;";
    assert_eq!(
        source.matches(from).count(),
        1,
        "`{from}` once in the source"
    );
    let mutant = source.replacen(from, "const int stored_end = max(n_stored, 0) / 32;", 1);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(MUTATION_SEED);
    let mut caught = false;
    for (name, source) in [("as rendered", &source), ("mutated", &mutant)] {
        let select = CpuSelect::build_source(spec, source).expect("builds");
        for k in [1, 2, 5] {
            let lengths: Vec<usize> = (0..3)
                .map(|_| 32 * rng.gen_range(40..200) + rng.gen_range(1..32))
                .collect();
            let c = SelectCase::draw(&mut rng, &lengths, 1, 4, k, &[Scores::Straddle]);
            let run = select.run(
                &CpuSelectArgs {
                    scores: &c.scores,
                    ld_scores: c.ld,
                    n_total: &c.n_total,
                    n_stored: &c.n_total,
                    k,
                    kv_heads: 1,
                    max_tokens: c.max_n,
                    chunks: Some(1),
                },
                1,
            );
            // A wrong selection may also make the union's run fail (it trusts `sel`).
            let report = run.map_or_else(Some, |got| {
                let mut m = Mismatches::new(format!("{name}: k={k} lengths {lengths:?}"), 1);
                check_selection(&got, &c.reference, &mut m);
                m.report()
            });
            match (name, report) {
                ("as rendered", Some(report)) => panic!("{report}"),
                ("mutated", Some(_)) => caught = true,
                _ => {}
            }
        }
    }
    assert!(
        caught,
        "the window's half taken from the scan went unnoticed"
    );
}

/// The cluster selects (`algorithm: cluster`, and `scan_peaks_cluster` reading the scan's
/// peaks): eight blocks a query head in one thread-block cluster, run by the CPU emulator with
/// a shared memory each, from cluster barrier to cluster barrier in a random order of blocks.
/// 64 threads or more (their histograms are at most 32 entries a thread), float4, pair and
/// scalar loads, G = 1, 4, 7, 8; for the scan-peaks one every, some or none of each row stored.
fn cluster(group: u32, k_max: u32, threads: u32, items_per_thread: u32) -> SelectSpec {
    SelectSpec {
        algorithm: SelectAlgorithm::Cluster,
        ..onepass(group, k_max, threads, items_per_thread)
    }
}

/// Both cluster selects of a tile.
fn clusters(group: u32, k_max: u32, threads: u32, items_per_thread: u32) -> [SelectSpec; 2] {
    let spec = cluster(group, k_max, threads, items_per_thread);
    [
        spec,
        SelectSpec {
            algorithm: SelectAlgorithm::ScanPeaksCluster,
            ..spec
        },
    ]
}

#[test]
fn cluster_matches_the_reference_on_every_family() {
    every_family_matches(
        "cluster_matches_the_reference_on_every_family",
        &[
            (4, 96, 64, 4),
            (1, 32, 64, 3),
            (7, 200, 128, 2),
            (8, 48, 64, 8),
        ],
        clusters,
    );
}

/// Ties at the k-th key spread over several blocks of the cluster: the lowest indices must win
/// across blocks (each block's share of them from the counts of the blocks before it), and
/// runs a block holds none of (rows shorter than a tile a block).
#[test]
fn cluster_ties_across_blocks() {
    wide_ties("cluster_ties_across_blocks", clusters(4, 64, 64, 4));
}

/// Every spec of `specs` on TIE_FAMILIES (ties at the k-th key wider than a block's run) at
/// k = 1, 17, 64: a row of ~22,000 tokens, rows just past `36 + k` and one of 3,000, drawn
/// from the seed of `test`.
fn wide_ties(test: &str, specs: impl IntoIterator<Item = SelectSpec>) {
    let (mut rng, seed) = inputs::rng_and_seed(test);
    let families = TIE_FAMILIES;
    let mut failures = Vec::new();
    for spec in specs {
        let select = CpuSelect::build(spec).expect("builds");
        for k in [1, 17, 64] {
            let lengths = [
                rng.gen_range(21_000..24_000),
                ALWAYS + k + 1,
                3_000,
                ALWAYS + k + 9,
            ];
            failures.extend(case(
                &select,
                &mut rng,
                seed,
                (&lengths, 1, None),
                k,
                &families,
            ));
        }
    }
    assert_none(failures);
}

/// The cluster select's own steps, broken one at a time: what it exchanges between blocks and
/// when, and where each block writes.
#[test]
fn cluster_mutations_are_caught() {
    assert_caught(
        cluster(4, 40, 64, 4),
        &[
            (
                "the histograms summed before every block has counted",
                "        count(mine, p, prefix);\n        cluster_sync();",
                "        count(mine, p, prefix);",
            ),
            (
                "only the block's own histogram",
                "const uint2 v = cluster_load_pair(mine + d, r);",
                "const uint2 v = cluster_load_pair(mine + d, (int)blockIdx.x);",
            ),
            (
                "the histogram of the pass before not zeroed for the next",
                "for (int d = threadIdx.x; d < BINS; d += THREADS) exchanged(s, pass + 1)[d] = 0u;",
                "",
            ),
            (
                "the blocks before it not counted",
                "for (int r = 0; r < (int)blockIdx.x; ++r) {",
                "for (int r = 0; r < 0; ++r) {",
            ),
            (
                "every tie taken",
                "if (key == kth && equal_before < need)",
                "if (key == kth)",
            ),
            (
                "ties before a token above K all counted",
                "out[SINK + above_before + min(equal_before, need)] = token;",
                "out[SINK + above_before + equal_before] = token;",
            ),
            (
                "a block leaves while the others read its counts",
                "    // No block may leave while another can still read its counts.\n    cluster_sync();",
                "",
            ),
            (
                "the runs rounded down (the row's last loads in none)",
                "const int share = (end_load - first_load + CLUSTER - 1) / CLUSTER;",
                "const int share = (end_load - first_load) / CLUSTER;",
            ),
        ],
    );
}

/// The scan-peaks cluster select's own steps (it shares the cluster's radix passes and writes,
/// whose mutations are caught above), broken one at a time: which halves it takes from the
/// scan, which tokens stand in a half's peak, which halves it reads.
#[test]
fn scan_peaks_cluster_mutations_are_caught() {
    let [_, spec] = clusters(4, 40, 64, 4);
    assert_caught(
        spec,
        &[
            (
                "halves past n_stored taken from the scan",
                "x.stored_end = min(max(n_stored[b], 0), x.hi) / 32;",
                "x.stored_end = x.hi / 32;",
            ),
            (
                "the sink's half taken from the scan",
                "h < x.h1 && h >= 1 && h < x.stored_end",
                "h < x.h1 && h >= 0 && h < x.stored_end",
            ),
            (
                "the window's tokens in a half's peak",
                "unsigned int m = token >= x.lo && token < x.hi ?",
                "unsigned int m = token >= x.lo ?",
            ),
            (
                "a block's tokens counted only in halves above the floor",
                "for (unsigned int hot = __ballot_sync(FULL_MASK, peak >= hot_floor); hot != 0u; hot &= hot - 1u) {",
                "for (unsigned int hot = __ballot_sync(FULL_MASK, peak > hot_floor); hot != 0u; hot &= hot - 1u) {",
            ),
            (
                "the runs rounded down (the row's last halves in none)",
                "const int share = (end_half + CLUSTER - 1) / CLUSTER;",
                "const int share = end_half / CLUSTER;",
            ),
        ],
    );
}

/// Long rows (60k to 100k tokens, a block's run many rounds and tiles long): the counts carried
/// from round to round and tile to tile, and K' from thousands of halves.
#[test]
fn cluster_long_rows() {
    let (mut rng, seed) = inputs::rng_and_seed("cluster_long_rows");
    let families = [Scores::Gaussian, Scores::SmallIntegers, Scores::Straddle];
    let mut failures = Vec::new();
    for spec in clusters(1, 16, 64, 2) {
        let select = CpuSelect::build(spec).expect("builds");
        for k in [1, 16] {
            let lengths = [rng.gen_range(60_000..100_000)];
            failures.extend(case(
                &select,
                &mut rng,
                seed,
                (&lengths, 1, None),
                k,
                &families,
            ));
        }
    }
    assert_none(failures);
}

/// The resident select (`algorithm: resident`): one block a query head, the radix passes over
/// keys its threads hold in registers. A row whose middle fits one tile (`threads * items`
/// tokens) is read once; a longer one again by every pass. Tiles of 256 to 8,192 tokens, so
/// that the cases' rows are one tile and many: float4, pair and scalar loads, G = 1, 4, 7, 8.
fn resident(group: u32, k_max: u32, threads: u32, items_per_thread: u32) -> [SelectSpec; 1] {
    [SelectSpec {
        algorithm: SelectAlgorithm::Resident,
        ..onepass(group, k_max, threads, items_per_thread)
    }]
}

#[test]
fn resident_matches_the_reference_on_every_family() {
    every_family_matches(
        "resident_matches_the_reference_on_every_family",
        &[
            (4, 96, 64, 4),
            (1, 32, 64, 3),
            (7, 200, 128, 2),
            (8, 48, 256, 32),
        ],
        resident,
    );
}

/// Ties at the k-th key wider than a tile, and rows of one tile and of several: the lowest
/// indices must win across the tiles (the equal counts carried from tile to tile).
#[test]
fn resident_ties_across_tiles() {
    let [small] = resident(4, 64, 64, 4);
    let [large] = resident(4, 64, 256, 32);
    wide_ties("resident_ties_across_tiles", [small, large]);
}

/// The resident select's own steps, broken one at a time: which keys it holds, when it reads
/// the row again, and where each warp writes.
#[test]
fn resident_mutations_are_caught() {
    // Two loads a thread, so that a warp's writes cross loads.
    let [spec] = resident(4, 40, 64, 8);
    assert_caught(
        spec,
        &[
            (
                "a row longer than a tile read once",
                "const bool resident = end - begin <= TILE_LOADS;",
                "const bool resident = true;",
            ),
            (
                "the middle's last token left out",
                "key[j * VEC + c] = (unsigned int)(from_lo + c) < span ? k : 0u;",
                "key[j * VEC + c] = (unsigned int)(from_lo + c) + 1u < span ? k : 0u;",
            ),
            (
                "a pass's keys counted without the prefix",
                "if (PASS == 0 || (keys[i] & mask) == prefix)",
                "if (PASS == 0 || (keys[i] & mask) >= prefix)",
            ),
            (
                "one tie too many taken by the votes-free writes",
                "if (equal_run + (tile & LOW16) <= need) {",
                "if (equal_run + (tile & LOW16) <= need + 1u) {",
            ),
            (
                "a lane's tokens over those of the lanes before it",
                "unsigned int pos = at + ((inclusive[w] - own[w]) >> shift & 0xffu);",
                "unsigned int pos = at;",
            ),
            (
                "the warp's earlier loads not counted",
                "        at += total;\n",
                "",
            ),
            (
                "every tie taken where ties are cut",
                "if (is_equal && ei < need)",
                "if (is_equal)",
            ),
            (
                "a token above K placed after every tie",
                "if (is_above) out[SINK + ai + min(ei, need)]",
                "if (is_above) out[SINK + ai + ei]",
            ),
            (
                "the ties of the tiles before not carried",
                "        equal_run += tile & LOW16;\n",
                "",
            ),
            (
                "every digit of K taken whole",
                "return need == bin_count;",
                "return true;",
            ),
            (
                "a digit taken whole when one key of it is left",
                "return need == bin_count;",
                "return need + 1u >= bin_count;",
            ),
            (
                "a whole digit's least key left out",
                "const unsigned int kth = whole ? prefix - 1u : prefix;",
                "const unsigned int kth = prefix;",
            ),
            (
                "a whole digit's ties of prefix - 1 taken",
                "    if (whole) need = 0u;\n",
                "    if (whole) need = 1u;\n",
            ),
        ],
    );
}

/// -0 ranked below +0 in the resident select's keys: only rows where -0 and +0 meet at the
/// k-th key show it (the signed-zero family; `assert_caught`'s families have no zeros).
#[test]
fn resident_signed_zero_mutation_is_caught() {
    let [spec] = resident(4, 64, 64, 4);
    let from = "bits = bits == 0x80000000u ? 0u : bits;";
    let source = codegen::render::render(&spec).expect("renders");
    assert_eq!(
        source.matches(from).count(),
        1,
        "`{from}` once in the source"
    );
    let select =
        CpuSelect::build_source(spec, &source.replacen(from, "", 1)).expect("the mutant builds");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(MUTATION_SEED);
    let caught = [1, 17, 64].into_iter().any(|k| {
        let lengths = [3_000, ALWAYS + k + 9, rng.gen_range(5_000..6_000)];
        case(
            &select,
            &mut rng,
            MUTATION_SEED,
            (&lengths, 1, None),
            k,
            &[Scores::SignedZeros],
        )
        .is_some()
    });
    assert!(caught, "-0 ranked below +0 went unnoticed");
}
