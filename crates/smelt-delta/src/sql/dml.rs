//! `UPDATE`, `DELETE` and `MERGE` on lake tables, each one Delta commit through delta-rs'
//! operations (with change data when the table's feed is on, so apply flows see the updates
//! and deletes). BigQuery's and Databricks' spellings: `MERGE [INTO] t [AS a] USING s|(query)
//! [AS b] ON … WHEN MATCHED [AND …] THEN UPDATE SET … | UPDATE SET * | DELETE, WHEN NOT
//! MATCHED [BY TARGET] [AND …] THEN INSERT (…) VALUES (…) | INSERT ROW | INSERT *, WHEN NOT
//! MATCHED BY SOURCE [AND …] THEN UPDATE SET … | DELETE`.

use std::ops::ControlFlow;

use deltalake::DeltaTable;
use deltalake::datafusion::prelude::SessionContext;
use deltalake::datafusion::sql::sqlparser::ast::{
    Assignment, AssignmentTarget, Delete, Expr, FromTable, Ident, Merge, MergeAction, MergeClause,
    MergeClauseKind, MergeInsertExpr, MergeInsertKind, MergeUpdateExpr, ObjectName, TableFactor,
    TableWithJoins, Update, visit_expressions_mut,
};
use deltalake::operations::merge::{MergeBuilder, UpdateBuilder};

use super::dialect::respell_columns;
use super::{SqlOutput, dataframe, table_name};
use crate::Lake;
use crate::error::{Context, Error, Result};

/// The assignment `UPDATE SET *` is read as (see `smelt_spec::ddl::parse_script`).
pub(crate) const SET_ALL: &str = smelt_spec::ddl::MERGE_SET_ALL;

/// `UPDATE t [AS a] SET c = e, … [WHERE …]`.
pub(super) async fn update(lake: &Lake, update: Update) -> Result<SqlOutput> {
    let unsupported = [
        (update.from.is_some(), "FROM"),
        (
            update.returning.is_some() || update.output.is_some(),
            "RETURNING / OUTPUT",
        ),
        (
            !update.order_by.is_empty() || update.limit.is_some(),
            "ORDER BY / LIMIT",
        ),
        (update.or.is_some(), "OR …"),
    ];
    if let Some((_, clause)) = unsupported.iter().find(|(used, _)| *used) {
        return Err(Error::user(
            format!("UPDATE with {clause} is not supported by smelt sql"),
            "update one table by a WHERE on its own columns, or MERGE INTO it USING the other table",
        ));
    }
    let (name, alias) = single_table(&update.table, "UPDATE")?;
    let table = writable(lake, &name, "UPDATE").await?;
    let columns = columns_of(&table, &name)?;
    let qualifiers = qualifiers(&name, alias.as_ref());
    let mut builder = table.update();
    if let Some(mut predicate) = update.selection {
        unqualify(&mut predicate, &qualifiers);
        respell_columns(&mut predicate, &columns);
        builder = builder.with_predicate(predicate.to_string());
    }
    for Assignment { target, mut value } in update.assignments {
        unqualify(&mut value, &qualifiers);
        respell_columns(&mut value, &columns);
        let col = column(&target, &qualifiers, &columns, "UPDATE")?;
        builder = builder.with_update(col.as_str(), value.to_string());
    }
    let (_, metrics) = builder.await.context(|| format!("updating `{name}`"))?;
    Ok(SqlOutput::Message(format!(
        "updated {} rows of {name}",
        metrics.num_updated_rows
    )))
}

