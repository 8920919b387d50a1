//! Checks and derived sizes shared by the store-reading families (encode, plan, gather, scan).
//!
//! They all agree on the §2 segment shape: head dimension `D`, scale block `BLK`, `S` words per
//! plane per segment, and so `SPC = 64*S/BLK` scales per channel per segment.

use super::{checks, SpecError};

/// Tokens packed into one plane word (§2).
pub const WORD_TOKENS: usize = 64;
/// Head dimensions the kernels are specialised for.
pub const HEAD_DIMS: [usize; 6] = [64, 80, 96, 128, 192, 256];
/// Scale block sizes, in tokens.
pub const BLOCKS: [usize; 3] = [32, 64, 128];
/// The largest query group (§1).
pub const MAX_GROUP: usize = 16;

pub(crate) fn check_head_dim(family: &'static str, head_dim: usize) -> Result<(), SpecError> {
    checks::head_dim_allowing(family, head_dim as u64, checks::HEAD_DIMS_ALLOWED)
}

pub(crate) fn check_group(family: &'static str, group: usize) -> Result<(), SpecError> {
    if (1..=MAX_GROUP).contains(&group) {
        Ok(())
    } else {
        Err(SpecError::new(
            family,
            "group",
            group,
            "1 to 16 query heads per KV head",
        ))
    }
}

pub(crate) fn check_block(family: &'static str, block: usize) -> Result<(), SpecError> {
    if BLOCKS.contains(&block) {
        Ok(())
    } else {
        Err(SpecError::new(
            family,
            "block",
            block,
            "32, 64 or 128 tokens",
        ))
    }
}

/// The largest `S`: the templates count a segment's words and tokens in C `int`s, and the
/// words of one segment of the widest head, `256 · 4 · S`, must fit one.
pub const MAX_SEGMENT_WORDS: usize = i32::MAX as usize / (256 * 4);

/// A segment must hold whole scale blocks and at most [`MAX_SEGMENT_WORDS`] words; `even` also
/// asks for an even word count, which the 16-byte (two-word) loads of gather and scan need.
pub(crate) fn check_segment_words(
    family: &'static str,
    segment_words: usize,
    block: usize,
    even: bool,
) -> Result<(), SpecError> {
    // The upper bound comes first so that `S * 64` cannot overflow.
    let whole_blocks = (1..=MAX_SEGMENT_WORDS).contains(&segment_words)
        && (segment_words * WORD_TOKENS).is_multiple_of(block);
    if !whole_blocks || (even && !segment_words.is_multiple_of(2)) {
        let allowed = if even {
            format!("an even number of words from 2 to {MAX_SEGMENT_WORDS}")
        } else {
            format!("1 to {MAX_SEGMENT_WORDS} words holding whole {block}-token blocks")
        };
        return Err(SpecError::new(
            family,
            "segment_words",
            segment_words,
            allowed,
        ));
    }
    Ok(())
}

pub(crate) fn check_threads(family: &'static str, threads: usize) -> Result<(), SpecError> {
    if (32..=1024).contains(&threads) && threads.is_multiple_of(32) {
        Ok(())
    } else {
        Err(SpecError::new(
            family,
            "threads",
            threads,
            "a multiple of 32 from 32 to 1024",
        ))
    }
}

/// `SPC`, the scale blocks per channel in one segment.
pub fn scales_per_channel(segment_words: usize, block: usize) -> usize {
    segment_words * WORD_TOKENS / block
}

/// A launch shape: grid, block and dynamic shared bytes, as `cuLaunchKernel` takes them.
pub type LaunchDims = ((u32, u32, u32), (u32, u32, u32), u32);

/// Converts a grid extent computed in `usize` for a launch; extents beyond `u32` are a caller
/// error the driver would reject anyway, so saturate and let the launch fail loudly.
pub(crate) fn dim(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
