//! `minimum` / `maximum` / `exclusiveMinimum` / `exclusiveMaximum` enforced digit by digit.
//!
//! Values are exact decimals held as integers in units of 10^-18. A bounded number is written
//! without an exponent and with at most [`MAX_DIGITS`] digits in all (integer part plus
//! fraction), so every value written is exactly representable in these units and two values
//! compare the same way as the doubles a validator parses them into (15 significant digits
//! round-trip through a double). Bounds finer than 10^-18 are rounded inwards (the allowed
//! range only shrinks). After every character the matcher asks whether some completion of the
//! digits so far still lands in range, so the number never has to be abandoned.
//!
//! `multipleOf` joins the same check: a completion must also be an exact multiple (the
//! divisor in units must be a whole number: decimals down to 10^-18, integers up to 10^15).
//! When the schema writes the divisor as a fraction (`0.01`), validators divide doubles
//! (`x / 0.01` must come out whole, which fails for `0.07`), so a value is only written when
//! that double division is whole too; completions are then searched for such a value.

use serde_json::Value;

/// Units per 1 (values are integers in units of 10^-18).
const ONE: i128 = 1_000_000_000_000_000_000;
/// Most digits (integer part plus fraction) of a bounded number.
pub const MAX_DIGITS: u32 = 15;
/// Magnitudes beyond this are out of reach of 15 digits: bounds are clamped to it.
const CLAMP: i128 = 10_i128.pow(20) * ONE;

/// Largest `multipleOf` divisor (in units of 1).
const MAX_MULTIPLE: i128 = 1_000_000_000_000_000;
/// Grid values tried per interval when looking for one whose double division is whole.
const FLOAT_TRIES: usize = 64;

/// Inclusive bounds in units of 10^-18 (exclusive schema bounds already moved by one unit),
/// and a divisor every value must be a multiple of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub lo: Option<i128>,
    pub hi: Option<i128>,
    /// `multipleOf` in units.
    pub multiple: Option<i128>,
    /// The bits of the divisor as a double when the schema wrote it as a fraction: validators
    /// then check `x / divisor` in doubles.
    pub float_divisor: Option<u64>,
}

fn gcd(mut a: i128, mut b: i128) -> i128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.abs()
}

/// The double a reader parses from the decimal `v` units (correctly rounded).
fn to_f64(v: i128) -> f64 {
    format!("{v}e-18").parse().unwrap_or(f64::NAN)
}

/// `multipleOf`: the divisor in units, exactly (errors name the keyword).
fn divisor(v: &Value) -> Result<i128, String> {
    let bad = || format!("'multipleOf' must be a positive number, not {v}");
    if let Some(u) = v.as_u64() {
        let u = u as i128;
        if u == 0 {
            return Err(bad());
        }
        if u > MAX_MULTIPLE {
            return Err(format!("'multipleOf' above 10^15 is not supported ({v})"));
        }
        return Ok(u * ONE);
    }
    let f = v
        .as_f64()
        .filter(|f| f.is_finite() && *f > 0.0)
        .ok_or_else(bad)?;
    if f > MAX_MULTIPLE as f64 {
        return Err(format!("'multipleOf' above 10^15 is not supported ({v})"));
    }
    // Display of an f64 is its shortest round-trip decimal, without an exponent.
    let s = format!("{f}");
    let (int, frac) = s.split_once('.').unwrap_or((&s, ""));
    if frac.len() > 18 {
        return Err(format!(
            "'multipleOf' {v} is finer than 10^-18, which is not supported"
        ));
    }
    let int: i128 = int.parse().map_err(|_| bad())?;
    let frac_units = if frac.is_empty() {
        0
    } else {
        frac.parse::<i128>().map_err(|_| bad())? * pow10(18 - frac.len() as u32)
    };
    Ok(int * ONE + frac_units)
}

fn pow10(n: u32) -> i128 {
    10_i128.pow(n)
}

