//! The command line of `step-bench` and its validation into [`Options`].

use std::path::PathBuf;

use clap::Parser;
use codegen::spec::attention::{AttentionRows, AttentionRowsParseError};
use codegen::spec::kv_rows::KvRowsParseError;
use codegen::spec::{KvRows, Placement};
use reference::plans::{Method, MethodParseError};
use runtime::store::host_memory::HostMemoryParseError;
use runtime::store::HostMemory;
use thiserror::Error;

/// Runs the SPEC §9 decode-step protocol on the GPU for a preset and writes the results.
#[derive(Parser, Debug, Clone)]
#[command(name = "step-bench")]
pub struct Args {
    /// The preset whose shape (layers, KV heads, group, head dim) is stepped.
    #[arg(long, default_value = "qwen3-8b")]
    pub model: String,
    /// Contexts, comma-separated: `32k`, `128k`, `1m` or token counts (default
    /// 32k,128k,256k,1m; with --quick 32k,128k).
    #[arg(long)]
    pub contexts: Option<String>,
    /// Batch sizes, comma-separated (default 1,4; with --quick 1).
    #[arg(long)]
    pub batch: Option<String>,
    /// Placements, comma-separated: host, hbm (default both).
    #[arg(long)]
    pub placement: Option<String>,
    /// Methods, comma-separated, e.g. "fathom(48),sparq(32),dense" (default: the §9 list).
    #[arg(long)]
    pub methods: Option<String>,
    /// Timed steps per cell after warm-up, at least 1 (default 20; with --quick 5).
    #[arg(long)]
    pub steps: Option<usize>,
    /// Directory of the JSON record and the plots.
    #[arg(long, default_value = "bench/results")]
    pub out: PathBuf,
    /// Smoke run: contexts 32k and 128k, batch 1, 5 steps.
    #[arg(long)]
    pub quick: bool,
    /// Commit named in the record (default: $FATHOM_COMMIT, else "unknown").
    #[arg(long)]
    pub commit: Option<String>,
    /// Distinct synthetic layers per store; layer l of a step reads slot l % slots.
    #[arg(long, default_value_t = 4)]
    pub slots: usize,
    /// Timing budget of one `oracle` or `dense` cell in seconds: such a cell whose warm-up step
    /// says that `--steps` steps would take longer times fewer (at least 3), and its row says
    /// how many. Every other method is always timed over `--steps` steps.
    #[arg(long, default_value_t = 3.0)]
    pub cell_seconds: f64,
    /// Seed of the synthetic generator (slot s uses seed + s).
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// How the host placement's store is allocated: pinned (cuMemHostAlloc), registered
    /// (2 MiB pages registered) or vmm2m (VMM host memory); required, so a machine without it
    /// stops the run.
    #[arg(long, default_value = "pinned")]
    pub host_memory: String,
    /// How the stores lay out the K/V rows: adjacent (a token's K row then its V row: one
    /// 4*D-byte run per token for the fetch; the runtime's default) or separate (K rows and V
    /// rows apart).
    #[arg(long, default_value = runtime::store::StoreConfig::DEFAULT_KV_ROWS.as_str())]
    pub kv_rows: String,
    /// Where attention reads the selected rows with the store in HBM: store (the store's own
    /// rows by token, no fetch; the runtime's default) or fetched (into staging first).
    #[arg(long, default_value = "store")]
    pub attention_rows: String,
    /// Blocks of the ParisKV query kernel per KV head, each ranking a share of the subspaces
    /// (16, the runtime's default: one a subspace at D = 128; 1 ranks every subspace in turn;
    /// at most one a subspace is used).
    #[arg(long, default_value_t = runtime::tuning::Tiles::default().pariskv_query_blocks,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub pariskv_query_blocks: u32,
    /// Score the tail (the tokens past the last encoded segment) on a second stream beside the
    /// plan and the scan (`DecoderConfig::overlap_tail`, off by default).
    #[arg(long)]
    pub overlap_tail: bool,
    /// Pipeline each step's KV heads in this many groups on two streams
    /// (`DecoderConfig::head_groups`; 1, the default, runs steps whole). It must divide the
    /// model's KV heads; it applies to batch 1.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub head_groups: u32,
    /// Score the tail in an oracle launch after the scan instead of blocks of the plan's
    /// launch (`Tiles::tail_in_plan` false; the runtime scores it in the plan's launch).
    #[arg(long)]
    pub tail_in_oracle: bool,
    /// Load the plan's run-table segment pointers in batches before storing the entries
    /// (`Tiles::plan_batched_runs`, off by default: exact, no faster on the H100; files
    /// `-planrb`).
    #[arg(long)]
    pub plan_batched_runs: bool,
    /// Share each (KV head, sequence)'s plan run tables among N blocks of the plan's launch
    /// (`Tiles::plan_run_blocks`; without it, as many as the context asks:
    /// `PlanSpec::run_blocks_for`, 1 up to 8 segments (256k tokens), 4 at 1M; 1 has one block write
    /// them, as before 2026-12-06; files `-planrtN`).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=codegen::spec::PlanSpec::MAX_RUN_BLOCKS as i64))]
    pub plan_run_blocks: Option<u32>,
    /// Launch the plane scan with N thread blocks a segment (`Tiles::scan_stripes`; 1 to the
    /// segment's tiles, checked against the scan's tile when the step is built; without it, the
    /// spec's stripes of up to 8 tiles; files `-scanstripesN`): to fit its grid to the GPU's
    /// waves.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub scan_stripes: Option<u32>,
    /// Launch the HBM plane scan with the spec's grid, as before 2026-12-07's twenty-fourth
    /// session (`Tiles::scan_one_wave` false; the default fits it to one wave of the GPU where
    /// the spec's takes more: the most stripes a segment whose blocks are all resident at
    /// once; `--scan-stripes` overrides both; files `-scanspecgrid`).
    #[arg(long)]
    pub scan_spec_grid: bool,
    /// Write each plan run-table entry from one lane, both its 16-byte halves, as before
    /// 2026-12-06's sixteenth session (`Tiles::plan_paired_runs` false; the default writes an
    /// entry from a lane pair; files `-planunpaired`).
    #[arg(long)]
    pub plan_unpaired_runs: bool,
    /// Find fathom's water line directly, from the channels' depth boundaries sorted by level
    /// (`Tiles::plan_direct_line`, opt-in: exact on an H100 but no faster; files `-plandl`).
    #[arg(long)]
    pub plan_direct_line: bool,
    /// Merge attention's split partials in a thread-block cluster where a query head has 2 to
    /// 8 blocks (`Tiles::attention_cluster_merge`, off by default until timed; files
    /// `-attncm`).
    #[arg(long)]
    pub attention_cluster_merge: bool,
    /// Have attention ask L2 for every row of a block's share before its first batch loads
    /// (`Tiles::attention_prefetch_rows`, opt-in: exact on an H100 but 1.7% slower at HBM 32k;
    /// files `-attnpf`).
    #[arg(long)]
    pub attention_prefetch: bool,
    /// Take a peaks select's floor from all three radix passes over the peaks (the exact k-th
    /// peak), as before 2026-12-06's sixteenth session (`Tiles::select_coarse_floor` false;
    /// the default stops after two; files `-selfull`).
    #[arg(long)]
    pub select_full_floor: bool,
    /// Read each peak tile of a peaks select that streams the scores from the one thread that
    /// owns it (`Tiles::select_owned_tiles`, opt-in: exact on an H100 but no faster; files
    /// `-selot`).
    #[arg(long)]
    pub select_owned_tiles: bool,
    /// Run the one-block selects as the resident select at 1,024 threads x 32 keys whatever
    /// the record says (`Tiles::select_resident`: an A/B for a record that predates it; files
    /// `-selres`).
    #[arg(long)]
    pub select_resident: bool,
    /// Leave out the standing cell (host, 128k, batch 16, fathom(48) and sparq(32), when the
    /// run has the host placement and reaches 128k), which every other run adds to its grid.
    #[arg(long)]
    pub no_standing: bool,
}

