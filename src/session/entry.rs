//! Catalog entries, kept as the server's JSON text until they are read, and
//! the parsing of list pages into them.

use std::borrow::Cow;
use std::fmt;
use std::ops::{Deref, Range};
use std::sync::{Arc, OnceLock};

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// One entry of a list (a tool, prompt, resource or resource template):
/// the server's JSON text, verbatim, with its name (or URI) read at
/// discovery.
///
/// Discovery keeps entries as text: most of a catalog (input and output
/// schemas above all) is never looked into by the client, and building a
/// tree of values for all of it was most of a connect's CPU. An entry reads
/// as a [`Value`] (through `Deref`, so `tool["description"]` works), parsed
/// the first time it is looked into and kept; [`parse`](Self::parse) reads
/// it straight into a type of your own instead.
///
/// The entries of one page share its text: an entry is a span of it.
#[derive(Clone)]
pub struct Entry {
    /// The text of the page the entry came in (valid JSON).
    page: Arc<str>,
    /// The entry's span of `page`.
    span: Range<usize>,
    key: Key,
    value: OnceLock<Value>,
}

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

impl Entry {
    /// The entry at `span` of `page`, named by its field `key_field`
    /// (`name`, `uri` or `uriTemplate`) when that is a string.
    fn new(page: &Arc<str>, span: Range<usize>, key_field: &'static str) -> Entry {
        let text = &page[span.clone()];
        let key = match (KeyOf { field: key_field })
            .deserialize(&mut serde_json::Deserializer::from_str(text))
        {
            Ok(Some(Cow::Borrowed(key))) => {
                // Borrowed from the page: its offset there.
                let start = key.as_ptr() as usize - page.as_ptr() as usize;
                Key::Span(start..start + key.len())
            }
            Ok(Some(Cow::Owned(key))) => Key::Unescaped(key.into()),
            // Not an object: no key, like an object without one.
            Ok(None) | Err(_) => Key::Absent,
        };
        Entry {
            page: page.clone(),
            span,
            key,
            value: OnceLock::new(),
        }
    }

    /// Its name (`name` of a tool or prompt, `uri` of a resource,
    /// `uriTemplate` of a template), if that is a string.
    pub fn key(&self) -> Option<&str> {
        match &self.key {
            Key::Absent => None,
            Key::Span(span) => Some(&self.page[span.clone()]),
            Key::Unescaped(key) => Some(key),
        }
    }

    /// The server's JSON text of the entry, verbatim.
    pub fn json(&self) -> &str {
        &self.page[self.span.clone()]
    }

    /// Reads the entry into `T` (for example an SDK's own tool type),
    /// without building a [`Value`] first.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_str(self.json())
    }

    /// The entry as a [`Value`], parsed on the first call and kept. An
    /// entry serde_json cannot hold as a `Value` (a number beyond `f64`)
    /// reads as `null` here; [`parse`](Self::parse) reports why.
    pub fn value(&self) -> &Value {
        self.value
            .get_or_init(|| serde_json::from_str(self.json()).unwrap_or(Value::Null))
    }

    /// The entry as a [`Value`], owned.
    pub fn into_value(mut self) -> Value {
        self.value();
        self.value.take().unwrap_or_default()
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
/// [`Value`] would, a repeated field counts as its last occurrence.
///
/// # Errors
///
/// When `result` is not an object, or a part of it that is read (a key,
/// `nextCursor`, a `field` that is not an array) is JSON that no [`Value`]
/// holds (a number beyond `f64`, a lone surrogate).
pub fn parse_page(
    result: &RawValue,
    field: &'static str,
    key_field: &'static str,
) -> Result<ListResult, serde_json::Error> {
    let page: Arc<str> = Arc::from(result.get());
    let seed = PageOf {
        page: &page,
        field,
        key_field,
    };
    seed.deserialize(&mut serde_json::Deserializer::from_str(&page))
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
    page: &'p Arc<str>,
    field: &'static str,
    key_field: &'static str,
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
                })?;
            } else if name.0 == "nextCursor" {
                page.next_cursor = Some(map.next_value::<Value>()?).filter(|c| !c.is_null());
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
    page: &'p Arc<str>,
    key_field: &'static str,
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
        let base = self.page.as_ptr() as usize;
        // serde_json gives no size hint; most pages are short.
        let mut entries = Vec::with_capacity(16);
        while let Some(entry) = seq.next_element::<&'de RawValue>()? {
            // Borrowed from the page: its offset there.
            let start = entry.get().as_ptr() as usize - base;
            let span = start..start + entry.get().len();
            entries.push(Entry::new(self.page, span, self.key_field));
        }
        Ok(Some(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(text: &str, key: &'static str) -> Entry {
        let page: Arc<str> = Arc::from(format!("[{text}]"));
        Entry::new(&page, 1..page.len() - 1, key)
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
}
