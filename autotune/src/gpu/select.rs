//! The select bench: the whole select stage (the launches of `SelectSpec::plan`: ten; twelve
//! for the compacting variant, three for the one-read one; at the step's token capacity and
//! score stride) on fresh random scores, checked exactly against `reference::select`
//! before it is timed.

use codegen::spec::{peaks, Placement};
use std::sync::Arc;

use codegen::spec::KernelSpec;
use runtime::abi::{select_args, SelectBuffers};
use runtime::gpu::DeviceBuffer;
use runtime::step::launches::token_capacity;
use runtime::tuning::Variant;

use super::device::{gpu_err, launch, Device, Launch};
use super::inputs::{HostScores, Inputs};
use crate::candidates::{bench_k, enumerate, tile_spec, Case};
use crate::tuner::CaseInfo;

/// Scores on the device, as the step lays them out.
struct Prepared {
    host: Arc<HostScores>,
    /// `[H][G][capacity]` fp32.
    scores: DeviceBuffer<f32>,
    /// `[1]`: the sequence's tokens.
    n_total: DeviceBuffer<i32>,
    /// `[H][G][ld_peaks]`: what the scan would write for the scan-peaks variants (every token
    /// stored), whose time here leaves out the scan's share of writing them.
    peaks: DeviceBuffer<u32>,
    capacity: usize,
}

/// The outputs and workspaces of one candidate's selection.
pub struct Outputs {
    sel: DeviceBuffer<i32>,
    sel_pos: DeviceBuffer<i32>,
    sel_count: DeviceBuffer<i32>,
    uni: DeviceBuffer<i32>,
    uni_count: DeviceBuffer<i32>,
    state: DeviceBuffer<u32>,
    chunk_counts: DeviceBuffer<u32>,
    /// The compacting or one-read variant's candidates, the compacting one's runs (one poisoned
    /// word where a variant never reads them).
    candidates: DeviceBuffer<u32>,
    candidate_runs: DeviceBuffer<u32>,
    /// The fused one-read variant's arrival counters: zeroed (every launch leaves them so).
    arrivals: DeviceBuffer<u32>,
    scratch: DeviceBuffer<i32>,
}

/// Times select candidates.
#[derive(Default)]
pub struct SelectBench {
    prepared: Option<Prepared>,
}

impl SelectBench {
    /// Frees the prepared inputs (on the device and the host) until the next case of this
    /// bench.
    pub fn release(&mut self) {
        self.prepared = None;
    }

    /// Makes (or keeps) the scores of `case` and uploads them.
    pub fn prepare(
        &mut self,
        dev: &Device,
        inputs: &mut Inputs,
        case: &Case,
    ) -> Result<CaseInfo, String> {
        let (g, heads, n) = (case.group, case.kv_heads, case.tokens);
        let host = inputs.scores(g, heads, n, bench_k(n))?;
        let fresh = self
            .prepared
            .as_ref()
            .is_none_or(|p| !Arc::ptr_eq(&p.host, &host));
        if fresh {
            self.prepared = None;
            let capacity = token_capacity(n);
            let mut laid = vec![0f32; heads * g * capacity];
            for (qh, row) in host.scores.iter().enumerate() {
                laid[qh * capacity..qh * capacity + n].copy_from_slice(row);
            }
            let ld_peaks = peaks::ld_peaks(capacity);
            let mut half = vec![0u32; heads * g * ld_peaks];
            peaks::half_peaks(&laid, capacity, |_| n, &mut half, ld_peaks);
            self.prepared = Some(Prepared {
                scores: dev.gpu.upload(&laid).map_err(gpu_err)?,
                n_total: dev.gpu.upload(&[n as i32]).map_err(gpu_err)?,
                peaks: dev.gpu.upload(&half).map_err(gpu_err)?,
                host,
                capacity,
            });
        }
        let specs: Vec<KernelSpec> = enumerate(case)
            .iter()
            .filter_map(|v| tile_spec(case, v).ok())
            .collect();
        dev.preload(&specs);
        // Three histogram passes, the count and the write each read every score once. The
        // compacting variant reads them twice on most inputs, but its candidates are judged by
        // the same bytes: the rate is the plain select's work over the time, so the two compare.
        let bytes = 5 * heads * g * n * 4;
        Ok(CaseInfo {
            bytes: Some(bytes as u64),
            ceiling: Some(dev.read_ceiling(Placement::Hbm)),
        })
    }