/// The §9 method list of issue #6.
pub const DEFAULT_METHODS: &str = "fathom(48),fathom(64),fathom(92),sparq(16),sparq(32),\
double_sparsity(32),loki(32),thumbnail,landmark,oracle,dense,pariskv(100),pariskv(512)";

/// The fewest timed steps a time-capped cell still takes.
pub const MIN_STEPS: usize = 3;

/// A validated run.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub model: String,
    /// Tokens per sequence, ascending, distinct.
    pub contexts: Vec<usize>,
    /// Ascending, distinct.
    pub batches: Vec<usize>,
    pub placements: Vec<Placement>,
    pub methods: Vec<Method>,
    pub steps: usize,
    pub out: PathBuf,
    pub commit: String,
    pub slots: usize,
    pub cell_seconds: f64,
    pub seed: u64,
    pub device: usize,
    pub host_memory: HostMemory,
    pub kv_rows: KvRows,
    pub attention_rows: AttentionRows,
    /// `--pariskv-query-blocks`.
    pub pariskv_query_blocks: u32,
    /// `--overlap-tail`.
    pub overlap_tail: bool,
    /// `--head-groups`.
    pub head_groups: usize,
    /// Whether the plan's launch scores the tail (not `--tail-in-oracle`).
    pub tail_in_plan: bool,
    /// `--plan-batched-runs`.
    pub plan_batched_runs: bool,
    /// `--plan-run-blocks` (`None`: the context's).
    pub plan_run_blocks: Option<usize>,
    /// `--scan-stripes` (`None`: the spec's).
    pub scan_stripes: Option<usize>,
    /// Not `--scan-spec-grid`, nor `--scan-stripes`.
    pub scan_one_wave: bool,
    /// Not `--plan-unpaired-runs`.
    pub plan_paired_runs: bool,
    /// `--plan-direct-line`.
    pub plan_direct_line: bool,
    /// `--attention-cluster-merge`.
    pub attention_cluster_merge: bool,
    /// `--attention-prefetch`.
    pub attention_prefetch_rows: bool,
    /// Not `--select-full-floor`.
    pub select_coarse_floor: bool,
    /// `--select-owned-tiles`.
    pub select_owned_tiles: bool,
    /// `--select-resident`.
    pub select_resident: bool,
    /// The standing cells added to the grid: (placement, context, batch, methods).
    pub standing: Vec<(Placement, usize, usize, Vec<Method>)>,
}

