//! Launch helpers for the ParisKV kernels (SPEC §12, `templates/ABI.md`): the index on the
//! device in either placement, the build, and the launches of one retrieval (query, vote,
//! top-C count and write, rerank score and its top-k: `_select`, or the many-block launches),
//! with every output poisoned first. The
//! argument lists and the sign vector are the runtime's ([`runtime::pariskv`]), which the key
//! store and the decoder launch with too.

use codegen::spec::launch::Launch;
use codegen::spec::pariskv::{
    candidate_capacity, padded_dim, subspaces, vote_bins, RerankSelect, CENTROIDS, TIERS,
};
use codegen::spec::{
    Family, PariskvIndexSpec, PariskvQuerySpec, PariskvRerankSpec, PariskvTopcSpec,
    PariskvVoteSpec, Placement,
};
use reference::pariskv::PariskvIndex;
use runtime::gpu::{Gpu, GpuError, Module};
pub use runtime::pariskv::device_signs;
use runtime::pariskv::{
    build_args, retrieval_args, IndexTables, RetrievalBuffers, RetrievalInputs, RetrievalSizes,
    Stage,
};

use crate::select_kernels::{compile, i32_of, launch, HeadTable, KernelError, SelectHost, POISON};

/// Threads per block of the kernels under test (the default kernel set's).
pub const THREADS: u32 = 256;

/// The five ParisKV families of one shape and placement, compiled.
pub struct PariskvKernels {
    pub index: PariskvIndexSpec,
    pub query: PariskvQuerySpec,
    pub vote: PariskvVoteSpec,
    pub topc: PariskvTopcSpec,
    pub rerank: PariskvRerankSpec,
    modules: [Module; 5],
}

/// One index per KV head (`[b*H + h]`) on the device: ids, codes and weights in the placement,
/// histograms in device memory.
pub struct DeviceIndex {
    /// `[capacity][NS]` centroid ids per head.
    pub ids: HeadTable<u8>,
    /// `[capacity][D_pad/2]` packed nibbles per head.
    pub codes: HeadTable<u8>,
    /// `[capacity][NS]` bf16 weights per head.
    pub weights: HeadTable<u16>,
    /// `[NS][256]` counts per head.
    pub hist: HeadTable<u32>,
    /// Tokens each head's rows hold.
    pub capacity: usize,
    /// `D`.
    pub head_dim: usize,
}

/// One head's index rows read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostIndex {
    pub ids: Vec<u8>,
    pub codes: Vec<u8>,
    pub weights: Vec<u16>,
    pub hist: Vec<u32>,
}

impl HostIndex {
    /// The rows and histograms of a reference index, padded with poison to `capacity` tokens.
    pub fn of(index: &PariskvIndex, capacity: usize) -> Self {
        let half = index.padded_dim() / 2;
        let ns = index.subspaces();
        let mut host = HostIndex {
            ids: vec![POISON; capacity * ns],
            codes: vec![POISON; capacity * half],
            weights: vec![u16::from_le_bytes([POISON, POISON]); capacity * ns],
            hist: (0..ns).flat_map(|b| index.histogram(b).to_vec()).collect(),
        };
        for t in 0..index.len() {
            host.ids[t * ns..(t + 1) * ns].copy_from_slice(index.ids(t));
            host.codes[t * half..(t + 1) * half].copy_from_slice(index.codes(t));
            for (b, w) in index.weights(t).iter().enumerate() {
                host.weights[t * ns + b] = w.to_bits();
            }
        }
        host
    }
}

impl DeviceIndex {
    /// `heads` empty indexes of `capacity` tokens: rows poisoned, histograms zero.
    pub fn empty(
        gpu: &Gpu,
        placement: Placement,
        head_dim: usize,
        heads: usize,
        capacity: usize,
    ) -> Result<Self, GpuError> {
        let ns = subspaces(head_dim as u32) as usize;
        let half = padded_dim(head_dim as u32) as usize / 2;
        let zero_hist = vec![vec![0u32; ns * CENTROIDS as usize]; heads];
        Ok(DeviceIndex {
            ids: HeadTable::filled(gpu, placement, &vec![capacity * ns; heads], POISON)?,
            codes: HeadTable::filled(gpu, placement, &vec![capacity * half; heads], POISON)?,
            weights: HeadTable::filled(gpu, placement, &vec![capacity * ns; heads], POISON)?,
            hist: HeadTable::upload(gpu, Placement::Hbm, &zero_hist)?,
            capacity,
            head_dim,
        })
    }

