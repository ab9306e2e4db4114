//! Which addresses may hold a recorded block, answered without a lock.
//!
//! When sampling, most freed blocks were never recorded, and looking each up
//! in the live table (a shard lock and a hash probe, behind the fork gate)
//! was most of what sampling still cost. This counting filter holds, per
//! bucket of addresses, how many recorded blocks are live in it: a free
//! whose bucket is empty cannot be of a recorded block and skips the
//! tracer. The counts change only as recorded blocks are born and freed
//! (rare when sampling); a count that reaches its maximum stays there, so
//! that it can never undercount (its bucket is then always looked up).
//!
//! A block's count is raised before `malloc` returns it and lowered before
//! `free` hands it back to glibc, so a free of it, however the program
//! passed the pointer between threads, sees the count that its allocation
//! raised: the program's own synchronization orders the two.

use std::sync::atomic::{AtomicU8, Ordering};

/// Two tables of one-byte buckets. Every free reads one bucket of the
/// first, 2^16 of them, so that table must be small enough to stay mostly
/// in cache: with 1 MiB (2^20 buckets) each read missed and the filter cost
/// more than the live-table looks it saved. Its counts are four bits, two to
/// a byte (32 KiB): with a byte each, the read of the first bucket still
/// took three quarters of `free`'s samples, and `free` 0.41-0.48% of the
/// PyTorch loop's at 512 KiB sampling, against 0.33-0.38% with half the
/// bytes (a count saturates at 15, which N/65536 live blocks a bucket
/// on average almost never reach). With N recorded blocks live and
/// scattered over the heap, a free of an unrecorded block passes the first
/// with probability about 1 - exp(-N / 65536): 7% during a sampled `import
/// torch` (about 5K), 41% at 34K (Python's objects traced in a job holding
/// 2 GB of them), 62% at 64K. Only those read the second table, 2^18
/// buckets spread by another hash: both pass about 0.1%, 5% and 14% of the
/// time. With the first table alone, that job's loop of short-lived
/// objects took 1.04 to 1.13 s against 0.88 to 0.93 s untraced; with both,
/// 1.03 to 1.05 s (0.9 s untraced).
const BUCKET_BITS: u32 = 16;
const BUCKETS: usize = 1 << BUCKET_BITS;
const SECOND_BUCKET_BITS: u32 = 18;

pub struct BlockFilter {
    /// The first table's counts, two to a byte, then the second's, one to
    /// a byte.
    counts: Box<[AtomicU8]>,
}

/// One bucket's count: the bits of `cell` under `mask << shift`.
struct Bucket<'a> {
    cell: &'a AtomicU8,
    shift: u32,
    mask: u8,
}

impl Bucket<'_> {
    fn count_in(&self, cell: u8) -> u8 {
        (cell >> self.shift) & self.mask
    }

    fn is_empty(&self) -> bool {
        self.count_in(self.cell.load(Ordering::Relaxed)) == 0
    }

    /// Changes the count by one, unless `allowed` refuses its current value;
    /// the whole cell is swapped at once, so the bucket sharing it loses
    /// nothing.
    fn step(&self, up: bool, allowed: impl Fn(u8) -> bool) {
        let unit = 1u8 << self.shift;
        let _ = self.cell.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |cell| {
            allowed(self.count_in(cell)).then(|| if up { cell + unit } else { cell - unit })
        });
    }

    fn add(&self) {
        self.step(true, |n| n < self.mask);
    }

    fn remove(&self) {
        self.step(false, |n| n != 0 && n != self.mask);
    }
}

impl Default for BlockFilter {
    fn default() -> Self {
        let cells = BUCKETS / 2 + (1 << SECOND_BUCKET_BITS);
        BlockFilter { counts: (0..cells).map(|_| AtomicU8::new(0)).collect() }
    }
}

