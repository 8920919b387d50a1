//! The benches of the row families in one placement of the K/V rows: `oracle` (exact scores of
//! the whole context, as the `oracle` method runs it: for the tail of every other method one
//! block covers the rows, so no tile matters there), `landmark` (its `_scan`, as every step
//! runs it, over means of the rows made by `reference::score::landmark_means`) and
//! `fetch` (the union of the reference selection of the select bench's scores). Scores are
//! checked on a sample of tokens within fp32 rounding of the f64 reference, fetched rows bit
//! for bit, before anything is timed.

use std::sync::Arc;

use codegen::spec::{KernelSpec, Placement};
use half::{bf16, f16};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use reference::score::{landmark_means, LANDMARK_TOKENS};
use runtime::abi;
use runtime::gpu::DeviceBuffer;
use runtime::launch::{DevicePtr, KernelArgs};
use runtime::step::launches::token_capacity;
use runtime::tuning::TunedFamily;
use runtime::tuning::{Subject, Variant};

use super::device::{gpu_err, int, launch, Device, Launch};
use super::inputs::{queries, query, HostRows, HostScores, Inputs};
use super::store::Memory;
use super::SAMPLE_TOKENS;
use crate::candidates::{bench_k, enumerate, tile_spec, Case};
use crate::tuner::CaseInfo;

/// Rows of every head in one placement, with the device table of their addresses.
struct Table<T> {
    _heads: Vec<Memory<T>>,
    table: DeviceBuffer<u64>,
}

impl<T: Copy> Table<T> {
    fn new(dev: &Device, placement: Placement, per_head: &[Vec<T>]) -> Result<Self, String> {
        let heads = per_head
            .iter()
            .map(|data| Memory::new(&dev.gpu, placement, data))
            .collect::<Result<Vec<_>, _>>()?;
        let addrs: Vec<u64> = heads.iter().map(Memory::addr).collect();
        Ok(Table {
            table: dev.gpu.upload(&addrs).map_err(gpu_err)?,
            _heads: heads,
        })
    }
}

struct Prepared {
    placement: Placement,
    group: usize,
    rows: Arc<HostRows>,
    scores: Arc<HostScores>,
    keys: Table<bf16>,
    values: Table<bf16>,
    /// Landmark means, `[H]` of `[n/8][D]` fp16 (host copies for the reference).
    means_host: Arc<Vec<Vec<f16>>>,
    means: Table<f16>,
    q: Vec<f32>,
    q_dev: DeviceBuffer<f32>,
    /// `[1]`: tokens of the sequence (all stored).
    n_total: DeviceBuffer<i32>,
    uni: DeviceBuffer<i32>,
    uni_count: DeviceBuffer<i32>,
    /// `[H][G][capacity]` fp32, written by oracle and landmark.
    out_scores: DeviceBuffer<f32>,
    capacity: usize,
    sample: Vec<usize>,
}

/// What a row candidate writes.
pub enum Outputs {
    /// Scores, into the prepared buffer.
    Scores,
    /// Fetched `[H][UC][D]` keys and values.
    Rows(DeviceBuffer<bf16>, DeviceBuffer<bf16>),
}

/// Times oracle, landmark and fetch candidates.
#[derive(Default)]
pub struct RowsBench {
    prepared: Option<Prepared>,
}

fn family(case: &Case) -> Result<TunedFamily, String> {
    match case.subject {
        Subject::Kernel(f @ (TunedFamily::Oracle | TunedFamily::Landmark | TunedFamily::Fetch)) => {
            Ok(f)
        }
        other => Err(format!("{other} is not a row family")),
    }
}

impl RowsBench {
    /// Frees the prepared inputs (on the device and the host) until the next case of this
    /// bench.
    pub fn release(&mut self) {
        self.prepared = None;
    }

    /// Places the rows, means, queries and union of `case` (kept while the shape, context and
    /// placement stay).
    pub fn prepare(
        &mut self,
        dev: &Device,
        inputs: &mut Inputs,
        case: &Case,
    ) -> Result<CaseInfo, String> {
        let family = family(case)?;
        let (d, g, heads, n) = (case.head_dim, case.group, case.kv_heads, case.tokens);
        let rows = inputs.rows(d, heads, n)?;
        let scores = inputs.scores(g, heads, n, bench_k(n))?;
        let same = self.prepared.as_ref().is_some_and(|p| {
            Arc::ptr_eq(&p.rows, &rows)
                && Arc::ptr_eq(&p.scores, &scores)
                && p.placement == case.placement
                && p.group == g
        });
        if !same {
            // The means of these rows may be kept across placements; everything else goes.
            let means_host = match self.prepared.take() {
                Some(p) if Arc::ptr_eq(&p.rows, &rows) => p.means_host,
                _ => Arc::new(make_means(&rows)?),
            };
            self.prepared = Some(place(dev, case, rows, scores, means_host)?);
        }
        let specs: Vec<KernelSpec> = enumerate(case)
            .iter()
            .filter_map(|v| tile_spec(case, v).ok())
            .collect();
        dev.preload(&specs);
        let p = self.prepared.as_ref().ok_or("row inputs missing")?;
        let bytes = match family {
            TunedFamily::Oracle => heads * n * d * 2,
            TunedFamily::Landmark => heads * (n / LANDMARK_TOKENS) * d * 2,
            _ => {
                let union: usize = p.scores.selections.iter().map(|s| s.union.len()).sum();
                union * d * 2 * 2
            }
        };
        let ceiling = dev.read_ceiling(case.placement);
        Ok(CaseInfo {
            bytes: Some(bytes as u64),
            ceiling: Some(ceiling),
        })
    }

