//! The oracle family: names, validation, rendering.

mod family_checks;

use codegen::render::{render, RenderError};
use codegen::spec::oracle::OracleSpec;
use codegen::spec::{Family, Placement};
use family_checks::{
    assert_compiles, assert_every_field_in_name, assert_names_injective, assert_renders,
};
use serde_json::json;

fn base() -> OracleSpec {
    OracleSpec {
        head_dim: 128,
        group: 4,
        threads: 256,
        placement: Placement::Hbm,
    }
}

fn grid() -> Vec<OracleSpec> {
    let mut specs = Vec::new();
    for head_dim in [64, 128, 256] {
        for group in 1..=8 {
            for threads in [32, 128, 256, 1024] {
                for placement in [Placement::Hbm, Placement::Host] {
                    specs.push(OracleSpec {
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
            ("threads", json!(128)),
            ("placement", json!("host")),
        ],
    );
    assert_eq!(base().kernel_name(), "fathom_oracle_d128_g4_t256_hbm");
}

#[test]
fn names_are_injective() {
    assert_names_injective(&grid());
}

#[test]
fn bad_fields_are_named() {
    let cases = [
        (
            OracleSpec {
                head_dim: 96,
                ..base()
            },
            "head_dim",
        ),
        (OracleSpec { group: 0, ..base() }, "group"),
        (OracleSpec { group: 9, ..base() }, "group"),
        (
            OracleSpec {
                threads: 0,
                ..base()
            },
            "threads",
        ),
        (
            OracleSpec {
                threads: 100,
                ..base()
            },
            "threads",
        ),
        (
            OracleSpec {
                threads: 2048,
                ..base()
            },
            "threads",
        ),
    ];
    for (spec, field) in cases {
        let err = spec.validate().unwrap_err();
        assert_eq!((err.family, err.field), ("oracle", field));
        assert!(matches!(render(&spec), Err(RenderError::Spec(_))));
    }
}

#[test]
fn every_spec_of_the_grid_renders() {
    for spec in grid() {
        let source = assert_renders(&spec, &[spec.kernel_name()]);
        let load = if spec.placement == Placement::Host {
            "__ldcs"
        } else {
            "__ldg"
        };
        assert!(source.contains(load), "{}", spec.kernel_name());
    }
}

#[test]
fn launch_covers_the_range() {
    let spec = base();
    let launch = spec.launch(4, 8, 1 << 20).unwrap();
    assert_eq!(launch.grid[1..], [8, 4]);
    assert_eq!(launch.block, [256, 1, 1]);
    assert!(launch.grid[0] > spec.launch(4, 8, 1 << 10).unwrap().grid[0]);
    assert_eq!(spec.launch(1, 1, 0).unwrap().grid[0], 1);
    assert_eq!(spec.launch(0, 8, 10).unwrap_err().field, "batch");
    assert_eq!(spec.launch(1, 0, 10).unwrap_err().field, "kv_heads");
}

#[test]
fn a_sampled_grid_compiles_without_warnings() {
    for head_dim in [64, 128, 256] {
        for placement in [Placement::Hbm, Placement::Host] {
            for (group, threads) in [(7, 256), (8, 1024)] {
                let spec = OracleSpec {
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
