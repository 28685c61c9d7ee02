//! Catalog entries, kept as the server's JSON text until they are read, and
//! the parsing of list pages into them, charged to the session's memory
//! account (see [`MemoryBudget`](crate::MemoryBudget)).

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::mem::size_of;
use std::ops::{Deref, Range};
use std::sync::{Arc, OnceLock};

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::budget::{Account, Charge, MemoryBudget, Spent, value_cost};

/// One entry of a list (a tool, prompt, resource or resource template):
/// the server's JSON text, verbatim, with its name (or URI) read at
/// discovery.
///
/// Discovery keeps entries as text: most of a catalog (input and output
/// schemas above all) is never looked into by the client, and building a
/// tree of values for all of it was most of a connect's CPU. An entry reads
/// as a [`Value`] (through `Deref`, so `tool["description"]` works), parsed
/// the first time it is looked into and kept, charged to the session's
/// memory budget (see [`MemoryBudget`](crate::MemoryBudget)) as long as it
/// is kept; [`parse`](Self::parse) reads it straight into a type of your
/// own instead.
///
/// The entries of one page share its text: an entry is a span of it. A
/// clone shares the text too, but not the parsed value.
pub struct Entry {
    /// The text of the page the entry came in (valid JSON), charged.
    page: Arc<PageText>,
    /// The entry's span of the page's text.
    span: Range<usize>,
    key: Key,
    /// Boxed: most entries are never parsed, and an entry stays small.
    value: OnceLock<Box<Kept>>,
}

/// A page's text, charged (with its entries) to the session's account for
/// as long as an entry of it lives.
struct PageText {
    text: Box<str>,
    charge: Charge,
}

/// An entry's parsed value, and its charge (none for `null`, kept when
/// the entry could not be read or the budget was spent).
struct Kept {
    value: Value,
    _charge: Option<Charge>,
}

/// What one entry costs beyond its text: itself (64 bytes), and twice as
/// much again for the lists it passes through (a page's, then the
/// catalog's, each grown by doubling) and the table that spots duplicates.
pub(crate) const ENTRY_COST: usize = 3 * size_of::<Entry>();

/// Where an entry's name (or URI) is.
#[derive(Clone, Debug)]
enum Key {
    /// No such field, or not a string.
    Absent,
    /// A string without escapes: a span of the page's text.
    Span(Range<usize>),
    /// A string with escapes, unescaped.
    Unescaped(Box<str>),
}

/// A clone shares the page's text and leaves the value to be parsed again
/// (and charged again) when looked into.
impl Clone for Entry {
    fn clone(&self) -> Self {
        Entry {
            page: self.page.clone(),
            span: self.span.clone(),
            key: self.key.clone(),
            value: OnceLock::new(),
        }
    }
}

impl Entry {
    /// The entry at `span` of `page`, named by its field `key_field`
    /// (`name`, `uri` or `uriTemplate`) when that is a string, charged to
    /// the page: [`ENTRY_COST`] and an unescaped key's length.
    fn new(
        page: &Arc<PageText>,
        span: Range<usize>,
        key_field: &'static str,
    ) -> Result<Entry, Spent> {
        page.charge.grow(ENTRY_COST, 1)?;
        let base = page.text.as_ptr() as usize;
        let text = &page.text[span.clone()];
        let key = match (KeyOf { field: key_field })
            .deserialize(&mut serde_json::Deserializer::from_str(text))
        {
            Ok(Some(Cow::Borrowed(key))) => {
                // Borrowed from the page: its offset there.
                let start = key.as_ptr() as usize - base;
                Key::Span(start..start + key.len())
            }
            Ok(Some(Cow::Owned(key))) => {
                page.charge.grow(key.len(), 0)?;
                Key::Unescaped(key.into())
            }
            // Not an object: no key, like an object without one.
            Ok(None) | Err(_) => Key::Absent,
        };
        Ok(Entry {
            page: page.clone(),
            span,
            key,
            value: OnceLock::new(),
        })
    }

    /// Its name (`name` of a tool or prompt, `uri` of a resource,
    /// `uriTemplate` of a template), if that is a string.
    pub fn key(&self) -> Option<&str> {
        match &self.key {
            Key::Absent => None,
            Key::Span(span) => Some(&self.page.text[span.clone()]),
            Key::Unescaped(key) => Some(key),
        }
    }

    /// The server's JSON text of the entry, verbatim.
    pub fn json(&self) -> &str {
        &self.page.text[self.span.clone()]
    }

