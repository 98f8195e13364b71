//! `smelt sql`: DataFusion over every lake table as `schema.table`, plus the DDL and DML
//! of the seed scripts — `CREATE [OR REPLACE] TABLE` (BigQuery `OPTIONS`, Spark
//! `TBLPROPERTIES`), `ALTER TABLE … SET OPTIONS/TBLPROPERTIES`, `INSERT INTO|OVERWRITE …
//! VALUES | SELECT`, `TRUNCATE TABLE`, `UPDATE`, `DELETE`, `MERGE` (`dml`); time travel in queries (`VERSION AS OF`, `TIMESTAMP AS OF`,
//! `FOR SYSTEM_TIME AS OF`: `time_travel`).

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use deltalake::datafusion::execution::context::SQLOptions;
use deltalake::datafusion::prelude::{DataFrame, SessionContext};
use deltalake::datafusion::sql::parser::Statement as DFStatement;
use deltalake::datafusion::sql::sqlparser::ast::{
    Ident, ObjectName, ObjectNamePart, Statement, visit_relations_mut,
};
use smelt_spec::TableName;
use smelt_spec::ddl::{parse_script_spark, table_def};

use crate::Lake;
use crate::error::{Context, Error, Result};
use catalogs::CatalogTables;

pub mod catalogs;
mod changes;
mod commit_failpoint;
mod ddl;
mod describe;
mod dialect;
mod dml;
mod insert;
pub(crate) mod safe_cast;
pub(crate) mod snapshot;
mod time_travel;
mod unsupported;
mod variables;

/// What one statement produced.
#[derive(Debug)]
pub enum SqlOutput {
    /// A statement that changed the lake: what it did.
    Message(String),
    /// A query result.
    Rows {
        /// The result schema.
        schema: SchemaRef,
        /// The rows.
        batches: Vec<RecordBatch>,
    },
}

/// Runs a script of `;`-separated statements in order, stopping at the first failure.
/// Outputs of the statements that ran are returned with the error's statement number.
/// Tables named `catalog.namespace.table` are read from `catalogs`.
pub async fn execute(
    lake: &Lake,
    catalogs: &dyn CatalogTables,
    sql: &str,
) -> std::result::Result<Vec<SqlOutput>, (Vec<SqlOutput>, usize, Error)> {
    let (statements, spark) = parse(sql).map_err(|failed| {
        let (n, e) = *failed;
        (Vec::new(), n, e)
    })?;
    let mut outputs = Vec::new();
    let mut variables = variables::Variables::default();
    // Variables' values are constant expressions: no table is registered for them.
    let constants = SessionContext::new_with_config(
        deltalake::datafusion::prelude::SessionConfig::new()
            .set_str("datafusion.sql_parser.dialect", "BigQuery")
            .set_bool("datafusion.sql_parser.enable_ident_normalization", false),
    );
    safe_cast::register(&constants);
    for (i, mut statement) in statements.into_iter().enumerate() {
        match variables.run(&constants, &statement).await {
            Ok(Some(out)) => {
                outputs.push(out);
                continue;
            }
            Ok(None) => {
                if let Err(e) = variables.shadowed(lake, &statement).await {
                    return Err((outputs, i + 1, e));
                }
                variables.substitute(&mut statement)
            }
            Err(e) => return Err((outputs, i + 1, e)),
        }
        if let Err(e) = refusals(&mut statement) {
            return Err((outputs, i + 1, e));
        }
        match execute_one(lake, catalogs, statement, spark).await {
            Ok(out) => outputs.push(out),
            Err(e) => return Err((outputs, i + 1, e)),
        }
    }
    Ok(outputs)
}

/// A statement that failed, and its number (0: the script does not parse).
pub type Failed = Box<(usize, Error)>;

/// `smelt sql`'s front end alone: parses `sql` and checks each statement's refusals,
/// running nothing (what the fuzzer drives). The number of statements, or the first
/// failure with its statement number (0: the script does not parse).
pub fn front_end(sql: &str) -> std::result::Result<usize, Failed> {
    let (statements, _) = parse(sql)?;
    let n = statements.len();
    for (i, mut statement) in statements.into_iter().enumerate() {
        refusals(&mut statement).map_err(|e| Box::new((i + 1, e)))?;
    }
    Ok(n)
}

/// The statements of `sql` and whether they are Spark's, or why smelt cannot parse them
/// (with the statement's number, 0 when unknown).
fn parse(sql: &str) -> std::result::Result<(Vec<Statement>, bool), Failed> {
    parse_script_spark(sql).map_err(|e| match unsupported::unparsed(sql) {
        Some((n, refused)) => Box::new((n, refused)),
        None => Box::new((
            0,
            Error::user(
                format!("cannot parse the SQL: {e}"),
                "smelt sql takes BigQuery, Spark or ANSI syntax; check the statement near the position shown",
            ),
        )),
    })
}

