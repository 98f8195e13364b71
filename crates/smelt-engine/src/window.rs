//! Replay windows (`smelt run --since … --until … --tz …`, seed 000's `start_ts`/`end_ts`/
//! `days`/`tz`): instants given as timestamps or as durations back from now.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use smelt_core::cast::cast_column;
use smelt_core::change::timestamp_utc;

use crate::{EngineError, Result};

/// Parses `text` as an instant (µs since the epoch, UTC): a duration back from `now_us`
/// (`2d`, `36h`, `90m`), or a timestamp (`2026-07-21`, `2026-07-21 09:00:00`,
/// `2026-07-21T09:00:00+09:00`); a timestamp without an offset is read in `tz` (an IANA
/// name or `+HH:MM`; UTC when `None`). `what` names the option in errors.
pub fn parse_instant(text: &str, tz: Option<&str>, now_us: i64, what: &str) -> Result<i64> {
    if let Some(d) = smelt_spec::parse_duration(text) {
        return Ok(now_us - d.as_micros().min(i64::MAX as u128) as i64);
    }
    let t = text.trim();
    // A bare date is its midnight.
    let t = if t.len() == 10 && t.as_bytes().get(4) == Some(&b'-') {
        format!("{t} 00:00:00")
    } else {
        t.to_string()
    };
    let input: ArrayRef = Arc::new(StringArray::from(vec![t.as_str()]));
    let out = cast_column(&input, &timestamp_utc(), tz).map_err(|e| {
        EngineError::user(
            format!("{what}: {e}"),
            "use a zone such as `Asia/Tokyo` or `+09:00`",
        )
    })?;
    let ts = out
        .array
        .as_primitive_opt::<arrow::datatypes::TimestampMicrosecondType>()
        .filter(|a| a.is_valid(0))
        .map(|a| a.value(0));
    ts.ok_or_else(|| {
        EngineError::user(
            format!("{what}: `{text}` is neither a timestamp nor a duration"),
            "write e.g. `2026-07-21 00:00:00`, `2026-07-21T00:00:00+09:00` or `2d`",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000_000;

    #[test]
    fn durations_timestamps_and_zones() {
        assert_eq!(
            parse_instant("2d", None, NOW, "--since").unwrap(),
            NOW - 2 * 86_400_000_000
        );
        let utc = parse_instant("2026-07-21 00:00:00", None, NOW, "--since").unwrap();
        let tokyo =
            parse_instant("2026-07-21 00:00:00", Some("Asia/Tokyo"), NOW, "--since").unwrap();
        assert_eq!(utc - tokyo, 9 * 3_600_000_000);
        assert_eq!(
            parse_instant("2026-07-21", Some("Asia/Tokyo"), NOW, "--since").unwrap(),
            tokyo
        );
        let offset =
            parse_instant("2026-07-21T00:00:00+09:00", Some("UTC"), NOW, "--since").unwrap();
        assert_eq!(offset, tokyo, "an explicit offset wins over --tz");
        let e = parse_instant("yesterday", None, NOW, "--since").unwrap_err();
        assert!(
            e.to_string().contains("--since: `yesterday` is neither"),
            "{e}"
        );
    }
}
