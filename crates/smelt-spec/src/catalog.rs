//! `catalogs:`: the Iceberg catalogs a pipeline's three-part table names (`ice.ns.table`)
//! refer to.

use std::path::Path;

use serde::Deserialize;

use crate::check::check_lake_url;
use crate::error::{SpecError, did_you_mean};
use crate::locate::line_of;
use crate::ordered::Ordered;

/// An Iceberg catalog named under `catalogs:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog {
    /// The name tables are prefixed with (`ice` in `ice.ns.table`).
    pub name: String,
    /// Where the catalog keeps its table pointers.
    pub kind: CatalogKind,
    /// Where new tables go: a local folder (made absolute against the pipeline file's folder) or
    /// a storage URL, as a lake. `None` lets a REST catalog choose.
    pub warehouse: Option<String>,
    /// Further catalog properties (`token`, `credential`, `prefix`, `header.X`, …), passed
    /// to the catalog as written, in file order.
    pub properties: Vec<(String, String)>,
}

/// The catalog kinds smelt opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogKind {
    /// A SQL database of table pointers, as pyiceberg's `SqlCatalog` keeps it: `uri` is
    /// `sqlite:` with a file (resolved against the pipeline file's folder).
    Sql {
        /// `sqlite:///abs/path.db` (a relative path resolved and made absolute).
        uri: String,
    },
    /// The Iceberg REST catalog protocol.
    Rest {
        /// The catalog's base URL, `http(s)://host:port[/path]`.
        uri: String,
    },
}

