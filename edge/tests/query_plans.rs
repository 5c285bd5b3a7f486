//! Every SQL statement of the store, planned by SQLite (what D1 runs) against the schema of
//! `migrations/`: none may scan a table that grows with traffic.
//!
//! The statements are read from the source of `edge/src/store/`, so a new statement is checked
//! the day it is written: each string literal that is SQL once its `{CONST}`s and `{local}`s
//! are filled in. `EXPLAIN QUERY PLAN` runs through the `sqlite3` command-line shell with the
//! parameters unbound (a plan does not depend on their values). A statement that does not even
//! prepare against the schema fails too.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Tables whose size follows configuration, not traffic: a scan of one stays small.
const SMALL: &[(&str, &str)] = &[
    ("accounts", "one row per customer account"),
    ("phone_numbers", "the numbers an account owns"),
    ("webhook_endpoints", "the endpoints an account configured"),
    ("retention_marks", "one watermark per retention sweep"),
    ("audit_checks", "one row per check of the running audit"),
];

/// Scans of growing tables that are allowed: (a fragment of the statement, the table, why).
/// Each one must still exist, so the list cannot rot. None of them is on the path of an event
/// (ingest, processing, dispatch, delivery, sweeper, retention) except a bounded one.
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "COUNT(*) AS opened, 0 AS settled FROM webhook_deliveries WHERE created_at >= ?1",
        "webhook_deliveries",
        "the operator's backlog chart reads the deliveries created, settled or open in its window in one \
         statement (an operator's read, off the event path, over what retention keeps): docs/scaling.md",
    ),
    (
        "FROM carrier_events ORDER BY rowid LIMIT ?1",
        "carrier_events",
        "retention reads the oldest BATCH rows in rowid order: the scan stops at the LIMIT",
    ),
    (
        "FROM carrier_events e WHERE e.processed_at IS NOT NULL AND (?1 IS NULL",
        "carrier_events",
        "admin page of processed events (an operator's read, off the event path); an index on \
         created_at would bound it: docs/scaling.md",
    ),
    (
        "FROM webhook_deliveries WHERE status = ?1 AND (?2 IS NULL",
        "webhook_deliveries",
        "admin page of deliveries by status across accounts (an operator's read, off the event \
         path); an index on (status, created_at) would bound it: docs/scaling.md",
    ),
];

/// Store files whose SQL is not D1's: the call's Durable Object runs its own two-table SQLite.
const OTHER_DATABASES: &[&str] = &["call_storage.rs"];

/// Every `.rs` file under `dir`, the folders of a concept (`store/carrier_events/`) included.
fn store_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read a store folder") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            store_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_statement_scans_a_growing_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf();
    let db = Schema::build(&root.join("migrations"));
    let mut files = Vec::new();
    store_files(&root.join("edge/src/store"), &mut files);
    files.sort();

    // The `pub const` fragments one store file lends another.
    let shared: String = files.iter().map(|f| fs::read_to_string(f).expect("read store file")).collect();
    let mut failures = Vec::new();
    let mut allowed_used = BTreeSet::new();
    let mut checked = 0;
    for file in &files {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if OTHER_DATABASES.contains(&name) {
            continue;
        }
        let source = fs::read_to_string(file).expect("read store file");
        let source = source.find("#[cfg(test)]\nmod tests").map_or(source.as_str(), |i| &source[..i]);
        for statement in statements(source, &shared) {
            let sql = match statement {
                Ok(sql) => sql,
                Err(problem) => {
                    failures.push(format!("{name}: {problem}"));
                    continue;
                }
            };
            checked += 1;
            let plan = match db.plan(&sql) {
                Ok(plan) => plan,
                Err(e) => {
                    failures.push(format!("{name}: does not prepare: {e}\n    {}", one_line(&sql)));
                    continue;
                }
            };
            for scanned in scans(&plan, &db.partial_indexes) {
                let table = db.resolve(&sql, &scanned);
                if SMALL.iter().any(|(t, _)| *t == table) || !db.tables.contains(&table) {
                    continue;
                }
                let flat = one_line(&sql);
                if let Some(b) = ALLOWED.iter().find(|(fragment, t, _)| *t == table && flat.contains(fragment)) {
                    allowed_used.insert(b.0);
                    continue;
                }
                failures.push(format!("{name}: full scan of {table}\n    {flat}\n{plan}"));
            }
            // A look at an endpoint's line through any other index than a line's (the whole
            // line, or its deliveries that have not failed yet) walks every delivery the endpoint
            // ever had (those kept), to find none when its line is empty.
            let flat = one_line(&sql);
            let through_a_line = ["INDEX webhook_deliveries_line", "INDEX webhook_deliveries_fresh_line"];
            if through_a_line.iter().map(|index| plan.matches(index).count()).sum::<usize>() < line_lookups(&flat) {
                failures.push(format!("{name}: a line looked at without the line's index\n    {flat}\n{plan}"));
            }
        }
    }
    for (fragment, _, _) in ALLOWED {
        if !allowed_used.contains(fragment) {
            failures.push(format!("ALLOWED lists a statement that no longer exists: {fragment}"));
        }
    }
    assert!(checked > 20, "only {checked} statements found in edge/src/store: is the extraction broken?");
    assert!(failures.is_empty(), "{} of {checked} statements:\n\n{}", failures.len(), failures.join("\n\n"));
}

