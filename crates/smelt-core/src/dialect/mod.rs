//! The string → typed casts of BigQuery (`SAFE_CAST`) and Spark (`try_cast`, as Databricks
//! runs it with ANSI on), value by value, for `cast_dialect: bigquery | spark`
//! (docs/pipeline.md, "Cast dialects", lists the rules). A string the dialect does
//! not take becomes NULL, and the caller counts it as a failed cast; `lenient` is
//! [`crate::cast`]'s own rules.

use std::str::FromStr;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::DataType;

use chrono::{DateTime, Duration, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;

/// Which engine's rules a string → typed cast follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CastDialect {
    /// smelt's own: trimmed, Arrow's parsers, booleans in the common spellings.
    #[default]
    Lenient,
    /// BigQuery's `SAFE_CAST`.
    BigQuery,
    /// Spark's `try_cast` (Databricks with ANSI on).
    Spark,
}

/// A time zone a timestamp string names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Zone {
    /// A fixed offset from UTC, in seconds.
    Offset(i32),
    /// A tz database zone.
    Named(Tz),
}

impl Zone {
    /// The instant of `local` in this zone (the earlier one when the local time is
    /// ambiguous), `None` when the local time does not exist there.
    pub(crate) fn to_utc(self, local: NaiveDateTime) -> Option<DateTime<Utc>> {
        match self {
            Zone::Offset(secs) => local
                .checked_sub_signed(Duration::seconds(secs as i64))
                .map(|utc| DateTime::from_naive_utc_and_offset(utc, Utc)),
            Zone::Named(tz) => match tz.from_local_datetime(&local).earliest() {
                Some(t) => Some(t.with_timezone(&Utc)),
                // In a gap (the clocks jumped forward): the offset from before the jump,
                // as Spark and BigQuery read it.
                None => {
                    let before = local.checked_sub_signed(Duration::hours(3))?;
                    let offset = tz.offset_from_local_datetime(&before).earliest()?.fix();
                    local
                        .checked_sub_signed(Duration::seconds(offset.local_minus_utc() as i64))
                        .map(|utc| DateTime::from_naive_utc_and_offset(utc, Utc))
                }
            },
        }
    }

    /// The zone a flow's `tz` names (`None`: UTC).
    pub(crate) fn of_flow(tz: Option<&str>) -> Option<Zone> {
        match tz {
            None | Some("UTC") | Some("Z") => Some(Zone::Offset(0)),
            Some(name) => offset_within(name, 18)
                .map(Zone::Offset)
                .or_else(|| Tz::from_str(name).ok().map(Zone::Named)),
        }
    }
}

/// `+H`, `+HH`, `+H:MM`, `+HH:MM` or `+HHMM` (either sign) as seconds, within ±14:00
/// (BigQuery's limit; [`offset_within`] takes another).
fn offset(s: &str) -> Option<i32> {
    offset_within(s, 14)
}

/// [`offset`] within ±`max_hours`:00.
fn offset_within(s: &str, max_hours: i32) -> Option<i32> {
    let (sign, rest) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => return None,
    };
    let (h, m) = match rest.split_once(':') {
        Some((h, m)) if (1..=2).contains(&m.len()) => (h, m),
        Some(_) => return None,
        None if rest.len() == 4 && digits(rest) => (&rest[..2], &rest[2..]),
        None => (rest, "0"),
    };
    if !(1..=2).contains(&h.len()) || !digits(h) || !digits(m) {
        return None;
    }
    let (h, m): (i32, i32) = (h.parse().ok()?, m.parse().ok()?);
    (m < 60 && h * 60 + m <= max_hours * 60).then_some(sign * (h * 3600 + m * 60))
}

/// Up to six fraction digits as microseconds (`"5"` → 500000).
fn fraction_micros(digits: &str) -> Option<u32> {
    let value: u32 = digits.parse().ok()?;
    Some(value * 10u32.pow(6 - digits.len() as u32))
}

