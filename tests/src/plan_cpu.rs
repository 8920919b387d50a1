//! A `plan` spec's kernel run on the CPU (`cpu_cuda`), over the reference stores laid out as on
//! a GPU (`templates/ABI.md`: a words and a scales buffer per segment, the segment tables
//! pointing at them), with the outputs poisoned as `store_kernels::run_plan` poisons them and
//! followed by guard words that must stay poison, so that `plan_check` judges both alike.

use codegen::spec::PlanSpec;
use reference::store::HeadStore;

use crate::cpu_cuda::{words, Address, CpuKernel, Launch, Value};
use crate::plan_check::{PlanAddresses, PlanResult};
use crate::store_kernels::TableShape;

/// Poison words after every output (and every word of the staging, which the plan never
/// writes): a write past what the spec says shows there.
const GUARD_WORDS: usize = 64;

/// A plan spec's kernel compiled for the CPU.
pub type CpuPlan = CpuKernel<PlanSpec>;

/// What one plan launch reads, on the host; `None` is passed as a null pointer.
pub struct CpuPlanArgs<'a> {
    /// `[b][h]`: every head of a sequence holds the same number of tokens (whole blocks).
    pub stores: &'a [Vec<HeadStore>],
    /// Segments per `(b, h)` of the tables (at least what the longest store has).
    pub max_seg: usize,
    /// Raw queries `[B][H][G][D]`.
    pub queries: &'a [f32],
    /// `σ²` `[B][H][D]`.
    pub sigma2: Option<&'a [f32]>,
    /// Fixed channels `[H][D]`.
    pub fixed_channels: Option<&'a [u8]>,
    /// Rotation `[H][D][D]`.
    pub rotation: Option<&'a [f32]>,
    pub budget: f32,
    /// Staging planes per `(b, h, s)`: `Some` passes a staging and a staged run table.
    pub stage_planes: Option<usize>,
    /// For a plan that scores the tail (`PlanSpec::tail`): its key rows and lengths.
    pub tail: Option<CpuTail<'a>>,
}

/// What a plan that scores the tail reads beyond the plan's own inputs.
pub struct CpuTail<'a> {
    /// `[b*H + h]`: the head's bf16 key rows as laid out in memory (`[n][D]`, or `[n][2][D]`
    /// with adjacent rows), as 32-bit words, two values each.
    pub rows: &'a [Vec<u32>],
    /// `[b]`: stored plus tail tokens.
    pub n_total: &'a [i32],
    /// Row stride of the scores, in floats.
    pub ld_scores: usize,
}

/// A run's outputs, where its store and staging lived, and what it wrote where it must not
/// have (guard words after the outputs, the staging, the inputs).
pub struct CpuPlanRun {
    pub result: PlanResult,
    pub seg_words: Vec<u64>,
    pub seg_scales: Vec<u64>,
    pub staging: Option<(u64, u64, usize)>,
    pub shape: TableShape,
    pub stray_writes: Vec<String>,
    /// With a tail: the scores `[B][H][G][ld_scores]`, NaN where nothing was written.
    pub scores: Option<Vec<f32>>,
}

impl CpuPlanRun {
    /// The addresses `plan_check::check_plan` builds the expected tables with.
    pub fn addresses(&self) -> PlanAddresses<'_> {
        PlanAddresses {
            seg_words: &self.seg_words,
            seg_scales: &self.seg_scales,
            staging: self.staging,
        }
    }
}

/// The buffers of one run, in this order; the segments' words and scales follow.
#[derive(Clone, Copy, Debug)]
enum Buf {
    Queries,
    Sigma2,
    Fixed,
    Rotation,
    SegWords,
    SegScales,
    NStored,
    QStore,
    Depths,
    ClassCount,
    Runs,
    StagedRuns,
    StageWords,
    StageScales,
    Status,
    /// Two pointers, set to the staging's words and scales: their addresses in the run.
    StageAddresses,
    FirstSegment,
}

/// Buffers the plan reads or never touches.
const INPUTS: [Buf; 7] = [
    Buf::Queries,
    Buf::Sigma2,
    Buf::Fixed,
    Buf::Rotation,
    Buf::NStored,
    Buf::StageWords,
    Buf::StageScales,
];

/// `words` poison words followed by the guard.
fn poisoned(words: usize) -> Vec<u32> {
    vec![u32::MAX; words + GUARD_WORDS]
}

