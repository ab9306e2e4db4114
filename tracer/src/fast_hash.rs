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
