//! GPU tests of the ParisKV kernels (SPEC §12) against the f64 reference
//! `reference::pariskv`.
//!
//! The kernels compute everything that decides the selection in f64 with the reference's
//! operation order and no fused multiply-adds, and round the weights as `half`'s
//! `bf16::from_f64`; so every comparison here is exact: index rows and histograms bit for bit,
//! `q̃`, `||q̄||` and `ŝ` equal as f64 (`==`, so `-0.0` equals `0.0`, the only freedom the
//! reference's iterator sums leave), tiers, votes, the candidate set and the selection identical.
//! There is no float-tie tolerance to define: equal estimates are equal in both and both break
//! the tie by the lower token index.
//!
//! Coverage: every D of §1 (80, 96 and 192 zero-padded to 128 and 256 for the transform); G = 1,
//! 4, 7, 16; both placements (index rows in HBM or in mapped host
//! memory); B = 3 or 4 sequences × H = 2 KV heads per launch, with lengths 0, 1, below the sink
//! and window, one block of the build grid, exactly `36 + k` (every token), `37 + k`, and the
//! ρ/β ranges of 5k, 10k and 30k retrievable tokens; k = 0, 16, 100, 512; a zero query group (all
//! centroids tie); grids of one block; an append after a prefill; a non-finite key and a weight
//! overflow reported through `status` with nothing written for that token. Every output buffer
//! is poisoned first, so an element that should not be written and is, or should be and is not,
//! is caught. The retrieval cases run with the default rerank, with its whole-row `_score`
//! (`PariskvRerankSpec::vector_loads`, 16-byte loads of the code and weight rows), with its
//! many-block top-k (`PariskvRerankSpec::select`, `multiblock`, at `k_max` = 512 so that a
//! 30k-token sequence spans several `_chunk` blocks and `k = 512` needs two `_merge`s), and with
//! `_score`'s operands in tables laid out for it (`PariskvRerankSpec::decode_table`, both
//! `_score` forms), and with the query kernel's subspaces split over several blocks a KV head
//! (`PariskvQuerySpec::subspace_blocks`: 3, and one a subspace).

use codegen::spec::launch::Launch;
use codegen::spec::pariskv::{
    candidate_count, padded_dim, subspaces, vote_bins, RerankSelect, CENTROIDS, TIERS, VECTOR_ALIGN,
};
use codegen::spec::{Family, Placement};
use fathom_tests::kit::GpuTest;
use fathom_tests::pariskv_kernels::{
    device_signs, DeviceIndex, HostIndex, PariskvKernels, RerankVariant, RetrievalArgs,
};
use fathom_tests::select_kernels::{
    check_selection, with_grid_x, HeadTable, Mismatches, POISON_I32, POISON_U16,
};
use fathom_tests::{gpu_test, inputs};
use half::bf16;
use rand::seq::SliceRandom;
use rand::Rng;
use reference::pariskv::{pariskv_select, retrieve, PariskvError, PariskvIndex};
use runtime::gpu::Gpu;

const KV_HEADS: usize = 2;
const K_MAX: u32 = 2048;
/// The many-block top-k's `k_max` in these tests: 256 threads of 4 candidates, 1,024 a block.
const MULTIBLOCK_K_MAX: u32 = 512;

/// The head dimensions ParisKV serves, in the width of the kernel specs.
fn pariskv_head_dims() -> impl Iterator<Item = u32> {
    codegen::spec::pariskv::head_dims().map(|d| d as u32)
}

/// Keys of every head of every sequence (`[b*H + h]`), `lengths[b]` tokens each.
fn head_keys(rng: &mut impl Rng, lengths: &[usize], d: usize) -> Vec<Vec<bf16>> {
    (0..lengths.len() * KV_HEADS)
        .map(|kh| {
            let mut keys = inputs::keys(rng, lengths[kh / KV_HEADS], d);
            // An all-zero key (id 255 everywhere, weight 0) where there is room for one.
            if keys.len() >= 3 * d {
                keys[2 * d..3 * d].fill(bf16::ZERO);
            }
            keys
        })
        .collect()
}