/// `DELETE [FROM] t [AS a] [WHERE …]`.
pub(super) async fn delete(lake: &Lake, delete: Delete) -> Result<SqlOutput> {
    let from = match &delete.from {
        FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
    };
    let unsupported = [
        (
            !delete.tables.is_empty() || delete.using.is_some() || from.len() != 1,
            "several tables or USING",
        ),
        (
            delete.returning.is_some() || delete.output.is_some(),
            "RETURNING / OUTPUT",
        ),
        (
            !delete.order_by.is_empty() || delete.limit.is_some(),
            "ORDER BY / LIMIT",
        ),
    ];
    if let Some((_, clause)) = unsupported.iter().find(|(used, _)| *used) {
        return Err(Error::user(
            format!("DELETE with {clause} is not supported by smelt sql"),
            "delete from one table by a WHERE on its own columns, or MERGE INTO it … THEN DELETE",
        ));
    }
    let (name, alias) = single_table(&from[0], "DELETE")?;
    let table = writable(lake, &name, "DELETE").await?;
    let columns = columns_of(&table, &name)?;
    let mut builder = table.delete();
    if let Some(mut predicate) = delete.selection {
        unqualify(&mut predicate, &qualifiers(&name, alias.as_ref()));
        respell_columns(&mut predicate, &columns);
        builder = builder.with_predicate(predicate.to_string());
    }
    let (_, metrics) = builder
        .await
        .context(|| format!("deleting from `{name}`"))?;
    Ok(SqlOutput::Message(format!(
        "deleted {} rows from {name}",
        metrics.num_deleted_rows.unwrap_or(0)
    )))
}

/// `MERGE [INTO] t USING s ON … WHEN …`.
pub(super) async fn merge(
    lake: &Lake,
    catalogs: &dyn super::CatalogTables,
    ctx: &SessionContext,
    merge: Merge,
    spark: bool,
) -> Result<SqlOutput> {
    if merge.output.is_some() {
        return Err(Error::user(
            "MERGE with OUTPUT is not supported by smelt sql",
            "query the table after the MERGE",
        ));
    }
    let (name, target_alias) = merge_target(&merge.table)?;
    let (source, source_alias) = source(lake, catalogs, ctx, merge.source, spark).await?;
    let table = writable(lake, &name, "MERGE").await?;
    let target_columns = columns_of(&table, &name)?;
    let source_columns: Vec<String> = source
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let mut builder = table
        .merge(source, merge.on.to_string())
        .with_source_alias(source_alias.clone())
        .with_target_alias(target_alias.clone());
    let scope = MergeScope {
        own: qualifiers(&name, Some(&Ident::new(&target_alias))),
        name,
        target_columns,
        source_columns,
        source_alias,
    };
    for clause in merge.clauses {
        builder = scope.add_clause(builder, clause)?;
    }
    let name = &scope.name;
    let (_, metrics) = builder.await.context(|| format!("merging into `{name}`"))?;
    Ok(SqlOutput::Message(format!(
        "merged into {name}: {} inserted, {} updated, {} deleted",
        metrics.num_target_rows_inserted,
        metrics.num_target_rows_updated,
        metrics.num_target_rows_deleted
    )))
}

/// The table a MERGE changes and the name its rows go by (its alias, else its table name).
fn merge_target(table: &TableFactor) -> Result<(smelt_spec::TableName, String)> {
    let TableFactor::Table {
        name: target,
        alias,
        ..
    } = table
    else {
        return Err(Error::user(
            format!("MERGE into `{table}`: the target must be a table"),
            "MERGE INTO schema.table [AS alias] USING …",
        ));
    };
    let name = table_name(target)?;
    let target_alias = alias
        .as_ref()
        .map(|a| a.name.value.clone())
        .unwrap_or_else(|| name.table.clone());
    Ok((name, target_alias))
}

/// What a MERGE's `WHEN …` clauses are read against: the target, its columns and
/// qualifiers, and the source's columns and name.
struct MergeScope {
    /// The target table.
    name: smelt_spec::TableName,
    /// The target's columns.
    target_columns: Vec<String>,
    /// The source's columns.
    source_columns: Vec<String>,
    /// The name the source's rows go by.
    source_alias: String,
    /// The names the target's columns may be qualified with.
    own: Vec<Vec<String>>,
}

