//! The ParisKV bench (SPEC §12): `pariskv_vote`, `pariskv_topc` and `pariskv_rerank` on an
//! index built on the device from random keys, each candidate checked exactly against
//! `reference::pariskv` before it is timed.
//!
//! Per (shape, context) the bench builds, once: the index of every KV head with the default
//! `pariskv_index` kernel (rows in HBM; a copy in mapped host memory when a host case comes),
//! the raw queries, and one retrieval chain at the default threads (query, vote, top-C) whose
//! outputs are the inputs of the later stages, checked against the reference first. A candidate
//! then runs only its own family's launches on those inputs into fresh, poisoned outputs:
//!
//! - vote: the vote over the chain's tiers (its histogram zeroed, as `pariskv_query` does);
//! - top-C: `_count` and `_write` over the chain's votes;
//! - rerank: `_score` and `_select` over the chain's candidates, with `k = paper_k` (512) at
//!   the decoder's `k_max`.
//!
//! The query kernel has no tile and is not timed.
//!
//! The reference (the CPU index build and retrieval) covers a sample of KV heads, the first
//! and the last ([`check_heads`]): the device runs every head, and the head index enters only
//! the pointer tables and the output strides, which the last head exercises. Building the f64
//! reference index of every head at 1M tokens would take longer than tuning them. The sampled
//! heads' reference indexes depend on the keys alone, so they are built once a shape and context
//! and kept for every group size's cases (~4 s a head at 1M).

use std::collections::HashMap;
use std::sync::Arc;

use codegen::spec::pariskv::{candidate_count, padded_dim, retrievable, subspaces};
use codegen::spec::{
    Family, KernelSpec, PariskvIndexSpec, PariskvQuerySpec, PariskvTopcSpec, PariskvVoteSpec,
    Placement,
};
use half::bf16;
use reference::pariskv::{retrieve, PariskvIndex, Retrieval};
use runtime::gpu::{DeviceBuffer, Gpu};
use runtime::pariskv::{
    build_args, device_signs, retrieval_args, IndexTables, RetrievalBuffers, RetrievalInputs,
    RetrievalSizes, Stage, THREADS,
};
use runtime::step::launches::{token_capacity, ALWAYS};
use runtime::tuning::TunedFamily;
use runtime::tuning::{Subject, Variant};

mod checks;

use checks::{check_candidates, check_scores, check_selection, check_votes, SelectionHost};

use super::device::{gpu_err, launch, Device, Launch};
use super::inputs::{queries, query, HostRows, Inputs};
use super::store::Memory;
use crate::candidates::{bench_k, enumerate, tile_spec, Case};
use crate::tuner::CaseInfo;

/// The byte every output is poisoned with before a candidate runs.
const POISON: u8 = 0xff;

/// The KV heads compared with the reference: the first and the last.
pub fn check_heads(heads: usize) -> Vec<usize> {
    let mut out = vec![0, heads.saturating_sub(1)];
    out.dedup();
    out
}

/// `[H]` allocations of one index table and the device table of their addresses.
struct Table<T> {
    heads: Vec<Memory<T>>,
    table: DeviceBuffer<u64>,
}

impl<T: Copy + Default> Table<T> {
    fn of(gpu: &Gpu, heads: Vec<Memory<T>>) -> Result<Self, String> {
        let addrs: Vec<u64> = heads.iter().map(Memory::addr).collect();
        Ok(Table {
            table: gpu.upload(&addrs).map_err(gpu_err)?,
            heads,
        })
    }

    /// `heads` device buffers of `len` elements, every byte `byte`.
    fn filled(gpu: &Gpu, heads: usize, len: usize, byte: u8) -> Result<Self, String> {
        let memory = (0..heads)
            .map(|_| gpu.filled::<T>(len, byte).map(Memory::Device))
            .collect::<Result<Vec<_>, _>>()
            .map_err(gpu_err)?;
        Table::of(gpu, memory)
    }

