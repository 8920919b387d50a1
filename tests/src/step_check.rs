//! Checks of a whole decode step (`runtime::step`) against the f64 reference step of each query
//! group (`reference::step::step_group`), shared by `gpu_step.rs` (views built by
//! hand) and `gpu_decode.rs` (views of the key store).
//!
//! Per (sequence, KV head, query head):
//! - selection: the same count; a token in one selection and not the other is allowed only when
//!   its reference score is within fp32 tolerance of the k-th reference score (a tie within
//!   rounding): `|s_ref(t) − s_k| <= tol(t) + tol(t_k)`, `tol(t) = ρ·||q||·(||x_t|| + 4||Δ_t||)`
//!   with `x_t` the key (the landmark mean for `landmark`), `Δ_t` its block's scales (0 for a
//!   tail token or an exact method), `ρ = 2(D+2)·2⁻²⁴` (the scan's fp32 accumulation, see
//!   `gpu_scan.rs`), plus `2·D^1.5·2⁻²⁴` with a rotated store (the query is rotated in fp32 on
//!   the GPU);
//! - union: the sorted, deduplicated union of the GPU's own selections, and `uni[sel_pos[j]] ==
//!   sel[j]`;
//! - attention: relative error `<= max_relative_error` against the reference output when the
//!   selections are equal, else against the reference attention over the GPU's selection;
//! - `dense` (and any sequence of at most `SINK + LOCAL + k` tokens): every token selected.

use half::bf16;
use reference::attention::attend;
use reference::klt::Klt;
use reference::plans::DoubleSparsityCalibration;
use reference::score::scan_tolerance;
use reference::select::{LOCAL, SINK};
use reference::step::{step_group, GroupInput, GroupStep, StepConfig};
use reference::store::HeadStore;
use runtime::gpu::{DeviceBuffer, Gpu};
use runtime::step::{
    Decoder, HostStepOutput, LaunchPlan, Method, StepGraph, StepOutput, StepRequest, Transfer,
};
use runtime::tuning::{Tile, TuneKey, TunedFamily, Tuning};
use runtime::view::LayerView;

use crate::select_kernels::{relative_error, Mismatches};

/// One query group of a step (one KV head of one sequence) as the reference sees it.
pub struct GroupData<'a> {
    /// The reference store of the head, in the store basis.
    pub store: &'a HeadStore,
    /// Raw bf16 keys of every token, `[n][D]`.
    pub keys: &'a [bf16],
    /// bf16 values of every token, `[n][D]`.
    pub values: &'a [bf16],
    /// The `G` raw queries, as the GPU read them (fp32 values).
    pub queries: Vec<Vec<f64>>,
    /// The KLT basis of a rotated store.
    pub klt: Option<&'a Klt>,
    /// `σ²` in the store basis, as the GPU read it (fp32 values).
    pub sigma2: Vec<f64>,
    /// `double_sparsity`'s fixed channels.
    pub double_sparsity: Option<&'a DoubleSparsityCalibration>,
}

/// The step's parameters and the checks' tolerance.
#[derive(Clone, Copy, Debug)]
pub struct StepCheck {
    /// Top-k per query head.
    pub k: usize,
    /// The softmax scale.
    pub scale: f64,
    /// Whether the store is rotated (KLT): the GPU rotates the query in fp32.
    pub rotated: bool,
    /// The largest attention relative error allowed.
    pub max_relative_error: f64,
    /// Whether the step's scan runs on the tensor cores (`ScanSpec::tensor_cores`): its scores
    /// then carry that scan's looser bound (`reference::score::scan_tolerance`), and so do the
    /// ties the selection may break otherwise. [`StepCheck::for_plan`] sets it from the step's
    /// launch plan.
    pub tensor_core_scan: bool,
}

impl StepCheck {
    /// This check for a step that runs `plan` (whose scan may be on the tensor cores).
    pub fn for_plan(self, plan: &LaunchPlan) -> StepCheck {
        StepCheck {
            tensor_core_scan: plan.specs.scan.is_some_and(|s| s.tensor_cores),
            ..self
        }
    }
}

