//! The scans (`templates/scan.cu.tera`, and `scan_tc.cu.tera` on the tensor cores) run on the
//! CPU, exactly as rendered (`cpu_cuda`: every CUDA thread a fiber, switched in a seeded random
//! order where threads wait for each other; the inline PTX through the header's emulation:
//! `cp.async` with its asynchrony, the fp16 conversions, `prmt`, `lop3`, `mma.sync`), against
//! the f64 reference as `gpu_scan.rs` checks them on a GPU (`fathom_tests::scan_check`): every
//! score of every stored token within `reference::score::scan_tolerance`, every score past
//! `n_stored` still poison; and with `ScanSpec::peaks` the same scores bit for bit and the peak
//! of every 32-token half the largest order key of the kernel's own scores there, every other
//! peak word still poison. These need a C++17 compiler (`c++`), not a GPU.
//!
//! Cases: the plain and the tensor-core scan × both placements (on the CPU both are plain
//! memory; the kernels differ only in their comments) × G = 4 and 7 × D = 64 and 128, each with
//! and without peaks, on fresh random stores: 3 KV heads of 4 sequences, one of several
//! 1,024-token segments that stops inside a 32-token half, one of 45 tokens, one block, and
//! none (the stores hold whole blocks; the scan is told fewer tokens). Every `(b, h)` gets a
//! plan of `PLANS` (fathom at 24, 48 and 92 bits, sparq(32), every channel at depth 4, every
//! one at depth 0) or every channel at a random depth, cycled from a random start. Tiles of 1,
//! 2, 4 and 8 tokens a thread, one of a single warp, and 16-word tiles whose chunks hold at most
//! 16 runs, so a plan of many channels takes several chunks. Each case runs as the spec says
//! (one tile a block at these sizes) and again with one or three blocks a segment (blocks then
//! score several tiles and prefetch the next tile's planes) and with scales only 2-byte aligned
//! (copied by plain loads, not cp.async). Then G = 1 and 16 at D = 96 and 80, the host default
//! tile (64 words, 1,024 threads), a batch of empty sequences, the emulated instructions against
//! their definitions, and mutants of both scans that must be caught, among them reads of a
//! cp.async buffer before its copies were waited for. About 95 s on two cores from a cold cache,
//! most of it compiling ~70 programs (mutants included), which later runs reuse (cached by the
//! hash of their source): then about 45 s.

use codegen::spec::{Family, Placement, ScanSpec};
use fathom_tests::cpu_cuda::{Entry, Launch, Program, Value};
use fathom_tests::device_store::max_seg;
use fathom_tests::inputs;
use fathom_tests::scan_check::{
    batch_depths, check_peaks, check_same_scores, compare_scores, PlanKind, ScanCase, PLANS,
};
use fathom_tests::scan_cpu::{CpuScan, CpuScanArgs};
use rand::{Rng, SeedableRng};

/// The plans of a case: `PLANS` and one of random depths.
fn kinds(rng: &mut impl Rng) -> Vec<PlanKind> {
    let mut kinds = PLANS.to_vec();
    kinds.push(PlanKind::Random(rng.gen()));
    kinds
}

/// How a case is laid out and launched beyond its spec.
#[derive(Clone, Copy, Debug, Default)]
struct Variant {
    /// Blocks a segment in place of the spec's grid (`CpuScanArgs::stripes`).
    stripes: Option<u32>,
    /// Scales only 2-byte aligned (`CpuScanArgs::misaligned_scales`).
    misaligned_scales: bool,
}

