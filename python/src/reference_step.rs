//! The f64 reference's own step of one query group, exposed for the package's tests (the CPU
//! backend and the CUDA one are both checked against it).

use pyo3::prelude::*;
use runtime::step::Method;

use crate::{KernelError, MethodError};

/// Selected tokens and attention outputs per query head of one group.
type GroupStep = (Vec<Vec<usize>>, Vec<Vec<f64>>);

/// The reference's own step of one query group, for tests: `keys`/`values` `[n][D]` bf16 bits,
/// `queries` `G` rows; returns (selected tokens per head, outputs per head).
#[pyfunction]
#[pyo3(signature = (keys, values, queries, d, method, k, scale, sigma2=None, ds_mask=None))]
#[allow(clippy::too_many_arguments)]
pub fn reference_group_step(
    keys: Vec<u16>,
    values: Vec<u16>,
    queries: Vec<Vec<f64>>,
    d: usize,
    method: &str,
    k: usize,
    scale: f64,
    sigma2: Option<Vec<f64>>,
    ds_mask: Option<Vec<u8>>,
) -> PyResult<GroupStep> {
    use reference::store::{BlockSize, HeadId, HeadStore, StoreLayout};
    let method: Method = method
        .parse()
        .map_err(|e: reference::plans::MethodParseError| MethodError::new_err(e.to_string()))?;
    let bf = |v: Vec<u16>| v.into_iter().map(half::bf16::from_bits).collect::<Vec<_>>();
    let (keys, values) = (bf(keys), bf(values));
    let fail = |e: String| KernelError::new_err(e);
    if let Method::Pariskv { k } = method {
        let index =
            reference::pariskv::PariskvIndex::build(&keys, d).map_err(|e| fail(e.to_string()))?;
        let input = reference::pariskv::PariskvInput {
            index: &index,
            keys: &keys,
            values: &values,
            queries: &queries,
            n_total: keys.len() / d,
        };
        let s =
            reference::pariskv::pariskv_step(&input, k, scale).map_err(|e| fail(e.to_string()))?;
        return Ok((s.selection.heads, s.outputs));
    }
    let ds = ds_mask
        .as_deref()
        .and_then(reference::plans::DoubleSparsityCalibration::from_mask);
    let layout = StoreLayout::new(d, BlockSize::B64, 512).map_err(|e| fail(e.to_string()))?;
    let store =
        HeadStore::from_keys(layout, HeadId::default(), &keys).map_err(|e| fail(e.to_string()))?;
    let input = reference::step::GroupInput {
        store: &store,
        keys: &keys,
        values: &values,
        queries: &queries,
        klt: None,
        sigma2: sigma2.as_deref(),
        double_sparsity: ds.as_ref(),
    };
    let config = reference::step::StepConfig { method, k, scale };
    let s = reference::step::step_group(&input, &config).map_err(|e| fail(e.to_string()))?;
    Ok((s.selection.heads, s.outputs))
}