/// What a statement is refused for before it runs: a metadata table, a write to a catalog's
/// table. Its dotted names are split first (`` `a.b` `` is two parts).
fn refusals(statement: &mut Statement) -> Result<()> {
    split_dotted_names(statement);
    if let Some(e) = catalog_table(statement).and_then(|n| unsupported::metadata_table(&n)) {
        return Err(e);
    }
    catalogs::refuse_writes(statement)
}

/// The first table `statement` names with three parts or more (`catalog.namespace.table`,
/// a metadata table).
fn catalog_table(statement: &Statement) -> Option<String> {
    let mut found = None;
    let _ = deltalake::datafusion::sql::sqlparser::ast::visit_relations(
        statement,
        |name: &ObjectName| {
            if name.0.len() > 2 {
                found = Some(name.to_string());
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        },
    );
    found
}

/// BigQuery writes `` `dataset.table` `` as one quoted identifier; smelt reads it as
/// schema `dataset`, table `table`.
fn split_dotted_names(statement: &mut Statement) {
    let _ = visit_relations_mut(statement, |name: &mut ObjectName| {
        if name.0.len() == 1
            && let Some(ident) = name.0[0].as_ident()
            && ident.value.contains('.')
        {
            let quote = ident.quote_style;
            let span = ident.span;
            name.0 = ident
                .value
                .split('.')
                .map(|p| {
                    ObjectNamePart::Identifier(Ident {
                        value: p.to_string(),
                        quote_style: quote,
                        span,
                    })
                })
                .collect();
        }
        ControlFlow::<()>::Continue(())
    });
}

fn table_name(name: &ObjectName) -> Result<TableName> {
    TableName::from_object_name(name).ok_or_else(|| {
        Error::user(
            format!("`{name}` is not a `schema.table` name"),
            "name lake tables `schema.table`, e.g. `bronze.product2`",
        )
    })
}

/// Runs one statement; `spark`: the script is Spark SQL (its plain CASTs follow Spark's rules).
async fn execute_one(
    lake: &Lake,
    catalogs: &dyn CatalogTables,
    mut statement: Statement,
    spark: bool,
) -> Result<SqlOutput> {
    if !matches!(statement, Statement::Query(_)) {
        lake.check_safe_commits(None).await?;
    }
    dialect::rewrite(&mut statement);
    match statement {
        Statement::CreateTable(mut create) => {
            let as_select = create.query.take();
            let def = table_def(&create, Path::new("<sql>")).map_err(|e| {
                let first = &e.0[0];
                Error::user(
                    first.message.clone(),
                    first.hint.clone().unwrap_or_default(),
                )
            })?;
            match as_select {
                None => ddl::create_table(lake, &def).await,
                Some(_) if !def.columns.is_empty() => Err(Error::user(
                    format!(
                        "CREATE TABLE `{}` (…) AS SELECT: columns come from the query",
                        def.name
                    ),
                    "leave out the column list, or CREATE the table and then INSERT INTO … SELECT",
                )),
                Some(q) => {
                    let (schema, batches) =
                        query(lake, catalogs, Statement::Query(q), spark).await?;
                    ddl::create_table_as(lake, &def, schema, batches).await
                }
            }
        }
        Statement::AlterTable(alter) => ddl::alter_table(lake, alter).await,
        Statement::Truncate(truncate) => {
            let mut done = Vec::new();
            for target in &truncate.table_names {
                let name = table_name(&target.name)?;
                let table = lake.open_existing(&name, "check the table name").await?;
                let state = table.snapshot().context(|| format!("reading `{name}`"))?;
                crate::features::check_writable(&name.to_string(), state)?;
                let (_, metrics) = table
                    .delete()
                    .await
                    .context(|| format!("truncating `{name}`"))?;
                done.push(format!(
                    "truncated {name} ({} rows)",
                    metrics.num_deleted_rows.unwrap_or(0)
                ));
            }
            Ok(SqlOutput::Message(done.join("\n")))
        }
        Statement::Insert(i) => insert::insert(lake, catalogs, i, spark).await,
        Statement::CreateSchema { schema_name, .. } => {
            let name = schema_name.to_string().trim_matches('`').to_string();
            // A schema is a folder: made on a local lake, implied by its tables' paths
            // on an object store.
            if let Some(root) = lake.local_root() {
                let path = root.join(&name);
                std::fs::create_dir_all(&path).map_err(|source| Error::Io {
                    context: format!("creating `{}`", path.display()),
                    source,
                })?;
            }
            Ok(SqlOutput::Message(format!("created schema {name}")))
        }
        // UPDATE and DELETE read one table: its columns alone spell their names.
        Statement::Update(update) => dml::update(lake, update).await,
        Statement::Delete(delete) => dml::delete(lake, delete).await,
        mut merge @ Statement::Merge(_) => {
            let ctx = lake.session().await?;
            dialect::match_case(&ctx, &mut merge).await;
            let Statement::Merge(merge) = merge else {
                unreachable!("matched above")
            };
            dml::merge(lake, catalogs, &ctx, merge, spark).await
        }
        statement @ Statement::Query(_) => {
            let (schema, batches) = query(lake, catalogs, statement, spark).await?;
            Ok(SqlOutput::Rows { schema, batches })
        }
        other => Err(unsupported::statement(&other)),
    }
}

async fn query(
    lake: &Lake,
    catalogs: &dyn CatalogTables,
    statement: Statement,
    spark: bool,
) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let ctx = lake.session().await?;
    let df = dataframe(lake, catalogs, &ctx, statement, spark).await?;
    let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
    let batches = df
        .collect()
        .await
        .context(|| "running the query".to_string())?;
    Ok((schema, batches))
}

