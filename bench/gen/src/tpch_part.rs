//! `smelt-tpch-part`: writes TPC-H `part` as a `.tbl` file (seed 002's `part.tbl`): day 1
//! is the whole table at `--scale`, day 2 reprices every 20th part and adds 100 new ones.

use std::path::PathBuf;

use clap::Parser;

/// Write a TPC-H `part.tbl`.
#[derive(Debug, Parser)]
struct Args {
    /// Scale factor: 200,000 × scale parts on day 1.
    #[arg(long, default_value_t = 0.01)]
    scale: f64,
    /// 1: the whole table; 2: changed and new parts.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    day: u8,
    /// The file to write.
    #[arg(long)]
    out: PathBuf,
}

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let rows = match args.day {
        1 => smelt_bench::tpch::day1(args.scale),
        _ => smelt_bench::tpch::day2(args.scale),
    };
    smelt_bench::tpch::write_tbl(&rows, &args.out)?;
    println!("wrote {} parts to {}", rows.len(), args.out.display());
    Ok(())
}
