//! CSV (and `|`-separated TPC-H `.tbl`) files as text columns.
//!
//! Parsing is the `csv` crate's; this module decides the columns, keeps the line of each
//! row, drops a TPC-H trailing separator, and quarantines lines that do not fit instead of
//! failing the file.

use std::io::Read;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema};
use smelt_spec::CsvLayout;

use crate::{IngestError, Malformed, RawRows, Result, RowSink};

/// Reads CSV from `input` (named `file` in errors) into `sink`, `batch_size` rows at a
/// time. Column names come from `layout.columns`, else the header, else `_c0`, `_c1`, …
/// (Spark's names, from the first line). A line with one field more than the columns,
/// that field empty, ends with a trailing separator (TPC-H) and loses it. A line with
/// more fields keeps the others in [`RawRows::extra`] as `{"_c9": "…"}`; a line with
/// fewer fields, or text that is not in the file's encoding, is [`Malformed`].
pub fn read_csv<R: Read>(
    input: R,
    file: &str,
    layout: &CsvLayout,
    batch_size: usize,
    sink: &mut dyn RowSink,
) -> Result<()> {
    let encoding = encoding_rs::Encoding::for_label(layout.encoding.as_bytes())
        .ok_or_else(|| IngestError::Options(format!("unknown encoding `{}`", layout.encoding)))?;
    let decoded = encoding != encoding_rs::UTF_8;
    let input: Box<dyn Read> = if !decoded {
        Box::new(input)
    } else {
        Box::new(Decode::new(input, encoding))
    };
    let mut builder = csv::ReaderBuilder::new();
    builder
        .has_headers(false)
        .flexible(true)
        .delimiter(layout.sep)
        .quote(layout.quote)
        .escape(layout.escape)
        .buffer_capacity(1 << 16);
    let mut reader = builder.from_reader(input);
    let io = |e: csv::Error| match e.into_kind() {
        csv::ErrorKind::Io(source) => IngestError::Io {
            file: file.to_string(),
            source,
        },
        other => IngestError::Malformed {
            file: file.to_string(),
            message: format!("{other:?}"),
        },
    };
    let mut record = csv::ByteRecord::new();
    let mut names: Option<Vec<String>> = layout.columns.clone();
    let mut batch = Batch::default();
    let mut row_number = 0i64;
    let mut emitted = false;
    let sep = layout.sep as char;
    while reader.read_byte_record(&mut record).map_err(io)? {
        let line = record.position().map(|p| p.line() as i64).unwrap_or(0);
        if layout.header && row_number == 0 && batch.header_done.is_none() {
            batch.header_done = Some(());
            let header = header_names(&record, layout.sep);
            match &names {
                Some(given) if given.len() != header.len() => {
                    return Err(IngestError::Malformed {
                        file: file.to_string(),
                        message: format!(
                            "line {line}: the header has {} columns but `columns` names {}",
                            header.len(),
                            given.len()
                        ),
                    });
                }
                Some(_) => {}
                None => names = Some(header),
            }
            continue;
        }
        let names =
            names.get_or_insert_with(|| (0..record.len()).map(|i| format!("_c{i}")).collect());
        if batch.columns.is_empty() {
            batch.columns = names.iter().map(|_| StringBuilder::new()).collect();
        }
        row_number += 1;
        let m = names.len();
        let mut n = record.len();
        if n == m + 1 && record.get(m).is_some_and(<[u8]>::is_empty) {
            n = m; // a trailing separator
        }
        let raw = || {
            record
                .iter()
                .map(|f| String::from_utf8_lossy(f).into_owned())
                .collect::<Vec<_>>()
                .join(&sep.to_string())
        };
        if n < m {
            sink.malformed(Malformed {
                line,
                raw: raw(),
                reason: format!("{n} fields, but the file has {m} columns"),
            })?;
            continue;
        }
        let mut text = Vec::with_capacity(n);
        let mut bad = None;
        for (i, field) in record.iter().take(n).enumerate() {
            match std::str::from_utf8(field) {
                // A byte the file's encoding does not have decodes as U+FFFD.
                Ok(t) if !(decoded && t.contains('\u{FFFD}')) => text.push(t),
                _ => {
                    bad = Some(i);
                    break;
                }
            }
        }
        if let Some(i) = bad {
            let column = names.get(i).cloned().unwrap_or_else(|| format!("_c{i}"));
            sink.malformed(Malformed {
                line,
                raw: raw(),
                reason: format!(
                    "column `{column}` is not valid {}; set `encoding:` to the file's encoding",
                    layout.encoding
                ),
            })?;
            continue;
        }
        for (b, value) in batch.columns.iter_mut().zip(&text) {
            let null = match &layout.null_value {
                Some(null) => value == null,
                None => value.is_empty(),
            };
            if null {
                b.append_null();
            } else {
                b.append_value(value);
            }
        }
        let extra = (n > m).then(|| {
            let object: serde_json::Map<String, serde_json::Value> = (m..n)
                .map(|i| (format!("_c{i}"), serde_json::Value::from(text[i])))
                .collect();
            serde_json::Value::Object(object).to_string()
        });
        batch.push(row_number, extra);
        if batch.rows.len() >= batch_size.max(1) {
            sink.rows(batch.take(names)?)?;
            emitted = true;
        }
    }
    // The last rows; or, when no row came out (an empty file, every line malformed), the
    // columns alone.
    if let Some(names) = &names
        && (!batch.rows.is_empty() || !emitted)
    {
        if batch.columns.is_empty() {
            batch.columns = names.iter().map(|_| StringBuilder::new()).collect();
        }
        sink.rows(batch.take(names)?)?;
    }
    Ok(())
}

