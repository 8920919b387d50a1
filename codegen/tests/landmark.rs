//! The landmark family: names, validation, rendering of both entry points.

mod family_checks;
mod row_checks;

use codegen::spec::landmark::LandmarkSpec;
use codegen::spec::Placement;
use family_checks::{assert_compiles, assert_renders};
use row_checks::{row_alternatives, row_grid, row_samples};
use serde_json::json;

fn base() -> LandmarkSpec {
    LandmarkSpec::new(128, 4, 256, Placement::Hbm)
}

fn grid() -> Vec<LandmarkSpec> {
    row_grid(&[32, 256, 1024], LandmarkSpec::new)
}

family_checks::family_tests! {
    base: base(),
    grid: grid(),
    alternatives: row_alternatives(256, 7, 512, Placement::Host),
    bad_fields: [
        ("head_dim", json!(32)),
        ("group", json!(0)),
        ("group", json!(17)),
        ("threads", json!(48)),
    ],
}

#[test]
fn the_name_spells_the_fields() {
    assert_eq!(
        base().build_entry(),
        "fathom_landmark_d128_g4_t256_hbm_build"
    );
    assert_eq!(base().scan_entry(), "fathom_landmark_d128_g4_t256_hbm_scan");
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
    for spec in row_samples(&[(7, 256), (1, 32), (16, 1024)], LandmarkSpec::new) {
        assert_compiles(&spec, &[spec.build_entry(), spec.scan_entry()]);
    }
}
