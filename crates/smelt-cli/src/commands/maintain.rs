//! `smelt optimize` and `smelt vacuum`.

use smelt_engine::ports::OptimizePolicy;
use smelt_ingest::Files;

use super::{load_pipeline, open_lakes};
use crate::args::{GlobalArgs, OptimizeArgs, VacuumArgs};
use crate::failure::Failure;

/// Prints `value` as JSON.
fn print_json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("serialisable")
    );
}

/// Optimizes the selected tables and prints what each rewrote.
pub async fn optimize(global: &GlobalArgs, args: &OptimizeArgs) -> Result<u8, Failure> {
    let pipeline = load_pipeline(global)?;
    let tables = smelt_engine::maintain::tables(&pipeline, &args.targets)?;
    let lakes = open_lakes(&pipeline).await?;
    let policy = OptimizePolicy {
        deleted_fraction: args.deleted_fraction,
        small_file_rows: args.small_file_rows,
        cluster: args.cluster,
        memory_limit: args
            .memory_limit
            .or_else(smelt_engine::context::default_memory_limit),
        ..OptimizePolicy::default()
    };
    let done = smelt_engine::maintain::optimize(&lakes.ports(), &tables, &policy).await?;
    if global.json {
        print_json(&done);
        return Ok(0);
    }
    if !global.quiet {
        for t in &done {
            let s = &t.stats;
            if let Some(why) = &t.skipped {
                println!("{}: skipped: {why}", t.table);
                continue;
            }
            match s.version {
                None => println!("{}: nothing to rewrite", t.table),
                Some(v) => {
                    let clustered = match s.partitions_clustered {
                        0 => String::new(),
                        1 => ", in key order".to_string(),
                        n => format!(", {n} partitions in key order"),
                    };
                    let spilled = match s.bytes_spilled {
                        0 => String::new(),
                        b => format!(", {b} bytes spilled"),
                    };
                    println!(
                        "{}: version {v}: {} files rewritten into {} ({} rows kept, {} deleted rows purged, {} bytes written{clustered}{spilled})",
                        t.table,
                        s.files_removed,
                        s.files_added,
                        s.rows_rewritten,
                        s.rows_purged,
                        s.bytes_written
                    )
                }
            }
        }
    }
    Ok(0)
}

/// Vacuums the selected tables and prints what each deleted (or would).
pub async fn vacuum(global: &GlobalArgs, args: &VacuumArgs) -> Result<u8, Failure> {
    let pipeline = load_pipeline(global)?;
    let tables = smelt_engine::maintain::tables(&pipeline, &args.targets)?;
    let lakes = open_lakes(&pipeline).await?;
    let retain_ms = i64::try_from(args.retain.as_millis()).unwrap_or(i64::MAX);
    let done = smelt_engine::maintain::vacuum(
        &pipeline,
        &lakes.ports(),
        &Files::new(pipeline.storage),
        &tables,
        retain_ms,
        args.dry_run,
    )
    .await?;
    if global.json {
        print_json(&done);
        return Ok(0);
    }
    if !global.quiet {
        let verb = if args.dry_run {
            "would delete"
        } else {
            "deleted"
        };
        for t in &done {
            if let Some(why) = &t.skipped {
                println!("{}: skipped: {why}", t.table);
                continue;
            }
            let kept = match t.kept_for_flows_from_version {
                Some(v) => {
                    format!(" (kept what version {v} on needs: a flow has still to read it)")
                }
                None => String::new(),
            };
            println!("{}: {verb} {} files{kept}", t.table, t.stats.files.len());
            for f in &t.stats.files {
                println!("  {f}");
            }
        }
    }
    Ok(0)
}
