//! SPEC §10: model presets and the shape read from a Hugging Face `config.json`.
//!
//! A shape comes either from a named preset ([`preset`], [`presets`]) or from a model's
//! `config.json` ([`from_config_json`], [`from_config_path`]). Both are validated against what
//! the kernels can be specialised for (§1): `D` in {64, 80, 96, 128, 192, 256}, `G` in 1..=16.
//!
//! # Reading `config.json`
//!
//! | field | use |
//! | --- | --- |
//! | `num_hidden_layers` (ChatGLM: `num_layers`) | `L` |
//! | `num_attention_heads` | `H_q` |
//! | `num_key_value_heads` (ChatGLM: `multi_query_group_num` when `multi_query_attention` is true) | `H_kv`; absent or `null` means `H_q` (no GQA), as Hugging Face does |
//! | `head_dim` (ChatGLM: `kv_channels`) | `D`; absent or `null` means `hidden_size / num_attention_heads`, which must divide |
//! | `model_type` | `qwen3*` (`qwen3`, `qwen3_moe`, ...) means QK-norm and the raw basis; anything else KLT |
//!
//! GLM-4's original checkpoints (`model_type` `chatglm`, e.g. THUDM/glm-4-9b-chat) spell the
//! shape with Megatron's names; the Hugging Face conversions (`glm`, `glm4`) use the standard
//! ones. Where a config holds both spellings of one field they must agree.
//!
//! Multimodal checkpoints (Llava, Gemma 3, Mistral 3, Qwen3-VL ...) wrap the language model's
//! settings in a nested `text_config` object. When the top level has an object `text_config`,
//! every field above is read from it (errors name it as `text_config.<field>`), except that
//! `model_type` falls back to the top level's when `text_config` has none.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;

/// Head dimensions the kernels are specialised for (SPEC §1).
pub use crate::spec::shape::HEAD_DIMS;

/// The largest group size `G` (query heads per KV head) the kernels are specialised for (SPEC §1).
pub const MAX_GROUP_SIZE: usize = crate::spec::shape::MAX_GROUP;

/// The largest layer or head count accepted: kernels take head counts as C `int`s, and the
/// runtime sizes its tables by products of these counts, so a count from a config must stay far
/// from overflow. Real models have at most a few hundred of either.
pub const MAX_COUNT: usize = 1 << 16;

/// The basis the key store is kept in (SPEC §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Basis {
    /// Raw channels (models with QK-norm).
    Raw,
    /// KLT coordinates: keys rotated by a per-(layer, KV head) orthonormal basis.
    Klt,
}

impl Basis {
    /// The basis SPEC §5 picks: raw channels for models with QK-norm, KLT for the others.
    pub fn for_qk_norm(qk_norm: bool) -> Basis {
        if qk_norm {
            Basis::Raw
        } else {
            Basis::Klt
        }
    }
}

impl fmt::Display for Basis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Basis::Raw => "raw",
            Basis::Klt => "klt",
        })
    }
}

/// The attention shape of a model: everything kernel generation and the store depend on.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModelShape {
    /// Preset name, or the `model_type` of a parsed `config.json`.
    pub name: String,
    /// `L`, decoder layers.
    pub layers: usize,
    /// `H_q`, query heads per layer.
    pub query_heads: usize,
    /// `H_kv`, KV heads per layer.
    pub kv_heads: usize,
    /// `D`, channels per head.
    pub head_dim: usize,
    /// Whether the model normalises queries and keys (QK-norm).
    pub qk_norm: bool,
    /// The store basis.
    pub basis: Basis,
}

impl ModelShape {
    /// `G`, query heads per KV head.
    pub fn group_size(&self) -> usize {
        self.query_heads / self.kv_heads
    }

    /// Checks the shape against what the kernels support: every count positive and at most
    /// [`MAX_COUNT`], `D` in [`HEAD_DIMS`], `H_q` a multiple of `H_kv`, and `G` in
    /// `1..=`[`MAX_GROUP_SIZE`].
    ///
    /// Shapes from [`preset`] and [`from_config_json`] are already validated; this is for
    /// shapes built by hand.
    pub fn validate(&self) -> Result<(), ModelError> {
        for (field, value) in [
            ("num_hidden_layers", self.layers),
            ("num_attention_heads", self.query_heads),
            ("num_key_value_heads", self.kv_heads),
            ("head_dim", self.head_dim),
        ] {
            if value == 0 {
                return Err(ModelError::NotPositive {
                    field: field.to_string(),
                    value: 0,
                });
            }
            if value > MAX_COUNT {
                return Err(ModelError::TooLarge {
                    field: field.to_string(),
                    value,
                });
            }
        }
        if !HEAD_DIMS.contains(&self.head_dim) {
            return Err(ModelError::UnsupportedHeadDim {
                head_dim: self.head_dim,
            });
        }
        if self.group_size() * self.kv_heads != self.query_heads {
            return Err(ModelError::HeadsNotDivisible {
                query_heads: self.query_heads,
                kv_heads: self.kv_heads,
            });
        }
        let group = self.group_size();
        if !(1..=MAX_GROUP_SIZE).contains(&group) {
            return Err(ModelError::UnsupportedGroupSize {
                group,
                query_heads: self.query_heads,
                kv_heads: self.kv_heads,
            });
        }
        Ok(())
    }
}

