//! The landmark family: names, validation, rendering of both entry points.

mod family_checks;

use codegen::render::{render, RenderError};
use codegen::spec::landmark::LandmarkSpec;
use codegen::spec::{Family, Placement};
use family_checks::{
    assert_compiles, assert_every_field_in_name, assert_names_injective, assert_renders,
};
use serde_json::json;

fn base() -> LandmarkSpec {
    LandmarkSpec {
        head_dim: 128,
        group: 4,
        threads: 256,
        placement: Placement::Hbm,
    }
}

fn grid() -> Vec<LandmarkSpec> {
    let mut specs = Vec::new();
    for head_dim in [64, 128, 256] {
        for group in 1..=8 {
            for threads in [32, 256, 1024] {
                for placement in [Placement::Hbm, Placement::Host] {
                    specs.push(LandmarkSpec {
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
            ("head_dim", json!(256)),
            ("group", json!(7)),
            ("threads", json!(512)),
            ("placement", json!("host")),
        ],
    );
    assert_eq!(
        base().build_entry(),
        "fathom_landmark_d128_g4_t256_hbm_build"
    );
    assert_eq!(base().scan_entry(), "fathom_landmark_d128_g4_t256_hbm_scan");
}

#[test]
fn names_are_injective() {
    assert_names_injective(&grid());
}

#[test]
fn bad_fields_are_named() {
    let cases = [
        (
            LandmarkSpec {
                head_dim: 32,
                ..base()
            },
            "head_dim",
        ),
        (LandmarkSpec { group: 0, ..base() }, "group"),
        (
            LandmarkSpec {
                group: 16,
                ..base()
            },
            "group",
        ),
        (
            LandmarkSpec {
                threads: 48,
                ..base()
            },
            "threads",
        ),
    ];
    for (spec, field) in cases {
        let err = spec.validate().unwrap_err();
        assert_eq!((err.family, err.field), ("landmark", field));
        assert!(matches!(render(&spec), Err(RenderError::Spec(_))));
    }
}

#[test]
fn every_spec_of_the_grid_renders_both_entries() {
    for spec in grid() {
        assert_renders(&spec, &[spec.build_entry(), spec.scan_entry()]);
    }
}

#[test]
fn launches_scale_with_the_context() {
    let spec = base();
    let small = spec.launch_scan(1, 8, 4096).unwrap();
    let large = spec.launch_scan(1, 8, 1 << 20).unwrap();
    assert!(large.grid[0] > small.grid[0]);
    assert_eq!(large.grid[1..], [8, 1]);
    // One thread per (group, 8 channels): 1M tokens at D = 128 is 2M threads.
    let build = spec.launch_build(2, 8, 1 << 20).unwrap();
    assert_eq!(u64::from(build.grid[0]) * 256, (1 << 20) / 8 * 16);
    assert_eq!(spec.launch_build(0, 8, 64).unwrap_err().field, "batch");
}

#[test]
fn a_sampled_grid_compiles_without_warnings() {
    for head_dim in [64, 128, 256] {
        for placement in [Placement::Hbm, Placement::Host] {
            for (group, threads) in [(7, 256), (1, 32)] {
                let spec = LandmarkSpec {
                    head_dim,
                    group,
                    threads,
                    placement,
                };
                assert_compiles(&spec, &[spec.build_entry(), spec.scan_entry()]);
            }
        }
    }
}