    /// The reference indexes (one per KV head) on the device, each padded to `capacity` tokens.
    pub fn upload(
        gpu: &Gpu,
        placement: Placement,
        indexes: &[PariskvIndex],
        capacity: usize,
    ) -> Result<Self, GpuError> {
        let host: Vec<HostIndex> = indexes.iter().map(|i| HostIndex::of(i, capacity)).collect();
        let pick = |f: &dyn Fn(&HostIndex) -> Vec<u8>| host.iter().map(f).collect::<Vec<_>>();
        Ok(DeviceIndex {
            ids: HeadTable::upload(gpu, placement, &pick(&|h| h.ids.clone()))?,
            codes: HeadTable::upload(gpu, placement, &pick(&|h| h.codes.clone()))?,
            weights: HeadTable::upload(
                gpu,
                placement,
                &host.iter().map(|h| h.weights.clone()).collect::<Vec<_>>(),
            )?,
            hist: HeadTable::upload(
                gpu,
                Placement::Hbm,
                &host.iter().map(|h| h.hist.clone()).collect::<Vec<_>>(),
            )?,
            capacity,
            head_dim: indexes.first().map_or(64, PariskvIndex::head_dim),
        })
    }

    /// The pointer tables' addresses, as the kernels take them.
    pub fn tables(&self) -> IndexTables {
        IndexTables {
            ids: self.ids.addr(),
            codes: self.codes.addr(),
            weights: self.weights.addr(),
            hist: self.hist.addr(),
        }
    }

    /// Head `head`'s rows and histograms; synchronise the stream first.
    pub fn read(&self, head: usize) -> Result<HostIndex, GpuError> {
        Ok(HostIndex {
            ids: self.ids.read(head)?,
            codes: self.codes.read(head)?,
            weights: self.weights.read(head)?,
            hist: self.hist.read(head)?,
        })
    }
}

/// What one retrieval reads.
pub struct RetrievalArgs<'a> {
    /// The index.
    pub index: &'a DeviceIndex,
    /// Raw queries `[B][H][G][D]` fp32.
    pub q: u64,
    /// The sign vector.
    pub signs: u64,
    /// `[B]` tokens per sequence.
    pub n_total: u64,
    /// `B`.
    pub batch: usize,
    /// `H`.
    pub kv_heads: usize,
    /// The largest `n_total`.
    pub max_tokens: usize,
    /// The run-time k.
    pub k: usize,
}

/// Every output of one retrieval, on the host.
pub struct RetrievalHost {
    /// `[B*H][D_pad]`.
    pub q_tilde: Vec<f64>,
    /// `[B*H]`.
    pub q_norm: Vec<f64>,
    /// `[B*H][NS][256]`.
    pub tiers: Vec<u8>,
    /// `[B*H][NS][6]`.
    pub tier_len: Vec<i32>,
    /// `[B*H][6NS+1]`.
    pub vote_hist: Vec<u32>,
    /// `[B*H][ld_votes]`.
    pub votes: Vec<u16>,
    pub ld_votes: usize,
    /// `[B*H][ld_cand]`.
    pub cand: Vec<i32>,
    /// `[B*H]`.
    pub cand_count: Vec<i32>,
    /// `[B*H][ld_cand]`.
    pub cand_score: Vec<f64>,
    pub ld_cand: usize,
    /// The selection, in the select family's layout.
    pub selection: SelectHost,
}

/// How the rerank of [`PariskvKernels::load_variant`] scores and selects (the default kernel
/// set's when `default()`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RerankVariant {
    /// `_score` reads whole rows in 16-byte loads ([`PariskvRerankSpec::vector_loads`]).
    pub vector_loads: bool,
    /// The top-k ([`PariskvRerankSpec::select`]).
    pub select: RerankSelect,
    /// `_score`'s operands in tables laid out for it ([`PariskvRerankSpec::decode_table`]).
    pub decode_table: bool,
    /// Blocks of the query kernel per KV head ([`PariskvQuerySpec::subspace_blocks`]); 0 is
    /// one, more than the subspaces one a subspace.
    pub query_blocks: u32,
}

