//! Poisson sampling by bytes (`TRACER_SAMPLE_BYTES=N`), as in tcmalloc and Go:
//! each byte allocated is sampled with probability 1/N, so an allocation of
//! `s` bytes is recorded with probability 1 - exp(-s/N) and then stands for
//! s / (1 - exp(-s/N)) bytes. The gaps between sampled bytes are drawn from
//! an exponential distribution per thread, which makes the decision one
//! subtraction for most allocations.

use crate::thread_state;

#[derive(Clone, Copy)]
pub struct Sampling {
    mean_bytes: f64,
}

impl Sampling {
    pub fn new(mean_bytes: u64) -> Sampling {
        Sampling { mean_bytes: mean_bytes.max(1) as f64 }
    }

    /// Bytes to the next sampled byte: exponential with the mean.
    pub fn next_gap(&self) -> u64 {
        let uniform = thread_state::next_random_unit();
        (-uniform.ln() * self.mean_bytes).min(u64::MAX as f64 / 2.0) as u64 + 1
    }

    /// How many of its kind a sampled allocation of `size` bytes stands for:
    /// one over the probability, 1 - exp(-size/mean), that it was recorded.
    pub fn scale(&self, size: u64) -> f64 {
        let s = size.max(1) as f64;
        -1.0 / (-s / self.mean_bytes).exp_m1()
    }

    /// The (allocations, bytes) a sampled allocation of `size` bytes stands
    /// for: unbiased, since it stands for [`Sampling::scale`] of its kind.
    pub fn weight(&self, size: u64) -> (u64, u64) {
        scaled(size, self.scale(size))
    }
}

/// The (allocations, bytes) one allocation of `size` bytes standing for
/// `scale` of its kind counts for: at least one allocation.
pub fn scaled(size: u64, scale: f64) -> (u64, u64) {
    (scale.round().max(1.0) as u64, (size.max(1) as f64 * scale).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_allocations_stand_for_themselves_small_ones_for_many() {
        let sampling = Sampling::new(512 * 1024);
        assert_eq!(sampling.weight(64 << 20), (1, 64 << 20));
        let (count, bytes) = sampling.weight(64);
        assert!((8000..8300).contains(&count), "{count}");
        assert!((512 * 1024..512 * 1024 + 100).contains(&bytes), "{bytes}");
    }

    #[test]
    fn estimates_are_unbiased() {
        let sampling = Sampling::new(4096);
        // About 24,000 samples: the estimate's standard error is 0.6%.
        let (size, n) = (100u64, 1_000_000u64);
        let estimated: u64 = (0..n)
            .filter(|_| thread_state::count_allocation(size, true).1.recorded(size, || sampling.next_gap()))
            .map(|_| sampling.weight(size).1)
            .sum();
        let truth = (size * n) as f64;
        assert!((estimated as f64 - truth).abs() / truth < 0.05, "estimated {estimated} for {truth}");
    }
}
