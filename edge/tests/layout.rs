//! The house rules of the edge, checked on its source (docs/architecture.md draws the map):
//! - no circle: the modules' references to each other form no cycle, in this crate or any other
//!   of the workspace;
//! - each wing imports only what its row in [`ALLOWED`] lists;
//! - every SQL statement sits under `store/`;
//! - no decision compares a string: values are read into types where they arrive;
//! - each table is written from one store module (a file or a folder of `store/`);
//! - no production file over [`MAX_FILE_LINES`] lines, no function over [`MAX_FN_LINES`].

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// What each wing may reference besides itself. Plumbing is every module that is not a wing.
const ALLOWED: &[(&str, &[&str])] = &[
    ("api", &["store", "queues", "plumbing"]),
    ("work", &["store", "queues", "carrier", "call_object", "plumbing"]),
    ("call_object", &["store", "queues", "carrier", "plumbing"]),
    ("queues", &["store", "plumbing"]),
    ("carrier", &["plumbing"]),
    ("store", &["plumbing"]),
    ("plumbing", &[]),
    // The test build's own routes and store checks reach into every wing; nothing reaches them
    // but the router's one gated line.
    ("testing", &["api", "work", "store", "queues", "carrier", "call_object", "plumbing"]),
];

const WINGS: &[&str] = &["api", "work", "store", "carrier", "call_object", "queues", "testing"];

fn wing(module: &str) -> &str {
    let first = module.split("::").next().unwrap_or_default();
    WINGS.iter().copied().find(|w| *w == first).unwrap_or("plumbing")
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read the sources") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `api/http.rs` -> `api::http`, `store/mod.rs` -> `store`, `lib.rs` -> `` (the root).
fn module_of(src: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(src).expect("under src").with_extension("");
    let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).filter(|p| *p != "mod" && *p != "lib").collect();
    parts.join("::")
}

/// The code of a file: without its `#[cfg(test)]` module and without comments (a doc link to a
/// module is not a use of it).
fn code(text: &str) -> String {
    production(text).lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

fn ident(text: &str) -> &str {
    let end = text.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(text.len());
    &text[..end]
}

/// Reads the names of a path (`a::b::c`) at the start of `text` onto `path`; what follows it.
fn read_path<'a>(mut text: &'a str, path: &mut Vec<String>) -> &'a str {
    loop {
        let name = ident(text);
        if name.is_empty() {
            return text;
        }
        path.push(name.to_owned());
        text = &text[name.len()..];
        match text.strip_prefix("::") {
            Some(rest) => text = rest,
            None => return text,
        }
    }
}

/// The modules `text`, the code of module `module`, references through `crate::...` and
/// `super::...` paths (a `{...}` group counts each item).
fn references(module: &str, text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let resolve = |path: &[String]| -> Option<String> {
        (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|m| modules.contains(m))
    };
    let own: Vec<String> = module.split("::").filter(|p| !p.is_empty()).map(str::to_owned).collect();
    let mut found = BTreeSet::new();
    for (i, _) in text.match_indices("crate::").chain(text.match_indices("super::")) {
        // `a_super::` or `crate::super::` is not where a path starts.
        if text[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut rest = &text[i..];
        let mut path: Vec<String> = Vec::new();
        if let Some(r) = rest.strip_prefix("crate::") {
            rest = r;
        } else {
            path = own.clone();
            while let Some(r) = rest.strip_prefix("super::") {
                rest = r;
                path.pop();
            }
        }
        rest = read_path(rest, &mut path);
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            for item in inner.split(',') {
                let item = ident(item.trim());
                let mut full = path.clone();
                if item != "self" && !item.is_empty() {
                    full.push(item.to_owned());
                }
                found.extend(resolve(&full));
            }
        } else {
            found.extend(resolve(&path));
        }
    }
    found
}

