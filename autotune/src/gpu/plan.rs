//! The plan bench: the plan kernel of `fathom(PLAN_BITS)` over the host-placement store the
//! transfer cases use (the plan writes run tables and reads no planes, so the placement does
//! not matter), writing both run tables as the copy-kernel transfer has it. Each candidate's
//! depths are checked against the f64 reference planner (`reference::plans`) on the
//! kernel's own store-basis queries, its class counts against its depths, and its run tables
//! against those of the plan the scan candidates were verified with.

use codegen::model::Basis;
use codegen::spec::KernelSpec;
use reference::plans::{depth_plan, DepthPlan, Method, PlanContext};
use reference::store::BlockSize;
use runtime::tuning::Variant;

use super::device::{gpu_err, launch, Device, Launch};
use super::store::{plan_args, PlanOutputs, PLAN_BITS};
use super::Prepared;
use crate::candidates::{tile_spec, Case, BLOCK};

/// The launch of `variant` with fresh (poisoned) outputs.
pub(crate) fn candidate(
    dev: &Device,
    p: &Prepared,
    case: &Case,
    variant: &Variant,
) -> Result<(Vec<Launch>, PlanOutputs), String> {
    let KernelSpec::Plan(spec) = tile_spec(case, variant)? else {
        return Err(format!("{} is not a plan tile", variant.name()));
    };
    let out = PlanOutputs::new(&dev.gpu, &p.store, case.group, case.head_dim)?;
    let args = plan_args(&p.plan.inputs, &p.store, &p.staging, &out);
    let ((gx, gy, gz), (bx, by, bz), shared) = spec.launch_dims(1, case.kv_heads);
    let geometry = codegen::spec::launch::Launch {
        grid: [gx, gy, gz],
        block: [bx, by, bz],
        shared_bytes: shared,
    };
    let function = dev.function(spec.into())?;
    Ok((vec![launch(function, geometry, args)?], out))
}

/// Checks a run's outputs (see the module documentation).
pub(crate) fn check(p: &Prepared, case: &Case, out: &PlanOutputs) -> Result<(), String> {
    let (d, g) = (case.head_dim, case.group);
    let status = out.status.download().map_err(gpu_err)?;
    if status[0] != 0 {
        return Err(format!(
            "status {status:?}: the plan did not fit the staging"
        ));
    }
    let q_store = out.q_store.download().map_err(gpu_err)?;
    let depths = out.depths.download().map_err(gpu_err)?;
    let class_count = out.class_count.download().map_err(gpu_err)?;
    let block = BlockSize::from_tokens(BLOCK).map_err(|e| e.to_string())?;
    let sigma2 = &p.plan.inputs.sigma2;
    for h in 0..case.kv_heads {
        let queries: Vec<Vec<f64>> = (0..g)
            .map(|gi| {
                let at = (h * g + gi) * d;
                q_store[at..at + d].iter().map(|&x| f64::from(x)).collect()
            })
            .collect();
        let s2: Vec<f64> = sigma2[h * d..(h + 1) * d]
            .iter()
            .map(|&x| f64::from(x))
            .collect();
        let ctx = PlanContext {
            queries: &queries,
            sigma2: &s2,
            block,
            basis: Basis::Raw,
            double_sparsity: None,
        };
        let method = Method::Fathom {
            bits: f64::from(PLAN_BITS),
        };
        let want = match depth_plan(method, &ctx).map_err(|e| e.to_string())? {
            DepthPlan::Depths(plan) => plan.depths,
            other => return Err(format!("the reference gave {other:?}, not depths")),
        };
        let got = &depths[h * d..(h + 1) * d];
        if got != want.as_slice() {
            let c = (0..d).find(|&c| got[c] != want[c]).unwrap_or(0);
            return Err(format!(
                "head {h} channel {c}: depth {}, reference {}",
                got[c], want[c]
            ));
        }
        for (slot, t) in [4u8, 3, 2, 1].into_iter().enumerate() {
            let n = got.iter().filter(|&&x| x == t).count() as u32;
            if class_count[h * 4 + slot] != n {
                return Err(format!(
                    "head {h}: class_count[{slot}] = {}, {n} channels have depth {t}",
                    class_count[h * 4 + slot]
                ));
            }
        }
    }
    let same = |got: &runtime::gpu::DeviceBuffer<u64>,
                want: &runtime::gpu::DeviceBuffer<u64>,
                what: &str|
     -> Result<(), String> {
        let (a, b) = (
            got.download().map_err(gpu_err)?,
            want.download().map_err(gpu_err)?,
        );
        match a.iter().zip(&b).position(|(x, y)| x != y) {
            None if a.len() == b.len() => Ok(()),
            at => Err(format!(
                "{what} differs from the verified plan's at entry {}",
                at.unwrap_or(a.len().min(b.len()))
            )),
        }
    };
    same(&out.runs, &p.plan.runs, "the source run table")?;
    same(
        &out.staged_runs,
        &p.plan.staged_runs,
        "the staged run table",
    )
}
