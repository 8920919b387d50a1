//! SPEC §2: the 4-bit key code and the bit-plane store.
//!
//! A key block of `BLK` tokens gets one fp16 scale `Δ = max|x| / 8` per channel; each value
//! becomes a 4-bit mid-rise code whose most significant bit is the sign. The codes are stored as
//! four bit planes per channel, 64 tokens to a `u64` word, so that the first `t` planes of a
//! channel are one contiguous run of words: reading fewer planes is reading fewer bytes.
//!
//! This module is the byte-exact definition of the store: the GPU encoder must produce the same
//! `words` and `scales` (compare [`Segment::words`] and [`Segment::scales`]).

use half::{bf16, f16};
use thiserror::Error;

pub use codegen::spec::layout::{BlockSize, LayoutError, StoreLayout, PLANES};
pub use codegen::spec::shape::WORD_TOKENS;

/// Which head of which layer a store belongs to, so that errors can name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct HeadId {
    pub layer: usize,
    pub kv_head: usize,
}

/// Keys that cannot be encoded. Nothing is written when one is returned.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum EncodeError {
    #[error(
        "key of layer {layer}, KV head {kv_head}, token {token}, channel {channel} is {value}; \
         keys must be finite"
    )]
    NonFiniteKey {
        layer: usize,
        kv_head: usize,
        token: usize,
        channel: usize,
        value: f32,
    },
    #[error(
        "block of layer {layer}, KV head {kv_head} starting at token {token}, channel {channel} \
         has max |x| = {max_abs}, so its scale max|x|/8 does not fit an fp16; |x| must stay below \
         {limit}"
    )]
    ScaleOverflow {
        layer: usize,
        kv_head: usize,
        token: usize,
        channel: usize,
        max_abs: f64,
        limit: f64,
    },
    #[error("{values} key values are not a whole number of {head_dim}-channel keys")]
    Shape { values: usize, head_dim: usize },
}

/// The largest `max |x|` whose scale `max|x| / 8` still rounds to a finite fp16.
/// fp16's largest finite value is 65504 and values below 65520 round to it.
pub const MAX_ENCODABLE_ABS: f64 = 65520.0 * 8.0;

/// `Δ = max|x| / 8` rounded to nearest fp16; `None` when it overflows fp16.
pub fn block_scale(max_abs: f64) -> Option<f16> {
    let delta = f16::from_f64(max_abs / 8.0);
    delta.is_finite().then_some(delta)
}

/// The 4-bit code of `x` with step `delta`: `clamp(floor(x / Δ) + 8, 0, 15)`, 8 when `Δ = 0`.
pub fn quantise(x: f64, delta: f16) -> u8 {
    let delta = delta.to_f64();
    if delta == 0.0 {
        return 8;
    }
    ((x / delta).floor() + 8.0).clamp(0.0, 15.0) as u8
}

/// Bit `plane` (0 = most significant) of a 4-bit code.
pub fn plane_bit(code: u8, plane: usize) -> u64 {
    ((code >> (3 - plane)) & 1) as u64
}

/// The value the first `t` planes of `code` decode to: `(p - 2^(t-1) + 1/2) * Δ * 2^(4-t)` with
/// `p = code >> (4 - t)`, the `t`-bit mid-rise quantiser; 0 when `t = 0` (channel not read).
pub fn decode_prefix(code: u8, t: u8, delta: f64) -> f64 {
    assert!(code < 16 && t <= 4, "code {code} or depth {t} out of range");
    if t == 0 {
        return 0.0;
    }
    let p = (code >> (4 - t)) as f64;
    let half_range = (1u32 << (t - 1)) as f64;
    (p - half_range + 0.5) * delta * (1u32 << (4 - t)) as f64
}

/// One block encoded: `codes[token * D + channel]` and the fp16 scales per channel.
#[derive(Clone, Debug, PartialEq)]
pub struct EncodedBlock {
    pub codes: Vec<u8>,
    pub scales: Vec<f16>,
}

