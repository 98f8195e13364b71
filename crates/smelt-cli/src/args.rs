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
    /// The lake: a folder, or a storage URL (`s3://bucket/prefix`, `gs://…`, `az://…`,
    /// `abfss://…`, `file:///…`); overrides `lake:` of the pipeline file.
    #[arg(long, global = true, env = "SMELT_LAKE")]
    pub lake: Option<String>,
    /// Where the flows run: `embedded`, `spark` (the cluster of the pipeline file's
    /// `connect:`), or a Spark Connect URL (`sc://host:15002/;token=…`); overrides `engine:`
    /// of the pipeline file. `SMELT_SPARK_REMOTE=sc://…` runs on that cluster too.
    #[arg(long, global = true, value_name = "ENGINE")]
    pub engine: Option<String>,
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
    /// Check the pipeline against the lake: every problem of every flow, at once.
    Validate(ValidateArgs),
    /// Print the Spark SQL statements of each flow's next run, in order (Spark engine):
    /// the reads are run to decide them, nothing is written.
    Compile(CompileArgs),
    /// Run SQL over the lake (`schema.table`): SELECT (time travel, table_changes,
    /// CHANGES), CREATE TABLE, ALTER TABLE, INSERT, UPDATE, DELETE, MERGE, TRUNCATE (docs/sql.md).
    Sql(SqlArgs),
    /// Rewrite data files heavy with deleted rows (merge-on-read) or small, purging the
    /// deleted rows, in commits that change no data.
    Optimize(OptimizeArgs),
    /// Delete files the tables no longer need: removed longer ago than `--retain`, and
    /// not needed by a flow that still has to read them.
    Vacuum(VacuumArgs),
    /// Write the pipeline's page: its DAG, each flow's standing, runs and data quality,
    /// each table (one self-contained HTML file; `--json` prints its model instead).
    Docs(DocsArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Flows to run (all when none are given).
    pub flows: Vec<String>,
    /// Ignore the watermark: rebuild from the bronze snapshot (still guarded by sequence).
    #[arg(long, conflicts_with = "since")]
    pub full_refresh: bool,
    /// Replay the bronze versions committed since this time, whatever the watermark: a
    /// timestamp (`2026-07-21 00:00:00`, `2026-07-21T00:00:00+09:00`) or a duration back
    /// from now (`2d`, `36h`). Safe to repeat: changes not newer than silver are skipped.
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// End of the replay window (inclusive; default: the latest bronze version).
    #[arg(long, value_name = "TIME", requires = "since")]
    pub until: Option<String>,
    /// Zone of `--since`/`--until` times written without an offset (IANA name or
    /// `+HH:MM`; default UTC).
    #[arg(long, value_name = "ZONE")]
    pub tz: Option<String>,
    /// Memory for changes in flight, e.g. `2GiB`, `512MiB` (default: half the machine's
    /// memory). Larger change sets are applied in key partitions spilled to `$TMPDIR`.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memory_limit: Option<u64>,
}

/// Parses a size: a number of bytes with an optional unit (`B`, `KB`/`KiB`, `MB`/`MiB`,
/// `GB`/`GiB`, `TB`/`TiB`; `K`, `M`, `G`, `T` are binary), e.g. `2GiB`, `1.5G`, `512MiB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("`{s}` is not a size; write e.g. `2GiB` or `512MiB`"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown size unit `{other}` in `{s}`; use B, KiB, MiB, GiB or TiB"
            ));
        }
    };
    let bytes = number * scale;
    if bytes < 1.0 {
        return Err(format!("`{s}` is too small for a memory limit"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").unwrap_err().contains("not a size"));
        assert!(
            parse_size("2 parsecs")
                .unwrap_err()
                .contains("unknown size unit")
        );
        assert!(parse_size("0").is_err());
    }
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Flows to show (all when none are given).
    pub flows: Vec<String>,
}

#[derive(Debug, Args)]
pub struct OptimizeArgs {
    /// Flows (the tables they write) or tables (`schema.table`); every table the flows
    /// write when none are given.
    pub targets: Vec<String>,
    /// Rewrite a file when at least this share of its rows is marked deleted (0 to 1).
    #[arg(long, default_value_t = 0.2, value_parser = parse_fraction)]
    pub deleted_fraction: f64,
    /// Pack files with fewer rows than this (two or more); default: a quarter of the rows
    /// per file smelt writes (65,536), at most half of them (131,072).
    #[arg(long)]
    pub small_file_rows: Option<usize>,
    /// Also rewrite, in primary-key order, every file of a table (or partition) whose
    /// files' key ranges overlap: each file then holds a key range of its own, which the
    /// next runs' lookups skip by (apply flows' tables only).
    #[arg(long)]
    pub cluster: bool,
    /// Memory for the rows being put in key order, e.g. `2GiB` (default: half the
    /// machine's memory); past it they are sorted in runs spilled to `$TMPDIR`.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memory_limit: Option<u64>,
}

#[derive(Debug, Args)]
pub struct VacuumArgs {
    /// Flows (the tables they write) or tables (`schema.table`); every table the flows
    /// write when none are given.
    pub targets: Vec<String>,
    /// Keep files removed less than this long ago (`7d`, `12h`, `0s`): versions inside it
    /// can still be read and replayed.
    #[arg(long, default_value = "7d", value_parser = parse_retain)]
    pub retain: std::time::Duration,
    /// List the files that would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct DocsArgs {
    /// The folder to write the page in (`index.html`); made if missing.
    #[arg(short, long, default_value = "site", value_name = "DIR")]
    pub out: std::path::PathBuf,
    /// Open the page in the system's browser once written.
    #[arg(long)]
    pub open: bool,
    /// Rows of each rejects table shown on the page.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub samples: usize,
}

/// A share between 0 and 1.
fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("`{s}` is not a share between 0 and 1 (e.g. 0.2)")),
    }
}

/// A retention such as `7d`, `36h`, `0s`.
fn parse_retain(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("`{s}` is not a duration ({e}); write e.g. `7d`, `36h` or `0s`"))
}

#[derive(Debug, Args)]
pub struct CompileArgs {
    /// Flows to compile (all when none are given).
    pub flows: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Flows to check (all when none are given).
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