/// The reference step of every group for every method, `[method][group]`, computed on all
/// cores (long contexts make the f64 reference the slow part of a test).
pub fn reference_steps(
    groups: &[GroupData<'_>],
    methods: &[Method],
    check: &StepCheck,
) -> Vec<Vec<GroupStep>> {
    let tasks: Vec<(usize, usize)> = (0..methods.len())
        .flat_map(|m| (0..groups.len()).map(move |g| (m, g)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, tasks.len().max(1));
    let mut done: Vec<(usize, GroupStep)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(m, g)) = tasks.get(i) else { break };
                        out.push((i, reference_step(&groups[g], methods[m], check)));
                    }
                    out
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    let mut steps = done.into_iter().map(|(_, step)| step);
    methods
        .iter()
        .map(|_| steps.by_ref().take(groups.len()).collect())
        .collect()
}

/// The reference step of one group.
pub fn reference_step(group: &GroupData<'_>, method: Method, check: &StepCheck) -> GroupStep {
    let input = GroupInput {
        store: group.store,
        keys: group.keys,
        values: group.values,
        queries: &group.queries,
        klt: group.klt,
        sigma2: Some(&group.sigma2),
        double_sparsity: group.double_sparsity,
    };
    let config = StepConfig {
        method,
        k: check.k,
        scale: check.scale,
    };
    step_group(&input, &config).unwrap_or_else(|e| panic!("reference {method}: {e}"))
}

/// The fp32 rounding a score of token `t` may carry, for the selection's tie tolerance.
pub fn tolerance(
    check: &StepCheck,
    method: Method,
    group: &GroupData<'_>,
    q: &[f64],
    t: usize,
) -> f64 {
    let d = q.len();
    let u = f64::from(f32::EPSILON) / 2.0;
    let mut rho = 2.0 * (d as f64 + 2.0) * u;
    if check.rotated {
        rho += 2.0 * (d as f64).powf(1.5) * u;
    }
    let norm = |x: &mut dyn Iterator<Item = f64>| x.map(|v| v * v).sum::<f64>().sqrt();
    let qn = norm(&mut q.iter().copied());
    let keys = group.keys;
    let key = norm(&mut keys[t * d..(t + 1) * d].iter().map(|x| x.to_f64()));
    let store = group.store;
    let x = match method {
        Method::Landmark if t < store.stored_tokens() => {
            let j = t / 8;
            norm(&mut (0..d).map(|c| {
                (0..8)
                    .map(|r| keys[(8 * j + r) * d + c].to_f64())
                    .sum::<f64>()
                    / 8.0
            }))
        }
        Method::Oracle | Method::Landmark => key,
        // A prefix of t planes errs by at most 2^(3-t)·Δ <= 4Δ per channel.
        _ if t < store.stored_tokens() => {
            key + 4.0 * norm(&mut (0..d).map(|c| store.scale(t, c).to_f64()))
        }
        _ => key,
    };
    // The tensor-core scan's bound for any plan: that of every channel at depth 4.
    let tensor_cores =
        if check.tensor_core_scan && is_plane_method(method) && t < store.stored_tokens() {
            scan_tolerance(store, &vec![4; d], q, t, true)
        } else {
            0.0
        };
    rho * qn * x + tensor_cores + 1e-30
}

