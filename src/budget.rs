//! The memory account of a session: what it keeps of a server's catalog
//! (the text of its list pages, the entries read from them, and every
//! value parsed from them) and every message while it reads it is charged
//! here, against one budget, and
//! released when it is dropped. A leaf, below the session and the engine,
//! so that every path that reads a catalog takes the same account instead
//! of bounding memory its own way: a page's text can only be kept through
//! a [`Charge`], and an entry only made from a charged page.

use std::fmt;
use std::mem::size_of;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::jsonrpc::ParseError;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const MIB: usize = 1024 * 1024;

/// Bounds on what one session keeps of what its server sends: discovery at
/// connect, each re-discovery, each page of `Session::list_*`, and every
/// message read (see [`max_bytes`](Self::max_bytes)) are charged to one
/// account per session, and so is every value parsed from
/// an entry (through `Entry`'s `Deref`, or by the 2026-07-28 `x-mcp-header`
/// check), each for as long as it is held, by the session or by the caller
/// (a page's text lives as long as any entry of it). In a fleet (feature
/// `fleet`), this is each session's share: every byte is also drawn from
/// the fleet's budget (`FleetBuilder::memory`), all or nothing.
///
/// The notifications waiting in `Session::notifications` for the caller
/// have a bound of their own, [`max_queued_bytes`](Self::max_queued_bytes):
/// over it, later ones are dropped (with a warning saying how many), and
/// the stream goes on being read.
///
/// Going over any bound is an [`Error::is_limit`](crate::Error::is_limit)
/// naming it; at connect, the connect unwinds; in a re-discovery, the
/// previous list stays. The defaults are far above what real servers list
/// (a large catalog is a few MiB and a few thousand entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryBudget {
    /// The most bytes kept at once: the text of every page an entry still
    /// comes from, 192 bytes per entry (three times its size, for the
    /// lists that hold it and the spotting of duplicates), and every
    /// parsed value kept (estimated from its text before it is built);
    /// and every message the session reads (answers, notifications, server
    /// requests), from its first byte until it is handed on, by its bytes
    /// and then by what parsing it builds (estimated first), and a result
    /// read whole while its value is built. Concurrent requests share it.
    /// Default: 64 MiB.
    pub max_bytes: usize,
    /// The most entries kept at once (tools, prompts, resources and
    /// templates together, kept or not yet dropped as duplicates).
    /// Default: 100 000.
    pub max_entries: usize,
    /// The longest `nextCursor` accepted, in bytes of its JSON text; only
    /// the one to send back is kept (earlier ones as hashes, to spot a
    /// repeat). Default: 4 KiB.
    pub max_cursor_len: usize,
    /// The most bytes of server notifications waiting in
    /// `Session::notifications` for the caller to take, measured as they
    /// are held (parsed: each value's nodes, strings, arrays and maps, an
    /// array of `0`s about 16 times its wire size), released as the caller
    /// takes them. Over it (or over 256 messages), later notifications are
    /// dropped, with a warning saying how many. Default: 16 MiB.
    pub max_queued_bytes: usize,
}

impl Default for MemoryBudget {
    fn default() -> Self {
        MemoryBudget {
            max_bytes: 64 * MIB,
            max_entries: 100_000,
            max_cursor_len: 4 * 1024,
            max_queued_bytes: 16 * MIB,
        }
    }
}

impl MemoryBudget {
    /// Sets [`max_bytes`](Self::max_bytes).
    #[must_use]
    pub fn max_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// Sets [`max_entries`](Self::max_entries).
    #[must_use]
    pub fn max_entries(mut self, entries: usize) -> Self {
        self.max_entries = entries;
        self
    }

    /// Sets [`max_cursor_len`](Self::max_cursor_len).
    #[must_use]
    pub fn max_cursor_len(mut self, bytes: usize) -> Self {
        self.max_cursor_len = bytes;
        self
    }

