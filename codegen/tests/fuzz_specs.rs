//! Property fuzzing of kernel specs as outside input: spec JSON (manifests, the macro's fields)
//! with mutated fields, the kernel-set options of the `emit` CLI (`--block`, `--segment-words`),
//! and the `emit` command line itself.
//!
//! Every case asserts: no panic; a refusal is the typed error with a message; a spec that
//! validates renders (a validated spec whose template fails is a wrong acceptance).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Command;

use codegen::model::{self, ModelShape};
use codegen::spec::shape::MAX_SEGMENT_WORDS;
use codegen::{kernels_for, KernelSetOptions, KernelSpec};
use proptest::prelude::*;
use serde_json::{json, Value};

/// Every spec of every preset's default set: the valid starting points.
fn valid_specs() -> Vec<KernelSpec> {
    let mut specs: Vec<KernelSpec> = model::presets()
        .iter()
        .flat_map(|p| kernels_for(&p.shape(), &KernelSetOptions::default()))
        .collect();
    specs.dedup_by_key(|s| s.kernel_name());
    specs
}

/// A replacement value for a field: numbers at and past every edge, and wrong types.
fn field_value() -> BoxedStrategy<Value> {
    prop_oneof![
        3 => prop::sample::select(vec![0u64, 1, 2, 7, 8, 9, 16, 31, 32, 33, 64, 96, 128, 256, 512, 1024, 1025, 2048])
            .prop_map(|n| json!(n)),
        1 => any::<u64>().prop_map(|n| json!(n)),
        1 => prop_oneof![
            Just(json!(u32::MAX)),
            Just(json!(u64::MAX)),
            Just(json!(MAX_SEGMENT_WORDS as u64)),
            Just(json!(MAX_SEGMENT_WORDS as u64 + 1)),
            Just(json!(usize::MAX / 64 + 1)),
            Just(json!(-1)),
            Just(json!(64.0)),
            Just(json!(1e300)),
            Just(json!("128")),
            Just(json!(null)),
            Just(json!(true)),
            Just(json!([])),
            Just(json!({})),
            Just(json!({"kind": "sparq", "r": 0})),
            Just(json!({"kind": "uniform", "t": 9})),
            Just(json!({"kind": "loki"})),
            Just(json!("hbm")),
            Just(json!("host")),
            Just(json!("HBM")),
            Just(json!("bulk")),
            Just(json!("append")),
        ],
        1 => "\\PC{0,8}".prop_map(|s| json!(s)),
    ]
    .boxed()
}

/// One edit of a spec's JSON object.
#[derive(Clone, Debug)]
enum Edit {
    Set(usize, Value),
    Remove(usize),
    Unknown(String, Value),
    Family(String),
}

fn edit() -> BoxedStrategy<Edit> {
    prop_oneof![
        6 => (any::<usize>(), field_value()).prop_map(|(i, v)| Edit::Set(i, v)),
        1 => any::<usize>().prop_map(Edit::Remove),
        1 => ("\\PC{1,8}", field_value()).prop_map(|(k, v)| Edit::Unknown(k, v)),
        1 => prop::sample::select(vec!["scan", "plan", "Scan", "", "encode", "oracle", "nope"])
            .prop_map(|f| Edit::Family(f.to_string())),
    ]
    .boxed()
}

