//! The `select` family (SPEC §6): per query head the sink (first 4 tokens), the local window (last
//! 32) and the top-k of the tokens between them by score, ties to the lower index; per KV head the
//! sorted union of its G sets and each selected row's position in it.
//!
//! The top-k is a radix select over order-preserving `u32` keys of the fp32 scores (larger score,
//! larger key; `-0.0` and `+0.0` are the same key, so they tie and the lower index wins; the input
//! must be NaN-free). Three digit passes (11, 11 and 10 bits) find the k-th largest key `T` and how
//! many of the tokens equal to `T` to take (the lowest-index ones); a count pass and a write pass
//! compact the selected indices in ascending order; a union pass merges the G sets of each KV head.
//!
//! Cost per query head of `n` tokens: five reads of its `n` scores (three histogram passes, count,
//! write: `20 n` bytes; every pass is spread over `n / (threads * items_per_thread)` blocks), a
//! histogram of 2,048 bins per pass, and for the union a stable merge of the G sets by rank
//! (`G (G-1) (k+36) log k` binary-search steps, in shared memory while `G (k_max+36)` entries fit
//! 46 KiB) and one block scan, in one block per KV head. Ten launches per layer, none with host
//! synchronisation.
//!
//! The compacting variant ([`SelectAlgorithm::Compact`], template `select_compact.cu.tera`) reads the
//! scores twice instead of five times: after the first histogram pass a `_filter` pass copies
//! every token whose key is at or above the threshold digit (index and key) into a candidate
//! buffer of [`SelectSpec::candidates`] entries per query head, and the later passes read only
//! those. Where they do not fit after pass 0 it tries again after pass 1 (three reads), and
//! where they do not fit then either (masses of equal keys) that query head reads the scores in
//! every pass as the plain select does. The choice is made per query head on the device from the
//! pass's histogram, which counts exactly the tokens the filter would copy. Twelve launches.
//!
//! The one-read variant ([`SelectAlgorithm::Onepass`], template `select_onepass.cu.tera`) reads
//! the scores once: a `_chunk` pass splits each query head's tokens over
//! [`SelectSpec::onepass_chunks`] blocks, each of which keeps the exact top-k of its share in
//! shared memory behind a running floor (one compare drops a token that `k` earlier ones beat)
//! and writes at most `k` candidates to its own slot; `_final` takes the exact top-k of a query
//! head's slots and `_union` merges the sets. Three launches, no atomics outside shared memory,
//! and no workspace that must be zeroed; nothing can overflow, so there is no fallback.
//!
//! The fused one-read variant ([`SelectAlgorithm::Fused`], template `select_fused.cu.tera`) is
//! the one-read select with `_final` folded into `_chunk`: the block of a query head that
//! finishes last (a counter per query head, [`SelectPlan::arrival_words`], zeroed when allocated
//! and left zero by every launch) takes the top-k of the slots. Two launches, one of them the
//! union (which the step launches only when something reads it).
//!
//! The peaks variant ([`SelectAlgorithm::Peaks`], `select_onepass.cu.tera` with
//! `select_peaks.cuh.tera`) is the one-read select, its launches, workspaces and entry points,
//! with another block top-k: a `_chunk` block first streams its share once for the largest key
//! of each peak tile (P tokens, the least power of two that leaves at most the buffer's size of
//! them), finds the k-th largest peak K in shared memory, and then reads only the tiles whose
//! peak reaches K (about k of them), behind the floor K. The k tiles of the largest peaks hold k
//! tokens of keys at least K, so no token of the share's top-k is in another tile or below K.
//! The share's other tiles cost one max and one shuffle tree a load, not the running floor's
//! compare, vote and append. Its one-block form ([`SelectAlgorithm::PeaksHead`],
//! `select_peaks_head.cu.tera`) gives each query head one block, whose top-k is the answer: it
//! writes the selection itself, so a selection is two launches (`_chunk`, `_union`) and no
//! slots; meant for short contexts, where the one-read select's `_final` is a launch of latency.
//!
//! Both peaks forms also come reading the peaks the scan wrote ([`SelectAlgorithm::ScanPeaks`],
//! [`SelectAlgorithm::ScanPeaksHead`]; `ScanSpec::peaks`): the largest key of every 32-token
//! half the scan scored, so a block reads its share's peaks (1/32 of its scores), forms from the
//! scores only the halves they cannot stand for (the sink's, the window's, the tail past
//! `n_stored`), and then its hot tiles: about 1/8 of the scores at 1M tokens instead of all.
//!
//! The cluster variant ([`SelectAlgorithm::Cluster`], `select_cluster.cu.tera`) gives each query
//! head a thread-block cluster of [`CLUSTER_BLOCKS`] blocks (Hopper, sm_90), each reading an
//! equal run of the row: the three radix passes of the plain select, each block counting its
//! run into its own histogram and every block summing the cluster's histograms through
//! distributed shared memory after a cluster barrier, so that all pick the same digit; then
//! each block writes its tokens above the k-th key and its share of those equal to it at their
//! places in `sel`, from the counts of the blocks before it. Two launches (`_chunk`, `_union`),
//! no workspace, and eight times the blocks of the one-block form: meant for short contexts,
//! where the one-block select's `_chunk` is the work of one block a query head. Its form
//! reading the scan's peaks ([`SelectAlgorithm::ScanPeaksCluster`],
//! `select_cluster_peaks.cu.tera`) runs the radix passes twice: two over the peaks of the
//! row's 32-token halves for a floor at most the k-th largest peak K' (K' with its last 10 bits
//! cleared), then three over the tokens of the halves whose peak reaches the floor alone (about
//! k halves of the row, against the k tiles every block of the one-read selects reads for its
//! own top-k).
//!
//! The resident variant ([`SelectAlgorithm::Resident`], `select_resident.cu.tera`) gives each
//! query head one block whose threads hold the keys of its row in registers (`items_per_thread`
//! a thread): the plain select's three radix passes count them into one shared histogram, then
//! each warp writes its tokens above the k-th key and its share of those equal to it, from the
//! counts of the warps before it. No buffer, no running floor, no peaks: about ten block
//! barriers where the one-block peaks select has ~26. A row whose middle is longer than
//! `threads * items_per_thread` tokens is read again by every pass, a tile at a time. Two
//! launches (`_chunk`, `_union`); meant for rows up to 32k tokens (1,024 threads x 32 keys).

use super::launch::{blocks_for, grid_dim, Launch, SizeError, MAX_GRID_X, MAX_GRID_YZ};
use super::{checks, Family, SpecError};
use serde::{Deserialize, Serialize};