/// What was wrong with a preset name or a `config.json`.
#[derive(Debug, Error)]
pub enum ModelError {
    /// No preset has this name.
    #[error("unknown model preset `{name}`; valid presets: {}", valid.join(", "))]
    UnknownPreset {
        /// The name asked for.
        name: String,
        /// Every accepted name, aliases included.
        valid: Vec<String>,
    },
    /// The text is not JSON (truncated, a stray comma ...).
    #[error("config.json is not valid JSON at line {line}, column {column}: {message}")]
    Json {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// serde_json's description.
        message: String,
    },
    /// A required field is absent.
    #[error("config.json has no `{field}`; it needs {expected}")]
    MissingField {
        /// The field, with its `text_config.` prefix where it was read from there.
        field: String,
        /// What the field must hold.
        expected: &'static str,
    },
    /// A field holds the wrong kind of JSON value.
    #[error("config.json field `{field}` is {found}; it must be {expected}")]
    WrongType {
        /// The field (`<root>` for the document itself).
        field: String,
        /// What the field must hold.
        expected: &'static str,
        /// What it holds, e.g. `the string "32"`.
        found: String,
    },
    /// A count is zero or negative.
    #[error("`{field}` is {value}; it must be a positive integer")]
    NotPositive {
        /// The field.
        field: String,
        /// Its value.
        value: i64,
    },
    /// Two spellings of one field (`num_hidden_layers` and ChatGLM's `num_layers`, say) hold
    /// different values.
    #[error(
        "config.json has `{field}` {value} and `{alias}` {alias_value}; they name the same \
         count and must agree"
    )]
    Conflicting {
        /// The standard name.
        field: String,
        /// Its value.
        value: usize,
        /// The other spelling.
        alias: String,
        /// Its value.
        alias_value: usize,
    },
    /// A count is larger than any model's.
    #[error("`{field}` is {value}; it must be at most {MAX_COUNT}")]
    TooLarge {
        /// The field.
        field: String,
        /// Its value.
        value: usize,
    },
    /// `head_dim` is absent and `hidden_size` is not a multiple of `num_attention_heads`.
    #[error(
        "config.json has no `head_dim`, and `hidden_size` {hidden_size} is not a multiple of \
         `num_attention_heads` {query_heads}; add `head_dim` to the config"
    )]
    HeadDimNotDerivable {
        /// `hidden_size`.
        hidden_size: usize,
        /// `num_attention_heads`.
        query_heads: usize,
    },
    /// The head dimension is not one the kernels are specialised for.
    #[error(
        "head dimension {head_dim} (`head_dim`, or `hidden_size / num_attention_heads`) is not \
         supported; allowed: 64, 80, 96, 128, 192, 256"
    )]
    UnsupportedHeadDim {
        /// `D`.
        head_dim: usize,
    },
    /// Query heads do not split evenly over KV heads.
    #[error(
        "{query_heads} query heads (`num_attention_heads`) cannot be shared evenly by \
         {kv_heads} KV heads (`num_key_value_heads`); the query heads must be a multiple of the KV heads"
    )]
    HeadsNotDivisible {
        /// `H_q`.
        query_heads: usize,
        /// `H_kv`.
        kv_heads: usize,
    },
    /// The group size `G = H_q / H_kv` is outside what the kernels support.
    #[error(
        "group size G = {query_heads} query heads (`num_attention_heads`) / {kv_heads} KV heads \
         (`num_key_value_heads`) = {group} is not supported; allowed: 1..=16"
    )]
    UnsupportedGroupSize {
        /// `G`.
        group: usize,
        /// `H_q`.
        query_heads: usize,
        /// `H_kv`.
        kv_heads: usize,
    },
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file was read but its contents are wrong; `source` says how.
    #[error("{}: {source}", path.display())]
    InFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: Box<ModelError>,
    },
}

impl ModelError {
    /// The error itself, seen through the file it came from ([`ModelError::InFile`]).
    pub fn root(&self) -> &ModelError {
        match self {
            ModelError::InFile { source, .. } => source.root(),
            other => other,
        }
    }
}

