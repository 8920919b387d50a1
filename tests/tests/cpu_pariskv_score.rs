//! The rerank's `_score` (SPEC §12's `ŝ` of every candidate) run on the CPU exactly as rendered
//! (`cpu_cuda`: every CUDA thread a fiber, switched in a seeded random order), against the
//! reference index's `estimate`, bit for bit: one thread a candidate and whole rows
//! (`vector_loads`), each with its operands as they are and in tables laid out for it
//! (`decode_table`: the decoded nibbles in shared memory, `q̃` skewed every 32 channels), at
//! every padded dimension (D = 64, 96 → 128, 128, 256; D = 128 in the host placement's form), with counts of 0, 1, a partial warp and
//! several blocks, on the spec's grid and on one block that must stride. Nothing past a head's
//! count is written. `mutations_are_caught` breaks the tables and checks that these cases
//! notice. These tests need a C++17 compiler (`c++`), not a GPU; on a GPU
//! `gpu_pariskv::retrieval_with_decode_tables_matches_the_reference` runs the whole retrieval
//! with it.

use codegen::render::render;
use codegen::spec::pariskv::RerankSelect;
use codegen::spec::{Family, PariskvRerankSpec, Placement};
use fathom_tests::cpu_cuda::{words, Entry, Launch, PointerTable, Program, Value};
use fathom_tests::inputs;
use half::bf16;
use rand::seq::index::sample;
use rand::Rng;
use reference::pariskv::{padded_dim, PariskvIndex};

/// KV heads of one sequence; head `h` has `COUNTS[h]` candidates.
const COUNTS: [usize; 4] = [0, 1, 21, 150];
/// Tokens of every head's index.
const TOKENS: usize = 240;
/// A NaN no score can be.
const POISON: u64 = 0x7ff4_dead_dead_dead;

/// One head's inputs: its index, query and candidates (ascending tokens).
struct Head {
    index: PariskvIndex,
    q_tilde: Vec<f64>,
    q_norm: f64,
    cand: Vec<usize>,
}

fn heads(rng: &mut impl Rng, head_dim: usize) -> Vec<Head> {
    let d = padded_dim(head_dim);
    COUNTS
        .iter()
        .map(|&count| {
            let keys = inputs::keys(rng, TOKENS, head_dim);
            let index = PariskvIndex::build(&keys, head_dim).expect("an index of random keys");
            let mut cand: Vec<usize> = sample(rng, TOKENS, count).into_iter().collect();
            cand.sort_unstable();
            Head {
                index,
                q_tilde: (0..d).map(|_| rng.gen_range(-2.0..2.0)).collect(),
                q_norm: rng.gen_range(0.5..4.0),
                cand,
            }
        })
        .collect()
}

fn f64_words(x: &[f64]) -> Vec<u32> {
    x.iter()
        .flat_map(|v| {
            let bits = v.to_bits();
            [bits as u32, (bits >> 32) as u32]
        })
        .collect()
}

/// Runs `_score` of `source` (rendered from `spec`, maybe mutated) with `grid_x` blocks a head
/// (the spec's grid when `None`) and returns every `cand_score` slot's bits.
fn run(
    spec: &PariskvRerankSpec,
    program: &Program,
    heads: &[Head],
    grid_x: Option<u32>,
    seed: u64,
) -> Result<Vec<u64>, String> {
    let h = heads.len();
    let ld = COUNTS.iter().max().copied().unwrap_or(0) + 3;
    // Buffers: the two pointer tables, each head's code rows, each head's weight rows, q̃,
    // ||q̄||, the candidates, their counts, the scores.
    let mut buffers: Vec<Vec<u32>> = vec![vec![0; 2 * h], vec![0; 2 * h]];
    for head in heads {
        let codes: Vec<u8> = (0..TOKENS)
            .flat_map(|t| head.index.codes(t).to_vec())
            .collect();
        buffers.push(words::from_u8(&codes));
    }
    for head in heads {
        let weights: Vec<u8> = (0..TOKENS)
            .flat_map(|t| head.index.weights(t).to_vec())
            .flat_map(|w: bf16| w.to_bits().to_le_bytes())
            .collect();
        buffers.push(words::from_u8(&weights));
    }
    let q_tilde: Vec<f64> = heads.iter().flat_map(|x| x.q_tilde.clone()).collect();
    let q_norm: Vec<f64> = heads.iter().map(|x| x.q_norm).collect();
    let mut cand = vec![u32::MAX; h * ld];
    for (i, head) in heads.iter().enumerate() {
        for (j, &t) in head.cand.iter().enumerate() {
            cand[i * ld + j] = t as u32;
        }
    }
    let base = buffers.len();
    buffers.push(f64_words(&q_tilde));
    buffers.push(f64_words(&q_norm));
    buffers.push(cand);
    buffers.push(heads.iter().map(|x| x.cand.len() as u32).collect());
    buffers.push(f64_words(&vec![f64::from_bits(POISON); h * ld]));
    let tables = [
        PointerTable {
            buffer: 0,
            entries: (0..h).map(|i| (2 + i, 0)).collect(),
        },
        PointerTable {
            buffer: 1,
            entries: (0..h).map(|i| (2 + h + i, 0)).collect(),
        },
    ];
    let mut geometry = spec
        .launch_score(1, h as u64, ld as u64)
        .map_err(|e| e.to_string())?;
    if let Some(x) = grid_x {
        geometry.grid[0] = x;
    }
    let launch = Launch {
        entry: 0,
        grid: geometry.grid,
        threads: geometry.block[0],
        args: vec![
            Value::Buffer(0),
            Value::Buffer(1),
            Value::Buffer(base),
            Value::Buffer(base + 1),
            Value::Buffer(base + 2),
            Value::Buffer(base + 3),
            Value::Buffer(base + 4),
            Value::Int(ld as i64),
            Value::Int(h as i64),
        ],
    };
    program.run_with_tables(&mut buffers, &tables, &[launch], seed)?;
    Ok(buffers[base + 4]
        .chunks(2)
        .map(|w| u64::from(w[0]) | (u64::from(w[1]) << 32))
        .collect())
}

