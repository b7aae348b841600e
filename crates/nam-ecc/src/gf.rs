//! Arithmetic in GF(2^8), the field every code of this crate works over.
//!
//! Elements are bytes. Addition is XOR. Multiplication is modulo the primitive polynomial
//! x^8 + x^4 + x^3 + x^2 + 1 ([`PRIMITIVE_POLY`] = 0x11D), whose root α = 0x02 generates the
//! multiplicative group of order 255. That is the polynomial of the QR-code and most storage RS
//! codes, which lets the tests check the encoder against published known answers.
//!
//! The fast operations ([`mul`], [`div`], [`inv`], [`alpha_pow`]) are log/antilog table look-ups
//! built at compile time. [`mul_naive`] is the bit-serial shift-and-add product kept as the
//! baseline of the benchmark and as an independent check of the tables.

/// The primitive polynomial x^8 + x^4 + x^3 + x^2 + 1 that defines the field.
pub const PRIMITIVE_POLY: u16 = 0x11D;

/// Order of the multiplicative group: α^255 = 1.
pub const GROUP_ORDER: usize = 255;

struct Tables {
    /// `exp[i] = α^i` for i in 0..510, doubled so `exp[log a + log b]` needs no reduction.
    exp: [u8; 2 * GROUP_ORDER],
    /// `log[a]` for a != 0; `log[0]` is unused (0).
    log: [u8; 256],
}

const fn build_tables() -> Tables {
    let mut exp = [0u8; 2 * GROUP_ORDER];
    let mut log = [0u8; 256];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < GROUP_ORDER {
        exp[i] = x as u8;
        exp[i + GROUP_ORDER] = x as u8;
        log[x as usize] = i as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= PRIMITIVE_POLY;
        }
        i += 1;
    }
    Tables { exp, log }
}

static TABLES: Tables = build_tables();

/// α^e for any exponent (taken modulo 255).
#[inline]
pub fn alpha_pow(e: usize) -> u8 {
    TABLES.exp[e % GROUP_ORDER]
}

/// Discrete logarithm base α of a non-zero element; `None` for 0.
#[inline]
pub fn log(a: u8) -> Option<u8> {
    if a == 0 {
        None
    } else {
        Some(TABLES.log[a as usize])
    }
}

/// Product `a · b` by log/antilog tables.
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        TABLES.exp[TABLES.log[a as usize] as usize + TABLES.log[b as usize] as usize]
    }
}

/// Multiplicative inverse; `None` for 0.
#[inline]
pub fn inv(a: u8) -> Option<u8> {
    if a == 0 {
        None
    } else {
        Some(TABLES.exp[GROUP_ORDER - TABLES.log[a as usize] as usize])
    }
}

/// Quotient `a / b`; `None` when `b` is 0.
#[inline]
pub fn div(a: u8, b: u8) -> Option<u8> {
    if b == 0 {
        None
    } else if a == 0 {
        Some(0)
    } else {
        let e = GROUP_ORDER + TABLES.log[a as usize] as usize - TABLES.log[b as usize] as usize;
        Some(TABLES.exp[e])
    }
}

/// Product `a · b` computed bit by bit (shift-and-add with reduction), without tables.
///
/// Slow on purpose: it is the benchmark baseline and the independent reference of [`mul`].
#[inline]
pub fn mul_naive(a: u8, b: u8) -> u8 {
    let mut a = a as u16;
    let mut b = b;
    let mut product: u16 = 0;
    while b != 0 {
        if b & 1 != 0 {
            product ^= a;
        }
        b >>= 1;
        a <<= 1;
        if a & 0x100 != 0 {
            a ^= PRIMITIVE_POLY;
        }
    }
    product as u8
}

/// Evaluate the polynomial `Σ coefficients[i] · x^i` at `x` (lowest degree first, Horner).
pub fn poly_eval_low_first(coefficients: &[u8], x: u8) -> u8 {
    coefficients.iter().rev().fold(0u8, |acc, &c| mul(acc, x) ^ c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_multiply_matches_bit_serial_multiply_everywhere() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), mul_naive(a, b), "{a} * {b}");
            }
        }
    }

    #[test]
    fn known_field_values() {
        // Published values for the 0x11D field (QR-code literature): α^8 = 29, log(3) = 25.
        assert_eq!(alpha_pow(8), 29);
        assert_eq!(log(3), Some(25));
        assert_eq!(alpha_pow(255), 1);
        assert_eq!(log(0), None);
    }

    #[test]
    fn inverse_and_division_are_consistent() {
        assert_eq!(inv(0), None);
        assert_eq!(div(7, 0), None);
        for a in 1..=255u8 {
            let ia = inv(a).unwrap_or(0);
            assert_eq!(mul(a, ia), 1);
            for b in 1..=255u8 {
                assert_eq!(div(mul(a, b), b), Some(a));
            }
        }
    }

    #[test]
    fn alpha_generates_the_whole_group() {
        let mut seen = [false; 256];
        for e in 0..GROUP_ORDER {
            seen[alpha_pow(e) as usize] = true;
        }
        assert!(!seen[0]);
        assert!(seen[1..].iter().all(|&s| s));
    }

    #[test]
    fn horner_evaluation() {
        // 3 + 2x + x^2 at x = α.
        let x = alpha_pow(1);
        let expected = 3 ^ mul(2, x) ^ mul(x, x);
        assert_eq!(poly_eval_low_first(&[3, 2, 1], x), expected);
    }
}
