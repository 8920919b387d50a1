//! GPU tests of the `fetch` kernel (SPEC §6, §7): the bf16 K and V rows of each KV head's union
//! gathered into `k_sel` / `v_sel` `[B*H][G*k+36][D]`.
//!
//! Coverage, for both placements of the K/V rows (HBM, mapped host memory), every head dimension
//! of §1 and G = 1, 4, 7, 8, 16 (`fathom_tests::shapes`), with B = 3 sequences of different
//! lengths and H = 2:
//! - unions of random sorted distinct tokens with counts 0, 1, a random count, the full capacity
//!   `G*k + 36` (when the sequence is that long) and every token of a short sequence, including
//!   the first and the last token; k random in 0..=2048 (k = 0 once per placement);
//! - rows are random 16-bit patterns (NaN and infinity patterns included: the copy is by bytes);
//! - rows `u < uni_count` equal the source rows of `uni[u]` byte for byte, in K and in V; rows
//!   from `uni_count` to the capacity are untouched (still poisoned): the kernel writes nothing
//!   past the count, which the ABI leaves unspecified and this test pins down;
//! - each case is launched twice: with the spec's grid and with one block per (head, sequence),
//!   which must stride over the whole union;
//! - the same from K/V-adjacent rows (`KvRows::Adjacent`: one `[n][2][D]` buffer per head,
//!   `v_rows = k_rows + D`) for every head dimension, in both placements.

use codegen::spec::shape::HEAD_DIMS;
use codegen::spec::{FetchSpec, KvRows, Placement};
use fathom_tests::gpu_test;
use fathom_tests::kit::GpuTest;
use fathom_tests::kv_rows::interleave;
use fathom_tests::select_kernels::{
    with_grid_x, FetchArgs, FetchKernel, HeadTable, Mismatches, ALWAYS, POISON, POISON_U16,
};
use fathom_tests::shapes::head_dims_and_groups;
use rand::seq::index::sample;
use rand::Rng;
use runtime::gpu::Gpu;

const BATCH: usize = 3;
const KV_HEADS: usize = 2;