/// A named model shape from the table of SPEC §10.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preset {
    /// The canonical name, e.g. `qwen3-8b`.
    pub name: &'static str,
    /// Other names accepted by [`preset`].
    pub aliases: &'static [&'static str],
    /// The shape with an empty name, which [`Preset::shape`] fills in: a static table cannot
    /// hold a name's `String`.
    unnamed: ModelShape,
}

impl Preset {
    /// A row of the §10 table: `[L, H_q, H_kv, D]` in the table's order (`G` follows from them).
    const fn row(
        name: &'static str,
        aliases: &'static [&'static str],
        [layers, query_heads, kv_heads, head_dim]: [usize; 4],
        qk_norm: bool,
        basis: Basis,
    ) -> Preset {
        Preset {
            name,
            aliases,
            unnamed: ModelShape {
                name: String::new(),
                layers,
                query_heads,
                kv_heads,
                head_dim,
                qk_norm,
                basis,
            },
        }
    }

    /// The preset as a [`ModelShape`] named by its canonical name.
    pub fn shape(&self) -> ModelShape {
        ModelShape {
            name: self.name.to_string(),
            ..self.unnamed.clone()
        }
    }

    fn answers_to(&self, name: &str) -> bool {
        std::iter::once(&self.name)
            .chain(self.aliases)
            .any(|n| n.eq_ignore_ascii_case(name))
    }
}

static PRESETS: [Preset; 5] = [
    Preset::row("qwen3-8b", &[], [36, 32, 8, 128], true, Basis::Raw),
    Preset::row("qwen3-4b", &[], [36, 32, 8, 128], true, Basis::Raw),
    Preset::row(
        "qwen2.5-7b",
        &["qwen2.5-7b-instruct-1m"],
        [28, 28, 4, 128],
        false,
        Basis::Klt,
    ),
    Preset::row("llama-3.1-8b", &[], [32, 32, 8, 128], false, Basis::Klt),
    Preset::row("llama-3.1-70b", &[], [80, 64, 8, 128], false, Basis::Klt),
];

/// Every preset of SPEC §10, in the table's order.
pub fn presets() -> &'static [Preset] {
    &PRESETS
}

/// The preset called `name` (or one of its aliases; ASCII case is ignored).
pub fn preset(name: &str) -> Result<ModelShape, ModelError> {
    PRESETS
        .iter()
        .find(|p| p.answers_to(name))
        .map(Preset::shape)
        .ok_or_else(|| ModelError::UnknownPreset {
            name: name.to_string(),
            valid: PRESETS
                .iter()
                .flat_map(|p| std::iter::once(p.name).chain(p.aliases.iter().copied()))
                .map(str::to_string)
                .collect(),
        })
}

/// Reads the shape from the text of a Hugging Face `config.json` (see the module docs for the
/// fields), and validates it.
pub fn from_config_json(text: &str) -> Result<ModelShape, ModelError> {
    let root: Value = serde_json::from_str(text).map_err(|e| {
        // serde_json's message ends with its own position; ours carries it as fields.
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        ModelError::Json {
            line: e.line(),
            column: e.column(),
            message: full.strip_suffix(&suffix).unwrap_or(&full).to_string(),
        }
    })?;
    let root = root.as_object().ok_or_else(|| ModelError::WrongType {
        field: "<root>".to_string(),
        expected: "a JSON object",
        found: describe(&root),
    })?;
    let fields = Fields::of(root)?;

    let query_heads = fields.count("num_attention_heads")?;
    let layers = fields
        .spelled("num_hidden_layers", "num_layers")?
        .ok_or_else(|| ModelError::MissingField {
            field: fields.qualified("num_hidden_layers"),
            expected: "a positive integer (or ChatGLM's `num_layers`)",
        })?;
    // Hugging Face defaults a missing KV head count to the query heads (multi-head attention).
    let kv_heads = match fields.optional_count("num_key_value_heads")? {
        Some(kv) => kv,
        None => fields.chatglm_kv_groups()?.unwrap_or(query_heads),
    };
    let head_dim = match fields.spelled("head_dim", "kv_channels")? {
        Some(d) => d,
        None => {
            let hidden =
                fields
                    .optional_count("hidden_size")?
                    .ok_or_else(|| ModelError::MissingField {
                        field: fields.qualified("head_dim"),
                        expected: "a positive integer (or `hidden_size` to derive it from)",
                    })?;
            if hidden % query_heads != 0 {
                return Err(ModelError::HeadDimNotDerivable {
                    hidden_size: hidden,
                    query_heads,
                });
            }
            hidden / query_heads
        }
    };
    let model_type = fields.model_type()?;
    let qk_norm = model_type.starts_with("qwen3");
    let shape = ModelShape {
        name: model_type,
        layers,
        query_heads,
        kv_heads,
        head_dim,
        qk_norm,
        basis: Basis::for_qk_norm(qk_norm),
    };
    shape.validate()?;
    Ok(shape)
}

