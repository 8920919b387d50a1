//! [`KvRows`]: how the store lays out the bf16 K and V rows of one (sequence, layer, KV head),
//! a specialisation parameter of every family that reads or writes them (`encode`, `oracle`,
//! `landmark`, `fetch`, `pariskv_index`, `append_rows`).
//!
//! The kernels always take the two `[B*H]` pointer tables `k_rows` and `v_rows`; the layout
//! only changes the distance between two consecutive rows of one table (the *row stride*),
//! which the template bakes in. The default renders exactly the source it always had.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The layout of one (sequence, layer, KV head)'s K and V rows (`templates/ABI.md`, "The store
/// on the device").
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord,
)]
#[serde(rename_all = "lowercase")]
pub enum KvRows {
    /// Two arrays, K rows `[capacity][D]` and V rows `[capacity][D]` (row stride `D`).
    #[default]
    Separate,
    /// One array `[capacity][2][D]`: a token's K row, then its V row (row stride `2*D`;
    /// `v_rows[bh] = k_rows[bh] + D`). A fetch of a token's K and V rows is one run of `4*D`
    /// bytes instead of two runs of `2*D` bytes far apart: half the host pages a scattered
    /// fetch from mapped host memory touches (bench/NOTES.md, 2026-12-02).
    Adjacent,
}

impl KvRows {
    /// Both layouts, the default first.
    pub const ALL: [KvRows; 2] = [KvRows::Separate, KvRows::Adjacent];

    /// `separate` or `adjacent`.
    pub fn as_str(self) -> &'static str {
        match self {
            KvRows::Separate => "separate",
            KvRows::Adjacent => "adjacent",
        }
    }

    /// Whether this is the default layout (serde skips the default where a spec's field is
    /// optional).
    pub fn is_separate(&self) -> bool {
        *self == KvRows::Separate
    }

    /// Elements (bf16 values) from one key row to the next: `D` or `2*D`.
    pub fn row_stride(self, head_dim: usize) -> usize {
        match self {
            KvRows::Separate => head_dim,
            KvRows::Adjacent => 2 * head_dim,
        }
    }

    /// The kernel name's component: empty for the default, `_kvadj` for adjacent rows.
    pub fn name_suffix(self) -> &'static str {
        match self {
            KvRows::Separate => "",
            KvRows::Adjacent => "_kvadj",
        }
    }

    /// The template variables every row-reading template takes: `kv_adjacent` (whether to
    /// define `ROW_STRIDE = 2 * D`) and `row_stride`, the name the row indexing multiplies by
    /// (`D`, so the default renders unchanged, or `ROW_STRIDE`).
    pub fn insert_context(self, context: &mut tera::Context) {
        context.insert("kv_adjacent", &(self == KvRows::Adjacent));
        context.insert(
            "row_stride",
            match self {
                KvRows::Separate => "D",
                KvRows::Adjacent => "ROW_STRIDE",
            },
        );
    }
}

impl fmt::Display for KvRows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A K/V row layout that is not one of the names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a K/V row layout; allowed: separate (the default), adjacent")]
pub struct KvRowsParseError(pub String);

impl FromStr for KvRows {
    type Err = KvRowsParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KvRows::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| KvRowsParseError(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_print() {
        for k in KvRows::ALL {
            assert_eq!(k.as_str().parse::<KvRows>(), Ok(k));
            assert_eq!(k.to_string(), k.as_str());
        }
        assert_eq!(" Adjacent ".parse::<KvRows>(), Ok(KvRows::Adjacent));
        let e = "interleaved".parse::<KvRows>().unwrap_err();
        assert!(
            e.to_string().contains("separate (the default), adjacent"),
            "{e}"
        );
        assert_eq!(KvRows::default(), KvRows::Separate);
    }

    #[test]
    fn strides_and_names() {
        assert_eq!(KvRows::Separate.row_stride(128), 128);
        assert_eq!(KvRows::Adjacent.row_stride(128), 256);
        assert_eq!(KvRows::Separate.name_suffix(), "");
        assert_eq!(KvRows::Adjacent.name_suffix(), "_kvadj");
    }

    #[test]
    fn serde_names() {
        assert_eq!(
            serde_json::to_string(&KvRows::Adjacent).unwrap(),
            "\"adjacent\""
        );
        assert_eq!(
            serde_json::from_str::<KvRows>("\"separate\"").unwrap(),
            KvRows::Separate
        );
    }
}