/// Compares one step's results with the reference of every group, `groups[b*H + h]` and
/// `want[b*H + h]` (see the module docs for what is compared).
pub fn check_step(
    check: &StepCheck,
    method: Method,
    got: &HostStepOutput,
    groups: &[GroupData<'_>],
    want: &[GroupStep],
    m: &mut Mismatches,
) {
    let layout = got.layout;
    let k = check.k;
    for b in 0..layout.batch {
        for h in 0..layout.kv_heads {
            let group = &groups[b * layout.kv_heads + h];
            let n = group.store.total_tokens();
            let d = layout.head_dim;
            let reference = &want[b * layout.kv_heads + h];
            let mut sets = Vec::new();
            for g in 0..layout.group {
                let q = &group.queries[g];
                let set: Vec<usize> = got.selected(b, h, g).iter().map(|&t| t as usize).collect();
                let ref_set = &reference.selection.heads[g];
                let at = format!("{method} ({b}, {h}, {g}) n = {n}");
                m.check(set.len() == ref_set.len(), || {
                    format!(
                        "{at}: {} rows selected, reference {}",
                        set.len(),
                        ref_set.len()
                    )
                });
                m.check(
                    set.windows(2).all(|w| w[0] < w[1]) && set.iter().all(|&t| t < n),
                    || format!("{at}: selection not ascending within the sequence: {set:?}"),
                );
                if method == Method::Dense || n <= SINK + LOCAL + k {
                    m.check(set == *ref_set, || {
                        format!("{at}: not every token is selected")
                    });
                } else if set != *ref_set {
                    // Differences must be ties within rounding around the k-th score.
                    let scores = &reference.scores[g];
                    // The k-th of the middle tokens by descending score, ties to the lower
                    // token (a total order, so it is unique); a selection, not a sort: long
                    // contexts have hundreds of thousands of tokens.
                    let mut middle: Vec<usize> = (SINK..n - LOCAL).collect();
                    let (_, &mut kth, _) = middle.select_nth_unstable_by(k - 1, |&a, &c| {
                        scores[c].total_cmp(&scores[a]).then(a.cmp(&c))
                    });
                    let tol_k = tolerance(check, method, group, q, kth);
                    let differing = set
                        .iter()
                        .filter(|t| ref_set.binary_search(t).is_err())
                        .chain(ref_set.iter().filter(|t| set.binary_search(t).is_err()));
                    for &t in differing {
                        let gap = (scores[t] - scores[kth]).abs();
                        let tol = tolerance(check, method, group, q, t) + tol_k;
                        m.check(gap <= tol, || {
                            format!(
                                "{at}: token {t} (reference score {}) differs; the k-th score is \
                                 {} (token {kth}), gap {gap:e} > tolerance {tol:e}",
                                scores[t], scores[kth]
                            )
                        });
                    }
                }
                // Attention over the selection the GPU made.
                let want_out = if set == *ref_set {
                    reference.outputs[g].clone()
                } else {
                    attend(q, group.keys, group.values, d, &set, check.scale)
                };
                let err = relative_error(got.output(b, h, g), &want_out);
                m.check(err <= check.max_relative_error, || {
                    format!("{at}: attention relative error {err:e}")
                });
                let positions = got.positions(b, h, g);
                let union = got.union(b, h);
                for (j, &p) in positions.iter().enumerate() {
                    let back = usize::try_from(p).ok().and_then(|p| union.get(p)).copied();
                    m.check(back == Some(set[j] as i32), || {
                        format!(
                            "{at}: uni[sel_pos[{j}] = {p}] = {back:?}, sel[{j}] = {}",
                            set[j]
                        )
                    });
                }
                sets.push(set);
            }
            let mut union: Vec<i32> = sets.iter().flatten().map(|&t| t as i32).collect();
            union.sort_unstable();
            union.dedup();
            m.check(got.union(b, h) == union.as_slice(), || {
                format!("{method} ({b}, {h}): uni is not the union of the selections")
            });
        }
    }
}

/// Poisons the step's outputs, so that a replay that writes nothing cannot match. `dense`'s
/// row tables are constants the step reads (written when the workspace grows), not outputs:
/// only its counts and attention outputs are poisoned.
pub fn poison(gpu: &Gpu, out: &StepOutput<'_>, dense: bool) {
    let mut buffers = vec![out.sel_count(), out.uni_count()];
    if !dense {
        buffers.extend([out.sel(), out.sel_pos(), out.uni()]);
    }
    for buffer in buffers {
        gpu.fill(buffer, 0xff).expect("poison");
    }
    gpu.fill(out.out(), 0xff).expect("poison");
}

/// One step run eagerly: queued, its outputs checked finite and read back; an error panics,
/// naming `what`.
pub fn eager_step(
    decoder: &mut Decoder,
    view: &LayerView<'_>,
    queries: &DeviceBuffer<f32>,
    request: StepRequest<'_>,
    what: &str,
) -> HostStepOutput {
    let out = decoder
        .step(view, queries, request)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    out.check().unwrap_or_else(|e| panic!("{what}: {e}"));
    out.download().unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// What one step is checked against: the step check (its ties are then judged as the step's
/// launch plan says, [`StepCheck::for_plan`]), the reference inputs of every query group and
/// the reference step of each.
pub struct Expected<'a> {
    pub check: &'a StepCheck,
    pub groups: &'a [GroupData<'a>],
    pub want: &'a [GroupStep],
}