impl CatalogKind {
    /// `sql` or `rest`, as written.
    pub fn name(&self) -> &'static str {
        match self {
            CatalogKind::Sql { .. } => "sql",
            CatalogKind::Rest { .. } => "rest",
        }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct RawCatalog {
    #[serde(rename = "type")]
    kind: Option<String>,
    uri: Option<String>,
    warehouse: Option<String>,
    #[serde(flatten)]
    properties: serde_norway::Mapping,
}

const KINDS: [&str; 2] = ["sql", "rest"];

/// Reads `catalogs:`, collecting every problem.
pub(crate) fn catalogs(
    path: &Path,
    dir: &Path,
    text: &str,
    raw: Ordered<RawCatalog>,
    errors: &mut Vec<SpecError>,
) -> Vec<Catalog> {
    let mut out = Vec::new();
    for (name, raw) in raw.0 {
        let at = |leaf: &str| {
            line_of(text, &["catalogs", &name, leaf])
                .or_else(|| line_of(text, &["catalogs", &name]))
        };
        let field = |leaf: &str| format!("catalogs.{name}.{leaf}");
        let before = errors.len();
        if name.is_empty() || name.contains(['.', '/', '\\', '`', '"']) {
            errors.push(
                SpecError::new(
                    path,
                    format!("catalogs.{name}"),
                    format!("`{name}` is not a catalog name"),
                )
                .at(line_of(text, &["catalogs", &name]))
                .hint("name catalogs with letters, digits and `_`, e.g. `ice`"),
            );
        }
        let uri = raw.uri.clone().unwrap_or_default();
        let kind = match raw.kind.as_deref() {
            Some("sql") => match sqlite_uri(&uri, dir) {
                Ok(uri) => Some(CatalogKind::Sql { uri }),
                Err(message) => {
                    errors.push(
                        SpecError::new(path, field("uri"), message)
                            .at(at("uri"))
                            .hint("write `uri: sqlite:///abs/path/catalog.db` or `uri: sqlite:catalog.db` (next to the pipeline file)"),
                    );
                    None
                }
            },
            Some("rest") => {
                if uri.starts_with("http://") || uri.starts_with("https://") {
                    Some(CatalogKind::Rest {
                        uri: uri.trim_end_matches('/').to_string(),
                    })
                } else {
                    errors.push(
                        SpecError::new(
                            path,
                            field("uri"),
                            format!("`{uri}` is not the URL of a REST catalog"),
                        )
                        .at(at("uri"))
                        .hint(
                            "write `uri: http://host:port` (the catalog's base URL, without `/v1`)",
                        ),
                    );
                    None
                }
            }
            Some(other) => {
                let hint = did_you_mean(other, KINDS)
                    .map(|c| format!("did you mean `{c}`?"))
                    .unwrap_or_else(|| "use `type: sql` (a SQLite file) or `type: rest`".into());
                errors.push(
                    SpecError::new(
                        path,
                        field("type"),
                        format!("there is no catalog type `{other}`"),
                    )
                    .at(at("type"))
                    .hint(&hint),
                );
                None
            }
            None => {
                errors.push(
                    SpecError::new(path, field("type"), "missing `type`")
                        .at(at("type"))
                        .hint("add `type: sql` (a SQLite file) or `type: rest`"),
                );
                None
            }
        };
        let warehouse = match raw.warehouse {
            Some(w) if w.contains("://") => {
                if let Err(message) = check_lake_url(&w) {
                    errors.push(
                        SpecError::new(path, field("warehouse"), message)
                            .at(at("warehouse"))
                            .hint("use a local folder, or an `s3://`, `gs://`, `az://`, `abfss://` or `file://` URL"),
                    );
                }
                Some(w)
            }
            Some(w) => {
                let path = dir.join(w);
                let path = std::path::absolute(&path).unwrap_or(path);
                Some(path.to_string_lossy().into_owned())
            }
            None => None,
        };
        if warehouse.is_none() && matches!(kind, Some(CatalogKind::Sql { .. })) {
            errors.push(
                SpecError::new(
                    path,
                    field("warehouse"),
                    "a `sql` catalog needs a `warehouse`",
                )
                .at(at("warehouse"))
                .hint("add `warehouse: ./warehouse` (a folder or storage URL where new tables go)"),
            );
        }
        let mut properties = Vec::new();
        for (key, value) in raw.properties {
            let key = match key {
                serde_norway::Value::String(k) => k,
                other => format!("{other:?}"),
            };
            match value {
                serde_norway::Value::String(s) => properties.push((key, s)),
                serde_norway::Value::Number(n) => properties.push((key, n.to_string())),
                serde_norway::Value::Bool(b) => properties.push((key, b.to_string())),
                _ => errors.push(
                    SpecError::new(path, field(&key), "a catalog property is a single value")
                        .at(at(&key))
                        .hint("write it as `key: value`"),
                ),
            }
        }
        if errors.len() == before
            && let Some(kind) = kind
        {
            out.push(Catalog {
                name,
                kind,
                warehouse,
                properties,
            });
        }
    }
    out
}

/// `sqlite:` URIs with their path made absolute against `dir`.
fn sqlite_uri(uri: &str, dir: &Path) -> Result<String, String> {
    let Some(rest) = uri.strip_prefix("sqlite:") else {
        return Err(if uri.is_empty() {
            "missing `uri`: the SQLite file that holds the catalog".to_string()
        } else {
            format!("`{uri}` is not a SQLite URI; smelt's `sql` catalogs are SQLite files")
        });
    };
    let (file, query) = rest
        .split_once('?')
        .map_or((rest, None), |(f, q)| (f, Some(q)));
    let file = file.trim_start_matches("//");
    if file.is_empty() || file == ":memory:" {
        return Err(format!(
            "`{uri}` names no file; a catalog must outlive the run"
        ));
    }
    let abs = if Path::new(file).is_absolute() {
        Path::new(file).to_path_buf()
    } else {
        dir.join(file)
    };
    let abs = std::path::absolute(&abs).unwrap_or(abs);
    Ok(match query {
        Some(q) => format!("sqlite://{}?{q}", abs.display()),
        None => format!("sqlite://{}", abs.display()),
    })
}

#[cfg(test)]
mod tests {
    use crate::{CatalogKind, Pipeline, TableName};
    use std::path::Path;

