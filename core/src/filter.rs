//! Endpoint filters: a small predicate language over a customer event's JSON body, so an
//! endpoint receives only the events it wants (docs/contract.md §6, "Filters").
//!
//! ```text
//! filter     = or
//! or         = and ("or" and)*
//! and        = unary ("and" unary)*
//! unary      = "not" unary | "(" filter ")" | comparison
//! comparison = path "exists"
//!            | path ("=" | "!=" | "<" | "<=" | ">" | ">=") value
//!            | path "in" "[" value ("," value)* "]"
//! path       = segment ("." segment)*        segment = [A-Za-z0-9_]+ (a digit-only segment
//!                                            also indexes an array)
//! value      = "string" | number | true | false | null
//! ```
//!
//! Paths start at the body's root: `type`, `data.direction`, `data.to`. Keywords are lower case.
//! A comparison whose path is absent is false (so `data.x != 1` needs `data.x` to exist, while
//! `not data.x = 1` holds when it is absent). `=` and `!=` compare JSON values (numbers by
//! value); `<`, `<=`, `>`, `>=` compare two numbers, or two strings by their bytes (RFC 3339
//! times in UTC order as text), and are false for anything else.
//!
//! Parsing answers every input with a [`Filter`] or a [`FilterError`] naming the position (a
//! 1-based character column) of the problem; it never panics, and bounds its own work
//! ([`MAX_LEN`], [`MAX_DEPTH`], [`MAX_TERMS`]). Evaluating never fails.

use std::fmt;

use serde_json::Value;

/// The longest filter, in bytes.
pub const MAX_LEN: usize = 2048;
/// The deepest nesting of `not` and parentheses.
pub const MAX_DEPTH: usize = 16;
/// The most comparisons (and values of `in` lists) in one filter.
pub const MAX_TERMS: usize = 100;

/// A parsed filter. Its `Display` is a canonical text that parses back to the same filter.
#[derive(Clone, Debug, PartialEq)]
pub enum Filter {
    Or(Vec<Filter>),
    And(Vec<Filter>),
    Not(Box<Filter>),
    Exists(Path),
    Compare(Path, Op, Value),
    In(Path, Vec<Value>),
}

/// A field path: the keys (or array indexes) from the body's root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Path(Vec<String>);

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Eq => "=",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }
}

/// Why a filter was refused, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterError {
    /// The 1-based character column where the problem starts.
    pub position: usize,
    pub message: String,
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at position {}: {}", self.position, self.message)
    }
}

impl std::error::Error for FilterError {}

impl Filter {
    /// Parses `text` (see the module's grammar).
    pub fn parse(text: &str) -> Result<Filter, FilterError> {
        if text.len() > MAX_LEN {
            return Err(FilterError { position: 1, message: format!("a filter is at most {MAX_LEN} bytes") });
        }
        let tokens = lex(text)?;
        let mut parser = Parser { tokens, at: 0, depth: 0, terms: 0, text };
        let filter = parser.or()?;
        match parser.peek() {
            None => Ok(filter),
            Some(_) => Err(parser.error("expected `and`, `or` or the end of the filter")),
        }
    }

    /// Whether `body` passes the filter.
    pub fn matches(&self, body: &Value) -> bool {
        match self {
            Filter::Or(all) => all.iter().any(|f| f.matches(body)),
            Filter::And(all) => all.iter().all(|f| f.matches(body)),
            Filter::Not(inner) => !inner.matches(body),
            Filter::Exists(path) => path.find(body).is_some(),
            Filter::Compare(path, op, value) => path.find(body).is_some_and(|found| compare(found, *op, value)),
            Filter::In(path, values) => path.find(body).is_some_and(|found| values.iter().any(|v| same(found, v))),
        }
    }
}

impl Path {
    /// The value at this path in `body`, if any.
    pub fn find<'a>(&self, body: &'a Value) -> Option<&'a Value> {
        self.0.iter().try_fold(body, |at, key| match at {
            Value::Object(map) => map.get(key),
            Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        })
    }
}