/// A JSON number as units, rounded up (`up`) or down when finer than 10^-18; clamped.
fn units(v: &Value, up: bool) -> Option<i128> {
    if let Some(i) = v.as_i64() {
        return Some((i as i128).clamp(-CLAMP / ONE, CLAMP / ONE) * ONE);
    }
    if let Some(u) = v.as_u64() {
        return Some((u as i128).min(CLAMP / ONE) * ONE);
    }
    let f = v.as_f64()?;
    if !f.is_finite() {
        return None;
    }
    if f.abs() >= 1e20 {
        return Some(if f > 0.0 { CLAMP } else { -CLAMP });
    }
    // Display of an f64 is its shortest round-trip decimal, without an exponent.
    let s = format!("{f}");
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.as_str()),
    };
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let mut mag: i128 = int.parse::<i128>().ok()? * ONE;
    let mut inexact = false;
    for (i, d) in frac.bytes().enumerate() {
        let d = (d - b'0') as i128;
        if i < 18 {
            mag += d * pow10(17 - i as u32);
        } else if d != 0 {
            inexact = true;
        }
    }
    // Rounding the magnitude away from zero moves a negative value down.
    let away = inexact && (up != neg);
    if away {
        mag += 1;
    }
    Some(if neg { -mag } else { mag })
}

impl Bounds {
    /// The bounds a schema object states, if any (`exclusiveMinimum: true` of draft 4 is
    /// understood too). Errors name the keyword.
    pub fn from_schema(obj: &serde_json::Map<String, Value>) -> Result<Option<Bounds>, String> {
        let num = |k: &str, up: bool| -> Result<Option<i128>, String> {
            match obj.get(k) {
                None | Some(Value::Bool(_)) => Ok(None),
                Some(v) => units(v, up)
                    .map(Some)
                    .ok_or_else(|| format!("'{k}' must be a finite number")),
            }
        };
        let flag = |k: &str| obj.get(k).and_then(Value::as_bool).unwrap_or(false);
        let mut lo = num("minimum", true)?;
        let mut hi = num("maximum", false)?;
        if flag("exclusiveMinimum") {
            lo = lo.map(|v| v + 1);
        }
        if flag("exclusiveMaximum") {
            hi = hi.map(|v| v - 1);
        }
        if let Some(x) = num("exclusiveMinimum", true)? {
            lo = Some(lo.map_or(x + 1, |l| l.max(x + 1)));
        }
        if let Some(x) = num("exclusiveMaximum", false)? {
            hi = Some(hi.map_or(x - 1, |h| h.min(x - 1)));
        }
        let (multiple, float_divisor) = match obj.get("multipleOf") {
            None => (None, None),
            Some(v) => (
                Some(divisor(v)?),
                v.is_f64().then(|| v.as_f64().unwrap_or(1.0).to_bits()),
            ),
        };
        if lo.is_none() && hi.is_none() && multiple.is_none() {
            return Ok(None);
        }
        if let (Some(l), Some(h)) = (lo, hi) {
            if l > h {
                return Err("the minimum is above the maximum".into());
            }
        }
        Ok(Some(Bounds {
            lo,
            hi,
            multiple,
            float_divisor,
        }))
    }

    /// Whether `v` (units) is in range and a multiple as required.
    pub fn contains(&self, v: i128) -> bool {
        self.lo.is_none_or(|l| v >= l)
            && self.hi.is_none_or(|h| v <= h)
            && self.multiple.is_none_or(|m| v % m == 0)
            && self.float_ok(v)
    }

    /// Whether a validator dividing doubles finds `v` a whole multiple of the divisor.
    fn float_ok(&self, v: i128) -> bool {
        let Some(bits) = self.float_divisor else {
            return true;
        };
        let q = to_f64(v) / f64::from_bits(bits);
        q.is_finite() && q.fract() == 0.0
    }