/// Runs `case` on fresh random stores with the plans `kinds` (cycled from a random start):
/// `without` (the case's spec without peaks) against the reference, and `with` (with peaks),
/// when given, against `without`'s scores and its own peaks. What differed, if anything did.
fn run_case(
    rng: &mut impl Rng,
    seed: u64,
    case: &ScanCase,
    kinds: &[PlanKind],
    variant: Variant,
    (without, with): (&CpuScan, Option<&CpuScan>),
) -> Vec<String> {
    let ScanCase { d, g, .. } = *case;
    let (batch, heads) = (case.n_stored.len(), case.heads);
    let (layout, stored) = case.layout_and_stored();
    let stores = inputs::head_stores(rng, layout, &stored, heads);
    let queries = inputs::vectors(rng, batch * heads * g, d);
    let offset = rng.gen_range(0..kinds.len());
    let depths = batch_depths(kinds, offset, &stores, &queries, g);
    let ld_scores = case.n_stored.iter().max().unwrap() + 64;
    // One more half than the longest row needs: its entries stay poison.
    let ld_peaks = ld_scores.div_ceil(32) + 1;
    let args = CpuScanArgs {
        stores: &stores,
        max_seg: max_seg(layout, &stored),
        depths: &depths,
        n_scored: &case.n_stored,
        queries: &queries,
        ld_scores,
        ld_peaks,
        stripes: variant.stripes,
        misaligned_scales: variant.misaligned_scales,
    };
    let label = format!(
        "{} on the CPU: n_stored {:?}, plans {:?} from {offset}, {variant:?}",
        without.name(),
        case.n_stored,
        kinds,
    );
    let scores = match without.run(&args, seed) {
        Ok(out) => out.scores,
        Err(e) => return vec![format!("{label}: {e}")],
    };
    let mut failures: Vec<String> = compare_scores(
        &scores,
        &case.n_stored,
        &stores,
        &depths,
        &queries,
        g,
        ld_scores,
        &label,
        seed,
        case.tensor_cores,
    )
    .report()
    .into_iter()
    .collect();
    if let Some(with) = with {
        let label = format!("{label}; {}", with.name());
        match with.run(&args, seed) {
            Ok(out) => {
                failures.extend(
                    check_same_scores(&out.scores, &scores, ld_scores, &label, seed).report(),
                );
                failures.extend(
                    check_peaks(
                        &out.scores,
                        &out.peaks,
                        &case.n_stored,
                        heads,
                        g,
                        (ld_scores, ld_peaks),
                        &label,
                        seed,
                    )
                    .report(),
                );
            }
            Err(e) => failures.push(format!("{label}: {e}")),
        }
    }
    failures
}

/// Builds the case's scans (without peaks, and with them when the case asks) and runs it as the
/// spec says, and, when given, with `stripes` blocks a segment and misaligned scales.
fn check_case(rng: &mut impl Rng, seed: u64, case: &ScanCase, stripes: Option<u32>) -> Vec<String> {
    let without = CpuScan::build(ScanSpec {
        peaks: false,
        ..case.spec()
    })
    .expect("the scan builds for the CPU");
    let with = case
        .peaks
        .then(|| CpuScan::build(case.spec()).expect("the scan with peaks builds for the CPU"));
    let kinds = kinds(rng);
    let mut failures = Vec::new();
    let other = stripes.map(|stripes| Variant {
        stripes: Some(stripes),
        misaligned_scales: true,
    });
    for variant in std::iter::once(Variant::default()).chain(other) {
        failures.extend(run_case(
            rng,
            seed,
            case,
            &kinds,
            variant,
            (&without, with.as_ref()),
        ));
    }
    failures
}

