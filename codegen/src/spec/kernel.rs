//! [`KernelSpec`]: any family's spec as one value, for kernel sets, manifests and the CLI.

use super::{
    AppendRowsSpec, AttentionSpec, ConvertSpec, EncodeSpec, Family, FetchSpec, GatherSpec,
    LandmarkSpec, MappedReadSpec, OracleSpec, PariskvIndexSpec, PariskvQuerySpec,
    PariskvRerankSpec, PariskvTopcSpec, PariskvVoteSpec, PlanSpec, ScanSpec, SelectSpec, SpecError,
};
use serde::{Deserialize, Serialize};

/// Declares the enum and forwards every method to the family's spec, so that adding a family is
/// one line here.
macro_rules! kernel_specs {
    ($($variant:ident($spec:ty)),+ $(,)?) => {
        /// A spec of any family. Serialised with its family as the `family` tag:
        /// `{"family": "scan", "head_dim": 128, ...}` (`pariskv_index` for `PariskvIndex`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(tag = "family", rename_all = "snake_case")]
        pub enum KernelSpec {
            $($variant($spec),)+
        }

        impl KernelSpec {
            /// The family name, as in [`Family::FAMILY`].
            pub fn family(&self) -> &'static str {
                match self {
                    $(KernelSpec::$variant(_) => <$spec as Family>::FAMILY,)+
                }
            }

            /// The kernel's name, as in [`Family::kernel_name`].
            pub fn kernel_name(&self) -> String {
                match self {
                    $(KernelSpec::$variant(s) => s.kernel_name(),)+
                }
            }

            /// Checks the spec, as in [`Family::validate`].
            pub fn validate(&self) -> Result<(), SpecError> {
                match self {
                    $(KernelSpec::$variant(s) => s.validate(),)+
                }
            }

            /// Renders the spec's source, as in [`crate::render::render`].
            pub fn render(&self) -> Result<String, crate::render::RenderError> {
                match self {
                    $(KernelSpec::$variant(s) => crate::render::render(s),)+
                }
            }

            /// The family's own fields as JSON (without the `family` tag), for manifests.
            pub fn fields_json(&self) -> serde_json::Value {
                let value = match self {
                    $(KernelSpec::$variant(s) => serde_json::to_value(s),)+
                };
                value.expect("specs are plain data and always serialise")
            }
        }

        $(impl From<$spec> for KernelSpec {
            fn from(s: $spec) -> Self {
                KernelSpec::$variant(s)
            }
        })+
    };
}

kernel_specs!(
    Encode(EncodeSpec),
    Plan(PlanSpec),
    Gather(GatherSpec),
    Scan(ScanSpec),
    Oracle(OracleSpec),
    Landmark(LandmarkSpec),
    Select(SelectSpec),
    Fetch(FetchSpec),
    Attention(AttentionSpec),
    PariskvIndex(PariskvIndexSpec),
    PariskvQuery(PariskvQuerySpec),
    PariskvVote(PariskvVoteSpec),
    PariskvTopc(PariskvTopcSpec),
    PariskvRerank(PariskvRerankSpec),
    MappedRead(MappedReadSpec),
    AppendRows(AppendRowsSpec),
    Convert(ConvertSpec),
);

impl KernelSpec {
    /// The `extern "C"` entry points of the kernel's module, in launch order: the kernel's name,
    /// or for the families of several stages, `<name>_<stage>` once each.
    pub fn entry_points(&self) -> Vec<String> {
        match self {
            KernelSpec::Landmark(s) => vec![s.build_entry(), s.scan_entry()],
            KernelSpec::PariskvTopc(s) => vec![s.count_entry(), s.write_entry()],
            KernelSpec::PariskvRerank(s) => {
                let mut entries = vec![s.score_entry()];
                entries.extend(s.select_entries());
                entries
            }
            KernelSpec::Convert(s) => vec![s.to_f32_entry(), s.to_bf16_entry()],
            KernelSpec::Select(s) => {
                let mut entries: Vec<String> = Vec::new();
                for &stage in s.stages() {
                    let entry = s.entry(stage);
                    if !entries.contains(&entry) {
                        entries.push(entry);
                    }
                }
                entries
            }
            _ => vec![self.kernel_name()],
        }
    }
}