/// The keys as `k_rows` (bf16 bits), each head padded with zeros to `capacity` rows.
fn upload_keys(
    gpu: &Gpu,
    placement: Placement,
    keys: &[Vec<bf16>],
    d: usize,
    capacity: usize,
) -> HeadTable<u16> {
    let rows: Vec<Vec<u16>> = keys
        .iter()
        .map(|k| {
            let mut bits: Vec<u16> = k.iter().map(|x| x.to_bits()).collect();
            bits.resize(capacity * d, 0);
            bits
        })
        .collect();
    HeadTable::upload(gpu, placement, &rows).expect("keys upload")
}

/// Compares head `head`'s device index with the reference index's rows (padded with poison).
fn check_index(got: &HostIndex, want: &HostIndex, head: &str, m: &mut Mismatches) {
    for (what, a, b) in [
        ("ids", got.ids.len(), want.ids.len()),
        ("codes", got.codes.len(), want.codes.len()),
        ("weights", got.weights.len(), want.weights.len()),
        ("hist", got.hist.len(), want.hist.len()),
    ] {
        m.check(a == b, || {
            format!("{head} {what}: {a} entries, reference {b}")
        });
    }
    for (what, g, w) in [
        ("ids", &got.ids, &want.ids),
        ("codes", &got.codes, &want.codes),
    ] {
        for (i, (a, b)) in g.iter().zip(w.iter()).enumerate() {
            m.check(a == b, || {
                format!("{head} {what}[{i}] = {a:#04x}, reference {b:#04x}")
            });
        }
    }
    for (i, (a, b)) in got.weights.iter().zip(&want.weights).enumerate() {
        m.check(a == b, || {
            format!("{head} weights[{i}] = {a:#06x}, reference {b:#06x}")
        });
    }
    for (i, (a, b)) in got.hist.iter().zip(&want.hist).enumerate() {
        m.check(a == b, || format!("{head} hist[{i}] = {a}, reference {b}"));
    }
}

/// Builds every head's index on the GPU over `[0, n)` (grid x from the spec, or `grid_x`).
#[allow(clippy::too_many_arguments)]
fn gpu_build(
    gpu: &Gpu,
    kernels: &PariskvKernels,
    placement: Placement,
    keys: &[Vec<bf16>],
    lengths: &[usize],
    capacity: usize,
    grid_x: Option<u32>,
) -> (DeviceIndex, Vec<i32>) {
    let d = kernels.index.head_dim as usize;
    let k_rows = upload_keys(gpu, placement, keys, d, capacity);
    let index = DeviceIndex::empty(gpu, placement, d, keys.len(), capacity).unwrap();
    let signs = device_signs(gpu, d).unwrap();
    let ends: Vec<i32> = lengths.iter().map(|&n| n as i32).collect();
    let end = gpu.upload(&ends).unwrap();
    let status = gpu.upload(&[0i32; 4]).unwrap();
    let max = lengths.iter().copied().max().unwrap_or(0) as u64;
    let mut grid = kernels
        .index
        .launch(lengths.len() as u64, KV_HEADS as u64, max)
        .unwrap();
    if let Some(x) = grid_x {
        grid = with_grid_x(grid, x);
    }
    kernels
        .build(
            gpu,
            grid,
            &index,
            k_rows.addr(),
            signs.addr(),
            None,
            end.addr(),
            KV_HEADS,
            status.addr(),
        )
        .unwrap();
    gpu.synchronize().unwrap();
    (index, status.download().unwrap())
}

gpu_test!(index_build_matches_the_reference, |t| {
    for placement in [Placement::Hbm, Placement::Host] {
        for d in pariskv_head_dims() {
            let kernels = PariskvKernels::load(&t.gpu, d, 4, K_MAX, placement).unwrap();
            // n = 0, 1, one block of the build grid (4 tokens per warp), a long partial one.
            let one_block = (kernels.index.threads / 32 * 4) as usize;
            let mut lengths = vec![0, 1, one_block, t.rng.gen_range(500..3000)];
            lengths.shuffle(&mut t.rng);
            let capacity = lengths.iter().max().unwrap() + 3;
            let keys = head_keys(&mut t.rng, &lengths, d as usize);
            for grid_x in [None, Some(1)] {
                let (index, status) = gpu_build(
                    &t.gpu, &kernels, placement, &keys, &lengths, capacity, grid_x,
                );
                let mut m =
                    Mismatches::new(format!("index d{d} {placement:?} grid {grid_x:?}"), t.seed);
                m.check(status == [0; 4], || format!("status {status:?}"));
                for (kh, k) in keys.iter().enumerate() {
                    let want =
                        HostIndex::of(&PariskvIndex::build(k, d as usize).unwrap(), capacity);
                    check_index(
                        &index.read(kh).unwrap(),
                        &want,
                        &format!("head {kh}"),
                        &mut m,
                    );
                }
                m.finish();
            }
        }
    }
});

