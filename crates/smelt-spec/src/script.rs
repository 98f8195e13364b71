//! Parsing `smelt sql` scripts and DDL files: sqlparser with the BigQuery, generic and
//! Databricks dialects in turn, after rewriting the spellings sqlparser does not take
//! (BigQuery's `ALTER TABLE … SET OPTIONS`, dotted option keys, Spark's `USING DELTA`,
//! Databricks' `MERGE … UPDATE SET *` / `INSERT *`).

use sqlparser::ast::Statement;
use sqlparser::dialect::{BigQueryDialect, DatabricksDialect, Dialect, GenericDialect};
use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

/// Parses a SQL script (BigQuery, Databricks/Spark or generic syntax) into statements.
///
/// Two spellings sqlparser does not take are rewritten first: BigQuery's
/// `ALTER TABLE t SET OPTIONS (...)` (read as `SET TBLPROPERTIES`) and dotted option keys
/// such as `delta.enableChangeDataFeed = true` (read as one quoted key).
/// The error is the text of the first dialect's error, with its line.
pub fn parse_script(sql: &str) -> std::result::Result<Vec<Statement>, String> {
    parse_script_spark(sql).map(|(statements, _)| statements)
}

/// [`parse_script`], and whether only Databricks' dialect took the script (Spark SQL: its
/// plain `CAST`s then follow Spark's rules rather than BigQuery's).
pub fn parse_script_spark(sql: &str) -> std::result::Result<(Vec<Statement>, bool), String> {
    let dialects: [&dyn Dialect; 3] = [
        &BigQueryDialect {},
        &GenericDialect {},
        &DatabricksDialect {},
    ];
    let mut first_err = None;
    for (i, d) in dialects.into_iter().enumerate() {
        let parsed = Tokenizer::new(d, sql)
            .tokenize_with_location()
            .map_err(|e| e.to_string())
            .and_then(|tokens| {
                Parser::new(d)
                    .with_tokens_with_locations(rewrite(tokens))
                    .parse_statements()
                    .map_err(|e| e.to_string())
            });
        match parsed {
            Ok(stmts) => return Ok((stmts, i == 2)),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    Err(first_err.unwrap_or_default())
}

/// Every spelling sqlparser does not take, rewritten to one it does.
fn rewrite(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let tokens = rewrite_options(tokens);
    let tokens = strip_using_delta(tokens);
    let tokens = merge_stars(tokens);
    let tokens = changes_table_arg(tokens);
    let tokens = describe_as_query(tokens);
    let tokens = replace_where(tokens);
    unset_properties(tokens)
}

/// The column an `UPDATE SET *` of a MERGE is read as setting: `UPDATE SET c = c` for this
/// `c` stands for Databricks' `UPDATE SET *` (every column from the source's column of the
/// same name).
pub const MERGE_SET_ALL: &str = "__smelt_set_all__";

/// Databricks' `MERGE … THEN UPDATE SET *` and `THEN INSERT *`, which sqlparser does not
/// take, read as `UPDATE SET __smelt_set_all__ = __smelt_set_all__` and BigQuery's `INSERT
/// ROW` (both: every target column from the source column of that name). `tokens` hold no
/// whitespace.
fn merge_stars(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let word = |t: Option<&TokenWithSpan>, k: Keyword| matches!(t.map(|t| &t.token), Some(Token::Word(w)) if w.keyword == k);
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    for t in tokens {
        if matches!(t.token, Token::Mul) {
            let n = out.len();
            let at = |back: usize| n.checked_sub(back).and_then(|i| out.get(i));
            if word(at(1), Keyword::SET)
                && word(at(2), Keyword::UPDATE)
                && word(at(3), Keyword::THEN)
            {
                let all = Token::make_word(MERGE_SET_ALL, None);
                out.push(TokenWithSpan::new(all.clone(), t.span));
                out.push(TokenWithSpan::new(Token::Eq, t.span));
                out.push(TokenWithSpan::new(all, t.span));
                continue;
            }
            if word(at(1), Keyword::INSERT) && word(at(2), Keyword::THEN) {
                out.push(TokenWithSpan::new(Token::make_keyword("ROW"), t.span));
                continue;
            }
        }
        out.push(t);
    }
    out
}

/// The prefix of the keys Spark's `ALTER TABLE t UNSET TBLPROPERTIES [IF EXISTS] ('k', …)`
/// is read with: `SET TBLPROPERTIES ('__smelt_unset__.k' = 'if_exists' | '', …)`.
pub const UNSET_PREFIX: &str = "__smelt_unset__.";

/// Spark's `UNSET TBLPROPERTIES`, which sqlparser does not take, read as a `SET
/// TBLPROPERTIES` of [`UNSET_PREFIX`]ed keys. `tokens` hold no whitespace.
fn unset_properties(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let word = |t: Option<&TokenWithSpan>, k: Keyword| matches!(t.map(|t| &t.token), Some(Token::Word(w)) if w.keyword == k);
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        let unset = matches!(&t.token, Token::Word(w) if w.value.eq_ignore_ascii_case("UNSET"))
            && word(tokens.get(i + 1), Keyword::TBLPROPERTIES);
        let mut j = i + 2;
        let if_exists =
            unset && word(tokens.get(j), Keyword::IF) && word(tokens.get(j + 1), Keyword::EXISTS);
        if if_exists {
            j += 2;
        }
        // Exactly `( key [, key]… )`; anything else is left for the parser to refuse.
        let keys = if unset {
            unset_keys(tokens.get(j..).unwrap_or_default())
        } else {
            None
        };
        let Some((keys, used)) = keys else {
            out.push(t.clone());
            i += 1;
            continue;
        };
        let span = t.span;
        let tok = |t: Token| TokenWithSpan::new(t, span);
        out.push(tok(Token::make_keyword("SET")));
        out.push(tok(Token::make_keyword("TBLPROPERTIES")));
        out.push(tok(Token::LParen));
        for (n, key) in keys.iter().enumerate() {
            if n > 0 {
                out.push(tok(Token::Comma));
            }
            out.push(tok(Token::make_word(
                &format!("{UNSET_PREFIX}{key}"),
                Some('`'),
            )));
            out.push(tok(Token::Eq));
            out.push(tok(Token::SingleQuotedString(
                if if_exists { "if_exists" } else { "" }.into(),
            )));
        }
        out.push(tok(Token::RParen));
        i = j + used;
    }
    out
}

/// `( key [, key]… )` at the start of `tokens`: the keys and the tokens they take.
fn unset_keys(tokens: &[TokenWithSpan]) -> Option<(Vec<String>, usize)> {
    if !matches!(tokens.first()?.token, Token::LParen) {
        return None;
    }
    let mut keys = Vec::new();
    let mut i = 1;
    loop {
        match &tokens.get(i)?.token {
            Token::SingleQuotedString(k) | Token::DoubleQuotedString(k) => keys.push(k.clone()),
            Token::Word(w) => keys.push(w.value.clone()),
            _ => return None,
        }
        i += 1;
        match &tokens.get(i)?.token {
            Token::Comma => i += 1,
            Token::RParen => return Some((keys, i + 1)),
            _ => return None,
        }
    }
}

/// The partition "column" Databricks' `INSERT INTO t REPLACE WHERE pred query` is read with:
/// `INSERT INTO t PARTITION (__smelt_replace_where = (pred)) query`.
pub const REPLACE_WHERE: &str = "__smelt_replace_where";

/// Databricks' `INSERT INTO [TABLE] t REPLACE WHERE pred query`, which sqlparser does not
/// take, read as an INSERT with the partition [`REPLACE_WHERE`]` = (pred)`. `tokens` hold no
/// whitespace.
fn replace_where(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let word = |t: Option<&TokenWithSpan>, k: Keyword| matches!(t.map(|t| &t.token), Some(Token::Word(w)) if w.keyword == k);
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len() + 8);
    let mut i = 0;
    let mut start = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        if matches!(t.token, Token::SemiColon) {
            start = out.len() + 1;
        }
        let here = word(Some(t), Keyword::REPLACE) && word(tokens.get(i + 1), Keyword::WHERE);
        // Right after `INSERT INTO [TABLE] name`, the name being words joined by periods.
        let after_name = || {
            if !(word(out.get(start), Keyword::INSERT) && word(out.get(start + 1), Keyword::INTO)) {
                return false;
            }
            let mut n = start + 2;
            if word(out.get(n), Keyword::TABLE) {
                n += 1;
            }
            let name = &out[n.min(out.len())..];
            name.len() % 2 == 1
                && name.iter().enumerate().all(|(k, t)| {
                    if k % 2 == 0 {
                        matches!(t.token, Token::Word(_))
                    } else {
                        matches!(t.token, Token::Period)
                    }
                })
        };
        if here && after_name() {
            // The predicate runs to the query: SELECT, VALUES, WITH or TABLE at depth 0, or
            // `(SELECT` where no predicate takes a subquery (IN, EXISTS, ANY, ALL, SOME, a
            // comparison).
            let mut j = i + 2;
            let mut depth = 0usize;
            while j < tokens.len() {
                let takes_subquery = |p: &Token| match p {
                    Token::Word(w) => matches!(
                        w.keyword,
                        Keyword::IN | Keyword::EXISTS | Keyword::ANY | Keyword::ALL | Keyword::SOME
                    ),
                    Token::Eq | Token::Neq | Token::Lt | Token::Gt | Token::LtEq | Token::GtEq => {
                        true
                    }
                    _ => false,
                };
                match &tokens[j].token {
                    Token::LParen
                        if depth == 0
                            && j > i + 2
                            && word(tokens.get(j + 1), Keyword::SELECT)
                            && !takes_subquery(&tokens[j - 1].token) =>
                    {
                        break;
                    }
                    Token::LParen => depth += 1,
                    Token::RParen => depth = depth.saturating_sub(1),
                    Token::Word(w)
                        if depth == 0
                            && matches!(
                                w.keyword,
                                Keyword::SELECT | Keyword::VALUES | Keyword::WITH | Keyword::TABLE
                            ) =>
                    {
                        break;
                    }
                    Token::SemiColon => break,
                    _ => {}
                }
                j += 1;
            }
            let span = t.span;
            let tok = |t: Token| TokenWithSpan::new(t, span);
            out.push(tok(Token::make_keyword("PARTITION")));
            out.push(tok(Token::LParen));
            out.push(tok(Token::make_word(REPLACE_WHERE, None)));
            out.push(tok(Token::Eq));
            out.push(tok(Token::LParen));
            out.extend(tokens[i + 2..j].iter().cloned());
            out.push(tok(Token::RParen));
            out.push(tok(Token::RParen));
            i = j;
            continue;
        }
        out.push(t.clone());
        i += 1;
    }
    out
}

