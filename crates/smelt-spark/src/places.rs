//! Where a pipeline's tables are, as the cluster sees them: path-based Delta tables under the
//! lake (``delta.`<lake>/<schema>/<table>` ``) or at their `tables:` place, and Iceberg
//! tables of the pipeline's catalogs (`` `catalog`.`namespace`.`table` ``, the catalogs
//! registered in the session). The paths are the cluster's to resolve: smelt never opens
//! them itself.

use smelt_engine::{EngineError, Result};
use smelt_spec::{Pipeline, TableName};

use crate::sql::delta_path;

/// The places of a pipeline's tables.
#[derive(Debug, Clone)]
pub struct Places {
    /// The lake root, without a trailing slash.
    lake: String,
    tables: Vec<(TableName, String)>,
    /// The pipeline, for the change feeds of the tables its flows create.
    pipeline: std::sync::Arc<Pipeline>,
}

impl Places {
    /// The lake root.
    pub(crate) fn lake(&self) -> &str {
        &self.lake
    }

    /// The places of `pipeline`'s tables. A local lake folder becomes an absolute path: the
    /// cluster does not run where smelt does.
    pub fn new(pipeline: &Pipeline) -> Result<Self> {
        Ok(Self {
            lake: absolute(&pipeline.lake)?,
            tables: pipeline
                .tables
                .iter()
                .map(|(name, place)| Ok((name.clone(), absolute(place)?)))
                .collect::<Result<_>>()?,
            pipeline: std::sync::Arc::new(pipeline.clone()),
        })
    }

    /// Whether `table`, created by a flow, keeps a change feed
    /// ([`Pipeline::change_feed`]).
    pub fn feed(&self, table: &TableName) -> bool {
        self.pipeline.change_feed(table).on()
    }

    /// The folder or URL of `table` (an Iceberg table: its name; its catalog knows where).
    pub fn location(&self, table: &TableName) -> String {
        if table.catalog.is_some() {
            return table.to_string();
        }
        match self.tables.iter().find(|(name, _)| name == table) {
            Some((_, place)) => place.clone(),
            None => format!("{}/{}/{}", self.lake, table.schema, table.table),
        }
    }

    /// `table` in Spark SQL: ``delta.`<location>` ``, or an Iceberg table by its name.
    pub fn sql(&self, table: &TableName) -> String {
        match table.catalog {
            Some(_) => crate::sql::table_sql(table),
            None => delta_path(&self.location(table)),
        }
    }
}

/// `place` without a trailing slash; a local folder made absolute.
fn absolute(place: &str) -> Result<String> {
    let place = place.trim_end_matches('/');
    if place.contains("://") {
        return Ok(place.to_string());
    }
    let path = std::path::absolute(place).map_err(|e| {
        EngineError::storage(format!("cannot resolve the lake folder `{place}`"), e)
    })?;
    Ok(path.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_resolve_under_the_lake_or_at_their_place() {
        let yaml = "lake: s3://bucket/lake/\ntables:\n  raw.p: s3://other/p\nflows: {}\n";
        let pipeline = Pipeline::from_str(yaml, "smelt.yaml".as_ref()).unwrap();
        let places = Places::new(&pipeline).unwrap();
        assert_eq!(
            places.sql(&TableName::new("silver", "p")),
            "delta.`s3://bucket/lake/silver/p`"
        );
        assert_eq!(places.location(&TableName::new("raw", "p")), "s3://other/p");
        let local =
            Pipeline::from_str("lake: lake\nflows: {}\n", "dir/smelt.yaml".as_ref()).unwrap();
        let at = Places::new(&local)
            .unwrap()
            .location(&TableName::new("a", "b"));
        assert!(at.starts_with('/') && at.ends_with("dir/lake/a/b"), "{at}");
    }
}