/// Non-empty and only ASCII digits.
fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// A number in `[+|-]digits[.digits][(e|E)[+|-]digits]` (or `.digits`, `digits.`) as text
/// with exactly `scale` fractional digits, rounded half away from zero (BigQuery's NUMERIC
/// rounding and Java's `ROUND_HALF_UP`); `None` when `s` is not such a number.
pub(crate) fn decimal_text(s: &str, scale: i8) -> Option<String> {
    let (negative, int, frac, exponent) = number_parts(s)?;
    // Digits before the point: past 77 no decimal type holds the value (and a huge
    // exponent must not make a huge string).
    let significant = int.trim_start_matches('0');
    if significant.len() as i64 + exponent > 77 {
        return None;
    }
    let all: Vec<u8> = int.bytes().chain(frac.bytes()).map(|b| b - b'0').collect();
    round_digits(negative, &all, int.len() as i64 + exponent, scale)
}

/// `[+|-]digits[.digits][(e|E)[+|-]digits]` (or `.digits`, `digits.`): the sign, the
/// integer and fraction digits and the exponent; `None` when `s` is not such a number.
pub(crate) fn number_parts(s: &str) -> Option<(bool, &str, &str, i64)> {
    let (negative, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => {
            let e = &body[i + 1..];
            let e_digits = e.strip_prefix(['+', '-']).unwrap_or(e);
            if !digits(e_digits) || e_digits.len() > 6 {
                return None;
            }
            (&body[..i], e.parse::<i64>().ok()?)
        }
        None => (body, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if (int.is_empty() && frac.is_empty())
        || !(int.is_empty() || digits(int))
        || !(frac.is_empty() || digits(frac))
    {
        return None;
    }
    Some((negative, int, frac, exponent))
}

/// The digits `all` with the point after `point` of them, rounded half away from zero to
/// `scale` fractional digits, as text.
fn round_digits(negative: bool, all: &[u8], point: i64, scale: i8) -> Option<String> {
    let scale = scale.max(0) as i64;
    // Digits kept: those before point + scale.
    let keep = point + scale;
    let mut kept: Vec<u8> = if keep <= 0 {
        Vec::new()
    } else {
        (0..keep)
            .map(|i| all.get(i as usize).copied().unwrap_or(0))
            .collect()
    };
    let next = if keep < 0 {
        0
    } else {
        all.get(keep as usize).copied().unwrap_or(0)
    };
    if next >= 5 {
        // Carry.
        let mut i = kept.len();
        loop {
            if i == 0 {
                kept.insert(0, 1);
                break;
            }
            i -= 1;
            if kept[i] == 9 {
                kept[i] = 0;
            } else {
                kept[i] += 1;
                break;
            }
        }
    }
    while kept.len() < scale as usize + 1 {
        kept.insert(0, 0);
    }
    let split = kept.len() - scale as usize;
    let int_text: String = kept[..split].iter().map(|d| (b'0' + d) as char).collect();
    let int_text = int_text.trim_start_matches('0');
    let frac_text: String = kept[split..].iter().map(|d| (b'0' + d) as char).collect();
    let zero = int_text.is_empty() && frac_text.bytes().all(|b| b == b'0');
    let mut out = String::new();
    if negative && !zero {
        out.push('-');
    }
    out.push_str(if int_text.is_empty() { "0" } else { int_text });
    if scale > 0 {
        out.push('.');
        out.push_str(&frac_text);
    }
    Some(out)
}

/// `YYYY-[M]M-[D]D` with a four-digit year (BigQuery's DATE), and what follows it.
fn ymd_exact(s: &str) -> Option<(NaiveDate, &str)> {
    let b = s.as_bytes();
    if b.len() < 8 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return None;
    }
    let rest = &s[5..];
    let m_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    if !(1..=2).contains(&m_len) || rest.as_bytes().get(m_len) != Some(&b'-') {
        return None;
    }
    let after = &rest[m_len + 1..];
    let d_len = after.bytes().take_while(u8::is_ascii_digit).count();
    if !(1..=2).contains(&d_len) {
        return None;
    }
    let year: i32 = s[..4].parse().ok()?;
    if year < 1 {
        return None;
    }
    let date = NaiveDate::from_ymd_opt(
        year,
        rest[..m_len].parse().ok()?,
        after[..d_len].parse().ok()?,
    )?;
    Some((date, &after[d_len..]))
}

pub(crate) mod bigquery;

pub(crate) mod spark;

/// Casts strings to `target` by `dialect`'s rules: `None` for a target the dialect leaves
/// to [`crate::cast`]'s (strings, bytes, nested types) or for `Lenient`. A blank string is
/// NULL, as in every dialect of smelt (a bronze convention, not a failure).
pub(crate) fn cast_strings(
    input: &ArrayRef,
    target: &DataType,
    tz: Option<&str>,
    dialect: CastDialect,
) -> crate::Result<Option<ArrayRef>> {
    use arrow::array::{BooleanArray, Date32Array, Float64Array, Int64Array, StringArray};
    use arrow::datatypes::TimeUnit;
    let bigquery = match dialect {
        CastDialect::Lenient => return Ok(None),
        CastDialect::BigQuery => true,
        CastDialect::Spark => false,
    };
    let strings = arrow::compute::cast(input, &DataType::Utf8)?;
    let strings = strings.as_string::<i32>();
    let values = || strings.iter().map(|v| v.filter(|s| !s.trim().is_empty()));
    let safe = CastOptions {
        safe: true,
        ..CastOptions::default()
    };
    let array: ArrayRef = match target {
        DataType::Boolean => Arc::new(
            values()
                .map(|v| {
                    v.and_then(if bigquery {
                        bigquery::boolean
                    } else {
                        spark::boolean
                    })
                })
                .collect::<BooleanArray>(),
        ),
        t if t.is_integer() => {
            let wide: Int64Array = values()
                .map(|v| {
                    v.and_then(if bigquery {
                        bigquery::integer
                    } else {
                        spark::integer
                    })
                })
                .collect();
            // Out of a narrower type's range: NULL.
            cast_with_options(&wide, t, &safe)?
        }
        DataType::Float16 | DataType::Float32 | DataType::Float64 => {
            let wide: Float64Array = values()
                .map(|v| {
                    v.and_then(if bigquery {
                        bigquery::float
                    } else {
                        spark::float
                    })
                })
                .collect();
            cast_with_options(&wide, target, &safe)?
        }
        DataType::Decimal32(_, scale)
        | DataType::Decimal64(_, scale)
        | DataType::Decimal128(_, scale)
        | DataType::Decimal256(_, scale) => {
            let text: StringArray = values()
                .map(|v| {
                    v.and_then(|s| {
                        if bigquery {
                            bigquery::decimal(s, *scale)
                        } else {
                            spark::decimal(s, *scale)
                        }
                    })
                })
                .collect();
            // Exact digits at the target's scale: only the precision can fail (NULL).
            cast_with_options(&text, target, &safe)?
        }
        DataType::Date32 => {
            let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).expect("a date");
            let days: Date32Array = values()
                .map(|v| {
                    v.and_then(if bigquery {
                        bigquery::date
                    } else {
                        spark::date
                    })
                    .map(|d| (d - epoch).num_days() as i32)
                })
                .collect();
            Arc::new(days)
        }
        DataType::Timestamp(unit, zoned) => {
            let flow_zone = Zone::of_flow(tz);
            let micros: arrow::array::TimestampMicrosecondArray = values()
                .map(|v| {
                    let (local, zone) = v.and_then(if bigquery {
                        bigquery::datetime
                    } else {
                        spark::datetime
                    })?;
                    let at = match (zoned, zone) {
                        // An instant: the string's zone, else the flow's (BigQuery's range:
                        // years 1 to 9999 in UTC).
                        (Some(_), zone) => {
                            let utc = zone.or(flow_zone)?.to_utc(local)?.naive_utc();
                            if bigquery && !(1..=9999).contains(&chrono::Datelike::year(&utc)) {
                                return None;
                            }
                            utc
                        }
                        // BigQuery's DATETIME takes no zone; Spark's TIMESTAMP_NTZ drops it.
                        (None, Some(_)) if bigquery => return None,
                        (None, _) => local,
                    };
                    Some(at.and_utc().timestamp_micros())
                })
                .collect();
            let micros: ArrayRef = match zoned {
                Some(_) => Arc::new(micros.with_timezone("UTC")),
                None => Arc::new(micros),
            };
            let labelled = DataType::Timestamp(*unit, zoned.as_ref().map(|_| Arc::from("UTC")));
            if *unit == TimeUnit::Microsecond {
                micros
            } else {
                cast_with_options(&micros, &labelled, &safe)?
            }
        }
        _ => return Ok(None),
    };
    Ok(Some(array))
}

#[cfg(test)]
mod tests;
