//! The JSON record of a run: a header naming the GPU, software, commit, date, ceilings and the
//! generator, and one [`Row`] per cell (method, context, batch, placement).

use runtime::ceilings::Ceilings;
use serde::{Deserialize, Serialize};

/// One cell's figures. Times and fidelity are `None` when the cell did not run (`status`
/// says why).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub model: String,
    /// Written as the issue writes it, e.g. `fathom(48)`.
    pub method: String,
    /// Bits per token per KV head the scoring reads (the plan's mean over the sampled heads
    /// for plane methods; landmark `16 D / 8`, oracle `16 D`, dense `32 D`: K and V rows).
    pub bits: Option<f64>,
    pub context: usize,
    pub batch: usize,
    /// `host` or `hbm`.
    pub placement: String,
    /// `ok`, `skipped: <why>` or `failed: <error>`.
    pub status: String,
    /// Median CUDA-event time of one step of every layer.
    pub gpu_ms: Option<f64>,
    /// Median host wall-clock of one step (queueing through completion).
    pub wall_ms: Option<f64>,
    /// `bytes_per_step` at the measured floor rate of the placement.
    pub floor_ms: Option<f64>,
    /// sparq(32)'s `gpu_ms` over this cell's, same context, batch and placement.
    pub ratio_to_sparq32: Option<f64>,
    /// Plane and scale bytes (landmark: means; oracle: K rows; dense: K and V rows) plus the
    /// winner K/V rows, all layers and sequences of one step.
    pub bytes_per_step: Option<u64>,
    /// Mean relative attention-output error against f64 dense attention (§9) over the
    /// sampled query heads.
    pub fidelity: Option<f64>,
    /// Mean recall@k against the exact f64 top-k over the sampled query heads, at
    /// `k = recall_k`.
    pub recall: Option<f64>,
    /// The `k` of `recall`: the method's own (`pariskv(k)`: its `k`; the other selecting
    /// methods: `paper_k(context)`); `None` for dense and for records written before it.
    #[serde(default)]
    pub recall_k: Option<usize>,
    /// Timed steps the median is of.
    pub steps: usize,
    /// `graph` (each layer's step captured once, replayed) or `eager` (`Decoder::step`).
    pub launch: String,
    /// SPEC §9's HBM footprint: device bytes the cell's `batch` resident sequences (every layer
    /// of the model, at `context` tokens) and the decoder's workspace for one step of them
    /// cost beyond the model; the sum of `hbm_footprint`.
    #[serde(default)]
    pub hbm_footprint_bytes: Option<u64>,
    /// Its parts: the store's (`KeyStore::resident_footprint`, times the batch) and the
    /// workspace's (`WorkspaceSizes::parts`), by name.
    #[serde(default)]
    pub hbm_footprint: Option<Vec<(String, u64)>>,
}

impl Row {
    /// A row of a cell that did not run.
    pub fn not_run(
        model: &str,
        method: &str,
        context: usize,
        batch: usize,
        placement: &str,
        status: String,
    ) -> Row {
        Row {
            model: model.into(),
            method: method.into(),
            bits: None,
            context,
            batch,
            placement: placement.into(),
            status,
            gpu_ms: None,
            wall_ms: None,
            floor_ms: None,
            ratio_to_sparq32: None,
            bytes_per_step: None,
            fidelity: None,
            recall: None,
            recall_k: None,
            steps: 0,
            launch: "-".into(),
            hbm_footprint_bytes: None,
            hbm_footprint: None,
        }
    }

    /// Whether the cell ran.
    pub fn ok(&self) -> bool {
        self.status == "ok"
    }
}

/// The synthetic generator's settings (SPEC §11) every slot was made with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Generator {
    /// `reference::synthetic::SyntheticSettings::describe` of slot 0.
    pub describe: String,
    /// Slot `s` is generated with `seed + s`.
    pub seed: u64,
    pub slots: usize,
    pub tokens: usize,
    pub scale_sigma: f64,
    pub outlier_channels: usize,
    pub outlier_factor: f64,
    pub mean_factor: f64,
    pub rope_base: f64,
    pub sink_tokens: usize,
    pub sink_norm: f64,
    pub needles: usize,
    pub needle_norm: f64,
    pub logit_std: f64,
    /// How calibration (σ², KLT, double_sparsity channels) was fitted.
    pub calibration: String,
}

