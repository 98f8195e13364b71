//! `smelt optimize` and `smelt vacuum`: table maintenance over the tables a pipeline's flows
//! write, or the ones named.

use serde::Serialize;
use smelt_spec::{FlowKind, Pipeline, TableName};

use crate::flow::apply::tombstone_table;
use crate::ports::{
    FileStores, Lake, OptimizePolicy, OptimizeStats, TableRole, VacuumPlan, VacuumStats,
};
use crate::rejects::rejects_table;
use crate::{EngineError, Result};

/// What optimize did to one table.
#[derive(Debug, Serialize)]
pub struct Optimized {
    /// The table.
    pub table: String,
    /// Why the table was left alone, when it was (chosen implicitly, and not one smelt
    /// maintains).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// What was rewritten.
    #[serde(flatten)]
    pub stats: OptimizeStats,
}

/// What vacuum did (or would do) to one table.
#[derive(Debug, Serialize)]
pub struct Vacuumed {
    /// The table.
    pub table: String,
    /// The oldest version a flow reading the table has still to read, when one has: its
    /// files were kept whatever the retention.
    pub kept_for_flows_from_version: Option<i64>,
    /// Why the table was left alone, when it was (chosen implicitly, and not one smelt
    /// maintains).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// What went.
    #[serde(flatten)]
    pub stats: VacuumStats,
}

/// A table to maintain.
#[derive(Debug, Clone)]
pub struct Target {
    /// The table.
    pub table: TableName,
    /// What its flow writes it as.
    pub role: TableRole,
    /// Chosen because no table was named: one smelt does not maintain is skipped, not
    /// refused.
    pub implicit: bool,
    /// Its primary key: the keys of the apply flow writing it (its silver or tombstones);
    /// empty for other tables.
    pub keys: Vec<String>,
    /// Named as a table (`schema.table`), not chosen as one of a flow's tables.
    pub named: bool,
}

impl Target {
    /// Why an implicitly chosen table is not maintained by `what`, if it is not.
    fn skip(&self, what: &str) -> Option<String> {
        if !self.implicit {
            return None;
        }
        if self.table.catalog.is_some() {
            return Some(format!(
                "an Iceberg table: smelt does not {what} Iceberg tables yet"
            ));
        }
        (what == "optimize" && self.role == TableRole::Bronze).then(|| {
            "an ingest flow's bronze: its files keep the order its rows were loaded in".to_string()
        })
    }
}

/// The tables `targets` name — flow names (the tables the flow writes: an apply flow's
/// silver, tombstones and rejects) or tables (`schema.table`) — or, without targets, every
/// table the pipeline's flows write; each once, in pipeline order, with the role it is
/// written as.
pub fn tables(pipeline: &Pipeline, targets: &[String]) -> Result<Vec<Target>> {
    let written = |flow: &smelt_spec::Flow| -> Vec<(TableName, TableRole, Vec<String>)> {
        match &flow.kind {
            FlowKind::Apply(a) => vec![
                (a.into.clone(), TableRole::Silver, a.keys.clone()),
                (
                    tombstone_table(&a.into),
                    TableRole::Tombstones,
                    a.keys.clone(),
                ),
                (rejects_table(&a.into), TableRole::Rejects, Vec::new()),
            ],
            FlowKind::Ingest(i) => vec![(i.into.clone(), TableRole::Bronze, Vec::new())],
            _ => flow
                .writes()
                .map(|t| vec![(t.clone(), TableRole::Target, Vec::new())])
                .unwrap_or_default(),
        }
    };
    let mut out: Vec<Target> = Vec::new();
    let implicit = targets.is_empty();
    let mut push = |(table, role, keys): (TableName, TableRole, Vec<String>), named: bool| {
        if !out.iter().any(|t| t.table == table) {
            out.push(Target {
                table,
                role,
                implicit,
                keys,
                named,
            });
        }
    };
    if implicit {
        for t in pipeline.flows.iter().flat_map(written) {
            push(t, false);
        }
        return Ok(out);
    }
    for target in targets {
        if let Some(flow) = pipeline.flow(target) {
            for t in written(flow) {
                push(t, false);
            }
        } else if let Some(table) = TableName::parse(target) {
            let found = pipeline
                .flows
                .iter()
                .flat_map(written)
                .find(|(t, _, _)| t == &table);
            push(
                found.unwrap_or((table, TableRole::Target, Vec::new())),
                true,
            );
        } else {
            return Err(EngineError::user(
                format!("`{target}` is neither a flow of the pipeline nor a table name"),
                "name a flow (its tables are maintained) or a table as `schema.table`; with no name, every table the flows write",
            ));
        }
    }
    Ok(out)
}

