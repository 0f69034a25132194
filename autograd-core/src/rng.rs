//! A small seeded generator so that `manual_seed` gives the same numbers on
//! every backend, platform and crate version.

mod jump;

/// What a random draw samples: the distributions behind `rand`, `randn`
/// and dropout, named so that a draw is data a recorder can replay
/// ([`crate::Backend::random`]).
///
/// ```
/// use autograd_core::rng::{Distribution, Generator};
/// let mut g = Generator::new(3);
/// assert!((0.0..1.0).contains(&Distribution::Uniform.sample(&mut g)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// Uniform in `[0, 1)` ([`Generator::uniform`]).
    Uniform,
    /// Standard normal ([`Generator::normal`]).
    Normal,
}

impl Distribution {
    /// One sample from `g`.
    pub fn sample(self, g: &mut Generator) -> f64 {
        match self {
            Distribution::Uniform => g.uniform(),
            Distribution::Normal => g.normal(),
        }
    }
}

/// xoshiro256++ seeded through splitmix64.
///
/// ```
/// use autograd_core::rng::Generator;
/// let mut a = Generator::new(42);
/// let mut b = Generator::new(42);
/// assert_eq!(a.next_u64(), b.next_u64());
/// let u = a.uniform();
/// assert!((0.0..1.0).contains(&u));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generator {
    s: [u64; 4],
}

impl Generator {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^ (x >> 31)
        };
        Generator { s: [next(), next(), next(), next()] }
    }
    /// The generator's whole state, to save a run (see [`Generator::from_state`]).
    ///
    /// ```
    /// use autograd_core::rng::Generator;
    /// let mut g = Generator::new(7);
    /// let mut h = Generator::from_state(g.state());
    /// assert_eq!(g.next_u64(), h.next_u64());
    /// ```
    pub fn state(&self) -> [u64; 4] {
        self.s
    }
    /// A generator continuing from a saved [`Generator::state`].
    pub fn from_state(s: [u64; 4]) -> Self {
        Generator { s }
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = (s[0].wrapping_add(s[3])).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }
    /// Moves the generator `draws` draws ahead, where `draws` calls of
    /// [`Generator::next_u64`] would leave it, in at most 64
    /// matrix-vector products over GF(2) (a draw moves xoshiro's state
    /// linearly; the jump matrices are made once and cached): where a
    /// device starts each of its threads so that together they draw this
    /// generator's sequence.
    ///
    /// ```
    /// use autograd_core::rng::Generator;
    /// let (mut walked, mut jumped) = (Generator::new(5), Generator::new(5));
    /// for _ in 0..1000 {
    ///     walked.next_u64();
    /// }
    /// jumped.advance(1000);
    /// assert_eq!(walked, jumped);
    /// ```
    pub fn advance(&mut self, draws: u64) {
        self.s = jump::jump(self.s, draws);
    }
    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Standard normal (Box-Muller; one draw per call keeps the stream simple).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
    /// Uniform integer in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}
