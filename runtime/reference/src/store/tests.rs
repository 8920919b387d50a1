use super::*;
use codegen::spec::shape::HEAD_DIMS;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const ID: HeadId = HeadId {
    layer: 2,
    kv_head: 1,
};

/// Token-major bf16 keys of `tokens` x `d`, zero except the `(token, channel, value)` given.
fn keys(tokens: usize, d: usize, set: &[(usize, usize, f64)]) -> Vec<bf16> {
    let mut k = vec![bf16::ZERO; tokens * d];
    for &(token, channel, value) in set {
        k[token * d + channel] = bf16::from_f64(value);
    }
    k
}

fn layout(d: usize, block: BlockSize, s: usize) -> StoreLayout {
    StoreLayout::new(d, block, s).unwrap()
}

/// What a store holds, to compare before and after a refused append.
fn snapshot(store: &HeadStore) -> (Vec<Segment>, usize, Vec<bf16>) {
    (
        store.segments().to_vec(),
        store.stored_tokens(),
        store.tail().to_vec(),
    )
}

/// Every value the `t`-bit mid-rise quantiser of `[-M, M]` may give `x`, written from its
/// definition: `2^t` cells of width `w = 2M / 2^t`, cell `floor((x + M) / w)` clamped to
/// `0..2^t`, decoded to the cell's midpoint. `M = 8 Δ` with `Δ` the fp16-rounded scale the
/// store uses (which may be a little below the block's true max, so the max can clamp). When
/// `x` lies on a cell edge (up to rounding), both neighbouring cells are accepted: this form
/// and the store's `floor(x / Δ)` may round an edge differently.
fn quantiser_values(x: f64, delta: f64, t: u8) -> Vec<f64> {
    let m = 8.0 * delta;
    if t == 0 || m == 0.0 {
        return vec![0.0];
    }
    let cells = f64::from(1u32 << t);
    let width = 2.0 * m / cells;
    let u = (x + m) / width;
    let candidates = if (u - u.round()).abs() <= 1e-9 * u.abs().max(1.0) {
        vec![u.round() - 1.0, u.round()]
    } else {
        vec![u.floor()]
    };
    candidates
        .into_iter()
        .map(|cell| -m + (cell.clamp(0.0, cells - 1.0) + 0.5) * width)
        .collect()
}

/// Random keys with every kind of channel: all zero, tiny (the fp16 scale is subnormal or
/// underflows to 0), ordinary, negative only, values on cell edges, and near the fp16 limit.
fn random_keys(tokens: usize, d: usize, seed: u64) -> Vec<bf16> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let kinds: Vec<(u32, f64)> = (0..d)
        .map(|_| {
            let kind = rng.gen_range(0..6);
            let scale = match kind {
                1 => 10f64.powf(rng.gen_range(-9.0..-3.0)),
                5 => rng.gen_range(1e5..5.2e5),
                _ => 10f64.powf(rng.gen_range(-2.0..4.0)),
            };
            (kind, scale)
        })
        .collect();
    let mut k = Vec::with_capacity(tokens * d);
    for _ in 0..tokens {
        for &(kind, scale) in &kinds {
            let x = match kind {
                0 => 0.0,
                3 => -scale * rng.gen_range(0.0..1.0),
                4 => scale * f64::from(rng.gen_range(-8i32..=8)) / 8.0,
                _ if rng.gen_bool(0.1) => 0.0,
                _ => scale * rng.gen_range(-1.0..1.0),
            };
            k.push(bf16::from_f64(x));
        }
    }
    k
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// A prefix of `t` planes decodes to the `t`-bit mid-rise quantiser, for every `t` in 0..=4,
    /// and every block's scale is `max|x| / 8` rounded to fp16.
    #[test]
    fn prefixes_decode_to_the_midrise_quantiser(
        block in prop::sample::select(BlockSize::ALL.to_vec()),
        d in prop::sample::select(HEAD_DIMS.to_vec()),
        blocks in 1usize..=3,
        words in 1usize..=3,
        seed in any::<u64>(),
    ) {
        let s = if block == BlockSize::B128 { 2 * words } else { words };
        let blk = block.tokens();
        let tokens = blocks * blk;
        let k = random_keys(tokens, d, seed);
        let store = HeadStore::from_keys(layout(d, block, s), ID, &k).unwrap();
        prop_assert_eq!(store.stored_tokens(), tokens);
        for c in 0..d {
            for j in 0..blocks {
                let max = (j * blk..(j + 1) * blk)
                    .map(|i| k[i * d + c].to_f64().abs())
                    .fold(0.0, f64::max);
                let delta = f16::from_f64(max / 8.0);
                for i in j * blk..(j + 1) * blk {
                    prop_assert_eq!(store.scale(i, c).to_bits(), delta.to_bits());
                    let x = k[i * d + c].to_f64();
                    for t in 0..=4u8 {
                        let got = store.decode(i, c, t);
                        let allowed = quantiser_values(x, delta.to_f64(), t);
                        let tol = 1e-12 * 8.0 * delta.to_f64();
                        prop_assert!(
                            allowed.iter().any(|v| (got - v).abs() <= tol),
                            "token {} channel {} x {} Δ {} t {}: decoded {}, quantiser {:?}",
                            i, c, x, delta, t, got, allowed
                        );
                    }
                }
            }
        }
    }
}

