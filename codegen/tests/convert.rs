//! The convert family (bf16 ↔ f32 of the foreign step): names, validation, rendering,
//! compilation.

#[allow(dead_code)] // the shared checks another family uses (grid4)
mod family_checks;

use codegen::spec::{ConvertSpec, Family};
use family_checks::{assert_compiles, assert_renders};
use serde_json::json;

fn entries(spec: &ConvertSpec) -> [String; 2] {
    [spec.to_f32_entry(), spec.to_bf16_entry()]
}

fn grid() -> Vec<ConvertSpec> {
    [32, 64, 128, 256, 512, 1024]
        .into_iter()
        .map(|threads| ConvertSpec { threads })
        .collect()
}

family_checks::family_tests! {
    base: ConvertSpec::default(),
    grid: grid(),
    alternatives: [("threads", json!(512))],
    bad_fields: [("threads", json!(0)), ("threads", json!(100)), ("threads", json!(2048))],
}

#[test]
fn the_names_spell_the_fields() {
    let spec = ConvertSpec::default();
    assert_eq!(spec.kernel_name(), "fathom_convert_t256");
    assert_eq!(
        entries(&spec),
        [
            "fathom_convert_t256_bf16_to_f32",
            "fathom_convert_t256_f32_to_bf16"
        ]
    );
}

#[test]
fn the_default_source_is_the_snapshot() {
    let spec = ConvertSpec::default();
    let source = assert_renders(&spec, &entries(&spec));
    insta::assert_snapshot!(format!("cuda-{}", spec.kernel_name()), source);
}

#[test]
fn a_sampled_grid_compiles_without_warnings() {
    for spec in [ConvertSpec::default(), ConvertSpec { threads: 1024 }] {
        assert_compiles(&spec, &entries(&spec));
    }
}
