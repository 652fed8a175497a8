//! Parsing of raw criterion values: integers of any sign up to 38 digits and DDMMMYYYY dates.
//! Dates become day numbers (days since 1970-01-01) so a date range is an integer range.

/// Why a raw value was rejected; the loader turns this into a located [`crate::LoadError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueError {
    NotAnInteger,
    IntegerTooLarge,
    MalformedDate,
    ImpossibleDate(String),
}

const MONTHS: [&str; 12] = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];

/// Parses a decimal integer (optional sign, ASCII digits, surrounding spaces allowed).
/// Values are held as i128, so no realistic flight number or code is ever truncated; anything
/// beyond ±1.7e38 is an explicit error, never a wrap-around.
pub fn parse_int(s: &str) -> Result<i128, ValueError> {
    // Fast path: up to 18 plain digits fit in an i64 without overflow checks.
    let b = s.as_bytes();
    if !b.is_empty() && b.len() <= 18 && b.iter().all(u8::is_ascii_digit) {
        return Ok(b.iter().fold(0i64, |acc, &d| acc * 10 + (d - b'0') as i64) as i128);
    }
    let t = s.trim();
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ValueError::NotAnInteger);
    }
    t.parse::<i128>().map_err(|_| ValueError::IntegerTooLarge)
}

/// [`parse_int`] of a value of `len` bytes held in the low bytes of `word` (first byte lowest),
/// when it is 1 to 8 plain ASCII digits; `None` for anything else, which the caller hands to
/// [`parse_int`]. The batch encoder reads a value as one word, and this converts it without a
/// loop (SWAR: the digits are checked and combined in pairs, quads, then all eight).
#[inline]
pub fn parse_int_word(word: u64, len: usize) -> Option<i64> {
    if len == 0 || len > 8 {
        return None;
    }
    // '0'..'9' become 0..9; shifting left drops the bytes past the value and leaves zeros
    // (leading zero digits) in the low bytes, the most significant ones.
    let x = (word ^ 0x3030_3030_3030_3030) << (8 * (8 - len));
    // Every byte must be <= 9: a byte >= 0x80 has its high bit set, and one in 10..0x7f gets it
    // from adding 0x76 (a carry only leaves a byte that is itself already >= 0x80).
    if (x | x.wrapping_add(0x7676_7676_7676_7676)) & 0x8080_8080_8080_8080 != 0 {
        return None;
    }
    let x = (x & 0x0f0f_0f0f_0f0f_0f0f).wrapping_mul(10 << 8 | 1) >> 8;
    let x = (x & 0x00ff_00ff_00ff_00ff).wrapping_mul(100 << 16 | 1) >> 16;
    let x = (x & 0x0000_ffff_0000_ffff).wrapping_mul(10000 << 32 | 1) >> 32;
    Some(x as i64)
}

/// [`parse_date`] of `YYYY-MM-DD` or `DDMMMYYYY` written with nothing else (no spaces, no signs)
/// and naming a real day; `None` for anything else, which the caller hands to [`parse_date`]
/// (so errors and odd inputs take exactly the general path).
#[inline]
pub fn parse_date_exact(b: &[u8]) -> Option<i64> {
    #[inline]
    fn digits(b: &[u8]) -> Option<u32> {
        b.iter().try_fold(0u32, |acc, &c| {
            let d = c.wrapping_sub(b'0');
            (d < 10).then_some(acc * 10 + d as u32)
        })
    }
    let (y, m, d) = match b.len() {
        10 if b[4] == b'-' && b[7] == b'-' => (digits(&b[0..4])?, digits(&b[5..7])?, digits(&b[8..10])?),
        9 => {
            // Upper-casing by clearing bit 5 is exact here: every month name is letters only.
            let mon = [b[2] & !0x20, b[3] & !0x20, b[4] & !0x20];
            let m = MONTHS.iter().position(|x| x.as_bytes() == mon)? as u32 + 1;
            (digits(&b[5..9])?, m, digits(&b[0..2])?)
        }
        _ => return None,
    };
    let y = y as i64;
    if !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return None;
    }
    Some(days_from_civil(y, m, d))
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if is_leap(y) => 29,
        _ => 28,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// The inverse of [`days_from_civil`], for printing dates back in DDMMMYYYY.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719468;
    let era = if z >= 0 { z } else { z - 146096 } / 146097;
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

pub fn format_date(days: i128) -> String {
    let (y, m, d) = civil_from_days(days as i64);
    format!("{d:02}{}{y:04}", MONTHS[(m - 1) as usize])
}