gpu_test!(append_after_prefill_equals_the_build_of_all, |t| {
    for placement in [Placement::Hbm, Placement::Host] {
        for d in pariskv_head_dims() {
            let du = d as usize;
            let kernels = PariskvKernels::load(&t.gpu, d, 1, K_MAX, placement).unwrap();
            let lengths = [t.rng.gen_range(200..1500), 64, 7];
            // Prefill ends: mid-sequence, the whole sequence (empty append), 0 (all appended).
            let firsts = [t.rng.gen_range(1..lengths[0]), 64, 0];
            let capacity = lengths[0] + 1;
            let keys = head_keys(&mut t.rng, &lengths, du);
            let k_rows = upload_keys(&t.gpu, placement, &keys, du, capacity);
            let index = DeviceIndex::empty(&t.gpu, placement, du, keys.len(), capacity).unwrap();
            let signs = device_signs(&t.gpu, du).unwrap();
            let status = t.gpu.upload(&[0i32; 4]).unwrap();
            let prefill = t.gpu.upload(&firsts.map(|n| n as i32)).unwrap();
            let end = t.gpu.upload(&lengths.map(|n| n as i32)).unwrap();
            let grid: Launch = kernels
                .index
                .launch(3, KV_HEADS as u64, capacity as u64)
                .unwrap();
            let build = |start: Option<u64>, end: u64| {
                kernels
                    .build(
                        &t.gpu,
                        grid,
                        &index,
                        k_rows.addr(),
                        signs.addr(),
                        start,
                        end,
                        KV_HEADS,
                        status.addr(),
                    )
                    .unwrap()
            };
            build(None, prefill.addr());
            build(Some(prefill.addr()), end.addr());
            t.gpu.synchronize().unwrap();
            let mut m = Mismatches::new(format!("append d{d} {placement:?}"), t.seed);
            let status = status.download().unwrap();
            m.check(status == [0; 4], || format!("status {status:?}"));
            for (kh, k) in keys.iter().enumerate() {
                let mut reference =
                    PariskvIndex::build(&k[..firsts[kh / KV_HEADS] * du], du).unwrap();
                reference.append(&k[firsts[kh / KV_HEADS] * du..]).unwrap();
                assert_eq!(reference, PariskvIndex::build(k, du).unwrap());
                let want = HostIndex::of(&reference, capacity);
                check_index(
                    &index.read(kh).unwrap(),
                    &want,
                    &format!("head {kh}"),
                    &mut m,
                );
            }
            m.finish();
        }
    }
});