    /// The launch of `variant`, its outputs poisoned.
    pub fn candidate(
        &self,
        dev: &Device,
        case: &Case,
        variant: &Variant,
    ) -> Result<(Vec<Launch>, Outputs), String> {
        let p = self
            .prepared
            .as_ref()
            .ok_or("the row case was not prepared")?;
        let heads = case.kv_heads;
        let (h64, hi) = (heads as u64, int(heads, "num_kv_heads")?);
        let ld = int(p.capacity, "ld_scores")?;
        let spec = tile_spec(case, variant)?;
        let (function, geometry, args, outputs) = match spec {
            KernelSpec::Oracle(s) => {
                dev.gpu.fill(&p.out_scores, 0xff).map_err(gpu_err)?;
                let args = abi::oracle::Args {
                    k_rows: p.keys.table.ptr().cast(),
                    q: p.q_dev.ptr(),
                    range_start: DevicePtr::null(),
                    range_end: p.n_total.ptr(),
                    scores: p.out_scores.shared_ptr_mut(),
                    ld_scores: ld,
                    num_kv_heads: hi,
                }
                .args();
                let geometry = s
                    .launch(1, h64, p.capacity as u64)
                    .map_err(|e| e.to_string())?;
                (dev.function(spec)?, geometry, args, Outputs::Scores)
            }
            KernelSpec::Landmark(s) => {
                dev.gpu.fill(&p.out_scores, 0xff).map_err(gpu_err)?;
                let args = abi::landmark::ScanArgs {
                    means: p.means.table.ptr().cast(),
                    q: p.q_dev.ptr(),
                    n_stored: p.n_total.ptr(),
                    scores: p.out_scores.shared_ptr_mut(),
                    ld_scores: ld,
                    num_kv_heads: hi,
                }
                .args();
                let geometry = s
                    .launch_scan(1, h64, p.capacity as u64)
                    .map_err(|e| e.to_string())?;
                (
                    dev.entry(spec, &s.scan_entry())?,
                    geometry,
                    args,
                    Outputs::Scores,
                )
            }
            KernelSpec::Fetch(s) => {
                let len = heads * p.scores.union_capacity() * case.head_dim;
                let mut k_sel = dev.gpu.filled::<bf16>(len, 0xff).map_err(gpu_err)?;
                let mut v_sel = dev.gpu.filled::<bf16>(len, 0xff).map_err(gpu_err)?;
                let args = abi::fetch::Args {
                    k_rows: p.keys.table.ptr().cast(),
                    v_rows: p.values.table.ptr().cast(),
                    uni: p.uni.ptr(),
                    uni_count: p.uni_count.ptr(),
                    k_sel: k_sel.ptr_mut().cast(),
                    v_sel: v_sel.ptr_mut().cast(),
                    k: int(p.scores.k, "k")?,
                    num_kv_heads: hi,
                }
                .args();
                let geometry = s
                    .launch(1, h64, p.scores.k as u64)
                    .map_err(|e| e.to_string())?;
                (
                    dev.function(spec)?,
                    geometry,
                    args,
                    Outputs::Rows(k_sel, v_sel),
                )
            }
            other => return Err(format!("{} is not a row family", other.family())),
        };
        Ok((vec![launch(function, geometry, args)?], outputs))
    }

    /// Compares a run's outputs with the reference.
    pub fn check(&self, dev: &Device, case: &Case, out: &Outputs) -> Result<(), String> {
        let p = self
            .prepared
            .as_ref()
            .ok_or("the row case was not prepared")?;
        match out {
            Outputs::Rows(k_sel, v_sel) => check_rows(p, case, k_sel, v_sel),
            Outputs::Scores => {
                let family = family(case)?;
                dev.read_back(&p.out_scores, |got| check_scores(p, case, family, got))?
            }
        }
    }
}

/// The landmark means of every head, on all cores.
fn make_means(rows: &HostRows) -> Result<Vec<Vec<f16>>, String> {
    let (d, n) = (rows.head_dim, rows.tokens);
    std::thread::scope(|scope| {
        let workers: Vec<_> = rows
            .keys
            .iter()
            .map(|keys| scope.spawn(move || landmark_means(keys, d, n)))
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .map_err(|_| "making the landmark means panicked".to_string())
            })
            .collect()
    })
}

