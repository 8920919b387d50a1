//! The attention bench: attention over the fetched rows of a selection (the reference
//! selection of the select bench's scores at the paper's `k`, its union's K/V rows laid out as
//! `fetch` writes them), checked against `reference::attention::attend` before it is
//! timed.

use codegen::spec::attention::MAX_SPLITS;
use codegen::spec::Placement;
use std::sync::Arc;

use codegen::spec::KernelSpec;
use half::bf16;
use reference::attention::{attend, default_scale, relative_error};
use runtime::abi;
use runtime::gpu::DeviceBuffer;
use runtime::launch::{DevicePtrMut, KernelArgs};
use runtime::tuning::Variant;

use super::device::{gpu_err, int, launch, Device, Launch};
use super::inputs::{queries, query, HostRows, HostScores, Inputs};
use crate::candidates::{bench_k, enumerate, tile_spec, Case};
use crate::tuner::CaseInfo;

/// The largest relative error `||o − ref|| / ||ref||` accepted (the attention tests' bound:
/// fp32 logits, `expf` and accumulation over a few thousand rows give about 1e-6).
pub const MAX_RELATIVE_ERROR: f64 = 1e-3;

struct Prepared {
    scores: Arc<HostScores>,
    rows: Arc<HostRows>,
    /// The f64 reference output of each query head, `[H * G][D]`: computed once a case, not
    /// once a candidate (80 candidates a case made it 14 s of a default run).
    want: Vec<Vec<f64>>,
    k_dev: DeviceBuffer<bf16>,
    v_dev: DeviceBuffer<bf16>,
    sel_pos: DeviceBuffer<i32>,
    sel_count: DeviceBuffer<i32>,
    q_dev: DeviceBuffer<f32>,
    /// A split tile's partial results (room for [`MAX_SPLITS`] a query head) and arrival
    /// counters (zero, and left zero by every launch).
    partials: DeviceBuffer<f32>,
    arrivals: DeviceBuffer<u32>,
}

/// Times attention candidates.
#[derive(Default)]
pub struct AttentionBench {
    prepared: Option<Prepared>,
}

impl AttentionBench {
    /// Frees the prepared inputs (on the device and the host) until the next case of this
    /// bench.
    pub fn release(&mut self) {
        self.prepared = None;
    }

    /// Lays out and uploads the fetched rows of `case`'s selection.
    pub fn prepare(
        &mut self,
        dev: &Device,
        inputs: &mut Inputs,
        case: &Case,
    ) -> Result<CaseInfo, String> {
        let (d, g, heads, n) = (case.head_dim, case.group, case.kv_heads, case.tokens);
        let scores = inputs.scores(g, heads, n, bench_k(n))?;
        let rows = inputs.rows(d, heads, n)?;
        let fresh = self
            .prepared
            .as_ref()
            .is_none_or(|p| !Arc::ptr_eq(&p.scores, &scores) || !Arc::ptr_eq(&p.rows, &rows));
        if fresh {
            self.prepared = None;
            let uc = scores.union_capacity();
            let zero = bf16::from_bits(0);
            let (mut k_sel, mut v_sel) = (vec![zero; heads * uc * d], vec![zero; heads * uc * d]);
            for (h, s) in scores.selections.iter().enumerate() {
                for (u, &t) in s.union.iter().enumerate() {
                    let dst = (h * uc + u) * d;
                    k_sel[dst..dst + d].copy_from_slice(&rows.keys[h][t * d..(t + 1) * d]);
                    v_sel[dst..dst + d].copy_from_slice(&rows.values[h][t * d..(t + 1) * d]);
                }
            }
            let (pos, count) = scores.positions();
            let q = queries(d, g, heads);
            let want = reference_outputs(&scores, &k_sel, &v_sel, &q, d, g);
            let gpu = &dev.gpu;
            let query_heads = heads * g;
            self.prepared = Some(Prepared {
                partials: gpu
                    .filled::<f32>(query_heads * MAX_SPLITS as usize * (d + 2), 0xff)
                    .map_err(gpu_err)?,
                arrivals: gpu.filled::<u32>(query_heads, 0).map_err(gpu_err)?,
                k_dev: gpu.upload(&k_sel).map_err(gpu_err)?,
                v_dev: gpu.upload(&v_sel).map_err(gpu_err)?,
                sel_pos: gpu.upload(&pos).map_err(gpu_err)?,
                sel_count: gpu.upload(&count).map_err(gpu_err)?,
                q_dev: gpu.upload(&q).map_err(gpu_err)?,
                want,
                scores,
                rows,
            });
        }
        let specs: Vec<KernelSpec> = enumerate(case)
            .iter()
            .filter_map(|v| tile_spec(case, v).ok())
            .collect();
        dev.preload(&specs);
        let p = self.prepared.as_ref().ok_or("attention inputs missing")?;
        // Every query head reads its selected K and V rows once.
        let selected: usize = p
            .scores
            .selections
            .iter()
            .flat_map(|s| s.heads.iter().map(Vec::len))
            .sum();
        Ok(CaseInfo {
            bytes: Some((selected * d * 2 * 2) as u64),
            ceiling: Some(dev.read_ceiling(Placement::Hbm)),
        })
    }