fn assert_none(failures: Vec<String>) {
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Tiles `(tile_words, threads)` of the cases, in their order: 1, 2, 4 and 8 tokens a thread
/// (8 also in one warp), and 16-word tiles, whose coefficients leave room for few runs a chunk
/// (with 32-token blocks 16 at G = 4 and 8 at G = 7; with 64-token blocks 16 at G = 7).
const TILES: [(usize, usize); 8] = [
    (2, 128),
    (16, 128),
    (2, 64),
    (8, 64),
    (4, 64),
    (4, 32),
    (16, 128),
    (16, 256),
];

/// 16-word segments (1,024 tokens): a row of several segments is a few thousand tokens.
const SEGMENT_WORDS: usize = 16;

/// The cases of one variant: both placements × G = 4, 7 × D = 64, 128, tiles and blocks cycled,
/// each with peaks.
fn cases(rng: &mut impl Rng, tensor_cores: bool) -> Vec<(ScanCase, Option<u32>)> {
    let mut cases = Vec::new();
    let mut i = 0;
    for placement in [Placement::Hbm, Placement::Host] {
        for g in [4, 7] {
            for d in [64, 128] {
                let (tile_words, threads) = TILES[i];
                // The 16-word tiles of 128 threads with 32-token blocks: several chunks a plan.
                let blk = if (tile_words, threads) == (16, 128) {
                    32
                } else {
                    [32, 64, 128][i % 3]
                };
                let seg_tokens = 64 * SEGMENT_WORDS;
                // Several segments, stopping inside a half (odd) and inside a tile.
                let long = (blk * rng.gen_range(2 * seg_tokens / blk + 1..3 * seg_tokens / blk)
                    - rng.gen_range(1..32))
                    | 1;
                let case = ScanCase {
                    d,
                    g,
                    blk,
                    segment_words: SEGMENT_WORDS,
                    tile_words,
                    threads,
                    placement,
                    n_stored: vec![long, 45, blk, 0],
                    heads: 3,
                    tensor_cores,
                    peaks: true,
                };
                assert!(case.spec().validate().is_ok(), "{:?}", case.spec());
                // One block a segment (it scores every tile), or three (uneven stripes).
                let stripes = [1, 3][i % 2];
                cases.push((case, Some(stripes)));
                i += 1;
            }
        }
    }
    cases
}

#[test]
fn plain_scan_matches_the_reference() {
    let (mut rng, seed) = inputs::rng_and_seed("plain_scan_matches_the_reference");
    let mut failures = Vec::new();
    for (case, stripes) in cases(&mut rng, false) {
        failures.extend(check_case(&mut rng, seed, &case, stripes));
    }
    assert_none(failures);
}

#[test]
fn tensor_core_scan_matches_the_reference() {
    let (mut rng, seed) = inputs::rng_and_seed("tensor_core_scan_matches_the_reference");
    let mut failures = Vec::new();
    for (case, stripes) in cases(&mut rng, true) {
        failures.extend(check_case(&mut rng, seed, &case, stripes));
    }
    assert_none(failures);
}

/// G = 1 and 16 (one and four n-tiles of the tensor cores) at D = 96 and 80, with peaks.
#[test]
fn other_groups_and_head_dims() {
    let (mut rng, seed) = inputs::rng_and_seed("other_groups_and_head_dims");
    let mut failures = Vec::new();
    for tensor_cores in [false, true] {
        for (g, d, blk, (tile_words, threads)) in [(1, 96, 64, (4, 64)), (16, 80, 32, (8, 128))] {
            let case = ScanCase {
                d,
                g,
                blk,
                segment_words: SEGMENT_WORDS,
                tile_words,
                threads,
                placement: Placement::Hbm,
                n_stored: vec![blk * rng.gen_range(40..60) - 7, 45, blk, 0],
                heads: 2,
                tensor_cores,
                peaks: true,
            };
            assert!(case.spec().validate().is_ok(), "{:?}", case.spec());
            failures.extend(check_case(&mut rng, seed, &case, Some(1)));
        }
    }
    assert_none(failures);
}

/// The cases hold, for each variant and both G, a tile whose chunks hold at most 16 runs: a
/// plan of random depths (~4/5 of the channels active) then takes several chunks.
#[test]
fn some_cases_split_plans_into_chunks() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    for tensor_cores in [false, true] {
        for g in [4, 7] {
            assert!(
                cases(&mut rng, tensor_cores)
                    .iter()
                    .any(|(case, _)| case.g == g && case.spec().run_cap() <= 16),
                "tensor cores {tensor_cores}, G = {g}"
            );
        }
    }
}

