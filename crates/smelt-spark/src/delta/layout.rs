//! How a Delta source's rows are laid out in its files — deletion vectors, partition
//! columns, column mapping — which decides how a run reads them: straight from the Parquet
//! files ([`crate::delta::parquet`]), the partition values from the log and the columns by
//! their physical names, unless the table has deletion vectors, then through Delta's own
//! reader ([`crate::delta::reader`]), which applies them.

use smelt_engine::{EngineError, Result};

use crate::delta::txn::{Action, latest};
use crate::session::Session;

/// A Delta table's layout, as far as reading its rows goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Rows may be marked deleted inside files.
    pub(crate) deletion_vectors: bool,
    /// The partition columns and their Spark types (`date`).
    pub(crate) partitions: Vec<(String, String)>,
    /// Under column mapping, each column's physical name (its name in the files and in the
    /// actions' partition values).
    pub(crate) physical: Vec<(String, String)>,
}

impl Layout {
    /// Whether the rows are read by Delta's reader rather than straight from the files: it
    /// applies deletion vectors, and gives `_metadata.row_index` only on a table that
    /// supports them (or row tracking). Partition values and physical names are applied to
    /// the files' rows by smelt, from the log.
    pub(crate) fn reader(&self) -> bool {
        self.deletion_vectors
    }

    /// Column `column`'s name in the files.
    pub(crate) fn physical<'a>(&'a self, column: &'a str) -> &'a str {
        self.physical
            .iter()
            .find(|(c, _)| c == column)
            .map_or(column, |(_, p)| p.as_str())
    }

    /// The Spark type of partition column `column` (`None`: not a partition column).
    pub(crate) fn partition_type(&self, column: &str) -> Option<&str> {
        self.partitions
            .iter()
            .find(|(c, _)| c == column)
            .map(|(_, t)| t.as_str())
    }
}

/// The layout of the Delta table `table` (its SQL name) at `dir` (its folder).
pub(crate) async fn layout(s: &Session<'_>, table: &str, dir: &str) -> Result<Layout> {
    let props = s
        .read(
            "read the source's properties",
            format!("SHOW TBLPROPERTIES {table}"),
        )
        .await?;
    let mut out = Layout::default();
    let mut mapped = false;
    for (key, value) in props.strings("key").into_iter().zip(props.strings("value")) {
        let (key, value) = (key.unwrap_or_default(), value.unwrap_or_default());
        match key.as_str() {
            "delta.feature.deletionVectors" => out.deletion_vectors = true,
            "delta.enableDeletionVectors" if value.eq_ignore_ascii_case("true") => {
                out.deletion_vectors = true
            }
            "delta.columnMapping.mode" if value != "none" => mapped = true,
            _ => {}
        }
    }
    let described = s
        .read(
            "read the source's partition columns",
            format!("DESCRIBE {table}"),
        )
        .await?;
    out.partitions = partitions(
        &described.strings("col_name"),
        &described.strings("data_type"),
    );
    if mapped {
        let schema = schema_string(s, dir).await?.ok_or_else(|| {
            EngineError::Internal(format!("the log of `{dir}` holds no table schema"))
        })?;
        out.physical = physical_names(&schema)?;
    }
    Ok(out)
}

/// The partition columns of a `DESCRIBE` (names, types): the rows after
/// `# Partition Information` and its `# col_name` header.
fn partitions(names: &[Option<String>], types: &[Option<String>]) -> Vec<(String, String)> {
    let Some(start) = names
        .iter()
        .position(|n| n.as_deref() == Some("# Partition Information"))
    else {
        return Vec::new();
    };
    names[start + 1..]
        .iter()
        .zip(&types[start + 1..])
        .filter_map(|(n, t)| Some((n.clone()?, t.clone()?)))
        .take_while(|(n, _)| !n.is_empty() && (n == "# col_name" || !n.starts_with('#')))
        .filter(|(n, _)| n != "# col_name")
        .collect()
}

/// Each top-level column of Delta schema `schema` (a `metaData.schemaString`) and its
/// physical name.
fn physical_names(schema: &str) -> Result<Vec<(String, String)>> {
    let parsed: serde_json::Value = serde_json::from_str(schema)
        .map_err(|e| EngineError::Internal(format!("a Delta schema that is not JSON: {e}")))?;
    let fields = parsed["fields"].as_array().cloned().unwrap_or_default();
    Ok(fields
        .iter()
        .filter_map(|f| {
            let name = f["name"].as_str()?;
            let physical = f["metadata"]["delta.columnMapping.physicalName"]
                .as_str()
                .unwrap_or(name);
            Some((name.to_string(), physical.to_string()))
        })
        .collect())
}

/// The table's latest `metaData.schemaString`, as Delta's snapshot keeps it (after a log
/// cleanup, in the checkpoint).
async fn schema_string(s: &Session<'_>, dir: &str) -> Result<Option<String>> {
    let action = Action {
        name: "metaData",
        fields: "schemaString: STRING",
        value: "schemaString",
        when: "schemaString IS NOT NULL",
    };
    let rows = latest(s, dir, "read the source's column mapping", action).await?;
    Ok(rows.strings("value").into_iter().flatten().next())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn some(v: &[&str]) -> Vec<Option<String>> {
        v.iter().map(|s| Some(s.to_string())).collect()
    }

    #[test]
    fn partition_columns_are_read_from_describe() {
        let names = some(&["Id", "day", "# Partition Information", "# col_name", "day"]);
        let types = some(&["string", "date", "", "data_type", "date"]);
        assert_eq!(
            partitions(&names, &types),
            vec![("day".to_string(), "date".to_string())]
        );
        assert!(partitions(&some(&["Id"]), &some(&["string"])).is_empty());
    }

    #[test]
    fn physical_names_come_from_the_schema() {
        let schema = r#"{"type":"struct","fields":[{"name":"Id","type":"string","nullable":true,"metadata":{"delta.columnMapping.id":1,"delta.columnMapping.physicalName":"col-9"}},{"name":"v","type":"string","nullable":true,"metadata":{}}]}"#;
        assert_eq!(
            physical_names(schema).unwrap(),
            vec![("Id".into(), "col-9".into()), ("v".into(), "v".into())]
        );
    }
}