    /// The launch of `variant` with a fresh (poisoned) output.
    pub fn candidate(
        &self,
        dev: &Device,
        case: &Case,
        variant: &Variant,
    ) -> Result<(Vec<Launch>, DeviceBuffer<f32>), String> {
        let p = self
            .prepared
            .as_ref()
            .ok_or("the attention case was not prepared")?;
        let KernelSpec::Attention(spec) = tile_spec(case, variant)? else {
            return Err(format!("{} is not an attention tile", variant.name()));
        };
        let mut out = dev
            .gpu
            .filled::<f32>(case.kv_heads * case.group * case.head_dim, 0xff)
            .map_err(gpu_err)?;
        let geometry = spec
            .launch(1, case.kv_heads as u64)
            .map_err(|e| e.to_string())?;
        let (scale, k) = (default_scale(case.head_dim) as f32, int(p.scores.k, "k")?);
        let args = if spec.splits > 1 {
            abi::attention_split::Args {
                k_sel: p.k_dev.ptr().cast(),
                v_sel: p.v_dev.ptr().cast(),
                sel_pos: p.sel_pos.ptr(),
                sel_count: p.sel_count.ptr(),
                q: p.q_dev.ptr(),
                scale,
                out: out.ptr_mut(),
                k,
                // Scratch the launches own alike: every launch rewrites the partials and
                // leaves the counters zero.
                partials: DevicePtrMut::from_addr(p.partials.addr()),
                arrivals: DevicePtrMut::from_addr(p.arrivals.addr()),
            }
            .args()
        } else {
            abi::attention::Args {
                k_sel: p.k_dev.ptr().cast(),
                v_sel: p.v_dev.ptr().cast(),
                sel_pos: p.sel_pos.ptr(),
                sel_count: p.sel_count.ptr(),
                q: p.q_dev.ptr(),
                scale,
                out: out.ptr_mut(),
                k,
            }
            .args()
        };
        let function = dev.function(spec.into())?;
        Ok((vec![launch(function, geometry, args)?], out))
    }

    /// Compares every query head's output with the f64 reference.
    pub fn check(&self, case: &Case, out: &DeviceBuffer<f32>) -> Result<(), String> {
        let p = self
            .prepared
            .as_ref()
            .ok_or("the attention case was not prepared")?;
        let d = case.head_dim;
        let got = out.download().map_err(gpu_err)?;
        for (qh, want) in p.want.iter().enumerate() {
            let err = relative_error(&got[qh * d..(qh + 1) * d], want);
            // NaN fails too.
            if err.is_nan() || err > MAX_RELATIVE_ERROR {
                return Err(format!(
                    "query head {qh}: relative error {err:.3e} (bound {MAX_RELATIVE_ERROR:.0e})"
                ));
            }
        }
        Ok(())
    }
}

/// The f64 reference output of every query head (`[H * G][D]`) over the fetched rows
/// `k_sel`, `v_sel` (`[H][UC][D]`) of `scores`' selections.
fn reference_outputs(
    scores: &HostScores,
    k_sel: &[bf16],
    v_sel: &[bf16],
    q: &[f32],
    d: usize,
    g: usize,
) -> Vec<Vec<f64>> {
    let uc = scores.union_capacity();
    let scale = f64::from(default_scale(d) as f32);
    let mut want = Vec::with_capacity(scores.selections.len() * g);
    for (h, s) in scores.selections.iter().enumerate() {
        let keys = &k_sel[h * uc * d..(h + 1) * uc * d];
        let values = &v_sel[h * uc * d..(h + 1) * uc * d];
        for gi in 0..g {
            want.push(attend(
                &query(q, h, gi, g, d),
                keys,
                values,
                d,
                &s.rows[gi],
                scale,
            ));
        }
    }
    want
}