/// The table function `SHOW TBLPROPERTIES` and `DESCRIBE` statements are read as a query of:
/// `__smelt_describe('tblproperties' | 'columns' | 'detail' | 'history', 'schema.table'
/// [, limit])`.
pub const DESCRIBE_FUNCTION: &str = "__smelt_describe";

/// Spark's `SHOW TBLPROPERTIES t [('key')]`, `DESCRIBE [TABLE] t`, `DESCRIBE DETAIL t` and
/// `DESCRIBE HISTORY t [LIMIT n]` (which sqlparser reads partly or not at all) read as
/// `SELECT * FROM __smelt_describe('what', 't') [WHERE key = 'key'] [LIMIT n]`. `tokens`
/// hold no whitespace.
fn describe_as_query(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    let mut i = 0;
    let mut at_start = true;
    while i < tokens.len() {
        if at_start && let Some((rewritten, used)) = describe_at(&tokens[i..]) {
            out.extend(rewritten);
            i += used;
            at_start = false;
            continue;
        }
        at_start = matches!(tokens[i].token, Token::SemiColon);
        out.push(tokens[i].clone());
        i += 1;
    }
    out
}

/// The query a SHOW TBLPROPERTIES / DESCRIBE statement at the start of `tokens` reads as,
/// and how many tokens it took.
fn describe_at(tokens: &[TokenWithSpan]) -> Option<(Vec<TokenWithSpan>, usize)> {
    let word = |i: usize| match tokens.get(i).map(|t| &t.token) {
        Some(Token::Word(w)) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
        _ => None,
    };
    let (what, mut i) = match (word(0).as_deref(), word(1).as_deref()) {
        (Some("SHOW"), Some("TBLPROPERTIES")) => ("tblproperties", 2),
        (Some("DESCRIBE" | "DESC"), Some("HISTORY")) => ("history", 2),
        (Some("DESCRIBE" | "DESC"), Some("DETAIL")) => ("detail", 2),
        (Some("DESCRIBE" | "DESC"), Some("TABLE")) => ("columns", 2),
        (Some("DESCRIBE" | "DESC"), _) => ("columns", 1),
        _ => return None,
    };
    // The table's name: words joined by periods.
    let mut parts = Vec::new();
    loop {
        match tokens.get(i).map(|t| &t.token) {
            Some(Token::Word(w)) => parts.push(w.value.clone()),
            _ => return None,
        }
        i += 1;
        if !matches!(tokens.get(i).map(|t| &t.token), Some(Token::Period)) {
            break;
        }
        i += 1;
    }
    let span = tokens[0].span;
    let tok = |t: Token| TokenWithSpan::new(t, span);
    let mut out = vec![
        tok(Token::make_keyword("SELECT")),
        tok(Token::Mul),
        tok(Token::make_keyword("FROM")),
        tok(Token::make_word(DESCRIBE_FUNCTION, None)),
        tok(Token::LParen),
        tok(Token::SingleQuotedString(what.into())),
        tok(Token::Comma),
        tok(Token::SingleQuotedString(parts.join("."))),
        tok(Token::RParen),
    ];
    // SHOW TBLPROPERTIES t ('key')
    if what == "tblproperties"
        && let (Some(Token::LParen), Some(Token::SingleQuotedString(key)), Some(Token::RParen)) = (
            tokens.get(i).map(|t| &t.token),
            tokens.get(i + 1).map(|t| &t.token),
            tokens.get(i + 2).map(|t| &t.token),
        )
    {
        out.extend([
            tok(Token::make_keyword("WHERE")),
            tok(Token::make_word("key", None)),
            tok(Token::Eq),
            tok(Token::SingleQuotedString(key.clone())),
        ]);
        i += 3;
    }
    // Anything else (DESCRIBE HISTORY t LIMIT n) follows the query; the history also takes
    // the limit, so that it reads only the newest n log entries.
    match tokens.get(i).map(|t| &t.token) {
        None | Some(Token::SemiColon | Token::EOF) => Some((out, i)),
        Some(Token::Word(w)) if w.keyword == Keyword::LIMIT => {
            if let (true, Some(Token::Number(n, _))) =
                (what == "history", tokens.get(i + 1).map(|t| &t.token))
            {
                let close = out.pop().expect("the call's `)`");
                out.extend([
                    tok(Token::Comma),
                    tok(Token::Number(n.clone(), false)),
                    close,
                ]);
            }
            Some((out, i))
        }
        _ => None,
    }
}

