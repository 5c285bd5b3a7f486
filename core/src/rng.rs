//! A deterministic generator (xorshift64*), so the core's order tests, the simulator's chaos run
//! and anything else that draws "random" orders replays the same choices from the same seed.
//!
//! Never for secrets or ids: those come from the platform's randomness (`getrandom`).

/// xorshift64*: a 64-bit state, advanced on every draw. A zero state stays zero, so seeds are
/// made odd.
#[derive(Clone, Debug)]
pub struct Deterministic(u64);

impl Deterministic {
    /// A generator that starts from `seed` (made odd).
    pub fn new(seed: u64) -> Self {
        Deterministic(seed | 1)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// True with probability `p` (to a millionth).
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() % 1_000_000) as f64 / 1_000_000.0 < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_and_a_zero_seed_still_moves() {
        let (mut a, mut b) = (Deterministic::new(42), Deterministic::new(42));
        let draws: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
        assert_eq!(draws, (0..5).map(|_| b.next_u64()).collect::<Vec<_>>());
        let mut zero = Deterministic::new(0);
        assert_ne!(zero.next_u64(), 0);
        assert_eq!(Deterministic::new(7).below(0), 0);
        assert!((0..1000).all(|_| a.below(3) < 3));
    }
}
