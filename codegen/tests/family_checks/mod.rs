//! Checks every kernel family of the selection pipeline must pass, shared by their test files.

use codegen::render::{render, RenderError};
use codegen::spec::Family;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// For every field of `base` (as serde sees it), `alternatives` must give another valid value,
/// and the spec with that one field changed must get another kernel name. A field added to a
/// spec without an alternative here fails the test, so no field can be left out of the name.
pub fn assert_every_field_in_name<F>(base: &F, alternatives: &[(&str, serde_json::Value)])
where
    F: Family + Serialize + DeserializeOwned,
{
    let json = serde_json::to_value(base).expect("a spec serialises");
    let fields: BTreeSet<&str> = json
        .as_object()
        .expect("a spec is a struct")
        .keys()
        .map(String::as_str)
        .collect();
    let covered: BTreeSet<&str> = alternatives.iter().map(|(field, _)| *field).collect();
    assert_eq!(
        fields, covered,
        "every spec field needs an alternative value"
    );
    base.validate().expect("the base spec is valid");
    for (field, value) in alternatives {
        let mut changed = json.clone();
        assert_ne!(
            &changed[*field], value,
            "{field}: the alternative equals the base"
        );
        changed[*field] = value.clone();
        let other: F = serde_json::from_value(changed).expect("the alternative deserialises");
        other.validate().expect("the alternative is valid");
        assert_ne!(
            other.kernel_name(),
            base.kernel_name(),
            "changing `{field}` must change the kernel name"
        );
    }
}

/// Every spec of the four axes, the first outermost: a family's grid of specs.
pub fn grid4<A: Copy, B: Copy, C: Copy, D: Copy, F>(
    a: &[A],
    b: &[B],
    c: &[C],
    d: &[D],
    spec: impl Fn(A, B, C, D) -> F,
) -> Vec<F> {
    let mut specs = Vec::new();
    for &a in a {
        for &b in b {
            for &c in c {
                for &d in d {
                    specs.push(spec(a, b, c, d));
                }
            }
        }
    }
    specs
}

/// For every `(field, value)` of `cases`, `base` with that one field set to that bad value fails
/// validation naming its family and that field, and does not render.
pub fn assert_bad_fields_named<F>(base: &F, cases: &[(&str, serde_json::Value)])
where
    F: Family + Serialize + DeserializeOwned,
{
    let json = serde_json::to_value(base).expect("a spec serialises");
    for (field, value) in cases {
        let mut changed = json.clone();
        assert!(changed.get(*field).is_some(), "{field} is not a spec field");
        changed[*field] = value.clone();
        let spec: F = serde_json::from_value(changed).expect("the bad value deserialises");
        let err = spec.validate().unwrap_err();
        assert_eq!((err.family, err.field), (F::FAMILY, *field), "{value}");
        assert!(matches!(render(&spec), Err(RenderError::Spec(_))));
    }
}

/// Distinct specs get distinct names, and every name is a C identifier with the family's stem.
pub fn assert_names_injective<F>(specs: &[F])
where
    F: Family + Serialize,
{
    let mut by_name: BTreeMap<String, String> = BTreeMap::new();
    for spec in specs {
        let name = spec.kernel_name();
        assert!(
            name.starts_with(&format!("fathom_{}_", F::FAMILY)),
            "{name}"
        );
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{name} is not a C identifier"
        );
        let json = serde_json::to_string(spec).unwrap();
        if let Some(previous) = by_name.insert(name.clone(), json.clone()) {
            assert_eq!(previous, json, "two specs share the name {name}");
        }
    }
}

/// The spec renders, twice identically, to a source that defines `entries` and has no template
/// syntax left in it.
pub fn assert_renders<F: Family>(spec: &F, entries: &[String]) -> String {
    let source = render(spec).unwrap_or_else(|e| panic!("{}: {e}", spec.kernel_name()));
    assert_eq!(source, render(spec).unwrap(), "rendering is deterministic");
    for entry in entries {
        assert!(
            source.contains(&format!("{entry}(")),
            "{} lacks entry point {entry}",
            spec.kernel_name()
        );
    }
    // (common.cuh.tera's comment shows an `include` tag, so only the tags we use are looked for.)
    for leftover in ["{{", "{% if", "{% for", "{% end", "{%-", "{#"] {
        assert!(
            !source.contains(leftover),
            "template syntax {leftover} left"
        );
    }
    assert!(source.contains("extern \"C\" __global__"));
    source
}

/// Architectures the sampled grids are compiled for: the H200 (sm_90) and the paper's A100
/// (sm_80).
pub const ARCHS: [&str; 2] = ["sm_80", "sm_90"];

/// The spec's source compiles with NVRTC for every arch of [`ARCHS`] with an empty log (no
/// warnings), and the PTX defines every entry point.
pub fn assert_compiles<F: Family>(spec: &F, entries: &[String]) {
    assert_compiles_for(spec, entries, &ARCHS);
}

/// [`assert_compiles`] for the architectures `archs` (a kernel that needs a newer one than
/// [`ARCHS`] holds).
pub fn assert_compiles_for<F: Family>(spec: &F, entries: &[String], archs: &[&str]) {
    let source = render(spec).unwrap();
    let file_name = format!("{}.cu", spec.kernel_name());
    for &arch in archs {
        let out = codegen::nvrtc::compile(&source, &file_name, arch, &[])
            .unwrap_or_else(|e| panic!("{file_name} for {arch}: {e}"));
        assert_eq!(
            out.log.trim(),
            "",
            "{file_name} for {arch}: NVRTC log not empty"
        );
        for entry in entries {
            assert!(
                out.ptx.contains(&format!(".entry {entry}(")),
                "{file_name} for {arch}: no entry {entry}"
            );
        }
    }
}

/// The tests every family gets from the checks above, over its `base` spec and `grid`:
/// `every_field_is_in_the_name` (with `alternatives` for
/// [`assert_every_field_in_name`]), `names_are_injective` and `bad_fields_are_named` (with
/// the `(field, bad value)` pairs of `bad_fields`).
macro_rules! family_tests {
    (
        base: $base:expr,
        grid: $grid:expr,
        alternatives: $alternatives:expr,
        bad_fields: $bad_fields:expr $(,)?
    ) => {
        #[test]
        fn every_field_is_in_the_name() {
            $crate::family_checks::assert_every_field_in_name(&$base, &$alternatives);
        }

        #[test]
        fn names_are_injective() {
            $crate::family_checks::assert_names_injective(&$grid);
        }

        #[test]
        fn bad_fields_are_named() {
            $crate::family_checks::assert_bad_fields_named(&$base, &$bad_fields);
        }
    };
}
pub(crate) use family_tests;
