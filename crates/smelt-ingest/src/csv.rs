//! CSV (and `|`-separated TPC-H `.tbl`) files as all-text Arrow batches.

use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::csv::reader::{Format, ReaderBuilder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::{IngestError, Result};

/// How a CSV file is laid out.
#[derive(Debug, Clone)]
pub struct CsvOptions {
    /// The first line names the columns.
    pub header: bool,
    /// Field separator (`,` by default; `|` for TPC-H).
    pub sep: u8,
    /// Quote character (`"` by default).
    pub quote: u8,
    /// Escape character inside quoted fields, if any (else quotes are doubled).
    pub escape: Option<u8>,
    /// Column names for files without a header (or to rename the header's).
    pub columns: Option<Vec<String>>,
    /// A field equal to this is NULL. Unset, an empty field is NULL (as in Spark); set, an
    /// empty field is an empty string.
    pub null_value: Option<String>,
    /// Rows per batch.
    pub batch_size: usize,
}

impl Default for CsvOptions {
    fn default() -> Self {
        Self {
            header: true,
            sep: b',',
            quote: b'"',
            escape: None,
            columns: None,
            null_value: None,
            batch_size: 8192,
        }
    }
}

/// Name of the empty field after a trailing separator (TPC-H lines end with `|`); dropped.
const TRAILING: &str = "__smelt_trailing";

/// Reads CSV from `input` (named `file` in errors) and hands all-`Utf8` batches to `sink`,
/// in file order; returns the schema and the number of rows. Column names come from
/// `columns`, else the header, else `_c0`, `_c1`, … (Spark's names). A trailing separator
/// at the end of every line (an empty last field the columns do not name) is dropped.
pub fn read_csv<R: Read>(
    input: R,
    file: &str,
    options: &CsvOptions,
    mut sink: impl FnMut(RecordBatch) -> Result<()>,
) -> Result<(SchemaRef, usize)> {
    // Big enough to hold the first line, which decides the columns.
    let mut input = BufReader::with_capacity(1 << 20, input);
    let malformed = |message: String| IngestError::Malformed {
        file: file.to_string(),
        message,
    };
    let io = |source| IngestError::Io {
        file: file.to_string(),
        source,
    };
    let mut format = Format::default()
        .with_header(options.header)
        .with_delimiter(options.sep)
        .with_quote(options.quote);
    if let Some(e) = options.escape {
        format = format.with_escape(e);
    }
    // The first record decides the columns: peek at it without consuming the input.
    let peek = input.fill_buf().map_err(io)?.to_vec();
    let first_line = match peek.iter().position(|&b| b == b'\n') {
        Some(end) => &peek[..=end],
        None => &peek[..],
    };
    if first_line.is_empty() {
        let schema = Arc::new(Schema::empty());
        return Ok((schema, 0));
    }
    let (first, _) = format
        .infer_schema(first_line, Some(1))
        .map_err(|e| malformed(format!("line 1: {e}")))?;
    let header_names: Vec<String> = first.fields().iter().map(|f| f.name().clone()).collect();
    let fields_in_file = header_names.len();
    let trailing_empty = first_line
        .iter()
        .rev()
        .find(|&&b| b != b'\n' && b != b'\r')
        .is_some_and(|&b| b == options.sep);
    let mut names: Vec<String> = match (&options.columns, options.header) {
        (Some(c), _) => c.clone(),
        (None, true) => header_names,
        (None, false) => (0..fields_in_file).map(|i| format!("_c{i}")).collect(),
    };
    if trailing_empty && names.len() + 1 == fields_in_file {
        names.push(TRAILING.to_string());
    } else if trailing_empty && options.header && options.columns.is_none() {
        // A header ending with the separator names an empty last column: drop it too.
        if let Some(last) = names.last_mut() {
            *last = TRAILING.to_string();
        }
    }
    if names.len() != fields_in_file {
        return Err(malformed(format!(
            "line 1 has {fields_in_file} fields but {} column names are given",
            names.len()
        )));
    }
    let schema = Arc::new(Schema::new(
        names
            .iter()
            .map(|n| Field::new(n, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let mut builder = ReaderBuilder::new(Arc::clone(&schema))
        .with_header(options.header)
        .with_delimiter(options.sep)
        .with_quote(options.quote)
        .with_batch_size(options.batch_size.max(1));
    if let Some(e) = options.escape {
        builder = builder.with_escape(e);
    }
    if let Some(null) = &options.null_value {
        let regex = regex::Regex::new(&format!("^{}$", regex::escape(null)))
            .map_err(|e| IngestError::Options(format!("null_value `{null}`: {e}")))?;
        builder = builder.with_null_regex(regex);
    }
    let keep: Vec<usize> = (0..names.len()).filter(|&i| names[i] != TRAILING).collect();
    let out = Arc::new(schema.project(&keep).expect("indices of the schema"));
    let reader = builder.build(input).map_err(|e| malformed(e.to_string()))?;
    let mut rows = 0;
    for batch in reader {
        let batch = batch.map_err(|e| malformed(format!("after row {rows}: {e}",)))?;
        rows += batch.num_rows();
        sink(batch.project(&keep).expect("indices of the schema"))?;
    }
    Ok((out, rows))
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, AsArray};

    use super::*;

    fn read(text: &str, options: &CsvOptions) -> (SchemaRef, Vec<Vec<Option<String>>>) {
        let mut rows = Vec::new();
        let (schema, n) = read_csv(text.as_bytes(), "t.csv", options, |b| {
            for r in 0..b.num_rows() {
                rows.push(
                    b.columns()
                        .iter()
                        .map(|c| {
                            let c = c.as_string::<i32>();
                            c.is_valid(r).then(|| c.value(r).to_string())
                        })
                        .collect(),
                );
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(n, rows.len());
        (schema, rows)
    }

    fn names(schema: &SchemaRef) -> Vec<&str> {
        schema.fields().iter().map(|f| f.name().as_str()).collect()
    }

    fn s(v: &str) -> Option<String> {
        Some(v.to_string())
    }

    #[test]
    fn header_quotes_and_everything_as_text() {
        let (schema, rows) = read(
            "id,name,price\n1,\"a, b\",9.50\n2,\"say \"\"hi\"\"\",\n",
            &CsvOptions::default(),
        );
        assert_eq!(names(&schema), ["id", "name", "price"]);
        assert!(
            schema
                .fields()
                .iter()
                .all(|f| f.data_type() == &DataType::Utf8)
        );
        assert_eq!(
            rows,
            vec![
                vec![s("1"), s("a, b"), s("9.50")],
                vec![s("2"), s("say \"hi\""), None],
            ]
        );
    }

    #[test]
    fn tpch_lines_without_header_with_a_trailing_separator() {
        let options = CsvOptions {
            header: false,
            sep: b'|',
            columns: Some(vec!["p_partkey".into(), "p_name".into(), "p_size".into()]),
            ..CsvOptions::default()
        };
        let (schema, rows) = read("1|goldenrod lavender|7|\n2|blush thistle|1|\n", &options);
        assert_eq!(names(&schema), ["p_partkey", "p_name", "p_size"]);
        assert_eq!(rows[1], vec![s("2"), s("blush thistle"), s("1")]);
        // Without names (Spark's `_c0`, `_c1`, …) an empty last field is a column like any
        // other: nothing says it is a trailing separator.
        let (schema, _) = read(
            "1|x|\n",
            &CsvOptions {
                header: false,
                sep: b'|',
                ..CsvOptions::default()
            },
        );
        assert_eq!(names(&schema), ["_c0", "_c1", "_c2"]);
    }

    #[test]
    fn null_value_escape_and_field_count_errors() {
        let options = CsvOptions {
            null_value: Some("\\N".into()),
            escape: Some(b'\\'),
            ..CsvOptions::default()
        };
        let (_, rows) = read("a,b\n\\N,\"x\\\"y\"\n", &options);
        assert_eq!(rows, vec![vec![None, s("x\"y")]]);

        let err = read_csv(
            "a,b\n1,2,3\n".as_bytes(),
            "bad.csv",
            &CsvOptions::default(),
            |_| Ok(()),
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("bad.csv: "), "{err}");
        let err = read_csv(
            "1,2\n".as_bytes(),
            "c.csv",
            &CsvOptions {
                header: false,
                columns: Some(vec!["only".into()]),
                ..CsvOptions::default()
            },
            |_| Ok(()),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("2 fields but 1 column names"), "{err}");
    }
}
