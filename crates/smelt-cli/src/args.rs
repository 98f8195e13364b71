use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// smelt refines raw bronze tables into clean silver tables: incrementally, exactly once.
#[derive(Debug, Parser)]
#[command(name = "smelt", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// The pipeline file.
    #[arg(
        short = 'p',
        long,
        global = true,
        env = "SMELT_PIPELINE",
        default_value = "smelt.yaml"
    )]
    pub pipeline: PathBuf,
    /// The lake folder; overrides `lake:` of the pipeline file.
    #[arg(long, global = true, env = "SMELT_LAKE")]
    pub lake: Option<PathBuf>,
    /// Print machine-readable JSON on stdout instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// No progress display.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// More logging on stderr (-v info, -vv debug); `SMELT_LOG` takes a filter.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run flows: apply new bronze changes to silver.
    Run(RunArgs),
    /// Dry run: the report `run` would print, without writing anything.
    Plan(RunArgs),
    /// Watermark, bronze version and lag of every flow.
    Status(StatusArgs),
    /// Run SQL over the lake (`schema.table`): SELECT, CREATE TABLE, ALTER TABLE … SET
    /// OPTIONS, INSERT, TRUNCATE.
    Sql(SqlArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Flows to run (all when none are given).
    pub flows: Vec<String>,
    /// Ignore the watermark: rebuild from the bronze snapshot (still guarded by sequence).
    #[arg(long)]
    pub full_refresh: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Flows to show (all when none are given).
    pub flows: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SqlArgs {
    /// The SQL to run (one or more `;`-separated statements).
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    pub sql: Option<String>,
    /// Run the statements of a file.
    #[arg(short, long)]
    pub file: Option<PathBuf>,
}
