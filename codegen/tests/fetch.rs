//! The fetch family: names, validation, rendering.

mod family_checks;

use codegen::render::{render, RenderError};
use codegen::spec::fetch::FetchSpec;
use codegen::spec::{Family, Placement};
use family_checks::{
    assert_compiles, assert_every_field_in_name, assert_names_injective, assert_renders,
};
use serde_json::json;

fn base() -> FetchSpec {
    FetchSpec {
        head_dim: 128,
        group: 4,
        threads: 256,
        placement: Placement::Host,
    }
}

fn grid() -> Vec<FetchSpec> {
    let mut specs = Vec::new();
    for head_dim in [64, 128, 256] {
        for group in 1..=8 {
            for threads in [32, 128, 1024] {
                for placement in [Placement::Hbm, Placement::Host] {
                    specs.push(FetchSpec {
                        head_dim,
                        group,
                        threads,
                        placement,
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
            ("head_dim", json!(64)),
            ("group", json!(7)),
            ("threads", json!(1024)),
            ("placement", json!("hbm")),
        ],
    );
    assert_eq!(base().kernel_name(), "fathom_fetch_d128_g4_t256_host");
}

#[test]
fn names_are_injective() {
    assert_names_injective(&grid());
}

#[test]
fn bad_fields_are_named() {
    let cases = [
        (
            FetchSpec {
                head_dim: 0,
                ..base()
            },
            "head_dim",
        ),
        (FetchSpec { group: 9, ..base() }, "group"),
        (
            FetchSpec {
                threads: 1056,
                ..base()
            },
            "threads",
        ),
    ];
    for (spec, field) in cases {
        let err = spec.validate().unwrap_err();
        assert_eq!((err.family, err.field), ("fetch", field));
        assert!(matches!(render(&spec), Err(RenderError::Spec(_))));
    }
}

#[test]
fn every_spec_of_the_grid_renders() {
    for spec in grid() {
        assert_renders(&spec, &[spec.kernel_name()]);
    }
}

#[test]
fn launch_covers_a_full_union() {
    // D = 128, 8 warps, one row pair per warp, 4 in flight (host): 32 rows per block.
    let launch = base().launch(2, 8, 512).unwrap();
    assert_eq!(launch.grid, [(4 * 512 + 36u32).div_ceil(32), 8, 2]);
    assert_eq!(base().launch(1, 70_000, 512).unwrap_err().field, "kv_heads");
}

#[test]
fn a_sampled_grid_compiles_without_warnings() {
    for head_dim in [64, 128, 256] {
        for placement in [Placement::Hbm, Placement::Host] {
            for (group, threads) in [(7, 256), (8, 1024)] {
                let spec = FetchSpec {
                    head_dim,
                    group,
                    threads,
                    placement,
                };
                assert_compiles(&spec, &[spec.kernel_name()]);
            }
        }
    }
}
