//! The kernels that read or write the store's bf16 K/V rows, run on the CPU exactly as rendered
//! (`cpu_cuda`: every CUDA thread a fiber, switched in a seeded random order), over both row
//! layouts (`KvRows::Separate`: a K and a V buffer per head; `KvRows::Adjacent`: one
//! `[n][2][D]` buffer per head, `v_rows = k_rows + D`):
//!
//! - `fetch`: every union row equals its source row bit for bit, nothing past `uni_count` is
//!   written, with the spec's grid and with one block per head (which must stride);
//! - `oracle`: the scores from adjacent rows equal the scores from separate rows bit for bit,
//!   and the f64 dot products within fp32 rounding;
//! - `append_rows`: row `n_total − 1` of every head gets the new K and V row, nothing else
//!   changes;
//! - `attention` with `rows: store` (the store's rows by token, no fetch): the same output, bit
//!   for bit, as attention over the fetched rows of the same selection, and the f64 attention
//!   within fp32 rounding;
//! - `attention` over several blocks a query head (`splits` 2 to 16, both row sources): the
//!   merged partial softmaxes within fp32 rounding of the f64 attention, the same bits in
//!   another thread order, the arrival counters left zero.
//!
//! Head dimensions 64, 80 (the padded fetch) and 128, both placements (the host kernels load
//! with `__ldcs`). These need a C++17 compiler (`c++`), not a GPU; the GPU runs the same layouts
//! in `gpu_fetch.rs`, `gpu_store.rs` and `gpu_step.rs`.

use codegen::render::render;
use codegen::spec::{
    AppendRowsSpec, AttentionRows, AttentionSpec, Family, FetchSpec, KvRows, OracleSpec, Placement,
};
use fathom_tests::cpu_cuda::{Entry, Launch, PointerTable, Program, Value};
use fathom_tests::inputs;
use fathom_tests::kv_rows::interleave;
use rand::seq::index::sample;
use rand::Rng;

const BATCH: usize = 2;
const HEADS: usize = 2;
const ALWAYS: usize = 36;
const POISON: u16 = 0xdead;

/// 16-bit values as the words of a CPU buffer (a zero pads an odd count).
fn words(x: &[u16]) -> Vec<u32> {
    x.chunks(2)
        .map(|p| u32::from(p[0]) | u32::from(*p.get(1).unwrap_or(&0)) << 16)
        .collect()
}

fn halves(w: &[u32]) -> Vec<u16> {
    w.iter()
        .flat_map(|&x| [x as u16, (x >> 16) as u16])
        .collect()
}

fn ints(x: &[i32]) -> Vec<u32> {
    x.iter().map(|&v| v as u32).collect()
}