/// D = 64, BLK = 64, S = 2: one segment holds 128 tokens, two blocks; word `j` is block `j`.
/// Index of plane `b` of channel `c`, word `j`: `(c*4 + b)*2 + j`; scale: `c*2 + j`.
///
/// Block 0, channel 0: tokens 0..4 are 8, -8, 1, -0.5 (the rest 0). M = 8, Δ = 1 (fp16 0x3C00).
/// Codes `clamp(floor(x/Δ) + 8, 0, 15)`: 8 -> 16 -> 15 = 1111; -8 -> 0 = 0000; 1 -> 9 = 1001;
/// -0.5 -> floor(-0.5) = -1 -> 7 = 0111; 0 -> 8 = 1000. Plane b is bit 3-b of the code; token r
/// is bit r of the word:
///   plane 0: 1,0,1,0 then all 1  -> 0xFFFF_FFFF_FFFF_FFF5
///   plane 1: 1,0,0,1 then all 0  -> 0b1001 = 0x9
///   plane 2: 1,0,0,1 then all 0  -> 0x9
///   plane 3: 1,0,1,1 then all 0  -> 0b1101 = 0xD
/// Block 0, channel 5: token 10 is 3, token 63 is -2. M = 3, Δ = 0.375 = 1.5 * 2^-2
/// (fp16: exponent 13, mantissa 512: 0x3600). 3/0.375 = 8 -> 15 = 1111; -2/0.375 = -5.33 ->
/// -6 -> 2 = 0010; the rest 8 = 1000:
///   plane 0: all 1 but token 63     -> 0x7FFF_FFFF_FFFF_FFFF
///   plane 1: token 10               -> 0x400
///   plane 2: tokens 10 and 63       -> 0x8000_0000_0000_0400
///   plane 3: token 10               -> 0x400
/// Block 1, channel 0: token 64 is 0.1 and token 65 is -0.1; in bf16 ±0.10009765625 =
/// ±1.6015625 * 2^-4, so Δ = 1.6015625 * 2^-7, exact in fp16 (exponent 8, mantissa
/// 0.6015625 * 1024 = 616): 0x2268. x/Δ = ±8 -> codes 15 and 0:
///   plane 0: all 1 but bit 1 -> 0xFFFF_FFFF_FFFF_FFFD; planes 1, 2, 3: bit 0 -> 0x1
/// Every other channel of a block is all zero: Δ = 0, code 8 = 1000 for every token, so plane 0
/// is all ones (the sign bit of x >= 0) and planes 1..3 are 0; its scale is fp16 0 (0x0000).
#[test]
fn known_layout_of_a_hand_built_segment() {
    let k = keys(
        128,
        64,
        &[
            (0, 0, 8.0),
            (1, 0, -8.0),
            (2, 0, 1.0),
            (3, 0, -0.5),
            (10, 5, 3.0),
            (63, 5, -2.0),
            (64, 0, 0.1),
            (65, 0, -0.1),
        ],
    );
    let store = HeadStore::from_keys(layout(64, BlockSize::B64, 2), ID, &k).unwrap();
    assert_eq!(store.segments().len(), 1);
    let seg = &store.segments()[0];
    assert_eq!(seg.words.len(), 64 * 4 * 2);
    assert_eq!(seg.scales.len(), 64 * 2);
    let word = |c: usize, b: usize, j: usize| seg.words[(c * 4 + b) * 2 + j];
    let zero_channel = [u64::MAX, 0, 0, 0];

    assert_eq!(
        (0..4).map(|b| word(0, b, 0)).collect::<Vec<_>>(),
        vec![0xFFFF_FFFF_FFFF_FFF5, 0x9, 0x9, 0xD]
    );
    assert_eq!(
        (0..4).map(|b| word(5, b, 0)).collect::<Vec<_>>(),
        vec![0x7FFF_FFFF_FFFF_FFFF, 0x400, 0x8000_0000_0000_0400, 0x400]
    );
    assert_eq!(
        (0..4).map(|b| word(0, b, 1)).collect::<Vec<_>>(),
        vec![0xFFFF_FFFF_FFFF_FFFD, 0x1, 0x1, 0x1]
    );
    assert_eq!(
        (0..4).map(|b| word(5, b, 1)).collect::<Vec<_>>(),
        zero_channel
    );
    for c in (1..64).filter(|&c| c != 5) {
        for j in 0..2 {
            assert_eq!(
                (0..4).map(|b| word(c, b, j)).collect::<Vec<_>>(),
                zero_channel
            );
        }
    }
    let mut scales = vec![0u16; 128];
    scales[0] = 0x3C00; // channel 0, block 0: Δ = 1
    scales[1] = 0x2268; // channel 0, block 1
    scales[5 * 2] = 0x3600; // channel 5, block 0: Δ = 0.375
    assert_eq!(seg.scales, scales);

    // Decoding: -0.5 (code 0111) at depth 4 is (7 - 8 + 1/2) * 1 = -0.5; at depth 1 the prefix
    // 0 is (0 - 1 + 1/2) * 8 = -4; at depth 2 the prefix 01 is (1 - 2 + 1/2) * 4 = -2.
    assert_eq!(store.decode(3, 0, 4), -0.5);
    assert_eq!(store.decode(3, 0, 1), -4.0);
    assert_eq!(store.decode(3, 0, 2), -2.0);
    assert_eq!(store.decode(3, 0, 0), 0.0);
    // 8 clamps to the top cell: (15 - 8 + 1/2) * 1 = 7.5.
    assert_eq!(store.decode(0, 0, 4), 7.5);
    assert_eq!(store.code(63, 5), 2);
}