impl BlockFilter {
    fn first_bucket(&self, address: usize) -> Bucket<'_> {
        // malloc and pymalloc align to 16 bytes. Neighbouring blocks share
        // a cache line of buckets, which a free finds warm far more often
        // than a hashed one (a free is usually near recent allocations); the
        // higher bits folded in keep the blocks mmap puts at the start of
        // pages from all falling in the same few buckets.
        let block = address >> 4;
        let index = (block ^ (block >> BUCKET_BITS)) & (BUCKETS - 1);
        Bucket { cell: &self.counts[index / 2], shift: (index as u32 % 2) * 4, mask: 0xf }
    }

    fn second_bucket(&self, address: usize) -> Bucket<'_> {
        // A multiplicative hash: blocks that share a first bucket (the same
        // low bits) land in unrelated second ones.
        let block = (address >> 4) as u64;
        let hash = (block.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SECOND_BUCKET_BITS)) as usize;
        Bucket { cell: &self.counts[BUCKETS / 2 + hash], shift: 0, mask: u8::MAX }
    }

    /// Whether a recorded block may live at `address`; false means surely not.
    #[inline]
    pub fn may_hold(&self, address: usize) -> bool {
        !self.first_bucket(address).is_empty() && !self.second_bucket(address).is_empty()
    }

    pub fn add(&self, address: usize) {
        self.first_bucket(address).add();
        self.second_bucket(address).add();
    }

    pub fn remove(&self, address: usize) {
        self.first_bucket(address).remove();
        self.second_bucket(address).remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_exactly_what_was_added_and_not_removed() {
        let filter = BlockFilter::default();
        let addresses: Vec<usize> = (0..1000).map(|i| 0x7f00_0000_0000 + i * 48).collect();
        addresses.iter().for_each(|&a| filter.add(a));
        assert!(addresses.iter().all(|&a| filter.may_hold(a)));
        addresses.iter().for_each(|&a| filter.remove(a));
        assert!(addresses.iter().all(|&a| !filter.may_hold(a)));
    }

    #[test]
    fn a_bucket_shared_by_two_blocks_stays_set_until_both_are_freed() {
        let filter = BlockFilter::default();
        filter.add(0x1000);
        filter.add(0x1000);
        filter.remove(0x1000);
        assert!(filter.may_hold(0x1000));
        filter.remove(0x1000);
        assert!(!filter.may_hold(0x1000));
    }

    #[test]
    fn neighbours_sharing_a_byte_keep_their_own_counts() {
        // Adjacent 16-byte blocks have adjacent first buckets, two to a byte.
        let filter = BlockFilter::default();
        (0..20).for_each(|_| filter.add(0x3000));
        filter.add(0x3010);
        assert!(filter.may_hold(0x3010));
        filter.remove(0x3010);
        assert!(filter.first_bucket(0x3010).is_empty(), "the full neighbour spilled into this bucket");
        assert!(filter.may_hold(0x3000));
    }

    #[test]
    fn a_full_bucket_never_undercounts() {
        let filter = BlockFilter::default();
        (0..300).for_each(|_| filter.add(0x2000));
        (0..300).for_each(|_| filter.remove(0x2000));
        assert!(filter.may_hold(0x2000));
    }

    /// How many of 100,000 unrecorded addresses pass with `blocks` recorded
    /// blocks scattered over `heap` bytes.
    fn passed_at_load(blocks: usize, heap: usize) -> usize {
        let filter = BlockFilter::default();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..blocks {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            filter.add(0x7f00_0000_0000 + (x as usize % heap) / 16 * 16);
        }
        (0..100_000).filter(|i| filter.may_hold(0x5555_0000_0000 + i * 48)).count()
    }

    #[test]
    fn few_unrecorded_addresses_pass_at_the_expected_load() {
        // 5000 recorded blocks over a 64 GiB heap: 7% of the first table's
        // buckets taken, about 0.1% of addresses passing both.
        let passed = passed_at_load(5000, 64 << 30);
        assert!(passed < 500, "{passed} of 100000 unrecorded addresses passed");
        // 34,000 small objects sampled in 2 GB: 41% of the first table's
        // buckets taken, 12% of the second's, 5% of addresses passing both.
        let passed = passed_at_load(34_000, 2 << 30);
        assert!(passed < 8_000, "{passed} of 100000 unrecorded addresses passed");
    }
}