    /// Sets [`max_queued_bytes`](Self::max_queued_bytes).
    #[must_use]
    pub fn max_queued_bytes(mut self, bytes: usize) -> Self {
        self.max_queued_bytes = bytes;
        self
    }
}

/// Whose budget an account keeps: a session's (its [`MemoryBudget`]) or
/// a [`MemoryPool`]'s (shared by the accounts under it), by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Whose {
    Session,
    Pool {
        what: &'static str,
        set_by: &'static str,
    },
}

/// A bound of [`MemoryBudget`] (or of a fleet's budget) that a charge
/// would have crossed; its `Display` names the bound and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Spent {
    /// `max_bytes` (or a pool's): `wanted` more bytes with `held`
    /// already held.
    Bytes {
        whose: Whose,
        limit: usize,
        held: usize,
        wanted: usize,
    },
    /// `max_entries`.
    Entries { limit: usize },
    /// `max_cursor_len`: a cursor of `len` bytes.
    Cursor { limit: usize, len: usize },
}

impl fmt::Display for Spent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Spent::Bytes {
                whose: Whose::Pool { what, set_by },
                limit,
                held,
                wanted,
            } => write!(
                f,
                "{what} of {} ({set_by}) is spent: \
                 {} held by its sessions, {wanted} more bytes wanted",
                show(limit),
                show(held),
            ),
            Spent::Bytes {
                whose: Whose::Session,
                limit,
                held,
                wanted,
            } => write!(
                f,
                "the session's memory budget of {} (MemoryBudget::max_bytes) is spent: \
                 {} held, {wanted} more bytes wanted",
                show(limit),
                show(held),
            ),
            Spent::Entries { limit } => write!(
                f,
                "more than {limit} catalog entries (MemoryBudget::max_entries)"
            ),
            Spent::Cursor { limit, len } => write!(
                f,
                "a nextCursor of {len} bytes, over the cap of {limit} (MemoryBudget::max_cursor_len)"
            ),
        }
    }
}

impl Spent {
    /// The limit error for a charge refused while reading `what`.
    pub(crate) fn reading(&self, what: &str) -> crate::Error {
        crate::Error::limit(format!("{self}, reading {what}"))
    }
}

