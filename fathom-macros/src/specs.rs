//! From the parsed items to validated [`KernelSpec`]s, every error pointing at the argument
//! that caused it.
//!
//! A spec is deserialised from a JSON object built out of the arguments, with the family as the
//! `family` tag, so a field added to a spec struct is accepted here with no change. Serde reports
//! a bad value without saying which field it came from, so the fields are added one at a time
//! and the first one whose addition brings an error other than "missing field" is at fault.

use codegen::model::{self, ModelShape};
use codegen::spec::{
    AppendRowsSpec, AttentionSpec, ConvertSpec, EncodeSpec, Family, FetchSpec, GatherSpec,
    LandmarkSpec, MappedReadSpec, OracleSpec, PariskvIndexSpec, PariskvQuerySpec,
    PariskvRerankSpec, PariskvTopcSpec, PariskvVoteSpec, PlanSpec, ScanSpec, SelectSpec,
};
use codegen::{kernels_for, KernelSetOptions, KernelSpec};
use quote::ToTokens;
use serde::de::{self, Deserializer, Visitor};
use serde_json::{Map, Value as Json};
use syn::{Ident, Lit};

use crate::input::{Field, Item, Value, ValueKind};

/// The key of the tag of a tagged enum value written `name` or `name(...)` (the plan method).
const VARIANT_TAG: &str = "kind";

/// A spec to render and the tokens its errors point at: the preset's name or the family's.
pub struct Located {
    pub spec: KernelSpec,
    pub origin: proc_macro2::TokenStream,
}

/// The specs of every item, in order; a kernel listed twice (by name) is kept once.
pub fn collect(items: Vec<Item>) -> syn::Result<Vec<Located>> {
    let mut out: Vec<Located> = Vec::new();
    let mut errors: Option<syn::Error> = None;
    for item in items {
        let found = match item {
            Item::Preset { name, options } => preset_specs(&name, &options).map(|specs| {
                specs
                    .into_iter()
                    .map(|spec| Located {
                        spec,
                        origin: name.to_token_stream(),
                    })
                    .collect()
            }),
            Item::Spec { family, fields } => family_spec(&family, &fields).map(|spec| {
                vec![Located {
                    spec,
                    origin: family.to_token_stream(),
                }]
            }),
        };
        match found {
            Ok(specs) => {
                for located in specs {
                    let name = located.spec.kernel_name();
                    if !out.iter().any(|l| l.spec.kernel_name() == name) {
                        out.push(located);
                    }
                }
            }
            // Every bad item is reported, not only the first.
            Err(e) => match errors.as_mut() {
                Some(all) => all.combine(e),
                None => errors = Some(e),
            },
        }
    }
    match errors {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// `preset("name", block = .., segment_words = ..)`.
fn preset_specs(name: &syn::LitStr, options: &[Field]) -> syn::Result<Vec<KernelSpec>> {
    let shape: ModelShape =
        model::preset(&name.value()).map_err(|e| syn::Error::new_spanned(name, e))?;
    let mut set = KernelSetOptions::default();
    for option in options {
        let slot = match option.name.to_string().as_str() {
            "block" => &mut set.block,
            "segment_words" => &mut set.segment_words,
            other => {
                return Err(syn::Error::new_spanned(
                    &option.name,
                    format!("unknown preset option `{other}`; options: block, segment_words"),
                ))
            }
        };
        *slot = match &option.value.kind {
            ValueKind::Lit {
                lit: Lit::Int(int),
                negative: false,
            } => int.base10_parse()?,
            _ => {
                return Err(syn::Error::new_spanned(
                    &option.value.tokens,
                    format!("preset option `{}` takes a positive integer", option.name),
                ))
            }
        };
    }
    let specs = kernels_for(&shape, &set);
    for spec in &specs {
        spec.validate().map_err(|e| {
            let message = format!("preset `{}`: {e}", name.value());
            match options.iter().find(|o| o.name == e.field) {
                Some(option) => syn::Error::new_spanned(&option.value.tokens, message),
                None => syn::Error::new_spanned(name, message),
            }
        })?;
    }
    Ok(specs)
}

/// `family(field = value, ...)`: deserialised, then validated.
pub fn family_spec(family: &Ident, fields: &[Field]) -> syn::Result<KernelSpec> {
    let family_name = family.to_string();
    let known = fields_of(&family_name).ok_or_else(|| {
        let families: Vec<&str> = FAMILIES.iter().map(|(name, _)| *name).collect();
        syn::Error::new_spanned(
            family,
            format!(
                "unknown kernel family `{family_name}`; families: {}, or `preset(\"<model>\")`",
                families.join(", ")
            ),
        )
    })?;
    for (i, field) in fields.iter().enumerate() {
        let name = field.name.to_string();
        if !known.contains(&name.as_str()) {
            return Err(syn::Error::new_spanned(
                &field.name,
                format!(
                    "unknown {family_name} field `{name}`; fields: {}",
                    known.join(", ")
                ),
            ));
        }
        if fields[..i].iter().any(|f| f.name == field.name) {
            return Err(syn::Error::new_spanned(
                &field.name,
                format!("{family_name} field `{name}` is given twice"),
            ));
        }
    }

    // Resolve each value (a bare name may be a plain string or a tagged variant), stopping at
    // the first field whose value serde rejects: with the fields before it accepted, an error
    // other than a missing field is this field's.
    let mut object = Map::new();
    object.insert("family".into(), Json::String(family_name.clone()));
    for field in fields {
        let mut rejection = None;
        for candidate in to_json(&field.value)? {
            object.insert(field.name.to_string(), candidate);
            match deserialise(&object) {
                Err(e) if !is_missing_top_level(&e, known) => {
                    rejection.get_or_insert(e);
                }
                _ => {
                    rejection = None;
                    break;
                }
            }
        }
        if let Some(message) = rejection {
            return Err(syn::Error::new_spanned(
                &field.value.tokens,
                format!("invalid {family_name} field `{}`: {message}", field.name),
            ));
        }
    }

    let spec = deserialise(&object).map_err(|message| {
        let optional = defaulted_fields(&family_name);
        let missing: Vec<String> = known
            .iter()
            .filter(|k| !fields.iter().any(|f| f.name == k) && !optional.contains(k))
            .map(|k| format!("`{k}`"))
            .collect();
        let message = if missing.is_empty() {
            format!("invalid {family_name} spec: {message}")
        } else {
            format!(
                "the {family_name} spec is missing {}; its fields: {}",
                missing.join(", "),
                known.join(", ")
            )
        };
        syn::Error::new_spanned(family, message)
    })?;
    spec.validate().map_err(|e| match locate(fields, e.field) {
        Some(value) => syn::Error::new_spanned(&value.tokens, &e),
        None => syn::Error::new_spanned(family, &e),
    })?;
    Ok(spec)
}

/// The value written for the field `path`, `method.r` naming the field `r` of the variant given
/// to `method` (the value itself when that has no such field).
fn locate<'a>(fields: &'a [Field], path: &str) -> Option<&'a Value> {
    let (head, rest) = match path.split_once('.') {
        Some((head, rest)) => (head, Some(rest)),
        None => (path, None),
    };
    let value = &fields.iter().find(|f| f.name == head)?.value;
    match (&value.kind, rest) {
        (ValueKind::Variant { fields, .. }, Some(rest)) => locate(fields, rest).or(Some(value)),
        _ => Some(value),
    }
}

