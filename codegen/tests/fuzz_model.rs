//! Property fuzzing of `config.json` parsing (§10): valid-looking configs with mutated fields
//! (wrong types, zero, negative, huge and fractional numbers, unicode, nesting under
//! `text_config`), byte-level damage of valid configs, and arbitrary text.
//!
//! Every case asserts: no panic; a refusal is a [`ModelError`] with a message; an acceptance is a
//! validated shape whose every number is the one the config gave.

use std::panic::{catch_unwind, AssertUnwindSafe};

use codegen::model::{from_config_json, Basis, ModelError, HEAD_DIMS, MAX_COUNT, MAX_GROUP_SIZE};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// A value for a count field: mostly plausible, often wrong in type or range.
fn count_value() -> BoxedStrategy<Option<Value>> {
    prop_oneof![
        4 => prop::sample::select(vec![1u64, 2, 4, 8, 16, 28, 32, 36, 64, 128, 256, 512, 4096])
            .prop_map(|n| Some(json!(n))),
        1 => (1u64..300).prop_map(|n| Some(json!(n))),
        2 => prop_oneof![
            Just(None),
            Just(Some(Value::Null)),
            Just(Some(json!(0))),
            Just(Some(json!(-1))),
            Just(Some(json!(i64::MIN))),
            Just(Some(json!(u64::MAX))),
            Just(Some(json!(usize::MAX as u64 / 2 + 1))),
            Just(Some(json!(32.0))),
            Just(Some(json!(32.5))),
            Just(Some(json!(-0.0))),
            Just(Some(json!(1e300))),
            Just(Some(json!(f64::MIN_POSITIVE))),
            Just(Some(json!("32"))),
            Just(Some(json!(""))),
            Just(Some(json!(true))),
            Just(Some(json!([32]))),
            Just(Some(json!({"value": 32}))),
        ],
    ]
    .boxed()
}

/// A `model_type`: real ones, unicode, empty, and wrong types.
fn model_type_value() -> BoxedStrategy<Option<Value>> {
    prop_oneof![
        3 => prop::sample::select(vec!["qwen3", "qwen3_moe", "llama", "qwen2", "mistral", "gemma3"])
            .prop_map(|s| Some(json!(s))),
        1 => "\\PC{0,12}".prop_map(|s| Some(json!(s))),
        1 => prop_oneof![
            Just(None),
            Just(Some(Value::Null)),
            Just(Some(json!(""))),
            Just(Some(json!(3))),
            Just(Some(json!(["qwen3"]))),
            Just(Some(json!("Qwen3"))),
            Just(Some(json!("qwen3\u{0}"))),
        ],
    ]
    .boxed()
}

/// A field's value: the valid one mostly, else a mutated one (absent, wrong type, out of range).
fn valid_or_mutated(valid: Value) -> BoxedStrategy<Option<Value>> {
    prop_oneof![4 => Just(Some(valid)), 1 => count_value()].boxed()
}

/// The attention fields of a config: a valid shape (`head_dim` given or derived from
/// `hidden_size`, `num_key_value_heads` sometimes left to default), each field then possibly
/// mutated, plus unrelated fields.
fn fields() -> BoxedStrategy<Map<String, Value>> {
    (
        1u64..100,
        1u64..16,
        1u64..=20,
        prop::sample::select(vec![64u64, 80, 96, 128, 192, 256, 72]),
        any::<bool>(),
    )
        .prop_flat_map(|(layers, kv, g, d, derive)| {
            let heads = kv * g;
            let (head_dim, hidden) = if derive {
                (Value::Null, json!(heads * d))
            } else {
                (json!(d), json!(heads * d + 1))
            };
            (
                valid_or_mutated(json!(layers)),
                valid_or_mutated(json!(heads)),
                prop_oneof![3 => valid_or_mutated(json!(kv)), 1 => Just(None)],
                valid_or_mutated(head_dim),
                valid_or_mutated(hidden),
                model_type_value(),
                prop::collection::vec(("\\PC{1,8}", any::<i32>()), 0..3),
            )
        })
        .prop_map(|(layers, heads, kv, head_dim, hidden, model_type, extra)| {
            let mut map = Map::new();
            for (name, value) in [
                ("num_hidden_layers", layers),
                ("num_attention_heads", heads),
                ("num_key_value_heads", kv),
                ("head_dim", head_dim),
                ("hidden_size", hidden),
                ("model_type", model_type),
            ] {
                if let Some(v) = value {
                    map.insert(name.to_string(), v);
                }
            }
            // Unrelated fields (unicode names included) must not matter.
            for (name, value) in extra {
                map.entry(name).or_insert(json!(value));
            }
            map
        })
        .boxed()
}