/// JSON equality, numbers by value (`1` equals `1.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn compare(found: &Value, op: Op, value: &Value) -> bool {
    use std::cmp::Ordering;
    let order = match (found, value) {
        (Value::Number(x), Value::Number(y)) => x.as_f64().zip(y.as_f64()).and_then(|(x, y)| x.partial_cmp(&y)),
        (Value::String(x), Value::String(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        _ => None,
    };
    match op {
        Op::Eq => same(found, value),
        Op::Ne => !same(found, value),
        Op::Lt => order == Some(Ordering::Less),
        Op::Le => matches!(order, Some(Ordering::Less | Ordering::Equal)),
        Op::Gt => order == Some(Ordering::Greater),
        Op::Ge => matches!(order, Some(Ordering::Greater | Ordering::Equal)),
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Word(String),
    Str(String),
    Num(serde_json::Number),
    Op(Op),
    Open,
    Close,
    OpenList,
    CloseList,
    Comma,
    Dot,
}

/// The tokens of `text`, each with its 1-based character column.
fn lex(text: &str) -> Result<Vec<(Token, usize)>, FilterError> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i + 1;
        let error = |message: &str| FilterError { position: start, message: message.to_owned() };
        let (token, next) = match c {
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            '(' => (Token::Open, i + 1),
            ')' => (Token::Close, i + 1),
            '[' => (Token::OpenList, i + 1),
            ']' => (Token::CloseList, i + 1),
            ',' => (Token::Comma, i + 1),
            '.' => (Token::Dot, i + 1),
            '=' => (Token::Op(Op::Eq), i + 1),
            '!' if chars.get(i + 1) == Some(&'=') => (Token::Op(Op::Ne), i + 2),
            '<' | '>' => {
                let equal = chars.get(i + 1) == Some(&'=');
                let op = match (c, equal) {
                    ('<', false) => Op::Lt,
                    ('<', true) => Op::Le,
                    (_, false) => Op::Gt,
                    (_, true) => Op::Ge,
                };
                (Token::Op(op), i + 1 + usize::from(equal))
            }
            '"' => string(&chars, i).map_err(|(at, message)| FilterError { position: at + 1, message })?,
            '-' | '0'..='9' if c == '-' || tokens.last().map(|(t, _)| t) != Some(&Token::Dot) => {
                number(&chars, i).ok_or_else(|| error("not a number"))?
            }
            c if c.is_ascii_alphanumeric() || c == '_' => {
                let end = (i..chars.len()).find(|&j| !(chars[j].is_ascii_alphanumeric() || chars[j] == '_'));
                let end = end.unwrap_or(chars.len());
                (Token::Word(chars[i..end].iter().collect()), end)
            }
            _ => return Err(error(&format!("unexpected character {c:?}"))),
        };
        tokens.push((token, start));
        i = next;
    }
    Ok(tokens)
}

/// A JSON-style string starting at `chars[start]` (a `"`): its value and the index after it.
fn string(chars: &[char], start: usize) -> Result<(Token, usize), (usize, String)> {
    let mut value = String::new();
    let mut i = start + 1;
    loop {
        match chars.get(i) {
            None => return Err((start, "a string is not closed".into())),
            Some('"') => return Ok((Token::Str(value), i + 1)),
            Some('\\') => {
                let escaped = match chars.get(i + 1) {
                    Some('"') => '"',
                    Some('\\') => '\\',
                    Some('n') => '\n',
                    Some('t') => '\t',
                    _ => return Err((i, "only \\\", \\\\, \\n and \\t escapes are allowed".into())),
                };
                value.push(escaped);
                i += 2;
            }
            Some(c) if c.is_control() => return Err((i, "a control character in a string".into())),
            Some(c) => {
                value.push(*c);
                i += 1;
            }
        }
    }
}

/// A JSON number starting at `chars[start]`: its value and the index after it.
fn number(chars: &[char], start: usize) -> Option<(Token, usize)> {
    let end = (start + 1..chars.len())
        .find(|&j| !(chars[j].is_ascii_digit() || matches!(chars[j], '.' | 'e' | 'E' | '+' | '-')))
        .unwrap_or(chars.len());
    let text: String = chars[start..end].iter().collect();
    match serde_json::from_str::<Value>(&text).ok()? {
        Value::Number(n) if n.as_f64().is_some_and(f64::is_finite) => Some((Token::Num(n), end)),
        _ => None,
    }
}

