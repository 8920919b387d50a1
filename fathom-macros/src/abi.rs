//! `abi!`: one argument struct per entry point of a family's signature, read from the rendered
//! source of a representative spec, so that every caller builds a kernel's argument list from
//! the template itself.
//!
//! ```text
//! #[fathom(runtime = path)]?
//! <attributes> <vis> mod <name> {
//!     <attributes> <variant> = <family>(<field> = <value>, ...);
//! }
//! ```
//!
//! Each line becomes a module `<variant>` holding, per entry point `<kernel>_<stage>`, a struct
//! `<Stage>Args` (`Args` for the family's one entry point) with one public field per kernel
//! parameter, in order, and its `KernelArgs` impl. The outer module gets `SIGNATURES`, every
//! struct's [`EntryAbi`](../runtime/launch/struct.EntryAbi.html), for the test that renders every
//! spec a family can take and checks that its signature is one of these.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{braced, parenthesized, Attribute, Ident, Path, Token, Visibility};

use codegen::signature::{self, Param};

use crate::expand::{param_type, ParamType};
use crate::input::{parse_fields, runtime_attr, Field};
use crate::specs::family_spec;

pub struct AbiInput {
    attrs: Vec<Attribute>,
    vis: Visibility,
    name: Ident,
    runtime: Path,
    variants: Vec<Variant>,
}

/// `<variant> = <family>(<fields>);`
struct Variant {
    attrs: Vec<Attribute>,
    name: Ident,
    family: Ident,
    fields: Vec<Field>,
}

impl Parse for AbiInput {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let (runtime, attrs) = runtime_attr(input.call(Attribute::parse_outer)?)?;
        let vis: Visibility = input.parse()?;
        input.parse::<Token![mod]>()?;
        let name: Ident = input.parse()?;
        let body;
        braced!(body in input);
        let mut variants = Vec::new();
        while !body.is_empty() {
            let attrs = body.call(Attribute::parse_outer)?;
            let name = Ident::parse_any(&body)?;
            body.parse::<Token![=]>()?;
            let family = Ident::parse_any(&body)?;
            let args;
            parenthesized!(args in body);
            let fields = parse_fields(&args)?;
            body.parse::<Token![;]>()?;
            variants.push(Variant {
                attrs,
                name,
                family,
                fields,
            });
        }
        Ok(AbiInput {
            attrs,
            vis,
            name,
            runtime,
            variants,
        })
    }
}

pub fn expand(input: AbiInput) -> syn::Result<TokenStream> {
    let AbiInput {
        attrs,
        vis,
        name,
        runtime: rt,
        variants,
    } = input;
    let mut body = TokenStream::new();
    let mut signatures = Vec::new();
    for variant in &variants {
        let (module, entries) = variant_module(variant, &rt)?;
        body.extend(module);
        signatures.extend(entries);
    }
    Ok(quote! {
        #(#attrs)*
        #vis mod #name {
            /// The ABI of every argument struct of this module, for the check that every spec a
            /// family renders has one of these signatures.
            pub const SIGNATURES: &[#rt::launch::EntryAbi] = &[#(#signatures),*];
            #body
        }
    })
}

/// The module of one variant and the `EntryAbi` paths of its structs.
fn variant_module(variant: &Variant, rt: &Path) -> syn::Result<(TokenStream, Vec<TokenStream>)> {
    let Variant {
        attrs,
        name,
        family,
        fields,
    } = variant;
    let spec = family_spec(family, fields)?;
    let error = |message: String| syn::Error::new_spanned(family, message);
    let kernel_name = spec.kernel_name();
    let source = codegen::render_any(&spec).map_err(|e| error(e.to_string()))?;
    let mut structs = TokenStream::new();
    let mut entries = Vec::new();
    for entry in spec.entry_points() {
        let params = signature::entry_params(&source, &entry)
            .map_err(|e| error(format!("kernel `{kernel_name}`: {e}")))?;
        let stage = entry
            .strip_prefix(&kernel_name)
            .unwrap_or(&entry)
            .trim_start_matches('_');
        let struct_name = format_ident!("{}Args", camel(stage));
        structs.extend(
            args_struct(
                &struct_name,
                spec.family(),
                &name.to_string(),
                stage,
                &entry,
                &params,
                rt,
            )
            .map_err(error)?,
        );
        entries.push(quote!(<#name::#struct_name as #rt::launch::KernelArgs>::ABI));
    }
    let doc = format!(
        "Argument structs of the `{}` family's entry points, read from the rendering of `{}`.",
        spec.family(),
        spec.fields_json()
    );
    Ok((
        quote! {
            #[doc = #doc]
            #(#attrs)*
            pub mod #name {
                #structs
            }
        },
        entries,
    ))
}

/// `pub struct <Stage>Args { <param>: <type>, ... }` and its `KernelArgs` impl.
fn args_struct(
    name: &Ident,
    family: &str,
    variant: &str,
    stage: &str,
    entry: &str,
    params: &[Param],
    rt: &Path,
) -> Result<TokenStream, String> {
    let mut fields = Vec::new();
    let mut args = Vec::new();
    for param in params {
        let field = field_name(&param.name);
        let doc = format!("`{}`", param.declaration);
        let (ty, arg) = match param_type(param, entry, rt)? {
            ParamType::Pointer(ptr) => (ptr, quote!(self.#field.arg())),
            ParamType::Value { ty, variant } => (ty, quote!(#rt::gpu::Arg::#variant(self.#field))),
        };
        fields.push(quote!(#[doc = #doc] pub #field: #ty));
        args.push(arg);
    }
    let canonical: Vec<String> = params.iter().map(Param::canonical).collect();
    let doc = format!(
        "The arguments of the `{family}` entry point `{entry}` (stage `{stage}`), in the \
         kernel's order: one field per CUDA parameter."
    );
    Ok(quote! {
        #[doc = #doc]
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub struct #name {
            #(#fields),*
        }

        impl #rt::launch::KernelArgs for #name {
            const ABI: #rt::launch::EntryAbi = #rt::launch::EntryAbi {
                family: #family,
                variant: #variant,
                stage: #stage,
                params: &[#(#canonical),*],
            };

            fn args(&self) -> ::std::vec::Vec<#rt::gpu::Arg> {
                ::std::vec![#(#args),*]
            }
        }
    })
}

/// `topc_count` → `TopcCount`; the empty stage (a family's only entry point) → ``.
fn camel(stage: &str) -> String {
    stage
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or(String::new(), |c| {
                c.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect()
}

/// The parameter's C name, unless it is a Rust keyword.
fn field_name(name: &str) -> Ident {
    syn::parse_str::<Ident>(name).unwrap_or_else(|_| format_ident!("{}_", name))
}
