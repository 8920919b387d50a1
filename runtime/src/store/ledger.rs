//! The host's ledger of the store: which sequences exist, their lengths per layer, the capacity
//! they use, and the arithmetic of blocks, segments and row regions. All of it is plain data, so
//! the store decides every allocation and every launch without reading the device back.

use std::fmt;

use super::error::StoreError;

/// A sequence of the store. Ids are not reused: a freed sequence's id stays invalid even after
/// its slot serves a new sequence.
///
/// ```no_run
/// use runtime::store::{KeyStore, StoreError};
/// fn demo(store: &mut KeyStore) -> Result<(), StoreError> {
///     let (a, b) = (store.create_sequence(), store.create_sequence());
///     let _batch = store.layer_view(&[a, b], 0)?; // b is sequence 1 of this batch
///     store.free_sequence(a)?;
///     assert!(matches!(store.lengths(a, 0), Err(StoreError::FreedSequence { .. })));
///     Ok(())
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SequenceId {
    index: u32,
    generation: u32,
}

impl SequenceId {
    /// The id as one integer (index in the low 32 bits, generation in the high), for callers
    /// that hold ids as numbers (the Python package).
    pub fn to_bits(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    /// The id [`SequenceId::to_bits`] gave; any other number is an id no store knows.
    pub fn from_bits(bits: u64) -> SequenceId {
        SequenceId {
            index: bits as u32,
            generation: (bits >> 32) as u32,
        }
    }
}

impl fmt::Display for SequenceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sequence {}.{}", self.index, self.generation)
    }
}

struct Entry<T> {
    generation: u32,
    value: Option<T>,
}

/// Sequences by id, with their slots recycled under a new generation.
pub struct Registry<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Registry {
            entries: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Registry<T> {
    /// Adds a sequence and returns its new id.
    pub fn insert(&mut self, value: T) -> SequenceId {
        match self.free.pop() {
            Some(index) => {
                let entry = &mut self.entries[index as usize];
                entry.value = Some(value);
                SequenceId {
                    index,
                    generation: entry.generation,
                }
            }
            None => {
                self.entries.push(Entry {
                    generation: 0,
                    value: Some(value),
                });
                SequenceId {
                    index: (self.entries.len() - 1) as u32,
                    generation: 0,
                }
            }
        }
    }

    fn invalid(&self, id: SequenceId) -> StoreError {
        match self.entries.get(id.index as usize) {
            Some(e) if e.generation > id.generation => StoreError::FreedSequence { id },
            _ => StoreError::UnknownSequence { id },
        }
    }

    /// The sequence `id`, or why there is none.
    pub fn get(&self, id: SequenceId) -> Result<&T, StoreError> {
        match self.entries.get(id.index as usize) {
            Some(e) if e.generation == id.generation => {
                e.value.as_ref().ok_or_else(|| self.invalid(id))
            }
            _ => Err(self.invalid(id)),
        }
    }

    /// The sequence `id`, mutably.
    pub fn get_mut(&mut self, id: SequenceId) -> Result<&mut T, StoreError> {
        self.get(id)?;
        Ok(self.entries[id.index as usize]
            .value
            .as_mut()
            .expect("checked above"))
    }

    /// Removes the sequence; its id is invalid from now on.
    pub fn remove(&mut self, id: SequenceId) -> Result<T, StoreError> {
        self.get(id)?;
        let entry = &mut self.entries[id.index as usize];
        entry.generation += 1;
        self.free.push(id.index);
        Ok(entry.value.take().expect("checked above"))
    }

    /// Checks a batch: every id valid, none twice.
    pub fn check_batch(&self, ids: &[SequenceId]) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Err(StoreError::EmptyBatch);
        }
        for (i, &id) in ids.iter().enumerate() {
            self.get(id)?;
            if ids[..i].contains(&id) {
                return Err(StoreError::DuplicateSequence { id });
            }
        }
        Ok(())
    }

    /// Every resident sequence.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().filter_map(|e| e.value.as_ref())
    }
}

/// The token budget over all resident sequences. A sequence counts with its longest layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    limit: usize,
    used: usize,
}

impl Capacity {
    /// A budget of `limit` tokens, none used.
    pub fn new(limit: usize) -> Self {
        Capacity { limit, used: 0 }
    }

    /// Tokens in use.
    pub fn used(&self) -> usize {
        self.used
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Checks that sequences growing from `before` to `after` tokens (summed over the sequences
    /// of one call) stay within the limit, changing nothing.
    pub fn check(&self, before: usize, after: usize) -> Result<(), StoreError> {
        let used = self.used - before;
        if used + after > self.limit {
            return Err(StoreError::CapacityExceeded {
                requested: after - before.min(after),
                used: self.used,
                capacity: self.limit,
            });
        }
        Ok(())
    }

    /// Records sequences changing from `before` to `after` tokens; [`Capacity::check`] first.
    pub fn commit(&mut self, before: usize, after: usize) {
        self.used = self.used - before + after;
        debug_assert!(self.used <= self.limit);
    }
}

/// Block, segment and row-region arithmetic of one store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// `BLK`.
    pub block: usize,
    /// Tokens of one segment, `64 * S`.
    pub segment_tokens: usize,
    /// Tokens of the smallest row region (size class 0); class `k` holds `row_chunk << k`.
    pub row_chunk: usize,
}

impl Geometry {
    /// Segments a head holds for `n_total` tokens. Segments are allocated as soon as the tail
    /// reaches into them, ahead of the block that will fill them, so that an append never has
    /// to allocate between the moment a block fills and its encode.
    pub fn segments_for(&self, n_total: usize) -> usize {
        n_total.div_ceil(self.segment_tokens)
    }