    /// Whether some multiple of `step` in `a..=b` (`a` is one) is in range and a multiple
    /// as required.
    fn grid_hit(&self, a: i128, b: i128, step: i128) -> bool {
        let from = self.lo.map_or(a, |l| l.max(a));
        let to = self.hi.map_or(b, |h| h.min(b));
        if from > to {
            return false;
        }
        // Values on the grid that are multiples: the multiples of lcm(step, multiple).
        let l = match self.multiple {
            None => Some(step),
            Some(m) => (step / gcd(step, m)).checked_mul(m),
        };
        let Some(l) = l else {
            // A step beyond every value in reach: only zero.
            return from <= 0 && 0 <= to && self.float_ok(0);
        };
        let mut v = from.div_euclid(l) * l;
        if v < from {
            v += l;
        }
        if self.float_divisor.is_none() {
            return v <= to;
        }
        // The first few from the low end (a child interval of digits meets the same values in
        // the same order, so a value found here is found again after the next digit).
        for _ in 0..FLOAT_TRIES {
            if v > to {
                return false;
            }
            if self.float_ok(v) {
                return true;
            }
            v += l;
        }
        false
    }

    /// Whether a magnitude interval (values of `neg`ative or positive sign) reaches the range.
    fn interval_hits(&self, neg: bool, a: i128, b: i128, step: i128) -> bool {
        if neg {
            // -b, -b + step, ..., -a
            self.grid_hit(-b, -a, step)
        } else {
            self.grid_hit(a, b, step)
        }
    }

    /// Whether the digits typed so far can still end in range. `digits` is the digit string
    /// without sign or dot, `int_digits` how many belong to the integer part (`None`: no dot
    /// typed, the integer part may grow), `integer`: no fraction allowed.
    pub fn reachable(
        &self,
        neg: bool,
        digits: &[u8],
        int_digits: Option<u32>,
        integer: bool,
    ) -> bool {
        let n = digits.len() as u32;
        let mant = digits
            .iter()
            .fold(0i128, |m, &d| m * 10 + (d - b'0') as i128);
        match int_digits {
            None => {
                // Integer part `mant` of n digits; k more integer digits, then a fraction.
                let ks: Vec<u32> = if n == 0 {
                    (1..=MAX_DIGITS).collect()
                } else if mant == 0 {
                    vec![0]
                } else {
                    (0..=MAX_DIGITS - n).collect()
                };
                ks.into_iter().any(|k| {
                    let int_len = n + k;
                    let frac = if integer { 0 } else { MAX_DIGITS - int_len };
                    let step = ONE / pow10(frac.min(18));
                    // A negative integer cannot be `-0`: its magnitude is at least 1.
                    let a = if n == 0 && neg && integer {
                        ONE
                    } else {
                        mant * pow10(k) * ONE
                    };
                    let b = (mant + 1) * pow10(k) * ONE - step;
                    self.interval_hits(neg, a, b, step)
                })
            }
            Some(i) => {
                // A fraction of m digits so far; up to MAX_DIGITS - n more.
                let m = n - i;
                let step = ONE / pow10((MAX_DIGITS - i).min(18));
                let a = mant * (ONE / pow10(m));
                let b = a + ONE / pow10(m) - step;
                self.interval_hits(neg, a, b, step)
            }
        }
    }