    /// The launches of `variant` with fresh (poisoned) outputs and workspaces.
    pub fn candidate(
        &self,
        dev: &Device,
        case: &Case,
        variant: &Variant,
    ) -> Result<(Vec<Launch>, Outputs), String> {
        let p = self
            .prepared
            .as_ref()
            .ok_or("the select case was not prepared")?;
        let KernelSpec::Select(spec) = tile_spec(case, variant)? else {
            return Err(format!("{} is not a select tile", variant.name()));
        };
        let heads = case.kv_heads;
        let k = p.host.k;
        let plan = spec
            .plan(1, heads as u64, p.capacity as u64, k as u64)
            .map_err(|e| e.to_string())?;
        let words = |w: u64| usize::try_from(w).map_err(|_| format!("{w} words do not fit"));
        let gpu = &dev.gpu;
        let mut out = Outputs {
            sel: gpu.filled(words(plan.sel_words)?, 0xff).map_err(gpu_err)?,
            sel_pos: gpu.filled(words(plan.sel_words)?, 0xff).map_err(gpu_err)?,
            sel_count: gpu.filled(heads * case.group, 0xff).map_err(gpu_err)?,
            uni: gpu.filled(words(plan.uni_words)?, 0xff).map_err(gpu_err)?,
            uni_count: gpu.filled(heads, 0xff).map_err(gpu_err)?,
            // The one-read variant keeps no state: one poisoned word it never reads.
            state: gpu
                .filled(words(plan.state_words.max(1))?, 0xff)
                .map_err(gpu_err)?,
            chunk_counts: gpu
                .filled(words(plan.chunk_count_words)?, 0xff)
                .map_err(gpu_err)?,
            candidates: gpu
                .filled(words(plan.candidate_words.max(1))?, 0xff)
                .map_err(gpu_err)?,
            candidate_runs: gpu
                .filled(words(plan.candidate_run_words.max(1))?, 0xff)
                .map_err(gpu_err)?,
            arrivals: gpu
                .filled(words(plan.arrival_words.max(1))?, 0)
                .map_err(gpu_err)?,
            scratch: gpu
                .filled(words(plan.scratch_words)?, 0xff)
                .map_err(gpu_err)?,
        };
        let i32_of = |value: usize, what: &str| {
            i32::try_from(value)
                .map_err(|_| format!("{what} = {value} does not fit a kernel's int"))
        };
        let buffers = SelectBuffers {
            scores: p.scores.ptr(),
            ld_scores: i32_of(p.capacity, "ld_scores")?,
            n_total: p.n_total.ptr(),
            n_stored: p.n_total.ptr(),
            peaks: p.peaks.ptr(),
            ld_peaks: i32_of(peaks::ld_peaks(p.capacity), "ld_peaks")?,
            k: i32_of(k, "k")?,
            num_kv_heads: i32_of(heads, "num_kv_heads")?,
            chunks: i32_of(words(plan.chunks)?, "chunks")?,
            state: out.state.ptr_mut(),
            chunk_counts: out.chunk_counts.ptr_mut(),
            // `uint2` candidates, allocated as pairs of `u32`.
            candidates: out.candidates.ptr_mut().cast(),
            candidate_runs: out.candidate_runs.ptr_mut(),
            arrivals: out.arrivals.ptr_mut(),
            scratch: out.scratch.ptr_mut(),
            sel: out.sel.ptr_mut(),
            sel_pos: out.sel_pos.ptr_mut(),
            sel_count: out.sel_count.ptr_mut(),
            uni: out.uni.ptr_mut(),
            uni_count: out.uni_count.ptr_mut(),
        };
        let mut launches = Vec::with_capacity(plan.launches.len());
        for (stage, geometry) in plan.launches {
            let args = select_args(spec.algorithm, stage, &buffers).map_err(|e| e.to_string())?;
            let function = dev.entry(spec.into(), &spec.entry(stage))?;
            launches.push(launch(function, geometry, args)?);
        }
        Ok((launches, out))
    }

    /// Compares a run's outputs with the reference selection: every count, every selected
    /// token and row position, and the union, exactly.
    pub fn check(&self, out: &Outputs) -> Result<(), String> {
        let p = self
            .prepared
            .as_ref()
            .ok_or("the select case was not prepared")?;
        let host = &p.host;
        let (g, sc, uc) = (host.group, host.selection_capacity(), host.union_capacity());
        let sel = out.sel.download().map_err(gpu_err)?;
        let sel_pos = out.sel_pos.download().map_err(gpu_err)?;
        let sel_count = out.sel_count.download().map_err(gpu_err)?;
        let uni = out.uni.download().map_err(gpu_err)?;
        let uni_count = out.uni_count.download().map_err(gpu_err)?;
        for (h, want) in host.selections.iter().enumerate() {
            if uni_count[h] as usize != want.union.len() {
                return Err(format!(
                    "kv head {h}: uni_count {}, reference {}",
                    uni_count[h],
                    want.union.len()
                ));
            }
            for (u, &t) in want.union.iter().enumerate() {
                if uni[h * uc + u] != t as i32 {
                    return Err(format!(
                        "kv head {h}: uni[{u}] = {}, reference {t}",
                        uni[h * uc + u]
                    ));
                }
            }
            for gi in 0..g {
                let qh = h * g + gi;
                let (set, rows) = (&want.heads[gi], &want.rows[gi]);
                if sel_count[qh] as usize != set.len() {
                    return Err(format!(
                        "query head {qh}: sel_count {}, reference {}",
                        sel_count[qh],
                        set.len()
                    ));
                }
                for (j, (&t, &r)) in set.iter().zip(rows).enumerate() {
                    let (got_t, got_r) = (sel[qh * sc + j], sel_pos[qh * sc + j]);
                    if (got_t, got_r) != (t as i32, r as i32) {
                        return Err(format!(
                            "query head {qh}: sel[{j}] = {got_t}, sel_pos[{j}] = {got_r}; \
                             reference {t}, {r}"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}