/// Tokens always selected at the start of a sequence (the sink).
pub const SINK: u64 = 4;
/// Tokens always selected at the end of a sequence (the local window).
pub const LOCAL: u64 = 32;
/// Largest `k_max` the union's scratch and the fetched-row buffers are meant for.
pub const MAX_K: u32 = 4096;
/// Words of radix state per query head: threshold, need, decided flag, spare, 2,048 bins.
pub const STATE_WORDS: u64 = 4 + 2048;
/// Words of radix state per query head of the compacting variant: threshold, need, decided flag,
/// [`COMPACT_SOURCE_WORD`], tokens at or above the threshold prefix, the candidate counter, two
/// spare, 2,048 bins.
pub const COMPACT_STATE_WORDS: u64 = 8 + 2048;
/// The state word (of [`COMPACT_STATE_WORDS`]) that says where a query head's passes read their
/// tokens: 0 the scores, `1 + p` the candidates that `_filter(p)` compacted.
pub const COMPACT_SOURCE_WORD: u64 = 3;
/// Candidates per query head of the compacting variant, per unit of `k_max`: room for the
/// threshold digit's bin to hold seven times as many tokens as the top-k itself.
pub const CANDIDATES_PER_K: u64 = 8;
/// Candidates the one-read variant's block keeps in shared memory, before rounding to whole
/// entries per thread (see [`SelectSpec::onepass_buffer`]): with the 2,048-bin histogram about
/// 40 KiB, inside the 48 KiB a block may declare statically.
pub const ONEPASS_BUFFER: u64 = 4096;
/// Most buffer entries one thread holds in registers while the buffer is compacted.
pub const ONEPASS_MAX_PER_THREAD: u64 = 32;
/// Static shared memory a block may declare (48 KiB).
pub const MAX_STATIC_SHARED: u64 = 48 * 1024;
/// Blocks a query head of the cluster variant ([`SelectAlgorithm::Cluster`]): one
/// thread-block cluster, of the largest size every sm_90 GPU launches without opting in.
pub const CLUSTER_BLOCKS: u64 = 8;
/// Blocks the one-read variant's `_chunk` pass aims for over all query heads of a launch: two
/// per SM of a 132-SM H200, one wave with enough loads in flight to read HBM at its rate. A
/// query head gets `floor(ONEPASS_TARGET_BLOCKS / heads)` blocks (so that the blocks fit one
/// wave), at least one and at most one per chunk of tokens.
pub const ONEPASS_TARGET_BLOCKS: u64 = 264;

/// How the top-k of each query head is found. All give the same outputs, bit for bit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SelectAlgorithm {
    /// Three radix passes over the scores, then a count and a write pass: five reads, ten
    /// launches (`select.cu.tera`).
    #[default]
    Radix,
    /// The radix passes move to compacted candidates after the first (or second) pass: two to
    /// three reads, twelve launches (`select_compact.cu.tera`).
    Compact,
    /// One read: per-block top-k with a running floor, then an exact select of the blocks'
    /// candidates: three launches (`select_onepass.cu.tera`).
    Onepass,
    /// The one-read select whose last block per query head selects from the blocks'
    /// candidates: two launches (`select_fused.cu.tera`).
    Fused,
    /// The one-read select whose blocks find their top-k from the peaks of their shares: one
    /// streaming read of the scores for each peak tile's largest key, then only the tiles whose
    /// peak reaches the k-th largest peak, behind it: three launches
    /// (`select_onepass.cu.tera` with `select_peaks.cuh.tera`).
    Peaks,
    /// The peaks select with one block a query head, which writes the selection itself (no
    /// slots, no `_final`): two launches, one of them the union (`select_peaks_head.cu.tera`).
    #[serde(rename = "peaks_head")]
    PeaksHead,
    /// The peaks select reading the peaks the scan wrote (`ScanSpec::peaks`: the largest key
    /// of every 32-token half it scored) instead of streaming the scores for them: each block
    /// reads its share's peaks, recomputes from the scores only the halves the scan's cannot
    /// stand for (the sink's, the window's, those past `n_stored`), then reads only its hot
    /// tiles (`select_onepass.cu.tera` with `select_peaks.cuh.tera`). Its `_chunk` also takes
    /// `n_stored`, `peaks` and `ld_peaks`; score rows must be 16-byte aligned.
    #[serde(rename = "scan_peaks")]
    ScanPeaks,
    /// [`SelectAlgorithm::ScanPeaks`] with one block a query head, as
    /// [`SelectAlgorithm::PeaksHead`] (`select_peaks_head.cu.tera`).
    #[serde(rename = "scan_peaks_head")]
    ScanPeaksHead,
    /// Three radix passes over the scores by a thread-block cluster of [`CLUSTER_BLOCKS`]
    /// blocks a query head, the histograms summed through distributed shared memory, then each
    /// block writes its selected tokens: two launches, one of them the union
    /// (`select_cluster.cu.tera`; sm_90).
    Cluster,
    /// The cluster select from the peaks the scan wrote (`ScanSpec::peaks`): two radix passes
    /// over the peaks of the row's halves for a floor at most the k-th largest peak, then three
    /// over the tokens of the halves whose peak reaches it (`select_cluster_peaks.cu.tera`;
    /// sm_90). Its `_chunk` takes `n_stored`, `peaks` and `ld_peaks` as the other scan-peaks
    /// selects do.
    #[serde(rename = "scan_peaks_cluster")]
    ScanPeaksCluster,
    /// Three radix passes by one block a query head over the keys its threads hold in
    /// registers, then each warp writes its selected tokens: a row whose middle fits one tile
    /// (`threads * items_per_thread` tokens) is read once, a longer one by every pass; two
    /// launches, one of them the union (`select_resident.cu.tera`). Its `_chunk` takes the
    /// one-block peaks form's parameters.
    Resident,
}

impl SelectAlgorithm {
    /// Every algorithm, in the order the tuner tries them.
    pub const ALL: [SelectAlgorithm; 11] = [
        SelectAlgorithm::Radix,
        SelectAlgorithm::Compact,
        SelectAlgorithm::Onepass,
        SelectAlgorithm::Fused,
        SelectAlgorithm::Peaks,
        SelectAlgorithm::PeaksHead,
        SelectAlgorithm::ScanPeaks,
        SelectAlgorithm::ScanPeaksHead,
        SelectAlgorithm::Cluster,
        SelectAlgorithm::ScanPeaksCluster,
        SelectAlgorithm::Resident,
    ];

