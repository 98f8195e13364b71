//! `smelt optimize` and `smelt vacuum`: table maintenance over the tables a pipeline's flows
//! write, or the ones named.

use serde::Serialize;
use smelt_spec::{FlowKind, Pipeline, TableName};

use crate::apply::tombstone_table;
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
    /// What went.
    #[serde(flatten)]
    pub stats: VacuumStats,
}

/// The tables `targets` name — flow names (the tables the flow writes: an apply flow's
/// silver, tombstones and rejects) or tables (`schema.table`) — or, without targets, every
/// table the pipeline's flows write; each once, in pipeline order, with the role it is
/// written as.
pub fn tables(pipeline: &Pipeline, targets: &[String]) -> Result<Vec<(TableName, TableRole)>> {
    let written = |flow: &smelt_spec::Flow| -> Vec<(TableName, TableRole)> {
        match &flow.kind {
            FlowKind::Apply(a) => vec![
                (a.into.clone(), TableRole::Silver),
                (tombstone_table(&a.into), TableRole::Tombstones),
                (rejects_table(&a.into), TableRole::Rejects),
            ],
            FlowKind::Ingest(i) => vec![(i.into.clone(), TableRole::Bronze)],
            _ => flow
                .writes()
                .map(|t| vec![(t.clone(), TableRole::Target)])
                .unwrap_or_default(),
        }
    };
    let mut out: Vec<(TableName, TableRole)> = Vec::new();
    let mut push = |t: (TableName, TableRole)| {
        if !out.iter().any(|(o, _)| o == &t.0) {
            out.push(t);
        }
    };
    if targets.is_empty() {
        pipeline.flows.iter().flat_map(written).for_each(&mut push);
        return Ok(out);
    }
    for target in targets {
        if let Some(flow) = pipeline.flow(target) {
            written(flow).into_iter().for_each(&mut push);
        } else if let Some(table) = TableName::parse(target) {
            let role = pipeline
                .flows
                .iter()
                .flat_map(written)
                .find(|(t, _)| t == &table)
                .map(|(_, r)| r)
                .unwrap_or(TableRole::Target);
            push((table, role));
        } else {
            return Err(EngineError::user(
                format!("`{target}` is neither a flow of the pipeline nor a table name"),
                "name a flow (its tables are maintained) or a table as `schema.table`; with no name, every table the flows write",
            ));
        }
    }
    Ok(out)
}

/// Optimizes `tables` one after the other; tables not created yet are skipped.
pub async fn optimize(
    lake: &dyn Lake,
    tables: &[(TableName, TableRole)],
    policy: &OptimizePolicy,
) -> Result<Vec<Optimized>> {
    let mut out = Vec::new();
    for (name, role) in tables {
        let mut table = lake.table(name, *role).await?;
        if table.schema().is_none() {
            continue;
        }
        let stats = table.optimize(policy).await?;
        out.push(Optimized {
            table: name.to_string(),
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
    tables: &[(TableName, TableRole)],
    retain_ms: i64,
    dry_run: bool,
) -> Result<Vec<Vacuumed>> {
    let flows: Vec<&smelt_spec::Flow> = pipeline.flows.iter().collect();
    let status = crate::status::status(pipeline, &flows, lake, files).await?;
    let mut out = Vec::new();
    for (name, role) in tables {
        let mut table = lake.table(name, *role).await?;
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
            stats,
        });
    }
    Ok(out)
}
