//! The mapped_read family (the ceilings probe): names, validation, rendering, compilation.

#[allow(dead_code)] // the shared checks another family uses (grid4)
mod family_checks;

use codegen::spec::{Family, MappedReadSpec};
use family_checks::{assert_compiles, assert_renders};
use serde_json::json;

fn grid() -> Vec<MappedReadSpec> {
    let mut specs = Vec::new();
    for loads_in_flight in [1, 2, 4, 8, 16] {
        for threads in [32, 128, 256, 1024] {
            specs.push(MappedReadSpec {
                loads_in_flight,
                threads,
            });
        }
    }
    specs
}

family_checks::family_tests! {
    base: MappedReadSpec::default(),
    grid: grid(),
    alternatives: [("loads_in_flight", json!(8)), ("threads", json!(512))],
    bad_fields: [
        ("loads_in_flight", json!(0)),
        ("loads_in_flight", json!(17)),
        ("threads", json!(100)),
    ],
}

#[test]
fn the_name_spells_the_fields() {
    assert_eq!(
        MappedReadSpec::default().kernel_name(),
        "fathom_mapped_read_l4_t256"
    );
}

#[test]
fn the_default_source_is_the_snapshot() {
    let spec = MappedReadSpec::default();
    let source = assert_renders(&spec, &[spec.kernel_name()]);
    insta::assert_snapshot!(format!("cuda-{}", spec.kernel_name()), source);
}

#[test]
fn a_sampled_grid_compiles_without_warnings() {
    for spec in [
        MappedReadSpec::default(),
        MappedReadSpec {
            loads_in_flight: 1,
            threads: 1024,
        },
    ] {
        assert_compiles(&spec, &[spec.kernel_name()]);
    }
}