/// Who measured what, where and when.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub gpu: String,
    pub compute_capability: String,
    pub driver_cuda: String,
    pub nvrtc: String,
    pub commit: String,
    /// `YYYY-MM-DD` (UTC).
    pub date: String,
    pub date_unix: u64,
    /// How the host placement's store was allocated (`pinned`, `registered`, `vmm2m`;
    /// `pinned` in records written before the option).
    #[serde(default = "pinned")]
    pub host_memory: String,
    /// How the stores laid out the K/V rows (`separate`, `adjacent`; `separate` in records
    /// written before the option).
    #[serde(default = "separate")]
    pub kv_rows: String,
    /// Where attention read the rows in HBM (`fetched`, `store`; `fetched` in records written
    /// before the option).
    #[serde(default = "fetched")]
    pub attention_rows: String,
    /// Blocks of the ParisKV query kernel per KV head (1 in records written before the
    /// option).
    #[serde(default = "one_block")]
    pub pariskv_query_blocks: u32,
    /// Whether the tail was scored on a second stream (`--overlap-tail`; false in records
    /// written before the option).
    #[serde(default)]
    pub overlap_tail: bool,
    /// KV-head groups a step was pipelined in (`--head-groups`; 1 in records written before
    /// the option, and where grouping does not apply).
    #[serde(default = "one_group")]
    pub head_groups: usize,
    /// Whether the plan's launch scored the tail (the default since 2026-12-06; false with
    /// `--tail-in-oracle`, and in records written before the plan could).
    #[serde(default)]
    pub tail_in_plan: bool,
    /// Whether the plan loaded its run tables' segment pointers in batches
    /// (`--plan-batched-runs`; false in records written before the option).
    #[serde(default)]
    pub plan_batched_runs: bool,
    /// Blocks a KV head that shared the plan's run tables when `--plan-run-blocks` set them
    /// (`None`: as many as each context asks, `PlanSpec::run_blocks_for`; records written
    /// before 2026-12-06's fifteenth session had one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_run_blocks: Option<usize>,
    /// Thread blocks a segment of the plane scan when `--scan-stripes` set them (`None`: the
    /// spec's stripes; absent in records written before the option).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan_stripes: Option<usize>,
    /// Whether the HBM scan's grid was fitted to one wave (the default since 2026-12-07's
    /// twenty-fourth session; false with `--scan-spec-grid` or `--scan-stripes`, and absent,
    /// false, in records written before).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub scan_one_wave: bool,
    /// Whether lane pairs wrote the plan's run-table entries (the default since 2026-12-06's
    /// sixteenth session; false with `--plan-unpaired-runs` or `--plan-batched-runs`, and
    /// absent, false, in records written before).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plan_paired_runs: bool,
    /// Whether fathom's plan found its water line directly (`--plan-direct-line`; absent in
    /// records written before the option).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plan_direct_line: bool,
    /// Whether attention's splits merged in a cluster (`--attention-cluster-merge`; absent in
    /// records written before the option).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attention_cluster_merge: bool,
    /// Whether attention prefetched its rows into L2 (`--attention-prefetch`; absent in records
    /// written before the option).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attention_prefetch_rows: bool,
    /// Whether a peaks select took its floor from two radix passes over the peaks (the default
    /// since 2026-12-06's sixteenth session; false with `--select-full-floor`, and in records
    /// written before).
    #[serde(default)]
    pub select_coarse_floor: bool,
    /// Whether the peaks selects that stream the scores owned their tiles
    /// (`--select-owned-tiles`; absent in records written before the option).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub select_owned_tiles: bool,
    /// Whether the one-block selects ran as the resident select (`--select-resident`; absent
    /// in records written before the option).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub select_resident: bool,
    pub model: String,
    pub layers: usize,
    pub kv_heads: usize,
    pub group: usize,
    pub head_dim: usize,
    pub block: usize,
    pub segment_words: usize,
    /// Top-k per query head (`paper_k` of each context; `pariskv(k)` its own), and the `k`
    /// of the recall column (each row's `recall_k`).
    pub k: String,
    pub steps: usize,
    pub cell_seconds: f64,
    pub ceilings: Ceilings,
    /// Which rate each placement's floor uses.
    pub floor_rates: Vec<(String, String, f64)>,
    pub generator: Generator,
    /// What the fidelity and recall columns are measured on.
    pub sample: String,
}

fn pinned() -> String {
    "pinned".into()
}

fn separate() -> String {
    "separate".into()
}

fn fetched() -> String {
    "fetched".into()
}

fn one_block() -> u32 {
    1
}

/// The head groups of records written before `--head-groups`.
fn one_group() -> usize {
    1
}

/// A whole run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub header: Header,
    pub rows: Vec<Row>,
    /// The targets, each `met` or how much it missed by.
    pub targets: Vec<(String, String)>,
}

/// `NVIDIA H200` → `h200`: lowercase, the vendor dropped, runs of other characters one `-`.
pub fn gpu_slug(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    let trimmed = lower.trim().trim_start_matches("nvidia").trim();
    let mut slug = String::new();
    for ch in trimmed.chars() {
        if ch.is_ascii_alphanumeric() {
            slug.push(ch);
        } else if !slug.ends_with('-') {
            slug.push('-');
        }
    }
    let slug = slug.trim_matches('-').to_string();
    if slug.is_empty() {
        "gpu".into()
    } else {
        slug
    }
}

/// `YYYY-MM-DD` of a Unix time (UTC), by the civil-from-days algorithm.
pub fn date_of(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// `step-<gpu-slug>-<date>-<commit>`: the stem of the JSON file and its plots.
pub fn file_stem(gpu: &str, date: &str, commit: &str) -> String {
    let commit: String = commit
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("step-{}-{date}-{commit}", gpu_slug(gpu))
}