/// Bytes, in MiB when that is whole.
fn show(bytes: usize) -> String {
    if bytes >= MIB && bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// One session's account: shared by everything that reads its catalog.
/// A session of a fleet has a parent, the fleet's [`MemoryPool`]: every byte
/// charged here is charged there too, all or nothing, and released from
/// both (entries, cursors and the notification queue stay the session's
/// own bounds).
#[derive(Clone, Debug)]
pub(crate) struct Account(Arc<Held>);

#[derive(Debug)]
struct Held {
    whose: Whose,
    budget: MemoryBudget,
    bytes: AtomicUsize,
    entries: AtomicUsize,
    parent: Option<Account>,
    /// Charges this account refused for its bytes, ever.
    refused: AtomicU64,
}

impl Account {
    pub(crate) fn new(budget: MemoryBudget) -> Self {
        Account::with_parent(budget, None)
    }

    /// A session's account whose bytes are also charged to `parent` (a
    /// fleet's, see [`fleet`](Self::fleet)), if any.
    pub(crate) fn with_parent(budget: MemoryBudget, parent: Option<Account>) -> Self {
        Account(Arc::new(Held {
            whose: Whose::Session,
            budget,
            bytes: AtomicUsize::new(0),
            entries: AtomicUsize::new(0),
            parent,
            refused: AtomicU64::new(0),
        }))
    }

    /// A pool's account: `max_bytes` for all the accounts under it
    /// together, and under `parent` if any. Only bytes are charged to it.
    fn pool(max_bytes: usize, whose: Whose, parent: Option<Account>) -> Self {
        Account(Arc::new(Held {
            whose,
            budget: MemoryBudget::default().max_bytes(max_bytes),
            bytes: AtomicUsize::new(0),
            entries: AtomicUsize::new(0),
            parent,
            refused: AtomicU64::new(0),
        }))
    }

    /// How many charges this account refused over its bytes so far.
    fn refusals(&self) -> u64 {
        self.0.refused.load(Ordering::Acquire)
    }

    /// Bytes held now.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.0.bytes.load(Ordering::Relaxed)
    }

    /// Entries held now.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> usize {
        self.0.entries.load(Ordering::Relaxed)
    }

    /// Charges `bytes` and `entries`, held until the charge is dropped.
    pub(crate) fn charge(&self, bytes: usize, entries: usize) -> Result<Charge, Spent> {
        let charge = self.holding();
        charge.grow(bytes, entries)?;
        Ok(charge)
    }

    /// A charge of nothing yet, to grow and shrink with what it covers.
    pub(crate) fn holding(&self) -> Charge {
        Charge {
            account: self.clone(),
            bytes: AtomicUsize::new(0),
            entries: AtomicUsize::new(0),
        }
    }

    /// Takes `bytes` here and then from each parent up, all or nothing: a
    /// parent's refusal gives this account's share back. (Between the two,
    /// this account counts bytes its parent may still refuse: another
    /// charge may then be refused a moment early, never let through.)
    fn take_bytes(&self, bytes: usize) -> Result<(), Spent> {
        let held = &self.0;
        let limit = held.budget.max_bytes;
        if let Err(now) = Account::take(&held.bytes, limit, bytes) {
            held.refused.fetch_add(1, Ordering::AcqRel);
            return Err(Spent::Bytes {
                whose: held.whose,
                limit,
                held: now,
                wanted: bytes,
            });
        }
        if let Some(parent) = &held.parent {
            if let Err(spent) = parent.take_bytes(bytes) {
                held.bytes.fetch_sub(bytes, Ordering::AcqRel);
                return Err(spent);
            }
        }
        Ok(())
    }

    /// Gives `bytes` back here and to each parent up.
    fn release_bytes(&self, bytes: usize) {
        self.0.bytes.fetch_sub(bytes, Ordering::AcqRel);
        if let Some(parent) = &self.0.parent {
            parent.release_bytes(bytes);
        }
    }

    /// Adds to `counter` unless that passes `limit`; all or nothing.
    fn take(counter: &AtomicUsize, limit: usize, more: usize) -> Result<(), usize> {
        counter
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(more).filter(|total| *total <= limit)
            })
            .map(drop)
    }

    /// Checks a cursor's length against the cap.
    pub(crate) fn check_cursor(&self, len: usize) -> Result<(), Spent> {
        let limit = self.0.budget.max_cursor_len;
        if len > limit {
            return Err(Spent::Cursor { limit, len });
        }
        Ok(())
    }
}

/// A memory budget shared by many sessions (and whatever else its owner
/// charges to it): every byte a session's [`MemoryBudget`] lets it hold is
/// also drawn from the pool, all or nothing, and given back to both.
///
/// Give it to each [`Connector`](crate::Connector) whose sessions share it
/// ([`Connector::memory_pool`](crate::Connector::memory_pool)); a host
/// that supervises many servers bounds them together so (the fleet's
/// `FleetBuilder::memory` is one). A refusal by the pool is an
/// [`Error::is_limit`](crate::Error::is_limit) naming it; its
/// [`refusals`](Self::refusals) tell it from a session's own bound.
///
/// A pool is a cheap handle: clones share one budget.
///
/// ```
/// use mcp_scoped_http::{Connector, MemoryPool};
///
/// let pool = MemoryPool::builder(256 << 20)
///     .name("the agent's memory budget", "Agent::memory")
///     .build();
/// let a = Connector::new("http://127.0.0.1:8080/mcp").memory_pool(pool.clone());
/// let b = Connector::new("http://127.0.0.1:8081/mcp").memory_pool(pool.clone());
/// # drop((a, b));
/// let held = pool.charge(1024).expect("within the pool");
/// assert_eq!(pool.held(), 1024);
/// drop(held);
/// assert_eq!(pool.held(), 0);
/// ```
#[derive(Clone, Debug)]
pub struct MemoryPool(Account);