gpu_test!(bad_keys_are_reported_and_not_written, |t| {
    // D = 96 pads its keys for the transform: the faults are still the key's.
    for (d, (kind, value)) in [
        (128usize, (1, f32::NAN)),
        (128, (2, 3.0e38f32)),
        (96, (1, f32::INFINITY)),
        (96, (2, 3.0e38f32)),
    ] {
        let kernels = PariskvKernels::load(&t.gpu, d as u32, 1, K_MAX, Placement::Hbm).unwrap();
        let lengths = [300usize];
        let mut keys = head_keys(&mut t.rng, &lengths, d);
        let (bad_head, bad_token) = (1usize, t.rng.gen_range(3..300usize));
        let row = &mut keys[bad_head][bad_token * d..(bad_token + 1) * d];
        if kind == 1 {
            row[t.rng.gen_range(0..d)] = bf16::from_f32(value);
        } else {
            row.fill(bf16::from_f32(value));
        }
        let want_error = PariskvIndex::build(&keys[bad_head], d).unwrap_err();
        match (kind, &want_error) {
            (1, PariskvError::NonFiniteKey { token, .. })
            | (2, PariskvError::WeightOverflow { token, .. }) => assert_eq!(*token, bad_token),
            _ => panic!("the reference refuses the bad key otherwise: {want_error}"),
        }
        let (index, status) =
            gpu_build(&t.gpu, &kernels, Placement::Hbm, &keys, &lengths, 300, None);
        let mut m = Mismatches::new(format!("bad key kind {kind} d{d}"), t.seed);
        m.check(
            status == [kind, 0, bad_head as i32, bad_token as i32],
            || format!("status {status:?}, want [{kind}, 0, {bad_head}, {bad_token}]"),
        );
        // The other tokens are indexed as the reference does; the bad one is not written and not
        // counted (the reference index of the other tokens, with the bad row's slot poisoned).
        let mut others = keys[bad_head].clone();
        others.drain(bad_token * d..(bad_token + 1) * d);
        let reference = PariskvIndex::build(&others, d).unwrap();
        let mut want = HostIndex::of(&reference, 300);
        let ns = subspaces(d as u32) as usize;
        let half = padded_dim(d as u32) as usize / 2;
        for (v, width) in [(&mut want.ids, ns), (&mut want.codes, half)] {
            v.splice(bad_token * width..bad_token * width, vec![0xff; width]);
            v.truncate(300 * width);
        }
        want.weights
            .splice(bad_token * ns..bad_token * ns, vec![POISON_U16; ns]);
        want.weights.truncate(300 * ns);
        check_index(&index.read(bad_head).unwrap(), &want, "bad head", &mut m);
        m.finish();
    }
});

/// One retrieval case: shape, placement, lengths, k.
struct Case {
    d: u32,
    g: u32,
    placement: Placement,
    lengths: Vec<usize>,
    k: usize,
    one_block_grids: bool,
    /// The rerank's `_score` and top-k.
    rerank: RerankVariant,
}