    /// The name as specs, kernel names and tuning records spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            SelectAlgorithm::Radix => "radix",
            SelectAlgorithm::Compact => "compact",
            SelectAlgorithm::Onepass => "onepass",
            SelectAlgorithm::Fused => "fused",
            SelectAlgorithm::Peaks => "peaks",
            SelectAlgorithm::PeaksHead => "peaks_head",
            SelectAlgorithm::ScanPeaks => "scan_peaks",
            SelectAlgorithm::ScanPeaksHead => "scan_peaks_head",
            SelectAlgorithm::Cluster => "cluster",
            SelectAlgorithm::ScanPeaksCluster => "scan_peaks_cluster",
            SelectAlgorithm::Resident => "resident",
        }
    }

    /// The suffix of the kernel name: none for the radix select, whose names predate the
    /// others.
    fn name_suffix(self) -> &'static str {
        match self {
            SelectAlgorithm::Radix => "",
            SelectAlgorithm::Compact => "_compact",
            SelectAlgorithm::Onepass => "_onepass",
            SelectAlgorithm::Fused => "_fused",
            SelectAlgorithm::Peaks => "_peaks",
            SelectAlgorithm::PeaksHead => "_peaks_head",
            SelectAlgorithm::ScanPeaks => "_scan_peaks",
            SelectAlgorithm::ScanPeaksHead => "_scan_peaks_head",
            SelectAlgorithm::Cluster => "_cluster",
            SelectAlgorithm::ScanPeaksCluster => "_scan_peaks_cluster",
            SelectAlgorithm::Resident => "_resident",
        }
    }

    /// Whether this is one of the one-read variants (a block top-k per share of the tokens).
    pub fn one_read(self) -> bool {
        matches!(
            self,
            SelectAlgorithm::Onepass
                | SelectAlgorithm::Fused
                | SelectAlgorithm::Peaks
                | SelectAlgorithm::PeaksHead
                | SelectAlgorithm::ScanPeaks
                | SelectAlgorithm::ScanPeaksHead
        )
    }

    /// Whether the blocks take their top-k from the peaks of their shares.
    pub fn peaks(self) -> bool {
        matches!(
            self,
            SelectAlgorithm::Peaks
                | SelectAlgorithm::PeaksHead
                | SelectAlgorithm::ScanPeaks
                | SelectAlgorithm::ScanPeaksHead
        )
    }

    /// Whether the peak tiles can be owned by threads ([`SelectSpec::owned_tiles`]): the peaks
    /// selects that take their peaks from the scores.
    pub fn owns_tiles(self) -> bool {
        matches!(self, SelectAlgorithm::Peaks | SelectAlgorithm::PeaksHead)
    }

    /// Whether `_chunk` reads the peaks the scan wrote (`ScanSpec::peaks`): only a method
    /// whose scores come from the plane scan can use it.
    pub fn scan_peaks(self) -> bool {
        matches!(
            self,
            SelectAlgorithm::ScanPeaks
                | SelectAlgorithm::ScanPeaksHead
                | SelectAlgorithm::ScanPeaksCluster
        )
    }

    /// Whether one block a query head writes the selection itself (no slots, no `_final`).
    pub fn one_block(self) -> bool {
        matches!(
            self,
            SelectAlgorithm::PeaksHead | SelectAlgorithm::ScanPeaksHead | SelectAlgorithm::Resident
        )
    }

    /// Whether `_chunk`'s blocks run the radix passes over the keys of their run of the row,
    /// with no buffer ([`SelectSpec::cluster_buffer`] sizes their scratch): the cluster
    /// selects and the resident one.
    pub fn radix_blocks(self) -> bool {
        self.cluster() || self == SelectAlgorithm::Resident
    }

    /// Whether a thread-block cluster of [`CLUSTER_BLOCKS`] blocks takes each query head
    /// (sm_90).
    pub fn cluster(self) -> bool {
        matches!(
            self,
            SelectAlgorithm::Cluster | SelectAlgorithm::ScanPeaksCluster
        )
    }

    /// Whether `_chunk` writes the selection itself (no slots, no `_final`): the one-block
    /// forms and the cluster ones.
    pub fn writes_selection(self) -> bool {
        self.one_block() || self.cluster()
    }

    /// The same algorithm reading the scores for its peaks: what a method whose scores do not
    /// come from the plane scan runs in place of a scan-peaks select.
    pub fn without_scan_peaks(self) -> SelectAlgorithm {
        match self {
            SelectAlgorithm::ScanPeaks => SelectAlgorithm::Peaks,
            SelectAlgorithm::ScanPeaksHead => SelectAlgorithm::PeaksHead,
            SelectAlgorithm::ScanPeaksCluster => SelectAlgorithm::Cluster,
            other => other,
        }
    }
}

/// One entry point of the select template, in launch order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SelectStage {
    /// `_init`: grid `(B*H*G)`.
    Init,
    /// `_hist` with `pass` 0, 1 or 2: grid `(chunks, B*H*G)`.
    Hist(u8),
    /// `_pick` with `pass` 0, 1 or 2: grid `(B*H*G)`.
    Pick(u8),
    /// `_filter` with `pass` 0 or 1 (compacting variant only): grid `(chunks, B*H*G)`.
    Filter(u8),
    /// `_count`: grid `(chunks, B*H*G)`.
    Count,
    /// `_write`: grid `(chunks, B*H*G)`.
    Write,
    /// `_chunk` (one-read variants): grid `(chunks, B*H*G)`.
    Chunk,
    /// `_final` (one-read variant): grid `(B*H*G)`.
    Final,
    /// `_union`: grid `(B*H)`.
    Union,
}

impl SelectStage {
    /// The ten launches of one selection of the plain variant, in order.
    pub const ORDER: [SelectStage; 10] = SelectStage::order(false);

    /// The twelve launches of one selection of the compacting variant, in order: a `_filter`
    /// after the first two picks.
    pub const COMPACT_ORDER: [SelectStage; 12] = SelectStage::order(true);

    /// The three launches of one selection of the one-read variant, in order.
    pub const ONEPASS_ORDER: [SelectStage; 3] =
        [SelectStage::Chunk, SelectStage::Final, SelectStage::Union];

    /// The two launches of one selection of the fused one-read variant, in order.
    pub const FUSED_ORDER: [SelectStage; 2] = [SelectStage::Chunk, SelectStage::Union];

    /// `_init`, a `_hist` and a `_pick` per digit pass (in the compacting variant a `_filter`
    /// after the picks of passes 0 and 1), then `_count`, `_write` and `_union`: both orders
    /// are this one sequence, so they cannot drift apart. `N` must be its length (checked when
    /// the constants are evaluated).
    const fn order<const N: usize>(compact: bool) -> [SelectStage; N] {
        let mut order = [SelectStage::Init; N];
        let mut i = 1;
        let mut pass = 0;
        while pass < 3 {
            order[i] = SelectStage::Hist(pass);
            order[i + 1] = SelectStage::Pick(pass);
            i += 2;
            if compact && pass < 2 {
                order[i] = SelectStage::Filter(pass);
                i += 1;
            }
            pass += 1;
        }
        order[i] = SelectStage::Count;
        order[i + 1] = SelectStage::Write;
        order[i + 2] = SelectStage::Union;
        assert!(i + 3 == N, "the length of a select order");
        order
    }

