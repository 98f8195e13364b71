//! The names an SCD2 run's statements use: silver's columns as the changes carry them
//! (`__v<i>`), the history bounds, the keys and the columns carried from one version to
//! the next.

use crate::flow::apply::Shape;
use crate::flow::apply::shape::History;
use crate::sql::spark_type;

/// The names an SCD2 run's statements use.
pub(super) struct Names<'a> {
    pub(super) shape: &'a Shape,
    pub(super) history: &'a History,
    /// `__k0, __k1, …`
    pub(super) keys: Vec<String>,
    /// The columns carried through the fold: data columns and the ingest audit column.
    pub(super) carried: Vec<usize>,
}

impl<'a> Names<'a> {
    pub(super) fn new(shape: &'a Shape) -> Option<Self> {
        let history = shape.history.as_ref()?;
        let ingest = shape
            .ingest
            .as_deref()
            .and_then(|n| shape.silver.columns.iter().position(|c| c.name == n));
        Some(Self {
            shape,
            history,
            keys: (0..shape.keys.len()).map(|j| format!("__k{j}")).collect(),
            carried: shape.data.iter().copied().chain(ingest).collect(),
        })
    }

    pub(super) fn keys(&self) -> String {
        self.keys.join(", ")
    }

    /// Null-safe equality of the keys of `a` and `b`.
    pub(super) fn on(&self, a: &str, b: &str) -> String {
        self.keys
            .iter()
            .map(|k| format!("{a}.{k} <=> {b}.{k}"))
            .collect::<Vec<_>>()
            .join(" AND ")
    }

    /// The sequence's Spark type (that of `__START_AT`).
    pub(super) fn seq_type(&self) -> String {
        spark_type(self.shape.silver.columns[self.history.start].ty)
    }

    /// `__c<i> …` of the carried columns, each as `value(i)`.
    pub(super) fn carried(&self, value: impl Fn(usize) -> String) -> Vec<String> {
        self.carried
            .iter()
            .map(|&i| format!("{} AS __c{i}", value(i)))
            .collect()
    }

    /// `NULL AS __c<i> …`, typed.
    pub(super) fn null_carried(&self) -> Vec<String> {
        self.carried(|i| format!("CAST(NULL AS {})", self.ty(i)))
    }

    pub(super) fn ty(&self, i: usize) -> String {
        spark_type(self.shape.silver.columns[i].ty)
    }

    /// The data columns as one struct (what makes two versions or two changes differ).
    pub(super) fn data_struct(&self, prefix: &str) -> String {
        struct_of(
            self.shape
                .data
                .iter()
                .map(|i| format!("{prefix}__c{i}"))
                .collect(),
        )
    }

    /// The tracked columns as one struct.
    pub(super) fn tracked_struct(&self) -> String {
        struct_of(
            self.history
                .tracked
                .iter()
                .map(|i| format!("__c{i}"))
                .collect(),
        )
    }

    /// Silver's key columns of `t`, as `__k<j>`.
    pub(super) fn keys_of(&self, t: &str) -> Vec<String> {
        self.shape
            .keys
            .iter()
            .enumerate()
            .map(|(j, &i)| format!("{t}.{} AS __k{j}", self.shape.name(i)))
            .collect()
    }

    /// Null-safe equality of silver's key columns of `t` and the keys of `k`.
    pub(super) fn key_on(&self, t: &str, k: &str) -> String {
        self.shape
            .keys
            .iter()
            .enumerate()
            .map(|(j, &i)| format!("{t}.{} <=> {k}.__k{j}", self.shape.name(i)))
            .collect::<Vec<_>>()
            .join(" AND ")
    }
}

/// `named_struct` of `values` (with a constant first field, so that none is empty).
pub(super) fn struct_of(values: Vec<String>) -> String {
    let mut fields = vec!["'t', true".to_string()];
    fields.extend(
        values
            .iter()
            .enumerate()
            .map(|(i, v)| format!("'c{i}', {v}")),
    );
    format!("named_struct({})", fields.join(", "))
}