    /// A copy of a device table in `placement`.
    fn copy_to(&self, gpu: &Gpu, placement: Placement) -> Result<Self, String> {
        let memory = self
            .heads
            .iter()
            .map(|m| match m {
                Memory::Device(b) => Memory::new(gpu, placement, &b.download().map_err(gpu_err)?),
                Memory::Mapped(_) => Err("the index is copied from device memory".to_string()),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Table::of(gpu, memory)
    }
}

/// The index of every KV head: ids, codes and weights in one placement, histograms in HBM.
struct DeviceIndex {
    ids: Table<u8>,
    codes: Table<u8>,
    weights: Table<u16>,
    hist: Table<u32>,
}

impl DeviceIndex {
    fn tables(&self) -> IndexTables {
        IndexTables {
            ids: self.ids.table.addr(),
            codes: self.codes.table.addr(),
            weights: self.weights.table.addr(),
            hist: self.hist.table.addr(),
        }
    }

    /// Builds the index of `rows`' keys in HBM with the default `pariskv_index` kernel.
    fn build(dev: &Device, rows: &HostRows, signs: &DeviceBuffer<f32>) -> Result<Self, String> {
        let gpu = &dev.gpu;
        let (d, n, heads) = (rows.head_dim, rows.tokens, rows.heads());
        let ns = subspaces(d as u32) as usize;
        let keys = Table::of(
            gpu,
            rows.keys
                .iter()
                .map(|k| Memory::new(gpu, Placement::Hbm, k))
                .collect::<Result<Vec<Memory<bf16>>, _>>()?,
        )?;
        let index = DeviceIndex {
            ids: Table::filled(gpu, heads, n * ns, POISON)?,
            // A nibble per coordinate of the padded transform (§12).
            codes: Table::filled(gpu, heads, n * padded_dim(d as u32) as usize / 2, POISON)?,
            weights: Table::filled(gpu, heads, n * ns, POISON)?,
            hist: Table::filled(gpu, heads, ns * 256, 0)?,
        };
        let spec = PariskvIndexSpec {
            head_dim: d as u32,
            threads: THREADS,
            placement: Placement::Hbm,
            kv_rows: codegen::spec::KvRows::Separate,
        };
        let end = gpu.upload(&[int(n)?]).map_err(gpu_err)?;
        let status = gpu.upload(&[0i32; 4]).map_err(gpu_err)?;
        let args = build_args(
            keys.table.addr(),
            signs.addr(),
            index.tables(),
            0,
            end.addr(),
            heads,
            status.addr(),
        );
        let geometry = spec
            .launch(1, heads as u64, n as u64)
            .map_err(|e| e.to_string())?;
        dev.run_once(&[launch(dev.function(spec.into())?, geometry, args.to_vec())?])?;
        let status = status.download().map_err(gpu_err)?;
        if status != [0; 4] {
            return Err(format!(
                "the index build reported {status:?} ({{kind, b, h, token}}) on random keys"
            ));
        }
        Ok(index)
    }

    /// A copy with the rows in `placement` (histograms stay in HBM).
    fn copy_to(&self, gpu: &Gpu, placement: Placement) -> Result<Self, String> {
        Ok(DeviceIndex {
            ids: self.ids.copy_to(gpu, placement)?,
            codes: self.codes.copy_to(gpu, placement)?,
            weights: self.weights.copy_to(gpu, placement)?,
            hist: self.hist.copy_to(gpu, Placement::Hbm)?,
        })
    }
}

/// The outputs of the default chain (query, vote, top-C) that the candidates read.
struct Chain {
    q_tilde: DeviceBuffer<f64>,
    q_norm: DeviceBuffer<f64>,
    tiers: DeviceBuffer<u8>,
    tier_len: DeviceBuffer<i32>,
    vote_hist: DeviceBuffer<u32>,
    votes: DeviceBuffer<u16>,
    chunk_counts: DeviceBuffer<u64>,
    cand: DeviceBuffer<i32>,
    cand_count: DeviceBuffer<i32>,
    sizes: RetrievalSizes,
}

impl Chain {
    /// The buffers' addresses (no selection outputs).
    fn buffers(&self) -> RetrievalBuffers {
        RetrievalBuffers {
            q_tilde: self.q_tilde.addr(),
            q_norm: self.q_norm.addr(),
            tiers: self.tiers.addr(),
            tier_len: self.tier_len.addr(),
            vote_hist: self.vote_hist.addr(),
            votes: self.votes.addr(),
            ld_votes: self.sizes.ld_votes,
            chunk_counts: self.chunk_counts.addr(),
            cand: self.cand.addr(),
            cand_count: self.cand_count.addr(),
            ld_cand: self.sizes.ld_cand,
            ..RetrievalBuffers::default()
        }
    }
}

/// Everything the cases of one (shape, context) share.
struct Prepared {
    ident: (usize, usize, usize, usize),
    hbm: DeviceIndex,
    /// Made when the first host case comes.
    host: Option<DeviceIndex>,
    signs: DeviceBuffer<f32>,
    q: DeviceBuffer<f32>,
    n_total: DeviceBuffer<i32>,
    chain: Chain,
    /// Tokens the grids and strides serve (the step's capacity of this context).
    capacity: usize,
    k: usize,
    /// The reference retrieval of each head of [`check_heads`].
    reference: Vec<(usize, Retrieval)>,
}

/// What a candidate writes.
pub enum Outputs {
    Vote {
        votes: DeviceBuffer<u16>,
        vote_hist: DeviceBuffer<u32>,
    },
    Topc {
        _chunk_counts: DeviceBuffer<u64>,
        cand: DeviceBuffer<i32>,
        cand_count: DeviceBuffer<i32>,
    },
    Rerank {
        cand_score: DeviceBuffer<f64>,
        sel: DeviceBuffer<i32>,
        sel_pos: DeviceBuffer<i32>,
        sel_count: DeviceBuffer<i32>,
        uni: DeviceBuffer<i32>,
        uni_count: DeviceBuffer<i32>,
        /// The many-block top-k's slot and count buffers (one element each without it).
        _select_slots: DeviceBuffer<u64>,
        _select_counts: DeviceBuffer<u32>,
    },
}

/// The reference indexes of the checked KV heads ([`check_heads`]), by head.
type HeadIndexes = Vec<(usize, PariskvIndex)>;

/// Times the ParisKV candidates.
#[derive(Default)]
pub struct PariskvBench {
    prepared: Option<Prepared>,
    /// The checked heads' reference indexes by (D, KV heads, tokens).
    indexes: HashMap<(usize, usize, usize), Arc<HeadIndexes>>,
}

fn int(value: usize) -> Result<i32, String> {
    i32::try_from(value).map_err(|_| format!("{value} does not fit a kernel's int"))
}

fn family(case: &Case) -> Result<TunedFamily, String> {
    match case.subject {
        Subject::Kernel(
            f @ (TunedFamily::PariskvVote | TunedFamily::PariskvTopc | TunedFamily::PariskvRerank),
        ) => Ok(f),
        other => Err(format!("{other} is not a ParisKV family")),
    }
}

/// Runs `work` on every checked head of `items`, a thread each, in their order.
fn on_heads<T: Sync, R: Send>(
    items: &[(usize, T)],
    work: impl Fn(usize, &T) -> Result<R, String> + Sync,
) -> Result<Vec<(usize, R)>, String> {
    std::thread::scope(|scope| {
        let work = &work;
        let workers: Vec<_> = items
            .iter()
            .map(|(h, item)| scope.spawn(move || work(*h, item).map(|r| (*h, r))))
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().map_err(|_| "the reference panicked".to_string())?)
            .collect()
    })
}

/// The reference indexes of `rows`' checked heads, a thread each.
fn reference_indexes(rows: &HostRows) -> Result<HeadIndexes, String> {
    let keys: Vec<(usize, &Vec<bf16>)> = check_heads(rows.heads())
        .into_iter()
        .map(|h| (h, &rows.keys[h]))
        .collect();
    on_heads(&keys, |_, keys| {
        PariskvIndex::build(keys, rows.head_dim).map_err(|e| e.to_string())
    })
}

/// The reference retrieval of the checked heads from their `indexes`, a thread each.
fn reference(
    indexes: &HeadIndexes,
    d: usize,
    n: usize,
    q: &[f32],
    group: usize,
    k: usize,
) -> Result<Vec<(usize, Retrieval)>, String> {
    on_heads(indexes, |h, index| {
        let group_queries: Vec<Vec<f64>> = (0..group).map(|g| query(q, h, g, group, d)).collect();
        retrieve(index, &group_queries, n, k).map_err(|e| e.to_string())
    })
}

impl PariskvBench {
    /// Frees the prepared inputs until the next case of this bench.
    pub fn release(&mut self) {
        self.prepared = None;
    }