fn floats(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// The row buffers of `B*H` heads, laid out as `kv_rows` says, from the K and V rows `[n][D]`
/// of each head: the buffers, and the `k_rows`/`v_rows` pointer tables, for buffers numbered
/// from `first`.
struct RowBuffers {
    buffers: Vec<Vec<u32>>,
    k_table: Vec<(usize, usize)>,
    v_table: Vec<(usize, usize)>,
}

fn row_buffers(
    k: &[Vec<u16>],
    v: &[Vec<u16>],
    d: usize,
    kv_rows: KvRows,
    first: usize,
) -> RowBuffers {
    let heads = k.len();
    match kv_rows {
        KvRows::Separate => RowBuffers {
            buffers: k.iter().chain(v).map(|r| words(r)).collect(),
            k_table: (0..heads).map(|h| (first + h, 0)).collect(),
            v_table: (0..heads).map(|h| (first + heads + h, 0)).collect(),
        },
        KvRows::Adjacent => RowBuffers {
            buffers: (0..heads)
                .map(|h| words(&interleave(&k[h], &v[h], d)))
                .collect(),
            k_table: (0..heads).map(|h| (first + h, 0)).collect(),
            v_table: (0..heads).map(|h| (first + h, 2 * d)).collect(),
        },
    }
}

fn random_rows(rng: &mut impl Rng, n: usize, d: usize) -> Vec<u16> {
    (0..n * d).map(|_| rng.gen::<u16>()).collect()
}

/// Finite bf16 values in [-2, 2).
fn random_keys(rng: &mut impl Rng, n: usize, d: usize) -> Vec<u16> {
    (0..n * d)
        .map(|_| half::bf16::from_f32(rng.gen_range(-2.0f32..2.0)).to_bits())
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn fetch_case(
    rng: &mut impl Rng,
    seed: u64,
    d: usize,
    g: usize,
    k: usize,
    placement: Placement,
    kv_rows: KvRows,
) -> Result<(), String> {
    let spec = FetchSpec::new(d as u32, g as u32, 64, placement).with_kv_rows(kv_rows);
    let source = render(&spec).map_err(|e| e.to_string())?;
    let entry = Entry::from_source(&source, spec.kernel_name())?;
    let program = Program::build(&source, vec![entry])?;
    let uc = g * k + ALWAYS;
    let lengths = [uc + rng.gen_range(0..200), rng.gen_range(1..uc)];
    let heads = BATCH * HEADS;
    let n = |kh: usize| lengths[kh / HEADS];
    let k_src: Vec<Vec<u16>> = (0..heads).map(|kh| random_rows(rng, n(kh), d)).collect();
    let v_src: Vec<Vec<u16>> = (0..heads).map(|kh| random_rows(rng, n(kh), d)).collect();
    let mut uni = vec![-1i32; heads * uc];
    let mut counts = vec![0i32; heads];
    for kh in 0..heads {
        let count = match kh % 3 {
            0 => uc.min(n(kh)),
            1 => rng.gen_range(0..=uc.min(n(kh))),
            _ => 1,
        };
        let mut tokens = sample(rng, n(kh), count).into_vec();
        tokens.sort_unstable();
        for (u, &t) in tokens.iter().enumerate() {
            uni[kh * uc + u] = t as i32;
        }
        counts[kh] = count as i32;
    }
    let rows = row_buffers(&k_src, &v_src, d, kv_rows, 0);
    let r = rows.buffers.len();
    let (k_table, v_table, uni_b, count_b, k_sel, v_sel) = (r, r + 1, r + 2, r + 3, r + 4, r + 5);
    let spec_grid = spec
        .launch(BATCH as u64, HEADS as u64, k as u64)
        .map_err(|e| e.to_string())?
        .grid;
    for grid in [spec_grid, [1, spec_grid[1], spec_grid[2]]] {
        let mut buffers = rows.buffers.clone();
        buffers.push(vec![0; 2 * heads]);
        buffers.push(vec![0; 2 * heads]);
        buffers.push(ints(&uni));
        buffers.push(ints(&counts));
        buffers.push(words(&vec![POISON; heads * uc * d]));
        buffers.push(words(&vec![POISON; heads * uc * d]));
        let tables = [
            PointerTable {
                buffer: k_table,
                entries: rows.k_table.clone(),
            },
            PointerTable {
                buffer: v_table,
                entries: rows.v_table.clone(),
            },
        ];
        let launch = Launch {
            entry: 0,
            grid,
            threads: spec.threads,
            args: vec![
                Value::Buffer(k_table),
                Value::Buffer(v_table),
                Value::Buffer(uni_b),
                Value::Buffer(count_b),
                Value::Buffer(k_sel),
                Value::Buffer(v_sel),
                Value::Int(k as i64),
                Value::Int(HEADS as i64),
            ],
        };
        program.run_with_tables(&mut buffers, &tables, &[launch], seed)?;
        let what = format!(
            "{} grid {grid:?} lengths {lengths:?} counts {counts:?}",
            spec.kernel_name()
        );
        for (name, sel, src) in [("K", k_sel, &k_src), ("V", v_sel, &v_src)] {
            let got = halves(&buffers[sel]);
            for kh in 0..heads {
                for u in 0..uc {
                    let row = &got[(kh * uc + u) * d..(kh * uc + u + 1) * d];
                    if u < counts[kh] as usize {
                        let t = uni[kh * uc + u] as usize;
                        if row != &src[kh][t * d..(t + 1) * d] {
                            return Err(format!("{what}: {name} row {u} of head {kh} (token {t})"));
                        }
                    } else if row.iter().any(|&x| x != POISON) {
                        return Err(format!(
                            "{what}: {name} row {u} of head {kh} past the count"
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

#[test]
fn fetch_of_both_row_layouts_equals_the_source_rows() {
    let (mut rng, seed) = inputs::rng_and_seed("cpu_rows fetch");
    let mut failures = Vec::new();
    for (d, g, k) in [(128, 4, 8), (64, 1, 3), (80, 7, 2)] {
        for placement in [Placement::Hbm, Placement::Host] {
            for kv_rows in KvRows::ALL {
                if let Err(e) = fetch_case(&mut rng, seed, d, g, k, placement, kv_rows) {
                    failures.push(e);
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "FATHOM_TEST_SEED={seed}:\n{}",
        failures.join("\n")
    );
}

/// The oracle's scores `[B][H][G][ld]` over keys laid out as `kv_rows` says.
fn oracle_scores(
    spec: OracleSpec,
    keys: &[Vec<u16>],
    q: &[f32],
    lengths: &[usize],
    ld: usize,
    seed: u64,
) -> Result<Vec<f32>, String> {
    let d = spec.head_dim as usize;
    let g = spec.group as usize;
    let source = render(&spec).map_err(|e| e.to_string())?;
    let entry = Entry::from_source(&source, spec.kernel_name())?;
    let program = Program::build(&source, vec![entry])?;
    // The values are zeros: only the keys' stride matters to the oracle.
    let zeros: Vec<Vec<u16>> = keys.iter().map(|k| vec![0; k.len()]).collect();
    let rows = row_buffers(keys, &zeros, d, spec.kv_rows, 0);
    let mut buffers = rows.buffers;
    let r = buffers.len();
    buffers.push(vec![0; 2 * keys.len()]);
    buffers.push(floats(q));
    buffers.push(ints(&vec![0; lengths.len()]));
    buffers.push(ints(&lengths.iter().map(|&n| n as i32).collect::<Vec<_>>()));
    buffers.push(floats(&vec![f32::NAN; keys.len() * g * ld]));
    let max = lengths.iter().copied().max().unwrap_or(0) as u64;
    let launch = spec
        .launch(lengths.len() as u64, HEADS as u64, max)
        .map_err(|e| e.to_string())?;
    let launch = Launch {
        entry: 0,
        grid: launch.grid,
        threads: spec.threads,
        args: vec![
            Value::Buffer(r),
            Value::Buffer(r + 1),
            Value::Buffer(r + 2),
            Value::Buffer(r + 3),
            Value::Buffer(r + 4),
            Value::Int(ld as i64),
            Value::Int(HEADS as i64),
        ],
    };
    let tables = [PointerTable {
        buffer: r,
        entries: rows.k_table,
    }];
    program.run_with_tables(&mut buffers, &tables, &[launch], seed)?;
    Ok(buffers[r + 4].iter().map(|&w| f32::from_bits(w)).collect())
}

#[test]
fn oracle_scores_of_adjacent_rows_equal_those_of_separate_rows() {
    let (mut rng, seed) = inputs::rng_and_seed("cpu_rows oracle");
    for (d, g, placement) in [(128, 4, Placement::Host), (80, 7, Placement::Hbm)] {
        let lengths = [rng.gen_range(40..300), rng.gen_range(1..40)];
        let ld = 300;
        let keys: Vec<Vec<u16>> = (0..BATCH * HEADS)
            .map(|kh| random_keys(&mut rng, lengths[kh / HEADS], d))
            .collect();
        let q: Vec<f32> = (0..BATCH * HEADS * g * d)
            .map(|_| rng.gen_range(-1.0f32..1.0))
            .collect();
        let spec = OracleSpec::new(d as u32, g as u32, 64, placement);
        let separate = oracle_scores(spec, &keys, &q, &lengths, ld, seed).unwrap();
        let adjacent = oracle_scores(
            spec.with_kv_rows(KvRows::Adjacent),
            &keys,
            &q,
            &lengths,
            ld,
            seed,
        )
        .unwrap();
        let what = format!("{} (FATHOM_TEST_SEED={seed})", spec.kernel_name());
        let same = separate
            .iter()
            .zip(&adjacent)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{what}: adjacent rows score differently");
        for kh in 0..BATCH * HEADS {
            for gi in 0..g {
                let qv = &q[(kh * g + gi) * d..(kh * g + gi + 1) * d];
                for t in 0..ld {
                    let got = separate[(kh * g + gi) * ld + t];
                    if t >= lengths[kh / HEADS] {
                        assert!(got.is_nan(), "{what}: score past the range written");
                        continue;
                    }
                    let want: f64 = (0..d)
                        .map(|c| {
                            let x = half::bf16::from_bits(keys[kh][t * d + c]).to_f64();
                            f64::from(qv[c]) * x
                        })
                        .sum();
                    assert!(
                        (f64::from(got) - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{what}: head {kh} query {gi} token {t}: {got} vs {want}"
                    );
                }
            }
        }
    }
}

#[test]
fn append_rows_writes_the_new_row_of_either_layout() {
    let (mut rng, seed) = inputs::rng_and_seed("cpu_rows append");
    let d = 96;
    let cap = 40;
    for kv_rows in KvRows::ALL {
        let spec = AppendRowsSpec {
            threads: 32,
            kv_rows,
        };
        let source = render(&spec).unwrap();
        let entry = Entry::from_source(&source, spec.kernel_name()).unwrap();
        let program = Program::build(&source, vec![entry]).unwrap();
        let heads = BATCH * HEADS;
        let k_old: Vec<Vec<u16>> = (0..heads).map(|_| random_rows(&mut rng, cap, d)).collect();
        let v_old: Vec<Vec<u16>> = (0..heads).map(|_| random_rows(&mut rng, cap, d)).collect();
        let n_total: Vec<i32> = (0..BATCH).map(|_| rng.gen_range(1..=cap as i32)).collect();
        let new_k = random_rows(&mut rng, heads, d);
        let new_v = random_rows(&mut rng, heads, d);
        let rows = row_buffers(&k_old, &v_old, d, kv_rows, 0);
        let mut buffers = rows.buffers.clone();
        let r = buffers.len();
        buffers.push(vec![0; 2 * heads]);
        buffers.push(vec![0; 2 * heads]);
        buffers.push(ints(&n_total));
        buffers.push(words(&new_k));
        buffers.push(words(&new_v));
        let tables = [
            PointerTable {
                buffer: r,
                entries: rows.k_table.clone(),
            },
            PointerTable {
                buffer: r + 1,
                entries: rows.v_table.clone(),
            },
        ];
        let launch = Launch {
            entry: 0,
            grid: spec.launch(BATCH as u64, HEADS as u64).unwrap().grid,
            threads: spec.threads,
            args: vec![
                Value::Buffer(r),
                Value::Buffer(r + 1),
                Value::Buffer(r + 2),
                Value::Buffer(r + 3),
                Value::Buffer(r + 4),
                Value::Int(HEADS as i64),
                Value::Int(d as i64),
            ],
        };
        program
            .run_with_tables(&mut buffers, &tables, &[launch], seed)
            .unwrap();
        // The expected rows, written on the host the same way, then laid out alike.
        let (mut k_want, mut v_want) = (k_old.clone(), v_old.clone());
        for kh in 0..heads {
            let t = n_total[kh / HEADS] as usize - 1;
            k_want[kh][t * d..(t + 1) * d].copy_from_slice(&new_k[kh * d..(kh + 1) * d]);
            v_want[kh][t * d..(t + 1) * d].copy_from_slice(&new_v[kh * d..(kh + 1) * d]);
        }
        let want = row_buffers(&k_want, &v_want, d, kv_rows, 0).buffers;
        assert_eq!(
            &buffers[..r],
            &want[..],
            "{} (FATHOM_TEST_SEED={seed})",
            spec.kernel_name()
        );
    }
}

/// What one attention case reads: per KV head `kh` the K and V rows `[n][D]`; per query head
/// `qh = kh*G + g` its ascending tokens (`sel`, rows of `k + 36`), their positions in the KV
/// head's union and the union's rows fetched into `[B*H][G*k + 36][D]`.
struct AttentionCase {
    d: usize,
    g: usize,
    k: usize,
    k_src: Vec<Vec<u16>>,
    v_src: Vec<Vec<u16>>,
    sel: Vec<i32>,
    sel_pos: Vec<i32>,
    sel_count: Vec<i32>,
    k_sel: Vec<u16>,
    v_sel: Vec<u16>,
    q: Vec<f32>,
}

impl AttentionCase {
    fn draw(rng: &mut impl Rng, d: usize, g: usize, k: usize) -> AttentionCase {
        let (heads, sc, uc) = (BATCH * HEADS, k + ALWAYS, g * k + ALWAYS);
        let lengths = [sc + rng.gen_range(0..100), rng.gen_range(1..sc)];
        let n = |kh: usize| lengths[kh / HEADS];
        let k_src: Vec<Vec<u16>> = (0..heads).map(|kh| random_keys(rng, n(kh), d)).collect();
        let v_src: Vec<Vec<u16>> = (0..heads).map(|kh| random_keys(rng, n(kh), d)).collect();
        let mut sel = vec![-1i32; heads * g * sc];
        let mut sel_pos = vec![-1i32; heads * g * sc];
        let mut sel_count = vec![0i32; heads * g];
        let mut k_sel = vec![POISON; heads * uc * d];
        let mut v_sel = vec![POISON; heads * uc * d];
        for kh in 0..heads {
            // As §6 selects: the sink and the local window in every set, at most k tokens of
            // the middle each (so the union fits its G*k + 36 rows); one empty set in every KV
            // head but the first (its output is zero).
            let n_kh = n(kh);
            let (lo, hi) = (4.min(n_kh), n_kh.saturating_sub(32).max(4.min(n_kh)));
            let sets: Vec<Vec<usize>> = (0..g)
                .map(|gi| {
                    if gi == 1 && kh > 0 {
                        return Vec::new();
                    }
                    let middle = rng.gen_range(0..=k.min(hi - lo));
                    let mut t: Vec<usize> = (0..lo).chain(hi..n_kh).collect();
                    t.extend(sample(rng, hi - lo, middle).into_iter().map(|i| lo + i));
                    t.sort_unstable();
                    t
                })
                .collect();
            let mut union: Vec<usize> = sets.iter().flatten().copied().collect();
            union.sort_unstable();
            union.dedup();
            assert!(union.len() <= uc, "the union fits its rows");
            for (u, &t) in union.iter().enumerate() {
                let at = (kh * uc + u) * d;
                k_sel[at..at + d].copy_from_slice(&k_src[kh][t * d..(t + 1) * d]);
                v_sel[at..at + d].copy_from_slice(&v_src[kh][t * d..(t + 1) * d]);
            }
            for (gi, set) in sets.iter().enumerate() {
                let qh = kh * g + gi;
                sel_count[qh] = set.len() as i32;
                for (j, &t) in set.iter().enumerate() {
                    sel[qh * sc + j] = t as i32;
                    sel_pos[qh * sc + j] = union.binary_search(&t).expect("in the union") as i32;
                }
            }
        }
        let q = (0..heads * g * d)
            .map(|_| rng.gen_range(-1.0f32..1.0))
            .collect();
        AttentionCase {
            d,
            g,
            k,
            k_src,
            v_src,
            sel,
            sel_pos,
            sel_count,
            k_sel,
            v_sel,
            q,
        }
    }

    /// The attention output `[B*H*G][D]` of `spec` on the CPU.
    fn run(&self, spec: AttentionSpec, seed: u64) -> Result<Vec<f32>, String> {
        let source = render(&spec).map_err(|e| e.to_string())?;
        let entry = Entry::from_source(&source, spec.kernel_name())?;
        let program = Program::build(&source, vec![entry])?;
        let heads = BATCH * HEADS;
        let scale = 1.0 / (self.d as f32).sqrt();
        let (mut buffers, tables, rows_args) = match spec.rows {
            AttentionRows::Fetched => (
                vec![words(&self.k_sel), words(&self.v_sel), ints(&self.sel_pos)],
                Vec::new(),
                [Value::Buffer(0), Value::Buffer(1), Value::Buffer(2)],
            ),
            AttentionRows::Store => {
                let rows = row_buffers(&self.k_src, &self.v_src, self.d, spec.kv_rows, 0);
                let r = rows.buffers.len();
                let mut buffers = rows.buffers;
                buffers.extend([vec![0; 2 * heads], vec![0; 2 * heads], ints(&self.sel)]);
                let tables = vec![
                    PointerTable {
                        buffer: r,
                        entries: rows.k_table,
                    },
                    PointerTable {
                        buffer: r + 1,
                        entries: rows.v_table,
                    },
                ];
                let args = [Value::Buffer(r), Value::Buffer(r + 1), Value::Buffer(r + 2)];
                (buffers, tables, args)
            }
        };
        let b = buffers.len();
        buffers.push(ints(&self.sel_count));
        buffers.push(floats(&self.q));
        buffers.push(floats(&vec![f32::NAN; heads * self.g * self.d]));
        let launch = spec
            .launch(BATCH as u64, HEADS as u64)
            .map_err(|e| e.to_string())?;
        let mut args = rows_args.to_vec();
        args.extend([
            Value::Buffer(b),
            Value::Buffer(b + 1),
            Value::Float(scale),
            Value::Buffer(b + 2),
            Value::Int(self.k as i64),
        ]);
        let query_heads = heads * self.g;
        if spec.splits > 1 {
            // Poisoned partials; arrival counters zero, as the step allocates them.
            let words = spec.partial_words(query_heads as u64) as usize;
            buffers.push(floats(&vec![f32::NAN; words]));
            buffers.push(vec![0; query_heads]);
            args.extend([Value::Buffer(b + 3), Value::Buffer(b + 4)]);
        }
        let launch = Launch {
            entry: 0,
            grid: launch.grid,
            threads: spec.threads,
            args,
        };
        program.run_with_tables(&mut buffers, &tables, &[launch], seed)?;
        if spec.cluster_merge && buffers[b + 3].iter().any(|&w| !f32::from_bits(w).is_nan()) {
            return Err(format!(
                "{}: merged in a cluster, yet wrote the global partials",
                spec.kernel_name()
            ));
        }
        if spec.splits > 1 && buffers[b + 4].iter().any(|&a| a != 0) {
            return Err(format!(
                "{}: arrival counters left {:?}, not zero",
                spec.kernel_name(),
                buffers[b + 4]
            ));
        }
        Ok(buffers[b + 2].iter().map(|&w| f32::from_bits(w)).collect())
    }

    /// The f64 attention of query head `qh`, channel `c`.
    fn reference(&self, qh: usize, c: usize) -> f64 {
        let (d, sc) = (self.d, self.k + ALWAYS);
        let kh = qh / self.g;
        let count = self.sel_count[qh] as usize;
        if count == 0 {
            return 0.0;
        }
        let bf = |x: u16| half::bf16::from_bits(x).to_f64();
        let scale = f64::from(1.0 / (d as f32).sqrt());
        let logits: Vec<f64> = (0..count)
            .map(|j| {
                let t = self.sel[qh * sc + j] as usize;
                (0..d)
                    .map(|i| f64::from(self.q[qh * d + i]) * bf(self.k_src[kh][t * d + i]))
                    .sum::<f64>()
                    * scale
            })
            .collect();
        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
        let total: f64 = weights.iter().sum();
        (0..count)
            .map(|j| {
                let t = self.sel[qh * sc + j] as usize;
                weights[j] * bf(self.v_src[kh][t * d + c])
            })
            .sum::<f64>()
            / total
    }
}

/// The attention spec over the fetched rows, one split a head or `splits`, nothing opt-in.
fn fetched_attention(
    d: usize,
    g: usize,
    threads: u32,
    rows_per_warp: u32,
    splits: u32,
) -> AttentionSpec {
    AttentionSpec {
        head_dim: d as u32,
        group: g as u32,
        threads,
        rows_per_warp,
        rows: AttentionRows::Fetched,
        kv_rows: KvRows::Separate,
        splits,
        cluster_merge: false,
        prefetch_rows: false,
    }
}

#[test]
fn attention_from_the_store_equals_attention_over_the_fetched_rows() {
    let (mut rng, seed) = inputs::rng_and_seed("cpu_rows attention from the store");
    for (d, g, k, threads, rows_per_warp) in [
        (128, 4, 6, 64, 2),
        (80, 7, 3, 32, 4),
        (64, 1, 5, 64, 1),
        (128, 3, 9, 32, 3),
    ] {
        let case = AttentionCase::draw(&mut rng, d, g, k);
        let fetched = fetched_attention(d, g, threads, rows_per_warp, 1);
        let want = case.run(fetched, seed).unwrap();
        for kv_rows in KvRows::ALL {
            let store = AttentionSpec {
                rows: AttentionRows::Store,
                kv_rows,
                ..fetched
            };
            let what = format!("{} (FATHOM_TEST_SEED={seed})", store.kernel_name());
            let got = case.run(store, seed).unwrap();
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{what}: output {i}: {a} from the store, {b} from the fetched rows, f64 {}",
                    case.reference(i / d, i % d)
                );
            }
            for (i, &a) in got.iter().enumerate() {
                let r = case.reference(i / d, i % d);
                assert!(
                    (f64::from(a) - r).abs() <= 1e-4 * (1.0 + r.abs()),
                    "{what}: output {i}: {a} against the f64 attention's {r}"
                );
            }
        }
    }
}

/// Attention over S blocks a query head (`splits`): every split's partial softmax merged by the
/// last to arrive equals the f64 attention within fp32 rounding, for both row sources, with
/// more splits than some heads have rows (16) and a head without rows (its output 0); the
/// arrival counters are left zero (`run` checks), and another thread order gives the same
/// output bit for bit (the merge runs in split order).
#[test]
fn split_attention_merges_to_the_f64_attention() {
    let (mut rng, seed) = inputs::rng_and_seed("cpu_rows split attention");
    for (d, g, k, threads, rows_per_warp, splits) in [
        (128, 4, 6, 64, 2, 2),
        (80, 7, 3, 32, 4, 3),
        (64, 1, 5, 64, 1, 16),
        (128, 2, 40, 32, 8, 5),
    ] {
        let case = AttentionCase::draw(&mut rng, d, g, k);
        let fetched = fetched_attention(d, g, threads, rows_per_warp, splits);
        let store = AttentionSpec {
            rows: AttentionRows::Store,
            kv_rows: KvRows::Adjacent,
            ..fetched
        };
        // The partials merged in a thread-block cluster (`cluster_merge`, at most 8 splits):
        // the same arithmetic in the same order as the last split's merge, so the same bits.
        let in_cluster = |spec: AttentionSpec| AttentionSpec {
            cluster_merge: true,
            ..spec
        };
        let mut specs = vec![fetched, store];
        if splits <= codegen::spec::MAX_CLUSTER_SPLITS {
            specs.extend([in_cluster(fetched), in_cluster(store)]);
        }
        for spec in specs {
            let what = format!("{} (FATHOM_TEST_SEED={seed})", spec.kernel_name());
            let got = case.run(spec, seed).unwrap();
            if spec.cluster_merge {
                let global = case
                    .run(
                        AttentionSpec {
                            cluster_merge: false,
                            ..spec
                        },
                        seed,
                    )
                    .unwrap();
                let same = got
                    .iter()
                    .zip(&global)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{what}: the cluster's merge differs from the last split's"
                );
            }
            for (i, &a) in got.iter().enumerate() {
                let r = case.reference(i / d, i % d);
                assert!(
                    (f64::from(a) - r).abs() <= 1e-4 * (1.0 + r.abs()),
                    "{what}: output {i}: {a} against the f64 attention's {r}"
                );
                if case.sel_count[i / d] == 0 {
                    assert_eq!(a.to_bits(), 0, "{what}: output {i} of a head without rows");
                }
            }
            let again = case.run(spec, seed ^ 1).unwrap();
            let same = got
                .iter()
                .zip(&again)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{what}: another thread order merged differently");
        }
    }
}

/// Attention with its rows prefetched into L2 (`prefetch_rows`): the prefetch loop walks the
/// positions of the block's share below the count (on the emulator it asks nothing of L2), so
/// the output is the same bits as without it, for both row sources and both layouts, one block
/// a head and several, a head without rows among them.
#[test]
fn attention_with_prefetched_rows_gives_the_same_bits() {
    let (mut rng, seed) = inputs::rng_and_seed("cpu_rows attention prefetched rows");
    for (d, g, k, threads, rows_per_warp, splits) in [
        (128, 4, 6, 64, 2, 1),
        (80, 7, 3, 32, 4, 3),
        (64, 1, 5, 64, 1, 16),
        (128, 2, 40, 32, 8, 5),
    ] {
        let case = AttentionCase::draw(&mut rng, d, g, k);
        let fetched = fetched_attention(d, g, threads, rows_per_warp, splits);
        let stores = KvRows::ALL.map(|kv_rows| AttentionSpec {
            rows: AttentionRows::Store,
            kv_rows,
            ..fetched
        });
        for spec in [fetched].into_iter().chain(stores) {
            let prefetched = AttentionSpec {
                prefetch_rows: true,
                ..spec
            };
            let what = format!("{} (FATHOM_TEST_SEED={seed})", prefetched.kernel_name());
            assert!(prefetched.kernel_name().ends_with("_pf"), "{what}");
            let want = case.run(spec, seed).unwrap();
            let got = case.run(prefetched, seed).unwrap();
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{what}: output {i}: {a} prefetched, {b} not, f64 {}",
                    case.reference(i / d, i % d)
                );
            }
        }
    }
}