struct Parser<'a> {
    tokens: Vec<(Token, usize)>,
    at: usize,
    depth: usize,
    terms: usize,
    text: &'a str,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at).map(|(t, _)| t)
    }

    fn position(&self) -> usize {
        match self.tokens.get(self.at) {
            Some((_, at)) => *at,
            None => self.text.chars().count() + 1,
        }
    }

    fn error(&self, message: &str) -> FilterError {
        let message = match self.peek() {
            None => format!("{message}, found the end of the filter"),
            Some(_) => message.to_owned(),
        };
        FilterError { position: self.position(), message }
    }

    fn keyword(&mut self, word: &str) -> bool {
        if matches!(self.peek(), Some(Token::Word(w)) if w == word) {
            self.at += 1;
            return true;
        }
        false
    }

    fn take(&mut self, token: &Token) -> bool {
        if self.peek() == Some(token) {
            self.at += 1;
            return true;
        }
        false
    }

    fn or(&mut self) -> Result<Filter, FilterError> {
        let mut all = vec![self.and()?];
        while self.keyword("or") {
            all.push(self.and()?);
        }
        Ok(if all.len() == 1 { all.remove(0) } else { Filter::Or(all) })
    }

    fn and(&mut self) -> Result<Filter, FilterError> {
        let mut all = vec![self.unary()?];
        while self.keyword("and") {
            all.push(self.unary()?);
        }
        Ok(if all.len() == 1 { all.remove(0) } else { Filter::And(all) })
    }

    fn unary(&mut self) -> Result<Filter, FilterError> {
        if self.depth >= MAX_DEPTH {
            return Err(self.error(&format!("nested more than {MAX_DEPTH} deep")));
        }
        self.depth += 1;
        let filter = if self.keyword("not") {
            self.unary().map(|f| Filter::Not(Box::new(f)))
        } else if self.take(&Token::Open) {
            let inner = self.or()?;
            if self.take(&Token::Close) {
                Ok(inner)
            } else {
                Err(self.error("expected `)`"))
            }
        } else {
            self.comparison()
        };
        self.depth -= 1;
        filter
    }

    fn count_term(&mut self) -> Result<(), FilterError> {
        self.terms += 1;
        if self.terms > MAX_TERMS {
            return Err(self.error(&format!("more than {MAX_TERMS} comparisons and values")));
        }
        Ok(())
    }

    fn comparison(&mut self) -> Result<Filter, FilterError> {
        self.count_term()?;
        let path = self.path()?;
        if self.keyword("exists") {
            return Ok(Filter::Exists(path));
        }
        if self.keyword("in") {
            if !self.take(&Token::OpenList) {
                return Err(self.error("expected `[` after `in`"));
            }
            let mut values = vec![self.value()?];
            while self.take(&Token::Comma) {
                self.count_term()?;
                values.push(self.value()?);
            }
            if !self.take(&Token::CloseList) {
                return Err(self.error("expected `,` or `]`"));
            }
            return Ok(Filter::In(path, values));
        }
        let Some(Token::Op(op)) = self.peek().cloned() else {
            return Err(self.error("expected `=`, `!=`, `<`, `<=`, `>`, `>=`, `in` or `exists` after the path"));
        };
        self.at += 1;
        Ok(Filter::Compare(path, op, self.value()?))
    }

    fn path(&mut self) -> Result<Path, FilterError> {
        let mut keys = Vec::new();
        loop {
            match self.peek() {
                Some(Token::Word(w)) if keys.is_empty() && is_keyword(w) => {
                    return Err(self.error(&format!("expected a field path, found the keyword `{w}`")))
                }
                Some(Token::Word(w)) => keys.push(w.clone()),
                _ => return Err(self.error("expected a field path such as data.direction")),
            }
            self.at += 1;
            if !self.take(&Token::Dot) {
                return Ok(Path(keys));
            }
        }
    }

    fn value(&mut self) -> Result<Value, FilterError> {
        let value = match self.peek() {
            Some(Token::Str(s)) => Value::String(s.clone()),
            Some(Token::Num(n)) => Value::Number(n.clone()),
            Some(Token::Word(w)) if w == "true" => Value::Bool(true),
            Some(Token::Word(w)) if w == "false" => Value::Bool(false),
            Some(Token::Word(w)) if w == "null" => Value::Null,
            _ => return Err(self.error("expected a value: a \"string\", a number, true, false or null")),
        };
        self.at += 1;
        Ok(value)
    }
}