    /// The `pass` argument of the stages that take one.
    pub fn pass(self) -> Option<u8> {
        match self {
            SelectStage::Hist(p) | SelectStage::Pick(p) | SelectStage::Filter(p) => Some(p),
            _ => None,
        }
    }

    /// The suffix of the entry point's name.
    pub fn suffix(self) -> &'static str {
        match self {
            SelectStage::Init => "init",
            SelectStage::Hist(_) => "hist",
            SelectStage::Pick(_) => "pick",
            SelectStage::Filter(_) => "filter",
            SelectStage::Count => "count",
            SelectStage::Write => "write",
            SelectStage::Chunk => "chunk",
            SelectStage::Final => "final",
            SelectStage::Union => "union",
        }
    }
}

/// One parameter of a select entry point, for callers that build argument lists from
/// [`SelectSpec::params`] instead of spelling each stage's list out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SelectParam {
    /// `const float* scores`.
    Scores,
    /// `int ld_scores`.
    LdScores,
    /// `const int* n_total`.
    NTotal,
    /// `int k`, the run-time k.
    K,
    /// `int pass`: the stage's [`SelectStage::pass`].
    Pass,
    /// `int chunks` (one-read variant): [`SelectPlan::chunks`], the `_chunk` grid's x.
    Chunks,
    /// `int num_kv_heads`.
    NumKvHeads,
    /// `unsigned* state`, the radix state workspace.
    State,
    /// `unsigned* chunk_counts`, the per-chunk counts workspace (one-read variant: each
    /// `_chunk` block's number of candidates).
    ChunkCounts,
    /// `uint2* candidates` (compacting and one-read variants), the candidate workspace.
    Candidates,
    /// `unsigned* candidate_runs` (compacting variant), each chunk's run of candidates.
    CandidateRuns,
    /// `unsigned* arrivals` (fused one-read variant): per query head, the blocks of `_chunk`
    /// that have finished; zero before the first launch, left zero by every launch.
    Arrivals,
    /// `int* scratch`, the union's workspace.
    Scratch,
    /// `int* sel`.
    Sel,
    /// `int* sel_pos`.
    SelPos,
    /// `int* sel_count`.
    SelCount,
    /// `int* uni`.
    Uni,
    /// `int* uni_count`.
    UniCount,
    /// `const int* n_stored` (scan-peaks variants): `[B]` tokens the scan scored, whose
    /// whole halves' peaks it wrote.
    NStored,
    /// `const unsigned* peaks` (scan-peaks variants): `[B*H*G][ld_peaks]` the largest key of
    /// each 32-token half the scan scored (`ScanSpec::peaks`).
    Peaks,
    /// `int ld_peaks` (scan-peaks variants): the row stride of `peaks`, in words.
    LdPeaks,
}

/// Everything a caller allocates and launches for one selection of a layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectPlan {
    /// The launches in [`SelectSpec::stages`] order.
    pub launches: Vec<(SelectStage, Launch)>,
    /// `u32` words of the radix state buffer: `B*H*G*STATE_WORDS` (0 for the one-read
    /// variant, which keeps no state across launches).
    pub state_words: u64,
    /// `u32` words of the per-chunk counts: `B*H*G*chunks*2` (one-read variant:
    /// `B*H*G*chunks`, each block's number of candidates).
    pub chunk_count_words: u64,
    /// `i32` words of the union's scratch, the merged tokens of each KV head's sets and the
    /// entries they came from: `B*H*G*(k+36)*2`.
    pub scratch_words: u64,
    /// `u32` words of the candidates (0 for the plain variant): compacting, per query head
    /// [`SelectSpec::candidates`] `(index, key)` pairs, `B*H*G*candidates*2`; one-read, a slot
    /// of `k` pairs per block, `B*H*G*chunks*k*2`.
    pub candidate_words: u64,
    /// `u32` words of the per-chunk candidate runs (compacting variant; 0 for the others):
    /// `B*H*G*chunks*2`.
    pub candidate_run_words: u64,
    /// `u32` words of the arrival counters (fused one-read variant: `B*H*G`; 0 for the
    /// others). Allocate them zeroed; every launch leaves them zero.
    pub arrival_words: u64,
    /// Blocks per query head of the chunked stages.
    pub chunks: u64,
    /// `i32` words of `sel` and of `sel_pos`: `B*H*G*(k+36)`.
    pub sel_words: u64,
    /// `i32` words of `uni`: `B*H*(G*k+36)`.
    pub uni_words: u64,
}

/// The compacting variant's parameters of a chunked entry point: the plain variant's, with
/// the candidates and their runs after the state. `M` must be `N + 2` (checked when the
/// constants are evaluated).
const fn with_candidates<const N: usize, const M: usize>(
    plain: [SelectParam; N],
) -> [SelectParam; M] {
    let mut out = [SelectParam::Candidates; M];
    let (mut i, mut o) = (0, 0);
    while i < N {
        out[o] = plain[i];
        o += 1;
        if matches!(plain[i], SelectParam::State) {
            out[o] = SelectParam::Candidates;
            out[o + 1] = SelectParam::CandidateRuns;
            o += 2;
        }
        i += 1;
    }
    assert!(
        o == M,
        "a compact parameter list is the plain one and two more"
    );
    out
}