/// Builds a [`MemoryPool`] ([`MemoryPool::builder`]).
#[derive(Clone, Debug)]
#[must_use]
pub struct MemoryPoolBuilder {
    max_bytes: usize,
    what: &'static str,
    set_by: &'static str,
    parent: Option<MemoryPool>,
}

impl MemoryPoolBuilder {
    /// How a refusal names the pool: "{what} of {max_bytes} ({set_by}) is
    /// spent". Default: "the shared memory pool", "MemoryPool::builder".
    pub fn name(mut self, what: &'static str, set_by: &'static str) -> Self {
        self.what = what;
        self.set_by = set_by;
        self
    }

    /// Draws every byte from `parent` too, all or nothing: a share of a
    /// larger pool. Default: none.
    pub fn parent(mut self, parent: &MemoryPool) -> Self {
        self.parent = Some(parent.clone());
        self
    }

    /// The pool, with nothing held.
    pub fn build(self) -> MemoryPool {
        let whose = Whose::Pool {
            what: self.what,
            set_by: self.set_by,
        };
        MemoryPool(Account::pool(
            self.max_bytes,
            whose,
            self.parent.map(|parent| parent.0),
        ))
    }
}

impl MemoryPool {
    /// A pool of `max_bytes`, with the defaults of [`builder`](Self::builder).
    pub fn new(max_bytes: usize) -> MemoryPool {
        MemoryPool::builder(max_bytes).build()
    }

    /// A pool of `max_bytes`, to name or nest first.
    pub fn builder(max_bytes: usize) -> MemoryPoolBuilder {
        MemoryPoolBuilder {
            max_bytes,
            what: "the shared memory pool",
            set_by: "MemoryPool::builder",
            parent: None,
        }
    }

    /// The most bytes held at once.
    pub fn max_bytes(&self) -> usize {
        self.0.0.budget.max_bytes
    }

    /// Bytes held now, by every session and charge under the pool.
    pub fn held(&self) -> usize {
        self.0.0.bytes.load(Ordering::Acquire)
    }

    /// How many charges the pool refused, ever: compared across a connect,
    /// it tells a refusal of the pool (which another holder may lift by
    /// letting go) from one of the session's own budget.
    pub fn refusals(&self) -> u64 {
        self.0.refusals()
    }

    /// Holds `bytes` of the pool (and of its parents) until the charge is
    /// dropped; over the pool's bound, nothing is held and the error is an
    /// [`Error::is_limit`](crate::Error::is_limit) naming the pool.
    pub fn charge(&self, bytes: usize) -> crate::Result<MemoryCharge> {
        self.0
            .charge(bytes, 0)
            .map(MemoryCharge)
            .map_err(|spent| crate::Error::limit(spent.to_string()))
    }

    /// The account each session's is a child of.
    pub(crate) fn account(&self) -> &Account {
        &self.0
    }
}

/// Bytes held from a [`MemoryPool`] ([`MemoryPool::charge`]), given back
/// when dropped.
#[derive(Debug)]
pub struct MemoryCharge(Charge);

impl MemoryCharge {
    /// The bytes held.
    pub fn bytes(&self) -> usize {
        self.0.bytes.load(Ordering::Acquire)
    }
}

/// Bytes and entries held from an [`Account`], released when dropped. It
/// can grow (a page's entries are charged as they are read, to the page).
#[derive(Debug)]
pub(crate) struct Charge {
    account: Account,
    bytes: AtomicUsize,
    entries: AtomicUsize,
}