/// The default tile of the host placement (64 words, 1,024 threads; the tensor-core scan's
/// registers allow 16 words of 256), and a batch of empty sequences.
#[test]
fn host_default_tile_and_empty_batch() {
    let (mut rng, seed) = inputs::rng_and_seed("host_default_tile_and_empty_batch");
    let mut failures = Vec::new();
    for tensor_cores in [false, true] {
        let default = ScanSpec::new(128, 4, Placement::Host);
        let (tile_words, threads) = if tensor_cores {
            (16, 256)
        } else {
            (default.tile_words, default.threads)
        };
        let case = ScanCase {
            d: 128,
            g: 4,
            blk: 64,
            segment_words: 64,
            tile_words,
            threads,
            placement: Placement::Host,
            n_stored: vec![64 * rng.gen_range(70..130) + 13, 0, 64],
            heads: 1,
            tensor_cores,
            peaks: false,
        };
        failures.extend(check_case(&mut rng, seed, &case, None));
        let empty = ScanCase {
            n_stored: vec![0, 0],
            tile_words: 2,
            threads: 64,
            segment_words: 2,
            peaks: true,
            ..case
        };
        failures.extend(check_case(&mut rng, seed, &empty, Some(1)));
    }
    assert_none(failures);
}

/// The seed of the mutation checks: which inputs catch a mutant must not change between runs.
const MUTATION_SEED: u64 = 0x5ca9;

/// Fails naming every mutation (what, from, to) of the rendered source of `spec` (with peaks)
/// that these cases do not catch. The scan without peaks is mutated alike where its source has
/// the text (so the reference judges the mutant's scores), else it runs unmutated beside the
/// mutant, whose scores must then equal its own.
fn assert_caught(spec: ScanSpec, mutations: &[(&str, &str, &str)]) {
    assert!(spec.peaks);
    let plain = ScanSpec {
        peaks: false,
        ..spec
    };
    let (source, plain_source) = (
        codegen::render::render(&spec).expect("renders"),
        codegen::render::render(&plain).expect("renders"),
    );
    let mut missed = Vec::new();
    for &(what, from, to) in mutations {
        assert_eq!(
            source.matches(from).count(),
            1,
            "{what}: `{from}` once in the source"
        );
        let mutant = CpuScan::build_source(spec, &source.replacen(from, to, 1))
            .unwrap_or_else(|e| panic!("the mutant `{what}` builds: {e}"));
        let without = CpuScan::build_source(plain, &plain_source.replacen(from, to, 1))
            .unwrap_or_else(|e| panic!("the mutant `{what}` without peaks builds: {e}"));
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(MUTATION_SEED);
        let case = ScanCase {
            d: spec.head_dim,
            g: spec.group,
            blk: spec.block,
            segment_words: spec.segment_words,
            tile_words: spec.tile_words,
            threads: spec.threads,
            placement: spec.placement,
            n_stored: vec![1_501, 45, spec.block, 0],
            heads: 3,
            tensor_cores: spec.tensor_cores,
            peaks: true,
        };
        let kinds = kinds(&mut rng);
        let variants = [
            Variant::default(),
            Variant {
                stripes: Some(1),
                misaligned_scales: false,
            },
            Variant {
                stripes: None,
                misaligned_scales: true,
            },
        ];
        let caught = variants.into_iter().any(|variant| {
            let failures = run_case(
                &mut rng,
                MUTATION_SEED,
                &case,
                &kinds,
                variant,
                (&without, Some(&mutant)),
            );
            if let Some(first) = failures.first() {
                eprintln!(
                    "mutant `{what}` caught: {}",
                    first.lines().next().unwrap_or("")
                );
            }
            !failures.is_empty()
        });
        if !caught {
            missed.push(what);
        }
    }
    assert!(missed.is_empty(), "mutations the cases miss: {missed:?}");
}

