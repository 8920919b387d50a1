//! The ParisKV query kernel (SPEC §12: `q̃`, `||q̄||`, per subspace the centroid ranking, the
//! tier lengths and how many tiers hold each centroid, the zeroed vote histogram) run on the CPU
//! exactly as rendered (`cpu_cuda`), against the reference's `retrieve`, bit for bit: with one
//! block per KV head ranking every subspace in turn (the default) and with the subspaces split
//! over several blocks (`PariskvQuerySpec::subspace_blocks`: 3, an uneven share, and one block a
//! subspace), at every padded dimension (D = 64, 96 → 128, 128, 256) and G = 1, 4, 7, over two
//! sequences of two KV heads. Outputs are poisoned first, so a split that leaves a subspace or a
//! per-head word unwritten fails. `mutations_are_caught` breaks the split. These tests need a
//! C++17 compiler (`c++`), not a GPU; on a GPU
//! `gpu_pariskv::retrieval_with_split_query_matches_the_reference` runs the whole retrieval with
//! it.

use codegen::render::render;
use codegen::spec::pariskv::{subspaces, vote_bins, CENTROIDS, TIERS};
use codegen::spec::{Family, PariskvQuerySpec};
use fathom_tests::cpu_cuda::{Entry, Launch, PointerTable, Program, Value};
use fathom_tests::inputs;
use rand::Rng;
use reference::pariskv::{padded_dim, retrieve, PariskvIndex, Retrieval};

/// KV heads of a sequence.
const KV_HEADS: usize = 2;
/// Tokens of the two sequences (each head's index covers all of them).
const LENGTHS: [usize; 2] = [70, 700];
const POISON: u32 = 0xdead_beef;

/// A head's index, its queries (`[G][D]`) and the reference's query side.
struct Head {
    index: PariskvIndex,
    queries: Vec<Vec<f32>>,
    want: Retrieval,
}

fn heads(rng: &mut impl Rng, head_dim: usize, group: usize) -> Vec<Head> {
    let mut heads = Vec::new();
    for &n in &LENGTHS {
        for _ in 0..KV_HEADS {
            let keys = inputs::keys(rng, n, head_dim);
            let index = PariskvIndex::build(&keys, head_dim).expect("an index of random keys");
            let queries: Vec<Vec<f32>> = (0..group)
                .map(|_| (0..head_dim).map(|_| rng.gen_range(-3.0f32..3.0)).collect())
                .collect();
            let as_f64: Vec<Vec<f64>> = queries
                .iter()
                .map(|q| q.iter().map(|&x| f64::from(x)).collect())
                .collect();
            let want = retrieve(&index, &as_f64, n, 16).expect("the reference retrieves");
            heads.push(Head {
                index,
                queries,
                want,
            });
        }
    }
    heads
}

/// The outputs of one run, as the kernel left them.
struct Got {
    q_tilde: Vec<u64>,
    q_norm: Vec<u64>,
    tiers: Vec<u8>,
    tier_len: Vec<u32>,
    vote_hist: Vec<u32>,
}

fn run(spec: &PariskvQuerySpec, source: &str, heads: &[Head], seed: u64) -> Result<Got, String> {
    let d = spec.head_dim as usize;
    let (dp, ns) = (padded_dim(d), subspaces(spec.head_dim) as usize);
    let bins = vote_bins(spec.head_dim) as usize;
    let h = heads.len();
    let entry = Entry::from_source(source, spec.kernel_name())?;
    let program = Program::build(source, vec![entry])?;
    // Buffers: the histogram pointer table, each head's histograms, then q, signs, n_total and
    // the five outputs.
    let mut buffers: Vec<Vec<u32>> = vec![vec![0; 2 * h]];
    for head in heads {
        buffers.push(
            (0..ns)
                .flat_map(|b| head.index.histogram(b).to_vec())
                .collect(),
        );
    }
    let base = buffers.len();
    buffers.push(
        heads
            .iter()
            .flat_map(|x| x.queries.iter().flatten().map(|v| v.to_bits()))
            .collect(),
    );
    buffers.push(
        heads[0]
            .index
            .signs()
            .iter()
            .map(|&s| (s as f32).to_bits())
            .collect(),
    );
    buffers.push(LENGTHS.iter().map(|&n| n as u32).collect());
    let poison = |words: usize| vec![POISON; words];
    buffers.push(poison(2 * h * dp));
    buffers.push(poison(2 * h));
    buffers.push(poison((h * ns * CENTROIDS as usize).div_ceil(4)));
    buffers.push(poison(h * ns * TIERS as usize));
    buffers.push(poison(h * bins));
    let tables = [PointerTable {
        buffer: 0,
        entries: (0..h).map(|i| (1 + i, 0)).collect(),
    }];
    let geometry = spec
        .launch(LENGTHS.len() as u64, KV_HEADS as u64)
        .map_err(|e| e.to_string())?;
    let launch = Launch {
        entry: 0,
        grid: geometry.grid,
        threads: geometry.block[0],
        args: vec![
            Value::Buffer(base),
            Value::Buffer(base + 1),
            Value::Buffer(0),
            Value::Buffer(base + 2),
            Value::Buffer(base + 3),
            Value::Buffer(base + 4),
            Value::Buffer(base + 5),
            Value::Buffer(base + 6),
            Value::Buffer(base + 7),
            Value::Int(KV_HEADS as i64),
        ],
    };
    program.run_with_tables(&mut buffers, &tables, &[launch], seed)?;
    let u64s = |w: &[u32]| -> Vec<u64> {
        w.chunks(2)
            .map(|p| u64::from(p[0]) | (u64::from(p[1]) << 32))
            .collect()
    };
    Ok(Got {
        q_tilde: u64s(&buffers[base + 3]),
        q_norm: u64s(&buffers[base + 4]),
        tiers: buffers[base + 5]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect(),
        tier_len: buffers[base + 6].clone(),
        vote_hist: buffers[base + 7].clone(),
    })
}