    /// Reads the entry into `T` (for example an SDK's own tool type),
    /// without building a [`Value`] first.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_str(self.json())
    }

    /// The entry as a [`Value`], parsed on the first call and kept,
    /// charged to the session's memory budget while it is kept. An entry
    /// serde_json cannot hold as a `Value` (a number beyond `f64`) reads as
    /// `null` here, and so does one whose value would take the session
    /// over its budget (with a warning); [`parse`](Self::parse) reads
    /// either way, uncharged, into a value of the caller's.
    pub fn value(&self) -> &Value {
        let kept = self.value.get_or_init(|| {
            let (value, charge) = match self.value_charged() {
                Ok(Some((value, charge))) => (value, Some(charge)),
                Ok(None) => (Value::Null, None),
                Err(spent) => {
                    let name: String = self.key().unwrap_or("").chars().take(64).collect();
                    tracing::warn!(entry = %name, %spent, "an entry reads as null: the memory budget is spent");
                    (Value::Null, None)
                }
            };
            Box::new(Kept {
                value,
                _charge: charge,
            })
        });
        &kept.value
    }

    /// The entry as a [`Value`], owned (the caller's, so not charged to
    /// the session).
    pub fn into_value(mut self) -> Value {
        match self.value.take() {
            Some(kept) => kept.value,
            None => serde_json::from_str(self.json()).unwrap_or_default(),
        }
    }

    /// The entry parsed into a [`Value`] that is charged to the session's
    /// account until the charge is dropped: its cost is estimated from the
    /// text before anything is built, so a value over the budget is never
    /// built. `None` when serde_json cannot hold the entry as a `Value`.
    pub(crate) fn value_charged(&self) -> Result<Option<(Value, Charge)>, Spent> {
        let Ok(cost) = value_cost(self.json()) else {
            return Ok(None);
        };
        let charge = self.page.charge.account().charge(cost, 0)?;
        Ok(serde_json::from_str(self.json())
            .ok()
            .map(|value| (value, charge)))
    }
}

impl Deref for Entry {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.value()
    }
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.json())
    }
}

/// Equal when their JSON texts are (whitespace and key order count).
impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.json() == other.json()
    }
}

/// Equal when the entry reads as `other`.
impl PartialEq<Value> for Entry {
    fn eq(&self, other: &Value) -> bool {
        self.value() == other
    }
}

/// Writes the server's text verbatim, through serde_json's [`RawValue`]:
/// only serde_json (its writers and `to_value`) understands that. For
/// another format (YAML, CBOR, ...), serialize the entry's [`Value`]
/// (`&*entry`) instead.
impl Serialize for Entry {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Valid JSON (it came out of a parsed page), borrowed as such.
        match serde_json::from_str::<&RawValue>(self.json()) {
            Ok(raw) => raw.serialize(serializer),
            Err(e) => Err(serde::ser::Error::custom(e)),
        }
    }
}

/// Reads a page of a list result: its `field` array (each element kept
/// as text, named by its `key_field`) and its `nextCursor`. Like a
/// [`Value`] would, a repeated field counts as its last occurrence. The
/// page is charged to an account of its own with
/// [`MemoryBudget::default`](crate::MemoryBudget) (a session charges
/// every page to its one account).
///
/// # Errors
///
/// When `result` is not an object, or a part of it that is read (a key,
/// `nextCursor`, a `field` that is not an array) is JSON that no [`Value`]
/// holds (a number beyond `f64`, a lone surrogate), or when the page goes
/// over a bound of the default budget (the error names it).
// The session reads pages through `read_page` with its own account; this
// is the `wire` entry point (and the fuzz target's).
#[cfg_attr(not(feature = "wire"), allow(dead_code))]
pub fn parse_page(
    result: &RawValue,
    field: &'static str,
    key_field: &'static str,
) -> Result<ListResult, serde_json::Error> {
    let account = Account::new(MemoryBudget::default());
    read_page(result.get().into(), field, key_field, &account).map_err(|e| match e {
        PageError::Json(e) => e,
        PageError::Spent(spent) => de::Error::custom(spent),
    })
}

/// Why a page could not be read.
#[derive(Debug)]
pub(crate) enum PageError {
    /// It is not a list result (see [`parse_page`]).
    Json(serde_json::Error),
    /// It goes over a bound of the session's memory budget.
    Spent(Spent),
}

