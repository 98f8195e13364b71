//! BigQuery's `SAFE_CAST` rules, value by value.

use super::*;

/// `true` / `false` in any case, nothing around them.
pub(crate) fn boolean(s: &str) -> Option<bool> {
    if s.eq_ignore_ascii_case("true") {
        Some(true)
    } else if s.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

/// An INT64: decimal or `0x` hex digits after an optional sign, surrounding ASCII
/// whitespace skipped; no point, no exponent.
pub(crate) fn integer(s: &str) -> Option<i64> {
    let t = s.trim_matches(|c: char| c.is_ascii_whitespace());
    let (negative, body) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let magnitude: i128 = match body.strip_prefix("0x").or(body.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            i128::from_str_radix(hex, 16).ok()?
        }
        Some(_) => return None,
        None if digits(body) => body.parse().ok()?,
        None => return None,
    };
    i64::try_from(if negative { -magnitude } else { magnitude }).ok()
}

/// A FLOAT64: a decimal or exponent number, or `[+|-]inf`, `[+|-]infinity`,
/// `[+|-]nan` in any case; surrounding ASCII whitespace skipped.
pub(crate) fn float(s: &str) -> Option<f64> {
    let t = s.trim_matches(|c: char| c.is_ascii_whitespace());
    let lower = t.to_ascii_lowercase();
    let (sign, word) = match lower.as_bytes().first()? {
        b'-' => (-1.0, &lower[1..]),
        b'+' => (1.0, &lower[1..]),
        _ => (1.0, lower.as_str()),
    };
    match word {
        "inf" | "infinity" => return Some(sign * f64::INFINITY),
        "nan" => return Some(f64::NAN),
        _ => {}
    }
    number_parts(t)?;
    t.parse().ok()
}

/// A NUMERIC / BIGNUMERIC as text with `scale` digits: surrounding ASCII whitespace
/// skipped, rounded half away from zero.
pub(crate) fn decimal(s: &str, scale: i8) -> Option<String> {
    decimal_text(s.trim_matches(|c: char| c.is_ascii_whitespace()), scale)
}

/// A DATE: exactly `YYYY-[M]M-[D]D`.
pub(crate) fn date(s: &str) -> Option<NaiveDate> {
    match ymd_exact(s)? {
        (d, "") => Some(d),
        _ => None,
    }
}

/// A DATETIME or TIMESTAMP: `YYYY-[M]M-[D]D[( |T|t)[H]H:[M]M:[S]S[.F{1,6}]]` and, for a
/// TIMESTAMP, a zone: `Z`, an offset right after the time (`+9`, `+09:00`, `+0900`),
/// ` UTC`, or one space and a tz database name. `zone` is `None` when the string has
/// none.
pub(crate) fn datetime(s: &str) -> Option<(NaiveDateTime, Option<Zone>)> {
    let (date, rest) = ymd_exact(s)?;
    if rest.is_empty() {
        return Some((date.and_hms_opt(0, 0, 0)?, None));
    }
    let rest = rest.strip_prefix([' ', 'T', 't'])?;
    let mut parts = rest.splitn(3, ':');
    let (h, m, tail) = (parts.next()?, parts.next()?, parts.next()?);
    let s_len = tail.bytes().take_while(u8::is_ascii_digit).count();
    if !(1..=2).contains(&h.len())
        || !digits(h)
        || !(1..=2).contains(&m.len())
        || !digits(m)
        || !(1..=2).contains(&s_len)
    {
        return None;
    }
    let sec: u32 = tail[..s_len].parse().ok()?;
    let mut tail = &tail[s_len..];
    let mut micros = 0u32;
    if let Some(f) = tail.strip_prefix('.') {
        let f_len = f.bytes().take_while(u8::is_ascii_digit).count();
        if !(1..=6).contains(&f_len) {
            return None;
        }
        micros = fraction_micros(&f[..f_len])?;
        tail = &f[f_len..];
    }
    // :60 is a leap second: the next minute.
    let leap = sec == 60;
    let time = NaiveTime::from_hms_micro_opt(
        h.parse().ok()?,
        m.parse().ok()?,
        if leap { 59 } else { sec },
        micros,
    )?;
    let mut local = date.and_time(time);
    if leap {
        local = local.checked_add_signed(Duration::seconds(1))?;
    }
    let zone = match tail {
        "" => None,
        "Z" | "z" => Some(Zone::Offset(0)),
        t if t.starts_with(['+', '-']) => Some(Zone::Offset(offset(t)?)),
        t => {
            let name = t.strip_prefix(' ')?;
            if name == "UTC" {
                Some(Zone::Offset(0))
            } else if name.starts_with(|c: char| c.is_ascii_alphabetic()) {
                Some(Zone::Named(Tz::from_str(name).ok()?))
            } else {
                return None;
            }
        }
    };
    Some((local, zone))
}
