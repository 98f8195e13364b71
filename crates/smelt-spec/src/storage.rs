//! `storage:`: how long smelt waits for an object store and how often it retries, for
//! every store a pipeline reaches (lake tables, Iceberg files, landings, export targets).
//!
//! ```yaml
//! storage:
//!   timeout: 30s          # one request, from sending it to its last byte
//!   connect_timeout: 5s   # opening a connection
//!   retries: 10           # of one request that failed in a way worth retrying
//!   retry_timeout: 3m     # all the tries of one request
//! ```
//!
//! The defaults are `object_store`'s, the client delta-rs and smelt use. A request is retried
//! when the connection failed, the server answered 5xx, 429 or 408, or a read timed out;
//! never on 4xx such as a refused credential. A request therefore ends, answered or not,
//! within about `retry_timeout` + `timeout`.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::check::parse_duration;
use crate::error::SpecError;
use crate::locate::line_of;

/// The request policy of every object store a pipeline opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreSettings {
    /// One request, from sending it to its last byte (`timeout`).
    pub timeout: Duration,
    /// Opening a connection (`connect_timeout`).
    pub connect_timeout: Duration,
    /// Retries of one request (`retries`).
    pub retries: usize,
    /// All the tries of one request (`retry_timeout`).
    pub retry_timeout: Duration,
}

impl Default for StoreSettings {
    /// `object_store`'s own defaults.
    fn default() -> Self {
        StoreSettings {
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            retries: 10,
            retry_timeout: Duration::from_secs(180),
        }
    }
}

impl StoreSettings {
    /// The client options (`object_store`'s `ClientConfigKey` names, which every store's
    /// builder and delta-rs' storage options accept) that carry the timeouts.
    pub fn client_options(&self) -> [(&'static str, String); 2] {
        [
            ("timeout", format!("{}s", self.timeout.as_secs())),
            (
                "connect_timeout",
                format!("{}s", self.connect_timeout.as_secs()),
            ),
        ]
    }

    /// Every option as delta-rs takes it: the client options and its retry options
    /// (`max_retries`, `retry_timeout`).
    pub fn delta_options(&self) -> Vec<(String, String)> {
        let mut options: Vec<(String, String)> = self
            .client_options()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        options.push(("max_retries".into(), self.retries.to_string()));
        options.push((
            "retry_timeout".into(),
            format!("{}s", self.retry_timeout.as_secs()),
        ));
        options
    }
}

/// `storage:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStorage {
    timeout: Option<String>,
    connect_timeout: Option<String>,
    retries: Option<usize>,
    retry_timeout: Option<String>,
}

/// The settings of `raw`, errors for values that are not durations or are zero.
pub(crate) fn store_settings(
    path: &Path,
    text: &str,
    raw: Option<RawStorage>,
    errors: &mut Vec<SpecError>,
) -> StoreSettings {
    let mut settings = StoreSettings::default();
    let Some(raw) = raw else {
        return settings;
    };
    let mut duration = |key: &str, value: Option<String>, into: &mut Duration| {
        let Some(value) = value else { return };
        match parse_duration(&value) {
            Some(d) if !d.is_zero() => *into = d,
            _ => errors.push(
                SpecError::new(
                    path,
                    format!("storage.{key}"),
                    format!("`{value}` is not a duration of at least a second"),
                )
                .at(line_of(text, &["storage", key]))
                .hint("write a number with a unit: `30s`, `2m`"),
            ),
        }
    };
    duration("timeout", raw.timeout, &mut settings.timeout);
    duration(
        "connect_timeout",
        raw.connect_timeout,
        &mut settings.connect_timeout,
    );
    duration(
        "retry_timeout",
        raw.retry_timeout,
        &mut settings.retry_timeout,
    );
    if let Some(retries) = raw.retries {
        settings.retries = retries;
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(yaml: &str) -> (StoreSettings, Vec<SpecError>) {
        let raw: RawStorage = serde_norway::from_str(yaml).unwrap();
        let mut errors = Vec::new();
        let text = format!("storage:\n{}", yaml.replace('\n', "\n  "));
        let s = store_settings(Path::new("smelt.yaml"), &text, Some(raw), &mut errors);
        (s, errors)
    }

    #[test]
    fn defaults_are_object_stores() {
        let d = StoreSettings::default();
        let os = (Duration::from_secs(30), Duration::from_secs(5), 10, 180);
        assert_eq!(
            (
                d.timeout,
                d.connect_timeout,
                d.retries,
                d.retry_timeout.as_secs()
            ),
            os
        );
    }

    #[test]
    fn written_values_replace_the_defaults_and_reach_the_options() {
        let (s, errors) = settings("timeout: 2s\nretries: 1\nretry_timeout: 1m");
        assert!(errors.is_empty());
        assert_eq!(
            s.delta_options(),
            [
                ("timeout".to_string(), "2s".to_string()),
                ("connect_timeout".into(), "5s".into()),
                ("max_retries".into(), "1".into()),
                ("retry_timeout".into(), "60s".into()),
            ]
        );
    }

    #[test]
    fn a_value_that_is_no_duration_is_named() {
        let (_, errors) = settings("timeout: soon\nconnect_timeout: 0s");
        let fields: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(errors.len(), 2, "{fields:?}");
        assert!(fields[0].contains("storage.timeout"), "{fields:?}");
        assert!(fields[1].contains("storage.connect_timeout"), "{fields:?}");
    }
}