impl PariskvKernels {
    /// Renders and compiles the five families for `head_dim`, `group`, `k_max` and `placement`
    /// (the default kernel set's rerank).
    pub fn load(
        gpu: &Gpu,
        head_dim: u32,
        group: u32,
        k_max: u32,
        placement: Placement,
    ) -> Result<Self, KernelError> {
        Self::load_variant(
            gpu,
            head_dim,
            group,
            k_max,
            placement,
            RerankVariant::default(),
        )
    }

    /// As [`PariskvKernels::load`], with the rerank's `_score` and top-k as `variant` says.
    pub fn load_variant(
        gpu: &Gpu,
        head_dim: u32,
        group: u32,
        k_max: u32,
        placement: Placement,
        variant: RerankVariant,
    ) -> Result<Self, KernelError> {
        let index = PariskvIndexSpec {
            head_dim,
            threads: THREADS,
            placement,
            kv_rows: codegen::spec::KvRows::Separate,
        };
        let query = PariskvQuerySpec {
            subspace_blocks: variant.query_blocks.clamp(1, subspaces(head_dim)),
            ..PariskvQuerySpec::new(head_dim, group)
        };
        let vote = PariskvVoteSpec {
            head_dim,
            threads: THREADS,
            placement,
        };
        let topc = PariskvTopcSpec {
            head_dim,
            threads: THREADS,
        };
        let rerank = PariskvRerankSpec {
            head_dim,
            group,
            k_max,
            threads: THREADS,
            placement,
            vector_loads: variant.vector_loads,
            select: variant.select,
            decode_table: variant.decode_table,
        };
        let modules = [
            compile(gpu, &index)?,
            compile(gpu, &query)?,
            compile(gpu, &vote)?,
            compile(gpu, &topc)?,
            compile(gpu, &rerank)?,
        ];
        Ok(PariskvKernels {
            index,
            query,
            vote,
            topc,
            rerank,
            modules,
        })
    }