/// [`parse_page`], charged to `account`: the page's text as it is read,
/// each entry as it is made, and `nextCursor` checked against its cap
/// before it is read.
pub(crate) fn read_page(
    text: Box<str>,
    field: &'static str,
    key_field: &'static str,
    account: &Account,
) -> Result<ListResult, PageError> {
    let charge = account.charge(text.len(), 0).map_err(PageError::Spent)?;
    let page = Arc::new(PageText { text, charge });
    let spent = Cell::new(None);
    let seed = PageOf {
        page: &page,
        field,
        key_field,
        spent: &spent,
    };
    seed.deserialize(&mut serde_json::Deserializer::from_str(&page.text))
        .map_err(|e| spent.take().map_or(PageError::Json(e), PageError::Spent))
}

/// A string, borrowed from the input when it has no escapes.
struct CowStr<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for CowStr<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CowVisitor;
        impl<'de> Visitor<'de> for CowVisitor {
            type Value = CowStr<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Borrowed(v)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v.to_owned())))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(CowVisitor)
    }
}

/// The string value of one field of an object (its last occurrence);
/// `None` when absent or not a string.
struct KeyOf {
    field: &'static str,
}

impl<'de> DeserializeSeed<'de> for KeyOf {
    type Value = Option<Cow<'de, str>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for KeyOf {
    type Value = Option<Cow<'de, str>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut key = None;
        while let Some(name) = map.next_key::<CowStr<'de>>()? {
            if name.0 == self.field {
                let value: &'de RawValue = map.next_value()?;
                key = serde_json::from_str::<CowStr<'de>>(value.get())
                    .ok()
                    .map(|s| s.0);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(key)
    }
}

/// One page of a list result, as [`parse_page`] reads it.
#[derive(Debug)]
#[non_exhaustive]
pub struct ListResult {
    /// The entries; `None` when the field is absent or not an array.
    pub entries: Option<Vec<Entry>>,
    /// `nextCursor`: absent or `null` is `None`.
    pub next_cursor: Option<Value>,
}

/// A list result's array `field` and its `nextCursor`.
struct PageOf<'p> {
    /// The text being read: entries are spans of it.
    page: &'p Arc<PageText>,
    field: &'static str,
    key_field: &'static str,
    /// Where a bound of the budget that stopped the read is told.
    spent: &'p Cell<Option<Spent>>,
}

impl<'de> DeserializeSeed<'de> for PageOf<'_> {
    type Value = ListResult;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for PageOf<'_> {
    type Value = ListResult;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list result object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut page = ListResult {
            entries: None,
            next_cursor: None,
        };
        while let Some(name) = map.next_key::<CowStr<'de>>()? {
            if name.0 == self.field {
                page.entries = map.next_value_seed(EntriesOf {
                    page: self.page,
                    key_field: self.key_field,
                    spent: self.spent,
                })?;
            } else if name.0 == "nextCursor" {
                // Its length checked before it is read into a value.
                let cursor: &'de RawValue = map.next_value()?;
                let len = cursor.get().len();
                if let Err(spent) = self.page.charge.account().check_cursor(len) {
                    self.spent.set(Some(spent));
                    return Err(de::Error::custom("nextCursor is over its cap"));
                }
                page.next_cursor = Some(serde_json::from_str::<Value>(cursor.get()))
                    .transpose()
                    .map_err(de::Error::custom)?
                    .filter(|c| !c.is_null());
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(page)
    }
}

/// An array of entries, each a span of the page: one pass, no copy.
/// Anything else is `None` (skipped, not an error: a later occurrence of
/// the field may still be the array).
struct EntriesOf<'p> {
    page: &'p Arc<PageText>,
    key_field: &'static str,
    spent: &'p Cell<Option<Spent>>,
}