/// BigQuery's `CHANGES(TABLE t, …)` / `APPENDS(TABLE t, …)`, which sqlparser does not take,
/// read as `CHANGES(t, …)`. `tokens` hold no whitespace.
fn changes_table_arg(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    for t in tokens {
        let table = matches!(&t.token, Token::Word(w) if w.keyword == Keyword::TABLE);
        let n = out.len();
        let after_call = n >= 2
            && matches!(out[n - 1].token, Token::LParen)
            && matches!(&out[n - 2].token, Token::Word(w)
                if w.value.eq_ignore_ascii_case("changes") || w.value.eq_ignore_ascii_case("appends"));
        if table && after_call {
            continue;
        }
        out.push(t);
    }
    out
}

/// Drops Spark's `USING DELTA` after a `CREATE TABLE`'s column list (smelt's tables are
/// Delta tables); `tokens` hold no whitespace. Another `USING` is left for the parser to
/// refuse.
fn strip_using_delta(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    let (mut depth, mut create, mut first) = (0usize, false, true);
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        match &t.token {
            Token::SemiColon => {
                first = true;
                depth = 0;
                out.push(t.clone());
                i += 1;
                continue;
            }
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            _ => {}
        }
        if first {
            create = matches!(&t.token, Token::Word(w) if w.keyword == Keyword::CREATE);
            first = false;
        }
        let using_delta = create
            && depth == 0
            && matches!(&t.token, Token::Word(w) if w.keyword == Keyword::USING)
            && matches!(out.last().map(|p| &p.token), Some(Token::RParen))
            && matches!(tokens.get(i + 1).map(|n| &n.token), Some(Token::Word(w)) if w.value.eq_ignore_ascii_case("delta"));
        if using_delta {
            i += 2;
            continue;
        }
        out.push(t.clone());
        i += 1;
    }
    out
}