    /// Tokens that go from the tail into the store once a layer holds `n_total` tokens of which
    /// `n_stored` are stored: every full block.
    pub fn newly_stored(&self, n_stored: usize, n_total: usize) -> usize {
        (n_total - n_stored) / self.block * self.block
    }

    /// The smallest row-region size class that holds `tokens` tokens.
    pub fn row_class(&self, tokens: usize) -> u32 {
        let chunks = tokens.div_ceil(self.row_chunk).max(1);
        chunks.next_power_of_two().trailing_zeros()
    }

    /// Tokens a row region of class `class` holds.
    pub fn class_tokens(&self, class: u32) -> usize {
        self.row_chunk << class
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_freed_sequences_stay_invalid() {
        let mut reg = Registry::default();
        let a = reg.insert("a");
        let b = reg.insert("b");
        assert_eq!(*reg.get(a).unwrap(), "a");
        assert_eq!(reg.remove(a).unwrap(), "a");
        assert!(matches!(reg.get(a), Err(StoreError::FreedSequence { id }) if id == a));
        assert!(matches!(
            reg.remove(a),
            Err(StoreError::FreedSequence { .. })
        ));
        // The slot is recycled under a new id; the old id still does not reach it.
        let c = reg.insert("c");
        assert_ne!(c, a);
        assert!(reg.get(a).is_err());
        assert_eq!(*reg.get(c).unwrap(), "c");
        assert_eq!(*reg.get(b).unwrap(), "b");
        assert_eq!(reg.values().count(), 2);
        // An id from another registry's future is unknown, not freed.
        let mut other = Registry::default();
        for _ in 0..5 {
            other.insert(());
        }
        let far = other.insert(());
        assert!(matches!(
            reg.get(far),
            Err(StoreError::UnknownSequence { .. })
        ));
    }

    #[test]
    fn batches_must_be_valid_distinct_and_non_empty() {
        let mut reg = Registry::default();
        let a = reg.insert(1);
        let b = reg.insert(2);
        assert!(reg.check_batch(&[a, b]).is_ok());
        assert!(matches!(
            reg.check_batch(&[a, b, a]),
            Err(StoreError::DuplicateSequence { id }) if id == a
        ));
        assert!(matches!(reg.check_batch(&[]), Err(StoreError::EmptyBatch)));
        reg.remove(b).unwrap();
        assert!(matches!(
            reg.check_batch(&[a, b]),
            Err(StoreError::FreedSequence { id }) if id == b
        ));
    }

    #[test]
    fn capacity_counts_growth_and_refuses_past_the_limit() {
        let mut cap = Capacity::new(100);
        cap.check(0, 60).unwrap();
        cap.commit(0, 60);
        assert!(matches!(
            cap.check(10, 51),
            Err(StoreError::CapacityExceeded {
                requested: 41,
                used: 60,
                capacity: 100
            })
        ));
        assert_eq!(cap.used(), 60, "a refused check changes nothing");
        cap.check(10, 50).unwrap();
        cap.commit(10, 50);
        assert_eq!(cap.used(), 100);
        // Freeing returns the tokens.
        cap.commit(100, 0);
        assert_eq!(cap.used(), 0);
    }

    #[test]
    fn segments_rows_and_blocks() {
        let g = Geometry {
            block: 64,
            segment_tokens: 512 * 64,
            row_chunk: 256,
        };
        assert_eq!(g.segments_for(0), 0);
        assert_eq!(g.segments_for(1), 1);
        assert_eq!(g.segments_for(32768), 1);
        assert_eq!(g.segments_for(32769), 2);
        assert_eq!(g.newly_stored(0, 63), 0);
        assert_eq!(g.newly_stored(0, 200), 192);
        assert_eq!(g.newly_stored(192, 256), 64);
        assert_eq!(g.row_class(0), 0);
        assert_eq!(g.row_class(256), 0);
        assert_eq!(g.row_class(257), 1);
        assert_eq!(g.row_class(1000), 2);
        assert_eq!(g.row_class(1025), 3);
        for n in [1, 255, 256, 257, 5000, 1 << 20] {
            let class = g.row_class(n);
            assert!(g.class_tokens(class) >= n);
            assert!(class == 0 || g.class_tokens(class - 1) < n, "{n}");
        }
    }
}