/// Encodes one block of `keys` (token-major, `BLK * D` values) whose first token is
/// `first_token` of head `id` (for error messages).
pub fn encode_block(
    keys: &[bf16],
    head_dim: usize,
    id: HeadId,
    first_token: usize,
) -> Result<EncodedBlock, EncodeError> {
    // A zero head dimension has no whole keys (and would divide by zero below).
    if head_dim == 0 || !keys.len().is_multiple_of(head_dim) {
        return Err(EncodeError::Shape {
            values: keys.len(),
            head_dim,
        });
    }
    check_finite(keys, head_dim, id, first_token)?;
    let tokens = keys.len() / head_dim;
    let mut scales = Vec::with_capacity(head_dim);
    for c in 0..head_dim {
        let max_abs = (0..tokens)
            .map(|i| keys[i * head_dim + c].to_f64().abs())
            .fold(0.0, f64::max);
        let delta = block_scale(max_abs).ok_or(EncodeError::ScaleOverflow {
            layer: id.layer,
            kv_head: id.kv_head,
            token: first_token,
            channel: c,
            max_abs,
            limit: MAX_ENCODABLE_ABS,
        })?;
        scales.push(delta);
    }
    let codes = keys
        .iter()
        .enumerate()
        .map(|(i, x)| quantise(x.to_f64(), scales[i % head_dim]))
        .collect();
    Ok(EncodedBlock { codes, scales })
}

fn check_finite(
    keys: &[bf16],
    head_dim: usize,
    id: HeadId,
    first_token: usize,
) -> Result<(), EncodeError> {
    match keys.iter().position(|x| !x.is_finite()) {
        None => Ok(()),
        Some(i) => Err(EncodeError::NonFiniteKey {
            layer: id.layer,
            kv_head: id.kv_head,
            token: first_token + i / head_dim,
            channel: i % head_dim,
            value: keys[i].to_f32(),
        }),
    }
}

/// One segment: `S` words per plane per channel and its scales. Words and scales of blocks not
/// yet filled are zero.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub words: Vec<u64>,
    /// fp16 scales, as their bits, so that stores compare byte for byte.
    pub scales: Vec<u16>,
}

impl Segment {
    fn zeroed(layout: &StoreLayout) -> Self {
        Segment {
            words: vec![0; layout.words_len()],
            scales: vec![0; layout.scales_len()],
        }
    }
}

/// The store of one KV head of one layer of one sequence: full blocks encoded into segments,
/// the tail (fewer than `BLK` tokens) kept in bf16.
#[derive(Clone, Debug)]
pub struct HeadStore {
    layout: StoreLayout,
    id: HeadId,
    segments: Vec<Segment>,
    stored_tokens: usize,
    tail: Vec<bf16>,
}

impl HeadStore {
    pub fn new(layout: StoreLayout, id: HeadId) -> Self {
        HeadStore {
            layout,
            id,
            segments: Vec::new(),
            stored_tokens: 0,
            tail: Vec::new(),
        }
    }

    /// A store holding `keys` (token-major, `n * D` values).
    pub fn from_keys(layout: StoreLayout, id: HeadId, keys: &[bf16]) -> Result<Self, EncodeError> {
        let mut store = HeadStore::new(layout, id);
        store.append(keys)?;
        Ok(store)
    }

    pub fn layout(&self) -> &StoreLayout {
        &self.layout
    }

