//! The attention family: names, validation, rendering.

mod family_checks;

use codegen::render::{render, RenderError};
use codegen::spec::attention::AttentionSpec;
use codegen::spec::Family;
use family_checks::{
    assert_compiles, assert_every_field_in_name, assert_names_injective, assert_renders,
};
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
    let mut specs = Vec::new();
    for head_dim in [64, 128, 256] {
        for group in 1..=8 {
            for threads in [32, 256, 1024] {
                for rows_per_warp in [1, 4, 8] {
                    specs.push(AttentionSpec {
                        head_dim,
                        group,
                        threads,
                        rows_per_warp,
                    });
                }
            }
        }
    }
    specs
}

#[test]
fn every_field_is_in_the_name() {
    assert_every_field_in_name(
        &base(),
        &[
            ("head_dim", json!(256)),
            ("group", json!(7)),
            ("threads", json!(128)),
            ("rows_per_warp", json!(2)),
        ],
    );
    assert_eq!(base().kernel_name(), "fathom_attention_d128_g4_t256_r4");
}

#[test]
fn names_are_injective() {
    assert_names_injective(&grid());
}

#[test]
fn bad_fields_are_named() {
    let cases = [
        (
            AttentionSpec {
                head_dim: 512,
                ..base()
            },
            "head_dim",
        ),
        (AttentionSpec { group: 0, ..base() }, "group"),
        (
            AttentionSpec {
                threads: 16,
                ..base()
            },
            "threads",
        ),
        (
            AttentionSpec {
                rows_per_warp: 0,
                ..base()
            },
            "rows_per_warp",
        ),
        (
            AttentionSpec {
                rows_per_warp: 9,
                ..base()
            },
            "rows_per_warp",
        ),
    ];
    for (spec, field) in cases {
        let err = spec.validate().unwrap_err();
        assert_eq!((err.family, err.field), ("attention", field));
        assert!(matches!(render(&spec), Err(RenderError::Spec(_))));
    }
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
    for head_dim in [64, 128, 256] {
        for (group, threads, rows_per_warp) in [(7, 256, 4), (1, 32, 1), (8, 1024, 8)] {
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
