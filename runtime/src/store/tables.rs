//! The device tables of one batch (templates/ABI.md, "The store on the device"), and their host
//! mirror: a refresh compares the wanted tables with what the device already holds and uploads
//! only the span that changed, so that a decode step usually copies a few bytes of lengths.

use std::ops::Range;

use super::device::Uploader;
use crate::gpu::{DeviceBuffer, Gpu, GpuError};

/// The tables of a batch as host arrays, in the ABI's layout.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostTables {
    /// `[(b*H + h)*max_seg + s]`, 0 past a head's last segment.
    pub seg_words: Vec<u64>,
    pub seg_scales: Vec<u64>,
    /// `[b]`.
    pub n_stored: Vec<i32>,
    pub n_total: Vec<i32>,
    /// `[(b*H + h)]`.
    pub k_rows: Vec<u64>,
    pub v_rows: Vec<u64>,
    pub landmarks: Vec<u64>,
    /// `[(b*H + h)]`: the ParisKV index's ids, codes, weights and histograms (empty without
    /// an index).
    pub pk_ids: Vec<u64>,
    pub pk_codes: Vec<u64>,
    pub pk_weights: Vec<u64>,
    pub pk_hist: Vec<u64>,
    /// `[b]`: the token range the next index build covers.
    pub index_start: Vec<i32>,
    pub index_end: Vec<i32>,
}

/// The smallest range of indices outside of which `new` equals `old` (`old` may be shorter or
/// longer; only `new`'s indices count). `None` when nothing changed.
pub fn diff_span<T: PartialEq>(old: &[T], new: &[T]) -> Option<Range<usize>> {
    let differs = |i: usize| old.get(i) != Some(&new[i]);
    let first = (0..new.len()).find(|&i| differs(i))?;
    let last = (first..new.len())
        .rev()
        .find(|&i| differs(i))
        .expect("first differs");
    Some(first..last + 1)
}

/// Device tables with room for `max_batch` sequences of `heads` heads and `max_seg` segments
/// each; a batch uses a prefix of every table. Allocated once, so views can borrow them.
pub struct Tables {
    pub seg_words: DeviceBuffer<u64>,
    pub seg_scales: DeviceBuffer<u64>,
    pub n_stored: DeviceBuffer<i32>,
    pub n_total: DeviceBuffer<i32>,
    pub k_rows: DeviceBuffer<u64>,
    pub v_rows: DeviceBuffer<u64>,
    pub landmarks: DeviceBuffer<u64>,
    pub pk_ids: DeviceBuffer<u64>,
    pub pk_codes: DeviceBuffer<u64>,
    pub pk_weights: DeviceBuffer<u64>,
    pub pk_hist: DeviceBuffer<u64>,
    pub index_start: DeviceBuffer<i32>,
    pub index_end: DeviceBuffer<i32>,
}

impl Tables {
    /// Zeroed tables; the ParisKV tables hold one entry unless `index` (a store that keeps
    /// the index).
    pub fn new(
        gpu: &Gpu,
        max_batch: usize,
        heads: usize,
        max_seg: usize,
        index: bool,
    ) -> Result<Tables, GpuError> {
        let heads_total = max_batch * heads;
        let (index_heads, index_batch) = if index {
            (heads_total, max_batch)
        } else {
            (1, 1)
        };
        Ok(Tables {
            seg_words: gpu.filled(heads_total * max_seg, 0)?,
            seg_scales: gpu.filled(heads_total * max_seg, 0)?,
            n_stored: gpu.filled(max_batch, 0)?,
            n_total: gpu.filled(max_batch, 0)?,
            k_rows: gpu.filled(heads_total, 0)?,
            v_rows: gpu.filled(heads_total, 0)?,
            landmarks: gpu.filled(heads_total, 0)?,
            pk_ids: gpu.filled(index_heads, 0)?,
            pk_codes: gpu.filled(index_heads, 0)?,
            pk_weights: gpu.filled(index_heads, 0)?,
            pk_hist: gpu.filled(index_heads, 0)?,
            index_start: gpu.filled(index_batch, 0)?,
            index_end: gpu.filled(index_batch, 0)?,
        })
    }

    /// Device bytes of the tables.
    pub fn bytes(&self) -> usize {
        self.seg_words.bytes()
            + self.seg_scales.bytes()
            + self.n_stored.bytes()
            + self.n_total.bytes()
            + self.k_rows.bytes()
            + self.v_rows.bytes()
            + self.landmarks.bytes()
            + self.pk_ids.bytes()
            + self.pk_codes.bytes()
            + self.pk_weights.bytes()
            + self.pk_hist.bytes()
            + self.index_start.bytes()
            + self.index_end.bytes()
    }