/// The column names of a header line: a trailing empty name (the line ends with the
/// separator) is dropped, other empty names become `_c<i>`.
fn header_names(record: &csv::ByteRecord, _sep: u8) -> Vec<String> {
    column_names(
        record
            .iter()
            .map(|f| String::from_utf8_lossy(f).into_owned()),
    )
}

/// The column names of a header's `fields` (as text): trimmed, a trailing empty one (the
/// line ends with the separator) dropped, other empty ones `_c<i>`. The Spark engine names
/// a header's columns with it too.
pub fn column_names(fields: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut names: Vec<String> = fields.into_iter().map(|f| f.trim().to_string()).collect();
    if names.len() > 1 && names.last().is_some_and(String::is_empty) {
        names.pop();
    }
    names
        .into_iter()
        .enumerate()
        .map(|(i, n)| if n.is_empty() { format!("_c{i}") } else { n })
        .collect()
}

/// Rows being collected.
#[derive(Default)]
struct Batch {
    header_done: Option<()>,
    columns: Vec<StringBuilder>,
    rows: Vec<i64>,
    extra: Vec<Option<String>>,
    any_extra: bool,
}

impl Batch {
    fn push(&mut self, row: i64, extra: Option<String>) {
        self.rows.push(row);
        self.any_extra |= extra.is_some();
        self.extra.push(extra);
    }

    fn take(&mut self, names: &[String]) -> Result<RawRows> {
        let schema = Arc::new(Schema::new(
            names
                .iter()
                .map(|n| Field::new(n, DataType::Utf8, true))
                .collect::<Vec<_>>(),
        ));
        let columns: Vec<ArrayRef> = self
            .columns
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as ArrayRef)
            .collect();
        let batch = RecordBatch::try_new_with_options(
            schema,
            columns,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(self.rows.len())),
        )?;
        let extra = std::mem::take(&mut self.extra);
        let any = std::mem::take(&mut self.any_extra);
        Ok(RawRows {
            batch,
            rows: std::mem::take(&mut self.rows),
            extra: any.then_some(extra),
        })
    }
}