/// The launch plan of `request` over `view`, then the step run eagerly ([`eager_step`]) and
/// checked against `expected` under the plan ([`check_step`]); its mismatches are reported
/// as `label` with `seed`. Returns the plan and the step for the caller's further checks.
pub fn checked_eager_step(
    decoder: &mut Decoder,
    view: &LayerView<'_>,
    queries: &DeviceBuffer<f32>,
    request: StepRequest<'_>,
    expected: &Expected<'_>,
    label: &str,
    seed: u64,
) -> (LaunchPlan, HostStepOutput) {
    let plan = decoder
        .launch_plan(view, &request)
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    let eager = eager_step(decoder, view, queries, request, label);
    let mut m = Mismatches::new(label, seed);
    check_step(
        &expected.check.for_plan(&plan),
        request.method,
        &eager,
        expected.groups,
        expected.want,
        &mut m,
    );
    m.finish();
    (plan, eager)
}

/// What a replay of `graph` writes, its outputs poisoned first (`dense`: the step of `dense`,
/// see [`poison`]) so that nothing left by an earlier step passes for it.
pub fn replayed(gpu: &Gpu, graph: &StepGraph, dense: bool) -> HostStepOutput {
    poison(gpu, &graph.output(gpu), dense);
    graph.replay(gpu).expect("replay");
    graph.output(gpu).download().expect("download replay")
}

/// The first place where a replayed step differs from the eager one. Only what the step wrote
/// is compared: rows past a head's count are not part of the output.
pub fn replay_difference(eager: &HostStepOutput, replayed: &HostStepOutput) -> Option<String> {
    let l = eager.layout;
    for b in 0..l.batch {
        for h in 0..l.kv_heads {
            let (e, r) = (eager.union(b, h), replayed.union(b, h));
            if e != r {
                return Some(format!("union of ({b}, {h}): {e:?} then {r:?}"));
            }
            for g in 0..l.group {
                let (e, r) = (eager.selected(b, h, g), replayed.selected(b, h, g));
                if e != r {
                    return Some(format!("selection of ({b}, {h}, {g}): {e:?} then {r:?}"));
                }
                let (e, r) = (eager.positions(b, h, g), replayed.positions(b, h, g));
                if e != r {
                    return Some(format!("positions of ({b}, {h}, {g}): {e:?} then {r:?}"));
                }
                let (e, r) = (eager.output(b, h, g), replayed.output(b, h, g));
                if e.iter()
                    .map(|x| x.to_bits())
                    .ne(r.iter().map(|x| x.to_bits()))
                {
                    return Some(format!("output of ({b}, {h}, {g}): {e:?} then {r:?}"));
                }
            }
        }
    }
    None
}

/// The methods of SPEC §4 a step test runs: `loki` only on a rotated store.
pub fn methods(rotated: bool) -> Vec<Method> {
    let mut methods = vec![
        Method::Fathom { bits: 48.0 },
        Method::Fathom { bits: 92.0 },
        Method::Sparq { r: 16 },
        Method::DoubleSparsity { r: 32 },
        Method::Thumbnail,
        Method::Uniform { t: 3 },
        Method::Landmark,
        Method::Oracle,
        Method::Dense,
    ];
    if rotated {
        methods.push(Method::Loki { r: 32 });
    }
    methods
}

/// Whether `method` scores bit planes (and so has a host-placement transfer).
pub fn is_plane_method(method: Method) -> bool {
    !matches!(method, Method::Landmark | Method::Oracle | Method::Dense)
}

/// A tuning record whose only entry is `.1`, the tile of family `.0` (both placements): every
/// step that runs that family runs it, every other lookup falls back to the default tiles and
/// transfer.
pub struct OnlyTile(pub TunedFamily, pub Tile);

/// A tuning that answers with these tiles for their families and nothing else.
pub struct OnlyTiles(pub Vec<(TunedFamily, Tile)>);

impl Tuning for OnlyTiles {
    fn tile(&self, key: &TuneKey) -> Option<Tile> {
        self.0
            .iter()
            .find(|(family, _)| *family == key.family)
            .map(|&(_, tile)| tile)
    }

    fn transfer(&self, _: usize, _: usize, _: u32) -> Option<Transfer> {
        None
    }
}

impl Tuning for OnlyTile {
    fn tile(&self, key: &TuneKey) -> Option<Tile> {
        (key.family == self.0).then_some(self.1)
    }

    fn transfer(&self, _: usize, _: usize, _: u32) -> Option<Transfer> {
        None
    }
}