impl MergeScope {
    /// Adds one `WHEN … THEN …` clause to `builder`.
    fn add_clause(&self, builder: MergeBuilder, clause: MergeClause) -> Result<MergeBuilder> {
        let predicate = clause.predicate.map(|p| p.to_string());
        let added = match (clause.clause_kind, clause.action) {
            (kind, MergeAction::Update(update))
                if kind != MergeClauseKind::NotMatched
                    && kind != MergeClauseKind::NotMatchedByTarget =>
            {
                let pairs = self.update_pairs(update)?;
                let set = move |mut u: UpdateBuilder| {
                    if let Some(p) = predicate {
                        u = u.predicate(p);
                    }
                    for (c, v) in pairs {
                        u = u.update(c.as_str(), v);
                    }
                    u
                };
                if kind == MergeClauseKind::Matched {
                    builder.when_matched_update(set)
                } else {
                    builder.when_not_matched_by_source_update(set)
                }
            }
            (MergeClauseKind::Matched, MergeAction::Delete { .. }) => {
                builder.when_matched_delete(|d| match predicate {
                    Some(p) => d.predicate(p),
                    None => d,
                })
            }
            (MergeClauseKind::NotMatchedBySource, MergeAction::Delete { .. }) => builder
                .when_not_matched_by_source_delete(|d| match predicate {
                    Some(p) => d.predicate(p),
                    None => d,
                }),
            (
                MergeClauseKind::NotMatched | MergeClauseKind::NotMatchedByTarget,
                MergeAction::Insert(insert),
            ) => {
                let pairs = self.insert_pairs(insert)?;
                builder.when_not_matched_insert(|mut i| {
                    if let Some(p) = predicate {
                        i = i.predicate(p);
                    }
                    for (c, v) in pairs {
                        i = i.set(c.as_str(), v);
                    }
                    i
                })
            }
            (kind, action) => {
                return Err(Error::user(
                    format!("MERGE … WHEN {kind} THEN {action} is not a valid clause"),
                    "WHEN MATCHED takes UPDATE or DELETE, WHEN NOT MATCHED takes INSERT, WHEN NOT MATCHED BY SOURCE takes UPDATE or DELETE",
                ));
            }
        };
        added.context(|| format!("merging into `{}`", self.name))
    }

    /// The `(column, value)` pairs of `UPDATE SET …`; `SET *` stands for every column.
    fn update_pairs(&self, update: MergeUpdateExpr) -> Result<Vec<(String, String)>> {
        if update.update_predicate.is_some() || update.delete_predicate.is_some() {
            return Err(Error::user(
                "MERGE … UPDATE SET … WHERE / DELETE WHERE is not supported by smelt sql",
                "put the condition after WHEN MATCHED AND …",
            ));
        }
        let mut pairs = Vec::new();
        for a in update.assignments {
            let col = column(&a.target, &self.own, &self.target_columns, "MERGE … UPDATE");
            if matches!(&a.target, AssignmentTarget::ColumnName(n) if n.to_string() == SET_ALL) {
                pairs.extend(self.all()?);
            } else {
                pairs.push((col?, a.value.to_string()));
            }
        }
        Ok(pairs)
    }

    /// The `(column, value)` pairs of `INSERT (…) VALUES (…)` or `INSERT ROW` / `INSERT *`.
    fn insert_pairs(&self, insert: MergeInsertExpr) -> Result<Vec<(String, String)>> {
        if insert.insert_predicate.is_some() {
            return Err(Error::user(
                "MERGE … INSERT … WHERE is not supported by smelt sql",
                "put the condition after WHEN NOT MATCHED AND …",
            ));
        }
        let values = match insert.kind {
            MergeInsertKind::Row => return self.all(),
            MergeInsertKind::Values(values) => values,
        };
        let columns: Vec<String> = if insert.columns.is_empty() {
            self.target_columns.clone()
        } else {
            insert
                .columns
                .iter()
                .map(|c| spelled(&last_part(c), &self.target_columns))
                .collect()
        };
        let [row] = values.rows.as_slice() else {
            return Err(Error::user(
                "MERGE … INSERT takes one row of VALUES",
                "write INSERT (columns) VALUES (expressions)",
            ));
        };
        if row.len() != columns.len() {
            return Err(Error::user(
                format!(
                    "MERGE into `{}`: INSERT lists {} columns and {} values",
                    self.name,
                    columns.len(),
                    row.len()
                ),
                "give one value per column",
            ));
        }
        Ok(columns
            .into_iter()
            .zip(row.iter().map(|v| v.to_string()))
            .collect())
    }

