//! A fast, non-cryptographic hasher for the tracer's tables: the keys are
//! pointers and return addresses chosen by the program, not by an adversary,
//! and the hot path cannot afford SipHash.

use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default, Clone, Copy)]
pub struct WordHasher(u64);

const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

impl WordHasher {
    #[inline]
    fn mix_in(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(23) ^ word).wrapping_mul(MULTIPLIER);
    }
}

impl Hasher for WordHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.mix_in(u64::from_le_bytes(chunk.try_into().unwrap_or_default()));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.mix_in(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u64(&mut self, word: u64) {
        self.mix_in(word)
    }

    #[inline]
    fn write_usize(&mut self, word: usize) {
        self.mix_in(word as u64)
    }

    /// Pointers are aligned, so the low bits of the product carry little
    /// entropy; a final avalanche (MurmurHash3's fmix64) spreads every input
    /// bit over the bucket bits and the shard bits alike.
    #[inline]
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

pub type BuildWordHasher = BuildHasherDefault<WordHasher>;

/// Hashes a heap address so that the blocks of one 64 MiB region (a glibc
/// arena's heap: each thread mostly allocates from an arena of its own)
/// fall in one shard of a DashMap, whose shard is picked by the eight bits
/// below the top seven: two threads then seldom write the same shard's
/// lock, whose cache line would otherwise move between their cores at every
/// allocation and free. The other bits are the word hash's.
#[derive(Default, Clone, Copy)]
pub struct AddressHasher(u64);

const REGION_SHIFT: u32 = 26;
const SHARD_BITS: u64 = 0xff << 49;

impl Hasher for AddressHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = WordHasher(self.0);
        words.write(bytes);
        self.0 = words.finish();
    }

    #[inline]
    fn write_usize(&mut self, address: usize) {
        self.0 = address as u64;
    }

    #[inline]
    fn finish(&self) -> u64 {
        let mut spread = WordHasher::default();
        spread.write_u64(self.0);
        // A Fibonacci hash's high bits differ for neighbouring regions.
        let region = (self.0 >> REGION_SHIFT).wrapping_mul(MULTIPLIER);
        (spread.finish() & !SHARD_BITS) | (region & SHARD_BITS)
    }
}

pub type BuildAddressHasher = BuildHasherDefault<AddressHasher>;

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    fn shard_bits(address: u64) -> u64 {
        BuildAddressHasher::default().hash_one(address as usize) & SHARD_BITS
    }

    #[test]
    fn one_regions_blocks_share_shard_bits_and_neighbouring_regions_do_not() {
        // Thread heaps as glibc places them: 64 MiB regions, two apart.
        let region = 0x7f4d_3800_0000u64;
        assert_eq!(shard_bits(region + 0xb70), shard_bits(region + 0x3ff_fff0));
        for k in 1..8 {
            assert_ne!(shard_bits(region), shard_bits(region + ((2 * k) << REGION_SHIFT)), "{k} regions on");
        }
        // The rest of the hash still tells the blocks of a region apart.
        let hash = |address: u64| BuildAddressHasher::default().hash_one(address as usize);
        assert_ne!(hash(region + 0x10) & !SHARD_BITS, hash(region + 0x20) & !SHARD_BITS);
    }
}