fn apply(value: &mut Value, edit: &Edit) {
    let map = value
        .as_object_mut()
        .expect("a spec serialises to an object");
    let keys: Vec<String> = map.keys().filter(|k| *k != "family").cloned().collect();
    match edit {
        Edit::Set(i, v) if !keys.is_empty() => {
            map.insert(keys[i % keys.len()].clone(), v.clone());
        }
        Edit::Remove(i) if !keys.is_empty() => {
            map.remove(&keys[i % keys.len()]);
        }
        Edit::Unknown(k, v) => {
            map.entry(k.clone()).or_insert(v.clone());
        }
        Edit::Family(f) => {
            map.insert("family".into(), json!(f));
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Spec JSON with mutated fields: refused by serde or by validation with a message, or a
    /// spec that names itself and round-trips through JSON.
    #[test]
    fn mutated_spec_json_is_refused_or_sound(
        base in prop::sample::select(valid_specs()),
        edits in prop::collection::vec(edit(), 1..4),
    ) {
        let mut value = serde_json::to_value(base).unwrap();
        for e in &edits {
            apply(&mut value, e);
        }
        let parsed = catch_unwind(|| serde_json::from_value::<KernelSpec>(value.clone()))
            .unwrap_or_else(|_| panic!("deserialising {value} panicked"));
        let spec = match parsed {
            Ok(spec) => spec,
            Err(e) => {
                prop_assert!(!e.to_string().is_empty());
                return Ok(());
            }
        };
        let checked = catch_unwind(|| (spec.validate(), spec.kernel_name(), spec.entry_points()))
            .unwrap_or_else(|_| panic!("validating {spec:?} panicked"));
        match checked {
            (Ok(()), name, entries) => {
                prop_assert!(name.starts_with(&format!("fathom_{}_", spec.family())), "{name}");
                prop_assert!(!entries.is_empty());
                let again: KernelSpec = serde_json::from_value(serde_json::to_value(spec).unwrap()).unwrap();
                prop_assert_eq!(again, spec);
            }
            (Err(e), _, _) => {
                prop_assert_eq!(e.family, spec.family());
                prop_assert!(!e.allowed.is_empty() && !e.to_string().is_empty());
            }
        }
    }
}

proptest! {
    // Rendering parses every template each time (~ms in debug): fewer cases.
    #![proptest_config(ProptestConfig::with_cases(150))]

    /// A spec that validates renders; one that does not is refused before its template runs.
    #[test]
    fn a_validated_spec_renders(
        base in prop::sample::select(valid_specs()),
        edits in prop::collection::vec(edit(), 0..3),
    ) {
        let mut value = serde_json::to_value(base).unwrap();
        for e in &edits {
            apply(&mut value, e);
        }
        let Ok(spec) = serde_json::from_value::<KernelSpec>(value) else {
            return Ok(());
        };
        let rendered = catch_unwind(|| spec.render())
            .unwrap_or_else(|_| panic!("rendering {spec:?} panicked"));
        match (spec.validate(), rendered) {
            (Ok(()), Ok(source)) => {
                for entry in spec.entry_points() {
                    prop_assert!(source.contains(&entry), "{entry} missing from the source");
                }
            }
            (Ok(()), Err(e)) => prop_assert!(false, "{spec:?} validates but does not render: {e}"),
            (Err(_), Ok(_)) => prop_assert!(false, "{spec:?} is invalid but rendered"),
            (Err(_), Err(e)) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    /// The kernel-set options of `emit` on every preset: the whole set validates exactly when
    /// the options are a valid store shape, and a bad option is named.
    #[test]
    fn kernel_set_options_are_validated(
        preset in prop::sample::select(model::presets().to_vec()),
        block in prop_oneof![3 => prop::sample::select(vec![32usize, 64, 128]), 1 => any::<usize>(), 1 => 0usize..200],
        segment_words in prop_oneof![
            3 => prop::sample::select(vec![1usize, 2, 4, 16, 48, 64, 512, 4096]),
            1 => any::<usize>(),
            1 => prop::sample::select(vec![0usize, MAX_SEGMENT_WORDS, MAX_SEGMENT_WORDS + 1, usize::MAX / 64 + 1, usize::MAX]),
        ],
    ) {
        let shape: ModelShape = preset.shape();
        let options = KernelSetOptions { block, segment_words };
        let specs = catch_unwind(AssertUnwindSafe(|| kernels_for(&shape, &options)))
            .unwrap_or_else(|_| panic!("kernels_for panicked on {options:?}"));
        let results = catch_unwind(AssertUnwindSafe(|| specs.iter().map(KernelSpec::validate).collect::<Vec<_>>()))
            .unwrap_or_else(|_| panic!("validation panicked on {options:?}"));
        let valid_store = [32, 64, 128].contains(&block)
            && (2..=MAX_SEGMENT_WORDS).contains(&segment_words)
            && segment_words % 2 == 0
            // The default scan tiles are fitted to the segment (`ScanSpec::with_fitted_tile`).
            && (segment_words * 64) % block == 0;
        for (spec, result) in specs.iter().zip(&results) {
            match result {
                Ok(()) => {}
                Err(e) => {
                    prop_assert!(!valid_store, "{spec:?} refused valid options: {e}");
                    prop_assert!(["block", "segment_words"].contains(&e.field), "{e}");
                }
            }
        }
        if !valid_store {
            prop_assert!(results.iter().any(Result::is_err), "invalid options {options:?} accepted");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The `emit` command line.

/// One `codegen` argument list: near-valid flags with fuzzed values. NVRTC is pointed at a
/// missing library, so that nothing is compiled and nothing can be written.
fn emit_args() -> BoxedStrategy<Vec<String>> {
    let value = prop_oneof![
        prop::sample::select(vec![
            "qwen3-8b",
            "QWEN3-8B",
            "llama-3.1-70b",
            "nope",
            "",
            "64",
            "0",
            "-1",
            "sm_90",
            "sm_",
            "sm_9x",
            "compute_90",
            "18446744073709551616",
            "33554431",
            "2097152",
            "--",
            "=",
            "é",
        ])
        .prop_map(str::to_string),
        any::<usize>().prop_map(|n| n.to_string()),
        "\\PC{0,6}",
    ];
    let flag = prop::sample::select(vec![
        "--model",
        "--config",
        "--arch",
        "--block",
        "--segment-words",
        "--out",
        "--bogus",
        "-m",
    ]);
    (
        prop::sample::select(vec!["emit", "emit", "emit", "", "help", "Emit"]),
        prop::collection::vec((flag, value, any::<bool>()), 0..5),
    )
        .prop_map(|(command, pairs)| {
            let mut args = vec![command.to_string()];
            for (flag, value, joined) in pairs {
                if joined {
                    args.push(format!("{flag}={value}"));
                } else {
                    args.push(flag.to_string());
                    args.push(value);
                }
            }
            args
        })
        .boxed()
}

proptest! {
    // One process per case.
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Fuzzed arguments: exit 0 (help), 1 (a typed error, printed) or 2 (clap's usage error),
    /// never a panic (101) or a signal, and nothing written.
    #[test]
    fn emit_cli_never_panics(args in emit_args()) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut command = Command::new(env!("CARGO_BIN_EXE_codegen"));
        command
            .args(&args)
            .env("FATHOM_NVRTC", dir.path().join("no-libnvrtc.so"))
            .current_dir(dir.path());
        // Half the cases name the output, so that they get past clap.
        if !args.iter().any(|a| a.starts_with("--out")) && args.len() % 2 == 0 {
            command.arg("--out").arg(&out);
        }
        let output = command.output().unwrap();
        let code = output.status.code();
        prop_assert!(matches!(code, Some(0..=2)), "{args:?} exited {code:?}: {}", String::from_utf8_lossy(&output.stderr));
        if code != Some(0) {
            prop_assert!(!output.stderr.is_empty(), "{args:?} failed silently");
        }
        prop_assert!(!out.exists(), "{args:?} wrote {out:?} without a compiler");
    }
}

/// The cases the fuzzing found, kept by name.
mod regressions {
    use super::*;
    use codegen::spec::{EncodeMode, EncodeSpec, ScanSpec};

    /// `S * 64` overflowed (a panic in debug; in release it wrapped to a multiple of every block
    /// and the spec was accepted).
    #[test]
    fn a_huge_segment_is_refused_not_overflowed() {
        for segment_words in [usize::MAX / 64 + 1, usize::MAX, MAX_SEGMENT_WORDS + 1] {
            let spec = EncodeSpec {
                segment_words,
                ..EncodeSpec::new(128, EncodeMode::Bulk, false)
            };
            let e = spec.validate_any().unwrap_err();
            assert_eq!(e.field, "segment_words", "{e}");
        }
        let scan = ScanSpec {
            segment_words: MAX_SEGMENT_WORDS / 16 * 16,
            ..ScanSpec::new(256, 8, codegen::spec::Placement::Hbm)
        };
        assert!(KernelSpec::from(scan).validate().is_ok());
    }

    trait ValidateAny {
        fn validate_any(&self) -> Result<(), codegen::spec::SpecError>;
    }

    impl<T: Copy + Into<KernelSpec>> ValidateAny for T {
        fn validate_any(&self) -> Result<(), codegen::spec::SpecError> {
            (*self).into().validate()
        }
    }
}