fn retrieval_case(gpu: &Gpu, rng: &mut impl Rng, seed: u64, case: &Case) {
    let (d, g) = (case.d as usize, case.g as usize);
    let k_max = match case.rerank.select {
        RerankSelect::Single => K_MAX,
        RerankSelect::Multiblock => MULTIBLOCK_K_MAX,
    };
    let kernels =
        PariskvKernels::load_variant(gpu, case.d, case.g, k_max, case.placement, case.rerank)
            .unwrap();
    assert_eq!(kernels.rerank.vector_loads, case.rerank.vector_loads);
    assert_eq!(kernels.rerank.select, case.rerank.select);
    assert_eq!(kernels.rerank.decode_table, case.rerank.decode_table);
    assert_eq!(
        kernels.query.subspace_blocks,
        case.rerank.query_blocks.clamp(1, subspaces(case.d))
    );
    let batch = case.lengths.len();
    let capacity = case.lengths.iter().copied().max().unwrap_or(0).max(1);
    let keys = head_keys(rng, &case.lengths, d);
    let (index, status) = gpu_build(
        gpu,
        &kernels,
        case.placement,
        &keys,
        &case.lengths,
        capacity,
        None,
    );
    let what = format!(
        "retrieval {} lengths {:?} k {}",
        kernels.rerank.kernel_name(),
        case.lengths,
        case.k
    );
    let mut m = Mismatches::new(what.clone(), seed);
    m.check(status == [0; 4], || format!("status {status:?}"));
    // The whole-row loads need 16-byte aligned code and weight tables.
    let tables = index.codes.heads.iter().map(|t| t.addr());
    for addr in tables.chain(index.weights.heads.iter().map(|t| t.addr())) {
        m.check(addr % VECTOR_ALIGN == 0, || {
            format!("an index table at {addr:#x} is not 16-byte aligned")
        });
    }
    let references: Vec<PariskvIndex> = keys
        .iter()
        .map(|k| PariskvIndex::build(k, d).unwrap())
        .collect();
    for (kh, r) in references.iter().enumerate() {
        check_index(
            &index.read(kh).unwrap(),
            &HostIndex::of(r, capacity),
            &format!("head {kh}"),
            &mut m,
        );
    }

    let mut q = inputs::vectors(rng, batch * KV_HEADS * g, d);
    // A zero query group when there are two sequences or more: every centroid ties.
    if batch > 1 {
        let kh = KV_HEADS; // (b = 1, h = 0)
        q[kh * g * d..(kh + 1) * g * d].fill(0.0);
    }
    let q_dev = gpu.upload(&q).unwrap();
    let n_dev = gpu
        .upload(&case.lengths.iter().map(|&n| n as i32).collect::<Vec<_>>())
        .unwrap();
    let signs = device_signs(gpu, d).unwrap();
    let grid_x = case.one_block_grids.then_some(1);
    let got = kernels
        .retrieve(
            gpu,
            &RetrievalArgs {
                index: &index,
                q: q_dev.addr(),
                signs: signs.addr(),
                n_total: n_dev.addr(),
                batch,
                kv_heads: KV_HEADS,
                max_tokens: capacity,
                k: case.k,
            },
            grid_x,
            grid_x,
        )
        .unwrap();

    let ns = subspaces(case.d) as usize;
    let bins = vote_bins(case.d) as usize;
    let (cent, tiers_n) = (CENTROIDS as usize, TIERS as usize);
    let mut selections = Vec::new();
    for (kh, reference) in references.iter().enumerate() {
        let n = case.lengths[kh / KV_HEADS];
        let queries: Vec<Vec<f64>> = (0..g)
            .map(|i| {
                let at = (kh * g + i) * d;
                q[at..at + d].iter().map(|&x| f64::from(x)).collect()
            })
            .collect();
        let want = retrieve(reference, &queries, n, case.k).unwrap();
        let head = format!("head {kh} (n = {n})");
        // q̃ has the padded dimension's coordinates (D = 80, 96, 192 pad to 128, 256).
        let dp = padded_dim(case.d) as usize;
        for c in 0..dp {
            let (a, b) = (got.q_tilde[kh * dp + c], want.q_tilde[c]);
            m.check(a == b, || {
                format!("{head} q_tilde[{c}] = {a:e}, reference {b:e}")
            });
        }
        m.check(got.q_norm[kh] == want.q_norm, || {
            format!("{head} q_norm {} vs {}", got.q_norm[kh], want.q_norm)
        });
        for b in 0..ns {
            for i in 0..tiers_n {
                let a = got.tier_len[(kh * ns + b) * tiers_n + i];
                let w = want.tiers[b][i] as i32;
                m.check(a == w, || {
                    format!("{head} subspace {b} tier {i}: length {a}, reference {w}")
                });
            }
            for (position, &id) in want.rankings[b].iter().enumerate() {
                let holding = want.tiers[b].iter().filter(|&&l| position < l).count() as u8;
                let a = got.tiers[(kh * ns + b) * cent + usize::from(id)];
                m.check(a == holding, || {
                    format!("{head} subspace {b} id {id}: in {a} tiers, reference {holding}")
                });
            }
        }
        let mut hist = vec![0u32; bins];
        for &v in &want.votes {
            hist[v as usize] += 1;
        }
        for (v, (&a, &w)) in got.vote_hist[kh * bins..(kh + 1) * bins]
            .iter()
            .zip(&hist)
            .enumerate()
        {
            m.check(a == w, || {
                format!("{head} vote_hist[{v}] = {a}, reference {w}")
            });
        }
        for t in 0..got.ld_votes {
            let a = got.votes[kh * got.ld_votes + t];
            let w = if want.retrievable.contains(&t) {
                want.votes[t - want.retrievable.start] as u16
            } else {
                POISON_U16
            };
            m.check(a == w, || {
                format!("{head} votes[{t}] = {a}, reference {w} (poison 0xffff)")
            });
        }
        let c = want.candidates.len();
        m.check(
            c as u64 == candidate_count(want.retrievable.len() as u64),
            || format!("{head}: the reference has {c} candidates"),
        );
        m.check(got.cand_count[kh] as usize == c, || {
            format!("{head} cand_count {}, reference {c}", got.cand_count[kh])
        });
        let mut sorted = want.candidates.clone();
        sorted.sort_unstable();
        let row = &got.cand[kh * got.ld_cand..(kh + 1) * got.ld_cand];
        for (i, &a) in row.iter().enumerate() {
            let w = sorted.get(i).map_or(POISON_I32, |&t| t as i32);
            m.check(a == w, || format!("{head} cand[{i}] = {a}, reference {w}"));
        }
        let scores = &got.cand_score[kh * got.ld_cand..(kh + 1) * got.ld_cand];
        for (i, &s) in scores.iter().enumerate() {
            if i < c {
                let w = reference.estimate(sorted[i], want.q_norm, &want.q_tilde);
                m.check(s == w, || {
                    format!(
                        "{head} cand_score[{i}] (token {}) = {s:e}, reference {w:e}",
                        sorted[i]
                    )
                });
            } else {
                m.check(s.to_bits() == u64::MAX, || {
                    format!("{head} cand_score[{i}] written past C")
                });
            }
        }
        let selection = pariskv_select(reference, &queries, n, case.k).unwrap();
        selections.push(selection);
    }
    check_selection(&got.selection, &selections, &mut m);
    m.finish();
}

