//! SPEC §10: presets, and shapes read from real Hugging Face `config.json` files.

use std::path::PathBuf;

use codegen::model::{
    from_config_json, from_config_path, preset, presets, Basis, ModelError, ModelShape,
};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The parsed shape with the preset's name, so the rest of the shape can be compared whole.
fn renamed(shape: ModelShape, name: &str) -> ModelShape {
    ModelShape {
        name: name.to_string(),
        ..shape
    }
}

#[test]
fn preset_table_matches_spec() {
    // (name, L, H_q, H_kv, G, D, QK-norm, basis) exactly as SPEC §10's table.
    let table = [
        ("qwen3-8b", 36, 32, 8, 4, 128, true, Basis::Raw),
        ("qwen3-4b", 36, 32, 8, 4, 128, true, Basis::Raw),
        ("qwen2.5-7b", 28, 28, 4, 7, 128, false, Basis::Klt),
        ("llama-3.1-8b", 32, 32, 8, 4, 128, false, Basis::Klt),
        ("llama-3.1-70b", 80, 64, 8, 8, 128, false, Basis::Klt),
    ];
    assert_eq!(presets().len(), table.len());
    for (p, (name, l, hq, hkv, g, d, qk, basis)) in presets().iter().zip(table) {
        let s = preset(name).unwrap();
        assert_eq!(p.shape(), s);
        assert_eq!(s.name, name);
        assert_eq!(
            (
                s.layers,
                s.query_heads,
                s.kv_heads,
                s.group_size(),
                s.head_dim
            ),
            (l, hq, hkv, g, d),
            "{name}"
        );
        assert_eq!((s.qk_norm, s.basis), (qk, basis), "{name}");
        s.validate().unwrap();
    }
}

#[test]
fn alias_and_case() {
    let one_m = preset("qwen2.5-7b-instruct-1m").unwrap();
    assert_eq!(one_m, preset("qwen2.5-7b").unwrap());
    assert_eq!(one_m.name, "qwen2.5-7b");
    assert_eq!(preset("Qwen3-8B").unwrap().name, "qwen3-8b");
}

#[test]
fn unknown_preset_lists_valid_names() {
    let err = preset("qwen3-9b").unwrap_err();
    let ModelError::UnknownPreset { name, valid } = &err else {
        panic!("wrong error: {err:?}");
    };
    assert_eq!(name, "qwen3-9b");
    assert!(valid.contains(&"qwen2.5-7b-instruct-1m".to_string()));
    let msg = err.to_string();
    for p in presets() {
        assert!(msg.contains(p.name), "{msg}");
    }
}

