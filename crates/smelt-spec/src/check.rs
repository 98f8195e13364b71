//! Checks shared by the flow validators: [`Checks`], which locates and collects the
//! problems of one flow block, and the table-definition, time-zone, duration and
//! column-pair helpers.

use std::path::{Path, PathBuf};

use crate::ddl::{self, TableDef, TableName};
use crate::error::SpecError;
use crate::locate::line_of;
use crate::policy::{OnCastError, UpdateColumns};

/// Shared checks of one flow block: where problems go and how they are located.
pub(crate) struct Checks<'a> {
    pub(crate) path: &'a Path,
    pub(crate) text: &'a str,
    pub(crate) flow: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) errors: &'a mut Vec<SpecError>,
}

impl Checks<'_> {
    pub(crate) fn at(&self, leaf: &str) -> Option<usize> {
        line_of(self.text, &["flows", self.flow, self.kind, leaf])
    }

    pub(crate) fn field(&self, leaf: &str) -> String {
        format!("flows.{}.{}.{leaf}", self.flow, self.kind)
    }

    pub(crate) fn error(&mut self, leaf: &str, message: impl Into<String>, hint: &str) {
        let e = SpecError::new(self.path, self.field(leaf), message)
            .at(self.at(leaf).or_else(|| self.at("")))
            .hint(hint);
        self.errors.push(e);
    }

    pub(crate) fn table(&mut self, leaf: &str, value: &str) -> Option<TableName> {
        let t = TableName::parse(value);
        if t.is_none() {
            self.error(
                leaf,
                format!("`{value}` is not a table name"),
                "write tables as `schema.table`, e.g. `silver.sales`",
            );
        }
        t
    }

    pub(crate) fn ddl(&mut self, dir: &Path, file: &Option<PathBuf>) -> Option<TableDef> {
        let file = dir.join(file.as_ref()?);
        let (field, at) = (self.field("schema"), self.at("schema"));
        read_table_def(self.path, &file, &field, at, self.errors)
    }

    pub(crate) fn zone(&mut self, leaf: &str, zone: &Option<String>) {
        if let Some(z) = zone
            && !valid_zone(z)
        {
            self.error(
                leaf,
                format!("unknown time zone `{z}`"),
                "use an IANA name such as `Asia/Tokyo` or an offset such as `+09:00`",
            );
        }
    }

    pub(crate) fn cast_policy(&mut self, policy: Option<OnCastError>) -> OnCastError {
        let policy = policy.unwrap_or_default();
        if policy == OnCastError::Quarantine {
            self.error(
                "on_cast_error",
                "`on_cast_error: quarantine` is for apply flows",
                "use `null` (count and store NULL) or `fail`",
            );
        }
        policy
    }
}

/// Reads the CREATE TABLE file `file` named by option `field` (at `line`) of `path`.
pub(crate) fn read_table_def(
    path: &Path,
    file: &Path,
    field: &str,
    line: Option<usize>,
    errors: &mut Vec<SpecError>,
) -> Option<TableDef> {
    match std::fs::read_to_string(file) {
        Ok(sql) => match ddl::parse_table(&sql, file) {
            Ok(def) => Some(def),
            Err(es) => {
                errors.extend(es.0);
                None
            }
        },
        Err(e) => {
            errors.push(
                SpecError::new(
                    path,
                    field,
                    format!("cannot read `{}`: {e}", file.display()),
                )
                .at(line)
                .hint("`schema:` is a path to a CREATE TABLE file, relative to the pipeline file"),
            );
            None
        }
    }
}

/// Whether `zone` is an IANA time zone name or a `+HH:MM` offset.
pub(crate) fn valid_zone(zone: &str) -> bool {
    if zone.parse::<chrono_tz::Tz>().is_ok() {
        return true;
    }
    // `+HH`, `+HHMM` or `+HH:MM`, within ±18:00.
    let b = zone.as_bytes();
    if !matches!(b.first(), Some(b'+' | b'-')) || !zone.is_ascii() {
        return false;
    }
    let (h, m) = match zone.len() {
        3 => (&zone[1..3], "00"),
        5 => (&zone[1..3], &zone[3..5]),
        6 if b[3] == b':' => (&zone[1..3], &zone[4..6]),
        _ => return false,
    };
    match (h.parse::<u32>(), m.parse::<u32>()) {
        (Ok(h), Ok(m)) => m < 60 && h * 60 + m <= 18 * 60,
        _ => false,
    }
}

/// Parses a duration written as a number and a unit: `90d`, `12h`, `30m`, `45s`, `2w`.
pub fn parse_duration(text: &str) -> Option<std::time::Duration> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = t.split_at(split);
    let n: u64 = number.parse().ok()?;
    let secs = match unit.trim() {
        "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hour" | "hours" => 3600,
        "d" | "day" | "days" => 86_400,
        "w" | "week" | "weeks" => 7 * 86_400,
        _ => return None,
    };
    Some(std::time::Duration::from_secs(n.checked_mul(secs)?))
}

/// The columns an option pair picks (`column_list` / `except_column_list`,
/// `track_history` / `track_history_except`): one of them, never both.
pub(crate) fn pick_columns(
    only: Option<Vec<String>>,
    except: Option<Vec<String>>,
    (only_leaf, except_leaf): (&str, &str),
    hint: &str,
    (path, text, flow): (&Path, &str, &str),
    errors: &mut Vec<SpecError>,
) -> UpdateColumns {
    match (only, except) {
        (Some(_), Some(_)) => {
            errors.push(
                SpecError::new(
                    path,
                    format!("flows.{flow}.apply.{except_leaf}"),
                    format!("`{only_leaf}` and `{except_leaf}` are both set"),
                )
                .at(line_of(text, &["flows", flow, "apply", except_leaf]))
                .hint(hint),
            );
            UpdateColumns::All
        }
        (Some(c), None) => UpdateColumns::Only(c),
        (None, Some(c)) => UpdateColumns::Except(c),
        (None, None) => UpdateColumns::All,
    }
}

/// URL schemes of the stores tables can be on (landings and exports also take `http(s)`).
pub(crate) const STORE_SCHEMES: [&str; 9] = [
    "file", "s3", "s3a", "gs", "az", "adl", "azure", "abfs", "abfss",
];

/// Whether `url` is a lake location smelt can open: a URL of a store delta-rs writes to.
pub fn check_lake_url(url: &str) -> std::result::Result<(), String> {
    let scheme = url.split_once("://").map(|(s, _)| s).unwrap_or_default();
    if !STORE_SCHEMES.contains(&scheme) {
        return Err(format!("`{scheme}://` is not a storage a lake can be on"));
    }
    url::Url::parse(url).map_err(|e| format!("`{url}` is not a valid URL: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones() {
        for z in ["UTC", "Asia/Tokyo", "+09:00", "-0500", "+09"] {
            assert!(valid_zone(z), "{z}");
        }
        for z in [
            "Mars/Olympus",
            "+9:00:00x",
            "JST9",
            "+99:99",
            "+19:00",
            "+09:60",
        ] {
            assert!(!valid_zone(z), "{z}");
        }
    }
}