    /// Makes the device hold `wanted`, given that it holds `mirror`; queues the changed spans
    /// and updates the mirror.
    pub fn refresh(
        &self,
        gpu: &Gpu,
        uploader: &mut Uploader,
        mirror: &mut HostTables,
        wanted: HostTables,
    ) -> Result<(), GpuError> {
        fn sync<T: Copy + PartialEq>(
            gpu: &Gpu,
            uploader: &mut Uploader,
            buffer: &DeviceBuffer<T>,
            old: &[T],
            new: &[T],
        ) -> Result<(), GpuError> {
            assert!(new.len() <= buffer.len(), "a table larger than its buffer");
            match diff_span(old, new) {
                Some(span) => {
                    let at = buffer.addr() + (span.start * std::mem::size_of::<T>()) as u64;
                    uploader.upload(gpu, at, &new[span])
                }
                None => Ok(()),
            }
        }
        sync(
            gpu,
            uploader,
            &self.seg_words,
            &mirror.seg_words,
            &wanted.seg_words,
        )?;
        sync(
            gpu,
            uploader,
            &self.seg_scales,
            &mirror.seg_scales,
            &wanted.seg_scales,
        )?;
        sync(
            gpu,
            uploader,
            &self.n_stored,
            &mirror.n_stored,
            &wanted.n_stored,
        )?;
        sync(
            gpu,
            uploader,
            &self.n_total,
            &mirror.n_total,
            &wanted.n_total,
        )?;
        sync(gpu, uploader, &self.k_rows, &mirror.k_rows, &wanted.k_rows)?;
        sync(gpu, uploader, &self.v_rows, &mirror.v_rows, &wanted.v_rows)?;
        sync(
            gpu,
            uploader,
            &self.landmarks,
            &mirror.landmarks,
            &wanted.landmarks,
        )?;
        sync(gpu, uploader, &self.pk_ids, &mirror.pk_ids, &wanted.pk_ids)?;
        sync(
            gpu,
            uploader,
            &self.pk_codes,
            &mirror.pk_codes,
            &wanted.pk_codes,
        )?;
        sync(
            gpu,
            uploader,
            &self.pk_weights,
            &mirror.pk_weights,
            &wanted.pk_weights,
        )?;
        sync(
            gpu,
            uploader,
            &self.pk_hist,
            &mirror.pk_hist,
            &wanted.pk_hist,
        )?;
        sync(
            gpu,
            uploader,
            &self.index_start,
            &mirror.index_start,
            &wanted.index_start,
        )?;
        sync(
            gpu,
            uploader,
            &self.index_end,
            &mirror.index_end,
            &wanted.index_end,
        )?;
        // Entries past a shorter batch keep their old device values; the mirror says so.
        merge(&mut mirror.seg_words, wanted.seg_words);
        merge(&mut mirror.seg_scales, wanted.seg_scales);
        merge(&mut mirror.n_stored, wanted.n_stored);
        merge(&mut mirror.n_total, wanted.n_total);
        merge(&mut mirror.k_rows, wanted.k_rows);
        merge(&mut mirror.v_rows, wanted.v_rows);
        merge(&mut mirror.landmarks, wanted.landmarks);
        merge(&mut mirror.pk_ids, wanted.pk_ids);
        merge(&mut mirror.pk_codes, wanted.pk_codes);
        merge(&mut mirror.pk_weights, wanted.pk_weights);
        merge(&mut mirror.pk_hist, wanted.pk_hist);
        merge(&mut mirror.index_start, wanted.index_start);
        merge(&mut mirror.index_end, wanted.index_end);
        Ok(())
    }
}

/// `mirror` after `new` was written over its prefix.
fn merge<T>(mirror: &mut Vec<T>, new: Vec<T>) {
    if new.len() >= mirror.len() {
        *mirror = new;
    } else {
        mirror.splice(..new.len(), new);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_span_covers_exactly_the_changes() {
        assert_eq!(diff_span(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(diff_span(&[1, 2, 3, 4], &[1, 9, 3, 8]), Some(1..4));
        assert_eq!(diff_span(&[1, 2, 3], &[1, 2, 4]), Some(2..3));
        // A longer table: the new entries differ from nothing.
        assert_eq!(diff_span(&[1, 2], &[1, 2, 3]), Some(2..3));
        // A shorter one: only its own entries count.
        assert_eq!(diff_span(&[1, 2, 3], &[1, 2]), None);
        assert_eq!(diff_span::<u8>(&[], &[]), None);
    }

    #[test]
    fn merge_keeps_the_device_tail() {
        let mut m = vec![1, 2, 3, 4];
        merge(&mut m, vec![7, 8]);
        assert_eq!(m, [7, 8, 3, 4]);
        merge(&mut m, vec![0; 5]);
        assert_eq!(m, [0; 5]);
    }

    /// Applying the spans that [`diff_span`] reports to the old table gives the new one.
    #[test]
    fn diff_span_updates_reproduce_the_table() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for _ in 0..200 {
            let old: Vec<u8> = (0..rng.gen_range(0..20))
                .map(|_| rng.gen_range(0..3))
                .collect();
            let new: Vec<u8> = (0..rng.gen_range(0..20))
                .map(|_| rng.gen_range(0..3))
                .collect();
            let mut device = old.clone();
            device.resize(device.len().max(new.len()), 99);
            if let Some(span) = diff_span(&old, &new) {
                device[span.clone()].copy_from_slice(&new[span]);
            }
            assert_eq!(&device[..new.len()], &new[..], "{old:?} -> {new:?}");
        }
    }
}
