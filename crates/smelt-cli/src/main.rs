//! `smelt`: refine bronze tables into silver tables, incrementally and exactly once.
//!
//! Wiring only: parse arguments, resolve settings, call a command, render errors and map
//! them to exit codes (0 ok, 1 run failed, 2 usage or spec error).

mod args;
mod commands;
mod failure;
mod printer;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    smelt_core::memory::limit_arenas();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    init_tracing(cli.global.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        match &cli.command {
            Command::Run(args) => commands::run::run(&cli.global, args, false).await,
            Command::Plan(args) => commands::run::run(&cli.global, args, true).await,
            Command::Status(args) => commands::status::status(&cli.global, args).await,
            Command::Validate(args) => commands::validate::validate(&cli.global, args).await,
            Command::Compile(args) => commands::spark::compile(&cli.global, args).await,
            Command::Sql(args) => commands::sql::sql(&cli.global, args).await,
            Command::Optimize(args) => commands::maintain::optimize(&cli.global, args).await,
            Command::Vacuum(args) => commands::maintain::vacuum(&cli.global, args).await,
            Command::Docs(args) => commands::docs::docs(&cli.global, args).await,
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            // One JSON error object on stdout with `--json`; the text form on stderr always.
            if cli.global.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&failure.to_json()).expect("serialisable")
                );
            }
            failure.render();
            ExitCode::from(failure.code)
        }
    }
}

fn init_tracing(verbose: u8) {
    let default = match verbose {
        // Libraries log their own retries and probes at ERROR (e.g. "No files in log
        // segment" while checking that a table does not exist yet): not for users.
        0 => "off,smelt=warn,smelt_engine=warn,smelt_delta=warn",
        1 => "warn,smelt=info,smelt_engine=info,smelt_delta=info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("SMELT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