    /// The pairs of `UPDATE SET *` / `INSERT *`: every target column from the source
    /// column of that name.
    fn all(&self) -> Result<Vec<(String, String)>> {
        let name = &self.name;
        self.target_columns
            .iter()
            .map(|c| {
                if self.source_columns.contains(c) {
                    Ok((c.clone(), qualified(&self.source_alias, c)))
                } else {
                    Err(Error::user(
                        format!(
                            "MERGE into `{name}`: the source has no column `{c}` for `*` / ROW"
                        ),
                        "list the columns: UPDATE SET c = s.c, … / INSERT (c, …) VALUES (s.c, …)",
                    ))
                }
            })
            .collect()
    }
}

/// The rows a MERGE reads (a table or a query, through the same session as `smelt sql`'s
/// queries: time travel and change feeds work there) and the name they go by.
async fn source(
    lake: &Lake,
    catalogs: &dyn super::CatalogTables,
    ctx: &SessionContext,
    factor: TableFactor,
    spark: bool,
) -> Result<(deltalake::datafusion::prelude::DataFrame, String)> {
    let (query, alias) = match factor {
        TableFactor::Table {
            name,
            alias,
            args: None,
            version: None,
            ..
        } => {
            let alias = alias
                .map(|a| a.name.value)
                .unwrap_or_else(|| last_part(&name));
            let sql = format!("SELECT * FROM {name}");
            (sql, alias)
        }
        TableFactor::Derived {
            subquery,
            alias: Some(alias),
            ..
        } => (subquery.to_string(), alias.name.value),
        other => {
            return Err(Error::user(
                format!("MERGE … USING {other} is not supported by smelt sql"),
                "USING schema.table [AS alias] or USING (SELECT …) AS alias",
            ));
        }
    };
    let statement = smelt_spec::ddl::parse_script(&query)
        .ok()
        .and_then(|mut s| (s.len() == 1).then(|| s.remove(0)))
        .ok_or_else(|| Error::internal(format!("re-parsing the MERGE source `{query}`")))?;
    let df = dataframe(lake, catalogs, ctx, statement, spark).await?;
    Ok((df, alias))
}

/// A table smelt sql may change: it exists, smelt keeps its features, and no file has a
/// deletion vector (delta-rs' operations would bring those rows back).
async fn writable(lake: &Lake, name: &smelt_spec::TableName, what: &str) -> Result<DeltaTable> {
    let table = lake
        .open_existing(name, "create it first with CREATE TABLE")
        .await?;
    let state = table.snapshot().context(|| format!("reading `{name}`"))?;
    crate::features::check_writable(&name.to_string(), state)?;
    let with_vectors = state
        .log_data()
        .iter()
        .filter(|f| f.deletion_vector_descriptor().is_some())
        .count();
    if with_vectors > 0 {
        return Err(Error::user(
            format!(
                "{what} on `{name}`: {with_vectors} of its files have deletion vectors, which smelt sql's {what} cannot keep"
            ),
            format!(
                "purge them first with `smelt optimize {name} --deleted-fraction 0`, or change the rows with an apply flow"
            ),
        ));
    }
    super::commit_failpoint::armed(table, name).await
}

