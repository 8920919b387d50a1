//! Reads the parameter list of an `extern "C" __global__` entry point out of a rendered source,
//! so that the launchers and argument structs (`fathom_macros::kernels!`, `fathom_macros::abi!`)
//! follow the templates (the single source of truth) without a second copy of every signature,
//! and so that a test can check a rendered kernel against the structs generated at build time
//! ([`Param::canonical`]).

use std::fmt;

/// A C scalar type the kernels use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    Void,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
    /// CUDA's `uint2` (`{x, y}` of `unsigned int`), as pointees only.
    U32x2,
    /// CUDA's `uint4`, as pointees only.
    U32x4,
}

impl Scalar {
    /// The C spelling the canonical form uses.
    fn c_name(self) -> &'static str {
        match self {
            Scalar::Void => "void",
            Scalar::I8 => "signed char",
            Scalar::U8 => "unsigned char",
            Scalar::I16 => "short",
            Scalar::U16 => "unsigned short",
            Scalar::I32 => "int",
            Scalar::U32 => "unsigned int",
            Scalar::I64 => "long long",
            Scalar::U64 => "unsigned long long",
            Scalar::F32 => "float",
            Scalar::F64 => "double",
            Scalar::U32x2 => "uint2",
            Scalar::U32x4 => "uint4",
        }
    }

    /// The scalar named by the type words of a declaration (`const` already removed), in any
    /// order (`unsigned long long`, `long long unsigned int` ...).
    fn from_words(words: &[&str]) -> Option<Scalar> {
        let mut sorted: Vec<&str> = words.to_vec();
        sorted.sort_unstable();
        let scalar = match sorted.join(" ").as_str() {
            "void" => Scalar::Void,
            "char" | "char signed" | "int8_t" => Scalar::I8,
            "char unsigned" | "uint8_t" => Scalar::U8,
            "short" | "int short" | "short signed" | "int short signed" | "int16_t" => Scalar::I16,
            "short unsigned" | "int short unsigned" | "uint16_t" => Scalar::U16,
            "int" | "signed" | "int signed" | "int32_t" => Scalar::I32,
            "unsigned" | "int unsigned" | "uint32_t" => Scalar::U32,
            "long long" | "int long long" | "long long signed" | "int64_t" => Scalar::I64,
            "long long unsigned" | "int long long unsigned" | "uint64_t" | "size_t" => Scalar::U64,
            "float" => Scalar::F32,
            "double" => Scalar::F64,
            "uint2" => Scalar::U32x2,
            "uint4" => Scalar::U32x4,
            _ => return None,
        };
        Some(scalar)
    }
}

/// The type of one parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CType {
    Scalar(Scalar),
    /// A pointer; `pointee_const` is whether the kernel may not write through it.
    Ptr {
        pointee: Box<CType>,
        pointee_const: bool,
    },
}

/// One parameter of an entry point, with its declaration as written (for docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    pub name: String,
    pub ty: CType,
    pub declaration: String,
}

impl CType {
    /// The type in one spelling, without qualifiers that do not change the ABI
    /// (`__restrict__`, a `const` on the pointer itself): `const unsigned short* const*`.
    pub fn canonical(&self) -> String {
        match self {
            CType::Scalar(s) => s.c_name().to_string(),
            CType::Ptr {
                pointee,
                pointee_const,
            } => match (pointee.as_ref(), pointee_const) {
                (CType::Scalar(s), true) => format!("const {}*", s.c_name()),
                (CType::Scalar(s), false) => format!("{}*", s.c_name()),
                (inner, true) => format!("{} const*", inner.canonical()),
                (inner, false) => format!("{}*", inner.canonical()),
            },
        }
    }
}

impl Param {
    /// `<canonical type> <name>`: what two renderings of one ABI have in common.
    pub fn canonical(&self) -> String {
        format!("{} {}", self.ty.canonical(), self.name)
    }
}

/// Why a signature could not be read: a template the macro does not understand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignatureError(pub String);