    pub fn id(&self) -> HeadId {
        self.id
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Tokens encoded into the store (a whole number of blocks).
    pub fn stored_tokens(&self) -> usize {
        self.stored_tokens
    }

    /// The bf16 keys of the tail, token-major.
    pub fn tail(&self) -> &[bf16] {
        &self.tail
    }

    pub fn tail_tokens(&self) -> usize {
        self.tail.len() / self.layout.head_dim()
    }

    /// Stored plus tail tokens.
    pub fn total_tokens(&self) -> usize {
        self.stored_tokens + self.tail_tokens()
    }

    /// Appends keys (token-major): they join the tail, and every block the tail fills is encoded
    /// into the store, growing segments as needed. On error nothing is changed.
    pub fn append(&mut self, keys: &[bf16]) -> Result<(), EncodeError> {
        let d = self.layout.head_dim();
        if !keys.len().is_multiple_of(d) {
            return Err(EncodeError::Shape {
                values: keys.len(),
                head_dim: d,
            });
        }
        check_finite(keys, d, self.id, self.total_tokens())?;
        let blk = self.layout.block().tokens();
        let mut pending = self.tail.clone();
        pending.extend_from_slice(keys);
        let full_blocks = pending.len() / (blk * d);
        // Encode every block before touching the store, so an overflow leaves it unchanged.
        let encoded = (0..full_blocks)
            .map(|b| {
                let block = &pending[b * blk * d..(b + 1) * blk * d];
                encode_block(block, d, self.id, self.stored_tokens + b * blk)
            })
            .collect::<Result<Vec<_>, _>>()?;
        for block in &encoded {
            self.write_block(block);
        }
        self.tail = pending[full_blocks * blk * d..].to_vec();
        Ok(())
    }

    fn write_block(&mut self, block: &EncodedBlock) {
        let layout = self.layout;
        let blk = layout.block().tokens();
        let seg_tokens = layout.segment_tokens();
        let seg = self.stored_tokens / seg_tokens;
        if seg == self.segments.len() {
            self.segments.push(Segment::zeroed(&layout));
        }
        let first = self.stored_tokens % seg_tokens;
        let segment = &mut self.segments[seg];
        for c in 0..layout.head_dim() {
            segment.scales[layout.scale_index(c, first / blk)] = block.scales[c].to_bits();
            for i in 0..blk {
                let token = first + i;
                let code = block.codes[i * layout.head_dim() + c];
                for b in 0..PLANES {
                    let w = layout.word_index(c, b, token / WORD_TOKENS);
                    segment.words[w] |= plane_bit(code, b) << (token % WORD_TOKENS);
                }
            }
        }
        self.stored_tokens += blk;
    }

    fn locate(&self, token: usize) -> (&Segment, usize) {
        assert!(
            token < self.stored_tokens,
            "token {token} is not stored (stored: {})",
            self.stored_tokens
        );
        let seg_tokens = self.layout.segment_tokens();
        (&self.segments[token / seg_tokens], token % seg_tokens)
    }

    /// The 4-bit code of a stored token, read back from its four planes.
    pub fn code(&self, token: usize, channel: usize) -> u8 {
        let (segment, t) = self.locate(token);
        (0..PLANES).fold(0u8, |code, b| {
            let word = segment.words[self.layout.word_index(channel, b, t / WORD_TOKENS)];
            (code << 1) | ((word >> (t % WORD_TOKENS)) & 1) as u8
        })
    }

    /// The fp16 scale `Δ` of the block a stored token belongs to.
    pub fn scale(&self, token: usize, channel: usize) -> f16 {
        let (segment, t) = self.locate(token);
        let index = self
            .layout
            .scale_index(channel, t / self.layout.block().tokens());
        f16::from_bits(segment.scales[index])
    }

    /// The value of a stored token's channel read at depth `t` (§2).
    pub fn decode(&self, token: usize, channel: usize, t: u8) -> f64 {
        decode_prefix(
            self.code(token, channel),
            t,
            self.scale(token, channel).to_f64(),
        )
    }

    /// The uncalibrated stand-in for the channel variance (§3): the mean over stored blocks of
    /// `Δ[j][c]²`. All zeros when nothing is stored.
    pub fn mean_square_scale(&self) -> Vec<f64> {
        let d = self.layout.head_dim();
        let blk = self.layout.block().tokens();
        let blocks = self.stored_tokens / blk;
        let mut sum = vec![0.0; d];
        for j in 0..blocks {
            for (c, s) in sum.iter_mut().enumerate() {
                *s += self.scale(j * blk, c).to_f64().powi(2);
            }
        }
        if blocks > 0 {
            sum.iter_mut().for_each(|s| *s /= blocks as f64);
        }
        sum
    }
}

#[cfg(test)]
mod tests;
