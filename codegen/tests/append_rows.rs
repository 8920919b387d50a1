//! The append_rows family (a decode step's new K and V rows): names, validation, rendering,
//! compilation, launch.

#[allow(dead_code)] // the shared checks another family uses (grid4)
mod family_checks;

use codegen::spec::{AppendRowsSpec, Family, KvRows};
use family_checks::{assert_compiles, assert_renders};
use serde_json::json;

fn grid() -> Vec<AppendRowsSpec> {
    [32, 64, 128, 256, 1024]
        .into_iter()
        .flat_map(|threads| KvRows::ALL.map(|kv_rows| AppendRowsSpec { threads, kv_rows }))
        .collect()
}

family_checks::family_tests! {
    base: AppendRowsSpec::default(),
    grid: grid(),
    alternatives: [("threads", json!(256)), ("kv_rows", json!("adjacent"))],
    bad_fields: [("threads", json!(0)), ("threads", json!(2048))],
}

#[test]
fn the_name_spells_the_fields() {
    assert_eq!(
        AppendRowsSpec::default().kernel_name(),
        "fathom_append_rows_t128"
    );
    let adjacent = AppendRowsSpec {
        kv_rows: KvRows::Adjacent,
        ..AppendRowsSpec::default()
    };
    assert_eq!(adjacent.kernel_name(), "fathom_append_rows_t128_kvadj");
}

#[test]
fn the_default_source_is_the_snapshot() {
    let spec = AppendRowsSpec::default();
    let source = assert_renders(&spec, &[spec.kernel_name()]);
    insta::assert_snapshot!(format!("cuda-{}", spec.kernel_name()), source);
}

#[test]
fn a_sampled_grid_compiles_without_warnings() {
    let adjacent = AppendRowsSpec {
        kv_rows: KvRows::Adjacent,
        ..AppendRowsSpec::default()
    };
    let wide = AppendRowsSpec {
        threads: 1024,
        ..AppendRowsSpec::default()
    };
    for spec in [AppendRowsSpec::default(), wide, adjacent] {
        assert_compiles(&spec, &[spec.kernel_name()]);
    }
}

#[test]
fn one_block_per_sequence_and_head() {
    let launch = AppendRowsSpec::default().launch(3, 8).unwrap();
    assert_eq!((launch.grid, launch.block), ([24, 1, 1], [128, 1, 1]));
    assert_eq!(
        AppendRowsSpec::default().launch(0, 8).unwrap_err().field,
        "batch * kv_heads"
    );
}