/// A whole config: flat, or the language model's fields nested under `text_config` (sometimes
/// with a top-level `model_type` only), or `text_config` of a wrong type.
fn config() -> BoxedStrategy<Value> {
    prop_oneof![
        3 => fields().prop_map(Value::Object),
        2 => (fields(), model_type_value()).prop_map(|(text, top_type)| {
            let mut root = Map::new();
            if let Some(t) = top_type {
                root.insert("model_type".into(), t);
            }
            root.insert("text_config".into(), Value::Object(text));
            Value::Object(root)
        }),
        1 => (fields(), prop_oneof![
            Just(json!(null)),
            Just(json!([])),
            Just(json!("text")),
            Just(json!(1)),
        ])
        .prop_map(|(mut root, text)| {
            root.insert("text_config".into(), text);
            Value::Object(root)
        }),
        1 => prop_oneof![
            Just(json!(null)),
            Just(json!([])),
            Just(json!(32)),
            Just(json!("config")),
        ],
    ]
    .boxed()
}

fn parse(text: &str) -> Result<codegen::model::ModelShape, ModelError> {
    catch_unwind(AssertUnwindSafe(|| from_config_json(text)))
        .unwrap_or_else(|_| panic!("from_config_json panicked on {text:?}"))
}

fn check_refusal(e: &ModelError) {
    assert!(!e.to_string().trim().is_empty(), "{e:?} has no message");
}