impl Charge {
    /// Charges `bytes` and `entries` more, or nothing.
    pub(crate) fn grow(&self, bytes: usize, entries: usize) -> Result<(), Spent> {
        let held = &self.account.0;
        let budget = held.budget;
        if entries > 0 {
            Account::take(&held.entries, budget.max_entries, entries).map_err(|_| {
                Spent::Entries {
                    limit: budget.max_entries,
                }
            })?;
            self.entries.fetch_add(entries, Ordering::AcqRel);
        }
        if let Err(spent) = self.account.take_bytes(bytes) {
            // All or nothing: the entries of this step go back.
            held.entries.fetch_sub(entries, Ordering::AcqRel);
            self.entries.fetch_sub(entries, Ordering::AcqRel);
            return Err(spent);
        }
        self.bytes.fetch_add(bytes, Ordering::AcqRel);
        Ok(())
    }

    /// Holds `bytes` from now on, growing or shrinking what is held; on
    /// growth over the budget, nothing changes.
    pub(crate) fn resize(&self, bytes: usize) -> Result<(), Spent> {
        let now = self.bytes.load(Ordering::Acquire);
        if bytes > now {
            return self.grow(bytes - now, 0);
        }
        self.account.release_bytes(now - bytes);
        self.bytes.fetch_sub(now - bytes, Ordering::AcqRel);
        Ok(())
    }

    /// The account charged.
    pub(crate) fn account(&self) -> &Account {
        &self.account
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.account.release_bytes(*self.bytes.get_mut());
        self.account
            .0
            .entries
            .fetch_sub(*self.entries.get_mut(), Ordering::AcqRel);
    }
}

/// The bytes a [`Value`] read from `text` takes, about and at most: each
/// node, each string's bytes, each array element twice (a `Vec` grows by
/// doubling), each object member with room for its map. Read without
/// building anything; an error where a `Value` could not be read either.
pub(crate) fn value_cost(text: &str) -> serde_json::Result<usize> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let cost = Cost.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(cost)
}

/// Counts what [`value_cost`] counts.
struct Cost;

const NODE: usize = size_of::<Value>();
/// A member of a map: its key (a `String`) and its value, twice over for
/// the map's nodes and slack.
const MEMBER: usize = 2 * (size_of::<String>() + size_of::<Value>());

