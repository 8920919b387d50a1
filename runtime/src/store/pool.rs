//! The store's memory pools, as pure bookkeeping over a backing memory type `M` (device or mapped
//! host memory in the store, a fake in the tests), so that allocation, reuse and release are
//! testable without a GPU.
//!
//! - [`SlotPool`]: fixed-size slots (segments) carved out of large slabs, so that a segment costs
//!   no driver call once its slab exists.
//! - [`RegionPool`]: whole allocations of a few size classes (the K/V row regions, which must be
//!   contiguous per head, see `templates/ABI.md`), kept for reuse when their owner is freed.
//!
//! Both grow through a caller-supplied closure, so an out-of-memory failure leaves the pool as it
//! was and usable.

use crate::gpu::GpuError;

/// Memory a pool hands out pieces of.
pub trait Backing {
    /// The (device or unified) address of the first byte.
    fn addr(&self) -> u64;
    /// Its size in bytes.
    fn bytes(&self) -> usize;
}

/// One slot of a [`SlotPool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slot {
    slab: u32,
    index: u32,
}

struct Slab<M> {
    memory: M,
    used: usize,
}

/// Fixed-size slots, `slots_per_slab` to a slab.
pub struct SlotPool<M> {
    slot_bytes: usize,
    slots_per_slab: usize,
    slabs: Vec<Option<Slab<M>>>,
    /// Free slots, and whether each was used before (its bytes are stale); popped from the end,
    /// so the slot freed last is reused first.
    free: Vec<(Slot, bool)>,
}

impl<M: Backing> SlotPool<M> {
    /// A pool of `slot_bytes`-byte slots, grown `slots_per_slab` at a time.
    pub fn new(slot_bytes: usize, slots_per_slab: usize) -> Self {
        assert!(slot_bytes > 0 && slots_per_slab > 0, "empty slots or slabs");
        SlotPool {
            slot_bytes,
            slots_per_slab,
            slabs: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Bytes of one slot.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// Bytes of one slab, what one call of `grow` must provide.
    pub fn slab_bytes(&self) -> usize {
        self.slot_bytes * self.slots_per_slab
    }

    /// A free slot, growing the pool by one slab (`grow(slab_bytes)`) when none is free. The
    /// second value says whether the slot was used before (its bytes are stale) or is fresh from
    /// `grow`.
    pub fn alloc(
        &mut self,
        grow: impl FnOnce(usize) -> Result<M, GpuError>,
    ) -> Result<(Slot, bool), GpuError> {
        if let Some((slot, stale)) = self.free.pop() {
            self.slab_mut(slot).used += 1;
            return Ok((slot, stale));
        }
        let memory = grow(self.slab_bytes())?;
        assert!(
            memory.bytes() >= self.slab_bytes(),
            "a slab of {} bytes for {} requested",
            memory.bytes(),
            self.slab_bytes()
        );
        let slab = match self.slabs.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.slabs.push(None);
                self.slabs.len() - 1
            }
        };
        self.slabs[slab] = Some(Slab { memory, used: 1 });
        // Slot 0 is handed out; the rest are free, lowest index on top.
        self.free
            .extend((1..self.slots_per_slab).rev().map(|index| {
                let slot = Slot {
                    slab: slab as u32,
                    index: index as u32,
                };
                (slot, false)
            }));
        Ok((
            Slot {
                slab: slab as u32,
                index: 0,
            },
            false,
        ))
    }

    fn slab_mut(&mut self, slot: Slot) -> &mut Slab<M> {
        self.slabs[slot.slab as usize]
            .as_mut()
            .expect("a slot of a released slab")
    }

    /// Returns a slot to the pool.
    pub fn free(&mut self, slot: Slot) {
        debug_assert!(
            !self.free.iter().any(|&(s, _)| s == slot),
            "slot {slot:?} freed twice"
        );
        let slab = self.slab_mut(slot);
        assert!(slab.used > 0, "slot {slot:?} freed twice");
        slab.used -= 1;
        self.free.push((slot, true));
    }

    /// The address of a slot.
    pub fn addr(&self, slot: Slot) -> u64 {
        let slab = self.slabs[slot.slab as usize]
            .as_ref()
            .expect("a slot of a released slab");
        slab.memory.addr() + (slot.index as usize * self.slot_bytes) as u64
    }