gpu_test!(retrieval_matches_the_reference, |t| {
    retrieval_cases(&mut t, RerankVariant::default());
});

// The same cases with the rerank's whole-row `_score`: every `ŝ` bit-equal to the reference,
// and the same selection.
gpu_test!(retrieval_with_whole_row_loads_matches_the_reference, |t| {
    let rerank = RerankVariant {
        vector_loads: true,
        ..RerankVariant::default()
    };
    retrieval_cases(&mut t, rerank);
});

// The same cases with the rerank's many-block top-k (`_chunk`, `_merge`, `_write` in place of
// `_select`): the same selection as the reference, and so as the one-block `_select`.
gpu_test!(
    retrieval_with_many_block_select_matches_the_reference,
    |t| {
        let rerank = RerankVariant {
            select: RerankSelect::Multiblock,
            ..RerankVariant::default()
        };
        retrieval_cases(&mut t, rerank);
    }
);

// The same cases with `_score`'s operands in tables laid out for it
// (`PariskvRerankSpec::decode_table`), in both `_score` forms (the whole-row one with the
// many-block top-k, as the H200 record runs it): every `ŝ` bit-equal to the reference.
gpu_test!(retrieval_with_decode_tables_matches_the_reference, |t| {
    for vector_loads in [false, true] {
        let rerank = RerankVariant {
            vector_loads,
            select: if vector_loads {
                RerankSelect::Multiblock
            } else {
                RerankSelect::Single
            },
            decode_table: true,
            ..RerankVariant::default()
        };
        retrieval_cases(&mut t, rerank);
    }
});

// The same cases with the query kernel's subspaces split over several blocks a KV head
// (`PariskvQuerySpec::subspace_blocks`): three (uneven shares) and one a subspace (at every
// padded dimension: 8, 16 or 32). The query side (q̃, ||q̄||, tiers, the zeroed histogram) and
// the selection bit-equal to the reference.
gpu_test!(retrieval_with_split_query_matches_the_reference, |t| {
    for query_blocks in [3, 32] {
        let rerank = RerankVariant {
            query_blocks,
            ..RerankVariant::default()
        };
        retrieval_cases(&mut t, rerank);
    }
});

fn retrieval_cases(t: &mut GpuTest, rerank: RerankVariant) {
    let ks = [16usize, 100, 512, 0];
    let mut i = 0;
    for placement in [Placement::Hbm, Placement::Host] {
        for d in pariskv_head_dims() {
            for g in [1u32, 4, 7, 16] {
                let k = ks[(i + i / ks.len()) % ks.len()];
                // Lengths around the regimes: empty, below the sink and window, exactly every
                // token (36 + k), one more, short, and the 5k, 10k and 30k ranges of ρ and β.
                let pool = [
                    0,
                    1,
                    20,
                    36 + k,
                    37 + k,
                    t.rng.gen_range(300..1200),
                    t.rng.gen_range(5_036..6_000),
                    t.rng.gen_range(10_036..11_000),
                    30_036 + t.rng.gen_range(0..500),
                ];
                let lengths = vec![
                    pool[i % pool.len()],
                    pool[(i + 3) % pool.len()],
                    pool[(i + 5) % pool.len()],
                ];
                let case = Case {
                    d,
                    g,
                    placement,
                    lengths,
                    k,
                    one_block_grids: i % 3 == 1,
                    rerank,
                };
                retrieval_case(&t.gpu, &mut t.rng, t.seed, &case);
                i += 1;
            }
        }
    }
}