/// BLK = 32 puts two scale blocks in a word (`S*2` scales per channel); BLK = 128 spans two
/// words with one scale (`S/2` per channel).
#[test]
fn scale_blocks_per_word_follow_the_block_size() {
    // BLK = 32, S = 1: channel 3 has 8.0 at token 40 (block 1 of word 0).
    let k = keys(64, 64, &[(40, 3, 8.0)]);
    let store = HeadStore::from_keys(layout(64, BlockSize::B32, 1), ID, &k).unwrap();
    let seg = &store.segments()[0];
    assert_eq!(seg.scales.len(), 128);
    assert_eq!(seg.scales[3 * 2 + 1], 0x3C00);
    assert_eq!(seg.scales.iter().filter(|&&s| s != 0).count(), 1);
    // Code 15 at token 40: bit 40 set in every plane of channel 3.
    for b in 0..4 {
        assert_eq!(seg.words[3 * 4 + b] >> 40 & 1, 1);
    }
    // BLK = 128, S = 2: channel 7 has -4.0 at token 100 (word 1), one scale per channel.
    let k = keys(128, 64, &[(100, 7, -4.0)]);
    let store = HeadStore::from_keys(layout(64, BlockSize::B128, 2), ID, &k).unwrap();
    let seg = &store.segments()[0];
    assert_eq!(seg.scales.len(), 64);
    assert_eq!(seg.scales[7], f16::from_f64(0.5).to_bits());
    // -4 / 0.5 = -8 -> code 0: plane 0 of channel 7 word 1 has bit 36 clear.
    assert_eq!(seg.words[(7 * 4) * 2 + 1], !(1u64 << 36));
}

