//! What the row families (oracle, landmark, fetch) share: kernels that read whole bf16 key rows,
//! specialised on the same five fields (head dimension, query group, threads per block,
//! placement, K/V row layout), so they validate, name and parametrise their templates the same
//! way.

use super::launch::rows_in_flight;
use super::{checks, KvRows, Placement, SpecError};

/// The five fields of a row family's spec, seen together.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowFields {
    pub(crate) head_dim: u32,
    pub(crate) group: u32,
    pub(crate) threads: u32,
    pub(crate) placement: Placement,
    pub(crate) kv_rows: KvRows,
}

impl RowFields {
    /// Checks every field for `family`, naming the first bad one (placement is always valid).
    pub(crate) fn validate(self, family: &'static str) -> Result<(), SpecError> {
        checks::head_dim(family, self.head_dim)?;
        checks::group(family, self.group)?;
        checks::threads(family, self.threads)
    }

    /// `fathom_<family>_d<D>_g<G>_t<threads>_<placement>[_kvadj]`: every field, so distinct
    /// specs of one family never share a name.
    pub(crate) fn kernel_name(self, family: &str) -> String {
        format!(
            "fathom_{family}_d{}_g{}_t{}_{}{}",
            self.head_dim,
            self.group,
            self.threads,
            self.placement.as_str(),
            self.kv_rows.name_suffix()
        )
    }

    /// The template variables of every row template; `unroll` follows from the placement,
    /// `row_lanes` and `row_padded` from the head dimension ([`row_lanes`]), `kv_adjacent` and
    /// `row_stride` from the row layout ([`KvRows::insert_context`]).
    pub(crate) fn context(self) -> tera::Context {
        let mut context = tera::Context::new();
        context.insert("head_dim", &self.head_dim);
        context.insert("group", &self.group);
        context.insert("threads", &self.threads);
        context.insert("placement", self.placement.as_str());
        context.insert("unroll", &rows_in_flight(self.placement));
        context.insert("row_lanes", &row_lanes(self.head_dim));
        context.insert("row_padded", &!self.head_dim.is_power_of_two());
        self.kv_rows.insert_context(&mut context);
        context
    }
}

/// Lanes that read one key row in the kernels that sum a row's dot product across lanes
/// (oracle, landmark): one per 16 bytes (`D/8`), rounded up to a power of two for the butterfly
/// sums, so 10 and 12 (D = 80, 96) become 16 and 24 (D = 192) becomes 32.
pub(crate) fn row_lanes(head_dim: u32) -> u32 {
    (head_dim / 8).next_power_of_two()
}

/// Gives a row family's spec (a struct of exactly the five [`RowFields`]) its constructors and
/// its [`Family`](super::Family) impl, named `$family`.
macro_rules! row_family {
    ($spec:ident, $family:literal) => {
        impl $spec {
            /// The spec of these four fields (`head_dim`, `group`, `threads`, `placement`), over
            /// the default (separate) K/V rows.
            pub fn new(
                head_dim: u32,
                group: u32,
                threads: u32,
                placement: $crate::spec::Placement,
            ) -> Self {
                $spec {
                    head_dim,
                    group,
                    threads,
                    placement,
                    kv_rows: $crate::spec::KvRows::Separate,
                }
            }

            /// The same spec over K/V rows laid out as `kv_rows` says.
            pub fn with_kv_rows(self, kv_rows: $crate::spec::KvRows) -> Self {
                $spec { kv_rows, ..self }
            }

            fn row_fields(&self) -> $crate::spec::row::RowFields {
                $crate::spec::row::RowFields {
                    head_dim: self.head_dim,
                    group: self.group,
                    threads: self.threads,
                    placement: self.placement,
                    kv_rows: self.kv_rows,
                }
            }
        }

        impl $crate::spec::Family for $spec {
            const FAMILY: &'static str = $family;

            fn validate(&self) -> Result<(), $crate::spec::SpecError> {
                self.row_fields().validate(Self::FAMILY)
            }

            fn kernel_name(&self) -> String {
                self.row_fields().kernel_name(Self::FAMILY)
            }

            fn context(&self) -> tera::Context {
                self.row_fields().context()
            }
        }
    };
}
pub(crate) use row_family;