    /// The value of a finished number in units.
    pub fn value(neg: bool, digits: &[u8], int_digits: u32) -> i128 {
        let mant = digits
            .iter()
            .fold(0i128, |m, &d| m * 10 + (d - b'0') as i128);
        let frac = digits.len() as u32 - int_digits;
        let v = mant * (ONE / pow10(frac));
        if neg {
            -v
        } else {
            v
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn b(s: Value) -> Bounds {
        Bounds::from_schema(s.as_object().unwrap())
            .unwrap()
            .unwrap()
    }

    #[test]
    fn bounds_from_keywords() {
        let x = b(json!({"minimum": 1, "exclusiveMaximum": 2.5}));
        assert_eq!(x.lo, Some(ONE));
        assert_eq!(x.hi, Some(5 * ONE / 2 - 1));
        let x = b(json!({"minimum": 0.1, "exclusiveMinimum": true}));
        assert_eq!(x.lo, Some(ONE / 10 + 1));
        let x = b(json!({"maximum": -1e-20}));
        assert_eq!(x.hi, Some(-1));
        assert!(
            Bounds::from_schema(json!({"minimum": 3, "maximum": 2}).as_object().unwrap()).is_err()
        );
        let m = b(json!({"multipleOf": 0.01}));
        assert_eq!((m.lo, m.hi, m.multiple), (None, None, Some(ONE / 100)));
        assert_eq!(b(json!({"multipleOf": 7})).multiple, Some(7 * ONE));
        assert_eq!(b(json!({"multipleOf": 7})).float_divisor, None);
        for bad in [json!(0), json!(-2), json!(1e-19), json!(1e16)] {
            let e = Bounds::from_schema(json!({"multipleOf": bad}).as_object().unwrap());
            assert!(e.unwrap_err().contains("multipleOf"));
        }
    }

    /// Every integer 0..=200 of a divisibility schema, as the matcher would check it: the
    /// digits reach a completion exactly when some multiple in range extends them.
    #[test]
    fn multiples_reachable_by_enumeration() {
        let x = b(json!({"multipleOf": 7, "minimum": 10, "maximum": 60}));
        let hits: Vec<i128> = (0..=200).filter(|&v| x.contains(v * ONE)).collect();
        assert_eq!(hits, vec![14, 21, 28, 35, 42, 49, 56]);
        for p in 1..=99u32 {
            let digits = p.to_string().into_bytes();
            // A brute-force answer: some value of the multiples has these leading digits.
            let expect = hits
                .iter()
                .any(|h| h.to_string().starts_with(&p.to_string()));
            assert_eq!(
                x.reachable(false, &digits, None, true),
                expect,
                "prefix {p}"
            );
        }
        // 0.07 is a multiple of 0.01, but 0.07 / 0.01 is not whole in doubles.
        let c = b(json!({"multipleOf": 0.01, "minimum": 0.05, "maximum": 0.08}));
        assert!(!c.contains(Bounds::value(false, b"007", 1)));
        assert!(c.contains(Bounds::value(false, b"006", 1)));
        assert!(!c.contains(Bounds::value(false, b"0065", 1)));
        assert!(c.reachable(false, b"00", Some(1), false));
        assert!(!c.reachable(false, b"007", Some(1), false));
        let h = b(json!({"multipleOf": 0.5}));
        assert!(h.contains(Bounds::value(false, b"25", 1)));
        assert!(!h.contains(Bounds::value(false, b"24", 1)));
        assert!(h.reachable(true, b"2", None, false));
    }

    /// Prefixes that can or cannot still reach the range, worked out by hand.
    #[test]
    fn reachable_matches_enumeration() {
        let x = b(json!({"minimum": 13, "maximum": 15}));
        assert!(x.reachable(false, b"1", None, true));
        assert!(!x.reachable(false, b"2", None, true));
        assert!(x.reachable(false, b"", None, true));
        assert!(!x.reachable(true, b"", None, true));
        assert!(!x.reachable(false, b"0", None, true));
        assert!(x.contains(Bounds::value(false, b"14", 2)));
        let y = b(json!({"exclusiveMinimum": 0.5, "maximum": 0.75}));
        assert!(y.reachable(false, b"0", None, false));
        assert!(!y.reachable(false, b"1", None, false));
        assert!(y.reachable(false, b"05", Some(1), false)); // 0.5 -> 0.5000001
        assert!(!y.reachable(false, b"08", Some(1), false));
        assert!(!y.contains(Bounds::value(false, b"05", 1)));
        assert!(y.contains(Bounds::value(false, b"075", 1)));
        let z = b(json!({"minimum": -3, "maximum": -2}));
        assert!(z.reachable(true, b"2", None, true));
        assert!(z.reachable(true, b"25", Some(1), false));
        assert!(!z.reachable(true, b"35", Some(1), false));
        assert!(!z.reachable(false, b"", None, false));
    }
}