/// Whether serde's `message` is about a field of the spec itself that is not given yet (while
/// the fields are added one by one), rather than one inside a value such as `sparq()`'s `r`.
/// The fields of `family` that a spec may leave out (serde gives them their default, e.g.
/// `kv_rows`), found on a valid spec of the family: each field whose removal still
/// deserialises, and each the sample leaves out when written (a default serde skips, such as
/// `SelectSpec::coarse_floor`'s false). Empty for a family without a sample.
fn defaulted_fields(family: &str) -> Vec<&'static str> {
    let mut samples: Vec<KernelSpec> = vec![
        AppendRowsSpec::default().into(),
        MappedReadSpec::default().into(),
    ];
    if let Ok(shape) = model::preset("qwen3-8b") {
        samples.extend(kernels_for(&shape, &KernelSetOptions::default()));
    }
    let Some(sample) = samples.iter().find(|s| s.family() == family) else {
        return Vec::new();
    };
    let Ok(Json::Object(full)) = serde_json::to_value(sample) else {
        return Vec::new();
    };
    fields_of(family)
        .unwrap_or(&[])
        .iter()
        .copied()
        .filter(|field| {
            let mut without = full.clone();
            match without.remove(*field) {
                Some(_) => deserialise(&without).is_ok(),
                None => true,
            }
        })
        .collect()
}

fn is_missing_top_level(message: &str, known: &[&str]) -> bool {
    message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next())
        .is_some_and(|field| known.contains(&field))
}

fn deserialise(object: &Map<String, Json>) -> Result<KernelSpec, String> {
    serde_json::from_value(Json::Object(object.clone())).map_err(|e| e.to_string())
}

/// The JSON values a written value may stand for, the likeliest first.
fn to_json(value: &Value) -> syn::Result<Vec<Json>> {
    let json = match &value.kind {
        ValueKind::Lit { lit, negative } => vec![literal(lit, *negative, value)?],
        // `hbm` (a plain enum) or `fathom` (a unit variant of a tagged enum).
        ValueKind::Name(name) => vec![
            Json::String(name.to_string()),
            Json::Object(Map::from_iter([(
                VARIANT_TAG.to_string(),
                Json::String(name.to_string()),
            )])),
        ],
        ValueKind::Variant { name, fields } => {
            let mut object = Map::new();
            object.insert(VARIANT_TAG.into(), Json::String(name.to_string()));
            for field in fields {
                let first = to_json(&field.value)?.swap_remove(0);
                object.insert(field.name.to_string(), first);
            }
            vec![Json::Object(object)]
        }
    };
    Ok(json)
}

