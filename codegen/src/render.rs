//! Rendering a spec to CUDA C through its family's Tera template, strictly.
//!
//! The templates are embedded at build time, so rendering never reads the file system (the
//! binaries run on GPU machines that have no checkout). Tera fails on an undefined variable,
//! which is what we want: a template never silently renders an empty string.

use crate::spec::{Family, KernelSpec, SpecError};
use thiserror::Error;

/// Every family's template, by file name.
const TEMPLATES: &[(&str, &str)] = &[
    (
        "common.cuh.tera",
        include_str!("../../templates/common.cuh.tera"),
    ),
    (
        "encode.cu.tera",
        include_str!("../../templates/encode.cu.tera"),
    ),
    ("plan.cu.tera", include_str!("../../templates/plan.cu.tera")),
    (
        "gather.cu.tera",
        include_str!("../../templates/gather.cu.tera"),
    ),
    (
        "scan_copies.cuh.tera",
        include_str!("../../templates/scan_copies.cuh.tera"),
    ),
    (
        "scan_chunks.cuh.tera",
        include_str!("../../templates/scan_chunks.cuh.tera"),
    ),
    (
        "scan_peaks.cuh.tera",
        include_str!("../../templates/scan_peaks.cuh.tera"),
    ),
    ("scan.cu.tera", include_str!("../../templates/scan.cu.tera")),
    (
        "scan_tc.cu.tera",
        include_str!("../../templates/scan_tc.cu.tera"),
    ),
    (
        "oracle_rows.cuh.tera",
        include_str!("../../templates/oracle_rows.cuh.tera"),
    ),
    (
        "oracle.cu.tera",
        include_str!("../../templates/oracle.cu.tera"),
    ),
    (
        "landmark.cu.tera",
        include_str!("../../templates/landmark.cu.tera"),
    ),
    (
        "select_common.cuh.tera",
        include_str!("../../templates/select_common.cuh.tera"),
    ),
    (
        "select_union.cuh.tera",
        include_str!("../../templates/select_union.cuh.tera"),
    ),
    (
        "select.cu.tera",
        include_str!("../../templates/select.cu.tera"),
    ),
    (
        "select_compact.cu.tera",
        include_str!("../../templates/select_compact.cu.tera"),
    ),
    (
        "select_onepass_common.cuh.tera",
        include_str!("../../templates/select_onepass_common.cuh.tera"),
    ),
    (
        "select_peaks.cuh.tera",
        include_str!("../../templates/select_peaks.cuh.tera"),
    ),
    (
        "select_owned_peaks.cuh.tera",
        include_str!("../../templates/select_owned_peaks.cuh.tera"),
    ),
    (
        "select_peaks_head.cu.tera",
        include_str!("../../templates/select_peaks_head.cu.tera"),
    ),
    (
        "select_onepass.cu.tera",
        include_str!("../../templates/select_onepass.cu.tera"),
    ),
    (
        "select_fused.cu.tera",
        include_str!("../../templates/select_fused.cu.tera"),
    ),
    (
        "select_cluster.cu.tera",
        include_str!("../../templates/select_cluster.cu.tera"),
    ),
    (
        "cluster.cuh.tera",
        include_str!("../../templates/cluster.cuh.tera"),
    ),
    (
        "select_cluster.cuh.tera",
        include_str!("../../templates/select_cluster.cuh.tera"),
    ),
    (
        "select_cluster_peaks.cu.tera",
        include_str!("../../templates/select_cluster_peaks.cu.tera"),
    ),
    (
        "select_radix_block.cuh.tera",
        include_str!("../../templates/select_radix_block.cuh.tera"),
    ),
    (
        "select_resident.cu.tera",
        include_str!("../../templates/select_resident.cu.tera"),
    ),
    (
        "fetch.cu.tera",
        include_str!("../../templates/fetch.cu.tera"),
    ),
    (
        "attention.cu.tera",
        include_str!("../../templates/attention.cu.tera"),
    ),
    (
        "pariskv_common.cuh.tera",
        include_str!("../../templates/pariskv_common.cuh.tera"),
    ),
    (
        "pariskv_index.cu.tera",
        include_str!("../../templates/pariskv_index.cu.tera"),
    ),
    (
        "pariskv_query.cu.tera",
        include_str!("../../templates/pariskv_query.cu.tera"),
    ),
    (
        "pariskv_vote.cu.tera",
        include_str!("../../templates/pariskv_vote.cu.tera"),
    ),
    (
        "pariskv_topc.cu.tera",
        include_str!("../../templates/pariskv_topc.cu.tera"),
    ),
    (
        "pariskv_rerank_score_v16.cuh.tera",
        include_str!("../../templates/pariskv_rerank_score_v16.cuh.tera"),
    ),
    (
        "pariskv_rerank_select_mb.cuh.tera",
        include_str!("../../templates/pariskv_rerank_select_mb.cuh.tera"),
    ),
    (
        "pariskv_rerank.cu.tera",
        include_str!("../../templates/pariskv_rerank.cu.tera"),
    ),
    (
        "mapped_read.cu.tera",
        include_str!("../../templates/mapped_read.cu.tera"),
    ),
    (
        "convert.cu.tera",
        include_str!("../../templates/convert.cu.tera"),
    ),
    (
        "append_rows.cu.tera",
        include_str!("../../templates/append_rows.cu.tera"),
    ),
];

#[derive(Debug, Error)]
pub enum RenderError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("rendering {template}: {message}")]
    Template { template: String, message: String },
}

/// The engine with every template parsed, built once per process: parsing the templates costs
/// far more than rendering one.
fn engine() -> Result<&'static tera::Tera, RenderError> {
    static ENGINE: std::sync::OnceLock<Result<tera::Tera, String>> = std::sync::OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let mut tera = tera::Tera::default();
            tera.autoescape_on(vec![]);
            tera.add_raw_templates(TEMPLATES.iter().copied())
                .map_err(|e| error_chain(&e))?;
            Ok(tera)
        })
        .as_ref()
        .map_err(|message| RenderError::Template {
            template: "(all)".into(),
            message: message.clone(),
        })
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    message
}

/// Validates `spec` and renders its family's template: the CUDA C source of one kernel.
pub fn render<F: Family>(spec: &F) -> Result<String, RenderError> {
    spec.validate()?;
    let template = spec.template();
    let mut context = spec.context();
    context.insert("kernel_name", &spec.kernel_name());
    engine()?
        .render(&template, &context)
        .map_err(|e| RenderError::Template {
            template,
            message: error_chain(&e),
        })
}

/// Renders a spec of any family (validating it first).
pub fn render_any(spec: &KernelSpec) -> Result<String, RenderError> {
    spec.render()
}
