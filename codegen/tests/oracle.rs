//! The oracle family: names, validation, rendering.

mod family_checks;
mod row_checks;

use codegen::spec::oracle::OracleSpec;
use codegen::spec::{Family, Placement};
use family_checks::{assert_compiles, assert_renders};
use row_checks::{row_alternatives, row_grid, row_samples};
use serde_json::json;

fn base() -> OracleSpec {
    OracleSpec::new(128, 4, 256, Placement::Hbm)
}

fn grid() -> Vec<OracleSpec> {
    row_grid(&[32, 128, 256, 1024], OracleSpec::new)
}

family_checks::family_tests! {
    base: base(),
    grid: grid(),
    alternatives: row_alternatives(64, 7, 128, Placement::Host),
    bad_fields: [
        ("head_dim", json!(72)),
        ("group", json!(0)),
        ("group", json!(17)),
        ("threads", json!(0)),
        ("threads", json!(100)),
        ("threads", json!(2048)),
    ],
}

#[test]
fn the_name_spells_the_fields() {
    assert_eq!(base().kernel_name(), "fathom_oracle_d128_g4_t256_hbm");
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
    for spec in row_samples(&[(7, 256), (16, 1024)], OracleSpec::new) {
        assert_compiles(&spec, &[spec.kernel_name()]);
    }
}