/// The standing cell of issue #15: 16 sequences of 128k tokens from host memory.
pub const STANDING: (Placement, usize, usize, &str) =
    (Placement::Host, 128 << 10, 16, "fathom(48),sparq(32)");

/// The standing cells a run adds: those whose placement it has, whose context its stores reach,
/// that its grid does not hold already, with the methods it runs.
pub fn standing_cells(
    args_no_standing: bool,
    placements: &[Placement],
    contexts: &[usize],
    batches: &[usize],
    methods: &[Method],
) -> Vec<(Placement, usize, usize, Vec<Method>)> {
    let (placement, context, batch, list) = STANDING;
    let max = contexts.last().copied().unwrap_or(0);
    let in_grid = contexts.contains(&context) && batches.contains(&batch);
    if args_no_standing || !placements.contains(&placement) || context > max || in_grid {
        return Vec::new();
    }
    let wanted = parse_methods(list).expect("the standing methods parse");
    let methods: Vec<Method> = wanted.into_iter().filter(|m| methods.contains(m)).collect();
    if methods.is_empty() {
        return Vec::new();
    }
    vec![(placement, context, batch, methods)]
}

/// A command line that cannot run, saying what is allowed.
#[derive(Debug, Error, PartialEq)]
pub enum ArgsError {
    #[error("--contexts: `{got}` is not a context; write a token count or 32k, 128k, 1m (a multiple of {block} tokens, at most 2^30)")]
    Context { got: String, block: usize },
    #[error("--batch: `{got}` is not a batch size; allowed: 1 to 64")]
    Batch { got: String },
    #[error("--placement: `{got}` is not a placement; allowed: host, hbm")]
    Placement { got: String },
    #[error("--methods: {0}")]
    Method(#[from] MethodParseError),
    #[error("--{flag}: the list is empty; give at least one value")]
    Empty { flag: &'static str },
    #[error("--steps must be at least 1")]
    Steps,
    #[error("--slots must be 1 to 64, got {0}")]
    Slots(usize),
    #[error("--cell-seconds must be a positive number of seconds, got {0}")]
    CellSeconds(f64),
    #[error("--host-memory: {0}")]
    HostMemory(#[from] HostMemoryParseError),
    #[error("--kv-rows: {0}")]
    KvRows(#[from] KvRowsParseError),
    #[error("--attention-rows: {0}")]
    AttentionRows(#[from] AttentionRowsParseError),
    #[error("--plan-run-blocks {0} and --plan-batched-runs do not combine; give one of them")]
    PlanRuns(u32),
}

/// Tokens per scale block of the stores built here: a context must hold whole blocks.
pub const BLOCK: usize = 64;

/// Parses `32k`, `128K`, `1m` or a plain token count.
pub fn parse_context(text: &str) -> Result<usize, ArgsError> {
    let bad = || ArgsError::Context {
        got: text.to_string(),
        block: BLOCK,
    };
    let t = text.trim().to_ascii_lowercase();
    let (digits, unit) = match t.strip_suffix('k') {
        Some(d) => (d, 1usize << 10),
        None => match t.strip_suffix('m') {
            Some(d) => (d, 1 << 20),
            None => (t.as_str(), 1),
        },
    };
    let n = digits
        .parse::<usize>()
        .ok()
        .and_then(|v| v.checked_mul(unit))
        .ok_or_else(bad)?;
    if n == 0 || !n.is_multiple_of(BLOCK) || n > 1 << 30 {
        return Err(bad());
    }
    Ok(n)
}

/// `32768` → `32k`, `1048576` → `1m`, else the count.
pub fn context_label(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{}m", n >> 20)
    } else if n.is_multiple_of(1 << 10) {
        format!("{}k", n >> 10)
    } else {
        n.to_string()
    }
}

/// Splits a list at the commas outside parentheses, dropping empty items.
fn items(list: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for ch in list.chars() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn non_empty<T>(flag: &'static str, v: Vec<T>) -> Result<Vec<T>, ArgsError> {
    if v.is_empty() {
        Err(ArgsError::Empty { flag })
    } else {
        Ok(v)
    }
}

/// Parses a method list like `fathom(48),sparq(32),dense`.
pub fn parse_methods(list: &str) -> Result<Vec<Method>, ArgsError> {
    let methods = items(list)
        .iter()
        .map(|m| m.parse::<Method>())
        .collect::<Result<Vec<_>, _>>()?;
    let mut out: Vec<Method> = Vec::new();
    for m in methods {
        if !out.contains(&m) {
            out.push(m);
        }
    }
    non_empty("methods", out)
}

fn sorted_unique(mut v: Vec<usize>) -> Vec<usize> {
    v.sort_unstable();
    v.dedup();
    v
}

impl Options {
    /// Validates `args`; `env_commit` is `$FATHOM_COMMIT` (taken when `--commit` is absent).
    pub fn from_args(args: &Args, env_commit: Option<String>) -> Result<Options, ArgsError> {
        let contexts = match &args.contexts {
            Some(list) => items(list)
                .iter()
                .map(|c| parse_context(c))
                .collect::<Result<Vec<_>, _>>()?,
            None if args.quick => vec![32 << 10, 128 << 10],
            None => vec![32 << 10, 128 << 10, 256 << 10, 1 << 20],
        };
        let batches = match &args.batch {
            Some(list) => items(list)
                .iter()
                .map(|b| match b.parse::<usize>() {
                    Ok(v) if (1..=64).contains(&v) => Ok(v),
                    _ => Err(ArgsError::Batch { got: b.clone() }),
                })
                .collect::<Result<Vec<_>, _>>()?,
            None if args.quick => vec![1],
            None => vec![1, 4],
        };
        let placements = match &args.placement {
            Some(list) => {
                let mut out = Vec::new();
                for p in items(list) {
                    let placement = match p.to_ascii_lowercase().as_str() {
                        "host" => Placement::Host,
                        "hbm" => Placement::Hbm,
                        _ => return Err(ArgsError::Placement { got: p }),
                    };
                    if !out.contains(&placement) {
                        out.push(placement);
                    }
                }
                out
            }
            None => vec![Placement::Host, Placement::Hbm],
        };
        let methods = parse_methods(args.methods.as_deref().unwrap_or(DEFAULT_METHODS))?;
        let steps = args.steps.unwrap_or(if args.quick { 5 } else { 20 });
        if steps == 0 {
            return Err(ArgsError::Steps);
        }
        if let Some(blocks) = args
            .plan_run_blocks
            .filter(|&b| b > 1 && args.plan_batched_runs)
        {
            return Err(ArgsError::PlanRuns(blocks));
        }
        if !(1..=64).contains(&args.slots) {
            return Err(ArgsError::Slots(args.slots));
        }
        if !(args.cell_seconds.is_finite() && args.cell_seconds > 0.0) {
            return Err(ArgsError::CellSeconds(args.cell_seconds));
        }
        let commit = args
            .commit
            .clone()
            .or(env_commit)
            .filter(|c| !c.trim().is_empty())
            .unwrap_or_else(|| "unknown".into());
        let contexts = non_empty("contexts", sorted_unique(contexts))?;
        let batches = non_empty("batch", sorted_unique(batches))?;
        let placements = non_empty("placement", placements)?;
        let standing = standing_cells(args.no_standing, &placements, &contexts, &batches, &methods);
        Ok(Options {
            model: args.model.clone(),
            contexts,
            batches,
            placements,
            standing,
            methods,
            steps,
            out: args.out.clone(),
            commit,
            slots: args.slots,
            cell_seconds: args.cell_seconds,
            seed: args.seed,
            device: args.device,
            host_memory: args.host_memory.parse()?,
            kv_rows: args.kv_rows.parse()?,
            attention_rows: args.attention_rows.parse()?,
            pariskv_query_blocks: args.pariskv_query_blocks,
            overlap_tail: args.overlap_tail,
            head_groups: args.head_groups as usize,
            tail_in_plan: !args.tail_in_oracle,
            plan_batched_runs: args.plan_batched_runs,
            plan_run_blocks: args.plan_run_blocks.map(|b| b as usize),
            scan_stripes: args.scan_stripes.map(|n| n as usize),
            scan_one_wave: !args.scan_spec_grid && args.scan_stripes.is_none(),
            // Batched pointer loads write whole entries from one lane.
            plan_paired_runs: !args.plan_unpaired_runs && !args.plan_batched_runs,
            plan_direct_line: args.plan_direct_line,
            attention_cluster_merge: args.attention_cluster_merge,
            attention_prefetch_rows: args.attention_prefetch,
            select_coarse_floor: !args.select_full_floor,
            select_owned_tiles: args.select_owned_tiles,
            select_resident: args.select_resident,
        })
    }

    /// The largest context: the length every store is built at.
    pub fn max_context(&self) -> usize {
        *self.contexts.last().expect("validated non-empty")
    }
}