#[allow(clippy::too_many_arguments)]
fn fetch_rows_case(
    gpu: &Gpu,
    rng: &mut impl Rng,
    seed: u64,
    placement: Placement,
    d: usize,
    g: usize,
    k: usize,
    kv_rows: KvRows,
) {
    let spec = FetchSpec::new(d as u32, g as u32, 256, placement).with_kv_rows(kv_rows);
    let kernel = FetchKernel::load(gpu, spec).expect("fetch kernel compiles");
    let uc = g * k + ALWAYS;
    // One sequence long enough for a full union, one around it, one short.
    let mut lengths = [
        uc + rng.gen_range(0..4000),
        rng.gen_range(uc / 2 + 1..=uc + 10),
        rng.gen_range(1..ALWAYS + 10),
    ];
    lengths.swap(0, rng.gen_range(0..BATCH));
    let heads = BATCH * KV_HEADS;
    let random_rows = |rng: &mut dyn rand::RngCore, n: usize| -> Vec<u16> {
        (0..n * d).map(|_| rng.gen::<u16>()).collect()
    };
    let k_src: Vec<Vec<u16>> = (0..heads)
        .map(|kh| random_rows(rng, lengths[kh / KV_HEADS]))
        .collect();
    let v_src: Vec<Vec<u16>> = (0..heads)
        .map(|kh| random_rows(rng, lengths[kh / KV_HEADS]))
        .collect();
    // Separate: a K and a V buffer per head. Adjacent: one `[n][2][D]` buffer per head, the V
    // table its addresses plus D.
    let (k_rows, v_rows, v_shifted) = match kv_rows {
        KvRows::Separate => (
            HeadTable::upload(gpu, placement, &k_src).expect("upload keys"),
            Some(HeadTable::upload(gpu, placement, &v_src).expect("upload values")),
            None,
        ),
        KvRows::Adjacent => {
            let both: Vec<Vec<u16>> = (0..heads)
                .map(|kh| interleave(&k_src[kh], &v_src[kh], d))
                .collect();
            let table = HeadTable::upload(gpu, placement, &both).expect("upload rows");
            let v = table.shifted(gpu, d).expect("upload the V table");
            (table, None, Some(v))
        }
    };
    let v_addr = match (&v_rows, &v_shifted) {
        (Some(t), _) => t.addr(),
        (None, Some(v)) => v.addr(),
        (None, None) => unreachable!("one V table"),
    };

    // Union of every KV head: ascending distinct tokens, padded with poison to the capacity.
    let mut uni = vec![-1i32; heads * uc];
    let mut counts = vec![0i32; heads];
    for kh in 0..heads {
        let n = lengths[kh / KV_HEADS];
        let cap = uc.min(n);
        let count = match (kh + rng.gen_range(0..5)) % 5 {
            0 => 0,
            1 => 1.min(cap),
            2 => rng.gen_range(0..=cap),
            _ => cap,
        };
        let mut tokens: Vec<usize> = sample(rng, n, count).into_vec();
        tokens.sort_unstable();
        // Include the first and the last token (still ascending and distinct).
        if count > 0 && !tokens.contains(&(n - 1)) {
            tokens[count - 1] = n - 1;
        }
        if count > 1 && tokens[0] != 0 {
            tokens[0] = 0;
        }
        for (u, &t) in tokens.iter().enumerate() {
            uni[kh * uc + u] = t as i32;
        }
        counts[kh] = count as i32;
    }
    let uni_dev = gpu.upload(&uni).expect("upload uni");
    let count_dev = gpu.upload(&counts).expect("upload uni_count");
    let grid = spec
        .launch(BATCH as u64, KV_HEADS as u64, k as u64)
        .expect("fetch geometry");

    for (run, grid) in [grid, with_grid_x(grid, 1)].into_iter().enumerate() {
        let k_sel = gpu.filled::<u16>(heads * uc * d, POISON).expect("k_sel");
        let v_sel = gpu.filled::<u16>(heads * uc * d, POISON).expect("v_sel");
        let args = FetchArgs {
            k_rows: k_rows.addr(),
            v_rows: v_addr,
            uni: uni_dev.addr(),
            uni_count: count_dev.addr(),
            k_sel: k_sel.addr(),
            v_sel: v_sel.addr(),
            k,
            num_kv_heads: KV_HEADS,
        };
        kernel.launch(gpu, grid, &args).expect("fetch launch");
        gpu.synchronize().expect("fetch runs");
        let got_k = k_sel.download().expect("download k_sel");
        let got_v = v_sel.download().expect("download v_sel");
        let mut m = Mismatches::new(
            format!(
                "fetch {} {kv_rows} D={d} G={g} k={k} grid {:?} lengths {lengths:?} counts \
                 {counts:?}",
                placement.as_str(),
                grid.grid
            ),
            seed,
        );
        for kh in 0..heads {
            for (name, got, src) in [("K", &got_k, &k_src[kh]), ("V", &got_v, &v_src[kh])] {
                for u in 0..uc {
                    let row = &got[(kh * uc + u) * d..(kh * uc + u + 1) * d];
                    if u < counts[kh] as usize {
                        let t = uni[kh * uc + u] as usize;
                        let want = &src[t * d..(t + 1) * d];
                        let first_diff = row.iter().zip(want).position(|(a, b)| a != b);
                        m.check(first_diff.is_none(), || {
                            let c = first_diff.unwrap_or(0);
                            format!(
                                "run {run} kv head {kh} {name} row {u} (token {t}) channel {c}: \
                                 {:#06x} vs source {:#06x}",
                                row[c], want[c]
                            )
                        });
                    } else {
                        let written = row.iter().position(|&x| x != POISON_U16);
                        m.check(written.is_none(), || {
                            format!(
                                "run {run} kv head {kh} {name} row {u} past uni_count {} was \
                                 written at channel {}",
                                counts[kh],
                                written.unwrap_or(0)
                            )
                        });
                    }
                }
            }
        }
        m.finish();
    }
}

fn fetch_all_shapes(t: &mut GpuTest, placement: Placement) {
    let mut first = true;
    for (d, g) in head_dims_and_groups() {
        let k = if first { 0 } else { t.rng.gen_range(1..=2048) };
        first = false;
        fetch_rows_case(
            &t.gpu,
            &mut t.rng,
            t.seed,
            placement,
            d,
            g,
            k,
            KvRows::Separate,
        );
    }
}

gpu_test!(gpu_fetch_union_rows_hbm, |t| {
    fetch_all_shapes(&mut t, Placement::Hbm);
});

gpu_test!(gpu_fetch_union_rows_host, |t| {
    fetch_all_shapes(&mut t, Placement::Host);
});

// Every head dimension from K/V-adjacent rows, in both placements (G = 4, one k each).
gpu_test!(gpu_fetch_union_rows_adjacent, |t| {
    for placement in [Placement::Hbm, Placement::Host] {
        for d in HEAD_DIMS {
            let k = t.rng.gen_range(1..=2048);
            fetch_rows_case(
                &t.gpu,
                &mut t.rng,
                t.seed,
                placement,
                d,
                4,
                k,
                KvRows::Adjacent,
            );
        }
    }
});
