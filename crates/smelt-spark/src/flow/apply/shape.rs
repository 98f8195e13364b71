//! The columns of an apply flow as its statements name them: silver's columns from the DDL,
//! which are keys, data and audit columns, how each is cast from bronze, and the sequence as
//! it is read (`__v<i>`, `_commit_timestamp`), stored in silver and kept in tombstones.

use smelt_spec::{ApplyFlow, ColumnDef, ColumnType, TableDef, UpdateColumns};
use smelt_spec::{COMMIT_TIMESTAMP, END_AT, START_AT};

use crate::sql::{ident, spark_type};

/// One column of the sequence.
#[derive(Debug, Clone)]
pub(crate) struct SeqCol {
    /// Its value on a change (a column of `smelt_changes`).
    pub(crate) read: String,
    /// The silver column that stores it.
    pub(crate) stored: String,
    /// Whether it is a key column (then the tombstone holds it as a key).
    pub(crate) is_key: bool,
    /// Its type.
    pub(crate) ty: ColumnType,
}

/// The columns of one apply flow.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    /// Silver's columns, in order (audit columns included).
    pub(crate) silver: TableDef,
    /// Indexes of the key columns.
    pub(crate) keys: Vec<usize>,
    /// Indexes of the data columns (neither key nor audit).
    pub(crate) data: Vec<usize>,
    /// The ingest-timestamp audit column.
    pub(crate) ingest: Option<String>,
    /// The sequence.
    pub(crate) seq: Vec<SeqCol>,
    /// Data columns an update sets.
    pub(crate) updates: UpdateColumns,
    /// Indexes of the columns the stored silver lacks (this run adds them).
    pub(crate) absent: Vec<usize>,
    /// `scd: 2`: the history columns and the data columns whose change starts a version.
    pub(crate) history: Option<History>,
}

/// The history columns of an SCD2 silver.
#[derive(Debug, Clone)]
pub(crate) struct History {
    /// Index of `__START_AT`.
    pub(crate) start: usize,
    /// Index of `__END_AT`.
    pub(crate) end: usize,
    /// Indexes of the data columns a change of which starts a new version (`track_history`).
    pub(crate) tracked: Vec<usize>,
}

impl Shape {
    /// The shape of `spec` (whose `silver` is set: the engine refuses flows without).
    pub(crate) fn new(spec: &ApplyFlow, silver: &TableDef) -> Self {
        let audit = |name: &str| {
            spec.audit.ingest_timestamp.as_deref() == Some(name)
                || spec.audit.update_timestamp.as_deref() == Some(name)
        };
        let index = |name: &str| silver.columns.iter().position(|c| c.name == name);
        let keys: Vec<usize> = spec.keys.iter().filter_map(|k| index(k)).collect();
        let bound = |name: &str| spec.scd == 2 && (name == START_AT || name == END_AT);
        let data: Vec<usize> = (0..silver.columns.len())
            .filter(|i| {
                let name = &silver.columns[*i].name;
                !keys.contains(i) && !audit(name) && !bound(name)
            })
            .collect();
        let history = match (spec.scd, index(START_AT), index(END_AT)) {
            (2, Some(start), Some(end)) => Some(History {
                start,
                end,
                tracked: data
                    .iter()
                    .copied()
                    .filter(|&i| spec.history.updates(&silver.columns[i].name))
                    .collect(),
            }),
            _ => None,
        };
        let ingest = spec.audit.ingest_timestamp.clone();
        let seq = spec
            .sequence_by
            .iter()
            .map(|s| {
                if s == COMMIT_TIMESTAMP {
                    SeqCol {
                        read: COMMIT_TIMESTAMP.to_string(),
                        stored: ingest.clone().unwrap_or_default(),
                        is_key: false,
                        ty: ColumnType::Timestamp,
                    }
                } else {
                    let i = index(s).unwrap_or(0);
                    SeqCol {
                        read: format!("__v{i}"),
                        stored: s.clone(),
                        is_key: keys.contains(&i),
                        ty: silver.columns[i].ty,
                    }
                }
            })
            .collect();
        Self {
            silver: silver.clone(),
            keys,
            data,
            ingest,
            seq,
            updates: spec.update_columns.clone(),
            absent: Vec::new(),
            history,
        }
    }

    /// The shape with `added` columns the stored silver lacks (read as NULL).
    pub(crate) fn adding(mut self, added: &[ColumnDef]) -> Self {
        self.absent = added
            .iter()
            .filter_map(|a| self.silver.columns.iter().position(|c| c.name == a.name))
            .collect();
        self
    }

    /// The columns cast from bronze: every silver column but the audit columns.
    pub(crate) fn cast_columns(&self) -> impl Iterator<Item = usize> + '_ {
        self.keys.iter().chain(self.data.iter()).copied()
    }

    /// Whether a change's NOT NULL key column is NULL (it is rejected), over the typed
    /// values `__v<i>`.
    pub(crate) fn null_key(&self) -> String {
        let null: Vec<String> = self
            .keys
            .iter()
            .filter(|&&i| !self.silver.columns[i].nullable)
            .map(|i| format!("__v{i} IS NULL"))
            .chain(["false".to_string()])
            .collect();
        format!("({})", null.join(" OR "))
    }

    /// The name of column `i`, quoted.
    pub(crate) fn name(&self, i: usize) -> String {
        ident(&self.silver.columns[i].name)
    }

    /// The tombstone table's columns: keys, the stored sequence columns that are not keys,
    /// `_deleted_at`.
    pub(crate) fn tombstone_columns(&self) -> Vec<(String, String, bool)> {
        let mut cols: Vec<(String, String, bool)> = self
            .keys
            .iter()
            .map(|&i| {
                let c = &self.silver.columns[i];
                (c.name.clone(), spark_type(c.ty), c.nullable)
            })
            .collect();
        for s in self.seq.iter().filter(|s| !s.is_key) {
            cols.push((s.stored.clone(), spark_type(s.ty), true));
        }
        cols.push((DELETED_AT.to_string(), "TIMESTAMP".to_string(), false));
        cols
    }
}

pub(crate) use smelt_rules::tables::DELETED_AT;

/// `a` newer than `b`, column by column, NULL below every value (DESIGN §3: the guard).
pub(crate) fn newer(a: &[String], b: &[String]) -> String {
    let mut out = String::from("false");
    for (x, y) in a.iter().zip(b).rev() {
        let gt = format!("({x} IS NOT NULL AND ({y} IS NULL OR {x} > {y}))");
        out = format!("({gt} OR ({x} <=> {y} AND {out}))");
    }
    out
}

/// The key columns as text, named as the keys.
pub(crate) fn key_texts(shape: &Shape) -> Vec<String> {
    shape
        .keys
        .iter()
        .map(|&k| format!("CAST({0} AS STRING) AS {0}", shape.name(k)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_compares_column_by_column_with_null_lowest() {
        let sql = newer(&["a1".into()], &["b1".into()]);
        assert_eq!(
            sql,
            "((a1 IS NOT NULL AND (b1 IS NULL OR a1 > b1)) OR (a1 <=> b1 AND false))"
        );
        let two = newer(&["a1".into(), "a2".into()], &["b1".into(), "b2".into()]);
        assert!(two.contains("a1 <=> b1 AND ((a2 IS NOT NULL"), "{two}");
    }
}