/// A scan whose 32-token scale blocks make the scales of a run's tile (16 bytes at 4 words) one
/// cp.async copy, so both its planes and its scales arrive asynchronously (unless misaligned),
/// and whose chunks hold 32 runs, so a plan of random depths takes two.
fn mutation_spec(tensor_cores: bool) -> ScanSpec {
    ScanSpec {
        head_dim: 64,
        group: 7,
        block: 32,
        segment_words: 8,
        tile_words: 4,
        threads: 64,
        placement: Placement::Hbm,
        tensor_cores,
        peaks: true,
    }
}

/// The plain scan's pipeline and bit extraction, broken one at a time.
#[test]
fn plain_scan_mutations_are_caught() {
    assert_caught(
        mutation_spec(false),
        &[
            (
                // Threads read the step's scales (the coefficients) before every copy of them
                // has landed: each thread waits only after the barrier.
                "cp.async wait after the barrier",
                "            fathom_wait_all_but_newest();\n            __syncthreads();  // this step's words and scales are in shared memory\n",
                "            __syncthreads();  // this step's words and scales are in shared memory\n            fathom_wait_all_but_newest();\n",
            ),
            (
                "no cp.async wait",
                "            fathom_wait_all_but_newest();\n",
                "",
            ),
            (
                // The first step's copies join the second's group: the first wait leaves them.
                "no commit of the first step",
                "    fathom_commit();\n\n    for (int tile",
                "\n    for (int tile",
            ),
            (
                "the first chunk prefetched for every step",
                "sh.chunks[last_chunk ? 0 : c + 1]",
                "sh.chunks[0]",
            ),
            (
                "misaligned scales read from the first block's",
                "shared[k] = __ldg(global + k);",
                "shared[k] = __ldg(global);",
            ),
            (
                "each lane's bit one place off",
                "rot[k] = (lane - k) & 31;",
                "rot[k] = (lane - k + 1) & 31;",
            ),
            (
                "peaks of halves without a stored token",
                "if (lane == 0 && stored) {",
                "if (lane == 0) {",
            ),
        ],
    );
}

/// The tensor-core scan's pipeline, operands and peaks, broken one at a time.
#[test]
fn tensor_core_scan_mutations_are_caught() {
    assert_caught(
        mutation_spec(true),
        &[
            (
                // The mma loop reads the step's words and scales before every copy of them has
                // landed: each thread waits only after the barrier.
                "cp.async wait after the barrier",
                "            fathom_wait_all_but_newest();\n            if (!one_chunk) fathom_chunk_operands(sh, chunk);\n            __syncthreads();  // this step's words and scales are in shared memory, the chunk's operands formed\n",
                "            if (!one_chunk) fathom_chunk_operands(sh, chunk);\n            __syncthreads();  // this step's words and scales are in shared memory, the chunk's operands formed\n            fathom_wait_all_but_newest();\n",
            ),
            (
                "no cp.async wait",
                "            fathom_wait_all_but_newest();\n",
                "",
            ),
            (
                "the first chunk's operands for every chunk",
                "if (!one_chunk) fathom_chunk_operands(sh, chunk);",
                "",
            ),
            (
                "tokens row and row + 8 swapped in the A fragment",
                "fathom_signed_pair<0>(w[0], w[1], delta.x), fathom_signed_pair<1>(w[0], w[1], delta.x),",
                "fathom_signed_pair<1>(w[0], w[1], delta.x), fathom_signed_pair<0>(w[0], w[1], delta.x),",
            ),
            (
                // The weights' fp16 high parts alone: ~11 bits of each weight, which the
                // tolerance (~21 bits) must not allow.
                "no low part of the weights",
                "part[i] = column % 2 == 0 ? high : fathom_f32_to_f16(w - fathom_f16_to_f32(high));",
                "part[i] = column % 2 == 0 ? high : (unsigned short)0;",
            ),
            (
                "a peak over half the rows of its half",
                "for (int o = 4; o < 32; o *= 2)",
                "for (int o = 8; o < 32; o *= 2)",
            ),
            (
                "every piece staged from the first piece's plane",
                "words = sh.piece_words[piece];",
                "words = sh.piece_words[0];",
            ),
            (
                "the Δ of piece 2t + 1 for piece 2t",
                "base + (scale & 0xffffu)",
                "base + (scale >> 16)",
            ),
            (
                "the scales of the warp's first block for its every block",
                "sh.scale_bits[buf] + first_block + tb;",
                "sh.scale_bits[buf] + first_block;",
            ),
            (
                // Every Δ negated where its bit is set, not where it is clear.
                "the signs of the A operands flipped",
                "0x80008000u, delta, 0xAE);",
                "0x80008000u, delta, 0xEA);",
            ),
            (
                "a tile's tokens past n_stored scored as stored",
                "const bool full = tile_first + TILE_TOKENS <= n;",
                "const bool full = tile_first < n;",
            ),
            (
                // The warp that takes a head's scale loads only its first 32 channels.
                "a head's query loaded in part",
                "for (int c = lane; c < D; c += 32) {",
                "for (int c = lane; c < 32; c += 32) {",
            ),
            (
                // The copies issued before the operands fetch the block's second tile first.
                "the first step staged from the next tile",
                "fathom_stage(sh, sh.chunks[0], tile_begin, 0, false);",
                "fathom_stage(sh, sh.chunks[0], tile_begin + 1 < tile_end ? tile_begin + 1 : tile_begin, 0, false);",
            ),
        ],
    );
}