fn rewrite_options(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let significant = |t: &TokenWithSpan| !matches!(t.token, Token::Whitespace(_));
    let toks: Vec<TokenWithSpan> = tokens.into_iter().filter(significant).collect();
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(toks.len());
    let (mut in_props, mut depth, mut i) = (false, 0usize, 0usize);
    let mut statement_start = 0usize;
    while i < toks.len() {
        let t = &toks[i];
        if matches!(t.token, Token::SemiColon) {
            statement_start = out.len() + 1;
        }
        if let Token::Word(w) = &t.token {
            let after_set = matches!(out.last().map(|t| &t.token), Some(Token::Word(p)) if p.keyword == Keyword::SET);
            let alter_table = matches!(out.get(statement_start).map(|t| &t.token), Some(Token::Word(a)) if a.keyword == Keyword::ALTER)
                && matches!(out.get(statement_start + 1).map(|t| &t.token), Some(Token::Word(b)) if b.keyword == Keyword::TABLE);
            if w.keyword == Keyword::OPTIONS && after_set && alter_table {
                out.push(TokenWithSpan::new(
                    Token::make_keyword("TBLPROPERTIES"),
                    t.span,
                ));
                in_props = true;
                depth = 0;
                i += 1;
                continue;
            }
            if w.keyword == Keyword::TBLPROPERTIES || w.keyword == Keyword::OPTIONS {
                in_props = true;
                depth = 0;
            }
        }
        if in_props {
            match &t.token {
                Token::LParen => depth += 1,
                Token::RParen => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        in_props = false;
                    }
                }
                Token::Word(w)
                    if depth == 1
                        && matches!(
                            out.last().map(|t| &t.token),
                            Some(Token::LParen | Token::Comma)
                        ) =>
                {
                    let (mut key, mut j) = (w.value.clone(), i + 1);
                    while j + 1 < toks.len() && matches!(toks[j].token, Token::Period) {
                        if let Token::Word(n) = &toks[j + 1].token {
                            key.push('.');
                            key.push_str(&n.value);
                            j += 2;
                        } else {
                            break;
                        }
                    }
                    if j > i + 1 {
                        out.push(TokenWithSpan::new(
                            Token::make_word(&key, Some('`')),
                            t.span,
                        ));
                        i = j;
                        continue;
                    }
                }
                _ => {}
            }
        }
        out.push(t.clone());
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(sql: &str) -> String {
        let mut s = parse_script(sql).unwrap();
        assert_eq!(s.len(), 1, "{sql}");
        s.remove(0).to_string()
    }

    #[test]
    fn replace_where_reads_only_after_the_table_and_keeps_subqueries() {
        let q = one("INSERT INTO s.t REPLACE WHERE d IN (SELECT d FROM s.u) SELECT * FROM s.v");
        assert!(
            q.contains("__smelt_replace_where = (d IN (SELECT d FROM s.u))"),
            "{q}"
        );
        assert!(q.ends_with("SELECT * FROM s.v"), "{q}");
        // `replace` as an alias later in a plain INSERT is left alone.
        let q = one("INSERT INTO s.t SELECT * FROM s.u AS replace WHERE x = 1");
        assert!(!q.contains("__smelt_replace_where"), "{q}");
    }

    #[test]
    fn describe_history_passes_its_limit_to_the_reader() {
        let q = one("DESCRIBE HISTORY s.t LIMIT 2");
        assert!(q.contains("__smelt_describe('history', 's.t', 2)"), "{q}");
        assert!(q.ends_with("LIMIT 2"), "{q}");
    }

    #[test]
    fn unset_takes_a_list_of_keys_only() {
        let q = one("ALTER TABLE s.t UNSET TBLPROPERTIES IF EXISTS ('a', b.c)");
        assert!(q.contains("`__smelt_unset__.a` = 'if_exists'"), "{q}");
        assert!(q.contains("`__smelt_unset__.b.c` = 'if_exists'"), "{q}");
        // An unclosed list does not swallow the next statement: the parser refuses it.
        assert!(parse_script("ALTER TABLE s.t UNSET TBLPROPERTIES ('a'; DELETE FROM s.u").is_err());
        assert!(parse_script("ALTER TABLE s.t UNSET TBLPROPERTIES ('a' = 'x')").is_err());
    }
}
