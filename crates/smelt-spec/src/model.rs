//! The validated model: a [`Pipeline`] of named [`Flow`]s, each of one [`FlowKind`], and
//! what each flow reads and writes.

use std::path::{Path, PathBuf};

use crate::append::AppendFlow;
use crate::apply::ApplyFlow;
use crate::ddl::TableName;
use crate::export::ExportFlow;
use crate::ingest::IngestFlow;
use crate::replace_where::{ReplaceSource, ReplaceWhereFlow};

/// A validated pipeline file.
#[derive(Debug, Clone)]
pub struct Pipeline {
    /// The file it was read from.
    pub file: PathBuf,
    /// Where the flows run (`engine:`, `connect:`).
    pub engine: Engine,
    /// The lake root: a local folder (resolved against the file's folder), or a storage URL
    /// (`s3://bucket/prefix`, `gs://…`, `az://…`, `abfss://…`, `file:///…`).
    pub lake: String,
    /// Object stores' timeouts and retries (`storage:`).
    pub storage: crate::storage::StoreSettings,
    /// Iceberg catalogs (`catalogs:`), in file order: where `catalog.namespace.table` names
    /// are found.
    pub catalogs: Vec<crate::catalog::Catalog>,
    /// Tables placed outside the lake root (`tables:`): name → local folder (resolved) or
    /// storage URL, in file order.
    pub tables: Vec<(TableName, String)>,
    /// Flows in file order.
    pub flows: Vec<Flow>,
}

/// Where a pipeline's flows run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Engine {
    /// In smelt's own process (default).
    #[default]
    Embedded,
    /// On a Spark cluster over Spark Connect (`engine: spark`); `connect` is its URL
    /// (`sc://host:port/;token=…`), which `--engine` or `SMELT_SPARK_REMOTE` may give instead.
    Spark {
        /// The Spark Connect URL of `connect:`.
        connect: Option<String>,
    },
}

/// One named flow.
#[derive(Debug, Clone)]
pub struct Flow {
    /// Name (the key under `flows:`).
    pub name: String,
    /// What the flow does.
    pub kind: FlowKind,
}

/// The kinds of flow (DESIGN §4).
// A pipeline holds a handful of flows: their size does not matter, boxing would only add
// indirection.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum FlowKind {
    /// Bronze → silver by key.
    Apply(ApplyFlow),
    /// Files → bronze, each file once.
    Ingest(IngestFlow),
    /// Rows added to a table → appended to another.
    Append(AppendFlow),
    /// A batch replaces the rows of a table matching a predicate.
    ReplaceWhere(ReplaceWhereFlow),
    /// Changed rows → Parquet files.
    Export(ExportFlow),
}

impl Flow {
    /// The table the flow reads, if it reads one.
    pub fn reads(&self) -> Option<&TableName> {
        match &self.kind {
            FlowKind::Apply(a) => Some(&a.from),
            FlowKind::Append(a) => Some(&a.from),
            FlowKind::Export(e) => Some(&e.from),
            FlowKind::ReplaceWhere(r) => match &r.from {
                ReplaceSource::Table(t) => Some(t),
                ReplaceSource::Files(_) => None,
            },
            FlowKind::Ingest(_) => None,
        }
    }

    /// The table the flow writes (`None` for an export, which writes files).
    pub fn writes(&self) -> Option<&TableName> {
        match &self.kind {
            FlowKind::Apply(a) => Some(&a.into),
            FlowKind::Ingest(i) => Some(&i.into),
            FlowKind::Append(a) => Some(&a.into),
            FlowKind::ReplaceWhere(r) => Some(&r.into),
            FlowKind::Export(_) => None,
        }
    }

    /// The DDL of the table the flow writes (`schema:`), if it has one.
    pub fn table_def(&self) -> Option<&crate::ddl::TableDef> {
        match &self.kind {
            FlowKind::Apply(a) => a.silver.as_ref(),
            FlowKind::Append(a) => a.target.as_ref(),
            FlowKind::ReplaceWhere(r) => r.target.as_ref(),
            FlowKind::Ingest(_) | FlowKind::Export(_) => None,
        }
    }