impl fmt::Display for SignatureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The parameters of the `extern "C" __global__` function `entry` in `source`, in order.
pub fn entry_params(source: &str, entry: &str) -> Result<Vec<Param>, SignatureError> {
    let tokens = tokenize(source);
    let open = find_entry(&tokens, entry).ok_or_else(|| {
        SignatureError(format!(
            "the rendered source has no `extern \"C\" __global__` function `{entry}`"
        ))
    })?;
    let mut depth = 0usize;
    let mut params: Vec<Vec<&str>> = vec![Vec::new()];
    for &token in &tokens[open + 1..] {
        match token {
            "(" => depth += 1,
            ")" if depth == 0 => {
                return params
                    .into_iter()
                    .filter(|p| !(p.is_empty() || p == &["void"]))
                    .map(|p| parse_param(&p, entry))
                    .collect();
            }
            ")" => depth -= 1,
            "," if depth == 0 => {
                params.push(Vec::new());
                continue;
            }
            _ => {}
        }
        params.last_mut().expect("never empty").push(token);
    }
    Err(SignatureError(format!(
        "the parameter list of `{entry}` is not closed"
    )))
}

/// The index of the `(` that opens the parameter list of the entry point `entry`: the first
/// `entry (` whose declaration (since the previous `;`, `{` or `}`) says `extern` and `__global__`.
fn find_entry(tokens: &[&str], entry: &str) -> Option<usize> {
    let mut start = 0;
    for (i, &token) in tokens.iter().enumerate() {
        match token {
            ";" | "{" | "}" => start = i + 1,
            _ if token == entry && tokens.get(i + 1) == Some(&"(") => {
                let declaration = &tokens[start..i];
                if declaration.contains(&"extern") && declaration.contains(&"__global__") {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// `const unsigned short* const* __restrict__ k_rows` and the like.
fn parse_param(tokens: &[&str], entry: &str) -> Result<Param, SignatureError> {
    let declaration = tokens.join(" ").replace(" *", "*");
    let unsupported = |why: &str| {
        SignatureError(format!(
            "parameter `{declaration}` of `{entry}`: {why}; launchers take pointers and \
             int, unsigned int, unsigned long long or float values"
        ))
    };
    let tokens: Vec<&str> = tokens
        .iter()
        .copied()
        .filter(|t| !matches!(*t, "__restrict__" | "__restrict" | "restrict" | "volatile"))
        .collect();
    let (name, type_tokens) = match tokens.split_last() {
        Some((name, rest)) if is_identifier(name) && !rest.is_empty() => (*name, rest),
        _ => return Err(unsupported("no parameter name")),
    };
    let first_star = type_tokens
        .iter()
        .position(|t| *t == "*")
        .unwrap_or(type_tokens.len());
    let (base, stars) = type_tokens.split_at(first_star);
    let mut is_const = base.contains(&"const");
    let words: Vec<&str> = base.iter().copied().filter(|t| *t != "const").collect();
    let scalar = Scalar::from_words(&words).ok_or_else(|| unsupported("unknown type"))?;
    let mut ty = CType::Scalar(scalar);
    let mut rest = stars;
    while let Some((star, tail)) = rest.split_first() {
        if *star != "*" {
            return Err(unsupported("unexpected token in the type"));
        }
        ty = CType::Ptr {
            pointee: Box::new(ty),
            pointee_const: is_const,
        };
        // A `const` right after a `*` qualifies that pointer, i.e. the next level's pointee.
        is_const = tail.first() == Some(&"const");
        rest = if is_const { &tail[1..] } else { tail };
    }
    if ty == CType::Scalar(Scalar::Void) {
        return Err(unsupported("a `void` value"));
    }
    Ok(Param {
        name: name.to_string(),
        ty,
        declaration,
    })
}

fn is_identifier(token: &str) -> bool {
    let mut chars = token.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// C tokens of `source` without comments, preprocessor lines and literal contents: identifiers,
/// numbers, string literals (whole) and single punctuation characters.
fn tokenize(source: &str) -> Vec<&str> {
    let bytes = source.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    let mut line_start = true;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'\n' {
            line_start = true;
            i += 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if line_start && c == b'#' {
            // A directive runs to the end of the line, continued by a trailing backslash.
            while i < bytes.len() && !(bytes[i] == b'\n' && bytes[i - 1] != b'\\') {
                i += 1;
            }
            continue;
        }
        line_start = false;
        let start = i;
        if source[i..].starts_with("//") {
            i = source[i..].find('\n').map_or(bytes.len(), |n| i + n);
        } else if source[i..].starts_with("/*") {
            i = source[i + 2..]
                .find("*/")
                .map_or(bytes.len(), |n| i + 2 + n + 2);
        } else if c == b'"' || c == b'\'' {
            i += 1;
            while i < bytes.len() && bytes[i] != c {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(bytes.len());
            tokens.push(&source[start..i]);
        } else if c == b'_' || c.is_ascii_alphanumeric() {
            while i < bytes.len() && (bytes[i] == b'_' || bytes[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            tokens.push(&source[start..i]);
        } else {
            // One character, kept whole when it is not ASCII.
            i += source[i..].chars().next().map_or(1, char::len_utf8);
            tokens.push(&source[start..i]);
        }
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ptr(pointee: CType, pointee_const: bool) -> CType {
        CType::Ptr {
            pointee: Box::new(pointee),
            pointee_const,
        }
    }

    const SOURCE: &str = r#"
// extern "C" __global__ void k(int commented_out)
#define F(x) \
    extern "C" __global__ void k(float in_a_macro)
__device__ void k(double not_global);
extern "C" __global__ void __launch_bounds__(256) k(
    const unsigned short* const* __restrict__ rows, /* a table */
    unsigned long long* const* words,
    const float* q,
    int* status,
    unsigned int n, unsigned long long addr, float scale)
{
    const char* s = "k(";
}
"#;

    #[test]
    fn reads_the_global_entry_point_only() {
        let params = entry_params(SOURCE, "k").unwrap();
        let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            ["rows", "words", "q", "status", "n", "addr", "scale"]
        );
        let u16_ = CType::Scalar(Scalar::U16);
        let u64_ = CType::Scalar(Scalar::U64);
        assert_eq!(params[0].ty, ptr(ptr(u16_, true), true));
        assert_eq!(params[1].ty, ptr(ptr(u64_.clone(), false), true));
        assert_eq!(params[2].ty, ptr(CType::Scalar(Scalar::F32), true));
        assert_eq!(params[3].ty, ptr(CType::Scalar(Scalar::I32), false));
        assert_eq!(params[4].ty, CType::Scalar(Scalar::U32));
        assert_eq!(params[5].ty, u64_);
        assert_eq!(params[6].ty, CType::Scalar(Scalar::F32));
        assert_eq!(
            params[0].declaration,
            "const unsigned short* const* __restrict__ rows"
        );
        assert_eq!(params[0].canonical(), "const unsigned short* const* rows");
        assert_eq!(params[1].canonical(), "unsigned long long* const* words");
        assert_eq!(params[3].canonical(), "int* status");
        assert_eq!(params[5].canonical(), "unsigned long long addr");
    }

    #[test]
    fn a_missing_entry_or_an_unknown_type_is_an_error() {
        assert!(entry_params(SOURCE, "absent").is_err());
        let bad = r#"extern "C" __global__ void k(half h) {}"#;
        let err = entry_params(bad, "k").unwrap_err();
        assert!(err.0.contains("`half h`"), "{err}");
        let empty = r#"extern "C" __global__ void k(void) {}"#;
        assert_eq!(entry_params(empty, "k").unwrap(), vec![]);
    }

    #[test]
    fn every_entry_point_of_a_default_kernel_set_is_read() {
        let shape = crate::model::preset("qwen2.5-7b").unwrap();
        for spec in crate::kernels_for(&shape, &Default::default()) {
            let source = crate::render_any(&spec).unwrap();
            for entry in spec.entry_points() {
                let params = entry_params(&source, &entry)
                    .unwrap_or_else(|e| panic!("{}: {e}", spec.kernel_name()));
                assert!(params.len() >= 2, "{entry}: {params:?}");
            }
        }
    }
}
