//! GPU tests of the `encode` family (SPEC §2, §5; `templates/encode.cu.tera`) against the f64
//! reference store (`reference::store::HeadStore`).
//!
//! What is checked, on fresh random keys (the seed is printed and named in every failure):
//!
//! - bulk encode (raw and rotated) for every `BLK` in {32, 64, 128} and every `D` of §1:
//!   the segment words and scales of every filled block equal the reference store's byte for
//!   byte; bits of tokens that are not stored (the tail, the rest of the last segment, whole
//!   segments past the store) keep the poison the segments were filled with. Sequences of a
//!   batch have different lengths: several segments, a context that is not a multiple of the
//!   segment, and one shorter than a block (nothing stored).
//! - rotated stores: the kernel encodes `bf16_rn(Σ_i R[i][j] k[i])` with f32 fma in ascending
//!   `i`; the test forms the same bf16 keys on the CPU (`f32::mul_add`, ascending `i`, then
//!   round-to-nearest-even) and encodes them with `HeadStore`.
//! - one block alone; a bulk range that starts where an earlier launch stopped (for `BLK = 32`
//!   in the middle of a 64-token word, whose first half must survive); appends of one block per
//!   sequence after a bulk prefill, over several steps, with sequences that have no full block
//!   pending (left untouched).
//! - status: a non-finite key (inf and NaN; raw and rotated) gives `{1, b, h, token, raw
//!   channel}`; a scale overflow `{2, b, h, block's first token, store channel}` as the reference
//!   reports it; a chunk past `max_seg` `{3, b, h, chunk's first token, 0}`; a misaligned range
//!   `{4, b, h, first token, 0}`. What the kernel leaves written on failure: the failing chunk
//!   (`max(BLK, 64)` aligned tokens) is not written at all (poison stays); every other chunk of
//!   the launch is written normally.

use codegen::spec::shape::HEAD_DIMS;
use codegen::spec::{EncodeMode, EncodeSpec};
use fathom_tests::device_store::max_seg;
use fathom_tests::store_kernels::{
    rotate_keys, rotations, run_encode, upload, DeviceKeys, EncodeTarget, Kernel, Mismatches,
};
use fathom_tests::{gpu_test, inputs};
use half::bf16;
use rand::Rng;
use reference::store::{BlockSize, EncodeError, HeadId, HeadStore, StoreLayout, WORD_TOKENS};
use runtime::gpu::Gpu;

const BLOCKS: [usize; 3] = [32, 64, 128];

fn spec(d: usize, blk: usize, s: usize, mode: EncodeMode, rotate: bool) -> EncodeSpec {
    EncodeSpec {
        head_dim: d,
        block: blk,
        segment_words: s,
        mode,
        rotate,
        threads: 256,
        kv_rows: codegen::spec::KvRows::Separate,
    }
}

fn layout(d: usize, blk: usize, s: usize) -> StoreLayout {
    StoreLayout::new(d, BlockSize::from_tokens(blk).unwrap(), s).unwrap()
}

/// Keys of `[b][h]` in the store basis: the raw keys, or rotated by head `h`'s basis.
fn store_basis(raw: &[Vec<Vec<bf16>>], rot: Option<&[f32]>, d: usize) -> Vec<Vec<Vec<bf16>>> {
    raw.iter()
        .map(|sequence| {
            sequence
                .iter()
                .enumerate()
                .map(|(h, keys)| match rot {
                    Some(r) => rotate_keys(&r[h * d * d..(h + 1) * d * d], d, keys),
                    None => keys.clone(),
                })
                .collect()
        })
        .collect()
}

/// Reference stores of the first `n[b]` tokens of every `(b, h)`.
fn reference(keys: &[Vec<Vec<bf16>>], n: &[usize], layout: StoreLayout) -> Vec<Vec<HeadStore>> {
    keys.iter()
        .zip(n)
        .map(|(sequence, &n)| {
            sequence
                .iter()
                .enumerate()
                .map(|(h, k)| {
                    let id = HeadId {
                        layer: 0,
                        kv_head: h,
                    };
                    HeadStore::from_keys(layout, id, &k[..n * layout.head_dim()]).unwrap()
                })
                .collect()
        })
        .collect()
}

