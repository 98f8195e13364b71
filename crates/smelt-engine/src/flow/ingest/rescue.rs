//! The rescued-data column of an ingest flow: the values that have no place in bronze (a
//! column bronze lacks, a value that does not fit its type, a field without a name), one
//! JSON object per row — and, when the flow keeps no such column, the first of them in
//! words for the error.

use arrow::array::{Array, ArrayRef, StringArray};
use arrow::datatypes::Schema;
use arrow::util::display::array_value_to_string;
use serde_json::{Map, Value};

use crate::Result;

/// Values of one column that did not fit its bronze type: the column's name, its values as
/// read, and the rows that failed.
pub(super) type Misfit = (String, ArrayRef, Vec<usize>);

/// What the rescued-data column holds, one JSON object per row of `n` (no rows when there
/// is nothing to rescue): the values of the columns `rescue`, those of `failed` that did
/// not fit, and the fields without a name of `extra`.
pub(super) fn rescued_objects(
    rescue: &[(String, ArrayRef)],
    failed: &[Misfit],
    extra: Option<&[Option<String>]>,
    n: usize,
) -> Result<Vec<Map<String, Value>>> {
    let nothing = rescue.is_empty() && failed.is_empty() && extra.is_none();
    let mut objects: Vec<Map<String, Value>> = if nothing {
        Vec::new()
    } else {
        vec![Map::new(); n]
    };
    for (name, c) in rescue {
        for (i, object) in objects.iter_mut().enumerate() {
            if c.is_valid(i) {
                object.insert(name.clone(), Value::from(array_value_to_string(c, i)?));
            }
        }
    }
    for (name, c, rows) in failed {
        for &i in rows {
            objects[i].insert(name.clone(), Value::from(array_value_to_string(c, i)?));
        }
    }
    if let Some(extra) = extra {
        for (object, e) in objects.iter_mut().zip(extra) {
            if let Some(Ok(Value::Object(e))) = e.as_deref().map(serde_json::from_str) {
                object.extend(e);
            }
        }
    }
    Ok(objects)
}

/// The first thing to rescue, said in words, and its row in the file (`file_rows` numbers
/// the `n` rows): for the error when the flow has no rescued-data column.
pub(super) fn first_unrescued(
    rescue: &[(String, ArrayRef)],
    failed: &[Misfit],
    objects: &[Map<String, Value>],
    schema: &Schema,
    file_rows: &[i64],
    n: usize,
) -> Result<(String, i64)> {
    Ok(match (failed.first(), rescue.first()) {
        (Some((c, v, rows)), _) => (
            format!(
                "value `{}` of column `{c}` does not fit type {}",
                array_value_to_string(v, rows[0])?,
                schema.field_with_name(c)?.data_type()
            ),
            file_rows[rows[0]],
        ),
        (None, Some((c, values))) => {
            let row = (0..n).find(|&i| values.is_valid(i)).unwrap_or(0);
            (
                format!("column `{c}` has no place in bronze"),
                file_rows.get(row).copied().unwrap_or(0),
            )
        }
        (None, None) => {
            let row = objects.iter().position(|o| !o.is_empty()).unwrap_or(0);
            (
                "the line has more fields than columns".to_string(),
                file_rows[row],
            )
        }
    })
}

/// The rescued-data column: each row's object as JSON text, null where it is empty; with
/// the number of rows that have one.
pub(super) fn rescued_texts(objects: Vec<Map<String, Value>>) -> (StringArray, usize) {
    let mut rescued = 0;
    let texts: StringArray = objects
        .into_iter()
        .map(|o| {
            (!o.is_empty()).then(|| {
                rescued += 1;
                Value::Object(o).to_string()
            })
        })
        .collect();
    (texts, rescued)
}
