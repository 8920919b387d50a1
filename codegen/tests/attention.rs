//! The attention family: names, validation, rendering.

mod family_checks;

use codegen::spec::attention::AttentionSpec;
use codegen::spec::Family;
use family_checks::{assert_compiles, assert_renders, grid4};
use serde_json::json;

fn base() -> AttentionSpec {
    AttentionSpec {
        head_dim: 128,
        group: 4,
        threads: 256,
        rows_per_warp: 4,
    }
}

fn grid() -> Vec<AttentionSpec> {
    grid4(
        &[64, 80, 96, 128, 192, 256],
        &[1, 2, 3, 4, 5, 6, 7, 8, 16],
        &[32, 256, 1024],
        &[1, 4, 8],
        |head_dim, group, threads, rows_per_warp| AttentionSpec {
            head_dim,
            group,
            threads,
            rows_per_warp,
        },
    )
}

family_checks::family_tests! {
    base: base(),
    grid: grid(),
    alternatives: [
        ("head_dim", json!(256)),
        ("group", json!(7)),
        ("threads", json!(128)),
        ("rows_per_warp", json!(2)),
    ],
    bad_fields: [
        ("head_dim", json!(512)),
        ("head_dim", json!(72)),
        ("group", json!(0)),
        ("group", json!(17)),
        ("threads", json!(16)),
        ("rows_per_warp", json!(0)),
        ("rows_per_warp", json!(9)),
    ],
}

#[test]
fn the_name_spells_the_fields() {
    assert_eq!(base().kernel_name(), "fathom_attention_d128_g4_t256_r4");
}

#[test]
fn every_spec_of_the_grid_renders_within_static_shared_memory() {
    for spec in grid() {
        assert_renders(&spec, &[spec.kernel_name()]);
        assert!(
            spec.static_shared_bytes() <= 48 * 1024,
            "{}",
            spec.kernel_name()
        );
    }
}

#[test]
fn one_block_per_query_head() {
    let launch = base().launch(4, 8).unwrap();
    assert_eq!(launch.grid, [4 * 8 * 4, 1, 1]);
    assert_eq!(launch.block, [256, 1, 1]);
    assert!(base().launch(0, 8).is_err());
}

#[test]
fn a_sampled_grid_compiles_without_warnings() {
    for head_dim in [64, 80, 96, 128, 192, 256] {
        for (group, threads, rows_per_warp) in [(7, 256, 4), (1, 32, 1), (16, 1024, 8)] {
            let spec = AttentionSpec {
                head_dim,
                group,
                threads,
                rows_per_warp,
            };
            assert_compiles(&spec, &[spec.kernel_name()]);
        }
    }
}
