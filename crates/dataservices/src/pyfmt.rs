//! Numbers written as Python's format specifications write them, so that the native walk's
//! steps and the decision's reason read the same as the Python reference's.

/// Python's `f"{x:,.1f}"`.
pub fn f1(x: f64) -> String {
    if !x.is_finite() {
        return python_special(x);
    }
    let s = format!("{x:.1}");
    let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    format!("{sign}{}.{frac}", commas(int))
}

/// Python's `f"{x:,.0f}"`.
pub fn f0(x: f64) -> String {
    if !x.is_finite() {
        return python_special(x);
    }
    let s = format!("{x:.0}");
    commas(&s)
}

/// Python's `f"{x:g}"`: six significant digits, trailing zeros dropped, exponent outside
/// 1e-4..1e6.
pub fn g(x: f64) -> String {
    if !x.is_finite() {
        return python_special(x);
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let e = format!("{x:.5e}"); // d.ddddde±x: the exponent after rounding to six digits
    let (mantissa, exp) = e.split_once('e').expect("an exponent");
    let exp: i32 = exp.parse().expect("an integer exponent");
    if !(-4..6).contains(&exp) {
        let m = trim_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{m}e{sign}{:02}", exp.abs());
    }
    let decimals = usize::try_from(5 - exp).unwrap_or(0);
    trim_zeros(&format!("{x:.decimals$}")).to_string()
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

fn python_special(x: f64) -> String {
    if x.is_nan() {
        "nan".into()
    } else if x > 0.0 {
        "inf".into()
    } else {
        "-inf".into()
    }
}

/// Digits grouped by thousands with commas.
pub fn commas(int: &str) -> String {
    let (sign, digits) = int.strip_prefix('-').map_or(("", int), |d| ("-", d));
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    format!("{sign}{out}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_python_writes_them() {
        assert_eq!(f1(1234567.25), "1,234,567.2");
        assert_eq!(f1(-1234.06), "-1,234.1");
        assert_eq!(f1(0.05), "0.1");
        assert_eq!(f1(f64::INFINITY), "inf");
        assert_eq!(f0(1234.56), "1,235");
        assert_eq!(f0(2.5), "2");
        assert_eq!(f0(999999.5), "1,000,000");
        assert_eq!(commas("100"), "100");
        assert_eq!(commas("6177731"), "6,177,731");
        assert_eq!(g(8.0), "8");
        assert_eq!(g(12.5), "12.5");
        assert_eq!(g(123456.0), "123456");
        assert_eq!(g(1234567.0), "1.23457e+06");
        assert_eq!(g(0.0001), "0.0001");
        assert_eq!(g(0.00001234), "1.234e-05");
        assert_eq!(g(33.333333333), "33.3333");
        assert_eq!(g(999999.5), "1e+06");
    }
}