/// Compares every segment of the target with the reference stores: stored tokens (unless
/// `unwritten(b, h, token)`) equal the reference bit for bit, every other bit and scale is poison.
fn compare(
    target: &EncodeTarget,
    stores: &[Vec<HeadStore>],
    unwritten: &dyn Fn(usize, usize, usize) -> bool,
    label: &str,
    seed: u64,
) {
    let (words, scales) = target.download();
    let layout = target.layout;
    let (d, s_words, spc) = (
        layout.head_dim(),
        layout.segment_words(),
        layout.scales_per_channel(),
    );
    let blk = layout.block().tokens();
    let mut bad = Mismatches::new(format!("{label}: segment words and scales"), seed);
    for (b, sequence) in stores.iter().enumerate() {
        for (h, store) in sequence.iter().enumerate() {
            let filled = |token: usize| token < store.stored_tokens() && !unwritten(b, h, token);
            for s in 0..target.max_seg {
                let seg = target.segment(b, h, s);
                let got_words = &words[seg * layout.words_len()..(seg + 1) * layout.words_len()];
                let got_scales =
                    &scales[seg * layout.scales_len()..(seg + 1) * layout.scales_len()];
                let reference = store.segments().get(s);
                let first = s * layout.segment_tokens();
                for j in 0..s_words {
                    let mask = (0..WORD_TOKENS)
                        .filter(|&r| filled(first + j * WORD_TOKENS + r))
                        .fold(0u64, |m, r| m | 1 << r);
                    for c in 0..d {
                        for p in 0..4 {
                            let i = layout.word_index(c, p, j);
                            let want = reference.map_or(0, |r| r.words[i]) & mask | !mask;
                            bad.check(got_words[i] == want, || {
                                format!(
                                    "b {b} h {h} segment {s} channel {c} plane {p} word {j}: \
                                     {:#018x}, want {want:#018x} (filled mask {mask:#018x})",
                                    got_words[i]
                                )
                            });
                        }
                    }
                }
                for k in 0..spc {
                    let filled_block = filled(first + k * blk);
                    for c in 0..d {
                        let i = layout.scale_index(c, k);
                        let want = match reference {
                            Some(r) if filled_block => r.scales[i],
                            _ => 0xffff,
                        };
                        bad.check(got_scales[i] == want, || {
                            format!(
                                "b {b} h {h} segment {s} channel {c} block {k}: scale {:#06x}, \
                                 want {want:#06x}",
                                got_scales[i]
                            )
                        });
                    }
                }
            }
        }
    }
    bad.assert_none();
}

fn no_tokens(_: usize, _: usize, _: usize) -> bool {
    false
}

fn random_keys(
    rng: &mut impl Rng,
    batch: usize,
    heads: usize,
    n: &[usize],
    d: usize,
) -> Vec<Vec<Vec<bf16>>> {
    (0..batch)
        .map(|b| (0..heads).map(|_| inputs::keys(rng, n[b], d)).collect())
        .collect()
}

fn assert_ok(status: [i32; 5], label: &str, seed: u64) {
    assert_eq!(
        status, [0; 5],
        "{label}: status {status:?} on valid keys (FATHOM_TEST_SEED={seed})"
    );
}

/// A launch that must have succeeded: status 0, and the target holds `expected` (nothing where
/// no token is stored).
fn assert_encoded(
    target: &EncodeTarget,
    status: [i32; 5],
    expected: &[Vec<HeadStore>],
    label: &str,
    seed: u64,
) {
    assert_ok(status, label, seed);
    compare(target, expected, &no_tokens, label, seed);
}

