//! The default kernel set of a model: every spec a decode step of §8 launches.

use crate::model::{Basis, ModelShape};
use crate::spec::{
    AttentionRows, AttentionSpec, EncodeMode, EncodeSpec, Family, FetchSpec, GatherSpec,
    KernelSpec, KvRows, LandmarkSpec, OracleSpec, PariskvIndexSpec, PariskvQuerySpec,
    PariskvRerankSpec, PariskvTopcSpec, PariskvVoteSpec, Placement, PlanMethod, PlanSpec, ScanSpec,
    SelectAlgorithm, SelectSpec,
};

/// Threads per thread block of the families whose tile is not tuned yet.
const THREADS: u32 = 256;

/// The largest top-k the default select kernel takes: the protocol's k is 512 at 32k tokens and
/// above (§6), with room for larger budgets.
const K_MAX: u32 = 2048;

/// Store parameters shared by every kernel of a set (they must agree: they describe one store).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSetOptions {
    /// `BLK`, tokens per scale block.
    pub block: usize,
    /// `S`, words per plane per segment.
    pub segment_words: usize,
}

impl Default for KernelSetOptions {
    /// BLK = 64 (the paper's), S = 512 words (32,768 tokens: a plane run is 4 KiB, long enough
    /// for reads of mapped host memory at full rate, §7).
    fn default() -> Self {
        KernelSetOptions {
            block: 64,
            segment_words: 512,
        }
    }
}

/// The plan methods of the benchmark protocol (§9); `loki` only for a rotated store.
fn plan_methods(basis: Basis) -> Vec<PlanMethod> {
    let mut methods = vec![
        PlanMethod::Fathom,
        PlanMethod::Sparq { r: 16 },
        PlanMethod::Sparq { r: 32 },
        PlanMethod::DoubleSparsity,
        PlanMethod::Thumbnail,
    ];
    if basis == Basis::Klt {
        methods.push(PlanMethod::Loki { r: 32 });
    }
    methods
}

/// The ParisKV specs (§12) of a head dimension `d` and group `g`: the index, vote and rerank for
/// both placements, the query and the top-C. Empty when ParisKV does not support `d` (it is an
/// optional method, so such a model simply has no ParisKV kernels).
fn pariskv_specs(d: u32, g: u32) -> Vec<KernelSpec> {
    let query = PariskvQuerySpec::new(d, g);
    if query.validate().is_err() {
        return Vec::new();
    }
    let mut specs: Vec<KernelSpec> = vec![query.into()];
    for placement in [Placement::Hbm, Placement::Host] {
        specs.push(
            PariskvIndexSpec {
                head_dim: d,
                threads: THREADS,
                placement,
                kv_rows: KvRows::Separate,
            }
            .into(),
        );
        specs.push(
            PariskvVoteSpec {
                head_dim: d,
                threads: THREADS,
                placement,
            }
            .into(),
        );
        specs.push(
            PariskvRerankSpec {
                head_dim: d,
                group: g,
                k_max: K_MAX,
                threads: THREADS,
                placement,
                vector_loads: false,
                select: Default::default(),
                decode_table: false,
            }
            .into(),
        );
    }
    specs.push(
        PariskvTopcSpec {
            head_dim: d,
            threads: THREADS,
        }
        .into(),
    );
    specs
}

/// The default specs of `model`: encode (bulk and append), a plan per method of §9, gather,
/// the scan, oracle, landmark and fetch for both placements, select and attention, and the
/// ParisKV families when the head dimension allows them. Specs are not validated here;
/// rendering validates them.
pub fn kernels_for(model: &ModelShape, options: &KernelSetOptions) -> Vec<KernelSpec> {
    let d = model.head_dim;
    let g = model.group_size();
    let rotate = model.basis == Basis::Klt;
    let KernelSetOptions {
        block,
        segment_words,
    } = *options;

    let mut specs = Vec::new();
    for mode in [EncodeMode::Bulk, EncodeMode::Append] {
        specs.push(
            EncodeSpec {
                block,
                segment_words,
                ..EncodeSpec::new(d, mode, rotate)
            }
            .into(),
        );
    }
    for method in plan_methods(model.basis) {
        specs.push(
            PlanSpec {
                block,
                segment_words,
                ..PlanSpec::new(d, g, method, rotate)
            }
            .into(),
        );
    }
    specs.push(
        GatherSpec {
            block,
            segment_words,
            ..GatherSpec::new(d)
        }
        .into(),
    );
    for placement in [Placement::Hbm, Placement::Host] {
        specs.push(
            ScanSpec {
                block,
                segment_words,
                ..ScanSpec::new(d, g, placement)
            }
            .with_fitted_tile()
            .into(),
        );
    }
    let (head_dim, group) = (d as u32, g as u32);
    for placement in [Placement::Hbm, Placement::Host] {
        specs.push(OracleSpec::new(head_dim, group, THREADS, placement).into());
        specs.push(LandmarkSpec::new(head_dim, group, THREADS, placement).into());
        specs.push(FetchSpec::new(head_dim, group, THREADS, placement).into());
    }
    specs.push(
        SelectSpec {
            group,
            k_max: K_MAX,
            threads: THREADS,
            items_per_thread: 16,
            algorithm: SelectAlgorithm::Radix,
            coarse_floor: false,
            owned_tiles: false,
        }
        .into(),
    );
    specs.push(
        AttentionSpec {
            head_dim,
            group,
            threads: THREADS,
            rows_per_warp: 4,
            rows: AttentionRows::Fetched,
            kv_rows: KvRows::Separate,
            splits: 1,
            cluster_merge: false,
            prefetch_rows: false,
        }
        .into(),
    );
    specs.extend(pariskv_specs(head_dim, group));
    specs
}