    /// Releases every slab none of whose slots is in use; returns the bytes released.
    pub fn trim(&mut self) -> usize {
        let mut released = 0;
        for (i, entry) in self.slabs.iter_mut().enumerate() {
            if entry.as_ref().is_some_and(|s| s.used == 0) {
                released += entry.take().map_or(0, |s| s.memory.bytes());
                self.free.retain(|(slot, _)| slot.slab as usize != i);
            }
        }
        released
    }

    /// Bytes held from the backing allocator.
    pub fn held_bytes(&self) -> usize {
        self.slabs.iter().flatten().map(|s| s.memory.bytes()).sum()
    }

    /// Bytes of the slots in use.
    pub fn used_bytes(&self) -> usize {
        self.slabs.iter().flatten().map(|s| s.used).sum::<usize>() * self.slot_bytes
    }
}

/// One region of a [`RegionPool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Region {
    index: u32,
}

struct RegionEntry<M> {
    memory: M,
    class: u32,
    in_use: bool,
}

/// Allocations of size classes `class = 0, 1, 2, …`, class `k` being `bytes_of(k)` bytes;
/// a freed region waits in the pool for the next request of its class.
pub struct RegionPool<M> {
    entries: Vec<Option<RegionEntry<M>>>,
}

impl<M: Backing> Default for RegionPool<M> {
    fn default() -> Self {
        RegionPool {
            entries: Vec::new(),
        }
    }
}

impl<M: Backing> RegionPool<M> {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// A region of size class `class`: a free one of that class, else `grow()`'s new memory.
    pub fn alloc(
        &mut self,
        class: u32,
        grow: impl FnOnce() -> Result<M, GpuError>,
    ) -> Result<Region, GpuError> {
        let reusable = self
            .entries
            .iter()
            .position(|e| e.as_ref().is_some_and(|e| !e.in_use && e.class == class));
        if let Some(index) = reusable {
            self.entries[index].as_mut().expect("found above").in_use = true;
            return Ok(Region {
                index: index as u32,
            });
        }
        let memory = grow()?;
        let entry = Some(RegionEntry {
            memory,
            class,
            in_use: true,
        });
        let index = match self.entries.iter().position(Option::is_none) {
            Some(i) => {
                self.entries[i] = entry;
                i
            }
            None => {
                self.entries.push(entry);
                self.entries.len() - 1
            }
        };
        Ok(Region {
            index: index as u32,
        })
    }

    fn entry(&self, region: Region) -> &RegionEntry<M> {
        self.entries[region.index as usize]
            .as_ref()
            .expect("a released region")
    }

    /// Returns a region to the pool.
    pub fn free(&mut self, region: Region) {
        let entry = self.entries[region.index as usize]
            .as_mut()
            .expect("a released region");
        assert!(entry.in_use, "region {region:?} freed twice");
        entry.in_use = false;
    }

    /// The address of a region.
    pub fn addr(&self, region: Region) -> u64 {
        self.entry(region).memory.addr()
    }

    /// The size class of a region.
    pub fn class(&self, region: Region) -> u32 {
        self.entry(region).class
    }

    /// Releases every region not in use; returns the bytes released.
    pub fn trim(&mut self) -> usize {
        let mut released = 0;
        for entry in &mut self.entries {
            if entry.as_ref().is_some_and(|e| !e.in_use) {
                released += entry.take().map_or(0, |e| e.memory.bytes());
            }
        }
        released
    }

    /// Bytes held from the backing allocator.
    pub fn held_bytes(&self) -> usize {
        self.entries
            .iter()
            .flatten()
            .map(|e| e.memory.bytes())
            .sum()
    }