impl<'de> DeserializeSeed<'de> for Cost {
    type Value = usize;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<usize, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Cost {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<usize, E> {
        Ok(NODE)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<usize, E> {
        Ok(NODE)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<usize, E> {
        Ok(NODE)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<usize, E> {
        Ok(NODE)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<usize, E> {
        Ok(NODE + v.len())
    }

    fn visit_unit<E: de::Error>(self) -> Result<usize, E> {
        Ok(NODE)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
        let mut total = NODE;
        while let Some(element) = seq.next_element_seed(Cost)? {
            total = total.saturating_add(element + NODE);
        }
        Ok(total)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
        let mut total = NODE;
        while let Some(key) = map.next_key_seed(KeyLen)? {
            let value = map.next_value_seed(Cost)?;
            total = total.saturating_add(MEMBER + key + value);
        }
        Ok(total)
    }
}

/// What parsing JSON text into [`Message`](crate::jsonrpc::Message)s (one,
/// or a batch) builds, about and at most: a result is kept as text (its
/// bytes), `params` and an `error` are built as values ([`value_cost`]),
/// the rest is small text. Read without building anything; an error where
/// the messages could not be read either. (A field the message does not
/// keep is counted as if it did: a bound, not an exact figure.)
///
/// A batch of more than `max_batch` messages is an error here too, found
/// as soon as its message `max_batch + 1` is reached: the parse that
/// follows refuses it with the error that says so.
pub(crate) fn messages_cost(bytes: &[u8], max_batch: usize) -> Result<usize, ParseError> {
    let mut too_many = false;
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let cost = Messages {
        max_batch,
        too_many: &mut too_many,
    }
    .deserialize(&mut deserializer)
    .and_then(|cost| deserializer.end().map(|()| cost));
    match cost {
        Err(_) if too_many => Err(ParseError::TooMany { max: max_batch }),
        Err(error) => Err(ParseError::Json(error)),
        Ok(cost) => Ok(cost),
    }
}

/// What parsing `bytes` into JSON-RPC messages (one, or a batch) would
/// build, estimated without building anything, as a session charges it to
/// its memory budget before it parses; `None` where the text cannot be
/// read so (it is then never parsed). For fuzzing (feature `wire`):
/// wherever `jsonrpc::parse_messages` reads `bytes`, this reads them too,
/// so nothing is built that was not charged.
#[cfg(feature = "wire")]
pub fn estimated_messages_cost(bytes: &[u8]) -> Option<usize> {
    messages_cost(bytes, usize::MAX).ok()
}

/// The size of a message, beside what its fields hold.
const MESSAGE: usize = size_of::<crate::jsonrpc::Message>();

/// Counts what [`messages_cost`] counts: a message, or an array of them.
struct Messages<'a> {
    max_batch: usize,
    /// Set when the batch passed `max_batch`.
    too_many: &'a mut bool,
}

impl<'de> DeserializeSeed<'de> for Messages<'_> {
    type Value = usize;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<usize, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Messages<'_> {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC message or batch")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
        let mut total = 0usize;
        let mut count = 0usize;
        while let Some(message) = seq.next_element_seed(OneMessage)? {
            count += 1;
            if count > self.max_batch {
                *self.too_many = true;
                return Err(de::Error::custom("a batch over its limit"));
            }
            total = total.saturating_add(message);
        }
        Ok(total)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<usize, A::Error> {
        OneMessage.visit_map(map)
    }
}

/// One message's cost.
struct OneMessage;

impl<'de> DeserializeSeed<'de> for OneMessage {
    type Value = usize;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<usize, D::Error> {
        // Not `deserialize_map`: the parse reads a message from an array
        // too (see `visit_seq`), and what it reads must be counted here.
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for OneMessage {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC message")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
        let mut total = MESSAGE;
        while let Some(field) = map.next_key_seed(FieldKind)? {
            let cost = match field {
                // Kept as the server's text.
                Field::Result => map
                    .next_value::<&'de serde_json::value::RawValue>()?
                    .get()
                    .len(),
                Field::Built => map.next_value_seed(Cost)?,
                Field::Error => map.next_value_seed(ErrorCost)?,
                // Skipped by the parse as here: its syntax checked, nothing
                // of it decoded (a value would refuse a lone surrogate the
                // parse lets through) and nothing kept.
                Field::Ignored => {
                    map.next_value::<de::IgnoredAny>()?;
                    0
                }
            };
            total = total.saturating_add(cost);
        }
        Ok(total)
    }

    /// A message as an array, which serde reads a struct from too (`[id,
    /// method, params, result, error]`): each field read as the parse
    /// reads it (more than five are counted as values; the parse refuses
    /// them).
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
        let mut total = MESSAGE;
        for field in 0.. {
            let cost = match field {
                3 => seq
                    .next_element::<&'de serde_json::value::RawValue>()?
                    .map(|raw| raw.get().len()),
                4 => seq.next_element_seed(ErrorCost)?,
                _ => seq.next_element_seed(Cost)?,
            };
            let Some(cost) = cost else { break };
            total = total.saturating_add(cost);
        }
        Ok(total)
    }
}

/// What an `error` field builds: an
/// [`ErrorObject`](crate::jsonrpc::ErrorObject) (`code`, `message` and
/// `data`, the rest skipped as its `Deserialize` skips them), or nothing
/// for `null`.
struct ErrorCost;

impl<'de> DeserializeSeed<'de> for ErrorCost {
    type Value = usize;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<usize, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ErrorCost {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC error object")
    }

    fn visit_unit<E: de::Error>(self) -> Result<usize, E> {
        Ok(0)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
        let mut total = NODE;
        while let Some(kept) = map.next_key_seed(ErrorField)? {
            total = total.saturating_add(if kept {
                map.next_value_seed(Cost)?
            } else {
                map.next_value::<de::IgnoredAny>()?;
                0
            });
        }
        Ok(total)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
        let mut total = NODE;
        while let Some(cost) = seq.next_element_seed(Cost)? {
            total = total.saturating_add(cost);
        }
        Ok(total)
    }
}

/// What a message does with a field: keeps `result` as text, builds `id`,
/// `method` and `params`, builds `error` as an
/// [`ErrorObject`](crate::jsonrpc::ErrorObject), skips the rest (as its
/// `Deserialize` does).
enum Field {
    Result,
    Built,
    Error,
    Ignored,
}

/// Reads a key as a [`Field`].
struct FieldKind;

impl<'de> DeserializeSeed<'de> for FieldKind {
    type Value = Field;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Field, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for FieldKind {
    type Value = Field;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
        Ok(match v {
            "result" => Field::Result,
            "id" | "method" | "params" => Field::Built,
            "error" => Field::Error,
            _ => Field::Ignored,
        })
    }
}

/// Whether an error object's key is one it keeps (`code`, `message`,
/// `data`).
struct ErrorField;

impl<'de> DeserializeSeed<'de> for ErrorField {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for ErrorField {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        Ok(matches!(v, "code" | "message" | "data"))
    }
}

/// A map key's length, read without keeping it.
struct KeyLen;

impl<'de> DeserializeSeed<'de> for KeyLen {
    type Value = usize;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<usize, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for KeyLen {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<usize, E> {
        Ok(v.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// serde skips a field a message does not keep (`jsonrpc`, unknown
    /// ones) checking only its syntax, not a string's `\u` surrogates or a
    /// number's range, where a value is refused: the estimate must read
    /// such a field as the parse does, or it fails and a message whose
    /// `params` it never counted is built whole.
    #[test]
    fn a_field_the_message_ignores_is_read_as_the_parse_reads_it() {
        let data = format!("[{}0]", "0,".repeat(999));
        let built = value_cost(&data).unwrap();
        for ignored in [r#""\udc00""#, "1e400", r#"["\ud800"]"#] {
            for text in [
                format!(r#"{{"jsonrpc":{ignored},"method":"m","params":{data}}}"#),
                format!(r#"[{{"id":1,"extra":{ignored},"params":{data},"result":{{}}}}]"#),
                format!(r#"{{"id":1,"error":{{"code":1,"data":{data},"x":{ignored}}}}}"#),
                // As an array: `result` is kept as text, never decoded.
                format!(r#"[[1,null,{data},{ignored}]]"#),
            ] {
                assert!(
                    crate::jsonrpc::parse_messages(text.as_bytes(), 10).is_ok(),
                    "{text}"
                );
                let cost = messages_cost(text.as_bytes(), 10).expect("read as the parse reads it");
                assert!(cost >= built, "{cost} < {built}");
            }
        }
    }

    #[test]
    fn charges_are_bounded_all_or_nothing_and_released_on_drop() {
        let account = Account::new(MemoryBudget::default().max_bytes(100).max_entries(3));
        let page = account.charge(40, 1).unwrap();
        page.grow(10, 1).unwrap();
        assert_eq!((account.bytes(), account.entries()), (50, 2));
        // Over the entries: nothing taken.
        let spent = page.grow(1, 2).unwrap_err();
        assert_eq!(spent, Spent::Entries { limit: 3 });
        assert!(spent.to_string().contains("MemoryBudget::max_entries"));
        // Over the bytes: the entries go back too.
        let spent = account.charge(51, 1).unwrap_err();
        assert!(matches!(
            spent,
            Spent::Bytes {
                whose: Whose::Session,
                limit: 100,
                held: 50,
                wanted: 51
            }
        ));
        assert!(
            spent.to_string().contains("MemoryBudget::max_bytes"),
            "{spent}"
        );
        assert_eq!((account.bytes(), account.entries()), (50, 2));
        let other = account.charge(50, 1).unwrap();
        drop(page);
        assert_eq!((account.bytes(), account.entries()), (50, 1));
        drop(other);
        assert_eq!((account.bytes(), account.entries()), (0, 0));
        assert!(account.charge(usize::MAX, 0).is_err());
        // Resized: up within the budget, down at will, all or nothing.
        let message = account.charge(10, 0).unwrap();
        message.resize(60).unwrap();
        assert_eq!(account.bytes(), 60);
        assert!(message.resize(101).is_err());
        assert_eq!(account.bytes(), 60);
        message.resize(5).unwrap();
        assert_eq!(account.bytes(), 5);
        drop(message);
        assert_eq!(account.bytes(), 0);
        assert!(account.check_cursor(4096).is_ok() && account.check_cursor(4097).is_err());
        assert_eq!(show(64 * MIB), "64 MiB");
    }

    /// A message serde reads from a JSON array (a struct's fields in order:
    /// `id`, `method`, `params`, `result`, `error`) builds what it holds as
    /// an object would: the estimate counts it too, never less than its
    /// values, rather than failing (which charged nothing).
    #[test]
    fn a_message_written_as_an_array_costs_what_it_builds() {
        let data = format!("[{}0]", "0,".repeat(999));
        let built = value_cost(&data).unwrap();
        for text in [
            format!(r#"[[1,null,{data},{{}}]]"#),
            format!(r#"[[null,"notifications/message",{data}]]"#),
        ] {
            // What the parse accepts, the estimate reads.
            assert!(crate::jsonrpc::parse_messages(text.as_bytes(), 10).is_ok());
            let cost = messages_cost(text.as_bytes(), 10).expect("read as the parse reads it");
            assert!(cost >= built, "{cost} < {built}");
        }
    }

    #[test]
    fn a_fleet_account_bounds_its_sessions_together_all_or_nothing() {
        let fleet = Account::pool(
            100,
            Whose::Pool {
                what: "the fleet's memory budget",
                set_by: "FleetBuilder::memory",
            },
            None,
        );
        let budget = MemoryBudget::default().max_bytes(80).max_entries(2);
        let a = Account::with_parent(budget, Some(fleet.clone()));
        let b = Account::with_parent(budget, Some(fleet.clone()));
        let page = a.charge(60, 1).unwrap();
        assert_eq!((a.bytes(), fleet.bytes(), fleet.entries()), (60, 60, 0));
        // Within b's own share, over the fleet's: refused, nothing kept in
        // either account, the entries of the step included.
        let spent = b.charge(50, 1).unwrap_err();
        assert_eq!(
            spent,
            Spent::Bytes {
                whose: Whose::Pool {
                    what: "the fleet's memory budget",
                    set_by: "FleetBuilder::memory",
                },
                limit: 100,
                held: 60,
                wanted: 50
            }
        );
        assert!(
            spent.to_string().starts_with(
                "the fleet's memory budget of 100 bytes (FleetBuilder::memory) is spent"
            ),
            "{spent}"
        );
        assert_eq!((b.bytes(), b.entries(), fleet.bytes()), (0, 0, 60));
        assert_eq!(fleet.refusals(), 1);
        // Over a's own share: the session's bound says so, the fleet's
        // account is left as it was.
        let spent = page.grow(30, 0).unwrap_err();
        assert!(matches!(
            spent,
            Spent::Bytes {
                whose: Whose::Session,
                limit: 80,
                ..
            }
        ));
        assert_eq!((a.bytes(), fleet.bytes(), fleet.refusals()), (60, 60, 1));
        // Growth, resizing and release reach both, counted once.
        let held = b.holding();
        held.grow(40, 1).unwrap();
        assert_eq!((b.bytes(), fleet.bytes()), (40, 100));
        assert!(held.resize(41).is_err());
        assert_eq!((b.bytes(), fleet.bytes()), (40, 100));
        held.resize(10).unwrap();
        assert_eq!((b.bytes(), fleet.bytes()), (10, 70));
        drop(page);
        assert_eq!((a.bytes(), a.entries(), fleet.bytes()), (0, 0, 10));
        b.charge(80 - 10, 0).map(drop).unwrap();
        drop(held);
        assert_eq!((b.bytes(), b.entries(), fleet.bytes()), (0, 0, 0));
    }
}
