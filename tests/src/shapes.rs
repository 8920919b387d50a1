//! The query groups the kernel tests sweep (SPEC §1), in one place so that every family is
//! tested at the same edges; the head dimensions are `codegen::spec::shape::HEAD_DIMS`.

use codegen::spec::shape::HEAD_DIMS;

/// Query groups: 1, a power of two, 7 (Qwen2.5-7B), 8, and 16 (GLM-4, Qwen3-235B), which has
/// more query heads than the 8 lanes of a 64-channel row.
pub const GROUPS: [u32; 5] = [1, 4, 7, 8, 16];

/// Every `(D, G)`: each head dimension of SPEC §1 with each of [`GROUPS`], `G` varying fastest.
pub fn head_dims_and_groups() -> impl Iterator<Item = (usize, usize)> {
    HEAD_DIMS
        .into_iter()
        .flat_map(|d| GROUPS.map(move |g| (d, g as usize)))
}