#[test]
fn real_configs_equal_their_presets() {
    for (file, preset_name, model_type) in [
        ("qwen3-8b.json", "qwen3-8b", "qwen3"),
        ("qwen3-4b.json", "qwen3-4b", "qwen3"),
        ("qwen2.5-7b-instruct.json", "qwen2.5-7b", "qwen2"),
        (
            "qwen2.5-7b-instruct-1m.json",
            "qwen2.5-7b-instruct-1m",
            "qwen2",
        ),
        ("llama-3.1-8b.json", "llama-3.1-8b", "llama"),
        ("llama-3.1-70b.json", "llama-3.1-70b", "llama"),
    ] {
        let parsed = from_config_path(fixture(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(parsed.name, model_type, "{file}");
        let expected = preset(preset_name).unwrap();
        assert_eq!(renamed(parsed, &expected.name), expected, "{file}");
    }
}

/// The shapes beyond the presets (issue #14): D = 96 with G = 1 (Phi-3-mini), and G = 16 with
/// D = 128 from GLM-4's original (ChatGLM) and converted configs and from Qwen3-235B-A22B.
#[test]
fn real_configs_of_every_gqa_shape() {
    for (file, model_type, [l, hq, hkv, g, d], qk_norm) in [
        (
            "phi-3-mini-4k-instruct.json",
            "phi3",
            [32, 32, 32, 1, 96],
            false,
        ),
        ("glm-4-9b-chat.json", "chatglm", [40, 32, 2, 16, 128], false),
        ("glm-4-9b-chat-hf.json", "glm", [40, 32, 2, 16, 128], false),
        (
            "qwen3-235b-a22b.json",
            "qwen3_moe",
            [94, 64, 4, 16, 128],
            true,
        ),
    ] {
        let s = from_config_path(fixture(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(s.name, model_type, "{file}");
        assert_eq!(
            [
                s.layers,
                s.query_heads,
                s.kv_heads,
                s.group_size(),
                s.head_dim
            ],
            [l, hq, hkv, g, d],
            "{file}"
        );
        assert_eq!((s.qk_norm, s.basis), (qk_norm, Basis::for_qk_norm(qk_norm)));
    }
}

/// ChatGLM's Megatron names: `num_layers`, `kv_channels`, and `multi_query_group_num`, which
/// counts only when `multi_query_attention` is true (as its modelling code reads it).
#[test]
fn chatglm_spellings() {
    let glm = |extra: &str| {
        from_config_json(&format!(
            r#"{{"model_type": "chatglm", "hidden_size": 4096, "num_attention_heads": 32,
                "num_layers": 40, "kv_channels": 128, "multi_query_group_num": 2{extra}}}"#
        ))
    };
    let s = glm(r#", "multi_query_attention": true"#).unwrap();
    assert_eq!((s.layers, s.kv_heads, s.head_dim), (40, 2, 128));
    // Without multi-query attention the group count is not read: one KV head per query head.
    for off in [
        "",
        r#", "multi_query_attention": false"#,
        r#", "multi_query_attention": null"#,
    ] {
        let s = glm(off).unwrap();
        assert_eq!((s.kv_heads, s.group_size()), (32, 1), "{off}");
    }
    // The standard names win where both are given, and must agree.
    let s = glm(r#", "multi_query_attention": true, "num_key_value_heads": 4"#).unwrap();
    assert_eq!(s.kv_heads, 4);
    let err = glm(r#", "num_hidden_layers": 28"#).unwrap_err();
    assert!(
        matches!(&err, ModelError::Conflicting { field, value: 28, alias, alias_value: 40 }
            if field == "num_hidden_layers" && alias == "num_layers"),
        "{err:?}"
    );
    assert!(err.to_string().contains("must agree"), "{err}");
    let err = glm(r#", "head_dim": 96"#).unwrap_err();
    assert!(
        matches!(&err, ModelError::Conflicting { field, alias, .. }
            if field == "head_dim" && alias == "kv_channels"),
        "{err:?}"
    );
    assert!(glm(r#", "num_hidden_layers": 40, "head_dim": 128"#).is_ok());
    let err = glm(r#", "multi_query_attention": "yes""#).unwrap_err();
    assert!(
        matches!(&err, ModelError::WrongType { field, .. } if field == "multi_query_attention"),
        "{err:?}"
    );
    let err = from_config_json(
        r#"{"model_type": "chatglm", "num_attention_heads": 32, "num_layers": 40,
            "kv_channels": 128, "multi_query_attention": true}"#,
    )
    .unwrap_err();
    assert!(
        matches!(&err, ModelError::MissingField { field, .. } if field == "multi_query_group_num"),
        "{err:?}"
    );
    let err = from_config_json(
        r#"{"model_type": "chatglm", "num_attention_heads": 32, "kv_channels": 128}"#,
    )
    .unwrap_err();
    assert!(
        matches!(&err, ModelError::MissingField { field, .. } if field == "num_hidden_layers"),
        "{err:?}"
    );
    assert!(err.to_string().contains("num_layers"), "{err}");
}

/// Every head dimension and group size of §1 is accepted, and nothing next to them.
#[test]
fn every_allowed_shape_and_no_other() {
    let shape = |d: usize, hq: usize, hkv: usize| {
        from_config_json(&format!(
            r#"{{"model_type": "llama", "head_dim": {d}, "num_attention_heads": {hq},
                "num_key_value_heads": {hkv}, "num_hidden_layers": 2}}"#
        ))
    };
    for d in [64, 80, 96, 128, 192, 256] {
        for g in 1..=16 {
            let s = shape(d, 3 * g, 3).unwrap_or_else(|e| panic!("D = {d}, G = {g}: {e}"));
            assert_eq!((s.head_dim, s.group_size()), (d, g));
        }
    }
    for d in [32, 48, 72, 112, 160, 512] {
        assert!(
            matches!(shape(d, 8, 2), Err(ModelError::UnsupportedHeadDim { head_dim }) if head_dim == d),
            "D = {d}"
        );
    }
    assert!(matches!(
        shape(128, 17 * 2, 2),
        Err(ModelError::UnsupportedGroupSize { group: 17, .. })
    ));
}

#[test]
fn explicit_head_dim_wins_over_hidden_size() {
    // Qwen3-4B: hidden 2560 / 32 heads = 80, but its heads are 128 wide.
    let s = from_config_path(fixture("qwen3-4b.json")).unwrap();
    assert_eq!(s.head_dim, 128);
}

#[test]
fn nested_text_config() {
    let s = from_config_path(fixture("qwen3-vl-8b.json")).unwrap();
    assert_eq!(s.name, "qwen3_vl_text");
    assert_eq!(renamed(s, "qwen3-8b"), preset("qwen3-8b").unwrap());

    // model_type falls back to the top level; errors name the nested field.
    let wrapped = r#"{"model_type": "llava", "text_config": {"num_attention_heads": 32,
        "num_key_value_heads": 8, "hidden_size": 4096}}"#;
    let err = from_config_json(wrapped).unwrap_err();
    assert!(
        matches!(&err, ModelError::MissingField { field, .. } if field == "text_config.num_hidden_layers"),
        "{err:?}"
    );
    let wrapped = wrapped.replace("32,", "32, \"num_hidden_layers\": 32,");
    let s = from_config_json(&wrapped).unwrap();
    assert_eq!((s.name.as_str(), s.basis), ("llava", Basis::Klt));
}

#[test]
fn kv_heads_default_to_query_heads() {
    let s = from_config_json(
        r#"{"model_type": "gpt_neox", "hidden_size": 2048, "num_attention_heads": 16,
            "num_hidden_layers": 24}"#,
    )
    .unwrap();
    assert_eq!((s.kv_heads, s.group_size(), s.head_dim), (16, 1, 128));
    let s = from_config_json(
        r#"{"model_type": "x", "hidden_size": 2048, "num_attention_heads": 16,
            "num_key_value_heads": null, "head_dim": null, "num_hidden_layers": 24}"#,
    )
    .unwrap();
    assert_eq!((s.kv_heads, s.head_dim), (16, 128));
}

#[test]
fn qk_norm_follows_model_type() {
    for (model_type, qk_norm) in [
        ("qwen3", true),
        ("qwen3_moe", true),
        ("qwen2", false),
        ("llama", false),
        ("mistral", false),
    ] {
        let s = from_config_json(&format!(
            r#"{{"model_type": "{model_type}", "head_dim": 64, "num_attention_heads": 8,
                "num_key_value_heads": 2, "num_hidden_layers": 4}}"#
        ))
        .unwrap();
        assert_eq!(s.qk_norm, qk_norm, "{model_type}");
        assert_eq!(s.basis, Basis::for_qk_norm(qk_norm), "{model_type}");
    }
}