/// The modules of the crate whose sources are under `src`, and the modules each references
/// (a module naming itself or its own children is structure, not a reference).
fn graph(src: &Path) -> (BTreeSet<String>, BTreeMap<String, BTreeSet<String>>) {
    let mut files = Vec::new();
    sources(src, &mut files);
    let texts: BTreeMap<String, String> =
        files.iter().map(|p| (module_of(src, p), fs::read_to_string(p).expect("read"))).collect();
    let modules: BTreeSet<String> = texts.keys().filter(|m| !m.is_empty()).cloned().collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, text) in texts.iter().filter(|(m, _)| !m.is_empty()) {
        let code = without_structure(&code(text));
        let mut targets = references(module, &code, &modules);
        targets.extend(child_references(module, &code, &modules));
        targets.remove(module);
        edges.entry(module.clone()).or_default().extend(targets);
    }
    (modules, edges)
}

/// `code` without the statements that only shape the module tree: `mod` declarations and
/// re-exports (`pub use`, `pub(crate) use`, `pub(super) use`, to their `;`). What is left is
/// what the module uses.
fn without_structure(code: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in code.lines() {
        let t = line.trim_start();
        let t = t
            .strip_prefix("pub(crate) ")
            .or_else(|| t.strip_prefix("pub(super) "))
            .or_else(|| t.strip_prefix("pub "))
            .map_or((false, t), |rest| (true, rest));
        let structure = (t.0 && t.1.starts_with("use ")) || (t.1.starts_with("mod ") && t.1.trim_end().ends_with(';'));
        if structure || skipping {
            skipping = !line.trim_end().ends_with(';');
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The modules below `module` that its code names by a path from one of its children
/// (`claims::next(...)`, `self::claims::X`, `use claims::Y`).
fn child_references(module: &str, code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let prefix = format!("{module}::");
    let children = modules.iter().filter_map(|m| m.strip_prefix(&prefix)).filter(|rest| !rest.contains("::"));
    let mut found = BTreeSet::new();
    for child in children {
        let needle = format!("{child}::");
        for (i, _) in code.match_indices(&needle) {
            let before = &code[..i];
            let starts = !before.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                || before.ends_with("self::") && !before.ends_with("::self::");
            if !starts {
                continue;
            }
            // The longest module the path names: `deliveries::claims::next` is `deliveries::claims`.
            let mut path = vec![module.to_owned(), child.to_owned()];
            read_path(&code[i + needle.len()..], &mut path);
            let resolved = (2..=path.len()).rev().map(|n| path[..n].join("::")).find(|m| modules.contains(m));
            found.extend(resolved);
        }
    }
    found
}

/// A cycle among `edges`, if there is one, as the modules along it.
fn circle(modules: &BTreeSet<String>, edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(node) {
            Some(2) => return None,
            Some(1) => {
                let start = stack.iter().position(|n| n == node).unwrap_or(0);
                let mut cycle = stack[start..].to_vec();
                cycle.push(node.to_owned());
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(node.to_owned(), 1);
        stack.push(node.to_owned());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, state, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        state.insert(node.to_owned(), 2);
        None
    }
    let mut state = BTreeMap::new();
    modules.iter().find_map(|m| visit(m, edges, &mut state, &mut Vec::new()))
}

/// Every circle [`circle`] finds when each one found is broken at its last step, for a report
/// that lists them all at once.
fn circles(modules: &BTreeSet<String>, edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut edges = edges.clone();
    let mut found = Vec::new();
    while let Some(cycle) = circle(modules, &edges) {
        let (from, to) = (&cycle[cycle.len() - 2], &cycle[cycle.len() - 1]);
        edges.get_mut(from).map(|targets| targets.remove(to));
        found.push(cycle.join(" -> "));
    }
    found
}

#[test]
fn the_house_has_no_circle_and_each_wing_keeps_to_its_imports() {
    let (modules, edges) = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let mut broken = Vec::new();
    for (module, targets) in &edges {
        for target in targets {
            let (from, to) = (wing(module), wing(target));
            let allowed =
                from == to || ALLOWED.iter().find(|(w, _)| *w == from).is_some_and(|(_, ok)| ok.contains(&to));
            if !allowed {
                broken.push(format!("{module} ({from}) uses {target} ({to})"));
            }
        }
    }
    assert!(broken.is_empty(), "imports across wings that the map does not allow:\n{}", broken.join("\n"));
    let found = circles(&modules, &edges);
    assert!(found.is_empty(), "circles in the house:\n{}", found.join("\n"));
}

/// The workspace's other crates hold to the same: no module of theirs reaches, through the
/// others, back to itself.
#[test]
fn no_crate_of_the_workspace_has_a_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace");
    let crates = ["core", "sim", "tests", "bench/core", "bench/wasm-floor"];
    for name in crates {
        let src = root.join(name).join("src");
        assert!(src.is_dir(), "{} is a crate of the workspace", src.display());
        let (modules, edges) = graph(&src);
        let found = circles(&modules, &edges);
        assert!(found.is_empty(), "circles in {name}:\n{}", found.join("\n"));
    }
}

#[test]
fn a_parent_that_uses_its_child_references_it_and_one_that_declares_or_re_exports_it_does_not() {
    let modules: BTreeSet<String> =
        ["store", "store::claims", "store::due", "store::page"].iter().map(|m| m.to_string()).collect();
    let code =
        "mod claims;\npub mod due;\npub use page::{\n    Cursor,\n};\nfn f() { claims::next(); x.due_y::z(); }\n";
    let code = without_structure(code);
    let found = child_references("store", &code, &modules);
    assert_eq!(found, BTreeSet::from(["store::claims".to_owned()]), "{code}");
}

#[test]
fn the_circle_finder_finds_one_through_three_modules_and_none_in_a_line() {
    let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
    let modules = set(&["a", "b", "c"]);
    let mut edges = BTreeMap::from([("a".to_owned(), set(&["b"])), ("b".to_owned(), set(&["c"]))]);
    assert_eq!(circle(&modules, &edges), None);
    edges.insert("c".to_owned(), set(&["a"]));
    assert_eq!(circle(&modules, &edges), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
}

#[test]
fn every_sql_statement_sits_under_store() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let keywords =
        ["\"SELECT ", "\"INSERT ", "\"UPDATE ", "\"DELETE FROM", "\"CREATE TABLE", "\"CREATE INDEX", "\"ALTER TABLE"];
    let mut outside = Vec::new();
    for path in &files {
        let module = module_of(&src, path);
        // The test build's store checks show rows with SQL of their own.
        if wing(&module) == "store" || wing(&module) == "testing" {
            continue;
        }
        let text = fs::read_to_string(path).expect("read");
        for (n, line) in code(&text).lines().enumerate() {
            if keywords.iter().any(|k| line.to_ascii_uppercase().contains(k)) {
                outside.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(outside.is_empty(), "SQL outside edge/src/store/:\n{}", outside.join("\n"));
}

/// The carrier and store wings read no configuration: whoever calls them hands down what they
/// need of it (the credentials, the shard maps), read once where the request, queue batch or
/// cron tick began.
#[test]
fn the_carrier_and_store_wings_read_no_configuration() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut found = Vec::new();
    for path in &files {
        let module = module_of(&src, path);
        if wing(&module) != "carrier" && wing(&module) != "store" {
            continue;
        }
        let text = fs::read_to_string(path).expect("read");
        let reads = code(&text).lines().filter(|l| l.contains("config::get(") || l.contains("config::tuning(")).count();
        if reads > 0 {
            found.push(path.strip_prefix(&src).expect("under src").to_string_lossy().into_owned());
        }
    }
    assert!(found.is_empty(), "reads of the configuration the caller should hand down: {found:?}");
}

/// Whether a line decides on text: a comparison with a literal, a test of its start or end
/// against one, a `matches!` with a literal pattern, or a `match` arm whose pattern is a literal
/// (which only a parser may have: see [`parses_text`]).
fn decides_on_text(line: &str) -> bool {
    const MARKS: [&str; 7] = [
        "== \"",
        "!= \"",
        "== Some(&\"",
        "!= Some(&\"",
        ".starts_with(\"",
        ".ends_with(\"",
        ".eq_ignore_ascii_case(\"",
    ];
    let literal_pattern =
        line.split_once("matches!(").is_some_and(|(_, rest)| rest.contains(", \"") || rest.contains("| \""));
    MARKS.iter().any(|m| line.contains(m)) || literal_pattern || literal_arm(line)
}

/// Whether a line is a `match` arm whose pattern is a string literal (`"a" | "b" =>`,
/// `Some("a") =>`).
fn literal_arm(line: &str) -> bool {
    let body = line.trim_start();
    let pattern = body.split_once("=>").map_or("", |(p, _)| p.trim());
    !pattern.is_empty()
        && pattern.split('|').all(|alt| {
            let alt = alt.trim();
            let alt = alt.strip_prefix("Some(").and_then(|a| a.strip_suffix(')')).unwrap_or(alt);
            alt.len() >= 2 && alt.starts_with('"') && alt.ends_with('"')
        })
}

/// Whether a function may match on literal text: a parser at the boundary, from text to a type
/// (`from_*`, `parse*`), or any function of the configuration, which reads the worker's
/// variables into `Config`.
fn parses_text(file: &str, function: &str) -> bool {
    file.starts_with("config/") || function.starts_with("from_") || function.starts_with("parse")
}

/// The name of the function `line` starts, if it starts one.
fn fn_name(line: &str) -> Option<&str> {
    let signature = ["pub(crate) ", "pub(super) ", "pub ", "async ", "const "]
        .iter()
        .fold(line.trim_start(), |rest, prefix| rest.strip_prefix(prefix).unwrap_or(rest));
    signature.strip_prefix("fn ").map(ident).filter(|n| !n.is_empty())
}

/// The string comparisons production code may make, each with why: words of a request or a
/// carrier that are read where they arrive, not values the product decides on.
const STRING_WORDS: &[(&str, &str, &str)] = &[
    ("lib.rs", "segments.first() == Some(&\"__e2e\")", "the test build's own routes"),
    ("lib.rs", "path.starts_with(\"/webhooks/\")", "the router: ingest logs its own line"),
    ("api/http.rs", "scheme.eq_ignore_ascii_case(\"bearer\")", "the Authorization header, read where it arrives"),
    ("platform.rs", "e.eq_ignore_ascii_case(\"identity\")", "a response's Content-Encoding, read where it arrives"),
];

/// Files of the test build only, whose checks may compare anything.
const TEST_BUILD_ONLY: &[&str] = &["testing/checks.rs", "testing/e2e.rs"];

#[test]
fn no_decision_compares_a_string() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut found = Vec::new();
    let mut used = BTreeSet::new();
    for path in &files {
        let name = path.strip_prefix(&src).expect("under src").to_string_lossy().replace('\\', "/");
        if TEST_BUILD_ONLY.contains(&name.as_str()) {
            continue;
        }
        let text = fs::read_to_string(path).expect("read");
        let mut function = "";
        for (n, line) in code(&text).lines().enumerate() {
            function = fn_name(line).unwrap_or(function);
            if !decides_on_text(line) || line.contains("assert") || (literal_arm(line) && parses_text(&name, function))
            {
                continue;
            }
            match STRING_WORDS.iter().find(|(file, snippet, _)| *file == name && line.contains(snippet)) {
                Some(allowed) => {
                    used.insert(allowed.1);
                }
                None => found.push(format!("{name}:{}: {}", n + 1, line.trim())),
            }
        }
    }
    assert!(found.is_empty(), "decisions on strings (read the value into a type):\n{}", found.join("\n"));
    let stale: Vec<_> = STRING_WORDS.iter().filter(|(_, s, _)| !used.contains(s)).collect();
    assert!(stale.is_empty(), "STRING_WORDS lists comparisons that are gone: {stale:?}");
}

#[test]
fn the_string_checker_sees_each_kind_of_decision_and_lets_parsers_match() {
    for decision in [
        "if kind == \"sms\" {",
        "if !target.starts_with(\"sip:\") {",
        "let png = name.ends_with(\".png\");",
        "if matches!(word, \"true\" | \"yes\") {",
        "if segments.first() != Some(&\"v1\") {",
        "let plain = encoding.eq_ignore_ascii_case(\"identity\");",
        "\"sip\" | \"sips\" => Target::Sip,",
        "Some(\"on\") => true,",
        "\"pending\" => Some(DeliveryStatus::Pending),",
    ] {
        assert!(decides_on_text(decision), "{decision}");
    }
    for other in [
        "if matches!(done, Done::Held | Done::NotDue) {",
        "let shown = problem.unwrap_or_else(|| \"ok\".to_owned());",
        "Some(kind) => format!(\"{kind} => x\"),",
    ] {
        assert!(!decides_on_text(other), "{other}");
    }
    assert!(parses_text("store/calls.rs", "from_name") && parses_text("config/mod.rs", "flag_or"));
    assert!(!parses_text("work/calls.rs", "dial"));
}

#[test]
fn the_checker_sees_references_and_groups() {
    let modules: BTreeSet<String> =
        ["store", "store::messages", "store::numbers", "queues"].iter().map(|s| s.to_string()).collect();
    let text = "use crate::store::{self as db, messages, int};\nlet x = crate::queues::announce(env);";
    let found: Vec<String> = references("api", text, &modules).into_iter().collect();
    assert_eq!(found, ["queues", "store", "store::messages"]);
    // `super::` climbs from the module that writes it.
    let text = "use super::{numbers, Cursor};\nlet y = super::super::queues::send(x);";
    let found: Vec<String> = references("store::messages", text, &modules).into_iter().collect();
    assert_eq!(found, ["queues", "store", "store::numbers"]);
}

/// The most lines a production file of `edge/src` or `sim/src` may have (its tests excluded).
const MAX_FILE_LINES: usize = 700;
/// The most lines a production function there may have, signature to closing brace.
const MAX_FN_LINES: usize = 90;

/// The production part of a source file: everything before its `#[cfg(test)]` module.
fn production(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests").map_or(text, |end| &text[..end])
}

/// Each function of `text` with its length in lines, found by its `fn` line and the closing
/// brace at the same indentation (the house's rustfmt writes every function that way).
fn functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let Some(name) = fn_name(line) else { continue };
        if body.ends_with('}') || body.ends_with(';') {
            continue; // one line, or a declaration without a body
        }
        let close = format!("{indent}}}");
        if let Some(end) = lines[start..].iter().position(|l| *l == close) {
            found.push((name.to_owned(), end + 1));
        }
    }
    found
}

#[test]
fn no_file_or_function_grows_past_its_limit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in [root.join("src"), root.join("../sim/src")] {
        sources(&dir, &mut files);
    }
    let mut sizes = Vec::new();
    let mut lengths = Vec::new();
    for path in &files {
        let name = path.strip_prefix(root).unwrap_or(path).display().to_string();
        let text = fs::read_to_string(path).expect("read");
        let text = production(&text);
        sizes.push((text.lines().count(), name.clone()));
        lengths.extend(functions(text).into_iter().map(|(f, n)| (n, format!("{name}: {f}"))));
    }
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    lengths.sort_unstable_by(|a, b| b.cmp(a));
    let largest =
        |list: &[(usize, String)]| list.iter().take(5).map(|(n, w)| format!("  {n:>4} {w}")).collect::<Vec<_>>();
    eprintln!("largest files:\n{}", largest(&sizes).join("\n"));
    eprintln!("longest functions:\n{}", largest(&lengths).join("\n"));
    let big: Vec<_> = sizes.iter().filter(|(n, _)| *n > MAX_FILE_LINES).collect();
    assert!(big.is_empty(), "files over {MAX_FILE_LINES} lines (split them by concept): {big:?}");
    let long: Vec<_> = lengths.iter().filter(|(n, _)| *n > MAX_FN_LINES).collect();
    assert!(long.is_empty(), "functions over {MAX_FN_LINES} lines (split them into steps): {long:?}");
}

#[test]
fn the_size_checker_finds_functions_and_leaves_tests_out() {
    let text = "fn a() {\n    x();\n}\nfn one() -> u8 { 1 }\n\nimpl S {\n    pub async fn b(\n        y: u8,\n    ) {\n    }\n}\n#[cfg(test)]\nmod tests {\n    fn c() {\n    }\n}\n";
    let found = functions(production(text));
    assert_eq!(found, [("a".to_owned(), 3), ("b".to_owned(), 4)]);
}

/// The tables the SQL of `text` writes: `INSERT INTO t`, `UPDATE t SET`, `DELETE FROM t`.
fn tables_written(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for verb in ["INSERT INTO ", "INSERT OR IGNORE INTO ", "INSERT OR REPLACE INTO ", "UPDATE ", "DELETE FROM "] {
        for (at, _) in text.match_indices(verb) {
            let table = ident(text[at + verb.len()..].trim_start());
            // `ON CONFLICT ... DO UPDATE SET` names no table.
            if !table.is_empty() && table != "SET" {
                found.insert(table.to_owned());
            }
        }
    }
    found
}

#[test]
fn each_table_is_written_from_one_store_module() {
    let store = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    let mut files = Vec::new();
    sources(&store, &mut files);
    let mut writers: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in &files {
        // `store/carrier_events/moves.rs` is module `carrier_events`; `store/mod.rs` is `store`.
        let rel = path.strip_prefix(&store).expect("under store").with_extension("");
        let first = rel.components().next().map(|c| c.as_os_str().to_string_lossy().into_owned()).unwrap_or_default();
        let module = if first == "mod" { "store".to_owned() } else { first };
        for table in tables_written(&code(&fs::read_to_string(path).expect("read"))) {
            writers.entry(table).or_default().insert(module.clone());
        }
    }
    assert!(writers.contains_key("carrier_events") && writers.contains_key("messages"), "found no writes: {writers:?}");
    let shared: Vec<_> = writers.iter().filter(|(_, modules)| modules.len() > 1).collect();
    assert!(
        shared.is_empty(),
        "tables written from more than one store module (move the statement to its table's module): {shared:?}"
    );
}

#[test]
fn the_writer_checker_reads_each_verb() {
    let sql = "INSERT INTO a (x) VALUES (1) ON CONFLICT (x) DO UPDATE SET x = 2; UPDATE b SET y = 1; DELETE FROM c";
    assert_eq!(tables_written(sql).into_iter().collect::<Vec<_>>(), ["a", "b", "c"]);
}

/// The statements of `text` that could change which account owns a number: a delete from
/// `phone_numbers`, a replace into it, or an update that sets its number or its account.
fn owner_changes(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for verb in ["DELETE FROM phone_numbers", "INSERT OR REPLACE INTO phone_numbers", "REPLACE INTO phone_numbers"] {
        found.extend(text.match_indices(verb).map(|(_, v)| v.to_owned()));
    }
    for (at, _) in text.match_indices("UPDATE phone_numbers SET") {
        let set = &text[at..];
        let set = &set[..set.find("WHERE").unwrap_or(set.len())];
        if set.contains("account_id") || set.contains("phone_number =") {
            found.push(set.to_owned());
        }
    }
    found
}

/// A number's owner never changes, which is what lets an isolate remember it
/// (`store::numbers::remembered`): no statement of the worker deletes a number or moves it.
#[test]
fn no_statement_changes_a_numbers_owner() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let changes: Vec<_> = files
        .iter()
        .flat_map(|path| {
            owner_changes(&code(&fs::read_to_string(path).expect("read"))).into_iter().map(move |c| (path, c))
        })
        .collect();
    assert!(changes.is_empty(), "statements that change a number's owner: {changes:?}");
}

#[test]
fn the_owner_checker_finds_each_kind_of_change() {
    let sql = "UPDATE phone_numbers SET carrier = ?2 WHERE phone_number = ?1; DELETE FROM phone_numbers WHERE id = 1;
               UPDATE phone_numbers SET account_id = ?1 WHERE phone_number = ?2";
    assert_eq!(owner_changes(sql).len(), 2);
}
