//! Spec grids of the row families (oracle, landmark, fetch), whose specs have the same five
//! fields: `head_dim`, `group`, `threads`, `placement`, `kv_rows` (the grids keep the default
//! rows; `tests/kv_rows.rs` covers the adjacent ones).

use crate::family_checks::grid4;
use codegen::spec::shape::HEAD_DIMS;
use codegen::spec::Placement;
use serde_json::{json, Value};

/// Every supported query group.
const GROUPS: [u32; 16] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
/// Both placements.
const PLACEMENTS: [Placement; 2] = [Placement::Hbm, Placement::Host];

/// Every head dimension, group and placement, with each of `threads`.
pub fn row_grid<F>(threads: &[u32], spec: impl Fn(u32, u32, u32, Placement) -> F) -> Vec<F> {
    grid4(
        &HEAD_DIMS.map(|d| d as u32),
        &GROUPS,
        threads,
        &PLACEMENTS,
        spec,
    )
}

/// Every head dimension and placement, with each `(group, threads)` of `samples`: the sample
/// that is compiled.
pub fn row_samples<F>(
    samples: &[(u32, u32)],
    spec: impl Fn(u32, u32, u32, Placement) -> F,
) -> Vec<F> {
    grid4(
        &HEAD_DIMS.map(|d| d as u32),
        &PLACEMENTS,
        samples,
        &[()],
        |head_dim, placement, (group, threads), ()| spec(head_dim, group, threads, placement),
    )
}

/// One alternative value for each of the five fields (adjacent K/V rows for `kv_rows`), for
/// [`assert_every_field_in_name`](crate::family_checks::assert_every_field_in_name).
pub fn row_alternatives(
    head_dim: u32,
    group: u32,
    threads: u32,
    placement: Placement,
) -> [(&'static str, Value); 5] {
    [
        ("head_dim", json!(head_dim)),
        ("group", json!(group)),
        ("threads", json!(threads)),
        ("placement", json!(placement)),
        ("kv_rows", json!("adjacent")),
    ]
}