/// Spec of the select kernels.
///
/// Layouts (`k` the run-time k, `SC = k + 36`, `UC = G*k + 36`, query head
/// `qh = (b*H + h)*G + g`, KV head `kh = b*H + h`):
/// `sel[qh*SC + j]`, `sel_pos[qh*SC + j]` for `j < sel_count[qh]`; `uni[kh*UC + u]` for
/// `u < uni_count[kh]`. `sel` is ascending; `sel_count[qh] = n` when `n <= 36 + k`, else `36 + k`;
/// `uni` is ascending and deduplicated and `uni[kh*UC + sel_pos[qh*SC + j]] == sel[qh*SC + j]`.
///
/// Entry points, parameters in order (`state`, `chunk_counts`, `scratch` are workspaces sized by
/// [`SelectSpec::plan`]; nothing needs zeroing beforehand):
///
/// - `<name>_init(const int* n_total, int k, unsigned* state, int* sel_count, int num_kv_heads)`
/// - `<name>_hist(const float* scores, int ld_scores, const int* n_total, unsigned* state,
///   int pass, int num_kv_heads)`
/// - `<name>_pick(unsigned* state, int pass)`
/// - `<name>_count(const float* scores, int ld_scores, const int* n_total, const unsigned* state,
///   unsigned* chunk_counts, int num_kv_heads)`
/// - `<name>_write(const float* scores, int ld_scores, const int* n_total, const unsigned* state,
///   const unsigned* chunk_counts, int* sel, int k, int num_kv_heads)`
/// - `<name>_union(const int* sel, const int* sel_count, int* sel_pos, int* uni, int* uni_count,
///   int* scratch, int k)`
///
/// `scores` is `[B][H][G][ld_scores]` fp32 with tokens `0 .. n_total[b]` valid; `n_total` `[B]`;
/// `k` in `0..=k_max` (the kernels clamp it there). `_hist`, `_count` and `_write` must share one
/// grid x (`chunks`). Launch order: `_init`, `_hist(0)`, `_pick(0)`, `_hist(1)`, `_pick(1)`,
/// `_hist(2)`, `_pick(2)`, `_count`, `_write`, `_union`. Block `threads` for all.
///
/// The compacting variant (`algorithm: compact`, name suffix `_compact`) has the same outputs and two more
/// workspaces, `candidates` (`uint2` `(index, key)` pairs, [`SelectSpec::candidates`] per query
/// head) and `candidate_runs` (`{offset, count}` per query head and chunk); its state has
/// [`COMPACT_STATE_WORDS`] words per query head. Entry points:
///
/// - `<name>_init`, `<name>_pick`, `<name>_union`: as above;
/// - `<name>_hist(const float* scores, int ld_scores, const int* n_total, unsigned* state,
///   const uint2* candidates, const unsigned* candidate_runs, int pass, int num_kv_heads)`
/// - `<name>_filter(const float* scores, int ld_scores, const int* n_total, unsigned* state,
///   uint2* candidates, unsigned* candidate_runs, int pass, int num_kv_heads)`
/// - `<name>_count(const float* scores, int ld_scores, const int* n_total, const unsigned* state,
///   const uint2* candidates, const unsigned* candidate_runs, unsigned* chunk_counts,
///   int num_kv_heads)`
/// - `<name>_write(const float* scores, int ld_scores, const int* n_total, const unsigned* state,
///   const uint2* candidates, const unsigned* candidate_runs, const unsigned* chunk_counts,
///   int* sel, int k, int num_kv_heads)`
///
/// Launch order: `_init`, `_hist(0)`, `_pick(0)`, `_filter(0)`, `_hist(1)`, `_pick(1)`,
/// `_filter(1)`, `_hist(2)`, `_pick(2)`, `_count`, `_write`, `_union`
/// ([`SelectStage::COMPACT_ORDER`]); `_filter` shares the chunked grid.
///
/// The one-read variant (`algorithm: onepass`, name suffix `_onepass`) has the same outputs
/// from two workspaces, `candidates` (a slot of `k` `uint2` `(index, key)` pairs per query head
/// and block of `_chunk`) and `chunk_counts` (each slot's count), and the union's scratch; no
/// radix state. Entry points:
///
/// - `<name>_chunk(const float* scores, int ld_scores, const int* n_total, int k,
///   uint2* candidates, unsigned* chunk_counts, int num_kv_heads)`: grid
///   `(chunks, B*H*G)`;
/// - `<name>_final(const uint2* candidates, const unsigned* chunk_counts, int chunks,
///   const int* n_total, int* sel, int* sel_count, int k, int num_kv_heads)`: grid `(B*H*G)`,
///   `chunks` the `_chunk` grid's x;
/// - `<name>_union`: as above.
///
/// Launch order: `_chunk`, `_final`, `_union` ([`SelectStage::ONEPASS_ORDER`]). The peaks
/// variant (`algorithm: peaks`, name suffix `_peaks`) has the same entry points, workspaces and
/// order. Its one-block form (`algorithm: peaks_head`, name suffix `_peaks_head`) has no
/// workspace but the union's:
///
/// - `<name>_chunk(const float* scores, int ld_scores, const int* n_total, int k, int* sel,
///   int* sel_count, int num_kv_heads)`: grid `(1, B*H*G)`; block `qh` writes `sel` and
///   `sel_count` of its query head;
/// - `<name>_union`: as above.
///
/// Launch order: `_chunk`, `_union` ([`SelectStage::FUSED_ORDER`]). The two reading the scan's
/// peaks (`algorithm: scan_peaks`, `scan_peaks_head`; name suffixes `_scan_peaks`,
/// `_scan_peaks_head`) are these two with `const int* n_stored, const unsigned* peaks, int
/// ld_peaks` after `n_total` in `_chunk`, and rows of `scores` 16-byte aligned. Each of the
/// four peaks forms with [`SelectSpec::coarse_floor`] (name suffix `_cf` after the algorithm's)
/// has its entry points, workspaces and order.
///
/// The fused one-read variant (`algorithm: fused`, name suffix `_fused`) has the one-read
/// workspaces and `arrivals` (one `u32` per query head, [`SelectPlan::arrival_words`], zero
/// before the first launch and left zero by every launch). Entry points:
///
/// - `<name>_chunk(const float* scores, int ld_scores, const int* n_total, int k,
///   uint2* candidates, unsigned* chunk_counts, unsigned* arrivals, int* sel, int* sel_count,
///   int num_kv_heads)`: grid `(chunks, B*H*G)`; the last block of a query head to finish
///   writes its `sel` and `sel_count`;
/// - `<name>_union`: as above.
///
/// Launch order: `_chunk`, `_union` ([`SelectStage::FUSED_ORDER`]).
///
/// The cluster variant (`algorithm: cluster`, name suffix `_cluster`) has the one-block peaks
/// form's entry points and workspaces: `_chunk(const float* scores, int ld_scores, const int*
/// n_total, int k, int* sel, int* sel_count, int num_kv_heads)` with grid
/// `(CLUSTER_BLOCKS, B*H*G)` in clusters of `(CLUSTER_BLOCKS, 1, 1)` (declared by the kernel),
/// the blocks of query head `qh` one cluster; then `_union`. It needs sm_90. Its form
/// reading the scan's peaks (`algorithm: scan_peaks_cluster`, name suffix
/// `_scan_peaks_cluster`) takes `const int* n_stored, const unsigned* peaks, int ld_peaks` after
/// `n_total`, as `scan_peaks_head` does (any row alignment). The resident variant (`algorithm:
/// resident`, name suffix `_resident`) has the one-block peaks form's entry points, grid and
/// workspaces.
/// [`SelectSpec::params`] gives every entry point's list as data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectSpec {
    /// `G`, query heads per KV head: 1..=16.
    pub group: u32,
    /// Largest run-time `k`: 1..=4096.
    pub k_max: u32,
    /// Threads per block: a multiple of 32, at most 1024.
    pub threads: u32,
    /// Scores per thread per chunk: 1..=32 (chunk = `threads * items_per_thread` tokens; the
    /// one-read variant's tile, read in loads of 4, 2 or 1 scores as the count divides).
    pub items_per_thread: u32,
    /// How the top-k is found; `radix` when absent from a serialised spec.
    #[serde(default)]
    pub algorithm: SelectAlgorithm,
    /// The peaks selects' floor from two of the three radix passes over the peaks: the k-th
    /// largest peak K with its last 10 bits cleared (at least 1) instead of K. A floor below K
    /// keeps the top-k exact (more hot tiles and survivors, which the buffer's cuts take) and
    /// saves a pass and its three block barriers in a block bound by its barriers. Only with
    /// the peaks algorithms ([`SelectAlgorithm::peaks`]); name suffix `_cf`. The runtime's
    /// default (`Tiles::select_coarse_floor`) since it was timed on an H100 (2026-12-06: HBM
    /// 32k ~1.5% a step faster); false when absent from a serialised spec, and not written
    /// when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub coarse_floor: bool,
    /// The peaks selects that stream the scores ([`SelectAlgorithm::Peaks`],
    /// [`SelectAlgorithm::PeaksHead`]) with each peak tile's peak taken by the one thread that
    /// owns the tile and kept in registers for the radix passes (no shuffles, shared atomics
    /// or block scan for the peaks); the hot tiles as in the streaming form: the same tiles,
    /// floor and top-k (`select_owned_peaks.cuh.tera`); name suffix `_ot` after `_cf`. Opt-in
    /// (`Tiles::select_owned_tiles`): exact on an H100 but no faster (2% fewer instructions,
    /// the 32k one-block `_chunk` 16.51 -> 16.77 us; 2026-12-06); false when absent from a
    /// serialised spec, and not written when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub owned_tiles: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl SelectSpec {
    /// The launches of one selection, in order: [`SelectStage::ORDER`],
    /// [`SelectStage::COMPACT_ORDER`] or [`SelectStage::ONEPASS_ORDER`].
    pub fn stages(&self) -> &'static [SelectStage] {
        match self.algorithm {
            SelectAlgorithm::Radix => &SelectStage::ORDER,
            SelectAlgorithm::Compact => &SelectStage::COMPACT_ORDER,
            SelectAlgorithm::Onepass | SelectAlgorithm::Peaks | SelectAlgorithm::ScanPeaks => {
                &SelectStage::ONEPASS_ORDER
            }
            SelectAlgorithm::Fused
            | SelectAlgorithm::PeaksHead
            | SelectAlgorithm::ScanPeaksHead
            | SelectAlgorithm::Cluster
            | SelectAlgorithm::ScanPeaksCluster
            | SelectAlgorithm::Resident => &SelectStage::FUSED_ORDER,
        }
    }

    /// Whether this is the compacting variant.
    pub fn compact(&self) -> bool {
        self.algorithm == SelectAlgorithm::Compact
    }

    /// Candidates per query head of the compacting variant (`CANDIDATES_PER_K * k_max`); 0 for
    /// the others.
    pub fn candidates(&self) -> u64 {
        if self.compact() {
            CANDIDATES_PER_K * u64::from(self.k_max)
        } else {
            0
        }
    }

    /// Words of radix state per query head (0 for the one-read variant).
    pub fn state_words_per_head(&self) -> u64 {
        match self.algorithm {
            SelectAlgorithm::Radix => STATE_WORDS,
            SelectAlgorithm::Compact => COMPACT_STATE_WORDS,
            SelectAlgorithm::Onepass
            | SelectAlgorithm::Fused
            | SelectAlgorithm::Peaks
            | SelectAlgorithm::PeaksHead
            | SelectAlgorithm::ScanPeaks
            | SelectAlgorithm::ScanPeaksHead
            | SelectAlgorithm::Cluster
            | SelectAlgorithm::ScanPeaksCluster
            | SelectAlgorithm::Resident => 0,
        }
    }

    /// The buffer (`CAP` of the template) of the selects whose blocks radix-select the keys of
    /// their run ([`SelectAlgorithm::radix_blocks`]): they keep no candidates, and the one-read
    /// block's key and index arrays, `max(2048, k_max)` entries rounded up to whole entries per
    /// thread, hold the two radix histograms the blocks of a cluster exchange (unused by the
    /// resident select, whose block has the same layout).
    pub fn cluster_buffer(&self) -> u64 {
        let threads = u64::from(self.threads.max(1));
        2048u64.max(u64::from(self.k_max)).div_ceil(threads) * threads
    }

    /// Static shared memory of a cluster-variant block, in bytes: the exchanged histograms
    /// ([`SelectSpec::cluster_buffer`] keys and indices), the summed one, five words per warp,
    /// two result words, the block scan's words and the block's two counts.
    pub fn cluster_shared_bytes(&self) -> u64 {
        let warps = u64::from(self.threads) / 32;
        8 * self.cluster_buffer() + 4 * 2048 + 4 * (5 * warps + 2) + 4 * (warps + 1) + 8
    }

    /// Candidates the one-read variant's block keeps in shared memory: `threads *
    /// min(32, ceil(4096 / threads))` (whole entries per thread, which hold them in registers
    /// while the buffer is compacted). It must hold `k_max`.
    pub fn onepass_buffer(&self) -> u64 {
        let threads = u64::from(self.threads.max(1));
        threads * ONEPASS_BUFFER.div_ceil(threads).min(ONEPASS_MAX_PER_THREAD)
    }

    /// Static shared memory of one-read block, in bytes: the buffer's keys and indices, the
    /// 2,048-bin histogram, five words per warp (a compaction's two counts, a tile's survivors
    /// by parity, the digit search's scan) and a radix pass's two result words; with `peaks`
    /// also a bit per peak tile, a segment's list of hot tiles ([`SelectSpec::hot_tiles`]
    /// `u16`s) and the block scan's words.
    pub fn onepass_shared_bytes(&self) -> u64 {
        let warps = u64::from(self.threads) / 32;
        let peaks = if self.algorithm.peaks() {
            self.onepass_buffer() / 8 + 2 * self.hot_tiles() + 4 * (warps + 1)
        } else {
            0
        };
        8 * self.onepass_buffer() + 4 * 2048 + 4 * (5 * warps + 2) + peaks
    }

    /// Hot tiles the `peaks` block lists at once (`HOT_CAP`): half the buffer, in whole words
    /// of bits, at most 2,048.
    pub fn hot_tiles(&self) -> u64 {
        (self.onepass_buffer() / 64 * 32).min(2048)
    }

    /// Blocks per query head of the one-read variant's `_chunk`, for `heads` query heads of at
    /// most `max_tokens` tokens: [`ONEPASS_TARGET_BLOCKS`] over the heads, rounded down, at
    /// most one per chunk (`threads * items_per_thread` tokens), at least one.
    pub fn onepass_chunks(&self, heads: u64, max_tokens: u64) -> u64 {
        (ONEPASS_TARGET_BLOCKS / heads.max(1))
            .min(blocks_for(max_tokens, self.chunk()))
            .max(1)
    }

    /// The parameters of the entry point of `stage`, in order (see the type's docs).
    pub fn params(&self, stage: SelectStage) -> &'static [SelectParam] {
        use SelectParam::*;
        const HIST: [SelectParam; 6] = [Scores, LdScores, NTotal, State, Pass, NumKvHeads];
        const COUNT: [SelectParam; 6] = [Scores, LdScores, NTotal, State, ChunkCounts, NumKvHeads];
        const WRITE: [SelectParam; 8] = [
            Scores,
            LdScores,
            NTotal,
            State,
            ChunkCounts,
            Sel,
            K,
            NumKvHeads,
        ];
        const COMPACT_HIST: [SelectParam; 8] = with_candidates(HIST);
        const COMPACT_COUNT: [SelectParam; 8] = with_candidates(COUNT);
        const COMPACT_WRITE: [SelectParam; 10] = with_candidates(WRITE);
        let compact = self.compact();
        match (stage, compact) {
            (SelectStage::Init, _) => &[NTotal, K, State, SelCount, NumKvHeads],
            (SelectStage::Pick(_), _) => &[State, Pass],
            (SelectStage::Union, _) => &[Sel, SelCount, SelPos, Uni, UniCount, Scratch, K],
            (SelectStage::Chunk, _) if self.algorithm == SelectAlgorithm::Fused => &[
                Scores,
                LdScores,
                NTotal,
                K,
                Candidates,
                ChunkCounts,
                Arrivals,
                Sel,
                SelCount,
                NumKvHeads,
            ],
            (SelectStage::Chunk, _)
                if matches!(
                    self.algorithm,
                    SelectAlgorithm::PeaksHead
                        | SelectAlgorithm::Cluster
                        | SelectAlgorithm::Resident
                ) =>
            {
                &[Scores, LdScores, NTotal, K, Sel, SelCount, NumKvHeads]
            }
            (SelectStage::Chunk, _)
                if matches!(
                    self.algorithm,
                    SelectAlgorithm::ScanPeaksHead | SelectAlgorithm::ScanPeaksCluster
                ) =>
            {
                &[
                    Scores, LdScores, NTotal, NStored, Peaks, LdPeaks, K, Sel, SelCount, NumKvHeads,
                ]
            }
            (SelectStage::Chunk, _) if self.algorithm == SelectAlgorithm::ScanPeaks => &[
                Scores,
                LdScores,
                NTotal,
                NStored,
                Peaks,
                LdPeaks,
                K,
                Candidates,
                ChunkCounts,
                NumKvHeads,
            ],
            (SelectStage::Chunk, _) => &[
                Scores,
                LdScores,
                NTotal,
                K,
                Candidates,
                ChunkCounts,
                NumKvHeads,
            ],
            (SelectStage::Final, _) => &[
                Candidates,
                ChunkCounts,
                Chunks,
                NTotal,
                Sel,
                SelCount,
                K,
                NumKvHeads,
            ],
            (SelectStage::Hist(_), false) => &HIST,
            (SelectStage::Count, false) => &COUNT,
            (SelectStage::Write, false) => &WRITE,
            (SelectStage::Hist(_) | SelectStage::Filter(_), _) => &COMPACT_HIST,
            (SelectStage::Count, true) => &COMPACT_COUNT,
            (SelectStage::Write, true) => &COMPACT_WRITE,
        }
    }

    /// Name of the entry point of `stage`.
    pub fn entry(&self, stage: SelectStage) -> String {
        format!("{}_{}", self.kernel_name(), stage.suffix())
    }

    /// Tokens of one query head per block in the chunked stages.
    pub fn chunk(&self) -> u64 {
        u64::from(self.threads) * u64::from(self.items_per_thread)
    }

    /// Launches and buffer sizes for `batch` sequences of `kv_heads` KV heads, at most
    /// `max_tokens` tokens each (the capacity the scores are laid out for), selecting `k` tokens.
    pub fn plan(
        &self,
        batch: u64,
        kv_heads: u64,
        max_tokens: u64,
        k: u64,
    ) -> Result<SelectPlan, SizeError> {
        if k > u64::from(self.k_max) {
            return Err(SizeError {
                family: Self::FAMILY,
                field: "k",
                got: k.to_string(),
                allowed: format!("0..={} (the spec's k_max)", self.k_max),
            });
        }
        let group = u64::from(self.group);
        let kv = batch.saturating_mul(kv_heads);
        let heads = grid_dim(
            Self::FAMILY,
            "batch * kv_heads * group",
            kv.saturating_mul(group),
            MAX_GRID_YZ,
        )?;
        let kv = grid_dim(Self::FAMILY, "batch * kv_heads", kv, MAX_GRID_X)?;
        let onepass = self.algorithm.one_read();
        let chunks = if self.algorithm.cluster() {
            CLUSTER_BLOCKS
        } else if self.algorithm.one_block() {
            1
        } else if onepass {
            self.onepass_chunks(u64::from(heads), max_tokens)
        } else {
            blocks_for(max_tokens, self.chunk())
        };
        // The one-block and cluster variants write the selection from their blocks: no slots.
        let slots = !self.algorithm.writes_selection();
        let x = grid_dim(Self::FAMILY, "max_tokens / chunk", chunks, MAX_GRID_X)?;
        let per_head = Launch::new([heads, 1, 1], self.threads);
        let chunked = Launch::new([x, heads, 1], self.threads);
        let launches = self
            .stages()
            .iter()
            .map(|&stage| {
                let launch = match stage {
                    SelectStage::Init | SelectStage::Pick(_) | SelectStage::Final => per_head,
                    SelectStage::Hist(_)
                    | SelectStage::Filter(_)
                    | SelectStage::Count
                    | SelectStage::Write
                    | SelectStage::Chunk => chunked,
                    SelectStage::Union => Launch::new([kv, 1, 1], self.threads),
                };
                (stage, launch)
            })
            .collect();
        let heads = u64::from(heads);
        let compact = self.compact();
        Ok(SelectPlan {
            launches,
            state_words: heads * self.state_words_per_head(),
            chunk_count_words: if slots {
                heads * chunks * if onepass { 1 } else { 2 }
            } else {
                0
            },
            candidate_words: heads
                * 2
                * if !slots {
                    0
                } else if onepass {
                    chunks * k
                } else {
                    self.candidates()
                },
            candidate_run_words: if compact { heads * chunks * 2 } else { 0 },
            arrival_words: if self.algorithm == SelectAlgorithm::Fused {
                heads
            } else {
                0
            },
            scratch_words: heads * 2 * (k + SINK + LOCAL),
            chunks,
            sel_words: heads * (k + SINK + LOCAL),
            uni_words: u64::from(kv) * (group * k + SINK + LOCAL),
        })
    }
}

