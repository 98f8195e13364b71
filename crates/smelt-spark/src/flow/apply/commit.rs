//! Step 4 of a run, the writes: existing tables given the properties the run needs, then
//! tombstones, rejects and silver (with the report), each carrying the watermark; then
//! tombstone expiry. The statements' text is [`write`]'s.

use smelt_engine::Result;
use smelt_engine::flow::apply::tombstone_table;
use smelt_engine::rejects::rejects_table;
use smelt_engine::report::FlowReport;
use smelt_spec::WriteMode;

use super::scd1::write as scd1;
use super::scd2::write as scd2;
use super::{Apply, Shape, State, rejects, tombstones};
use crate::delta::ddl::create_table_with;
use crate::delta::ddl::{self, CHANGE_FEED, DELETION_VECTORS};
use crate::delta::{describe, txn};
use crate::iceberg;
use crate::session::Session;
use crate::sql::{self, spark_type};

impl Apply<'_> {
    /// Step 4: tombstones, silver (with the report), expiry. The watermark's session confs
    /// are reset whatever happens.
    pub(super) async fn write(
        &self,
        s: &Session<'_>,
        shape: &Shape,
        state: &State,
        rebuild: bool,
        report: &mut FlowReport,
    ) -> Result<()> {
        let silver = self.places.sql(&self.spec.into);
        let tombs = self.places.sql(&tombstone_table(&self.spec.into));
        let run_us = self.ctx.run_timestamp_us;
        if self.merge_on_read() {
            let existing = [
                (state.silver.is_some(), &silver),
                (state.tombstones, &tombs),
            ];
            for (_, table) in existing.iter().filter(|(exists, _)| *exists) {
                self.turn_on(s, table, DELETION_VECTORS, "turn deletion vectors on")
                    .await?;
            }
        }
        let delta = self.spec.into.catalog.is_none();
        if state.silver.is_some() && delta && self.places.feed(&self.spec.into) {
            self.turn_on(s, &silver, CHANGE_FEED, "turn the change feed on")
                .await?;
        }
        if rebuild && (report.tombstones_written > 0 || state.tombstones) {
            // A rebuild replaces the tombstones whatever watermark they carry (a killed
            // run may have left them ahead of silver's): without the txn confs.
            s.write(
                None,
                "create the tombstone table",
                tombstones::create_tombstones(&tombs, shape, self.merge_on_read()),
            )
            .await?;
            let sql = match shape.history {
                Some(_) => scd2::overwrite_tombstones(&tombs, shape, run_us),
                None => scd1::overwrite_tombstones(&tombs, shape, run_us),
            };
            s.write(
                Some("before_spark_tombstones"),
                "replace the tombstones",
                sql,
            )
            .await?;
        }
        let written = self
            .write_with_watermark(s, shape, state, rebuild, report)
            .await;
        let iceberg = self.spec.into.catalog.is_some();
        if iceberg {
            self.summary(state).clear(s).await?;
        }
        txn::clear_watermark(s).await?;
        written?;
        if iceberg {
            let rejects = self.places.sql(&rejects_table(&self.spec.into));
            let written = [
                (true, &silver),
                (report.tombstones_written > 0, &tombs),
                (report.quarantined > 0, &rejects),
            ];
            for (_, table) in written.iter().filter(|(w, _)| *w) {
                s.write(
                    Some("before_spark_watermark_property"),
                    "keep the watermark in the table's properties",
                    iceberg::watermark_property(table, self.name, state.bronze_version),
                )
                .await?;
            }
        }
        if let Some(keep) = self.spec.tombstone_retention
            && (state.tombstones || report.tombstones_written > 0)
        {
            let keep = i64::try_from(keep.as_micros()).unwrap_or(i64::MAX);
            let before = run_us.saturating_sub(keep);
            let done = s
                .write(
                    None,
                    "expire old tombstones",
                    tombstones::expire_tombstones(&tombs, before),
                )
                .await?;
            report.tombstones_expired = done
                .map(|r| {
                    r.ints("num_affected_rows")
                        .first()
                        .copied()
                        .flatten()
                        .unwrap_or(0) as usize
                })
                .unwrap_or(0);
        }
        let version = match iceberg {
            true => iceberg::written(s, &silver).await?.map(|m| m.version()),
            false => describe::version_after(s, &silver).await?,
        };
        if let Some(version) = version {
            report.silver_version = Some(version);
        }
        Ok(())
    }

    /// The snapshot summary of an Iceberg silver's writes.
    pub(super) fn summary<'s>(&'s self, state: &State) -> iceberg::Summary<'s> {
        iceberg::Summary {
            flow: self.name,
            version: state.bronze_version,
            run_id: &self.ctx.run_id,
            source: (
                self.spec.from.to_string(),
                state.bronze_meta.as_ref().and_then(|m| m.current),
            ),
        }
    }

    /// Whether silver and the tombstones are written merge-on-read.
    pub(super) fn merge_on_read(&self) -> bool {
        self.spec.write_mode == WriteMode::MergeOnRead
    }

    /// Table property `property` turned on for existing `table` before its writes (a commit
    /// of its own, once: a rerun finds it on): deletion vectors, so that Delta marks the
    /// rows a `MERGE` replaces or deletes instead of rewriting their files
    /// (`write_mode: merge_on_read`); the change feed of a table a flow now reads.
    pub(super) async fn turn_on(
        &self,
        s: &Session<'_>,
        table: &str,
        property: &str,
        doing: &str,
    ) -> Result<()> {
        let props = s
            .read(
                "read the table's properties",
                format!("SHOW TBLPROPERTIES {table}"),
            )
            .await?;
        let on = props
            .strings("key")
            .iter()
            .zip(props.strings("value"))
            .any(|(k, v)| {
                k.as_deref() == Some(property) && v.is_some_and(|v| v.eq_ignore_ascii_case("true"))
            });
        if !on {
            s.write(None, doing, ddl::turn_on(table, property)).await?;
        }
        Ok(())
    }

    /// The statements that carry the watermark: tombstones (not in a rebuild), silver.
    pub(super) async fn write_with_watermark(
        &self,
        s: &Session<'_>,
        shape: &Shape,
        state: &State,
        rebuild: bool,
        report: &FlowReport,
    ) -> Result<()> {
        let silver = self.places.sql(&self.spec.into);
        let tombs = self.places.sql(&tombstone_table(&self.spec.into));
        let v = state.bronze_version;
        let iceberg = self.spec.into.catalog.is_some();
        match iceberg {
            true => {
                s.write(
                    None,
                    "create the namespace",
                    iceberg::create_namespace(&self.spec.into),
                )
                .await?;
                let into = self.spec.into.to_string();
                iceberg::check_unmoved(s, (&silver, &into), self.name, state.watermark).await?;
                let report = iceberg::report_json(report)?;
                self.summary(state).set(s, &report).await?;
            }
            false => txn::set_watermark(s, self.name, v, rebuild, state.watermark).await?,
        }
        // An Iceberg table a killed run committed (its watermark is this run's): not written
        // again (Delta skips such a write by its `txn`).
        let rejects_name = rejects_table(&self.spec.into);
        let rejects_done = iceberg
            && report.quarantined > 0
            && iceberg::meta(
                s,
                "read the rejects' watermark",
                &self.places.sql(&rejects_name),
            )
            .await?
            .map(|m| m.watermark(self.name, &rejects_name.to_string()))
            .transpose()?
            .flatten()
            .is_some_and(|w| w >= v);
        let tombstones_done = iceberg && state.tombstones_txn.is_some_and(|t| t >= v);
        if report.quarantined > 0 && !rejects_done {
            let rejects = self.places.sql(&rejects_name);
            s.write(
                None,
                "create the rejects table",
                rejects::create_rejects(&rejects, self.places.feed(&rejects_name)),
            )
            .await?;
            let of = rejects::RejectsOf {
                run_id: &self.ctx.run_id,
                flow: self.name,
                source: &self.spec.from.to_string(),
                run_us: self.ctx.run_timestamp_us,
            };
            let sql =
                rejects::insert_rejects(&rejects, self.written, shape, &state.bronze_columns, &of);
            s.write(
                Some("before_spark_rejects"),
                "quarantine the changes that do not cast or fail expectations",
                sql,
            )
            .await?;
        }
        if !rebuild && report.tombstones_written > 0 && !tombstones_done {
            s.write(
                None,
                "create the tombstone table",
                tombstones::create_tombstones(&tombs, shape, self.merge_on_read()),
            )
            .await?;
            let run_us = self.ctx.run_timestamp_us;
            let sql = match shape.history {
                Some(_) => scd2::merge_tombstones(&tombs, shape, run_us),
                None => scd1::merge_tombstones(&tombs, shape, run_us),
            };
            s.write(Some("before_spark_tombstones"), "write the tombstones", sql)
                .await?;
        }
        s.write(
            None,
            "create the silver table",
            create_silver(
                &silver,
                shape,
                self.merge_on_read(),
                self.places.feed(&self.spec.into),
            ),
        )
        .await?;
        if !iceberg {
            let metadata = txn::commit_metadata(&self.ctx.run_id, self.name, v, report)?;
            s.write_setting(sql::set(txn::USER_METADATA, &metadata))
                .await?;
        }
        let run_us = self.ctx.run_timestamp_us;
        let sql = match (rebuild, &shape.history) {
            (true, None) => scd1::overwrite_silver(&silver, shape),
            (false, None) => scd1::merge_silver(&silver, shape),
            (true, Some(_)) => scd2::overwrite_silver(&silver, shape, run_us),
            (false, Some(_)) => scd2::merge_silver(&silver, shape, run_us),
        };
        s.write(Some("before_spark_silver"), "merge into silver", sql)
            .await?;
        Ok(())
    }
}

/// Silver's `CREATE TABLE IF NOT EXISTS` (with deletion vectors on where `mor`, the change
/// feed where `feed`).
pub(crate) fn create_silver(table: &str, shape: &Shape, mor: bool, feed: bool) -> String {
    let cols: Vec<(String, String, bool)> = shape
        .silver
        .columns
        .iter()
        .map(|c| (c.name.clone(), spark_type(c.ty), c.nullable))
        .collect();
    create_table_with(table, &cols, mor, feed)
}
