//! [`KernelSpec`]: any family's spec as one value, for kernel sets, manifests and the CLI.

use super::{EncodeSpec, Family, GatherSpec, PlanSpec, ScanSpec, SpecError};
use serde::{Deserialize, Serialize};

/// A spec of any family. Serialised with its family as the `family` tag:
/// `{"family": "scan", "head_dim": 128, ...}`.
// The select, fetch, attention, oracle and landmark families join this enum when their branch
// is merged: one variant each, and one arm in every match below and in `render::render_any`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "family", rename_all = "lowercase")]
pub enum KernelSpec {
    Encode(EncodeSpec),
    Plan(PlanSpec),
    Gather(GatherSpec),
    Scan(ScanSpec),
}

impl KernelSpec {
    /// The family name, as in [`Family::FAMILY`].
    pub fn family(&self) -> &'static str {
        match self {
            KernelSpec::Encode(_) => EncodeSpec::FAMILY,
            KernelSpec::Plan(_) => PlanSpec::FAMILY,
            KernelSpec::Gather(_) => GatherSpec::FAMILY,
            KernelSpec::Scan(_) => ScanSpec::FAMILY,
        }
    }

    /// The kernel's name, as in [`Family::kernel_name`].
    pub fn kernel_name(&self) -> String {
        match self {
            KernelSpec::Encode(s) => s.kernel_name(),
            KernelSpec::Plan(s) => s.kernel_name(),
            KernelSpec::Gather(s) => s.kernel_name(),
            KernelSpec::Scan(s) => s.kernel_name(),
        }
    }

    /// Checks the spec, as in [`Family::validate`].
    pub fn validate(&self) -> Result<(), SpecError> {
        match self {
            KernelSpec::Encode(s) => s.validate(),
            KernelSpec::Plan(s) => s.validate(),
            KernelSpec::Gather(s) => s.validate(),
            KernelSpec::Scan(s) => s.validate(),
        }
    }

    /// The family's own fields as JSON (without the `family` tag), for manifests.
    pub fn fields_json(&self) -> serde_json::Value {
        let value = match self {
            KernelSpec::Encode(s) => serde_json::to_value(s),
            KernelSpec::Plan(s) => serde_json::to_value(s),
            KernelSpec::Gather(s) => serde_json::to_value(s),
            KernelSpec::Scan(s) => serde_json::to_value(s),
        };
        value.expect("specs are plain data and always serialise")
    }
}

impl From<EncodeSpec> for KernelSpec {
    fn from(s: EncodeSpec) -> Self {
        KernelSpec::Encode(s)
    }
}

impl From<PlanSpec> for KernelSpec {
    fn from(s: PlanSpec) -> Self {
        KernelSpec::Plan(s)
    }
}

impl From<GatherSpec> for KernelSpec {
    fn from(s: GatherSpec) -> Self {
        KernelSpec::Gather(s)
    }
}

impl From<ScanSpec> for KernelSpec {
    fn from(s: ScanSpec) -> Self {
        KernelSpec::Scan(s)
    }
}