fn is_keyword(word: &str) -> bool {
    matches!(word, "and" | "or" | "not" | "in" | "exists" | "true" | "false" | "null")
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("."))
    }
}

fn write_value(f: &mut fmt::Formatter<'_>, value: &Value) -> fmt::Result {
    match value {
        Value::String(s) => {
            f.write_str("\"")?;
            for c in s.chars() {
                match c {
                    '"' => f.write_str("\\\"")?,
                    '\\' => f.write_str("\\\\")?,
                    '\n' => f.write_str("\\n")?,
                    '\t' => f.write_str("\\t")?,
                    c => write!(f, "{c}")?,
                }
            }
            f.write_str("\"")
        }
        other => write!(f, "{other}"),
    }
}

impl fmt::Display for Filter {
    /// Fully parenthesized where it nests, so it parses back to the same filter.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let joined = |f: &mut fmt::Formatter<'_>, all: &[Filter], word: &str| {
            for (i, part) in all.iter().enumerate() {
                if i > 0 {
                    write!(f, " {word} ")?;
                }
                match part {
                    Filter::Or(_) | Filter::And(_) => write!(f, "({part})")?,
                    _ => write!(f, "{part}")?,
                }
            }
            Ok(())
        };
        match self {
            Filter::Or(all) => joined(f, all, "or"),
            Filter::And(all) => joined(f, all, "and"),
            Filter::Not(inner) => match **inner {
                Filter::Or(_) | Filter::And(_) => write!(f, "not ({inner})"),
                _ => write!(f, "not {inner}"),
            },
            Filter::Exists(path) => write!(f, "{path} exists"),
            Filter::Compare(path, op, value) => {
                write!(f, "{path} {} ", op.as_str())?;
                write_value(f, value)
            }
            Filter::In(path, values) => {
                write!(f, "{path} in [")?;
                for (i, value) in values.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write_value(f, value)?;
                }
                f.write_str("]")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Filter, Op, Path, MAX_DEPTH, MAX_LEN};
    use crate::rng::Deterministic;
    use serde_json::json;

    fn body() -> serde_json::Value {
        json!({
            "type": "message.received", "created_at": "2026-12-02T10:00:00Z",
            "data": {"direction": "inbound", "to": "+15550001111", "segments": 3, "text": "hi \"you\"",
                     "media": [{"url": "https://m.example/1"}], "tags": null},
        })
    }

    fn passes(text: &str) -> bool {
        Filter::parse(text).unwrap_or_else(|e| panic!("{text}: {e}")).matches(&body())
    }

    #[test]
    fn every_operator_on_every_kind_of_value() {
        let cases = [
            ("type = \"message.received\"", true),
            ("type != \"message.received\"", false),
            ("data.direction in [\"outbound\", \"inbound\"]", true),
            ("data.direction in [\"outbound\"]", false),
            ("data.segments = 3.0", true),
            ("data.segments >= 3 and data.segments < 4", true),
            ("data.segments > 3 or data.segments <= 2", false),
            ("created_at >= \"2026-12-01T00:00:00Z\"", true),
            ("data.text = \"hi \\\"you\\\"\"", true),
            ("data.media.0.url exists", true),
            ("data.media.1.url exists", false),
            ("data.tags = null", true),
            ("data.tags exists", true),
            ("data.segments < \"4\"", false),
            ("not (data.direction = \"outbound\" or data.segments = 1)", true),
            ("not not type exists", true),
        ];
        for (text, expected) in cases {
            assert_eq!(passes(text), expected, "{text}");
        }
    }

    /// An absent field makes every comparison false, `!=` included; `not` turns that round.
    #[test]
    fn an_absent_field_fails_every_comparison() {
        for text in
            ["data.missing = 1", "data.missing != 1", "data.missing < 1", "data.missing in [1]", "type.x exists"]
        {
            assert!(!passes(text), "{text}");
        }
        assert!(passes("not data.missing = 1"));
    }

    #[test]
    fn errors_name_their_position() {
        let cases = [
            ("", 1, "end of the filter"),
            ("type =", 7, "expected a value"),
            ("type = \"a\" and", 15, "field path"),
            ("type == \"a\"", 7, "expected a value"),
            ("(type exists", 13, "`)`"),
            ("type in \"a\"", 9, "`[`"),
            ("type in [\"a\" \"b\"]", 14, "`,` or `]`"),
            ("type = \"open", 8, "not closed"),
            ("type = 'a'", 8, "unexpected character"),
            ("type = \"a\" extra", 12, "`and`, `or`"),
            ("and = 1", 1, "keyword `and`"),
            ("type ~ 1", 6, "unexpected character"),
            ("é = 1", 1, "unexpected character"),
            ("x = 1e999", 5, "not a number"),
        ];
        for (text, position, words) in cases {
            let error = Filter::parse(text).expect_err(text);
            assert_eq!(error.position, position, "{text}: {error}");
            assert!(error.message.contains(words), "{text}: {error}");
        }
    }

    #[test]
    fn work_is_bounded() {
        let deep = format!("{}type exists{}", "(".repeat(MAX_DEPTH + 1), ")".repeat(MAX_DEPTH + 1));
        assert!(Filter::parse(&deep).expect_err("deep").message.contains("nested"));
        let nots = format!("{}type exists", "not ".repeat(10_000));
        assert!(Filter::parse(&nots).is_err());
        let wide = vec!["type exists"; 101].join(" or ");
        assert!(Filter::parse(&wide).expect_err("wide").message.contains("comparisons"));
        let list = format!("type in [{}]", vec!["1"; 101].join(","));
        assert!(Filter::parse(&list).is_err());
        assert!(Filter::parse(&"x".repeat(MAX_LEN + 1)).is_err());
    }

    fn random_value(rng: &mut Deterministic) -> serde_json::Value {
        match rng.below(6) {
            0 => json!("in\"bound\\ \n\t\u{e9}"),
            1 => json!(rng.below(1000) as i64 - 500),
            2 => json!(rng.below(1000) as f64 / 8.0),
            3 => json!(rng.below(2) == 0),
            4 => json!(null),
            _ => json!("message.received"),
        }
    }

    fn random_filter(rng: &mut Deterministic, depth: usize) -> Filter {
        let keys = ["type", "data", "direction", "0", "in", "segments", "_x9"];
        let mut path = vec![keys[rng.below(2)].to_owned()];
        for _ in 0..rng.below(3) {
            path.push(keys[rng.below(keys.len())].to_owned());
        }
        let path = Path(path);
        let ops = [Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge];
        match if depth >= 4 { rng.below(3) } else { rng.below(6) } {
            0 => Filter::Exists(path),
            1 => Filter::Compare(path, ops[rng.below(ops.len())], random_value(rng)),
            2 => Filter::In(path, (0..=rng.below(3)).map(|_| random_value(rng)).collect()),
            3 => Filter::Not(Box::new(random_filter(rng, depth + 1))),
            4 => Filter::And((0..2 + rng.below(2)).map(|_| random_filter(rng, depth + 1)).collect()),
            _ => Filter::Or((0..2 + rng.below(2)).map(|_| random_filter(rng, depth + 1)).collect()),
        }
    }

    /// Random filters print as a text that parses back to the same filter; that text with a
    /// byte changed, cut or doubled parses or fails, never panics, and what parses round-trips
    /// too.
    #[test]
    fn random_filters_round_trip_and_mutations_never_panic() {
        let mut rng = Deterministic::new(31);
        let mut mutated_parsed = 0;
        for _ in 0..5_000 {
            let filter = random_filter(&mut rng, 0);
            let text = filter.to_string();
            let back = Filter::parse(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(back, filter, "{text:?}");
            back.matches(&body());
            let mut bytes = text.clone().into_bytes();
            let at = rng.below(bytes.len());
            match rng.below(3) {
                0 => bytes[at] = (rng.next_u64() & 0xff) as u8,
                1 => bytes.truncate(at),
                _ => bytes.extend_from_within(at..),
            }
            let mutated = String::from_utf8_lossy(&bytes);
            if let Ok(parsed) = Filter::parse(&mutated) {
                mutated_parsed += 1;
                parsed.matches(&body());
                let canonical = parsed.to_string();
                assert_eq!(Filter::parse(&canonical).as_ref(), Ok(&parsed), "{mutated:?} printed as {canonical:?}");
            }
        }
        assert!(mutated_parsed > 100, "only {mutated_parsed} mutations parsed");
    }
}