#[test]
fn appending_across_a_segment_boundary_opens_a_second_segment() {
    // S = 2 at BLK = 64: 128 tokens per segment.
    let all = random_keys(192, 64, 11);
    let mut store =
        HeadStore::from_keys(layout(64, BlockSize::B64, 2), ID, &all[..128 * 64]).unwrap();
    assert_eq!(store.segments().len(), 1);
    store.append(&all[128 * 64..]).unwrap();
    assert_eq!(store.segments().len(), 2);
    assert_eq!(store.stored_tokens(), 192);
    // The second segment holds the block in word 0; word 1 and its scales are still zero.
    let seg = &store.segments()[1];
    let l = store.layout();
    for c in 0..64 {
        for b in 0..4 {
            assert_eq!(seg.words[l.word_index(c, b, 1)], 0);
        }
        assert_eq!(seg.scales[l.scale_index(c, 1)], 0);
    }
    // Appending in pieces stores what encoding everything at once stores.
    let whole = HeadStore::from_keys(*l, ID, &all).unwrap();
    assert_eq!(whole.segments(), store.segments());
    for i in [128, 150, 191] {
        for c in [0, 31, 63] {
            let block = &all[128 * 64..];
            let max = (0..64)
                .map(|r| block[r * 64 + c].to_f64().abs())
                .fold(0.0, f64::max);
            let delta = f16::from_f64(max / 8.0);
            assert_eq!(store.code(i, c), quantise(all[i * 64 + c].to_f64(), delta));
        }
    }
}

#[test]
fn tokens_short_of_a_block_wait_in_the_tail() {
    let all = random_keys(128, 64, 5);
    let mut store =
        HeadStore::from_keys(layout(64, BlockSize::B64, 1), ID, &all[..64 * 64]).unwrap();
    let before = store.segments().to_vec();
    store.append(&all[64 * 64..74 * 64]).unwrap();
    assert_eq!(store.stored_tokens(), 64);
    assert_eq!(store.tail_tokens(), 10);
    assert_eq!(store.total_tokens(), 74);
    assert_eq!(store.tail(), &all[64 * 64..74 * 64]);
    assert_eq!(store.segments(), &before[..]);
    // The 54 tokens that complete the block move it into the store.
    store.append(&all[74 * 64..]).unwrap();
    assert_eq!(store.stored_tokens(), 128);
    assert_eq!(store.tail_tokens(), 0);
    assert_eq!(store.segments().len(), 2);
    let whole = HeadStore::from_keys(*store.layout(), ID, &all).unwrap();
    assert_eq!(whole.segments(), store.segments());
    // An empty append changes nothing.
    store.append(&[]).unwrap();
    assert_eq!(store.total_tokens(), 128);
}

#[test]
fn non_finite_keys_are_named_and_nothing_is_written() {
    let mut store =
        HeadStore::from_keys(layout(64, BlockSize::B64, 1), ID, &random_keys(70, 64, 1)).unwrap();
    let before = snapshot(&store);
    // 64 stored + 6 in the tail: row 3 of this append is token 73.
    let mut more = random_keys(64, 64, 2);
    more[3 * 64 + 7] = bf16::NAN;
    assert_eq!(
        store.append(&more).map_err(|e| match e {
            EncodeError::NonFiniteKey {
                layer,
                kv_head,
                token,
                channel,
                ..
            } => (layer, kv_head, token, channel),
            other => panic!("{other}"),
        }),
        Err((2, 1, 73, 7))
    );
    assert_eq!(snapshot(&store), before);
    let mut k = random_keys(64, 64, 3);
    k[63] = bf16::NEG_INFINITY;
    let err = HeadStore::from_keys(layout(64, BlockSize::B64, 1), ID, &k).unwrap_err();
    assert_eq!(
        err,
        EncodeError::NonFiniteKey {
            layer: 2,
            kv_head: 1,
            token: 0,
            channel: 63,
            value: f32::NEG_INFINITY
        }
    );
    assert!(err
        .to_string()
        .contains("layer 2, KV head 1, token 0, channel 63"));
}