fn literal(lit: &Lit, negative: bool, value: &Value) -> syn::Result<Json> {
    let sign = if negative { "-" } else { "" };
    let number = |text: String| {
        serde_json::from_str::<Json>(&text).map_err(|_| {
            syn::Error::new_spanned(&value.tokens, format!("`{text}` is not a number"))
        })
    };
    match lit {
        Lit::Int(int) => number(format!("{sign}{}", int.base10_digits())),
        Lit::Float(float) => number(format!("{sign}{}", float.base10_digits())),
        Lit::Bool(b) if !negative => Ok(Json::Bool(b.value)),
        Lit::Str(s) if !negative => Ok(Json::String(s.value())),
        _ => Err(syn::Error::new_spanned(
            value.tokens.to_token_stream(),
            "expected a number, `true`, `false`, a string or a name",
        )),
    }
}

/// Gives the field names of one spec struct.
type FieldList = fn() -> &'static [&'static str];

/// Every family and its spec's field names, in declaration order.
const FAMILIES: &[(&str, FieldList)] = &[
    (EncodeSpec::FAMILY, field_names::<EncodeSpec>),
    (PlanSpec::FAMILY, field_names::<PlanSpec>),
    (GatherSpec::FAMILY, field_names::<GatherSpec>),
    (ScanSpec::FAMILY, field_names::<ScanSpec>),
    (OracleSpec::FAMILY, field_names::<OracleSpec>),
    (LandmarkSpec::FAMILY, field_names::<LandmarkSpec>),
    (SelectSpec::FAMILY, field_names::<SelectSpec>),
    (FetchSpec::FAMILY, field_names::<FetchSpec>),
    (AttentionSpec::FAMILY, field_names::<AttentionSpec>),
    (PariskvIndexSpec::FAMILY, field_names::<PariskvIndexSpec>),
    (PariskvQuerySpec::FAMILY, field_names::<PariskvQuerySpec>),
    (PariskvVoteSpec::FAMILY, field_names::<PariskvVoteSpec>),
    (PariskvTopcSpec::FAMILY, field_names::<PariskvTopcSpec>),
    (PariskvRerankSpec::FAMILY, field_names::<PariskvRerankSpec>),
    (MappedReadSpec::FAMILY, field_names::<MappedReadSpec>),
    (AppendRowsSpec::FAMILY, field_names::<AppendRowsSpec>),
    (ConvertSpec::FAMILY, field_names::<ConvertSpec>),
];

fn fields_of(family: &str) -> Option<&'static [&'static str]> {
    FAMILIES
        .iter()
        .find(|(name, _)| *name == family)
        .map(|(_, fields)| fields())
}

/// The field names a struct's `Deserialize` asks for: serde hands them to
/// `Deserializer::deserialize_struct`, which [`FieldNames`] records and then fails.
fn field_names<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    let mut names = FieldNames(&[]);
    let _ = T::deserialize(&mut names);
    names.0
}

struct FieldNames(&'static [&'static str]);

#[derive(Debug)]
struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("field names recorded")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<M: std::fmt::Display>(_: M) -> Self {
        Stop
    }
}

impl<'de> Deserializer<'de> for &mut FieldNames {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        self.0 = fields;
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_of_kernel_spec_is_listed() {
        // Serde names every variant when the tag is unknown.
        let message = serde_json::from_value::<KernelSpec>(serde_json::json!({"family": "?"}))
            .unwrap_err()
            .to_string();
        let variants: Vec<&str> = message.split('`').skip(3).step_by(2).collect();
        let listed: Vec<&str> = FAMILIES.iter().map(|(name, _)| *name).collect();
        assert_eq!(variants, listed, "{message}");
    }

    #[test]
    fn field_names_follow_the_struct() {
        assert_eq!(
            fields_of("select").unwrap(),
            [
                "group",
                "k_max",
                "threads",
                "items_per_thread",
                "algorithm",
                "coarse_floor",
                "owned_tiles"
            ]
        );
        assert_eq!(fields_of("scan").unwrap().len(), 9);
        assert!(fields_of("nope").is_none());
    }

    /// A missing field is reported only when the spec needs it: the fields serde defaults are
    /// found on a sample of the family.
    #[test]
    fn defaulted_fields_are_those_serde_fills_in() {
        for family in [
            "oracle",
            "landmark",
            "fetch",
            "encode",
            "pariskv_index",
            "append_rows",
        ] {
            assert_eq!(defaulted_fields(family), ["kv_rows"], "{family}");
        }
        assert_eq!(
            defaulted_fields("select"),
            ["algorithm", "coarse_floor", "owned_tiles"]
        );
        assert_eq!(
            defaulted_fields("pariskv_rerank"),
            ["vector_loads", "select", "decode_table"]
        );
        assert_eq!(defaulted_fields("scan"), ["tensor_cores", "peaks"]);
        assert_eq!(
            defaulted_fields("attention"),
            [
                "rows",
                "kv_rows",
                "splits",
                "cluster_merge",
                "prefetch_rows"
            ]
        );
        assert!(defaulted_fields("nope").is_empty());
    }
}