#[test]
fn smollm2_shape_of_the_real_activations() {
    // SPEC §11: SmolLM2-135M, 9 query and 3 KV heads, head dim 64 (576 / 9), G = 3.
    let s = from_config_json(
        r#"{"model_type": "llama", "hidden_size": 576, "num_attention_heads": 9,
            "num_key_value_heads": 3, "num_hidden_layers": 30}"#,
    )
    .unwrap();
    assert_eq!((s.head_dim, s.group_size(), s.basis), (64, 3, Basis::Klt));
}

/// Parses a malformed fixture, checks the error names the file, and returns its cause.
fn bad(file: &str) -> ModelError {
    let err = from_config_path(fixture(file)).expect_err(file);
    assert!(err.to_string().contains(file), "{err}");
    match err {
        ModelError::InFile { source, .. } => *source,
        other => panic!("{file}: expected InFile, got {other:?}"),
    }
}

#[test]
fn truncated_json_reports_line_and_column() {
    let err = bad("bad-truncated.json");
    let ModelError::Json { line, column, .. } = &err else {
        panic!("{err:?}");
    };
    let text = std::fs::read_to_string(fixture("bad-truncated.json")).unwrap();
    // The file ends mid-document, so the error is at its last line.
    assert_eq!(*line, text.lines().count(), "{err}");
    assert!(*column > 0);
    assert!(err
        .to_string()
        .contains(&format!("line {line}, column {column}")));

    let err =
        from_config_json("{\n  \"model_type\": \"llama\",\n  \"num_attention_heads\": 32,,\n}")
            .unwrap_err();
    assert!(matches!(err, ModelError::Json { line: 3, .. }), "{err:?}");
}

