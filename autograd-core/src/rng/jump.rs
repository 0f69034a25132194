//! Jumping xoshiro256++'s stream ahead by any number of draws.
//!
//! A draw moves the 256-bit state by a linear map over GF(2) (shifts,
//! rotations and XORs), so `n` draws are that map's matrix `M` raised to
//! `n`: the squares `M^(2^k)`, each made once and cached, compose any `n`
//! in at most 64 matrix-vector products. A device uses it to start each of
//! its threads where the one sequential stream would be, so that together
//! they draw the CPU's numbers.

use std::sync::Mutex;

/// A 256 x 256 matrix over GF(2): row `i` holds the state bits whose XOR
/// is bit `i` of the image.
type BitMatrix = [[u64; 4]; 256];

/// `M^(2^k)` for every `k` made so far (`k` below the vector's length).
static SQUARES: Mutex<Vec<Box<BitMatrix>>> = Mutex::new(Vec::new());

fn bit(s: &[u64; 4], i: usize) -> bool {
    (s[i / 64] >> (i % 64)) & 1 == 1
}

/// `m` times the state `s`.
fn apply(m: &BitMatrix, s: [u64; 4]) -> [u64; 4] {
    let mut out = [0u64; 4];
    for (i, row) in m.iter().enumerate() {
        let ones: u32 = row.iter().zip(&s).map(|(r, x)| (r & x).count_ones()).sum();
        out[i / 64] |= u64::from(ones & 1) << (i % 64);
    }
    out
}

/// `m` times itself: row `i` is the XOR of the rows `j` that row `i` has.
fn square(m: &BitMatrix) -> Box<BitMatrix> {
    let mut out = Box::new([[0u64; 4]; 256]);
    for (o, row) in out.iter_mut().zip(m.iter()) {
        for (j, mj) in m.iter().enumerate() {
            if bit(row, j) {
                o.iter_mut().zip(mj).for_each(|(a, b)| *a ^= b);
            }
        }
    }
    out
}

/// `M` itself: column `j` is one draw's move of the state with only bit
/// `j` set.
fn one_draw() -> Box<BitMatrix> {
    let mut m = Box::new([[0u64; 4]; 256]);
    for j in 0..256 {
        let mut e = [0u64; 4];
        e[j / 64] = 1 << (j % 64);
        let mut g = super::Generator::from_state(e);
        g.next_u64();
        let column = g.state();
        for (i, row) in m.iter_mut().enumerate() {
            if bit(&column, i) {
                row[j / 64] |= 1 << (j % 64);
            }
        }
    }
    m
}

/// The state `draws` draws after `state`.
pub(super) fn jump(mut state: [u64; 4], draws: u64) -> [u64; 4] {
    let needed = 64 - draws.leading_zeros() as usize;
    // a poisoned lock still holds whole matrices: each is pushed complete
    let mut squares = SQUARES.lock().unwrap_or_else(|e| e.into_inner());
    while squares.len() < needed {
        let next = match squares.last() {
            Some(m) => square(m),
            None => one_draw(),
        };
        squares.push(next);
    }
    for (k, m) in squares.iter().enumerate().take(needed) {
        if (draws >> k) & 1 == 1 {
            state = apply(m, state);
        }
    }
    state
}

#[cfg(test)]
mod tests {
    use super::super::Generator;

    /// A jump of `n` is `n` sequential draws, around every power of two a
    /// short test can reach and from several seeds; jumps compose, so the
    /// large ones are checked against two smaller ones.
    #[test]
    fn a_jump_is_that_many_draws() {
        for seed in [0u64, 1, 42, u64::MAX] {
            let mut walked = Generator::new(seed);
            let mut done = 0u64;
            for n in [0u64, 1, 2, 3, 7, 63, 64, 65, 1000, 4095, 4096, 4097, 70_000] {
                while done < n {
                    walked.next_u64();
                    done += 1;
                }
                let mut jumped = Generator::new(seed);
                jumped.advance(n);
                assert_eq!(jumped, walked, "seed {seed}, {n} draws");
            }
        }
        let (mut a, mut b) = (Generator::new(9), Generator::new(9));
        a.advance((1 << 40) + 12_345);
        b.advance(1 << 39);
        b.advance((1 << 39) + 12_000);
        b.advance(345);
        assert_eq!(a, b, "jumps compose");
        let mut c = Generator::new(9);
        c.advance(u64::MAX);
        c.next_u64();
        let mut d = Generator::new(9);
        d.advance(1 << 63);
        d.advance(1 << 63);
        assert_eq!(c, d, "2^64 draws in two jumps");
    }
}