/// One bulk launch of `spec` over every token of `raw` (`[b][h]` keys, `n[b]` tokens from
/// token 0), rotated by `rot` when given, into a new target of `max_seg` segments: the kernel,
/// the target and the launch's status.
fn bulk_encode(
    gpu: &Gpu,
    spec: EncodeSpec,
    layout: StoreLayout,
    raw: &[Vec<Vec<bf16>>],
    rot: Option<&[f32]>,
    n: &[usize],
    max_seg: usize,
) -> (Kernel, EncodeTarget, [i32; 5]) {
    let (batch, heads) = (raw.len(), raw[0].len());
    let kernel = Kernel::compile(gpu, spec);
    let keys = DeviceKeys::new(gpu, raw);
    let rot_buffer = rot.map(|r| upload(gpu, r, "rotation"));
    let target = EncodeTarget::new(gpu, layout, batch, heads, max_seg);
    let counts: Vec<i32> = n.iter().map(|&x| x as i32).collect();
    let status = run_encode(
        gpu,
        &kernel,
        &spec,
        &keys,
        rot_buffer.as_ref(),
        &target,
        &vec![0; batch],
        &counts,
    );
    (kernel, target, status)
}

/// One bulk launch over a batch of three sequences of different lengths (several segments, a
/// partial last segment, and one shorter than a block).
fn bulk_case(gpu: &Gpu, rng: &mut impl Rng, seed: u64, d: usize, blk: usize, rotate: bool) {
    let (batch, heads, s) = (3, 2, 4);
    let layout = layout(d, blk, s);
    let seg_tokens = layout.segment_tokens();
    let n = [
        rng.gen_range(2 * seg_tokens..5 * seg_tokens),
        rng.gen_range(blk..2 * seg_tokens),
        rng.gen_range(1..blk),
    ];
    let max_seg = max_seg(layout, &n);
    let raw = random_keys(rng, batch, heads, &n, d);
    let rot = rotate.then(|| rotations(rng, heads, d));
    let expected = reference(&store_basis(&raw, rot.as_deref(), d), &n, layout);

    let spec = spec(d, blk, s, EncodeMode::Bulk, rotate);
    let (kernel, target, status) =
        bulk_encode(gpu, spec, layout, &raw, rot.as_deref(), &n, max_seg);
    let label = format!("{} n={n:?}", kernel.name());
    assert_encoded(&target, status, &expected, &label, seed);
}

gpu_test!(gpu_encode_bulk_raw_matches_reference, |t| {
    for d in HEAD_DIMS {
        for blk in BLOCKS {
            bulk_case(&t.gpu, &mut t.rng, t.seed, d, blk, false);
        }
    }
});

gpu_test!(gpu_encode_bulk_rotated_matches_reference, |t| {
    for d in HEAD_DIMS {
        for blk in BLOCKS {
            bulk_case(&t.gpu, &mut t.rng, t.seed, d, blk, true);
        }
    }
});

gpu_test!(gpu_encode_one_block, |t| {
    for blk in BLOCKS {
        for rotate in [false, true] {
            let d = 128;
            let s = if blk == 128 { 2 } else { 1 };
            let layout = layout(d, blk, s);
            let raw = random_keys(&mut t.rng, 1, 1, &[blk], d);
            let rot = rotate.then(|| rotations(&mut t.rng, 1, d));
            let expected = reference(&store_basis(&raw, rot.as_deref(), d), &[blk], layout);
            let spec = spec(d, blk, s, EncodeMode::Bulk, rotate);
            let (kernel, target, status) =
                bulk_encode(&t.gpu, spec, layout, &raw, rot.as_deref(), &[blk], 2);
            assert_encoded(&target, status, &expected, kernel.name(), t.seed);
        }
    }
});

