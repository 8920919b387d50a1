//! The shapes the kernel tests sweep (SPEC §1), in one place so that every family is tested at
//! the same edges.

/// Every head dimension of §1. 80, 96 and 192 are not powers of two: a row's 10, 12 or 24
/// 16-byte units do not fill a power of two of lanes, 80 is not a multiple of 32 channels, and
/// ParisKV pads them to 128 and 256 for its transform.
pub const HEAD_DIMS: [u32; 6] = [64, 80, 96, 128, 192, 256];

/// Query groups: 1, a power of two, 7 (Qwen2.5-7B), 8, and 16 (GLM-4, Qwen3-235B), which has
/// more query heads than the 8 lanes of a 64-channel row.
pub const GROUPS: [u32; 5] = [1, 4, 7, 8, 16];
