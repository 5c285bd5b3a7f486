//! Rows read column by column from D1's own objects.
//!
//! D1 answers every row as a JavaScript object whose values are text, numbers or `null`
//! (SQLite has no booleans, and times are stored as Unix milliseconds). A row type lists its
//! fields once, in [`row!`]; each field is read from the column of its name as its type reads a
//! column ([`Column`]): one property lookup per field, and no per-type deserializer. A value a
//! field's type does not accept is an error where the row is read, naming the column, never a
//! default.

use exactly_core::headers::CustomHeaders;
use exactly_core::webhook::EventType;
use exactly_core::Timestamp;
use wasm_bindgen::JsValue;

/// One column's value as D1 returns it.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// SQL NULL, or a column the row does not have.
    Null,
    Text(String),
    Number(f64),
}

/// Where a row's columns are read from: D1's row object, or (in tests) a JSON object.
pub trait Source {
    /// The column `name`; an error for a value that is neither text, a number nor NULL.
    fn cell(&self, name: &str) -> Result<Cell, String>;
}

impl Source for JsValue {
    fn cell(&self, name: &str) -> Result<Cell, String> {
        let value = js_sys::Reflect::get(self, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED);
        if value.is_null() || value.is_undefined() {
            Ok(Cell::Null)
        } else if let Some(text) = value.as_string() {
            Ok(Cell::Text(text))
        } else if let Some(number) = value.as_f64() {
            Ok(Cell::Number(number))
        } else {
            Err("holds neither text, a number nor NULL".to_owned())
        }
    }
}

/// A JSON object's members as columns (a JSON column's items, as media are stored).
impl Source for serde_json::Value {
    fn cell(&self, name: &str) -> Result<Cell, String> {
        match self.get(name) {
            None | Some(serde_json::Value::Null) => Ok(Cell::Null),
            Some(serde_json::Value::String(text)) => Ok(Cell::Text(text.clone())),
            Some(serde_json::Value::Number(n)) => n.as_f64().map(Cell::Number).ok_or_else(|| "no number".to_owned()),
            Some(other) => Err(format!("holds {other}")),
        }
    }
}

/// A type a column's value reads into.
pub trait Column: Sized {
    /// The value, or what was wrong with it.
    fn read(cell: Cell) -> Result<Self, String>;
}

/// A row type: each of its fields read from its column ([`row!`] writes this).
pub trait FromRow: Sized {
    fn from_row(row: &dyn Source) -> Result<Self, String>;
}

/// The column `name` of `row`, read as `T`; the error names the column.
pub fn column<T: Column>(row: &dyn Source, name: &str) -> Result<T, String> {
    row.cell(name).and_then(T::read).map_err(|why| format!("column {name}: {why}"))
}

/// A column that must hold text.
pub fn text(cell: Cell) -> Result<String, String> {
    match cell {
        Cell::Text(text) => Ok(text),
        Cell::Null => Err("is NULL or missing, not text".to_owned()),
        Cell::Number(n) => Err(format!("holds the number {n}, not text")),
    }
}

/// A column that must hold an integer (exact: at most 2^53 either side of 0).
pub fn integer(cell: Cell) -> Result<i64, String> {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    match cell {
        Cell::Number(n) if n.fract() == 0.0 && n.abs() <= EXACT => Ok(n as i64),
        Cell::Number(n) => Err(format!("holds {n}, not an integer")),
        Cell::Null => Err("is NULL or missing, not an integer".to_owned()),
        Cell::Text(_) => Err("holds text, not an integer".to_owned()),
    }
}

impl Column for String {
    fn read(cell: Cell) -> Result<Self, String> {
        text(cell)
    }
}

impl Column for i64 {
    fn read(cell: Cell) -> Result<Self, String> {
        integer(cell)
    }
}

macro_rules! narrow_integers {
    ($($t:ty),*) => {$(
        impl Column for $t {
            fn read(cell: Cell) -> Result<Self, String> {
                let n = integer(cell)?;
                <$t>::try_from(n).map_err(|_| format!("holds {n}, out of range for {}", stringify!($t)))
            }
        }
    )*};
}
narrow_integers!(u8, u16, u32, u64, i32, usize);

impl Column for f64 {
    fn read(cell: Cell) -> Result<Self, String> {
        match cell {
            Cell::Number(n) => Ok(n),
            _ => Err("is not a number".to_owned()),
        }
    }
}

/// A flag: SQLite has no booleans, so 0 or 1.
impl Column for bool {
    fn read(cell: Cell) -> Result<Self, String> {
        match integer(cell)? {
            0 => Ok(false),
            1 => Ok(true),
            n => Err(format!("a flag column holds {n}, not 0 or 1")),
        }
    }
}

/// A time: Unix milliseconds.
impl Column for Timestamp {
    fn read(cell: Cell) -> Result<Self, String> {
        integer(cell).map(Timestamp::from_unix_millis)
    }
}

/// NULL (or a column the row lacks) is `None`; anything else reads as `T`.
impl<T: Column> Column for Option<T> {
    fn read(cell: Cell) -> Result<Self, String> {
        match cell {
            Cell::Null => Ok(None),
            cell => T::read(cell).map(Some),
        }
    }
}