// Two bulk launches, `[0, a)` then `[a, n)`: the second must keep what the first wrote, also in
// a word the two share (BLK = 32, `a` an odd number of blocks).
gpu_test!(gpu_encode_bulk_in_two_ranges_joins_words, |t| {
    for blk in BLOCKS {
        for rotate in [false, true] {
            let (d, s, batch, heads) = (64, 4, 2, 2);
            let layout = layout(d, blk, s);
            let seg_tokens = layout.segment_tokens();
            // An odd number of blocks: for BLK = 32 the split falls mid-word.
            let a: Vec<usize> = (0..batch)
                .map(|_| (2 * t.rng.gen_range(0..seg_tokens / blk) + 1) * blk)
                .collect();
            let n: Vec<usize> = a
                .iter()
                .map(|&a| a + t.rng.gen_range(blk..2 * seg_tokens))
                .collect();
            let max_seg = max_seg(layout, &n);
            let raw = random_keys(&mut t.rng, batch, heads, &n, d);
            let rot = rotate.then(|| rotations(&mut t.rng, heads, d));
            let basis = store_basis(&raw, rot.as_deref(), d);
            let spec = spec(d, blk, s, EncodeMode::Bulk, rotate);
            let kernel = Kernel::compile(&t.gpu, spec);
            let keys = DeviceKeys::new(&t.gpu, &raw);
            let rot_buffer = rot.as_ref().map(|r| upload(&t.gpu, r, "rotation"));
            let target = EncodeTarget::new(&t.gpu, layout, batch, heads, max_seg);
            let to_i32 = |v: &[usize]| v.iter().map(|&x| x as i32).collect::<Vec<_>>();

            let status = run_encode(
                &t.gpu,
                &kernel,
                &spec,
                &keys,
                rot_buffer.as_ref(),
                &target,
                &[0, 0],
                &to_i32(&a),
            );
            let label = format!("{} first range a={a:?}", kernel.name());
            assert_encoded(
                &target,
                status,
                &reference(&basis, &a, layout),
                &label,
                t.seed,
            );

            let rest: Vec<usize> = n.iter().zip(&a).map(|(n, a)| n - a).collect();
            let status = run_encode(
                &t.gpu,
                &kernel,
                &spec,
                &keys,
                rot_buffer.as_ref(),
                &target,
                &to_i32(&a),
                &to_i32(&rest),
            );
            let label = format!("{} second range a={a:?} n={n:?}", kernel.name());
            assert_encoded(
                &target,
                status,
                &reference(&basis, &n, layout),
                &label,
                t.seed,
            );
        }
    }
});

/// A bulk prefill, then append launches of one block per sequence over several decode steps.
fn append_case(gpu: &Gpu, rng: &mut impl Rng, seed: u64, d: usize, blk: usize, rotate: bool) {
    let (batch, heads, s, steps) = (3, 2, 2, 6);
    let layout = layout(d, blk, s);
    let seg_tokens = layout.segment_tokens();
    let prefill: Vec<usize> = (0..batch)
        .map(|b| {
            if b == 2 {
                0
            } else {
                rng.gen_range(0..2 * seg_tokens)
            }
        })
        .collect();
    // Room for every step to add up to a block and a half.
    let capacity: Vec<usize> = prefill
        .iter()
        .map(|p| p + steps * (blk * 3 / 2) + 1)
        .collect();
    let max_seg = max_seg(layout, &capacity);
    let raw = random_keys(rng, batch, heads, &capacity, d);
    let rot = rotate.then(|| rotations(rng, heads, d));
    let basis = store_basis(&raw, rot.as_deref(), d);
    let keys = DeviceKeys::new(gpu, &raw);
    let rot_buffer = rot.as_ref().map(|r| upload(gpu, r, "rotation"));
    let target = EncodeTarget::new(gpu, layout, batch, heads, max_seg);

    let bulk_spec = spec(d, blk, s, EncodeMode::Bulk, rotate);
    let bulk = Kernel::compile(gpu, bulk_spec);
    let counts: Vec<i32> = prefill.iter().map(|&x| x as i32).collect();
    let status = run_encode(
        gpu,
        &bulk,
        &bulk_spec,
        &keys,
        rot_buffer.as_ref(),
        &target,
        &vec![0; batch],
        &counts,
    );
    assert_ok(status, bulk.name(), seed);

    let append_spec = spec(d, blk, s, EncodeMode::Append, rotate);
    let append = Kernel::compile(gpu, append_spec);
    let mut n_stored: Vec<usize> = prefill.iter().map(|p| p / blk * blk).collect();
    let mut n_total = prefill.clone();
    for step in 0..steps {
        for (b, total) in n_total.iter_mut().enumerate() {
            // Sequence 1 does not grow in odd steps, so it often has no full block pending
            // (then the kernel must leave it untouched).
            let grow = if b == 1 && step % 2 == 1 {
                0
            } else {
                rng.gen_range(0..blk * 3 / 2)
            };
            *total = (*total + grow).min(capacity[b]);
        }
        let status = run_encode(
            gpu,
            &append,
            &append_spec,
            &keys,
            rot_buffer.as_ref(),
            &target,
            &n_stored.iter().map(|&x| x as i32).collect::<Vec<_>>(),
            &n_total.iter().map(|&x| x as i32).collect::<Vec<_>>(),
        );
        let label = format!(
            "{} step {step} n_stored {n_stored:?} n_total {n_total:?}",
            append.name()
        );
        assert_ok(status, &label, seed);
        // The caller advances the store by the block the kernel encoded.
        for (stored, total) in n_stored.iter_mut().zip(&n_total) {
            if total - *stored >= blk {
                *stored += blk;
            }
        }
        compare(
            &target,
            &reference(&basis, &n_stored, layout),
            &no_tokens,
            &label,
            seed,
        );
    }
}