/// Every output equals the reference's; the first mismatch, named.
fn check(spec: &PariskvQuerySpec, heads: &[Head], got: &Got) -> Result<(), String> {
    let (dp, ns) = (
        padded_dim(spec.head_dim as usize),
        subspaces(spec.head_dim) as usize,
    );
    let (cent, tiers_n) = (CENTROIDS as usize, TIERS as usize);
    let bins = vote_bins(spec.head_dim) as usize;
    let name = spec.kernel_name();
    for (kh, head) in heads.iter().enumerate() {
        let want = &head.want;
        for c in 0..dp {
            if got.q_tilde[kh * dp + c] != want.q_tilde[c].to_bits() {
                return Err(format!("{name} head {kh}: q_tilde[{c}] differs"));
            }
        }
        if got.q_norm[kh] != want.q_norm.to_bits() {
            return Err(format!("{name} head {kh}: q_norm differs"));
        }
        for b in 0..ns {
            for i in 0..tiers_n {
                let (a, w) = (got.tier_len[(kh * ns + b) * tiers_n + i], want.tiers[b][i]);
                if a as usize != w {
                    return Err(format!(
                        "{name} head {kh} subspace {b} tier {i}: length {a:#x}, reference {w}"
                    ));
                }
            }
            for (position, &id) in want.rankings[b].iter().enumerate() {
                let holding = want.tiers[b].iter().filter(|&&l| position < l).count() as u8;
                let a = got.tiers[(kh * ns + b) * cent + usize::from(id)];
                if a != holding {
                    return Err(format!(
                        "{name} head {kh} subspace {b} id {id}: in {a} tiers, reference {holding}"
                    ));
                }
            }
        }
        if let Some(bin) = got.vote_hist[kh * bins..(kh + 1) * bins]
            .iter()
            .position(|&v| v != 0)
        {
            return Err(format!("{name} head {kh}: vote_hist[{bin}] not zeroed"));
        }
    }
    Ok(())
}

fn spec(head_dim: u32, group: u32, subspace_blocks: u32) -> PariskvQuerySpec {
    PariskvQuerySpec {
        subspace_blocks,
        ..PariskvQuerySpec::new(head_dim, group)
    }
}

/// One block per head, three, and one per subspace.
fn block_counts(head_dim: u32) -> [u32; 3] {
    [1, 3, subspaces(head_dim)]
}

#[test]
fn every_subspace_split_matches_the_reference_bit_for_bit() {
    let (mut rng, seed) =
        inputs::rng_and_seed("every_subspace_split_matches_the_reference_bit_for_bit");
    for (head_dim, group) in [(64, 4), (96, 7), (128, 1), (256, 4)] {
        let heads = heads(&mut rng, head_dim as usize, group as usize);
        for blocks in block_counts(head_dim) {
            let s = spec(head_dim, group, blocks);
            let source = render(&s).expect("the spec renders");
            let got = run(&s, &source, &heads, seed).unwrap_or_else(|e| panic!("{e}"));
            if let Err(e) = check(&s, &heads, &got) {
                panic!("{e}");
            }
        }
    }
}

/// The split's mistakes that are easy to make, each caught by the cases above.
#[test]
fn mutations_are_caught() {
    let mutations = [
        // A share that stops one subspace short.
        (
            "const int sub_end = (part + 1) * NS / SUBSPACE_BLOCKS;",
            "const int sub_end = (part + 1) * NS / SUBSPACE_BLOCKS - 1;",
        ),
        // No block writing q̃, ||q̄|| and the zeroed histogram (which block of a head writes
        // them does not matter: every block forms the same q̃).
        (
            "const bool per_head = part == 0;",
            "const bool per_head = part == SUBSPACE_BLOCKS;",
        ),
        // A share that starts one subspace late.
        (
            "const int sub_first = part * NS / SUBSPACE_BLOCKS;",
            "const int sub_first = part * NS / SUBSPACE_BLOCKS + 1;",
        ),
        // The shares of a grid read as if it had one block a head.
        (
            "const int part = SUBSPACE_BLOCKS > 1 ? (int)blockIdx.z : 0;",
            "const int part = 0;",
        ),
    ];
    let (mut rng, seed) = inputs::rng_and_seed("mutations_are_caught");
    let heads = heads(&mut rng, 128, 4);
    for blocks in [3, 16] {
        let s = spec(128, 4, blocks);
        let source = render(&s).expect("the spec renders");
        for (from, to) in mutations {
            assert!(source.contains(from), "the source no longer holds `{from}`");
            let mutated = source.replace(from, to);
            let caught = match run(&s, &mutated, &heads, seed) {
                Ok(got) => check(&s, &heads, &got).is_err(),
                Err(_) => true,
            };
            assert!(caught, "{}: `{to}` went unnoticed", s.kernel_name());
        }
    }
}
