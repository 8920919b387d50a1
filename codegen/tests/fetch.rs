//! The fetch family: names, validation, rendering.

mod family_checks;
mod row_checks;

use codegen::spec::fetch::FetchSpec;
use codegen::spec::{Family, Placement};
use family_checks::{assert_compiles, assert_renders};
use row_checks::{row_alternatives, row_grid, row_samples};
use serde_json::json;

fn base() -> FetchSpec {
    FetchSpec::new(128, 4, 256, Placement::Host)
}

fn grid() -> Vec<FetchSpec> {
    row_grid(&[32, 128, 1024], FetchSpec::new)
}

family_checks::family_tests! {
    base: base(),
    grid: grid(),
    alternatives: row_alternatives(64, 7, 1024, Placement::Hbm),
    bad_fields: [
        ("head_dim", json!(0)),
        ("head_dim", json!(72)),
        ("group", json!(17)),
        ("threads", json!(1056)),
    ],
}

#[test]
fn the_name_spells_the_fields() {
    assert_eq!(base().kernel_name(), "fathom_fetch_d128_g4_t256_host");
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
    for spec in row_samples(&[(7, 256), (16, 1024)], FetchSpec::new) {
        assert_compiles(&spec, &[spec.kernel_name()]);
    }
}