/// A database file with the migrations applied, and its tables.
struct Schema {
    path: PathBuf,
    tables: BTreeSet<String>,
    /// Indexes with a `WHERE`: they hold only the rows in one state (pending, waiting, failed).
    partial_indexes: BTreeSet<String>,
}

impl Schema {
    fn build(migrations: &Path) -> Schema {
        let mut files: Vec<PathBuf> =
            fs::read_dir(migrations).expect("read migrations").map(|e| e.expect("entry").path()).collect();
        files.retain(|p| p.extension().is_some_and(|e| e == "sql"));
        files.sort();
        let schema: String = files.iter().map(|f| fs::read_to_string(f).expect("read migration") + "\n").collect();
        let path = std::env::temp_dir().join(format!("exactly-query-plans-{}.db", std::process::id()));
        let _ = fs::remove_file(&path);
        let mut db = Schema { path, tables: BTreeSet::new(), partial_indexes: BTreeSet::new() };
        db.sqlite(&schema).unwrap_or_else(|e| panic!("the migrations do not apply: {e}"));
        let tables = db.sqlite("SELECT name FROM sqlite_master WHERE type = 'table'").expect("list tables");
        db.tables = tables.lines().map(str::to_owned).collect();
        let partial = db
            .sqlite("SELECT name FROM sqlite_master WHERE type = 'index' AND sql LIKE '% WHERE %'")
            .expect("list partial indexes");
        db.partial_indexes = partial.lines().map(str::to_owned).collect();
        db
    }

