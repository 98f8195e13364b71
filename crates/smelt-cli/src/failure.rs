//! Error rendering: `error: …`, `Caused by:` lines, `hint: …`, and the exit code.

use std::error::Error as _;

use smelt_engine::EngineError;
use smelt_spec::SpecErrors;

/// A failed command, ready to print.
#[derive(Debug)]
pub struct Failure {
    /// Exit code: 1 run failed, 2 usage or spec error.
    pub code: u8,
    /// The headline(s), each with its own next step where it has one (a check's problems).
    pub messages: Vec<(String, Option<String>)>,
    /// The chain of causes.
    pub causes: Vec<String>,
    /// The next step.
    pub hint: Option<String>,
    /// More fields of the JSON error object (a failed run's `run_id` and `flows`, a failed
    /// check's `problems`).
    pub details: serde_json::Map<String, serde_json::Value>,
}

impl Failure {
    /// A usage or spec error (exit 2).
    pub fn usage(message: impl Into<String>, hint: Option<String>) -> Self {
        Self {
            code: 2,
            messages: vec![(message.into(), None)],
            causes: Vec::new(),
            hint,
            details: Default::default(),
        }
    }

    /// Adds `value` to the JSON error object as `key`.
    pub fn with_detail(mut self, key: &str, value: serde_json::Value) -> Self {
        self.details.insert(key.to_string(), value);
        self
    }

    /// The JSON error object every command prints on stdout with `--json`: `error` (the
    /// headlines, one per line), `causes`, `hint`, `exit_code`, then the details.
    pub fn to_json(&self) -> serde_json::Value {
        let mut object = serde_json::Map::new();
        let headlines: Vec<&str> = self.messages.iter().map(|(m, _)| m.as_str()).collect();
        object.insert("error".into(), headlines.join("\n").into());
        object.insert("causes".into(), self.causes.clone().into());
        object.insert("hint".into(), self.hint.clone().into());
        object.insert("exit_code".into(), self.code.into());
        object.extend(self.details.clone());
        serde_json::Value::Object(object)
    }

    /// Prints the failure on stderr.
    pub fn render(&self) {
        use std::io::Write;
        let mut err = std::io::stderr().lock();
        for (m, hint) in &self.messages {
            let _ = writeln!(err, "error: {m}");
            if let Some(hint) = hint {
                let _ = writeln!(err, "  hint: {hint}");
            }
        }
        for c in &self.causes {
            let _ = writeln!(err, "  Caused by: {c}");
        }
        if let Some(h) = &self.hint {
            let _ = writeln!(err, "hint: {h}");
        }
    }
}

impl From<SpecErrors> for Failure {
    fn from(errors: SpecErrors) -> Self {
        let mut messages = Vec::new();
        let mut hints = Vec::new();
        for e in &errors.0 {
            messages.push((e.to_string(), None));
            if let Some(h) = &e.hint {
                hints.push(if errors.0.len() > 1 {
                    format!("{}: {h}", e.field)
                } else {
                    h.clone()
                });
            }
        }
        Self {
            code: 2,
            messages,
            causes: Vec::new(),
            hint: (!hints.is_empty()).then(|| hints.join("\n      ")),
            details: Default::default(),
        }
    }
}

/// The causes below `message`, each once: a cause the message (or a cause before it)
/// already says in full is left out.
fn chain(message: &str, mut source: Option<&(dyn std::error::Error + 'static)>) -> Vec<String> {
    let mut causes: Vec<String> = Vec::new();
    while let Some(e) = source {
        let text = e.to_string();
        if !message.contains(&text) && !causes.iter().any(|c| c.contains(&text)) {
            causes.push(text);
        }
        source = e.source();
    }
    causes
}

impl From<EngineError> for Failure {
    fn from(e: EngineError) -> Self {
        Self::engine(&e, ":")
    }
}

impl Failure {
    /// A flow of a run failed: `flow `x` failed: …`.
    pub fn flow_failed(e: &EngineError) -> Self {
        Self::engine(e, " failed:")
    }

    /// `e`, its flow (if it names one) followed by `joint`, its causes and its hint.
    fn engine(e: &EngineError, joint: &str) -> Self {
        let (flow, error) = e.flow();
        let message = match flow {
            Some(flow) => format!("flow `{flow}`{joint} {error}"),
            None => error.to_string(),
        };
        Self {
            code: 1,
            causes: chain(&message, error.source()),
            messages: vec![(message, None)],
            hint: e.hint().map(str::to_string),
            details: Default::default(),
        }
    }
}

impl From<smelt_delta::Error> for Failure {
    fn from(e: smelt_delta::Error) -> Self {
        let hint = e.hint().map(str::to_string);
        let message = e.to_string();
        let causes = chain(&message, e.source());
        Self {
            code: 1,
            messages: vec![(message, None)],
            causes,
            hint,
            details: Default::default(),
        }
    }
}
