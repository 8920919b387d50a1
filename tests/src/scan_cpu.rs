//! A `scan` spec's kernel run on the CPU (`cpu_cuda`), over the reference stores laid out as
//! on a GPU (`templates/ABI.md`: a words and a scales buffer per segment, the source run table
//! pointing into them), with the outputs poisoned as `store_kernels::run_scan` and
//! `run_scan_peaks` poison them, so that the checks of `scan_check` judge both alike.

use codegen::spec::ScanSpec;
use reference::store::HeadStore;

use crate::cpu_cuda::{words, Address, CpuKernel, Launch, Value};
use crate::scan_check::PEAKS_POISON;
use crate::store_kernels::{class_count, write_source_runs, TableShape};

/// A scan spec's kernel compiled for the CPU.
pub type CpuScan = CpuKernel<ScanSpec>;

/// What one scan reads, on the host.
pub struct CpuScanArgs<'a> {
    /// `[b][h]`: every head of a sequence holds the same number of tokens (whole blocks).
    pub stores: &'a [Vec<HeadStore>],
    /// Segments per `(b, h)` of the run table (more than the longest store has: the last stay
    /// unwritten, as `DeviceStore` leaves them).
    pub max_seg: usize,
    /// The plan `[b][h][D]`.
    pub depths: &'a [Vec<Vec<u8>>],
    /// Tokens the scan is told of each sequence (`n_stored`; at most what its stores hold).
    pub n_scored: &'a [usize],
    /// `[B][H][G][D]`.
    pub queries: &'a [f32],
    pub ld_scores: usize,
    /// Only read by a scan with peaks.
    pub ld_peaks: usize,
    /// Blocks a segment in place of `ScanSpec::launch_dims`' choice (the kernel reads its
    /// stripes from the grid, and is correct for any number): 1 makes a block score every tile
    /// of its segment, so the prefetch of the next tile runs at the small sizes of a CPU test.
    pub stripes: Option<u32>,
    /// Every segment's scales 2 bytes into their buffer: 2-byte aligned only, as a run's scales
    /// may be, so the scan copies them with plain loads instead of cp.async.
    pub misaligned_scales: bool,
}

/// What a scan wrote: the scores `[B][H][G][ld_scores]` (every word `u32::MAX` before), and with
/// peaks the peaks `[B][H][G][ld_peaks]` (every word `PEAKS_POISON` before).
pub struct CpuScanOutputs {
    pub scores: Vec<f32>,
    pub peaks: Vec<u32>,
}

/// The buffers of one run, in this order; the segments' words and scales follow.
#[derive(Clone, Copy)]
enum Buf {
    Runs,
    ClassCount,
    QStore,
    NStored,
    Scores,
    Peaks,
    FirstSegment,
}

impl CpuKernel<ScanSpec> {
    /// Runs the scan over `a`; `seed` orders the fibers.
    pub fn run(&self, a: &CpuScanArgs<'_>, seed: u64) -> Result<CpuScanOutputs, String> {
        let spec = self.spec;
        let shape = TableShape::of_stores(a.stores, a.max_seg);
        let (batch, heads, layout) = (shape.batch, shape.heads, shape.layout);
        let rows = batch * heads * spec.group;

        // The source run table with every segment at address 0 holds each run's offset into its
        // segment's buffers; the driver adds the buffers' addresses.
        let mut runs = vec![u64::MAX; shape.len()];
        let mut counts = Vec::with_capacity(batch * heads * 4);
        let mut segments: Vec<Vec<u32>> = Vec::new();
        let mut addresses = Vec::new();
        for (b, sequence) in a.stores.iter().enumerate() {
            for (h, store) in sequence.iter().enumerate() {
                let plan = &a.depths[b][h];
                let stored = store.stored_tokens();
                assert!(
                    store.segments().len() <= a.max_seg,
                    "max_seg {} too small",
                    a.max_seg
                );
                let zeros = vec![0u64; a.max_seg];
                write_source_runs(&mut runs, &shape, (b, h), stored, &zeros, &zeros, plan);
                for (s, segment) in store
                    .segments()
                    .iter()
                    .enumerate()
                    .take(shape.stored_segments(stored))
                {
                    let words = Buf::FirstSegment as usize + segments.len();
                    segments.push(words::from_u64(&segment.words));
                    let skip = usize::from(a.misaligned_scales);
                    let mut scales = vec![u16::MAX; skip];
                    scales.extend(&segment.scales);
                    segments.push(words::from_u16(&scales));
                    for slot in 0..layout.head_dim() {
                        let e = shape.entry(b, h, s, slot);
                        for (pointer, target, skip) in [(e, words, 0), (e + 1, words + 1, 2 * skip)]
                        {
                            addresses.push(Address {
                                buffer: Buf::Runs as usize,
                                index: pointer,
                                target,
                                offset: usize::try_from(runs[pointer]).expect("an offset") + skip,
                            });
                        }
                    }
                }
                counts.extend(class_count(plan));
            }
        }
        let mut buffers = vec![
            words::from_u64(&runs),
            counts,
            a.queries.iter().map(|q| q.to_bits()).collect(),
            a.n_scored.iter().map(|&n| n as u32).collect(),
            vec![u32::MAX; rows * a.ld_scores],
            if spec.peaks {
                vec![PEAKS_POISON; rows * a.ld_peaks]
            } else {
                Vec::new()
            },
        ];
        buffers.extend(segments);

        let ((gx, gy, gz), (threads, _, _), _) = spec.launch_dims(batch, heads, a.max_seg);
        let mut args = vec![
            Value::Buffer(Buf::Runs as usize),
            Value::Buffer(Buf::ClassCount as usize),
            Value::Buffer(Buf::QStore as usize),
            Value::Buffer(Buf::NStored as usize),
            Value::Int(a.max_seg as i64),
            Value::Int(heads as i64),
            Value::Buffer(Buf::Scores as usize),
            Value::Int(a.ld_scores as i64),
        ];
        if spec.peaks {
            args.extend([
                Value::Buffer(Buf::Peaks as usize),
                Value::Int(a.ld_peaks as i64),
            ]);
        }
        let launch = Launch {
            entry: 0,
            grid: [a.stripes.unwrap_or(gx), gy, gz],
            threads,
            args,
        };
        self.program()
            .run_with_addresses(&mut buffers, &addresses, &[launch], seed)?;
        Ok(CpuScanOutputs {
            scores: buffers[Buf::Scores as usize]
                .iter()
                .map(|&w| f32::from_bits(w))
                .collect(),
            peaks: std::mem::take(&mut buffers[Buf::Peaks as usize]),
        })
    }
}