    /// Builds (or keeps) the index, the chain and the reference of `case`'s shape and context.
    pub fn prepare(
        &mut self,
        dev: &Device,
        inputs: &mut Inputs,
        case: &Case,
    ) -> Result<CaseInfo, String> {
        let family = family(case)?;
        let (d, g, heads, n) = (case.head_dim, case.group, case.kv_heads, case.tokens);
        let ident = (d, g, heads, n);
        if self.prepared.as_ref().map(|p| p.ident) != Some(ident) {
            self.prepared = None;
            let rows = inputs.rows(d, heads, n)?;
            let indexes = match self.indexes.get(&(d, heads, n)) {
                Some(built) => built.clone(),
                None => {
                    let built = Arc::new(reference_indexes(&rows)?);
                    self.indexes.insert((d, heads, n), built.clone());
                    built
                }
            };
            self.prepared = Some(prepare(dev, rows, &indexes, ident)?);
        }
        let p = self.prepared.as_mut().ok_or("ParisKV inputs missing")?;
        if case.placement == Placement::Host && p.host.is_none() {
            p.host = Some(p.hbm.copy_to(&dev.gpu, Placement::Host)?);
        }
        let specs: Vec<KernelSpec> = enumerate(case)
            .iter()
            .filter_map(|v| tile_spec(case, v).ok())
            .collect();
        dev.preload(&specs);
        let (ns, n_r) = (subspaces(d as u32) as usize, retrievable(n as u64) as usize);
        let c = candidate_count(n_r as u64) as usize;
        // What each family's launches move: the ids read and the votes written; the votes read
        // by `_count` and `_write` and the candidates written; the index rows of the candidates,
        // the candidates and their scores, and the 8 radix passes and the write pass of
        // `_select` over the scores.
        let bytes = heads
            * match family {
                TunedFamily::PariskvVote => n_r * (ns + 2),
                TunedFamily::PariskvTopc => n_r * 2 * 2 + c * 4,
                _ => c * (padded_dim(d as u32) as usize / 2 + 2 * ns) + c * (4 + 8) + c * 8 * 9,
            };
        // The top-C reads only the votes, which are in HBM in either placement.
        let ceiling = match family {
            TunedFamily::PariskvTopc => dev.read_ceiling(Placement::Hbm),
            _ => dev.read_ceiling(case.placement),
        };
        Ok(CaseInfo {
            bytes: Some(bytes as u64),
            ceiling: Some(ceiling),
        })
    }