/// Every candidate's `ŝ` equals the reference's bits; every slot past a count is still poison.
fn check(heads: &[Head], got: &[u64]) -> Result<(), String> {
    let ld = got.len() / heads.len();
    for (i, head) in heads.iter().enumerate() {
        for j in 0..ld {
            let bits = got[i * ld + j];
            let want = match head.cand.get(j) {
                Some(&t) => head.index.estimate(t, head.q_norm, &head.q_tilde).to_bits(),
                None => POISON,
            };
            if bits != want {
                return Err(format!(
                    "head {i} slot {j} (count {}): {} (bits {bits:#x}), want {} (bits {want:#x})",
                    head.cand.len(),
                    f64::from_bits(bits),
                    f64::from_bits(want)
                ));
            }
        }
    }
    Ok(())
}

fn spec(head_dim: u32, vector_loads: bool, decode_table: bool) -> PariskvRerankSpec {
    PariskvRerankSpec {
        head_dim,
        group: 4,
        k_max: 64,
        threads: 64,
        // D = 128 reads mapped host memory's way (`__ldcs`), the others device memory's.
        placement: if head_dim == 128 {
            Placement::Host
        } else {
            Placement::Hbm
        },
        vector_loads,
        select: RerankSelect::Single,
        decode_table,
    }
}

fn program(spec: &PariskvRerankSpec, source: &str) -> Program {
    let entry = Entry::from_source(source, spec.score_entry()).expect("the score entry");
    Program::build(source, vec![entry]).expect("the kernel compiles for the CPU")
}

/// Runs `source` over fresh heads on the spec's grid and on one block a head.
fn score_cases(spec: &PariskvRerankSpec, source: &str, test: &str) -> Result<(), String> {
    let program = program(spec, source);
    let (mut rng, seed) = inputs::rng_and_seed(test);
    let heads = heads(&mut rng, spec.head_dim as usize);
    for grid_x in [None, Some(1)] {
        let got = run(spec, &program, &heads, grid_x, seed)?;
        check(&heads, &got)
            .map_err(|e| format!("{} grid x {grid_x:?}: {e}", spec.kernel_name()))?;
    }
    Ok(())
}

#[test]
fn every_score_variant_matches_the_reference_bit_for_bit() {
    for head_dim in [64, 96, 128, 256] {
        for vector_loads in [false, true] {
            for decode_table in [false, true] {
                let s = spec(head_dim, vector_loads, decode_table);
                let source = render(&s).expect("the spec renders");
                if let Err(e) = score_cases(&s, &source, &s.kernel_name()) {
                    panic!("{e}");
                }
            }
        }
    }
}

/// The tables' mistakes that are easy to make, each caught by the cases above.
#[test]
fn mutations_are_caught() {
    let mutations = [
        // A decoded nibble of the wrong sign.
        (
            "decoded[nibble] = pariskv_decode(nibble);",
            "decoded[nibble] = pariskv_decode(nibble ^ 8u);",
        ),
        // The skew written and read differently.
        ("return qt[c + (c >> 5)];", "return qt[c + (c >> 4)];"),
        // The sign bit dropped where the table is read.
        ("return decoded[nibble];", "return decoded[nibble & 7u];"),
    ];
    for vector_loads in [false, true] {
        let s = spec(128, vector_loads, true);
        let source = render(&s).expect("the spec renders");
        for (from, to) in mutations {
            assert!(source.contains(from), "the source no longer holds `{from}`");
            let mutated = source.replace(from, to);
            assert!(
                score_cases(&s, &mutated, "mutations").is_err(),
                "{}: `{to}` went unnoticed",
                s.kernel_name()
            );
        }
    }
}