gpu_test!(gpu_encode_append_raw_after_bulk_prefill, |t| {
    for (d, blk) in [(64, 32), (128, 64), (256, 128), (128, 32), (64, 128)] {
        append_case(&t.gpu, &mut t.rng, t.seed, d, blk, false);
    }
});

gpu_test!(gpu_encode_append_rotated_after_bulk_prefill, |t| {
    for (d, blk) in [(64, 128), (128, 64), (256, 32)] {
        append_case(&t.gpu, &mut t.rng, t.seed, d, blk, true);
    }
});

/// A bad value planted at `(b, h, token, channel)` of the raw keys.
struct Planted {
    b: usize,
    h: usize,
    token: usize,
    channel: usize,
    value: bf16,
}

/// Encodes a batch with one bad raw key, checks the status against `want`, and that everything
/// but the failing chunk equals the reference of the keys with the bad value replaced by 0.
#[allow(clippy::too_many_arguments)]
fn failure_case(
    gpu: &Gpu,
    rng: &mut impl Rng,
    seed: u64,
    d: usize,
    blk: usize,
    rotate: bool,
    value: bf16,
    want_kind: i32,
) {
    let (batch, heads, s) = (2, 2, 2);
    let layout = layout(d, blk, s);
    let seg_tokens = layout.segment_tokens();
    let n: Vec<usize> = (0..batch)
        .map(|_| rng.gen_range(2 * seg_tokens..4 * seg_tokens))
        .collect();
    let max_seg = max_seg(layout, &n);
    let mut raw = random_keys(rng, batch, heads, &n, d);
    let rot = rotate.then(|| rotations(rng, heads, d));
    let b = rng.gen_range(0..batch);
    let planted = Planted {
        b,
        h: rng.gen_range(0..heads),
        token: rng.gen_range(0..n[b] / blk * blk),
        channel: rng.gen_range(0..d),
        value,
    };
    let at = planted.token * d + planted.channel;
    raw[planted.b][planted.h][at] = planted.value;

    // The failure the reference reports: a non-finite key on the raw keys (raw channel), a
    // scale overflow on the store-basis keys (store channel).
    let id = HeadId {
        layer: 0,
        kv_head: planted.h,
    };
    let bad_keys = match rot.as_deref() {
        Some(r) if want_kind == 2 => rotate_keys(
            &r[planted.h * d * d..(planted.h + 1) * d * d],
            d,
            &raw[b][planted.h],
        ),
        _ => raw[b][planted.h].clone(),
    };
    let stored = n[b] / blk * blk;
    let (token, channel) = match HeadStore::from_keys(layout, id, &bad_keys[..stored * d]) {
        Err(EncodeError::NonFiniteKey { token, channel, .. }) if want_kind == 1 => (token, channel),
        Err(EncodeError::ScaleOverflow { token, channel, .. }) if want_kind == 2 => {
            (token, channel)
        }
        other => panic!(
            "the reference does not report kind {want_kind} for value {value} at token {} channel \
             {}: {other:?} (FATHOM_TEST_SEED={seed})",
            planted.token, planted.channel
        ),
    };
    let want = [
        want_kind,
        b as i32,
        planted.h as i32,
        token as i32,
        channel as i32,
    ];

    let spec = spec(d, blk, s, EncodeMode::Bulk, rotate);
    let (kernel, target, status) =
        bulk_encode(gpu, spec, layout, &raw, rot.as_deref(), &n, max_seg);
    let label = format!(
        "{} value {value} at b {b} h {} token {} channel {}",
        kernel.name(),
        planted.h,
        planted.token,
        planted.channel
    );
    assert_eq!(
        status, want,
        "{label}: status {status:?}, want {want:?} (FATHOM_TEST_SEED={seed})"
    );

    raw[planted.b][planted.h][at] = bf16::ZERO;
    let expected = reference(&store_basis(&raw, rot.as_deref(), d), &n, layout);
    let chunk = spec.chunk_tokens();
    let failing = planted.token / chunk * chunk;
    let unwritten = |b: usize, h: usize, t: usize| {
        b == planted.b && h == planted.h && (failing..failing + chunk).contains(&t)
    };
    compare(&target, &expected, &unwritten, &label, seed);
}