/// Parses `DDMMMYYYY` (e.g. `15MAR2026`, month case-insensitive) or ISO `YYYY-MM-DD`.
pub fn parse_date(s: &str) -> Result<i128, ValueError> {
    let t = s.trim();
    let (y, m, d) = if t.len() == 10 && t.as_bytes()[4] == b'-' && t.as_bytes()[7] == b'-' {
        let y = t[0..4].parse::<i64>().map_err(|_| ValueError::MalformedDate)?;
        let m = t[5..7].parse::<u32>().map_err(|_| ValueError::MalformedDate)?;
        let d = t[8..10].parse::<u32>().map_err(|_| ValueError::MalformedDate)?;
        (y, m, d)
    } else if t.len() == 9 && t.is_ascii() {
        let d = t[0..2].parse::<u32>().map_err(|_| ValueError::MalformedDate)?;
        let mon = &t.as_bytes()[2..5];
        let m = MONTHS.iter().position(|x| x.as_bytes().eq_ignore_ascii_case(mon)).ok_or(ValueError::MalformedDate)?
            as u32
            + 1;
        let y = t[5..9].parse::<i64>().map_err(|_| ValueError::MalformedDate)?;
        (y, m, d)
    } else {
        return Err(ValueError::MalformedDate);
    };
    if !(1..=12).contains(&m) {
        return Err(ValueError::ImpossibleDate(format!("month {m} does not exist")));
    }
    let dim = days_in_month(y, m);
    if d == 0 || d > dim {
        return Err(ValueError::ImpossibleDate(format!(
            "day {d} does not exist in {} {y} (it has {dim} days)",
            MONTHS[(m - 1) as usize]
        )));
    }
    Ok(days_from_civil(y, m, d) as i128)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip() {
        for z in [-800_000i64, -1, 0, 1, 18_000, 20_000, 2_900_000] {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
        }
        assert_eq!(parse_date("01JAN1970"), Ok(0));
        assert_eq!(parse_date("1970-01-02"), Ok(1));
        assert_eq!(parse_date("29feb2024").map(format_date), Ok("29FEB2024".to_string()));
        assert!(matches!(parse_date("29FEB2023"), Err(ValueError::ImpossibleDate(_))));
        assert!(matches!(parse_date("31APR2023"), Err(ValueError::ImpossibleDate(_))));
        assert_eq!(parse_date("1MAR2023"), Err(ValueError::MalformedDate));
        assert_eq!(parse_date("01XYZ2023"), Err(ValueError::MalformedDate));
    }

    #[test]
    fn fast_integers_agree_with_parse_int() {
        let word = |s: &str| {
            let mut b = [0xffu8; 8];
            b[..s.len()].copy_from_slice(s.as_bytes());
            u64::from_le_bytes(b)
        };
        let mut cases: Vec<String> = ["", "0", "7", "00000000", "99999999", "12345678", "1234567", "0042", "+1", "-1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for v in (0..100_000_000u64).step_by(9_973).chain(0..2_000) {
            cases.push(v.to_string());
            cases.push(format!("{v:08}"));
        }
        for bad in [b'/', b':', b' ', b'a', 0, 0x80, 0xff, 0x8a, 0x7f] {
            for pos in 0..8 {
                let mut s = *b"12345678";
                s[pos] = bad;
                for len in pos + 1..=8 {
                    let b = &s[..len];
                    let w = u64::from_le_bytes(s);
                    assert_eq!(parse_int_word(w, len), None, "{b:?}");
                }
            }
        }
        for s in &cases {
            let fast = parse_int_word(word(s), s.len());
            match parse_int(s) {
                Ok(v) if !s.starts_with(['+', '-']) && !s.is_empty() => assert_eq!(fast, Some(v as i64), "{s}"),
                _ => assert_eq!(fast, None, "{s}"),
            }
        }
        assert_eq!(parse_int_word(word("12345678"), 9), None);
    }

    #[test]
    fn fast_dates_agree_with_parse_date() {
        let mut cases = vec![
            "2024-02-29",
            "2023-02-29",
            "2026-13-01",
            "2026-00-01",
            "2026-01-00",
            "2026-01-32",
            "+026-01-05",
            "2026-+1-05",
            "0000-01-01",
            "9999-12-31",
            "29feb2024",
            "29FEB2023",
            "01xyz2023",
            "00JAN2026",
            "1MAR2023",
            "+1MAR2023",
            "01MAR+023",
            "2026/01/05",
            "01M@R2026",
            "01m`r2026",
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
        for z in (-800_000i64..3_000_000).step_by(997) {
            let (y, m, d) = civil_from_days(z);
            if (0..=9999).contains(&y) {
                cases.push(format!("{y:04}-{m:02}-{d:02}"));
                cases.push(format_date(z as i128));
                cases.push(format_date(z as i128).to_lowercase());
            }
        }
        for s in &cases {
            let fast = parse_date_exact(s.as_bytes());
            match parse_date(s) {
                Ok(v) if s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') => {
                    assert_eq!(fast, Some(v as i64), "{s}")
                }
                Ok(v) => assert!(fast.is_none() || fast == Some(v as i64), "{s}"),
                Err(_) => assert_eq!(fast, None, "{s}"),
            }
        }
    }

    #[test]
    fn integers() {
        assert_eq!(parse_int(" 0042 "), Ok(42));
        assert_eq!(parse_int("-7"), Ok(-7));
        assert_eq!(parse_int("99999999999999999999"), Ok(99_999_999_999_999_999_999));
        assert_eq!(parse_int("12a"), Err(ValueError::NotAnInteger));
        assert_eq!(parse_int(""), Err(ValueError::NotAnInteger));
        assert_eq!(parse_int(&"9".repeat(60)), Err(ValueError::IntegerTooLarge));
    }
}