/// Decodes a non-UTF-8 text stream to UTF-8 as it is read.
struct Decode<R> {
    inner: R,
    decoder: encoding_rs::Decoder,
    input: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    output: Vec<u8>,
    out_start: usize,
}

impl<R: Read> Decode<R> {
    fn new(inner: R, encoding: &'static encoding_rs::Encoding) -> Self {
        Self {
            inner,
            decoder: encoding.new_decoder_with_bom_removal(),
            input: vec![0; 1 << 16],
            start: 0,
            end: 0,
            eof: false,
            output: Vec::new(),
            out_start: 0,
        }
    }
}

impl<R: Read> Read for Decode<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if self.out_start < self.output.len() {
                let n = buf.len().min(self.output.len() - self.out_start);
                buf[..n].copy_from_slice(&self.output[self.out_start..self.out_start + n]);
                self.out_start += n;
                return Ok(n);
            }
            if self.eof && self.start == self.end {
                return Ok(0);
            }
            if self.start == self.end && !self.eof {
                self.start = 0;
                self.end = self.inner.read(&mut self.input)?;
                self.eof = self.end == 0;
            }
            let capacity = self
                .decoder
                .max_utf8_buffer_length(self.end - self.start)
                .unwrap_or(1 << 18)
                .max(16);
            self.output.clear();
            self.output.resize(capacity, 0);
            self.out_start = 0;
            let (_, read, written, _) = self.decoder.decode_to_utf8(
                &self.input[self.start..self.end],
                &mut self.output,
                self.eof,
            );
            self.start += read;
            self.output.truncate(written);
            if self.eof && self.start == self.end && written == 0 {
                return Ok(0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Collect;

    fn read(text: &[u8], layout: &CsvLayout) -> Collect {
        let mut sink = Collect::default();
        read_csv(text, "t.csv", layout, 2, &mut sink).unwrap();
        sink
    }

    fn s(v: &str) -> Option<String> {
        Some(v.to_string())
    }

    #[test]
    fn header_quotes_and_everything_as_text() {
        let out = read(
            b"id,name,price\n1,\"a, b\",9.50\n2,\"say \"\"hi\"\"\",\n3,x,1\n",
            &CsvLayout::default(),
        );
        assert_eq!(out.names(), ["id", "name", "price"]);
        assert_eq!(
            out.rows(),
            vec![
                vec![s("1"), s("a, b"), s("9.50")],
                vec![s("2"), s("say \"hi\""), None],
                vec![s("3"), s("x"), s("1")],
            ]
        );
        assert_eq!(out.numbers(), [1, 2, 3]);
    }

    #[test]
    fn tpch_lines_without_header_with_a_trailing_separator() {
        let layout = CsvLayout {
            header: false,
            sep: b'|',
            columns: Some(vec!["p_partkey".into(), "p_name".into(), "p_size".into()]),
            ..CsvLayout::default()
        };
        let out = read(b"1|goldenrod lavender|7|\n2|blush thistle|1|\n", &layout);
        assert_eq!(out.names(), ["p_partkey", "p_name", "p_size"]);
        assert_eq!(out.rows()[1], vec![s("2"), s("blush thistle"), s("1")]);
        assert!(out.extra().iter().all(Option::is_none));
        // Without names (Spark's `_c0`, `_c1`, …) an empty last field is a column like any
        // other: nothing says it is a trailing separator.
        let out = read(
            b"1|x|\n",
            &CsvLayout {
                header: false,
                sep: b'|',
                ..CsvLayout::default()
            },
        );
        assert_eq!(out.names(), ["_c0", "_c1", "_c2"]);
    }

    #[test]
    fn null_value_and_escape() {
        let layout = CsvLayout {
            null_value: Some("\\N".into()),
            escape: Some(b'\\'),
            ..CsvLayout::default()
        };
        let out = read(b"a,b,c\n\\N,\"x\\\"y\",\n", &layout);
        // With `null_value` set, an empty field is an empty string.
        assert_eq!(out.rows(), vec![vec![None, s("x\"y"), s("")]]);
    }

    #[test]
    fn short_lines_are_malformed_long_ones_keep_their_extra_fields() {
        let out = read(b"a,b\n1,2\n3\n4,5,6,7\n8,9\n", &CsvLayout::default());
        assert_eq!(out.rows().len(), 3);
        assert_eq!(
            out.malformed,
            vec![Malformed {
                line: 3,
                raw: "3".into(),
                reason: "1 fields, but the file has 2 columns".into()
            }]
        );
        assert_eq!(out.extra()[1].as_deref(), Some(r#"{"_c2":"6","_c3":"7"}"#));
        assert_eq!(out.numbers(), [1, 3, 4]);
    }

    #[test]
    fn encodings_and_invalid_text() {
        // "品名,価格\nりんご,100\n" in Shift_JIS.
        let (sjis, _, _) = encoding_rs::SHIFT_JIS.encode("品名,価格\nりんご,100\n");
        let out = read(
            &sjis,
            &CsvLayout {
                encoding: "shift_jis".into(),
                ..CsvLayout::default()
            },
        );
        assert_eq!(out.names(), ["品名", "価格"]);
        assert_eq!(out.rows(), vec![vec![s("りんご"), s("100")]]);
        // The same bytes read as UTF-8: the line is quarantined, naming the option.
        let out = read(&sjis, &CsvLayout::default());
        assert_eq!(out.malformed.len(), 1);
        assert!(
            out.malformed[0].reason.contains("encoding"),
            "{:?}",
            out.malformed
        );
    }

    #[test]
    fn header_and_columns_must_agree_and_empty_files_give_columns() {
        let layout = CsvLayout {
            columns: Some(vec!["only".into()]),
            ..CsvLayout::default()
        };
        let mut sink = Collect::default();
        let err = read_csv(&b"a,b\n1,2\n"[..], "c.csv", &layout, 10, &mut sink)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("c.csv: line 1: the header has 2 columns"),
            "{err}"
        );
        let out = read(b"x,y\n", &CsvLayout::default());
        assert_eq!(out.names(), ["x", "y"]);
        assert!(out.rows().is_empty());
    }

    proptest::proptest! {
        /// Any table of text, written by the `csv` crate with any separator and quote
        /// (fields with separators, quotes, line breaks, non-ASCII), reads back as written;
        /// an empty field is NULL.
        #[test]
        fn what_a_csv_writer_writes_reads_back(
            rows in proptest::collection::vec(
                proptest::collection::vec("[a-c,;|\"' \n\r\té品]{0,6}", 3),
                1..20,
            ),
            sep in proptest::sample::select(vec![b',', b';', b'|', b'\t']),
            quote in proptest::sample::select(vec![b'"', b'\'']),
        ) {
            let mut w = csv::WriterBuilder::new()
                .delimiter(sep)
                .quote(quote)
                .quote_style(csv::QuoteStyle::Necessary)
                .from_writer(Vec::new());
            w.write_record(["a", "b", "c"]).unwrap();
            for r in &rows {
                w.write_record(r).unwrap();
            }
            let bytes = w.into_inner().unwrap();
            let layout = CsvLayout { sep, quote, ..CsvLayout::default() };
            let mut sink = Collect::default();
            read_csv(&bytes[..], "p.csv", &layout, 7, &mut sink).unwrap();
            proptest::prop_assert!(sink.malformed.is_empty(), "{:?}", sink.malformed);
            let want: Vec<Vec<Option<String>>> = rows
                .iter()
                .map(|r| r.iter().map(|v| (!v.is_empty()).then(|| v.clone())).collect())
                .collect();
            proptest::prop_assert_eq!(sink.rows(), want);
        }
    }
}