    fn load(text: &str) -> crate::error::Result<Pipeline> {
        Pipeline::from_str(text, Path::new("/p/smelt.yaml"))
    }

    #[test]
    fn catalogs_resolve_paths_and_three_part_names_reach_them() {
        let p = load(
            "lake: ./lake\ncatalogs:\n  ice:\n    type: sql\n    uri: sqlite:cat.db\n    warehouse: ./wh\n  r:\n    type: rest\n    uri: http://127.0.0.1:8181/\n    token: abc\n    pool.max-connections: 2\nflows:\n  a:\n    append:\n      from: raw.t\n      into: ice.ns.t\n",
        )
        .unwrap();
        assert_eq!(
            p.catalogs[0].kind,
            CatalogKind::Sql {
                uri: "sqlite:///p/cat.db".into()
            }
        );
        assert_eq!(p.catalogs[0].warehouse.as_deref(), Some("/p/wh"));
        assert_eq!(
            p.catalogs[1].kind,
            CatalogKind::Rest {
                uri: "http://127.0.0.1:8181".into()
            }
        );
        assert_eq!(
            p.catalogs[1].properties,
            vec![
                ("token".into(), "abc".into()),
                ("pool.max-connections".into(), "2".into())
            ]
        );
        let into = p.flows[0].writes().unwrap();
        assert_eq!(into.catalog.as_deref(), Some("ice"));
        assert_eq!(into.to_string(), "ice.ns.t");
        assert_eq!(p.flows[0].reads(), Some(&TableName::new("raw", "t")));
    }

    #[test]
    fn bad_catalogs_and_unknown_catalog_names_are_named() {
        let err = load(
            "lake: l\ncatalogs:\n  ice:\n    type: hive\n  s:\n    type: sql\n    uri: postgres://x\n    warehouse: w\n  n:\n    type: sql\n    uri: sqlite:c.db\ntables:\n  ice.ns.t: ./x\nflows:\n  a:\n    append:\n      from: icy.ns.t\n      into: s.t\n",
        )
        .unwrap_err();
        let got: Vec<(String, String, Option<String>)> = err
            .0
            .iter()
            .map(|e| (e.field.clone(), e.message.clone(), e.hint.clone()))
            .collect();
        let messages = format!("{got:#?}");
        assert_eq!(err.0.len(), 5, "{messages}");
        assert!(
            messages.contains("there is no catalog type `hive`"),
            "{messages}"
        );
        assert!(
            messages.contains("`postgres://x` is not a SQLite URI"),
            "{messages}"
        );
        assert!(
            messages.contains("a `sql` catalog needs a `warehouse`"),
            "{messages}"
        );
        assert!(
            messages.contains("`ice.ns.t` is an Iceberg table; its catalog places it"),
            "{messages}"
        );
        assert!(
            messages.contains("`icy.ns.t` names catalog `icy`, which `catalogs:` does not define"),
            "{messages}"
        );
        let err = load(
            "lake: l\ncatalogs:\n  ice: {type: sql, uri: 'sqlite:c.db', warehouse: w}\nflows:\n  a:\n    append:\n      from: icy.ns.t\n      into: s.t\n",
        )
        .unwrap_err();
        assert_eq!(err.0[0].hint.as_deref(), Some("did you mean `ice`?"));
        assert_eq!(err.0[0].field, "flows.a.append.from");
        assert_eq!(err.0[0].line, Some(7));
    }

    #[test]
    fn three_part_names_parse_and_print() {
        let t = TableName::parse("ice.ns.t").unwrap();
        assert_eq!(
            (t.catalog.as_deref(), t.schema.as_str(), t.table.as_str()),
            (Some("ice"), "ns", "t")
        );
        assert_eq!(
            t.sibling("t__tombstones").to_string(),
            "ice.ns.t__tombstones"
        );
        assert!(TableName::parse("a.b.c.d").is_none());
        assert!(TableName::parse("a..c").is_none());
    }
}