gpu_test!(gpu_encode_status_non_finite_key, |t| {
    for (d, blk) in [(64, 32), (128, 64), (256, 128)] {
        for rotate in [false, true] {
            for value in [bf16::INFINITY, bf16::NEG_INFINITY, bf16::NAN] {
                failure_case(&t.gpu, &mut t.rng, t.seed, d, blk, rotate, value, 1);
            }
        }
    }
});

gpu_test!(gpu_encode_status_scale_overflow, |t| {
    for (d, blk) in [(64, 32), (128, 64), (256, 128)] {
        // Raw: max|x| / 8 above fp16's largest finite value (max|x| >= 524160).
        failure_case(
            &t.gpu,
            &mut t.rng,
            t.seed,
            d,
            blk,
            false,
            bf16::from_f32(-6.0e5),
            2,
        );
        // Rotated: one raw channel of 1e7 spreads over the store channels; any coordinate
        // above 524160 overflows (|R[i][j]| > 0.053, which some j of a unit row has for D <= 256).
        failure_case(
            &t.gpu,
            &mut t.rng,
            t.seed,
            d,
            blk,
            true,
            bf16::from_f32(1.0e7),
            2,
        );
    }
});

// A chunk beyond `max_seg` (status 3) and a range that does not start on a block (status 4).
gpu_test!(gpu_encode_status_no_segment_and_misaligned_range, |t| {
    for blk in BLOCKS {
        let (d, s) = (64, 2);
        let layout = layout(d, blk, s);
        let seg_tokens = layout.segment_tokens();
        let spec = spec(d, blk, s, EncodeMode::Bulk, false);
        let chunk = spec.chunk_tokens();
        let n = seg_tokens + chunk;
        let raw = random_keys(&mut t.rng, 1, 1, &[n], d);
        let kernel = Kernel::compile(&t.gpu, spec);
        let keys = DeviceKeys::new(&t.gpu, &raw);

        // One segment for two segments' worth of tokens: the chunk past it reports, the rest
        // is written.
        let target = EncodeTarget::new(&t.gpu, layout, 1, 1, 1);
        let status = run_encode(
            &t.gpu,
            &kernel,
            &spec,
            &keys,
            None,
            &target,
            &[0],
            &[n as i32],
        );
        let label = format!("{} past max_seg", kernel.name());
        assert_eq!(
            status,
            [3, 0, 0, seg_tokens as i32, 0],
            "{label} (FATHOM_TEST_SEED={})",
            t.seed
        );
        compare(
            &target,
            &reference(&raw, &[seg_tokens], layout),
            &no_tokens,
            &label,
            t.seed,
        );

        // A range starting half a block in: reported, nothing written.
        let target = EncodeTarget::new(&t.gpu, layout, 1, 1, 2);
        let first = blk / 2;
        let status = run_encode(
            &t.gpu,
            &kernel,
            &spec,
            &keys,
            None,
            &target,
            &[first as i32],
            &[blk as i32],
        );
        let label = format!("{} misaligned", kernel.name());
        assert_eq!(
            status,
            [4, 0, 0, first as i32, 0],
            "{label} (FATHOM_TEST_SEED={})",
            t.seed
        );
        compare(
            &target,
            &reference(&raw, &[0], layout),
            &no_tokens,
            &label,
            t.seed,
        );
    }
});