#[test]
fn missing_field() {
    let err = bad("bad-missing-layers.json");
    assert!(
        matches!(&err, ModelError::MissingField { field, .. } if field == "num_hidden_layers"),
        "{err:?}"
    );
    assert!(err.to_string().contains("num_hidden_layers"));

    let err =
        from_config_json(r#"{"num_attention_heads": 8, "head_dim": 64, "num_hidden_layers": 2}"#)
            .unwrap_err();
    assert!(
        matches!(&err, ModelError::MissingField { field, .. } if field == "model_type"),
        "{err:?}"
    );
    let err = from_config_json(
        r#"{"model_type": "llama", "num_attention_heads": 8, "num_hidden_layers": 2}"#,
    )
    .unwrap_err();
    assert!(
        matches!(&err, ModelError::MissingField { field, .. } if field == "head_dim"),
        "{err:?}"
    );
}

#[test]
fn wrong_types() {
    let err = bad("bad-heads-string.json");
    assert!(
        matches!(&err, ModelError::WrongType { field, found, .. }
            if field == "num_attention_heads" && found.contains("\"32\"")),
        "{err:?}"
    );
    for (doc, field) in [
        (r#"[1, 2]"#, "<root>"),
        (
            r#"{"model_type": 3, "head_dim": 64, "num_attention_heads": 8, "num_hidden_layers": 2}"#,
            "model_type",
        ),
        (
            r#"{"model_type": "llama", "num_attention_heads": 32.5}"#,
            "num_attention_heads",
        ),
        (
            r#"{"model_type": "llama", "text_config": "none"}"#,
            "text_config",
        ),
    ] {
        let err = from_config_json(doc).unwrap_err();
        assert!(
            matches!(&err, ModelError::WrongType { field: f, .. } if f == field),
            "{doc}: {err:?}"
        );
    }
}

#[test]
fn zero_and_negative_counts() {
    let err = bad("bad-zero-kv.json");
    assert!(
        matches!(&err, ModelError::NotPositive { field, value: 0 } if field == "num_key_value_heads"),
        "{err:?}"
    );
    let err = bad("bad-negative-layers.json");
    assert!(
        matches!(&err, ModelError::NotPositive { field, value: -4 } if field == "num_hidden_layers"),
        "{err:?}"
    );
}

#[test]
fn head_dim_72_is_refused() {
    let err = bad("bad-head-dim-72.json");
    assert!(
        matches!(err, ModelError::UnsupportedHeadDim { head_dim: 72 }),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("64, 80, 96, 128, 192, 256"), "{message}");
    assert!(message.contains("head_dim"), "{message}");
}

#[test]
fn heads_not_divisible() {
    let err = bad("bad-28-over-5.json");
    assert!(
        matches!(
            err,
            ModelError::HeadsNotDivisible {
                query_heads: 28,
                kv_heads: 5
            }
        ),
        "{err:?}"
    );
    let err = from_config_json(
        r#"{"model_type": "llama", "hidden_size": 4001, "num_attention_heads": 32, "num_hidden_layers": 2}"#,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            ModelError::HeadDimNotDerivable {
                hidden_size: 4001,
                query_heads: 32
            }
        ),
        "{err:?}"
    );
}

#[test]
fn group_size_32_is_refused() {
    let err = bad("bad-group-32.json");
    assert!(
        matches!(
            err,
            ModelError::UnsupportedGroupSize {
                group: 32,
                query_heads: 32,
                kv_heads: 1
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("1..=16"), "{message}");
    assert!(message.contains("num_key_value_heads"), "{message}");
}

#[test]
fn missing_file_is_an_io_error() {
    let err = from_config_path(fixture("no-such-config.json")).unwrap_err();
    assert!(matches!(err, ModelError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("no-such-config.json"));
}

#[test]
fn validate_catches_hand_built_shapes() {
    let mut s = preset("qwen2.5-7b").unwrap();
    s.kv_heads = 0;
    assert!(matches!(s.validate(), Err(ModelError::NotPositive { .. })));
    s.kv_heads = 1; // G = 28
    assert!(matches!(
        s.validate(),
        Err(ModelError::UnsupportedGroupSize { group: 28, .. })
    ));
    s.kv_heads = 2; // G = 14
    assert!(s.validate().is_ok());
}
