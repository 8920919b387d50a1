//! The syntax of `kernels!`: a module whose body lists presets and specs.
//!
//! ```text
//! #[fathom(runtime = path)]?            // optional, the path of the runtime crate
//! <attributes> <vis> mod <name> {
//!     preset("<name>" (, <field> = <value>)*);
//!     <family>(<field> = <value> (, <field> = <value>)*);
//! }
//! value: integer | float | true | false | "string" | name | name(<field> = <value>, ...)
//! ```

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{braced, parenthesized, Attribute, Ident, Lit, LitStr, Path, Token, Visibility};

/// The whole macro input.
pub struct KernelsInput {
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub name: Ident,
    /// The runtime crate's path, `::runtime` unless `#[fathom(runtime = ...)]` says otherwise.
    pub runtime: Path,
    pub items: Vec<Item>,
}

/// One line of the module body.
pub enum Item {
    /// `preset("qwen3-8b", block = 64)`: the preset's default kernel set.
    Preset { name: LitStr, options: Vec<Field> },
    /// `scan(head_dim = 128, ...)`: one spec of the family `family`.
    Spec { family: Ident, fields: Vec<Field> },
}

/// `name = value`.
pub struct Field {
    pub name: Ident,
    pub value: Value,
}

/// A field value and the tokens it was written with (errors point at them).
pub struct Value {
    pub kind: ValueKind,
    pub tokens: TokenStream,
}

pub enum ValueKind {
    /// A literal; a leading minus sign is folded into the JSON number.
    Lit { lit: Lit, negative: bool },
    /// A bare name: an enum variant such as `hbm` or `fathom`.
    Name(Ident),
    /// `sparq(r = 16)`: a variant with fields.
    Variant { name: Ident, fields: Vec<Field> },
}

impl Parse for KernelsInput {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let (runtime, kept) = runtime_attr(input.call(Attribute::parse_outer)?)?;
        let vis: Visibility = input.parse()?;
        input.parse::<Token![mod]>()?;
        let name: Ident = input.parse()?;
        let body;
        braced!(body in input);
        let mut items = Vec::new();
        while !body.is_empty() {
            items.push(body.parse()?);
        }
        if !input.is_empty() {
            return Err(input.error("expected nothing after the module"));
        }
        Ok(KernelsInput {
            attrs: kept,
            vis,
            name,
            runtime,
            items,
        })
    }
}

/// The runtime's path from a `#[fathom(runtime = path)]` among `attrs` (`::runtime` without
/// one), and the other attributes.
pub fn runtime_attr(attrs: Vec<Attribute>) -> syn::Result<(Path, Vec<Attribute>)> {
    let mut runtime: Path = syn::parse_quote!(::runtime);
    let mut kept = Vec::with_capacity(attrs.len());
    for attr in attrs {
        if attr.path().is_ident("fathom") {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("runtime") {
                    runtime = meta.value()?.parse()?;
                    Ok(())
                } else {
                    Err(meta.error("unknown fathom option; options: `runtime = <path>`"))
                }
            })?;
        } else {
            kept.push(attr);
        }
    }
    Ok((runtime, kept))
}

impl Parse for Item {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let call = Ident::parse_any(input)?;
        let args;
        parenthesized!(args in input);
        let item = if call == "preset" {
            let name: LitStr = args.parse().map_err(|e| {
                syn::Error::new(
                    e.span(),
                    "expected the preset's name: `preset(\"qwen3-8b\")`",
                )
            })?;
            let mut options = Vec::new();
            if !args.is_empty() {
                args.parse::<Token![,]>()?;
                options = parse_fields(&args)?;
            }
            Item::Preset { name, options }
        } else {
            Item::Spec {
                family: call,
                fields: parse_fields(&args)?,
            }
        };
        input.parse::<Token![;]>()?;
        Ok(item)
    }
}

pub fn parse_fields(input: ParseStream) -> syn::Result<Vec<Field>> {
    Ok(Punctuated::<Field, Token![,]>::parse_terminated(input)?
        .into_iter()
        .collect())
}

impl Parse for Field {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name = Ident::parse_any(input)?;
        input.parse::<Token![=]>()?;
        Ok(Field {
            name,
            value: input.parse()?,
        })
    }
}

impl Parse for Value {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut tokens = TokenStream::new();
        let kind = if input.peek(Lit) {
            let lit: Lit = input.parse()?;
            lit.to_tokens(&mut tokens);
            ValueKind::Lit {
                lit,
                negative: false,
            }
        } else if input.peek(Token![-]) {
            let minus: Token![-] = input.parse()?;
            let lit: Lit = input.parse()?;
            minus.to_tokens(&mut tokens);
            lit.to_tokens(&mut tokens);
            ValueKind::Lit {
                lit,
                negative: true,
            }
        } else if input.peek(Ident::peek_any) {
            let name = Ident::parse_any(input)?;
            name.to_tokens(&mut tokens);
            if input.peek(syn::token::Paren) {
                let args;
                let paren = parenthesized!(args in input);
                let fields = parse_fields(&args)?;
                paren.surround(&mut tokens, |t| {
                    for field in &fields {
                        field.name.to_tokens(t);
                        field.value.tokens.to_tokens(t);
                    }
                });
                ValueKind::Variant { name, fields }
            } else {
                ValueKind::Name(name)
            }
        } else {
            return Err(input.error(
                "expected a value: an integer, `true` or `false`, a string, a name such as \
                 `hbm`, or a variant with fields such as `sparq(r = 16)`",
            ));
        };
        Ok(Value { kind, tokens })
    }
}