impl CpuKernel<PlanSpec> {
    /// Runs the plan over `a`; `seed` orders the fibers.
    pub fn run(&self, a: &CpuPlanArgs<'_>, seed: u64) -> Result<CpuPlanRun, String> {
        let spec = self.spec;
        let (d, g) = (spec.head_dim, spec.group);
        let shape = TableShape::of_stores(a.stores, a.max_seg);
        let (batch, heads, layout) = (shape.batch, shape.heads, shape.layout);
        assert_eq!(
            a.queries.len(),
            batch * heads * g * d,
            "queries are [B][H][G][D]"
        );
        let regions = batch * heads * a.max_seg;
        let planes = a.stage_planes.unwrap_or(0);

        // The segment tables hold 0 where a head has no segment (as `DeviceStore` leaves them);
        // the others are set to the segments' addresses.
        let mut segments: Vec<Vec<u32>> = Vec::new();
        let mut addresses = Vec::new();
        for (b, sequence) in a.stores.iter().enumerate() {
            for (h, store) in sequence.iter().enumerate() {
                assert!(store.segments().len() <= a.max_seg, "max_seg too small");
                for (s, segment) in store.segments().iter().enumerate() {
                    let index = (b * heads + h) * a.max_seg + s;
                    for (table, data) in [
                        (Buf::SegWords, words::from_u64(&segment.words)),
                        (Buf::SegScales, words::from_u16(&segment.scales)),
                    ] {
                        addresses.push(Address {
                            buffer: table as usize,
                            index,
                            target: Buf::FirstSegment as usize + segments.len(),
                            offset: 0,
                        });
                        segments.push(data);
                    }
                }
            }
        }
        for (index, target) in [(0, Buf::StageWords), (1, Buf::StageScales)] {
            addresses.push(Address {
                buffer: Buf::StageAddresses as usize,
                index,
                target: target as usize,
                offset: 0,
            });
        }
        let n_stored: Vec<u32> = a
            .stores
            .iter()
            .map(|s| s[0].stored_tokens() as u32)
            .collect();
        let mut buffers = vec![
            a.queries.iter().map(|q| q.to_bits()).collect(),
            a.sigma2
                .map_or(Vec::new(), |x| x.iter().map(|v| v.to_bits()).collect()),
            a.fixed_channels.map_or(Vec::new(), words::from_u8),
            a.rotation
                .map_or(Vec::new(), |x| x.iter().map(|v| v.to_bits()).collect()),
            vec![0; 2 * regions],
            vec![0; 2 * regions],
            n_stored,
            poisoned(batch * heads * g * d),
            poisoned((batch * heads * d).div_ceil(4)),
            poisoned(batch * heads * 4),
            poisoned(2 * shape.len()),
            a.stage_planes
                .map_or(Vec::new(), |_| poisoned(2 * shape.len())),
            vec![u32::MAX; regions * planes * layout.segment_words() * 2 + GUARD_WORDS],
            vec![u32::MAX; (regions * layout.scales_len()).div_ceil(2) + GUARD_WORDS],
            {
                let mut status = poisoned(3);
                status[..3].fill(0);
                status
            },
            vec![0; 4],
        ];
        buffers.extend(segments.iter().cloned());
        // The tail's buffers after the segments: the key-row table, the lengths, the scores,
        // then one buffer of rows per head.
        let tail_at = buffers.len();
        if let Some(tail) = &a.tail {
            assert_eq!(tail.rows.len(), batch * heads, "rows [b*H + h]");
            buffers.push(vec![0; 2 * batch * heads]);
            buffers.push(tail.n_total.iter().map(|&n| n as u32).collect());
            buffers.push(vec![f32::NAN.to_bits(); batch * heads * g * tail.ld_scores]);
            for (bh, rows) in tail.rows.iter().enumerate() {
                addresses.push(Address {
                    buffer: tail_at,
                    index: bh,
                    target: tail_at + 3 + bh,
                    offset: 0,
                });
                buffers.push(rows.clone());
            }
        }
        let before = buffers.clone();

        let ptr = |buf: Buf, present: bool| {
            if present {
                Value::Buffer(buf as usize)
            } else {
                Value::Null
            }
        };
        let staged = a.stage_planes.is_some();
        let args = vec![
            Value::Buffer(Buf::Queries as usize),
            ptr(Buf::Sigma2, a.sigma2.is_some()),
            ptr(Buf::Fixed, a.fixed_channels.is_some()),
            ptr(Buf::Rotation, a.rotation.is_some()),
            Value::Float(a.budget),
            Value::Buffer(Buf::SegWords as usize),
            Value::Buffer(Buf::SegScales as usize),
            Value::Int(a.max_seg as i64),
            Value::Buffer(Buf::NStored as usize),
            Value::Int(heads as i64),
            Value::Buffer(Buf::QStore as usize),
            Value::Buffer(Buf::Depths as usize),
            Value::Buffer(Buf::ClassCount as usize),
            Value::Buffer(Buf::Runs as usize),
            ptr(Buf::StagedRuns, staged),
            ptr(Buf::StageWords, staged),
            ptr(Buf::StageScales, staged),
            Value::Int(planes as i64),
            Value::Buffer(Buf::Status as usize),
        ];
        let mut args = args;
        if let Some(tail) = &a.tail {
            args.extend([
                Value::Buffer(tail_at),
                Value::Buffer(tail_at + 1),
                Value::Buffer(tail_at + 2),
                Value::Int(tail.ld_scores as i64),
            ]);
        }
        let ((gx, gy, gz), (threads, _, _), _) = spec.launch_dims(batch, heads);
        let launch = Launch {
            entry: 0,
            grid: [gx, gy, gz],
            threads,
            args,
        };
        self.program()
            .run_with_addresses(&mut buffers, &addresses, &[launch], seed)?;

        // Nothing written past the outputs, nor into the staging or the inputs.
        let mut stray_writes = Vec::new();
        let outputs = [
            (Buf::QStore, batch * heads * g * d),
            (Buf::Depths, (batch * heads * d).div_ceil(4)),
            (Buf::ClassCount, batch * heads * 4),
            (Buf::Runs, 2 * shape.len()),
            (Buf::StagedRuns, if staged { 2 * shape.len() } else { 0 }),
            (Buf::Status, 3),
        ];
        for (buf, len) in outputs {
            let words = &buffers[buf as usize];
            if let Some(i) = words.iter().skip(len).position(|&w| w != u32::MAX) {
                stray_writes.push(format!("{buf:?}: word {} past its {len} written", len + i));
            }
        }
        for buf in INPUTS {
            if buffers[buf as usize] != before[buf as usize] {
                stray_writes.push(format!("{buf:?} written (the plan only reads it, if that)"));
            }
        }
        for (i, segment) in segments.iter().enumerate() {
            if &buffers[Buf::FirstSegment as usize + i] != segment {
                stray_writes.push(format!("segment buffer {i} written"));
            }
        }
        if a.tail.is_some() {
            // The key-row table holds the rows' addresses in the run; the scores are output.
            for i in (tail_at + 1..buffers.len()).filter(|&i| i != tail_at + 2) {
                if buffers[i] != before[i] {
                    stray_writes.push(format!("tail input buffer {} written", i - tail_at));
                }
            }
        }
        let scores = a.tail.as_ref().map(|_| {
            buffers[tail_at + 2]
                .iter()
                .map(|&w| f32::from_bits(w))
                .collect()
        });

        let depths: Vec<u8> = buffers[Buf::Depths as usize]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .take(batch * heads * d)
            .collect();
        let status = &buffers[Buf::Status as usize];
        let stage = words::to_u64(&buffers[Buf::StageAddresses as usize]);
        let result = PlanResult {
            q_store: buffers[Buf::QStore as usize][..batch * heads * g * d]
                .iter()
                .map(|&w| f32::from_bits(w))
                .collect(),
            depths,
            class_count: buffers[Buf::ClassCount as usize][..batch * heads * 4].to_vec(),
            runs: words::to_u64(&buffers[Buf::Runs as usize][..2 * shape.len()]),
            staged_runs: staged
                .then(|| words::to_u64(&buffers[Buf::StagedRuns as usize][..2 * shape.len()])),
            status: [status[0] as i32, status[1] as i32, status[2] as i32],
        };
        Ok(CpuPlanRun {
            result,
            seg_words: words::to_u64(&buffers[Buf::SegWords as usize]),
            seg_scales: words::to_u64(&buffers[Buf::SegScales as usize]),
            staging: a.stage_planes.map(|p| (stage[0], stage[1], p)),
            shape,
            stray_writes,
            scores,
        })
    }
}
