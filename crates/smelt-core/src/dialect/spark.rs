//! Spark's `try_cast` rules, value by value.

use super::*;

/// Spark's `trimAll`: whitespace and control characters at both ends.
pub(crate) fn trim(s: &str) -> &str {
    s.trim_matches(|c: char| c <= ' ' || c.is_control())
}

/// `t`, `true`, `y`, `yes`, `1` / `f`, `false`, `n`, `no`, `0` in any case, trimmed.
pub(crate) fn boolean(s: &str) -> Option<bool> {
    match trim(s).to_ascii_lowercase().as_str() {
        "t" | "true" | "y" | "yes" | "1" => Some(true),
        "f" | "false" | "n" | "no" | "0" => Some(false),
        _ => None,
    }
}

/// An integer: decimal digits after an optional sign, trimmed; no point (ANSI).
pub(crate) fn integer(s: &str) -> Option<i64> {
    let t = trim(s);
    let body = t.strip_prefix(['+', '-']).unwrap_or(t);
    if !digits(body) {
        return None;
    }
    t.parse::<i64>().ok()
}

/// A DOUBLE: Java's `Double.parseDouble` (a decimal or exponent number, an `f`/`d`
/// suffix, `NaN`, `Infinity`), then `inf`, `infinity`, `nan` in any case.
pub(crate) fn float(s: &str) -> Option<f64> {
    let t = s.trim_matches(|c: char| c <= ' ');
    let unsigned = t.strip_prefix(['+', '-']).unwrap_or(t);
    let negative = t.starts_with('-');
    match unsigned {
        "NaN" => return Some(f64::NAN),
        "Infinity" => {
            return Some(if negative {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            });
        }
        _ => {}
    }
    let number = t.strip_suffix(['f', 'F', 'd', 'D']).unwrap_or(t);
    if number_parts(number).is_some() {
        return number.parse().ok();
    }
    match trim(s).to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => Some(f64::INFINITY),
        "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
        "nan" => Some(f64::NAN),
        _ => None,
    }
}

/// A DECIMAL as text with `scale` digits: Java's `BigDecimal` grammar, trimmed, rounded
/// half up (away from zero).
pub(crate) fn decimal(s: &str, scale: i8) -> Option<String> {
    decimal_text(s.trim_matches(|c: char| c <= ' '), scale)
}

/// `[+|-]yyyy[y…]` (4 to `max_year` digits), then `-[m]m`, then `-[d]d`; after the day,
/// a space or `T` and the rest. Returns the date and the rest after that separator.
fn date_prefix(t: &str, max_year: usize) -> Option<(NaiveDate, Option<&str>)> {
    let (negative, body) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let y_len = body.bytes().take_while(u8::is_ascii_digit).count();
    if !(4..=max_year).contains(&y_len) {
        return None;
    }
    let year: i32 = body[..y_len].parse().ok()?;
    let year = if negative { -year } else { year };
    let mut rest = &body[y_len..];
    let part = |rest: &mut &str| -> Option<u32> {
        let r = rest.strip_prefix('-')?;
        let n = r.bytes().take_while(u8::is_ascii_digit).count();
        if !(1..=2).contains(&n) {
            return None;
        }
        let v = r[..n].parse().ok()?;
        *rest = &r[n..];
        Some(v)
    };
    if rest.is_empty() {
        return Some((NaiveDate::from_ymd_opt(year, 1, 1)?, None));
    }
    let month = part(&mut rest)?;
    if rest.is_empty() {
        return Some((NaiveDate::from_ymd_opt(year, month, 1)?, None));
    }
    let day = part(&mut rest)?;
    let date = NaiveDate::from_ymd_opt(year, month, day)?;
    match rest.as_bytes().first() {
        None => Some((date, None)),
        Some(b' ' | b'T') => Some((date, Some(&rest[1..]))),
        _ => None,
    }
}

/// A DATE: trimmed; `yyyy`, `yyyy-[m]m`, `yyyy-[m]m-[d]d`, and anything after a space
/// or `T` following the day is ignored.
pub(crate) fn date(s: &str) -> Option<NaiveDate> {
    date_prefix(trim(s), 7).map(|(d, _)| d)
}

/// A TIMESTAMP / TIMESTAMP_NTZ: trimmed; a date as for DATE (4 to 6 year digits), then
/// after a space or `T`, `[h]h[:[m]m[:[s]s[.fraction]]]` (digits past the sixth
/// truncated) and, after the seconds, an optional zone: `Z`, an offset, `UTC`/`GMT`/`UT`
/// with or without an offset, or a tz database name. Spark's three-letter ids (`PST`)
/// and time-only strings are not taken.
pub(crate) fn datetime(s: &str) -> Option<(NaiveDateTime, Option<Zone>)> {
    let (date, rest) = date_prefix(trim(s), 6)?;
    let Some(rest) = rest else {
        return Some((date.and_hms_opt(0, 0, 0)?, None));
    };
    let mut fields = [0u32; 3];
    let mut tail = rest;
    let mut seconds = false;
    for (i, field) in fields.iter_mut().enumerate() {
        if i > 0 {
            match tail.strip_prefix(':') {
                Some(t) => tail = t,
                None => break,
            }
        }
        let n = tail.bytes().take_while(u8::is_ascii_digit).count();
        if !(1..=2).contains(&n) {
            return None;
        }
        *field = tail[..n].parse().ok()?;
        tail = &tail[n..];
        seconds = i == 2;
    }
    let mut micros = 0;
    if seconds && let Some(f) = tail.strip_prefix('.') {
        let n = f.bytes().take_while(u8::is_ascii_digit).count();
        let kept = &f[..n.min(6)];
        micros = if kept.is_empty() {
            0
        } else {
            fraction_micros(kept)?
        };
        tail = &f[n..];
    }
    let time = NaiveTime::from_hms_micro_opt(fields[0], fields[1], fields[2], micros)?;
    let zone_text = tail.trim_matches(' ');
    let zone = if zone_text.is_empty() {
        None
    } else if !seconds {
        return None;
    } else {
        Some(zone(zone_text)?)
    };
    Some((date.and_time(time), zone))
}

/// A zone id as Java's `ZoneId.of` takes it (Spark's `getZoneId`), short ids aside.
fn zone(id: &str) -> Option<Zone> {
    if id == "Z" {
        return Some(Zone::Offset(0));
    }
    // java.time's ZoneOffset: up to ±18:00.
    if id.starts_with(['+', '-']) {
        return offset_within(id, 18).map(Zone::Offset);
    }
    for prefix in ["UTC", "GMT", "UT"] {
        if let Some(rest) = id.strip_prefix(prefix) {
            if rest.is_empty() {
                return Some(Zone::Offset(0));
            }
            if rest.starts_with(['+', '-']) {
                return offset_within(rest, 18).map(Zone::Offset);
            }
        }
    }
    id.contains('/')
        .then(|| Tz::from_str(id).ok())
        .flatten()
        .map(Zone::Named)
}
