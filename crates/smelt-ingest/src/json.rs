//! JSON lines (one object per line) as text columns, in the order keys first appear.
//!
//! Values are kept as text: strings as they are, numbers and booleans as written, nested
//! objects and arrays as JSON. A line that is not a JSON object is [`Malformed`].

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;

use crate::{IngestError, Malformed, RawRows, Result, RowSink};

/// The pairs of one JSON object, in the order they are written.
struct Pairs(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Pairs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl<'de> Visitor<'de> for Visit {
            type Value = Pairs;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Pairs, A::Error> {
                let mut pairs = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    pairs.push((k, v));
                }
                Ok(Pairs(pairs))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// Reads JSON lines from `input` (named `file` in errors) into `sink`, `batch_size` rows
/// at a time. Blank lines are skipped; a row number is its line number.
pub fn read_json<R: Read>(
    input: R,
    file: &str,
    batch_size: usize,
    sink: &mut dyn RowSink,
) -> Result<()> {
    let mut input = BufReader::with_capacity(1 << 16, input);
    let mut line = Vec::new();
    let mut number = 0i64;
    let mut batch = Batch::default();
    loop {
        line.clear();
        let n = input
            .read_until(b'\n', &mut line)
            .map_err(|source| IngestError::Io {
                file: file.to_string(),
                source,
            })?;
        if n == 0 {
            break;
        }
        number += 1;
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Pairs>(text) {
            Ok(Pairs(pairs)) => {
                batch.push(number, pairs);
                if batch.rows.len() >= batch_size.max(1) {
                    sink.rows(batch.take()?)?;
                }
            }
            Err(e) => sink.malformed(Malformed {
                line: number,
                raw: String::from_utf8_lossy(text).into_owned(),
                reason: format!("not a JSON object: {e}"),
            })?,
        }
    }
    if !batch.rows.is_empty() {
        sink.rows(batch.take()?)?;
    }
    Ok(())
}

/// Rows being collected: one column per key seen in the batch.
#[derive(Default)]
struct Batch {
    names: Vec<String>,
    index: HashMap<String, usize>,
    values: Vec<Vec<Option<String>>>,
    rows: Vec<i64>,
}

impl Batch {
    fn push(&mut self, number: i64, pairs: Vec<(String, Value)>) {
        let row = self.rows.len();
        self.rows.push(number);
        for (k, v) in pairs {
            let i = *self.index.entry(k.clone()).or_insert_with(|| {
                self.names.push(k);
                self.values.push(Vec::new());
                self.names.len() - 1
            });
            let column = &mut self.values[i];
            column.resize(row, None);
            let text = match v {
                Value::Null => None,
                Value::String(s) => Some(s),
                other => Some(other.to_string()),
            };
            // A key written twice on one line: the last value wins, as in JavaScript.
            if column.len() == row + 1 {
                column[row] = text;
            } else {
                column.push(text);
            }
        }
    }

    fn take(&mut self) -> Result<RawRows> {
        let rows = std::mem::take(&mut self.rows);
        let names = std::mem::take(&mut self.names);
        self.index.clear();
        let columns: Vec<ArrayRef> = std::mem::take(&mut self.values)
            .into_iter()
            .map(|mut c| {
                c.resize(rows.len(), None);
                Arc::new(StringArray::from(c)) as ArrayRef
            })
            .collect();
        let schema = Arc::new(Schema::new(
            names
                .iter()
                .map(|n| Field::new(n, DataType::Utf8, true))
                .collect::<Vec<_>>(),
        ));
        let batch = RecordBatch::try_new_with_options(
            schema,
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows.len())),
        )?;
        Ok(RawRows {
            batch,
            rows,
            extra: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Collect;

    fn s(v: &str) -> Option<String> {
        Some(v.to_string())
    }

    #[test]
    fn keys_in_order_values_as_text_bad_lines_quarantined() {
        let text = concat!(
            "{\"z\": \"a\", \"id\": 1, \"ok\": true}\n",
            "\n",
            "{\"id\": 2.50, \"tags\": [1, \"x\"], \"z\": null, \"new\": {\"a\": 1}}\n",
            "{\"id\": 3,\n",
            "[1, 2]\n",
        );
        let mut sink = Collect::default();
        read_json(text.as_bytes(), "f.json", 100, &mut sink).unwrap();
        let b = &sink.batches[0];
        assert_eq!(b.names, ["z", "id", "ok", "tags", "new"]);
        assert_eq!(
            b.rows,
            vec![
                vec![s("a"), s("1"), s("true"), None, None],
                vec![None, s("2.5"), None, s("[1,\"x\"]"), s("{\"a\":1}")],
            ]
        );
        assert_eq!(b.numbers, [1, 3]);
        assert_eq!(
            sink.malformed.iter().map(|m| m.line).collect::<Vec<_>>(),
            [4, 5]
        );
        assert!(sink.malformed[1].reason.contains("JSON object"));
    }

    #[test]
    fn batches_are_bounded() {
        let text = "{\"a\": 1}\n{\"a\": 2}\n{\"b\": 3}\n";
        let mut sink = Collect::default();
        read_json(text.as_bytes(), "f.json", 2, &mut sink).unwrap();
        assert_eq!(sink.batches.len(), 2);
        assert_eq!(sink.batches[1].names, ["b"]);
    }

    proptest::proptest! {
        /// Objects with any text values (or NULL), one a line, read back column by column
        /// in the order keys first appear, a missing key being NULL.
        #[test]
        fn json_lines_read_back(
            rows in proptest::collection::vec(
                proptest::collection::vec(
                    (proptest::sample::select(vec!["id", "name", "x y", "é"]),
                     proptest::option::of("[a-z\"\\\n é品]{0,5}")),
                    0..4,
                ),
                1..12,
            ),
        ) {
            let mut text = String::new();
            let mut names: Vec<&str> = Vec::new();
            let mut want: Vec<std::collections::HashMap<&str, Option<String>>> = Vec::new();
            for r in &rows {
                // Written by hand: keys in this order (a serde_json map would sort them).
                let mut pairs = Vec::new();
                let mut row = std::collections::HashMap::new();
                for (k, v) in r {
                    if row.contains_key(k) {
                        continue;
                    }
                    let value = v.clone().map_or(Value::Null, Value::from);
                    pairs.push(format!("{}: {value}", Value::from(*k)));
                    row.insert(*k, v.clone());
                    if !names.contains(k) {
                        names.push(k);
                    }
                }
                text.push_str(&format!("{{{}}}\n", pairs.join(", ")));
                want.push(row);
            }
            let mut sink = Collect::default();
            read_json(text.as_bytes(), "p.jsonl", 1000, &mut sink).unwrap();
            proptest::prop_assert!(sink.malformed.is_empty());
            let got = &sink.batches[0];
            let keys: Vec<&str> = got.names.iter().map(String::as_str).collect();
            proptest::prop_assert_eq!(&keys, &names);
            for (row, want) in got.rows.iter().zip(&want) {
                for (k, v) in keys.iter().zip(row) {
                    proptest::prop_assert_eq!(v, &want.get(k).cloned().flatten());
                }
            }
        }
    }
}