    /// Runs `sql` in the `sqlite3` shell, given on stdin (an argument could read as an option).
    fn sqlite(&self, sql: &str) -> Result<String, String> {
        use std::io::Write as _;
        let mut child = Command::new("sqlite3")
            .arg("-bail")
            .arg(&self.path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run the sqlite3 shell ({e}); install it: apt-get install sqlite3"));
        {
            // Closed at the end of this block: the shell reads to the end of its input.
            let mut stdin = child.stdin.take().expect("piped stdin");
            stdin.write_all(sql.as_bytes()).and_then(|()| stdin.write_all(b";\n")).expect("write to sqlite3");
        }
        let out = child.wait_with_output().expect("sqlite3 ran");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() || !stderr.trim().is_empty() {
            return Err(stderr.trim().to_owned());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn plan(&self, sql: &str) -> Result<String, String> {
        self.sqlite(&format!("EXPLAIN QUERY PLAN {sql}"))
    }

    /// The table a plan's `SCAN x` names: `x` itself, or the table `x` aliases in `sql`.
    fn resolve(&self, sql: &str, name: &str) -> String {
        if self.tables.contains(name) {
            return name.to_owned();
        }
        let words: Vec<&str> =
            sql.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).collect();
        for (i, w) in words.iter().enumerate() {
            let alias = match words.get(i + 1) {
                Some(a) if a.eq_ignore_ascii_case("as") => words.get(i + 2),
                other => other,
            };
            if self.tables.contains(*w) && alias == Some(&name) {
                return (*w).to_owned();
            }
        }
        name.to_owned()
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// The names a plan scans in full: `SCAN t`, and `SCAN t USING [COVERING] INDEX i` (an index
/// read from end to end grows with its table too) unless `i` is partial. A partial index holds
/// the rows of one state only, which the work drains (pending, waiting) or an operator reads
/// (failed), and such scans here stop at a LIMIT.
fn scans(plan: &str, partial_indexes: &BTreeSet<String>) -> Vec<String> {
    plan.lines()
        .filter_map(|line| line.trim_start_matches(|c: char| "|`- ".contains(c)).strip_prefix("SCAN "))
        .filter(|rest| {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let index = words.iter().position(|w| *w == "INDEX").and_then(|i| words.get(i + 1));
            !index.is_some_and(|i| partial_indexes.contains(*i))
        })
        .map(|rest| rest.split_whitespace().next().unwrap_or_default().to_owned())
        .filter(|name| name != "CONSTANT" && name != "json_each")
        .collect()
}

/// How many times a statement looks at an endpoint's line: `[alias.]waiting = 1` as a condition
/// (after `WHERE` or `AND`), not as a value it sets.
fn line_lookups(flat: &str) -> usize {
    flat.match_indices("waiting = 1")
        .filter(|(at, _)| {
            let before = flat[..*at].trim_end_matches(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.');
            before.ends_with("AND ") || before.ends_with("WHERE ")
        })
        .count()
}

fn one_line(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The SQL statements of a store file: its string literals with their `{NAME}`s replaced by the
/// `const NAME: &str` or `let name = "..."` of the same file (or by each arm of a
/// `let name = match ... { _ => "..." }`), or a `pub const NAME: &str` of another store file
/// (in `shared`), kept when they then start like a statement. Literals bound to a name are
/// fragments, checked inside the statements that use them.
fn statements(source: &str, shared: &str) -> Vec<Result<String, String>> {
    let mut names: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (start, value) in literals(shared) {
        if shared[..start].trim_end().ends_with("&str =") {
            if let Some(name) = bound_name(&shared[..start]).filter(|n| shared.contains(&format!("pub const {n}:"))) {
                names.entry(name).or_default().push(value);
            }
        }
    }
    let mut free = Vec::new();
    for (start, value) in literals(source) {
        match bound_name(&source[..start]) {
            Some(name) => names.entry(name).or_default().push(value),
            None => free.push(value),
        }
    }
    let mut out = Vec::new();
    for literal in free {
        match fill(&literal, &names) {
            Ok(variants) => out.extend(variants.into_iter().filter(|sql| starts_like_sql(sql)).map(Ok)),
            Err(problem)
                if starts_like_sql(&literal) || literal.trim_start().starts_with('{') && literal.contains(" FROM ") =>
            {
                out.push(Err(problem))
            }
            Err(_) => {}
        }
    }
    out
}

fn starts_like_sql(text: &str) -> bool {
    let first = text.split_whitespace().next().unwrap_or_default().to_ascii_uppercase();
    ["SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "REPLACE"].contains(&first.as_str())
}

/// `NAME` when the text before a literal ends in `const NAME: &str =` or `let name =`, or is
/// an arm (`=>`) of a `let name = match` with no `;` in between.
fn bound_name(before: &str) -> Option<String> {
    let trimmed = before.trim_end();
    if trimmed.ends_with("=>") {
        let at = before.rfind("= match")?;
        if before[at..].contains(';') {
            return None;
        }
        return bound_name(&before[..at + 1]);
    }
    let before = trimmed.strip_suffix('=')?.trim_end();
    let before = before.strip_suffix("&str").map_or(before, |b| b.trim_end().trim_end_matches(':').trim_end());
    let name_start = before.rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))? + 1;
    let keyword = before[..name_start].trim_end();
    (keyword.ends_with("const") || keyword.ends_with("let")).then(|| before[name_start..].to_owned())
}

/// A format string with its named arguments filled in, once per combination of their values. A
/// positional `{}` is only understood as a list of SQL text literals (`status IN ({})`).
fn fill(literal: &str, names: &BTreeMap<String, Vec<String>>) -> Result<Vec<String>, String> {
    let mut out = vec![String::new()];
    let mut rest = literal;
    while let Some(open) = rest.find('{') {
        out.iter_mut().for_each(|o| o.push_str(&rest[..open]));
        let close = rest[open..].find('}').map(|c| open + c).ok_or("an unclosed {")?;
        let name = &rest[open + 1..close];
        match names.get(name) {
            Some(values) => {
                out = out.iter().flat_map(|o| values.iter().map(move |v| format!("{o}{v}"))).collect();
            }
            None if name.is_empty() && out[0].trim_end().ends_with("IN (") => {
                out.iter_mut().for_each(|o| o.push_str("'a', 'b'"))
            }
            None => return Err(format!("cannot fill in {{{name}}} of: {}", one_line(literal))),
        }
        rest = &rest[close + 1..];
    }
    out.iter_mut().for_each(|o| o.push_str(rest));
    Ok(out)
}

/// The string literals of Rust source, unescaped, with their byte offsets. Comments and char
/// literals are skipped.
fn literals(source: &str) -> Vec<(usize, String)> {
    let bytes = source.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i = source[i..].find('\n').map_or(bytes.len(), |n| i + n);
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = source[i..].find("*/").map_or(bytes.len(), |n| i + n + 2);
            }
            b'\'' => {
                // A char literal ('x', '\'', '"') or a lifetime ('a).
                if bytes.get(i + 1) == Some(&b'\\') {
                    i = source[i + 3..].find('\'').map_or(bytes.len(), |n| i + 3 + n + 1);
                } else if bytes.get(i + 2) == Some(&b'\'') {
                    i += 3;
                } else {
                    i += 1;
                }
            }
            b'r' if matches!(bytes.get(i + 1), Some(b'"' | b'#')) && (i == 0 || !is_ident(bytes[i - 1])) => {
                let hashes = bytes[i + 1..].iter().take_while(|b| **b == b'#').count();
                let open = i + 1 + hashes;
                if bytes.get(open) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let end = source[open + 1..].find(&close).map_or(bytes.len(), |n| open + 1 + n);
                out.push((i, source[open + 1..end].to_owned()));
                i = end + close.len();
            }
            b'"' => {
                let start = i;
                let mut value = String::new();
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' {
                        match bytes.get(i + 1) {
                            Some(b'\n') => {
                                i += 2;
                                while i < bytes.len() && bytes[i].is_ascii_whitespace() {
                                    i += 1;
                                }
                                continue;
                            }
                            Some(b'n') => value.push('\n'),
                            Some(b't') => value.push('\t'),
                            Some(c) => value.push(*c as char),
                            None => {}
                        }
                        i += 2;
                    } else {
                        let c = source[i..].chars().next().expect("in bounds");
                        value.push(c);
                        i += c.len_utf8();
                    }
                }
                out.push((start, value));
                i += 1;
            }
            _ => i += 1,
        }
    }
    out
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

#[test]
fn the_extraction_reads_what_the_store_writes() {
    let source = r##"
        const ID: &str = "('x_' || id)";
        // "SELECT in a comment"
        fn f() {
            let c = '"';
            let visit = "SELECT rowid FROM t";
            let state = match s { A => "a = 1", B => "b = 2" };
            stmt(&format!("DELETE FROM t WHERE {state}"));
            stmt(&format!("SELECT {ID} AS id FROM t WHERE a = ?1 \
                AND b IN ({})", list));
            stmt(&format!("{visit} ORDER BY rowid"));
            stmt(r#"UPDATE t SET a = "q" WHERE id = ?1"#);
            stmt("not sql");
        }
    "##;
    let found: Vec<String> = statements(source, "").into_iter().map(|s| s.expect("filled")).collect();
    assert_eq!(
        found,
        [
            "DELETE FROM t WHERE a = 1",
            "DELETE FROM t WHERE b = 2",
            "SELECT ('x_' || id) AS id FROM t WHERE a = ?1 AND b IN ('a', 'b')",
            "SELECT rowid FROM t ORDER BY rowid",
            "UPDATE t SET a = \"q\" WHERE id = ?1",
        ]
    );
    assert!(statements("stmt(&format!(\"SELECT {COLUMNS} FROM t\"));", "")[0].is_err());
    let partial = BTreeSet::from(["p".to_owned()]);
    let plan =
        "QUERY PLAN\n|--SEARCH e USING INDEX i (a=?)\n|--SCAN t USING COVERING INDEX j\n`--SCAN u USING INDEX p\n";
    assert_eq!(scans(plan, &partial), ["t"]);
    let looks = "UPDATE d SET waiting = 1 WHERE id = ?1 AND NOT EXISTS (SELECT 1 FROM d l WHERE l.waiting = 1) \
                 AND (SELECT COUNT(*) FROM d WHERE waiting = 1) = 0";
    assert_eq!(line_lookups(looks), 2);
}