/// Makes sure the session schema `name` exists in `ctx` (where resolvers register the
/// tables they stand in for: time travel, change feeds, table metadata).
fn session_schema(ctx: &SessionContext, name: &str) -> Result<()> {
    let catalog = ctx.catalog("datafusion").expect("the default catalog");
    if catalog.schema(name).is_none() {
        catalog
            .register_schema(
                name,
                Arc::new(deltalake::datafusion::catalog::MemorySchemaProvider::new()),
            )
            .context(|| format!("registering the session schema `{name}`"))?;
    }
    Ok(())
}

/// Plans a query (time travel resolved) in `ctx`, refusing DDL and DML inside it.
async fn dataframe(
    lake: &Lake,
    catalogs: &dyn CatalogTables,
    ctx: &SessionContext,
    mut statement: Statement,
    spark: bool,
) -> Result<DataFrame> {
    describe::resolve(lake, catalogs, ctx, &mut statement).await?;
    changes::resolve(lake, ctx, &mut statement).await?;
    time_travel::resolve(lake, catalogs, ctx, &mut statement).await?;
    catalogs::resolve(catalogs, ctx, &statement).await?;
    dialect::match_case(ctx, &mut statement).await;
    safe_cast::rewrite(&mut statement, spark);
    let state = ctx.state();
    let plan = match state
        .statement_to_plan(DFStatement::Statement(Box::new(statement)))
        .await
    {
        Ok(plan) => plan,
        // A table the query names that does not open says so itself.
        Err(e) => match crate::session::into_engine(e) {
            Ok(engine) => return Err(engine.into()),
            Err(e) => {
                if let Some(unknown) = unknown_table(lake, &e).await {
                    return Err(unknown);
                }
                return Err(e).context(|| "planning the query".to_string());
            }
        },
    };
    SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .verify_plan(&plan)
        .context(|| "checking the query".to_string())?;
    ctx.execute_logical_plan(plan)
        .await
        .context(|| "running the query".to_string())
}

/// The error of a query naming a table the lake does not hold (DataFusion's "table
/// 'datafusion.s.t' not found"): the table, where it was looked for, and the names near it.
async fn unknown_table(lake: &Lake, e: &datafusion::error::DataFusionError) -> Option<Error> {
    let text = e.to_string();
    let quoted = text.split("table '").nth(1)?.split("' not found").next()?;
    let name = quoted.strip_prefix("datafusion.").unwrap_or(quoted);
    // A catalog's tables are resolved (and refused by name) before planning.
    let table = smelt_spec::TableName::parse(name).filter(|t| t.catalog.is_none())?;
    let known: Vec<String> = lake
        .tables()
        .await
        .ok()?
        .iter()
        .map(ToString::to_string)
        .collect();
    let hint = match smelt_spec::did_you_mean(name, known.iter().map(String::as_str)) {
        Some(near) => format!("did you mean `{near}`?"),
        None if known.is_empty() => {
            "the lake holds no table yet: create one with CREATE TABLE".into()
        }
        None => format!(
            "create it with CREATE TABLE, or name one the lake holds: {}",
            known.join(", ")
        ),
    };
    Some(Error::user(
        format!(
            "table `{table}` does not exist (looked in {})",
            lake.location(&table)
        ),
        hint,
    ))
}