impl Family for SelectSpec {
    const FAMILY: &'static str = "select";

    fn validate(&self) -> Result<(), SpecError> {
        checks::group(Self::FAMILY, self.group)?;
        checks::k_max(Self::FAMILY, self.k_max)?;
        checks::threads(Self::FAMILY, self.threads)?;
        if !(1..=32).contains(&self.items_per_thread) {
            return Err(SpecError::new(
                Self::FAMILY,
                "items_per_thread",
                self.items_per_thread,
                "1..=32",
            ));
        }
        if self.coarse_floor && !self.algorithm.peaks() {
            return Err(SpecError::new(
                Self::FAMILY,
                "coarse_floor",
                format!("true with algorithm {}", self.algorithm.as_str()),
                "false, or true with peaks, peaks_head, scan_peaks or scan_peaks_head (the \
                 selects with a floor from their peaks)",
            ));
        }
        if self.owned_tiles && !self.algorithm.owns_tiles() {
            return Err(SpecError::new(
                Self::FAMILY,
                "owned_tiles",
                format!("true with algorithm {}", self.algorithm.as_str()),
                "false, or true with peaks or peaks_head (the selects that take their peaks \
                 from the scores)",
            ));
        }
        if self.algorithm.radix_blocks() {
            let per_thread = self.cluster_buffer() / u64::from(self.threads);
            if per_thread > ONEPASS_MAX_PER_THREAD {
                return Err(SpecError::new(
                    Self::FAMILY,
                    "threads",
                    self.threads,
                    format!(
                        "at least {} for the {} select: its histograms of \
                         max(2048, k_max = {}) entries are at most {ONEPASS_MAX_PER_THREAD} a \
                         thread",
                        2048u64
                            .max(u64::from(self.k_max))
                            .div_ceil(ONEPASS_MAX_PER_THREAD)
                            .next_multiple_of(32),
                        self.algorithm.as_str(),
                        self.k_max
                    ),
                ));
            }
            let shared = self.cluster_shared_bytes();
            if shared > MAX_STATIC_SHARED {
                return Err(SpecError::new(
                    Self::FAMILY,
                    "k_max",
                    self.k_max,
                    format!(
                        "a k_max whose {} block fits {MAX_STATIC_SHARED} bytes of static \
                         shared memory ({shared} needed; 4096 fits)",
                        self.algorithm.as_str()
                    ),
                ));
            }
        }
        if self.algorithm.one_read() {
            let buffer = self.onepass_buffer();
            if u64::from(self.k_max) > buffer {
                return Err(SpecError::new(
                    Self::FAMILY,
                    "k_max",
                    self.k_max,
                    format!(
                        "at most {buffer} with {} threads: the one-read block buffer of \
                         threads * min(32, ceil(4096 / threads)) candidates holds the top-k",
                        self.threads
                    ),
                ));
            }
            let shared = self.onepass_shared_bytes();
            if shared > MAX_STATIC_SHARED {
                return Err(SpecError::new(
                    Self::FAMILY,
                    "threads",
                    self.threads,
                    format!(
                        "a thread count whose {} block fits {MAX_STATIC_SHARED} bytes of static \
                         shared memory ({shared} needed; every power of two from 32 to 1024 \
                         does)",
                        self.algorithm.as_str()
                    ),
                ));
            }
        }
        Ok(())
    }

