//! `smelt-bench-kernel-read <table> <out.parquet>`: writes the live rows of a Delta table, as
//! delta-rs' kernel scans them (deletion vectors applied), to one Parquet file; the
//! benchmark's equality check reads smelt's merge-on-read silver through it.

use std::path::PathBuf;

use clap::Parser;
use deltalake::parquet::arrow::ArrowWriter;

#[derive(Parser)]
struct Args {
    /// The Delta table's folder.
    table: PathBuf,
    /// The Parquet file to write.
    out: PathBuf,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let batches = smelt_bench::kernel::scan(&args.table)?;
    let Some(first) = batches.first() else {
        return Err(format!("{}: no rows", args.table.display()).into());
    };
    let mut writer = ArrowWriter::try_new(std::fs::File::create(&args.out)?, first.schema(), None)?;
    for b in &batches {
        writer.write(b)?;
    }
    writer.close()?;
    Ok(())
}