    /// The flow's kind as written in the file (`apply`, `ingest`, …).
    pub fn kind_name(&self) -> &'static str {
        match &self.kind {
            FlowKind::Apply(_) => "apply",
            FlowKind::Ingest(_) => "ingest",
            FlowKind::Append(_) => "append",
            FlowKind::ReplaceWhere(_) => "replace_where",
            FlowKind::Export(_) => "export",
        }
    }

    /// Where the flow reads from, for reports: a table or a folder.
    pub fn source(&self) -> String {
        match &self.kind {
            FlowKind::Ingest(i) => i.from.clone(),
            FlowKind::ReplaceWhere(r) => r.from_text.clone(),
            _ => self.reads().map(|t| t.to_string()).unwrap_or_default(),
        }
    }

    /// Whether the flow reads files that `other` writes (below an export's folder).
    pub fn reads_files_of(&self, other: &Flow) -> bool {
        let FlowKind::Export(e) = &other.kind else {
            return false;
        };
        let files = match &self.kind {
            FlowKind::Ingest(i) => i,
            FlowKind::ReplaceWhere(r) => match &r.from {
                ReplaceSource::Files(f) => f.as_ref(),
                ReplaceSource::Table(_) => return false,
            },
            _ => return false,
        };
        match (&files.url, &e.url) {
            (Some(a), Some(b)) => format!("{}/", a.trim_end_matches('/'))
                .starts_with(&format!("{}/", b.trim_end_matches('/'))),
            (None, None) => {
                let clean = |p: &Path| {
                    p.components()
                        .filter(|c| !matches!(c, std::path::Component::CurDir))
                        .collect::<PathBuf>()
                };
                clean(&files.folder).starts_with(clean(&e.folder))
            }
            _ => false,
        }
    }

    /// Where the flow writes, for reports: a table or a folder.
    pub fn target(&self) -> String {
        match &self.kind {
            FlowKind::Export(e) => e.to.clone(),
            _ => self.writes().map(|t| t.to_string()).unwrap_or_default(),
        }
    }
}

impl Pipeline {
    /// The flow called `name`.
    pub fn flow(&self, name: &str) -> Option<&Flow> {
        self.flows.iter().find(|f| f.name == name)
    }

    /// Whether `table`, created by smelt, keeps a change feed: when its DDL asks for one,
    /// or, the DDL silent, when a flow of the pipeline reads it (every flow, not only
    /// those a run selects).
    pub fn change_feed(&self, table: &TableName) -> ChangeFeed {
        let declared = self
            .flows
            .iter()
            .filter(|f| f.writes() == Some(table))
            .find_map(|f| f.table_def().and_then(|d| d.change_feed));
        let reader = self
            .flows
            .iter()
            .find(|f| f.reads() == Some(table))
            .map(|f| f.name.clone());
        match (declared, reader) {
            (Some(on), reader) => ChangeFeed::Declared { on, reader },
            (None, Some(flow)) => ChangeFeed::ReadBy(flow),
            (None, None) => ChangeFeed::Unread,
        }
    }
}

/// Whether a table smelt creates keeps a change feed, and why ([`Pipeline::change_feed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeFeed {
    /// Its DDL turns the feed on or off (`reader`: a flow of the pipeline that reads it).
    Declared {
        /// What the DDL asks.
        on: bool,
        /// A flow reading the table, if any.
        reader: Option<String>,
    },
    /// The DDL is silent and this flow reads the table: on.
    ReadBy(String),
    /// The DDL is silent and no flow reads the table: off.
    Unread,
}

impl ChangeFeed {
    /// Whether the feed is on.
    pub fn on(&self) -> bool {
        match self {
            ChangeFeed::Declared { on, .. } => *on,
            ChangeFeed::ReadBy(_) => true,
            ChangeFeed::Unread => false,
        }
    }
}

impl std::fmt::Display for ChangeFeed {
    /// `on (flow `x` reads it)` and the like.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChangeFeed::Declared { on: true, .. } => write!(f, "on (its DDL asks for one)"),
            ChangeFeed::Declared {
                on: false,
                reader: Some(flow),
            } => write!(
                f,
                "off (its DDL turns it off; flow `{flow}` reads it and will refuse rows replaced or deleted without one)"
            ),
            ChangeFeed::Declared { on: false, .. } => write!(f, "off (its DDL turns it off)"),
            ChangeFeed::ReadBy(flow) => write!(f, "on (flow `{flow}` reads it)"),
            ChangeFeed::Unread => write!(
                f,
                "off (no flow of the pipeline reads it and its DDL does not ask for one)"
            ),
        }
    }
}
