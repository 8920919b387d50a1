//! Kernel specs: one plain value per kernel family, holding every specialisation parameter.
//!
//! A spec is validated ([`Family::validate`]) before it is rendered; its name
//! ([`Family::kernel_name`]) carries every parameter, so two specs that render different code
//! never share a name; its template context ([`Family::context`]) gives the template exactly the
//! variables it uses (rendering is strict: a missing variable is an error).

pub mod append_rows;
pub mod attention;
mod checks;
pub mod convert;
pub mod fetch;
pub mod kv_rows;
pub mod landmark;
pub mod launch;
pub mod layout;
pub mod mapped_read;
pub mod method;
pub mod oracle;
pub mod pariskv;
mod pariskv_select;
pub mod peaks;
mod row;
pub mod select;

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub mod encode;
pub mod gather;
mod kernel;
pub mod plan;
pub mod scan;
pub mod shape;
// The select, fetch, attention, oracle and landmark families are added here at merge.

pub use append_rows::AppendRowsSpec;
pub use attention::{AttentionRows, AttentionSpec, MAX_CLUSTER_SPLITS};
pub use convert::ConvertSpec;
pub use encode::{EncodeMode, EncodeSpec};
pub use fetch::FetchSpec;
pub use gather::GatherSpec;
pub use kernel::KernelSpec;
pub use kv_rows::KvRows;
pub use landmark::LandmarkSpec;
pub use mapped_read::MappedReadSpec;
pub use oracle::OracleSpec;
pub use pariskv::{
    PariskvIndexSpec, PariskvQuerySpec, PariskvRerankSpec, PariskvTopcSpec, PariskvVoteSpec,
};
pub use plan::{PlanMethod, PlanSpec};
pub use scan::ScanSpec;
pub use select::{SelectAlgorithm, SelectSpec};

/// A spec field outside what the family supports.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("invalid {family} spec: `{field}` is {got}; allowed: {allowed}")]
pub struct SpecError {
    pub family: &'static str,
    pub field: &'static str,
    pub got: String,
    pub allowed: String,
}

impl SpecError {
    pub fn new(
        family: &'static str,
        field: &'static str,
        got: impl ToString,
        allowed: impl ToString,
    ) -> Self {
        SpecError {
            family,
            field,
            got: got.to_string(),
            allowed: allowed.to_string(),
        }
    }
}

/// What every kernel family provides to the renderer.
pub trait Family {
    /// The family's name, also the stem of its template: `templates/<FAMILY>.cu.tera`.
    const FAMILY: &'static str;

    /// The template this spec renders: `<FAMILY>.cu.tera` unless a variant of the family has
    /// its own.
    fn template(&self) -> String {
        format!("{}.cu.tera", Self::FAMILY)
    }

    /// Checks every field, naming the first bad one and the allowed values.
    fn validate(&self) -> Result<(), SpecError>;

    /// The generated kernel's name, `fathom_<family>_<every parameter>`; it is the kernel's
    /// identity, so changing any parameter changes it.
    fn kernel_name(&self) -> String;

    /// The template variables; `kernel_name` is added by the renderer.
    fn context(&self) -> tera::Context;
}

/// Where the key store (and the K/V rows) live (SPEC §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Device memory.
    Hbm,
    /// Page-locked, device-mapped host memory read through its unified address.
    Host,
}

impl Placement {
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::Hbm => "hbm",
            Placement::Host => "host",
        }
    }
}
