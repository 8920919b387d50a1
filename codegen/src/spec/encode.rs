//! The `encode` family (§2): bf16 keys into bit planes and fp16 block scales.
//!
//! One thread block encodes one *chunk* of one KV head of one sequence: `max(BLK, 64)` tokens
//! aligned to the chunk size, so that a plane word is only ever written by one thread block of a
//! launch (with `BLK = 32` two blocks share a word and are merged into it).

use super::shape::{self, LaunchDims};
use super::{Family, KvRows, SpecError};
use serde::{Deserialize, Serialize};

/// Where the tokens to encode come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EncodeMode {
    /// Prefill: tokens `first_token[b] .. first_token[b] + n_tokens[b]` of every sequence, many
    /// blocks per head.
    Bulk,
    /// Decode: at most one block per sequence, the one starting at `n_stored[b]`, when the
    /// sequence has a full block beyond its store (`n_total[b] - n_stored[b] >= BLK`).
    Append,
}

impl EncodeMode {
    fn as_str(self) -> &'static str {
        match self {
            EncodeMode::Bulk => "bulk",
            EncodeMode::Append => "append",
        }
    }
}

/// An encode kernel.
///
/// Parameters, in order:
///
/// ```text
/// const unsigned short* const* k_rows,   // [(b*H + h)] -> bf16 keys [capacity][D], raw basis
///                                        //   (key rows 2*D apart with `kv_rows: adjacent`)
/// const float* rot,                      // [H][D][D], R[i*D + j] = component i of basis vector j
///                                        //   (read only when `rotate`; may be null otherwise)
/// unsigned long long* const* seg_words,  // [(b*H + h)*max_seg + s] -> segment words (§2)
/// unsigned short* const* seg_scales,     // [(b*H + h)*max_seg + s] -> segment scales
/// int max_seg,
/// const int* range_a,                    // bulk: first_token[b]; append: n_stored[b]
/// const int* range_b,                    // bulk: n_tokens[b];    append: n_total[b]
/// int n_heads,                           // H
/// int* status                            // [5]: {kind, b, h, token, channel}; 0 = ok
/// ```
///
/// `status[0]` kinds: 1 non-finite key (token and raw channel), 2 scale overflow (the block's
/// first token, store channel), 3 segment beyond `max_seg` (the block's first token). The first
/// failure to be recorded wins; a thread block that fails writes none of its chunk, other
/// chunks are written. The kernel never changes `n_stored`: the caller advances it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EncodeSpec {
    /// `D`.
    pub head_dim: usize,
    /// `BLK`, tokens per scale block.
    pub block: usize,
    /// `S`, words per plane per segment.
    pub segment_words: usize,
    /// Bulk (prefill) or one-block append (decode).
    pub mode: EncodeMode,
    /// Rotate keys into the KLT basis on the fly (§5): `k' = bf16(Rᵀk)`.
    pub rotate: bool,
    /// Threads per thread block.
    pub threads: usize,
    /// How the key rows are laid out ([`KvRows`]: key rows `D` or `2*D` elements apart; absent
    /// from a serialised spec: separate).
    #[serde(default)]
    pub kv_rows: KvRows,
}

impl EncodeSpec {
    /// The default encode kernel of a shape.
    pub fn new(head_dim: usize, mode: EncodeMode, rotate: bool) -> Self {
        EncodeSpec {
            head_dim,
            block: 64,
            segment_words: 512,
            mode,
            rotate,
            threads: 256,
            kv_rows: KvRows::Separate,
        }
    }

    /// Tokens one thread block encodes: a whole word (64) or a whole block, whichever is larger.
    pub fn chunk_tokens(&self) -> usize {
        self.block.max(shape::WORD_TOKENS)
    }

    /// Grid and block of a launch over `batch` sequences of `heads` KV heads; in bulk mode
    /// `max_tokens` bounds `n_tokens[b]` (it is ignored in append mode).
    pub fn launch_dims(&self, batch: usize, heads: usize, max_tokens: usize) -> LaunchDims {
        let chunks = match self.mode {
            // A range that starts mid-chunk (BLK = 32) touches one chunk more.
            EncodeMode::Bulk => {
                (max_tokens + self.chunk_tokens() - self.block).div_ceil(self.chunk_tokens())
            }
            EncodeMode::Append => 1,
        };
        (
            (
                shape::dim(chunks.max(1)),
                shape::dim(heads),
                shape::dim(batch),
            ),
            (shape::dim(self.threads), 1, 1),
            0,
        )
    }
}

impl Family for EncodeSpec {
    const FAMILY: &'static str = "encode";

    fn validate(&self) -> Result<(), SpecError> {
        let EncodeSpec {
            head_dim,
            block,
            segment_words,
            mode: _,
            rotate: _,
            threads,
            kv_rows: _,
        } = *self;
        shape::check_head_dim(Self::FAMILY, head_dim)?;
        shape::check_block(Self::FAMILY, block)?;
        shape::check_segment_words(Self::FAMILY, segment_words, block, false)?;
        shape::check_threads(Self::FAMILY, threads)
    }

    fn kernel_name(&self) -> String {
        // Destructured so that a new field cannot be left out of the name.
        let EncodeSpec {
            head_dim,
            block,
            segment_words,
            mode,
            rotate,
            threads,
            kv_rows,
        } = *self;
        format!(
            "fathom_encode_d{head_dim}_b{block}_s{segment_words}_{}_{}_t{threads}{}",
            mode.as_str(),
            if rotate { "rot" } else { "raw" },
            kv_rows.name_suffix()
        )
    }

    fn context(&self) -> tera::Context {
        let mut c = tera::Context::new();
        c.insert("head_dim", &self.head_dim);
        c.insert("block", &self.block);
        c.insert("segment_words", &self.segment_words);
        c.insert("append", &(self.mode == EncodeMode::Append));
        c.insert("rotate", &self.rotate);
        c.insert("threads", &self.threads);
        c.insert("chunk_tokens", &self.chunk_tokens());
        self.kv_rows.insert_context(&mut c);
        c
    }
}