/// The one table an UPDATE or DELETE changes, and its alias.
fn single_table(
    target: &TableWithJoins,
    what: &str,
) -> Result<(smelt_spec::TableName, Option<Ident>)> {
    match &target.relation {
        TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } if target.joins.is_empty() => {
            Ok((table_name(name)?, alias.as_ref().map(|a| a.name.clone())))
        }
        other => Err(Error::user(
            format!("{what} `{other}`: smelt sql changes one table at a time"),
            "name one `schema.table`; to use another table's rows, MERGE INTO it USING them",
        )),
    }
}

/// The names a column of the target may be qualified with: its alias, its table name, its
/// `schema.table`.
fn qualifiers(name: &smelt_spec::TableName, alias: Option<&Ident>) -> Vec<Vec<String>> {
    let mut q = vec![
        vec![name.table.clone()],
        vec![name.schema.clone(), name.table.clone()],
    ];
    if let Some(a) = alias {
        q.push(vec![a.value.clone()]);
    }
    q
}

/// Drops the target's qualifier from column references (`t.c` → `c`): delta-rs resolves an
/// UPDATE's or DELETE's expressions against the table's columns alone.
fn unqualify(expr: &mut Expr, qualifiers: &[Vec<String>]) {
    let _ = visit_expressions_mut(expr, |e| {
        if let Expr::CompoundIdentifier(parts) = e
            && parts.len() >= 2
        {
            let head: Vec<String> = parts[..parts.len() - 1]
                .iter()
                .map(|p| p.value.clone())
                .collect();
            if qualifiers.contains(&head) {
                *e = Expr::Identifier(parts[parts.len() - 1].clone());
            }
        }
        ControlFlow::<()>::Continue(())
    });
}

/// The columns of `table`.
fn columns_of(table: &DeltaTable, name: &smelt_spec::TableName) -> Result<Vec<String>> {
    Ok(table
        .snapshot()
        .context(|| format!("reading `{name}`"))?
        .schema()
        .fields()
        .map(|f| f.name().clone())
        .collect())
}

/// `name` as `columns` spell it: BigQuery and Spark match column names in any case.
fn spelled(name: &str, columns: &[String]) -> String {
    if columns.iter().any(|c| c == name) {
        return name.to_string();
    }
    let mut same = columns.iter().filter(|c| c.eq_ignore_ascii_case(name));
    match (same.next(), same.next()) {
        (Some(c), None) => c.clone(),
        _ => name.to_string(),
    }
}

/// The target column an assignment sets (`c` or `alias.c`), as the table spells it.
fn column(
    target: &AssignmentTarget,
    qualifiers: &[Vec<String>],
    columns: &[String],
    what: &str,
) -> Result<String> {
    let AssignmentTarget::ColumnName(name) = target else {
        return Err(Error::user(
            format!("{what} SET ({target}) = … is not supported by smelt sql"),
            "set one column at a time: SET a = …, b = …",
        ));
    };
    let parts: Vec<String> = name.0.iter().map(|p| p.to_string()).collect();
    let unquoted: Vec<String> = name
        .0
        .iter()
        .filter_map(|p| p.as_ident().map(|i| i.value.clone()))
        .collect();
    match unquoted.split_last() {
        Some((col, [])) => Ok(spelled(col, columns)),
        Some((col, head)) if qualifiers.contains(&head.to_vec()) => Ok(spelled(col, columns)),
        _ => Err(Error::user(
            format!(
                "{what} sets `{}`, which is not a column of the target",
                parts.join(".")
            ),
            "set the target's own columns, e.g. `SET t.c = s.c` or `SET c = s.c`",
        )),
    }
}

fn last_part(name: &ObjectName) -> String {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .map(|i| i.value.clone())
        .unwrap_or_else(|| name.to_string())
}

/// `alias.column` as SQL, the column quoted.
fn qualified(alias: &str, column: &str) -> String {
    format!(
        "{}.{}",
        Ident::with_quote('`', alias),
        Ident::with_quote('`', column)
    )
}