    fn kernel_name(&self) -> String {
        format!(
            "fathom_select_g{}_k{}_t{}_i{}{}{}{}",
            self.group,
            self.k_max,
            self.threads,
            self.items_per_thread,
            self.algorithm.name_suffix(),
            if self.coarse_floor { "_cf" } else { "" },
            if self.owned_tiles { "_ot" } else { "" }
        )
    }

    /// Each algorithm is its own template (sharing the helpers and the union through
    /// includes), so that no variant's passes are a maze of conditionals.
    fn template(&self) -> String {
        match self.algorithm {
            SelectAlgorithm::Radix => "select.cu.tera".into(),
            SelectAlgorithm::Compact => "select_compact.cu.tera".into(),
            SelectAlgorithm::Onepass | SelectAlgorithm::Peaks | SelectAlgorithm::ScanPeaks => {
                "select_onepass.cu.tera".into()
            }
            SelectAlgorithm::Fused => "select_fused.cu.tera".into(),
            SelectAlgorithm::PeaksHead | SelectAlgorithm::ScanPeaksHead => {
                "select_peaks_head.cu.tera".into()
            }
            SelectAlgorithm::Cluster => "select_cluster.cu.tera".into(),
            SelectAlgorithm::ScanPeaksCluster => "select_cluster_peaks.cu.tera".into(),
            SelectAlgorithm::Resident => "select_resident.cu.tera".into(),
        }
    }