impl<'de> DeserializeSeed<'de> for EntriesOf<'_> {
    type Value = Option<Vec<Entry>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EntriesOf<'_> {
    type Value = Option<Vec<Entry>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let base = self.page.text.as_ptr() as usize;
        // serde_json gives no size hint; most pages are short.
        let mut entries = Vec::with_capacity(16);
        while let Some(entry) = seq.next_element::<&'de RawValue>()? {
            // Borrowed from the page: its offset there.
            let start = entry.get().as_ptr() as usize - base;
            let span = start..start + entry.get().len();
            // Each entry charged before it is kept, so that tiny ones (a
            // bare `0`) cannot cost many times their text unbounded.
            match Entry::new(self.page, span, self.key_field) {
                Ok(entry) => entries.push(entry),
                Err(spent) => {
                    self.spent.set(Some(spent));
                    return Err(de::Error::custom("the memory budget is spent"));
                }
            }
        }
        Ok(Some(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(text: &str, key: &'static str) -> Entry {
        let text: Box<str> = format!("[{text}]").into();
        let charge = Account::new(MemoryBudget::default()).charge(0, 0).unwrap();
        let page = Arc::new(PageText { text, charge });
        Entry::new(&page, 1..page.text.len() - 1, key).unwrap()
    }

    #[test]
    fn keys_are_read_with_and_without_escapes() {
        let plain = entry(
            r#"{"description":"d","name":"echo","inputSchema":{"name":"x"}}"#,
            "name",
        );
        assert_eq!(plain.key(), Some("echo"));
        assert!(matches!(plain.key, Key::Span(..)));
        let escaped = entry(r#"{"name":"e\u0063ho\n"}"#, "name");
        assert_eq!(escaped.key(), Some("echo\n"));
        // The last occurrence counts, as in a Value.
        assert_eq!(entry(r#"{"uri":"a","uri":"b"}"#, "uri").key(), Some("b"));
        for none in [
            r#"{"name":1}"#,
            r#"{"title":"t"}"#,
            r#"["name"]"#,
            "7",
            r#""name""#,
        ] {
            assert_eq!(entry(none, "name").key(), None, "{none}");
        }
    }

    #[test]
    fn an_entry_reads_as_its_value_and_writes_its_text() {
        let text = r#"{ "name" : "t", "inputSchema": {"type":"object","n":1.5e3} }"#;
        let e = entry(text, "name");
        assert_eq!(e["inputSchema"]["type"], "object");
        assert_eq!(
            e,
            json!({"name":"t","inputSchema":{"type":"object","n":1500.0}})
        );
        assert_eq!(serde_json::to_string(&e).unwrap(), text);
        assert_eq!(serde_json::to_value(&e).unwrap()["name"], "t");
        assert_eq!(format!("{e:?}"), text);
        #[derive(Deserialize)]
        struct Named {
            name: String,
        }
        assert_eq!(e.parse::<Named>().unwrap().name, "t");
        assert_eq!(e.clone().into_value()["name"], "t");
    }

    #[test]
    fn pages_read_their_array_and_cursor() {
        let result = RawValue::from_string(
            r#"{"tools":[{"name":"a"},{"name":"b"}],"nextCursor":"c2","_meta":{"x":[1]}}"#.into(),
        )
        .unwrap();
        let page = parse_page(&result, "tools", "name").unwrap();
        let (entries, cursor) = (page.entries.unwrap(), page.next_cursor);
        assert_eq!(
            entries.iter().map(|e| e.key().unwrap()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(cursor, Some(json!("c2")));
        for (text, has_entries, cursor) in [
            (r#"{"tools":[],"nextCursor":null}"#, true, None),
            (r#"{"prompts":[]}"#, false, None),
            (r#"{"tools":[1],"nextCursor":7}"#, true, Some(json!(7))),
            (r#"{"tools":[],"tools":[{"name":"a"}]}"#, true, None),
            // Not an array: no entries, as a Value would read it.
            (r#"{"tools":{"name":"a"}}"#, false, None),
            (r#"{"tools":"x"}"#, false, None),
            (r#"{"tools":[],"tools":null}"#, false, None),
            // The last occurrence counts, whatever the earlier ones were.
            (r#"{"tools":"x","tools":[]}"#, true, None),
            (r#"{"tools":{"a":[1]},"tools":[{"name":"b"}]}"#, true, None),
            (
                r#"{"tools":1.5,"nextCursor":"a","nextCursor":null}"#,
                false,
                None,
            ),
        ] {
            let result = RawValue::from_string(text.into()).unwrap();
            let page = parse_page(&result, "tools", "name").unwrap();
            assert_eq!(page.entries.is_some(), has_entries, "{text}");
            assert_eq!(page.next_cursor, cursor, "{text}");
        }
        for bad in ["[1]", "null", r#""tools""#] {
            let result = RawValue::from_string(bad.into()).unwrap();
            assert!(parse_page(&result, "tools", "name").is_err(), "{bad}");
        }
    }

    fn page_of(text: &str, account: &Account) -> Result<ListResult, PageError> {
        read_page(text.into(), "tools", "name", account)
    }

    /// Issue 20 (1): each entry is charged, however small its text, so a
    /// page of bare `0`s stops at the entry cap; and everything is released
    /// with the last entry of the page.
    #[test]
    fn every_entry_is_charged_and_released_with_its_page() {
        // What an entry costs stays small: a page of tiny entries is
        // bounded by the entry cap long before the bytes.
        assert!(size_of::<Entry>() <= 64, "{}", size_of::<Entry>());
        let account = Account::new(MemoryBudget::default().max_entries(1000));
        let zeros = format!("{{\"tools\":[0{}]}}", ",0".repeat(999));
        let page = page_of(&zeros, &account).unwrap();
        assert_eq!(account.entries(), 1000);
        assert_eq!(account.bytes(), zeros.len() + 1000 * ENTRY_COST);
        let over = page_of(r#"{"tools":[{"name":"a"}]}"#, &account).unwrap_err();
        assert!(matches!(
            over,
            PageError::Spent(Spent::Entries { limit: 1000 })
        ));
        // A failed read leaves nothing charged behind.
        assert_eq!(account.entries(), 1000);
        let mut entries = page.entries.unwrap();
        entries.truncate(1);
        assert_eq!(
            account.entries(),
            1000,
            "held while an entry of the page is"
        );
        drop(entries);
        assert_eq!((account.bytes(), account.entries()), (0, 0));
        // Bytes: the page's text counts before any entry.
        let account = Account::new(MemoryBudget::default().max_bytes(100));
        let long = format!(r#"{{"tools":[],"x":"{}"}}"#, "y".repeat(100));
        assert!(matches!(
            page_of(&long, &account),
            Err(PageError::Spent(Spent::Bytes { limit: 100, .. }))
        ));
        assert_eq!(account.bytes(), 0);
    }

    /// A cursor longer than the cap is refused before it is read; one at
    /// the cap is read.
    #[test]
    fn a_cursor_over_its_cap_is_refused() {
        let account = Account::new(MemoryBudget::default().max_cursor_len(10));
        let at_cap = page_of(r#"{"tools":[],"nextCursor":"12345678"}"#, &account).unwrap();
        assert_eq!(at_cap.next_cursor, Some(Value::from("12345678")));
        let over = page_of(r#"{"tools":[],"nextCursor":"123456789"}"#, &account).unwrap_err();
        assert!(matches!(
            over,
            PageError::Spent(Spent::Cursor { limit: 10, len: 11 })
        ));
    }

    /// Issue 20 (2): a value read from an entry is charged while it is
    /// kept (by the entry, or by whoever holds the charged read) and
    /// released with it; one the budget cannot hold is never built and
    /// reads as `null`.
    #[test]
    fn parsed_values_are_charged_while_kept() {
        let account = Account::new(MemoryBudget::default());
        let text = r#"{"tools":[{"name":"t","a":[0,0,0,0],"b":{"c":"\u00e9"}}]}"#;
        let page = page_of(text, &account).unwrap();
        let entry = page.entries.unwrap().remove(0);
        let held = account.bytes();
        let (value, charge) = entry.value_charged().unwrap().unwrap();
        let cost = value_cost(entry.json()).unwrap();
        assert_eq!(account.bytes(), held + cost);
        assert_eq!(value["b"]["c"], "é");
        drop((value, charge));
        assert_eq!(account.bytes(), held);
        // Through Deref: kept, and charged as long as it is.
        assert_eq!(entry["a"][3], 0);
        assert_eq!(account.bytes(), held + cost);
        let clone = entry.clone();
        assert_eq!(
            account.bytes(),
            held + cost,
            "a clone does not copy the value"
        );
        assert_eq!(entry.into_value()["name"], "t");
        assert_eq!(account.bytes(), held);
        drop(clone);
        assert_eq!(account.bytes(), 0);

        // A budget with room for the page but not for its value.
        let budget = MemoryBudget::default().max_bytes(text.len() + ENTRY_COST + 8);
        let account = Account::new(budget);
        let entry = page_of(text, &account).unwrap().entries.unwrap().remove(0);
        assert!(entry.value_charged().is_err());
        assert!(entry.is_null());
        assert_eq!(entry.parse::<Value>().unwrap()["name"], "t");
        // The cost bounds what a Value takes, arrays of tiny values included.
        assert!(value_cost("[0,0,0]").unwrap() >= 4 * size_of::<Value>());
        assert!(value_cost("1e400").is_err());
    }
}