/// Reads and validates the `config.json` at `path`; errors name the file.
pub fn from_config_path(path: impl AsRef<Path>) -> Result<ModelShape, ModelError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    from_config_json(&text).map_err(|e| ModelError::InFile {
        path: path.to_path_buf(),
        source: Box::new(e),
    })
}

/// Where the attention fields are read from: the top level, or its `text_config`.
struct Fields<'a> {
    root: &'a Map<String, Value>,
    text: Option<&'a Map<String, Value>>,
}

impl<'a> Fields<'a> {
    fn of(root: &'a Map<String, Value>) -> Result<Self, ModelError> {
        let text = match root.get("text_config") {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => Some(map),
            Some(other) => {
                return Err(ModelError::WrongType {
                    field: "text_config".to_string(),
                    expected: "a JSON object",
                    found: describe(other),
                })
            }
        };
        Ok(Fields { root, text })
    }

    fn source(&self) -> &'a Map<String, Value> {
        self.text.unwrap_or(self.root)
    }

    fn qualified(&self, field: &str) -> String {
        match self.text {
            Some(_) => format!("text_config.{field}"),
            None => field.to_string(),
        }
    }

    /// A required positive integer.
    fn count(&self, field: &str) -> Result<usize, ModelError> {
        self.optional_count(field)?
            .ok_or_else(|| ModelError::MissingField {
                field: self.qualified(field),
                expected: "a positive integer",
            })
    }

    /// A positive integer that may be absent or `null`.
    fn optional_count(&self, field: &str) -> Result<Option<usize>, ModelError> {
        let value = match self.source().get(field) {
            None | Some(Value::Null) => return Ok(None),
            Some(v) => v,
        };
        let wrong_type = || ModelError::WrongType {
            field: self.qualified(field),
            expected: "a positive integer",
            found: describe(value),
        };
        let Value::Number(n) = value else {
            return Err(wrong_type());
        };
        if let Some(u) = n.as_u64() {
            if u == 0 {
                return Err(ModelError::NotPositive {
                    field: self.qualified(field),
                    value: 0,
                });
            }
            return usize::try_from(u).map(Some).map_err(|_| wrong_type());
        }
        match n.as_i64() {
            Some(negative) => Err(ModelError::NotPositive {
                field: self.qualified(field),
                value: negative,
            }),
            None => Err(wrong_type()),
        }
    }

    /// A positive integer that may be spelled `field` or `alias` (absent or `null` in both:
    /// `None`); where both are given they must agree.
    fn spelled(&self, field: &str, alias: &str) -> Result<Option<usize>, ModelError> {
        match (self.optional_count(field)?, self.optional_count(alias)?) {
            (Some(value), Some(alias_value)) if value != alias_value => {
                Err(ModelError::Conflicting {
                    field: self.qualified(field),
                    value,
                    alias: self.qualified(alias),
                    alias_value,
                })
            }
            (value, alias_value) => Ok(value.or(alias_value)),
        }
    }

    /// ChatGLM's KV heads: `multi_query_group_num` when `multi_query_attention` is true. Its
    /// modelling code reads the group count only then (and `multi_query_attention` defaults to
    /// false), so otherwise the model has one KV head per query head and this is `None`. The
    /// count is required then: its code default (1) is not a shape to guess.
    fn chatglm_kv_groups(&self) -> Result<Option<usize>, ModelError> {
        let field = "multi_query_attention";
        let grouped = match self.source().get(field) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(ModelError::WrongType {
                    field: self.qualified(field),
                    expected: "a boolean",
                    found: describe(other),
                })
            }
        };
        if !grouped {
            return Ok(None);
        }
        self.optional_count("multi_query_group_num")?
            .map(Some)
            .ok_or_else(|| ModelError::MissingField {
                field: self.qualified("multi_query_group_num"),
                expected:
                    "the KV head count (a positive integer), as `multi_query_attention` is true",
            })
    }

    /// `model_type`, from `text_config` when it has one, else from the top level.
    fn model_type(&self) -> Result<String, ModelError> {
        let (field, value) = match self.text.and_then(|t| t.get("model_type")) {
            Some(v) => ("text_config.model_type".to_string(), Some(v)),
            None => ("model_type".to_string(), self.root.get("model_type")),
        };
        match value {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            None | Some(Value::Null) => Err(ModelError::MissingField {
                field,
                expected: "a non-empty string such as \"qwen3\" or \"llama\"",
            }),
            Some(other) => Err(ModelError::WrongType {
                field,
                expected: "a non-empty string such as \"qwen3\" or \"llama\"",
                found: describe(other),
            }),
        }
    }
}

/// A short description of a JSON value for error messages.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "an array".to_string(),
        Value::Object(_) => "an object".to_string(),
    }
}