#[test]
fn a_scale_beyond_fp16_is_refused_and_nothing_is_written() {
    // 522240 is the largest bf16 below 65520 * 8: Δ = 65280 fits an fp16. 524288 = 2^19 does not.
    let below = bf16::from_f64(522240.0);
    assert_eq!(below.to_f64(), 522240.0);
    assert_eq!(bf16::from_bits(below.to_bits() + 1).to_f64(), 524288.0);
    let fits = keys(64, 64, &[(5, 9, -522240.0)]);
    let store = HeadStore::from_keys(layout(64, BlockSize::B64, 1), ID, &fits).unwrap();
    assert_eq!(store.scale(5, 9).to_f64(), 65280.0);

    let mut store =
        HeadStore::from_keys(layout(64, BlockSize::B64, 1), ID, &random_keys(100, 64, 4)).unwrap();
    let before = snapshot(&store);
    // The tail's 36 tokens plus these 92 make two blocks (tokens 64..128 and 128..192); the
    // first is fine, the second overflows, and neither is written.
    let mut more = random_keys(92, 64, 5);
    more[(150 - 100) * 64 + 9] = bf16::from_f64(-524288.0);
    let err = store.append(&more).unwrap_err();
    assert_eq!(
        err,
        EncodeError::ScaleOverflow {
            layer: 2,
            kv_head: 1,
            token: 128,
            channel: 9,
            max_abs: 524288.0,
            limit: MAX_ENCODABLE_ABS
        }
    );
    assert_eq!(snapshot(&store), before);
}

#[test]
fn shapes_and_layouts_are_checked() {
    let mut store = HeadStore::new(layout(64, BlockSize::B64, 1), ID);
    assert_eq!(
        store.append(&[bf16::ZERO; 65]),
        Err(EncodeError::Shape {
            values: 65,
            head_dim: 64
        })
    );
    assert_eq!(store.total_tokens(), 0);
    assert!(matches!(
        HeadStore::from_keys(layout(128, BlockSize::B64, 1), ID, &[bf16::ZERO; 64]),
        Err(EncodeError::Shape { .. })
    ));
    assert_eq!(
        StoreLayout::new(100, BlockSize::B64, 1),
        Err(LayoutError::HeadDim { got: 100 })
    );
    assert_eq!(
        StoreLayout::new(64, BlockSize::B128, 1),
        Err(LayoutError::SegmentWords { got: 1, block: 128 })
    );
    assert_eq!(
        StoreLayout::new(64, BlockSize::B64, 0),
        Err(LayoutError::SegmentWords { got: 0, block: 64 })
    );
    assert_eq!(
        BlockSize::from_tokens(48),
        Err(LayoutError::BlockSize { got: 48 })
    );
    for block in BlockSize::ALL {
        assert_eq!(BlockSize::from_tokens(block.tokens()), Ok(block));
    }
}

#[test]
fn mean_square_scale_averages_the_block_scales() {
    // Channel 0: Δ = 1 in block 0, 0.5 in block 1 -> (1 + 0.25) / 2; channel 1 never set.
    let k = keys(128, 64, &[(0, 0, 8.0), (64, 0, -4.0)]);
    let store = HeadStore::from_keys(layout(64, BlockSize::B64, 2), ID, &k).unwrap();
    let ms = store.mean_square_scale();
    assert_eq!(ms[0], 0.625);
    assert_eq!(ms[1], 0.0);
    assert_eq!(
        HeadStore::new(layout(64, BlockSize::B64, 1), ID).mean_square_scale(),
        vec![0.0; 64]
    );
}