    /// The launches of `variant` on the prepared inputs, with fresh outputs.
    pub fn candidate(
        &self,
        dev: &Device,
        case: &Case,
        variant: &Variant,
    ) -> Result<(Vec<Launch>, Outputs), String> {
        let p = self
            .prepared
            .as_ref()
            .ok_or("the ParisKV case was not prepared")?;
        let index = match case.placement {
            Placement::Hbm => &p.hbm,
            Placement::Host => p.host.as_ref().ok_or("the host index was not made")?,
        };
        let gpu = &dev.gpu;
        let heads = case.kv_heads;
        let (h64, cap64) = (heads as u64, p.capacity as u64);
        let retrieval = RetrievalInputs {
            index: index.tables(),
            queries: p.q.addr(),
            signs: p.signs.addr(),
            n_total: p.n_total.addr(),
            kv_heads: heads,
            k: p.k,
        };
        let mut w = p.chain.buffers();
        let spec = tile_spec(case, variant)?;
        let mut launches = Vec::new();
        let mut add = |stage: Stage, entry: String, geometry, w: &RetrievalBuffers| {
            let f = dev.entry(spec, &entry)?;
            launches.push(launch(f, geometry, retrieval_args(stage, &retrieval, w))?);
            Ok::<(), String>(())
        };
        let e = |e: codegen::spec::launch::SizeError| e.to_string();
        let outputs = match spec {
            KernelSpec::PariskvVote(s) => {
                let votes = gpu.filled::<u16>(p.chain.sizes.votes, POISON);
                let vote_hist = gpu.filled::<u32>(p.chain.sizes.vote_hist, 0);
                let (votes, vote_hist) = (votes.map_err(gpu_err)?, vote_hist.map_err(gpu_err)?);
                w.votes = votes.addr();
                w.vote_hist = vote_hist.addr();
                add(
                    Stage::Vote,
                    s.kernel_name(),
                    s.launch(1, h64, cap64).map_err(e)?,
                    &w,
                )?;
                Outputs::Vote { votes, vote_hist }
            }
            KernelSpec::PariskvTopc(s) => {
                let (geometry, words) = s.launch(1, h64, cap64).map_err(e)?;
                let chunk_counts = gpu.filled::<u64>(words as usize, POISON).map_err(gpu_err)?;
                let cand = gpu
                    .filled::<i32>(p.chain.sizes.cand, POISON)
                    .map_err(gpu_err)?;
                let cand_count = gpu.filled::<i32>(heads, POISON).map_err(gpu_err)?;
                w.chunk_counts = chunk_counts.addr();
                w.cand = cand.addr();
                w.cand_count = cand_count.addr();
                add(Stage::TopcCount, s.count_entry(), geometry, &w)?;
                add(Stage::TopcWrite, s.write_entry(), geometry, &w)?;
                Outputs::Topc {
                    _chunk_counts: chunk_counts,
                    cand,
                    cand_count,
                }
            }
            KernelSpec::PariskvRerank(s) => {
                let g = case.group;
                let (sc, uc) = (p.k + ALWAYS, g * p.k + ALWAYS);
                let buf = |len: usize| gpu.filled::<i32>(len, POISON).map_err(gpu_err);
                let cand_score = gpu
                    .filled::<f64>(p.chain.sizes.cand_score, POISON)
                    .map_err(gpu_err)?;
                let (sel, sel_pos, sel_count) =
                    (buf(heads * g * sc)?, buf(heads * g * sc)?, buf(heads * g)?);
                let (uni, uni_count) = (buf(heads * uc)?, buf(heads)?);
                w.cand_score = cand_score.addr();
                w.sel = sel.addr();
                w.sel_pos = sel_pos.addr();
                w.sel_count = sel_count.addr();
                w.uni = uni.addr();
                w.uni_count = uni_count.addr();
                let ld_cand = p.chain.sizes.ld_cand as u64;
                let score = s.launch_score(1, h64, ld_cand).map_err(e)?;
                add(Stage::RerankScore, s.score_entry(), score, &w)?;
                // The top-k: `_select`, or the many-block launches and their slot buffers.
                let plan = s.select_plan(1, h64, ld_cand, p.k as u64).map_err(e)?;
                let sizes = p.chain.sizes.with_select(&plan);
                let slots = gpu.filled::<u64>((2 * sizes.select_slots).max(1), POISON);
                let counts = gpu.filled::<u32>((2 * sizes.select_counts).max(1), POISON);
                let (slots, counts) = (slots.map_err(gpu_err)?, counts.map_err(gpu_err)?);
                (w.select_slots, w.select_counts) =
                    sizes.select_halves(slots.addr(), counts.addr());
                for (step, geometry) in plan.launches {
                    add(
                        Stage::RerankSelect(step),
                        s.select_step_entry(step),
                        geometry,
                        &w,
                    )?;
                }
                Outputs::Rerank {
                    cand_score,
                    sel,
                    sel_pos,
                    sel_count,
                    uni,
                    uni_count,
                    _select_slots: slots,
                    _select_counts: counts,
                }
            }
            other => return Err(format!("{} is not a ParisKV family", other.family())),
        };
        Ok((launches, outputs))
    }