/// A one-warp kernel of the header's emulated instructions: `out[i]` of `in[i]` (`in2[i]`,
/// `in3[i]`), by `op`.
const INSTRUCTIONS: &str = r#"
extern "C" __global__ void instructions(const unsigned int* a, const unsigned int* b, const unsigned int* c,
                                        unsigned int* out, int n, int op) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        switch (op) {
        case 0: out[i] = fathom_cpu::f32_to_f16(__uint_as_float(a[i])); break;
        case 1: out[i] = __float_as_uint(fathom_cpu::f16_to_f32((unsigned short)a[i])); break;
        case 2: out[i] = fathom_cpu::f32_to_bf16(__uint_as_float(a[i])); break;
        case 3: out[i] = fathom_cpu::prmt(a[i], b[i], c[i] & 0xffff); break;
        case 4: out[i] = fathom_cpu::lop3(a[i], b[i], c[i], c[i] >> 24); break;
        }
    }
}

// D = A · B + C of a 16 × 16 by 16 × 8 product, fp16 A (row-major) and B (k-major) and fp32 C
// (row-major), each lane taking its fragments as the PTX ISA lays them out.
extern "C" __global__ void mma(const unsigned short* a, const unsigned short* b, const float* c, float* d) {
    const int lane = threadIdx.x % 32, group = lane >> 2, thread = lane % 4;
    unsigned int fa[4], fb0 = 0, fb1 = 0;
    float acc[4];
    for (int r = 0; r < 4; ++r) {
        const int row = group + 8 * (r % 2), col = 2 * thread + 8 * (r / 2);
        fa[r] = a[row * 16 + col] | (unsigned int)a[row * 16 + col + 1] << 16;
    }
    fb0 = b[(2 * thread) * 8 + group] | (unsigned int)b[(2 * thread + 1) * 8 + group] << 16;
    fb1 = b[(2 * thread + 8) * 8 + group] | (unsigned int)b[(2 * thread + 9) * 8 + group] << 16;
    for (int i = 0; i < 4; ++i) acc[i] = c[(group + 8 * (i / 2)) * 8 + 2 * thread + (i & 1)];
    fathom_cpu::mma_sync_m16n8k16(acc, fa, fb0, fb1, __LINE__);
    for (int i = 0; i < 4; ++i) d[(group + 8 * (i / 2)) * 8 + 2 * thread + (i & 1)] = acc[i];
}
"#;