    fn context(&self) -> tera::Context {
        let mut context = tera::Context::new();
        context.insert("group", &self.group);
        context.insert("k_max", &self.k_max);
        context.insert("threads", &self.threads);
        context.insert("items_per_thread", &self.items_per_thread);
        match self.algorithm {
            SelectAlgorithm::Radix => {}
            SelectAlgorithm::Compact => context.insert("candidates", &self.candidates()),
            SelectAlgorithm::Onepass
            | SelectAlgorithm::Fused
            | SelectAlgorithm::Peaks
            | SelectAlgorithm::PeaksHead
            | SelectAlgorithm::ScanPeaks
            | SelectAlgorithm::ScanPeaksHead => context.insert("buffer", &self.onepass_buffer()),
            SelectAlgorithm::Cluster | SelectAlgorithm::ScanPeaksCluster => {
                context.insert("buffer", &self.cluster_buffer());
                context.insert("cluster_blocks", &CLUSTER_BLOCKS);
            }
            SelectAlgorithm::Resident => context.insert("buffer", &self.cluster_buffer()),
        }
        context.insert("peaks", &self.algorithm.peaks());
        context.insert("scan_peaks", &self.algorithm.scan_peaks());
        context.insert("coarse_floor", &self.coarse_floor);
        context.insert("owned_tiles", &self.owned_tiles);
        // Whether `_chunk` writes slots for a `_final` (all one-read forms but the one-block
        // peaks selects, which write the selection).
        context.insert("slots", &!self.algorithm.writes_selection());
        context
    }
}
