//! A small deterministic generator for jitter, so a machine's run can be replayed.

use std::time::Duration;

/// xorshift64, seeded through splitmix64 so that close seeds give unrelated sequences.
#[derive(Debug, Clone)]
pub(super) struct XorShift(u64);

impl XorShift {
    pub(super) fn new(seed: u64) -> Self {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Self(if z == 0 { 0x9E37_79B9_7F4A_7C15 } else { z })
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A duration drawn uniformly from `[d / 2, d]`.
    pub(super) fn jitter(&mut self, d: Duration) -> Duration {
        let half = d / 2;
        let span = u64::try_from((d - half).as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(self.next_u64() % span.saturating_add(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_half_and_whole() {
        let mut rng = XorShift::new(0);
        let d = Duration::from_millis(1000);
        for _ in 0..10_000 {
            let j = rng.jitter(d);
            assert!(j >= d / 2 && j <= d, "{j:?}");
        }
        assert_eq!(rng.jitter(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn same_seed_same_sequence() {
        let (mut a, mut b, mut c) = (XorShift::new(5), XorShift::new(5), XorShift::new(6));
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        let zs: Vec<u64> = (0..8).map(|_| c.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
    }
}