/// prmt.b32 in its generic form, from the PTX ISA's pseudo-code.
fn prmt(a: u32, b: u32, c: u32) -> u32 {
    let source = u64::from(b) << 32 | u64::from(a);
    (0..4).fold(0, |d, i| {
        let select = (c >> (4 * i)) & 0xf;
        let byte = (source >> (8 * (select & 7))) as u32 & 0xff;
        let byte = if select & 8 == 0 {
            byte
        } else if byte & 0x80 != 0 {
            0xff
        } else {
            0
        };
        d | byte << (8 * i)
    })
}

/// lop3.b32: bit k of the result is bit `a_k·4 + b_k·2 + c_k` of the table.
fn lop3(a: u32, b: u32, c: u32, lut: u32) -> u32 {
    (0..32).fold(0, |d, k| {
        let index = (a >> k & 1) << 2 | (b >> k & 1) << 1 | (c >> k & 1);
        d | (lut >> index & 1) << k
    })
}

/// The emulated instructions against their definitions: the fp16 conversions against the
/// `half` crate (every fp16; f32 at every rounding boundary of the fp16 range and at random),
/// bf16 likewise, `prmt` and `lop3` against the PTX ISA's pseudo-code, the two selectors and the
/// table the tensor-core scan uses among them, and `mma.sync` against an exact product.
#[test]
fn emulated_instructions_match_their_definitions() {
    let (mut rng, seed) = inputs::rng_and_seed("emulated_instructions_match_their_definitions");
    let entries = ["instructions", "mma"]
        .map(|name| Entry::from_source(INSTRUCTIONS, name.to_string()).expect("entry"));
    let program = Program::build(INSTRUCTIONS, entries.to_vec()).expect("builds");
    let run = |op: i64, a: &[u32], b: &[u32], c: &[u32]| -> Vec<u32> {
        let n = a.len();
        let mut buffers = vec![a.to_vec(), b.to_vec(), c.to_vec(), vec![u32::MAX; n]];
        let launch = Launch {
            entry: 0,
            grid: [1, 1, 1],
            threads: 32,
            args: vec![
                Value::Buffer(0),
                Value::Buffer(1),
                Value::Buffer(2),
                Value::Buffer(3),
                Value::Int(n as i64),
                Value::Int(op),
            ],
        };
        program.run(&mut buffers, &[launch], seed).expect("runs");
        buffers.swap_remove(3)
    };

    // f32 -> f16 and bf16: both sides of every rounding boundary (ties included) of the
    // normal and subnormal fp16 ranges, overflow, and random bits.
    let mut floats: Vec<u32> = Vec::new();
    for h in 0u16..0x7c00 {
        let x = half::f16::from_bits(h).to_f32();
        let next = half::f16::from_bits(h + 1).to_f32();
        let mid = ((f64::from(x) + f64::from(next)) / 2.0) as f32;
        for v in [x, mid, -mid, -x] {
            for delta in [-1i64, 0, 1] {
                floats.push((i64::from(v.to_bits()) + delta) as u32);
            }
        }
    }
    floats.extend((0..20_000).map(|_| rng.gen::<u32>()));
    // 65520, half way from the largest fp16 to 65536: rounds to infinity.
    for v in [0x477f_f000u32, 0xc77f_f000] {
        floats.extend([v - 1, v, v + 1]);
    }
    floats.extend([
        0x7f80_0000,
        0xff80_0000,
        0x7fc0_0000,
        0x0000_0001,
        0x8000_0000,
    ]);
    let b = vec![0; floats.len()];
    let got = run(0, &floats, &b, &b);
    for (&x, &h) in floats.iter().zip(&got) {
        let f = f32::from_bits(x);
        let want = if f.is_nan() {
            0x7fff
        } else {
            u32::from(half::f16::from_f32(f).to_bits())
        };
        assert_eq!(h, want, "cvt.rn.f16.f32 of {f:e} ({x:#010x})");
    }
    let got = run(2, &floats, &b, &b);
    for (&x, &h) in floats.iter().zip(&got) {
        let f = f32::from_bits(x);
        let want = if f.is_nan() {
            0x7fff
        } else {
            u32::from(half::bf16::from_f32(f).to_bits())
        };
        assert_eq!(h, want, "cvt.rn.bf16.f32 of {f:e} ({x:#010x})");
    }
    let halves: Vec<u32> = (0..=u32::from(u16::MAX)).collect();
    let b = vec![0; halves.len()];
    let got = run(1, &halves, &b, &b);
    for (&h, &x) in halves.iter().zip(&got) {
        let want = half::f16::from_bits(h as u16).to_f32();
        if want.is_nan() {
            assert!(f32::from_bits(x).is_nan(), "cvt.f32.f16 of {h:#06x}");
        } else {
            assert_eq!(x, want.to_bits(), "cvt.f32.f16 of {h:#06x}");
        }
    }

    // prmt and lop3: random operands, selectors and tables, and those of fathom_signed_pair.
    let n = 4096;
    let a: Vec<u32> = (0..n).map(|_| rng.gen()).collect();
    let b: Vec<u32> = (0..n).map(|_| rng.gen()).collect();
    let c: Vec<u32> = (0..n)
        .map(|i| match i % 5 {
            0..=3 => ((4 + i as u32 % 4) << 12) | ((i as u32 % 4) << 4),
            _ => rng.gen(),
        })
        .collect();
    let got = run(3, &a, &b, &c);
    for i in 0..n {
        assert_eq!(got[i], prmt(a[i], b[i], c[i] & 0xffff), "prmt {i}");
    }
    let c: Vec<u32> = (0..n)
        .map(|i| {
            if i % 2 == 0 {
                0x6a00_0000 | rng.gen_range(0..1 << 24)
            } else {
                rng.gen()
            }
        })
        .collect();
    let got = run(4, &a, &b, &c);
    for i in 0..n {
        assert_eq!(got[i], lop3(a[i], b[i], c[i], c[i] >> 24), "lop3 {i}");
        if c[i] >> 24 == 0x6a {
            assert_eq!(got[i], (a[i] & b[i]) ^ c[i], "lop3 0x6A is (a & b) ^ c");
        }
    }

    // mma: small integers and halves, so every product and sum is exact in fp32.
    let av: Vec<f32> = (0..256)
        .map(|_| rng.gen_range(-8..8) as f32 / 2.0)
        .collect();
    let bv: Vec<f32> = (0..128)
        .map(|_| rng.gen_range(-8..8) as f32 / 4.0)
        .collect();
    let cv: Vec<f32> = (0..128).map(|_| rng.gen_range(-64..64) as f32).collect();
    let fp16 = |v: &[f32]| -> Vec<u32> {
        v.chunks(2)
            .map(|p| {
                u32::from(half::f16::from_f32(p[0]).to_bits())
                    | u32::from(half::f16::from_f32(p[1]).to_bits()) << 16
            })
            .collect()
    };
    let mut buffers = vec![
        fp16(&av),
        fp16(&bv),
        cv.iter().map(|x| x.to_bits()).collect(),
        vec![u32::MAX; 128],
    ];
    let launch = Launch {
        entry: 1,
        grid: [1, 1, 1],
        threads: 64,
        args: (0..4).map(Value::Buffer).collect(),
    };
    program.run(&mut buffers, &[launch], seed).expect("runs");
    for row in 0..16 {
        for col in 0..8 {
            let want: f32 = cv[row * 8 + col]
                + (0..16)
                    .map(|k| av[row * 16 + k] * bv[k * 8 + col])
                    .sum::<f32>();
            let got = f32::from_bits(buffers[3][row * 8 + col]);
            assert_eq!(got, want, "mma D[{row}][{col}]");
        }
    }
}