    /// Compares a candidate's outputs with the reference of the sampled heads, exactly.
    pub fn check(&self, case: &Case, out: &Outputs) -> Result<(), String> {
        let p = self
            .prepared
            .as_ref()
            .ok_or("the ParisKV case was not prepared")?;
        let sizes = &p.chain.sizes;
        match out {
            Outputs::Vote { votes, vote_hist } => check_votes(
                &votes.download().map_err(gpu_err)?,
                &vote_hist.download().map_err(gpu_err)?,
                sizes.ld_votes,
                case.head_dim,
                &p.reference,
            ),
            Outputs::Topc {
                cand, cand_count, ..
            } => check_candidates(
                &cand.download().map_err(gpu_err)?,
                &cand_count.download().map_err(gpu_err)?,
                sizes.ld_cand,
                &p.reference,
            ),
            Outputs::Rerank {
                cand_score,
                sel,
                sel_pos,
                sel_count,
                uni,
                uni_count,
                ..
            } => {
                let cand = p.chain.cand.download().map_err(gpu_err)?;
                check_scores(
                    &cand,
                    &cand_score.download().map_err(gpu_err)?,
                    sizes.ld_cand,
                    &p.reference,
                )?;
                let got = SelectionHost {
                    sel: sel.download().map_err(gpu_err)?,
                    sel_pos: sel_pos.download().map_err(gpu_err)?,
                    sel_count: sel_count.download().map_err(gpu_err)?,
                    uni: uni.download().map_err(gpu_err)?,
                    uni_count: uni_count.download().map_err(gpu_err)?,
                };
                check_selection(&got, case.group, p.k, case.tokens, &p.reference)
            }
        }
    }
}

/// Builds the index, runs the default chain and checks it, and computes the reference.
fn prepare(
    dev: &Device,
    rows: Arc<HostRows>,
    indexes: &HeadIndexes,
    ident: (usize, usize, usize, usize),
) -> Result<Prepared, String> {
    let (d, g, heads, n) = ident;
    let gpu = &dev.gpu;
    let capacity = token_capacity(n);
    let k = bench_k(n);
    let signs = device_signs(gpu, d).map_err(gpu_err)?;
    let hbm = DeviceIndex::build(dev, &rows, &signs)?;
    let host_q = queries(d, g, heads);
    let q = gpu.upload(&host_q).map_err(gpu_err)?;
    let n_total = gpu.upload(&[int(n)?]).map_err(gpu_err)?;
    let (h64, cap64) = (heads as u64, capacity as u64);
    let e = |e: codegen::spec::launch::SizeError| e.to_string();
    let (d32, g32) = (d as u32, g as u32);
    let query = PariskvQuerySpec::new(d32, g32);
    let vote = PariskvVoteSpec {
        head_dim: d32,
        threads: THREADS,
        placement: Placement::Hbm,
    };
    let topc = PariskvTopcSpec {
        head_dim: d32,
        threads: THREADS,
    };
    let (topc_geometry, words) = topc.launch(1, h64, cap64).map_err(e)?;
    let sizes = RetrievalSizes::new(heads, d, capacity, words as usize);
    let chain = Chain {
        q_tilde: gpu.filled(sizes.q_tilde, POISON).map_err(gpu_err)?,
        q_norm: gpu.filled(sizes.q_norm, POISON).map_err(gpu_err)?,
        tiers: gpu.filled(sizes.tiers, POISON).map_err(gpu_err)?,
        tier_len: gpu.filled(sizes.tier_len, POISON).map_err(gpu_err)?,
        vote_hist: gpu.filled(sizes.vote_hist, POISON).map_err(gpu_err)?,
        votes: gpu.filled(sizes.votes, POISON).map_err(gpu_err)?,
        chunk_counts: gpu.filled(sizes.chunk_counts, POISON).map_err(gpu_err)?,
        cand: gpu.filled(sizes.cand, POISON).map_err(gpu_err)?,
        cand_count: gpu.filled(sizes.cand_count, POISON).map_err(gpu_err)?,
        sizes,
    };
    let retrieval = RetrievalInputs {
        index: hbm.tables(),
        queries: q.addr(),
        signs: signs.addr(),
        n_total: n_total.addr(),
        kv_heads: heads,
        k,
    };
    let w = chain.buffers();
    let stages: [(Stage, KernelSpec, String, _); 4] = [
        (
            Stage::Query,
            query.into(),
            query.kernel_name(),
            query.launch(1, h64).map_err(e)?,
        ),
        (
            Stage::Vote,
            vote.into(),
            vote.kernel_name(),
            vote.launch(1, h64, cap64).map_err(e)?,
        ),
        (
            Stage::TopcCount,
            topc.into(),
            topc.count_entry(),
            topc_geometry,
        ),
        (
            Stage::TopcWrite,
            topc.into(),
            topc.write_entry(),
            topc_geometry,
        ),
    ];
    let launches = stages
        .into_iter()
        .map(|(stage, spec, entry, geometry)| {
            launch(
                dev.entry(spec, &entry)?,
                geometry,
                retrieval_args(stage, &retrieval, &w),
            )
        })
        .collect::<Result<Vec<_>, String>>()?;
    // The reference on the host while the device builds and runs the chain.
    let reference = reference(indexes, d, n, &host_q, g, k)?;
    dev.run_once(&launches)?;
    let why = |what: &str, e: String| format!("the default {what} (the later stages' input): {e}");
    check_votes(
        &chain.votes.download().map_err(gpu_err)?,
        &chain.vote_hist.download().map_err(gpu_err)?,
        sizes.ld_votes,
        d,
        &reference,
    )
    .map_err(|e| why("vote", e))?;
    check_candidates(
        &chain.cand.download().map_err(gpu_err)?,
        &chain.cand_count.download().map_err(gpu_err)?,
        sizes.ld_cand,
        &reference,
    )
    .map_err(|e| why("top-C", e))?;
    let q_tilde = chain.q_tilde.download().map_err(gpu_err)?;
    let q_norm = chain.q_norm.download().map_err(gpu_err)?;
    for (h, r) in &reference {
        let got = &q_tilde[h * d..(h + 1) * d];
        if got != r.q_tilde.as_slice() || q_norm[*h] != r.q_norm {
            return Err(why(
                "query",
                format!("kv head {h}: q̃ or ||q̄|| differs from the reference"),
            ));
        }
    }
    Ok(Prepared {
        ident,
        hbm,
        host: None,
        signs,
        q,
        n_total,
        chain,
        capacity,
        k,
        reference,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use codegen::spec::pariskv::vote_bins;
    use reference::pariskv::PariskvIndex;
    use reference::select::{LOCAL, SINK};

    /// A small reference retrieval and its outputs laid out as the kernels lay them out: the
    /// checks accept them, and catch one changed element of each.
    #[test]
    fn the_checks_accept_the_reference_layout_and_catch_a_change() {
        let (d, n, heads, g, k) = (64, 3000, 2, 3, 40);
        let rows = HostRows::new(d, heads, n).unwrap();
        let q = queries(d, g, heads);
        let indexes = reference_indexes(&rows).unwrap();
        let reference = reference(&indexes, d, n, &q, g, k).unwrap();
        assert_eq!(
            reference.iter().map(|(h, _)| *h).collect::<Vec<_>>(),
            [0, 1]
        );
        for (h, r) in &reference {
            let index = PariskvIndex::build(&rows.keys[*h], d).unwrap();
            let gq: Vec<Vec<f64>> = (0..g).map(|gi| query(&q, *h, gi, g, d)).collect();
            assert_eq!(&retrieve(&index, &gq, n, k).unwrap(), r);
        }
        let capacity = token_capacity(n);
        let sizes = RetrievalSizes::new(heads, d, capacity, 1);
        let bins = vote_bins(d as u32) as usize;
        let (mut votes, mut hist) = (vec![u16::MAX; sizes.votes], vec![0u32; sizes.vote_hist]);
        let (mut cand, mut cand_count) = (vec![-1i32; sizes.cand], vec![0i32; heads]);
        let mut score = vec![f64::NAN; sizes.cand_score];
        let (sc, uc) = (k + ALWAYS, g * k + ALWAYS);
        let mut sel = SelectionHost {
            sel: vec![-1; heads * g * sc],
            sel_pos: vec![-1; heads * g * sc],
            sel_count: vec![0; heads * g],
            uni: vec![-1; heads * uc],
            uni_count: vec![0; heads],
        };
        for (h, r) in &reference {
            for (t, &v) in r.retrievable.clone().zip(&r.votes) {
                votes[h * sizes.ld_votes + t] = v as u16;
                hist[h * bins + v as usize] += 1;
            }
            let mut pairs: Vec<(usize, f64)> = r
                .candidates
                .iter()
                .copied()
                .zip(r.estimates.iter().copied())
                .collect();
            pairs.sort_unstable_by_key(|&(t, _)| t);
            cand_count[*h] = pairs.len() as i32;
            for (j, (t, s)) in pairs.into_iter().enumerate() {
                cand[h * sizes.ld_cand + j] = t as i32;
                score[h * sizes.ld_cand + j] = s;
            }
            let mut winners = r.winners.clone();
            winners.sort_unstable();
            assert_eq!(winners.len(), k);
            let set: Vec<usize> = (0..SINK).chain(winners).chain(n - LOCAL..n).collect();
            sel.uni_count[*h] = set.len() as i32;
            for (j, &t) in set.iter().enumerate() {
                sel.uni[h * uc + j] = t as i32;
                for gi in 0..g {
                    let qh = h * g + gi;
                    sel.sel[qh * sc + j] = t as i32;
                    sel.sel_pos[qh * sc + j] = j as i32;
                }
            }
            for gi in 0..g {
                sel.sel_count[h * g + gi] = set.len() as i32;
            }
        }
        check_votes(&votes, &hist, sizes.ld_votes, d, &reference).unwrap();
        check_candidates(&cand, &cand_count, sizes.ld_cand, &reference).unwrap();
        check_scores(&cand, &score, sizes.ld_cand, &reference).unwrap();
        check_selection(&sel, g, k, n, &reference).unwrap();

        // One element off in each.
        let last = sizes.ld_votes + 1000;
        votes[last] ^= 1;
        assert!(check_votes(&votes, &hist, sizes.ld_votes, d, &reference).is_err());
        votes[last] ^= 1;
        hist[bins + 3] += 1;
        assert!(check_votes(&votes, &hist, sizes.ld_votes, d, &reference).is_err());
        cand[sizes.ld_cand + 5] += 1;
        assert!(check_candidates(&cand, &cand_count, sizes.ld_cand, &reference).is_err());
        assert!(check_scores(&cand, &score, sizes.ld_cand, &reference).is_err());
        cand[sizes.ld_cand + 5] -= 1;
        score[7] = f64::NAN;
        assert!(check_scores(&cand, &score, sizes.ld_cand, &reference).is_err());
        sel.sel_pos[(g + 1) * sc + 2] = 3;
        assert!(check_selection(&sel, g, k, n, &reference).is_err());
        sel.sel_pos[(g + 1) * sc + 2] = 2;
        sel.uni[uc + ALWAYS + k - 1] += 1;
        assert!(check_selection(&sel, g, k, n, &reference).is_err());
    }

    #[test]
    fn the_sample_is_the_first_and_last_head() {
        assert_eq!(check_heads(1), [0]);
        assert_eq!(check_heads(8), [0, 7]);
    }
}
