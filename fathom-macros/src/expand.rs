//! The generated module: sources, entry-point names and one typed launcher per entry point.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{Ident, Path};

use crate::input::KernelsInput;
use crate::specs::{self, Located};
use codegen::signature::{self as cuda, CType, Param, Scalar};

/// Parameter names of every launcher; a kernel parameter of the same name gets a `_` suffix.
const FIXED_PARAMS: [&str; 3] = ["gpu", "function", "launch"];

pub fn expand(input: KernelsInput) -> syn::Result<TokenStream> {
    let KernelsInput {
        attrs,
        vis,
        name,
        runtime,
        items,
    } = input;
    let kernels = specs::collect(items)?;
    let mut body = TokenStream::new();
    let mut sources = Vec::new();
    for located in &kernels {
        let (tokens, source_const) = kernel(located, &runtime)?;
        body.extend(tokens);
        let kernel_name = located.spec.kernel_name();
        sources.push(quote!((#kernel_name, #source_const)));
    }
    Ok(quote! {
        #(#attrs)*
        #vis mod #name {
            /// Every kernel of this module as `(kernel name, CUDA source)`, in the order listed.
            pub const SOURCES: &[(&str, &str)] = &[#(#sources),*];
            #body
        }
    })
}

/// The source constant, entry-name constants and launchers of one kernel.
fn kernel(located: &Located, runtime: &Path) -> syn::Result<(TokenStream, Ident)> {
    let Located { spec, origin } = located;
    let error = |message: String| syn::Error::new_spanned(origin, message);
    let kernel_name = spec.kernel_name();
    let source = codegen::render_any(spec).map_err(|e| error(e.to_string()))?;
    let source_const = format_ident!("{}_SOURCE", kernel_name.to_uppercase());
    let source_doc = format!(
        "CUDA source of the `{}` kernel `{kernel_name}`, spec `{}`.",
        spec.family(),
        spec.fields_json()
    );
    let mut tokens = quote! {
        #[doc = #source_doc]
        pub const #source_const: &str = #source;
    };
    for entry in spec.entry_points() {
        let params = cuda::entry_params(&source, &entry)
            .map_err(|e| error(format!("kernel `{kernel_name}`: {e}")))?;
        let entry_const = format_ident!("{}_ENTRY", entry.to_uppercase());
        let entry_doc = format!(
            "Name of the entry point `{entry}` in [`{source_const}`], for `Module::function`."
        );
        tokens.extend(quote! {
            #[doc = #entry_doc]
            pub const #entry_const: &str = #entry;
        });
        tokens.extend(launcher(&entry, &source_const, &params, runtime).map_err(error)?);
    }
    Ok((tokens, source_const))
}

/// `pub fn <entry>(gpu, function, launch, <one typed argument per kernel parameter>)`.
fn launcher(
    entry: &str,
    source_const: &Ident,
    params: &[Param],
    rt: &Path,
) -> Result<TokenStream, String> {
    let mut names = Vec::new();
    let mut types = Vec::new();
    let mut args = Vec::new();
    for param in params {
        let name = rust_name(&param.name);
        let (ty, arg) = match param_type(param, entry, rt)? {
            ParamType::Pointer(ptr) => (
                quote!(impl ::core::convert::Into<#ptr>),
                quote!(::core::convert::Into::<#ptr>::into(#name).arg()),
            ),
            ParamType::Value { ty, variant } => (ty, quote!(#rt::gpu::Arg::#variant(#name))),
        };
        names.push(name);
        types.push(ty);
        args.push(arg);
    }
    let signature: Vec<String> = params
        .iter()
        .map(|p| format!("- `{}`", p.declaration))
        .collect();
    let doc = format!(
        "Launches `{entry}` (source [`{source_const}`]) on `gpu`'s stream; `function` is that \
         entry point of the loaded module.\n\nCUDA parameters, in order:\n\n{}",
        signature.join("\n")
    );
    let fn_name = format_ident!("{}", entry);
    Ok(quote! {
        #[doc = #doc]
        #[allow(clippy::too_many_arguments)]
        pub fn #fn_name(
            gpu: &#rt::gpu::Gpu,
            function: &#rt::launch::CudaFunction,
            launch: #rt::launch::Launch,
            #(#names: #types),*
        ) -> ::core::result::Result<(), #rt::gpu::GpuError> {
            gpu.launch(
                function,
                (launch.grid[0], launch.grid[1], launch.grid[2]),
                (launch.block[0], launch.block[1], launch.block[2]),
                launch.shared_bytes,
                &[#(#args),*],
            )
        }
    })
}

/// How a parameter travels: a typed device pointer, or a value and its `Arg` variant.
pub(crate) enum ParamType {
    Pointer(TokenStream),
    Value { ty: TokenStream, variant: Ident },
}

/// The Rust type of `param` of `entry`; values are the four kinds an `Arg` carries.
pub(crate) fn param_type(param: &Param, entry: &str, rt: &Path) -> Result<ParamType, String> {
    let value = |ty: TokenStream, variant: &str| ParamType::Value {
        ty,
        variant: format_ident!("{}", variant),
    };
    Ok(match &param.ty {
        CType::Ptr { .. } => ParamType::Pointer(pointer_type(&param.ty, rt)),
        CType::Scalar(Scalar::I32) => value(quote!(i32), "I32"),
        CType::Scalar(Scalar::U32) => value(quote!(u32), "U32"),
        CType::Scalar(Scalar::U64) => value(quote!(u64), "U64"),
        CType::Scalar(Scalar::F32) => value(quote!(f32), "F32"),
        CType::Scalar(other) => {
            return Err(format!(
                "parameter `{}` of `{entry}` is passed by value as {other:?}, which kernel \
                 arguments cannot carry (int, unsigned int, unsigned long long, float)",
                param.declaration
            ))
        }
    })
}

/// The Rust type of a pointer parameter: const pointees are read-only pointers, others writable.
fn pointer_type(ty: &CType, rt: &Path) -> TokenStream {
    match ty {
        CType::Scalar(scalar) => scalar_type(*scalar),
        CType::Ptr {
            pointee,
            pointee_const,
        } => {
            let inner = pointer_type(pointee, rt);
            if *pointee_const {
                quote!(#rt::launch::DevicePtr<#inner>)
            } else {
                quote!(#rt::launch::DevicePtrMut<#inner>)
            }
        }
    }
}

fn scalar_type(scalar: Scalar) -> TokenStream {
    match scalar {
        Scalar::Void => quote!(::core::ffi::c_void),
        Scalar::I8 => quote!(i8),
        Scalar::U8 => quote!(u8),
        Scalar::I16 => quote!(i16),
        Scalar::U16 => quote!(u16),
        Scalar::I32 => quote!(i32),
        Scalar::U32 => quote!(u32),
        Scalar::I64 => quote!(i64),
        Scalar::U64 => quote!(u64),
        Scalar::F32 => quote!(f32),
        Scalar::F64 => quote!(f64),
        Scalar::U32x2 => quote!([u32; 2]),
        Scalar::U32x4 => quote!([u32; 4]),
    }
}

/// The parameter's C name, unless it is a Rust keyword or a launcher's own parameter.
pub(crate) fn rust_name(name: &str) -> Ident {
    match syn::parse_str::<Ident>(name) {
        Ok(ident) if !FIXED_PARAMS.contains(&name) => ident,
        _ => format_ident!("{}_", name),
    }
}