/// Optimizes `tables` one after the other, each with its key; tables not created yet are
/// skipped. With `policy.cluster`, a table named without a key is refused (one of a flow's,
/// or chosen implicitly, is optimized without clustering).
pub async fn optimize(
    lake: &dyn Lake,
    tables: &[Target],
    policy: &OptimizePolicy,
) -> Result<Vec<Optimized>> {
    if policy.cluster
        && let Some(t) = tables.iter().find(|t| t.named && t.keys.is_empty())
    {
        return Err(EngineError::user(
            format!(
                "`--cluster` puts a table's files in the order of its primary key, and `{}` has none: no apply flow of the pipeline writes it",
                t.table
            ),
            "cluster the silver (or the flow) of an apply flow, or drop `--cluster`",
        ));
    }
    let mut out = Vec::new();
    for target in tables {
        let skipped = target.skip("optimize");
        let stats = if skipped.is_some() {
            OptimizeStats::default()
        } else {
            let mut table = lake.table(&target.table, target.role).await?;
            if table.schema().is_none() {
                continue;
            }
            let policy = OptimizePolicy {
                keys: target.keys.clone(),
                cluster: policy.cluster && !target.keys.is_empty(),
                ..policy.clone()
            };
            table.optimize(&policy).await?
        };
        out.push(Optimized {
            table: target.table.to_string(),
            skipped,
            stats,
        });
    }
    Ok(out)
}

/// Vacuums `tables`, keeping what `retain_ms` and the flows reading each table still need
/// (their watermarks, as `smelt status` reads them); tables not created yet are skipped.
pub async fn vacuum(
    pipeline: &Pipeline,
    lake: &dyn Lake,
    files: &dyn FileStores,
    tables: &[Target],
    retain_ms: i64,
    dry_run: bool,
) -> Result<Vec<Vacuumed>> {
    let flows: Vec<&smelt_spec::Flow> = pipeline.flows.iter().collect();
    let status = crate::status::status(pipeline, &flows, lake, files).await?;
    let mut out = Vec::new();
    for target in tables {
        let name = &target.table;
        if let Some(skipped) = target.skip("vacuum") {
            out.push(Vacuumed {
                table: name.to_string(),
                kept_for_flows_from_version: None,
                skipped: Some(skipped),
                stats: VacuumStats::default(),
            });
            continue;
        }
        let mut table = lake.table(name, target.role).await?;
        if table.schema().is_none() {
            continue;
        }
        // A flow that read the table up to version w reads w + 1 on: its files stay.
        let keep_from_version = flows
            .iter()
            .zip(&status)
            .filter(|(f, _)| f.reads() == Some(name))
            .filter_map(|(_, s)| s.watermark.map(|w| w + 1))
            .min()
            .filter(|v| table.version().is_some_and(|latest| *v <= latest));
        let plan = VacuumPlan {
            retain_ms,
            keep_from_version,
            dry_run,
        };
        let stats = table.vacuum(&plan).await?;
        out.push(Vacuumed {
            table: name.to_string(),
            kept_for_flows_from_version: keep_from_version,
            skipped: None,
            stats,
        });
    }
    Ok(out)
}
