//! `smelt docs`: the pipeline's page — gathered from the pipeline file, the lake and the
//! event log ([`gather`]), drawn by `smelt-docs`, written as one HTML file (or printed as
//! its model with `--json`).

mod gather;

use crate::args::{DocsArgs, GlobalArgs};
use crate::failure::Failure;

/// Writes (or prints) the page of the pipeline.
pub async fn docs(global: &GlobalArgs, args: &DocsArgs) -> Result<u8, Failure> {
    let pipeline = super::load_pipeline(global)?;
    let model = gather::gather(&pipeline, args.samples).await?;
    if global.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&model).expect("serialisable")
        );
        return Ok(0);
    }
    let html = smelt_docs::render(&model);
    let page = args.out.join("index.html");
    let failed = |e: std::io::Error| {
        Failure::usage(
            format!("cannot write `{}`: {e}", page.display()),
            Some("pass a folder you can write to with `-o`".into()),
        )
    };
    std::fs::create_dir_all(&args.out).map_err(failed)?;
    // Written beside and renamed: a reader never sees half a page.
    let partial = args.out.join(".index.html.partial");
    std::fs::write(&partial, html).map_err(failed)?;
    std::fs::rename(&partial, &page).map_err(failed)?;
    println!(
        "wrote {} ({} flows, {} tables)",
        page.display(),
        model.flows.len(),
        model.tables.len()
    );
    if args.open {
        open(&page)?;
    }
    Ok(0)
}

/// Opens `page` in the system's browser.
fn open(page: &std::path::Path) -> Result<(), Failure> {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    std::process::Command::new(opener)
        .arg(page)
        .spawn()
        .map(|_| ())
        .map_err(|e| {
            Failure::usage(
                format!("cannot open the page with `{opener}`: {e}"),
                Some(format!("open {} in a browser", page.display())),
            )
        })
}