/// A JSON array of customer event types' wire names; a name no [`EventType`] has is an error.
impl Column for Vec<EventType> {
    fn read(cell: Cell) -> Result<Self, String> {
        let names: Vec<String> = serde_json::from_str(&text(cell)?).map_err(|e| e.to_string())?;
        names.iter().map(|name| EventType::from_name(name).ok_or_else(|| format!("no event type {name}"))).collect()
    }
}

/// An endpoint's custom headers as a JSON object (NULL for none); a set the rules refuse is an
/// error, never sent in part.
impl Column for CustomHeaders {
    fn read(cell: Cell) -> Result<Self, String> {
        let Some(column) = Option::<String>::read(cell)? else { return Ok(CustomHeaders::default()) };
        let pairs: std::collections::BTreeMap<String, String> =
            serde_json::from_str(&column).map_err(|e| e.to_string())?;
        CustomHeaders::new(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))).map_err(|e| e.to_string())
    }
}

/// Implements [`Column`] for enums stored as their name, each declared with
/// `exactly_core::text_enum!` (the one way an enum becomes text and back): each reads with its
/// `from_name`, and a name it does not know is an error.
macro_rules! named {
    ($($t:ty),* $(,)?) => {$(
        impl $crate::store::row::Column for $t {
            fn read(cell: $crate::store::row::Cell) -> Result<Self, String> {
                let stored = $crate::store::row::text(cell)?;
                <$t>::from_name(&stored).ok_or_else(|| format!("holds {stored}, which no {} is", stringify!($t)))
            }
        }
    )*};
}
pub(crate) use named;

// The core's enums a column holds; each of the edge's maps its own beside its declaration.
named!(
    EventType,
    exactly_core::event::Provider,
    exactly_core::message::MessageStatus,
    exactly_core::segments::Encoding,
    exactly_core::call::CallStatus,
    exactly_core::call_machine::LegOutcome,
);

/// Declares a row type and its [`FromRow`]: each field is read from the column of its name, or
/// of the name after `=`; `= flatten` reads a field that is a row type itself from the same row,
/// and `= default` a field no query selects (filled in after the read).
///
/// ```ignore
/// row! {
///     pub struct Stored {
///         pub id: String,
///         pub event_type: EventType = "type",
///         pub circuit: Columns = flatten,
///     }
/// }
/// ```
macro_rules! row {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[$field_meta:meta])*
                $field_vis:vis $field:ident : $ty:ty $(= $column:tt)?
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $($(#[$field_meta])* $field_vis $field: $ty,)*
        }

        impl $crate::store::row::FromRow for $name {
            fn from_row(row: &dyn $crate::store::row::Source) -> Result<Self, String> {
                Ok(Self { $($field: $crate::store::row::row!(@read row $field $($column)?),)* })
            }
        }
    };
    (@read $row:ident $field:ident) => { $crate::store::row::column($row, stringify!($field))? };
    (@read $row:ident $field:ident flatten) => { $crate::store::row::FromRow::from_row($row)? };
    (@read $row:ident $field:ident default) => { Default::default() };
    (@read $row:ident $field:ident $column:literal) => { $crate::store::row::column($row, $column)? };
}
pub(crate) use row;

#[cfg(test)]
mod tests {
    use super::{column, Cell, Column, FromRow};
    use exactly_core::Timestamp;
    use serde_json::json;

    super::row! {
        #[derive(Debug, PartialEq)]
        struct Sample {
            id: String,
            kind: String = "type",
            attempts: u32,
            at: Timestamp,
            done: bool,
            note: Option<String>,
            until: Option<Timestamp>,
        }
    }

    #[test]
    fn a_row_reads_each_field_from_its_column() {
        let row =
            json!({"id": "d_1", "type": "x", "attempts": 3, "at": 1_700_000_000_000_i64, "done": 1, "until": null});
        let sample = Sample::from_row(&row).unwrap();
        assert_eq!(
            sample,
            Sample {
                id: "d_1".into(),
                kind: "x".into(),
                attempts: 3,
                at: Timestamp::from_unix_millis(1_700_000_000_000),
                done: true,
                note: None,
                until: None,
            }
        );
    }

    /// A value the field's type does not take is an error naming the column, never a default.
    #[test]
    fn a_wrong_value_is_an_error_naming_its_column() {
        let good = json!({"id": "d_1", "type": "x", "attempts": 3, "at": 5, "done": 0});
        for (column, bad) in [
            ("id", json!(7)),
            ("id", json!(null)),
            ("attempts", json!(-1)),
            ("attempts", json!(1.5)),
            ("attempts", json!("3")),
            ("at", json!(null)),
            ("done", json!(2)),
            ("note", json!(4)),
        ] {
            let mut row = good.clone();
            row[column] = bad.clone();
            let error = Sample::from_row(&row).expect_err(&format!("{column} = {bad}"));
            assert!(error.starts_with(&format!("column {column}:")), "{error}");
        }
        assert!(Sample::from_row(&good).is_ok());
    }

    #[test]
    fn integers_are_exact_or_refused() {
        assert_eq!(i64::read(Cell::Number(9_007_199_254_740_992.0)), Ok(9_007_199_254_740_992));
        assert!(i64::read(Cell::Number(1e300)).is_err());
        assert!(u8::read(Cell::Number(256.0)).is_err());
        assert_eq!(column::<Option<u8>>(&json!({}), "missing"), Ok(None));
    }
}