    /// Bytes of the regions in use.
    pub fn used_bytes(&self) -> usize {
        self.entries
            .iter()
            .flatten()
            .filter(|e| e.in_use)
            .map(|e| e.memory.bytes())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Fake memory: an address and a size.
    struct Fake {
        addr: u64,
        bytes: usize,
    }

    impl Backing for Fake {
        fn addr(&self) -> u64 {
            self.addr
        }
        fn bytes(&self) -> usize {
            self.bytes
        }
    }

    /// A grow closure factory handing out disjoint fake allocations and counting calls.
    struct Allocator {
        next: Cell<u64>,
        calls: Cell<usize>,
    }

    impl Allocator {
        fn new() -> Self {
            Allocator {
                next: Cell::new(1 << 20),
                calls: Cell::new(0),
            }
        }
        fn grow(&self, bytes: usize) -> Result<Fake, GpuError> {
            self.calls.set(self.calls.get() + 1);
            let addr = self.next.get();
            self.next.set(addr + bytes as u64 + 4096);
            Ok(Fake { addr, bytes })
        }
    }

    fn oom(bytes: usize) -> Result<Fake, GpuError> {
        Err(GpuError::OutOfMemory {
            memory: "device",
            what: "test".into(),
            bytes,
        })
    }

    #[test]
    fn slots_are_disjoint_and_slabs_grow_only_when_full() {
        let a = Allocator::new();
        let mut pool = SlotPool::new(100, 3);
        let slots: Vec<(Slot, bool)> = (0..7).map(|_| pool.alloc(|b| a.grow(b)).unwrap()).collect();
        assert_eq!(a.calls.get(), 3, "7 slots of 3 per slab need 3 slabs");
        assert!(slots.iter().all(|&(_, reused)| !reused));
        let mut addrs: Vec<u64> = slots.iter().map(|&(s, _)| pool.addr(s)).collect();
        addrs.sort();
        assert!(addrs.windows(2).all(|w| w[1] - w[0] >= 100), "{addrs:?}");
        assert_eq!(pool.held_bytes(), 900);
        assert_eq!(pool.used_bytes(), 700);
    }

    #[test]
    fn freed_slots_are_reused_before_growing() {
        let a = Allocator::new();
        let mut pool = SlotPool::new(64, 2);
        let (s0, _) = pool.alloc(|b| a.grow(b)).unwrap();
        let (s1, _) = pool.alloc(|b| a.grow(b)).unwrap();
        let addr1 = pool.addr(s1);
        pool.free(s1);
        let (again, reused) = pool.alloc(|b| a.grow(b)).unwrap();
        assert!(reused);
        assert_eq!(pool.addr(again), addr1);
        assert_eq!(a.calls.get(), 1);
        pool.free(s0);
        pool.free(again);
        assert_eq!(pool.used_bytes(), 0);
        assert_eq!(pool.held_bytes(), 128);
    }

    #[test]
    fn trim_releases_only_empty_slabs() {
        let a = Allocator::new();
        let mut pool = SlotPool::new(10, 2);
        let slots: Vec<Slot> = (0..4)
            .map(|_| pool.alloc(|b| a.grow(b)).unwrap().0)
            .collect();
        // Empty the first slab, keep one slot of the second.
        pool.free(slots[0]);
        pool.free(slots[1]);
        pool.free(slots[2]);
        assert_eq!(pool.trim(), 20);
        assert_eq!(pool.held_bytes(), 20);
        assert_eq!(pool.addr(slots[3]), pool.addr(slots[3]));
        // The freed slot of the kept slab is still reusable; then a new slab is grown.
        let (s, reused) = pool.alloc(|b| a.grow(b)).unwrap();
        assert!(reused && s == slots[2]);
        let (_, reused) = pool.alloc(|b| a.grow(b)).unwrap();
        assert!(!reused);
        assert_eq!(a.calls.get(), 3);
        pool.free(slots[3]);
    }

    #[test]
    fn a_failed_grow_leaves_the_pool_usable() {
        let a = Allocator::new();
        let mut pool = SlotPool::new(10, 1);
        let (s, _) = pool.alloc(|b| a.grow(b)).unwrap();
        assert!(matches!(
            pool.alloc(oom),
            Err(GpuError::OutOfMemory { bytes: 10, .. })
        ));
        assert_eq!(pool.held_bytes(), 10);
        pool.free(s);
        assert!(pool.alloc(oom).is_ok(), "a free slot needs no growth");
    }

    #[test]
    fn regions_are_reused_by_class() {
        let a = Allocator::new();
        let mut pool = RegionPool::new();
        let r0 = pool.alloc(0, || a.grow(100)).unwrap();
        let r1 = pool.alloc(1, || a.grow(200)).unwrap();
        let addr0 = pool.addr(r0);
        pool.free(r0);
        // A request of another class does not take the free class-0 region.
        let r2 = pool.alloc(1, || a.grow(200)).unwrap();
        assert_ne!(pool.addr(r2), addr0);
        assert_eq!(a.calls.get(), 3);
        let r3 = pool.alloc(0, || a.grow(100)).unwrap();
        assert_eq!(pool.addr(r3), addr0);
        assert_eq!(pool.class(r3), 0);
        assert_eq!(a.calls.get(), 3);
        assert_eq!(pool.used_bytes(), 500);
        for r in [r1, r2, r3] {
            pool.free(r);
        }
        assert_eq!(pool.trim(), 500);
        assert_eq!(pool.held_bytes(), 0);
        assert!(pool.alloc(2, || oom(400)).is_err());
        assert_eq!(pool.held_bytes(), 0);
    }
}
