//! SPEC §2: the shape of the bit-plane store, shared by the f64 reference, the runtime's store and
//! the kernels' specs: the scale block `BLK`, and a segment of `S` words per plane of `D`
//! channels.

use thiserror::Error;

use super::shape::{HEAD_DIMS, WORD_TOKENS};

/// Bit planes of the 4-bit code.
pub const PLANES: usize = 4;

/// Tokens that share one fp16 scale per channel (`BLK`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BlockSize {
    B32,
    B64,
    B128,
}

impl BlockSize {
    /// All valid block sizes, smallest first.
    pub const ALL: [BlockSize; 3] = [BlockSize::B32, BlockSize::B64, BlockSize::B128];

    /// Tokens in one block.
    pub const fn tokens(self) -> usize {
        match self {
            BlockSize::B32 => 32,
            BlockSize::B64 => 64,
            BlockSize::B128 => 128,
        }
    }

    /// Parses a block size given in tokens.
    pub fn from_tokens(tokens: usize) -> Result<Self, LayoutError> {
        match tokens {
            32 => Ok(BlockSize::B32),
            64 => Ok(BlockSize::B64),
            128 => Ok(BlockSize::B128),
            got => Err(LayoutError::BlockSize { got }),
        }
    }

    /// Bits per token that the fp16 scale of one active channel costs (§3: `16 / BLK`).
    pub fn scale_bits_per_token(self) -> f64 {
        16.0 / self.tokens() as f64
    }
}

/// A layout parameter outside what the store supports.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum LayoutError {
    #[error("head dimension {got} is not supported; allowed: 64, 80, 96, 128, 192 or 256")]
    HeadDim { got: usize },
    #[error("block size {got} is not supported; allowed: 32, 64 or 128 tokens")]
    BlockSize { got: usize },
    #[error(
        "segment of {got} words ({got} x 64 tokens) does not hold a whole number of \
         {block}-token blocks; use at least one word, and an even number of words for \
         128-token blocks"
    )]
    SegmentWords { got: usize, block: usize },
    #[error(
        "segment of {got} words is too large: its {head_dim}-channel plane words cannot be \
         counted; allowed: at most {max} words"
    )]
    SegmentTooLarge {
        got: usize,
        head_dim: usize,
        max: usize,
    },
}

/// The shape of one segment: head dimension `D`, block size `BLK` and `S` words per plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StoreLayout {
    head_dim: usize,
    block: BlockSize,
    segment_words: usize,
}

impl StoreLayout {
    /// Checks the head dimension and that a segment holds whole blocks.
    pub fn new(
        head_dim: usize,
        block: BlockSize,
        segment_words: usize,
    ) -> Result<Self, LayoutError> {
        if !HEAD_DIMS.contains(&head_dim) {
            return Err(LayoutError::HeadDim { got: head_dim });
        }
        // D * 4 >= 64 words per token-word, so this bound keeps every segment size (tokens,
        // words, scales) representable; a larger value would wrap and pass the check below.
        let max = usize::MAX / (head_dim * PLANES);
        if segment_words > max {
            return Err(LayoutError::SegmentTooLarge {
                got: segment_words,
                head_dim,
                max,
            });
        }
        if segment_words == 0 || !(segment_words * WORD_TOKENS).is_multiple_of(block.tokens()) {
            return Err(LayoutError::SegmentWords {
                got: segment_words,
                block: block.tokens(),
            });
        }
        Ok(StoreLayout {
            head_dim,
            block,
            segment_words,
        })
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    pub fn block(&self) -> BlockSize {
        self.block
    }

    /// `S`, the words of one plane of one channel in a segment.
    pub fn segment_words(&self) -> usize {
        self.segment_words
    }

    /// Tokens one segment holds, `64 * S`.
    pub fn segment_tokens(&self) -> usize {
        self.segment_words * WORD_TOKENS
    }

    /// Scale blocks per channel in one segment.
    pub fn scales_per_channel(&self) -> usize {
        self.segment_tokens() / self.block.tokens()
    }

    /// Length of a segment's `words`, `D * 4 * S`.
    pub fn words_len(&self) -> usize {
        self.head_dim * PLANES * self.segment_words
    }

    /// Length of a segment's `scales`.
    pub fn scales_len(&self) -> usize {
        self.head_dim * self.scales_per_channel()
    }

    /// Index into `words` of plane `plane` of channel `channel`, word `word`:
    /// `(channel * 4 + plane) * S + word`.
    pub fn word_index(&self, channel: usize, plane: usize, word: usize) -> usize {
        (channel * PLANES + plane) * self.segment_words + word
    }

    /// Index into `scales` of channel `channel`, block `block` of the segment.
    pub fn scale_index(&self, channel: usize, block: usize) -> usize {
        channel * self.scales_per_channel() + block
    }
}