fn place(
    dev: &Device,
    case: &Case,
    rows: Arc<HostRows>,
    scores: Arc<HostScores>,
    means_host: Arc<Vec<Vec<f16>>>,
) -> Result<Prepared, String> {
    let (d, g, heads, n) = (case.head_dim, case.group, case.kv_heads, case.tokens);
    let gpu = &dev.gpu;
    let capacity = token_capacity(n);
    let (uni, uni_count) = scores.unions();
    let q = queries(d, g, heads);
    let mut rng = ChaCha8Rng::seed_from_u64(n as u64 ^ 0x0c1e);
    let mut sample: Vec<usize> = (0..n).collect();
    sample.shuffle(&mut rng);
    sample.truncate(SAMPLE_TOKENS);
    sample.extend([0, n - 1]);
    Ok(Prepared {
        placement: case.placement,
        group: g,
        keys: Table::new(dev, case.placement, &rows.keys)?,
        values: Table::new(dev, case.placement, &rows.values)?,
        means: Table::new(dev, case.placement, &means_host)?,
        q_dev: gpu.upload(&q).map_err(gpu_err)?,
        n_total: gpu.upload(&[n as i32]).map_err(gpu_err)?,
        uni: gpu.upload(&uni).map_err(gpu_err)?,
        uni_count: gpu.upload(&uni_count).map_err(gpu_err)?,
        out_scores: gpu.filled(heads * g * capacity, 0xff).map_err(gpu_err)?,
        q,
        means_host,
        rows,
        scores,
        capacity,
        sample,
    })
}

/// `γ_n = n·u / (1 − n·u)`: a sum of `n` products in precision `u`, in any order, lies within
/// `γ_n · Σ|a_i·b_i|` of the exact value.
fn gamma(n: usize, unit_roundoff: f64) -> f64 {
    let nu = n as f64 * unit_roundoff;
    nu / (1.0 - nu)
}

/// The reference value and tolerance of `q · x` computed in fp32 (the bound of the oracle and
/// landmark tests: fp32 rounding of the sum, the f64 reference's own, and underflow).
fn dot(q: &[f64], x: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut sum, mut mass) = (0.0, 0.0);
    for (a, b) in q.iter().zip(x) {
        sum += a * b;
        mass += (a * b).abs();
    }
    let d = q.len();
    let tol = (gamma(d, f64::from(f32::EPSILON) / 2.0) + gamma(d, f64::EPSILON / 2.0)) * mass
        + d as f64 * f64::from(f32::MIN_POSITIVE);
    (sum, tol)
}

fn check_scores(p: &Prepared, case: &Case, family: TunedFamily, got: &[f32]) -> Result<(), String> {
    let (d, g) = (case.head_dim, case.group);
    let scored = match family {
        TunedFamily::Landmark => case.tokens / LANDMARK_TOKENS * LANDMARK_TOKENS,
        _ => case.tokens,
    };
    for h in 0..case.kv_heads {
        for gi in 0..g {
            let q = query(&p.q, h, gi, g, d);
            let row = &got[(h * g + gi) * p.capacity..];
            for &i in p.sample.iter().filter(|&&i| i < scored) {
                let (want, tol) = match family {
                    TunedFamily::Landmark => {
                        let m = &p.means_host[h][i / LANDMARK_TOKENS * d..][..d];
                        dot(&q, m.iter().map(|x| x.to_f64()))
                    }
                    _ => {
                        let k = &p.rows.keys[h][i * d..(i + 1) * d];
                        dot(&q, k.iter().map(|x| x.to_f64()))
                    }
                };
                let s = row[i];
                // NaN is a mismatch too.
                let off = (f64::from(s) - want).abs();
                if off.is_nan() || off > tol {
                    return Err(format!(
                        "head {h} query {gi} token {i}: {s}, want {want} (tolerance {tol:.3e})"
                    ));
                }
            }
        }
    }
    Ok(())
}

fn check_rows(
    p: &Prepared,
    case: &Case,
    k_sel: &DeviceBuffer<bf16>,
    v_sel: &DeviceBuffer<bf16>,
) -> Result<(), String> {
    let d = case.head_dim;
    let uc = p.scores.union_capacity();
    let (k, v) = (
        k_sel.download().map_err(gpu_err)?,
        v_sel.download().map_err(gpu_err)?,
    );
    for (h, s) in p.scores.selections.iter().enumerate() {
        for (u, &t) in s.union.iter().enumerate() {
            let at = (h * uc + u) * d;
            let bits = |x: &[bf16]| x.iter().map(|v| v.to_bits()).collect::<Vec<u16>>();
            let (gk, gv) = (bits(&k[at..at + d]), bits(&v[at..at + d]));
            let wk = bits(&p.rows.keys[h][t * d..(t + 1) * d]);
            let wv = bits(&p.rows.values[h][t * d..(t + 1) * d]);
            if gk != wk || gv != wv {
                return Err(format!(
                    "kv head {h}: fetched row {u} (token {t}) differs from the source"
                ));
            }
        }
    }
    Ok(())
}
