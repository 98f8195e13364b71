//! `smelt sql`: run SQL over the lake and the pipeline's catalogs.

mod catalogs;

use arrow::util::pretty::pretty_format_batches;
use smelt_delta::sql::{SqlOutput, execute};

use super::lake_without_pipeline;
use crate::args::{GlobalArgs, SqlArgs};
use crate::failure::Failure;

/// Runs the statements and prints each one's output.
pub async fn sql(global: &GlobalArgs, args: &SqlArgs) -> Result<u8, Failure> {
    let text = match (&args.sql, &args.file) {
        (Some(sql), _) => sql.clone(),
        (None, Some(file)) => std::fs::read_to_string(file).map_err(|e| {
            Failure::usage(
                format!("cannot read `{}`: {e}", file.display()),
                Some("pass an existing .sql file with `-f`".into()),
            )
        })?,
        (None, None) => unreachable!("clap requires SQL or --file"),
    };
    let lake = lake_without_pipeline(global)?;
    let (catalogs, storage) = if global.pipeline.exists() {
        let pipeline = super::load_pipeline(global)?;
        (pipeline.catalogs, pipeline.storage)
    } else {
        Default::default()
    };
    let catalogs =
        catalogs::PipelineCatalogs::new(global.pipeline.display().to_string(), catalogs, storage);
    let (outputs, failure) = match execute(&lake, &catalogs, &text).await {
        Ok(outputs) => (outputs, None),
        Err((outputs, n, e)) => (outputs, Some((n, e))),
    };
    for out in &outputs {
        print_output(out, global.json)?;
    }
    if let Some((n, e)) = failure {
        let mut failure = Failure::from(e);
        if n > 0 {
            failure.messages[0].0 = format!("statement {n}: {}", failure.messages[0].0);
            // A script that does not parse runs nothing, whatever statement is refused.
            if !outputs.is_empty() {
                failure.causes.push(format!(
                    "statements 1..{} ran and stay committed",
                    outputs.len()
                ));
            }
        } else {
            failure.code = 2;
        }
        return Err(failure);
    }
    Ok(0)
}

/// `batches` as a JSON array of row objects (empty when there are no rows); every column
/// in every object, a NULL as `null` (never left out, so a NULL and a missing column differ).
pub fn json_rows(batches: &[arrow::array::RecordBatch]) -> Result<Vec<u8>, Failure> {
    let failed =
        |e: arrow::error::ArrowError| Failure::usage(format!("cannot print rows: {e}"), None);
    let mut writer = arrow::json::WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, arrow::json::writer::JsonArray>(Vec::new());
    for b in batches {
        writer.write(b).map_err(failed)?;
    }
    writer.finish().map_err(failed)?;
    Ok(writer.into_inner())
}

fn print_output(out: &SqlOutput, json: bool) -> Result<(), Failure> {
    match out {
        SqlOutput::Message(m) => {
            if json {
                println!("{}", serde_json::json!({ "message": m }));
            } else {
                println!("{m}");
            }
        }
        SqlOutput::Rows { batches, .. } => {
            if json {
                let text = String::from_utf8(json_rows(batches)?).unwrap_or_default();
                println!("{}", if text.is_empty() { "[]" } else { &text });
            } else {
                let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
                let table = pretty_format_batches(batches)
                    .map_err(|e| Failure::usage(format!("cannot print rows: {e}"), None))?;
                println!("{table}");
                println!("({rows} row{})", if rows == 1 { "" } else { "s" });
            }
        }
    }
    Ok(())
}
