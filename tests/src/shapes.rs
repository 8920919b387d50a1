//! The query groups the kernel tests sweep (SPEC §1), in one place so that every family is
//! tested at the same edges; the head dimensions are `codegen::spec::shape::HEAD_DIMS`.

/// Query groups: 1, a power of two, 7 (Qwen2.5-7B), 8, and 16 (GLM-4, Qwen3-235B), which has
/// more query heads than the 8 lanes of a 64-channel row.
pub const GROUPS: [u32; 5] = [1, 4, 7, 8, 16];