/// An accepted shape is valid and carries exactly the numbers of the config it came from.
fn check_accepted(config: &Value, shape: &codegen::model::ModelShape) {
    shape.validate().expect("an accepted shape validates");
    assert!(HEAD_DIMS.contains(&shape.head_dim));
    assert!((1..=MAX_GROUP_SIZE).contains(&shape.group_size()));
    assert_eq!(shape.group_size() * shape.kv_heads, shape.query_heads);
    for count in [shape.layers, shape.query_heads, shape.kv_heads] {
        assert!((1..=MAX_COUNT).contains(&count), "{shape:?}");
    }
    let root = config.as_object().expect("only an object is accepted");
    let source = match root.get("text_config") {
        Some(Value::Object(t)) => t,
        _ => root,
    };
    let count = |name: &str| source.get(name).and_then(Value::as_u64).map(|n| n as usize);
    assert_eq!(Some(shape.layers), count("num_hidden_layers"));
    assert_eq!(Some(shape.query_heads), count("num_attention_heads"));
    assert_eq!(
        shape.kv_heads,
        count("num_key_value_heads").unwrap_or(shape.query_heads)
    );
    match count("head_dim") {
        Some(d) => assert_eq!(shape.head_dim, d),
        None => assert_eq!(
            Some(shape.head_dim * shape.query_heads),
            count("hidden_size")
        ),
    }
    let model_type = source
        .get("model_type")
        .or_else(|| root.get("model_type"))
        .and_then(Value::as_str);
    assert_eq!(Some(shape.name.as_str()), model_type);
    assert_eq!(shape.qk_norm, shape.name.starts_with("qwen3"));
    assert_eq!(
        shape.basis,
        if shape.qk_norm {
            Basis::Raw
        } else {
            Basis::Klt
        }
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Configs with mutated fields: a typed refusal or the config's own validated shape.
    #[test]
    fn mutated_configs_are_refused_or_exact(config in config(), pretty in any::<bool>()) {
        let text = if pretty {
            serde_json::to_string_pretty(&config).unwrap()
        } else {
            config.to_string()
        };
        match parse(&text) {
            Ok(shape) => check_accepted(&config, &shape),
            Err(e) => {
                check_refusal(&e);
                if let ModelError::Json { .. } = e {
                    prop_assert!(false, "serialised JSON refused as not JSON: {e}");
                }
            }
        }
    }

    /// Valid configs damaged byte by byte (truncated, a byte changed, inserted or removed).
    #[test]
    fn damaged_configs_never_panic(
        config in config(),
        edits in prop::collection::vec((any::<usize>(), any::<u8>(), 0u8..4), 1..4),
    ) {
        let mut bytes = config.to_string().into_bytes();
        for (at, byte, kind) in edits {
            let i = if bytes.is_empty() { 0 } else { at % bytes.len() };
            match kind {
                0 => bytes.truncate(i),
                1 if !bytes.is_empty() => bytes[i] = byte,
                2 => bytes.insert(i, byte),
                _ if !bytes.is_empty() => {
                    bytes.remove(i);
                }
                _ => {}
            }
        }
        // The CLI reads the file as UTF-8 first; a damaged file that is not text never gets here.
        let text = String::from_utf8_lossy(&bytes);
        match parse(&text) {
            Ok(shape) => {
                let reparsed: Value = serde_json::from_str(&text).expect("accepted text is JSON");
                check_accepted(&reparsed, &shape);
            }
            Err(e) => check_refusal(&e),
        }
    }

    /// Arbitrary text, including JSON-ish fragments.
    #[test]
    fn arbitrary_text_never_panics(
        text in prop_oneof![
            "\\PC{0,64}",
            "[\\[\\]{}\":,0-9a-z_ .eE+-]{0,64}",
        ],
    ) {
        match parse(&text) {
            Ok(shape) => {
                let reparsed: Value = serde_json::from_str(&text).expect("accepted text is JSON");
                check_accepted(&reparsed, &shape);
            }
            Err(e) => check_refusal(&e),
        }
    }
}

/// The cases the fuzzing found or that it cannot reach by chance, kept by name.
mod regressions {
    use super::*;

    /// A deeply nested document is refused by serde_json's recursion limit, not a stack overflow.
    #[test]
    fn deep_nesting_is_a_json_error() {
        let text = "[".repeat(100_000);
        assert!(matches!(parse(&text), Err(ModelError::Json { .. })));
        let text = format!("{{\"text_config\": {}}}", "{\"a\":".repeat(10_000));
        assert!(matches!(parse(&text), Err(ModelError::Json { .. })));
    }

    /// A count beyond any model's (up to `u64::MAX`) is refused as too large; beyond `u64` it is
    /// a float to serde_json and a wrong type. Before the fix, `u64::MAX` layers were accepted.
    #[test]
    fn huge_counts_are_refused() {
        for n in ["65537", "2147483648", "18446744073709551615"] {
            for field in ["num_hidden_layers", "num_attention_heads"] {
                let text = format!(
                    r#"{{"num_hidden_layers": 2, "num_attention_heads": 2, "head_dim": 128, "model_type": "llama", "{field}": {n}}}"#
                );
                let e = parse(&text).unwrap_err();
                assert!(
                    matches!(&e, ModelError::TooLarge { field: f, .. } if f == field),
                    "{n}: {e}"
                );
            }
        }
        for n in ["18446744073709551616", "1e30"] {
            let text = format!(
                r#"{{"num_hidden_layers": {n}, "num_attention_heads": 32, "head_dim": 128, "model_type": "llama"}}"#
            );
            let e = parse(&text).unwrap_err();
            assert!(matches!(e, ModelError::WrongType { .. }), "{n}: {e}");
        }
    }

    /// `hidden_size` that does not divide by the heads cannot give `head_dim`.
    #[test]
    fn an_underivable_head_dim_is_refused() {
        let e = parse(r#"{"num_hidden_layers": 2, "num_attention_heads": 3, "hidden_size": 128, "model_type": "llama"}"#)
            .unwrap_err();
        assert!(matches!(e, ModelError::HeadDimNotDerivable { .. }), "{e}");
    }
}

/// The generator must reach acceptances, or the exactness checks above check nothing.
#[test]
fn the_config_generator_reaches_accepted_shapes() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = config();
    let accepted = (0..2000)
        .filter(|_| {
            let config = strategy.new_tree(&mut runner).unwrap().current();
            from_config_json(&config.to_string()).is_ok()
        })
        .count();
    assert!(accepted >= 200, "only {accepted} of 2000 configs accepted");
    eprintln!("{accepted} of 2000 generated configs accepted");
}