    /// Queues one index build of tokens `[range_start, range_end)` per sequence.
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        &self,
        gpu: &Gpu,
        grid: Launch,
        index: &DeviceIndex,
        k_rows: u64,
        signs: u64,
        range_start: Option<u64>,
        range_end: u64,
        kv_heads: usize,
        status: u64,
    ) -> Result<(), GpuError> {
        // Checked here so that a test's oversized argument fails loudly.
        let _ = i32_of(kv_heads, "num_kv_heads");
        let args = build_args(
            k_rows,
            signs,
            index.tables(),
            range_start.unwrap_or(0),
            range_end,
            kv_heads,
            status,
        );
        launch(
            gpu,
            &self.modules[0],
            &self.index.kernel_name(),
            grid,
            &args,
        )
    }

    /// Queues the launches of one retrieval (six, or more with the many-block top-k) into
    /// poisoned outputs and workspaces, waits, and reads every output back. `vote_grid_x` and `score_grid_x` replace the spec's grid x when given (the
    /// kernels are correct for any x).
    pub fn retrieve(
        &self,
        gpu: &Gpu,
        a: &RetrievalArgs<'_>,
        vote_grid_x: Option<u32>,
        score_grid_x: Option<u32>,
    ) -> Result<RetrievalHost, KernelError> {
        let d = self.query.head_dim;
        let ns = subspaces(d) as usize;
        let bins = vote_bins(d) as usize;
        let g = self.query.group as usize;
        let heads = a.batch * a.kv_heads;
        let (b64, h64) = (a.batch as u64, a.kv_heads as u64);
        let ld_votes = a.max_tokens.max(1);
        let ld_cand = (candidate_capacity(a.max_tokens as u64) as usize).max(1);
        let k = a.k.min(self.rerank.k_max as usize);
        let sc = k + 36;
        let uc = g * k + 36;

        let q_tilde = gpu.filled::<f64>(heads * padded_dim(d) as usize, POISON)?;
        let q_norm = gpu.filled::<f64>(heads, POISON)?;
        let tiers = gpu.filled::<u8>(heads * ns * CENTROIDS as usize, POISON)?;
        let tier_len = gpu.filled::<i32>(heads * ns * TIERS as usize, POISON)?;
        let vote_hist = gpu.filled::<u32>(heads * bins, POISON)?;
        let votes = gpu.filled::<u16>(heads * ld_votes, POISON)?;
        let (topc_launch, chunk_words) = self.topc.launch(b64, h64, a.max_tokens as u64)?;
        let chunk_counts = gpu.filled::<u64>(chunk_words as usize, POISON)?;
        let cand = gpu.filled::<i32>(heads * ld_cand, POISON)?;
        let cand_count = gpu.filled::<i32>(heads, POISON)?;
        let cand_score = gpu.filled::<f64>(heads * ld_cand, POISON)?;
        let select = self
            .rerank
            .select_plan(b64, h64, ld_cand as u64, a.k as u64)?;
        let sizes = RetrievalSizes::new(heads, d as usize, a.max_tokens, 1).with_select(&select);
        let select_slots = gpu.filled::<u64>((2 * sizes.select_slots).max(1), POISON)?;
        let select_counts = gpu.filled::<u32>((2 * sizes.select_counts).max(1), POISON)?;
        let (slot_halves, count_halves) =
            sizes.select_halves(select_slots.addr(), select_counts.addr());
        let sel = gpu.filled::<i32>(heads * g * sc, POISON)?;
        let sel_pos = gpu.filled::<i32>(heads * g * sc, POISON)?;
        let sel_count = gpu.filled::<i32>(heads * g, POISON)?;
        let uni = gpu.filled::<i32>(heads * uc, POISON)?;
        let uni_count = gpu.filled::<i32>(heads, POISON)?;
        let _ = (i32_of(a.kv_heads, "num_kv_heads"), i32_of(a.k, "k"));
        let inputs = RetrievalInputs {
            index: a.index.tables(),
            queries: a.q,
            signs: a.signs,
            n_total: a.n_total,
            kv_heads: a.kv_heads,
            k: a.k,
        };
        let buffers = RetrievalBuffers {
            q_tilde: q_tilde.addr(),
            q_norm: q_norm.addr(),
            tiers: tiers.addr(),
            tier_len: tier_len.addr(),
            vote_hist: vote_hist.addr(),
            votes: votes.addr(),
            ld_votes,
            chunk_counts: chunk_counts.addr(),
            cand: cand.addr(),
            cand_count: cand_count.addr(),
            cand_score: cand_score.addr(),
            ld_cand,
            sel: sel.addr(),
            sel_pos: sel_pos.addr(),
            sel_count: sel_count.addr(),
            uni: uni.addr(),
            uni_count: uni_count.addr(),
            select_slots: slot_halves,
            select_counts: count_halves,
        };
        let mut vl = self.vote.launch(b64, h64, a.max_tokens as u64)?;
        if let Some(x) = vote_grid_x {
            vl.grid[0] = x;
        }
        let mut sl = self.rerank.launch_score(b64, h64, ld_cand as u64)?;
        if let Some(x) = score_grid_x {
            sl.grid[0] = x;
        }
        let stages = Stage::ALL[..5].iter().copied().chain(
            select
                .launches
                .iter()
                .map(|&(step, _)| Stage::RerankSelect(step)),
        );
        for stage in stages {
            let (module, entry, grid) = match stage {
                Stage::Query => (1, self.query.kernel_name(), self.query.launch(b64, h64)?),
                Stage::Vote => (2, self.vote.kernel_name(), vl),
                Stage::TopcCount => (3, self.topc.count_entry(), topc_launch),
                Stage::TopcWrite => (3, self.topc.write_entry(), topc_launch),
                Stage::RerankScore => (4, self.rerank.score_entry(), sl),
                Stage::RerankSelect(step) => {
                    let (_, grid) = select
                        .launches
                        .iter()
                        .find(|&&(s, _)| s == step)
                        .expect("a step of the plan");
                    (4, self.rerank.select_step_entry(step), *grid)
                }
            };
            let args = retrieval_args(stage, &inputs, &buffers);
            launch(gpu, &self.modules[module], &entry, grid, &args)?;
        }
        gpu.synchronize()?;
        Ok(RetrievalHost {
            q_tilde: q_tilde.download()?,
            q_norm: q_norm.download()?,
            tiers: tiers.download()?,
            tier_len: tier_len.download()?,
            vote_hist: vote_hist.download()?,
            votes: votes.download()?,
            ld_votes,
            cand: cand.download()?,
            cand_count: cand_count.download()?,
            cand_score: cand_score.download()?,
            ld_cand,
            selection: SelectHost {
                sel: sel.download()?,
                sel_pos: sel_pos.download()?,
                sel_count: sel_count.download()?,
                uni: uni.download()?,
                uni_count: uni_count.download()?,
                k,
                group: g,
                arrivals: Vec::new(),
            },
        })
    }
}
