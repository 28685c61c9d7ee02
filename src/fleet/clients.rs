//! The fleet's owned HTTP clients: one per client settings, shared by the
//! slots that ask for those settings and lend none.
//!
//! Each owned client is held by the slots using it (an `Arc`), never by
//! the cache (a `Weak`): it goes with the last of them, and a later slot
//! builds a new one. Making one is single-flight: the slots asking while
//! it is built wait for that build and get its client, or its error (which
//! is not kept: the next slot asking builds again). A client the caller
//! lent is never here: it is only ever used.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::watch;

use super::lock;
use super::spec::ServerSpec;
use crate::{Connector, HttpClient, HttpClientBuilder};
use crate::{Error, Result};

/// How a build ended: the client (held by the slot that built it, so
/// weakly here), or the error each slot that waited for it is given.
type Outcome = std::result::Result<Weak<SharedClient>, Arc<Error>>;

enum Entry {
    /// Being built: a slot asking meanwhile waits for the outcome.
    Building(watch::Receiver<Option<Outcome>>),
    /// Built, and held by at least one slot (or about to be dropped).
    Built(Weak<SharedClient>),
}

type Entries = Mutex<HashMap<HttpClientBuilder, Entry>>;

/// The fleet's owned clients, by their settings (see the module docs).
/// Cheap to clone: clones share the cache.
#[derive(Clone, Default)]
pub(crate) struct ClientCache {
    entries: Arc<Entries>,
    /// Waits for a build begun, ever (for the tests of single flight).
    #[cfg(test)]
    waits: Arc<std::sync::atomic::AtomicUsize>,
}

/// A slot's hold on an owned client of the cache.
pub(crate) struct SharedClient {
    pub(crate) client: HttpClient,
    settings: HttpClientBuilder,
    entries: Weak<Entries>,
}

impl Drop for SharedClient {
    fn drop(&mut self) {
        // The last slot holding it went: so does its entry (the client
        // itself goes with its last handle, a closing session's included).
        let Some(entries) = self.entries.upgrade() else {
            return;
        };
        let mut entries = lock(&entries);
        // A build for a new slot may have taken the key meanwhile.
        if matches!(entries.get(&self.settings), Some(Entry::Built(weak)) if weak.strong_count() == 0)
        {
            entries.remove(&self.settings);
        }
    }
}

/// What a slot connects with: its connector, and its hold on the owned
/// client of the cache that the connector sends through, if any.
pub(crate) struct SlotClient {
    pub(crate) connector: Connector,
    _shared: Option<Arc<SharedClient>>,
}

impl ClientCache {
    /// The connector `spec`'s slot connects with: through the client it
    /// lends, else through the cache's owned client for its settings
    /// (built if no slot holds one), else (a spec made from a connector)
    /// as that connector says. Fails only when the owned client cannot be
    /// built (an invalid root certificate).
    pub(crate) async fn slot_client(&self, spec: &ServerSpec) -> Result<SlotClient> {
        let shared = match spec.owned_client_settings() {
            Some(settings) => Some(self.get(settings).await?),
            None => None,
        };
        Ok(SlotClient {
            connector: spec.connector(shared.as_ref().map(|shared| &shared.client))?,
            _shared: shared,
        })
    }

    /// The owned client for `settings`, built if no slot holds one.
    pub(crate) async fn get(&self, settings: &HttpClientBuilder) -> Result<Arc<SharedClient>> {
        self.get_with(settings, HttpClientBuilder::build).await
    }

    async fn get_with(
        &self,
        settings: &HttpClientBuilder,
        build: impl Fn(&HttpClientBuilder) -> Result<HttpClient>,
    ) -> Result<Arc<SharedClient>> {
        loop {
            let mut waiting = {
                let mut entries = lock(&self.entries);
                match entries.get(settings) {
                    Some(Entry::Built(weak)) => {
                        if let Some(shared) = weak.upgrade() {
                            return Ok(shared);
                        }
                        None
                    }
                    Some(Entry::Building(outcome)) => Some(outcome.clone()),
                    None => None,
                }
                .ok_or_else(|| {
                    let (flight, outcome) = watch::channel(None);
                    entries.insert(settings.clone(), Entry::Building(outcome));
                    flight
                })
            };
            let flight = match &mut waiting {
                Err(flight) => flight,
                Ok(outcome) => {
                    #[cfg(test)]
                    self.waits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let ended = outcome
                        .wait_for(Option::is_some)
                        .await
                        .map(|outcome| outcome.clone());
                    match ended {
                        Ok(Some(Ok(weak))) => match weak.upgrade() {
                            Some(shared) => return Ok(shared),
                            // Every slot holding it went already: anew.
                            None => continue,
                        },
                        Ok(Some(Err(error))) => return Err(error.duplicate()),
                        // The build never ended (it panicked): its entry
                        // goes, and the next try builds.
                        Ok(None) | Err(_) => {
                            let mut entries = lock(&self.entries);
                            if matches!(entries.get(settings),
                                Some(Entry::Building(other)) if other.same_channel(outcome))
                            {
                                entries.remove(settings);
                            }
                            continue;
                        }
                    }
                }
            };
            // No await from taking the key to here: a dropped future never
            // leaves a build unfinished.
            let built = build(settings);
            let mut entries = lock(&self.entries);
            return match built {
                Ok(client) => {
                    let shared = Arc::new(SharedClient {
                        client,
                        settings: settings.clone(),
                        entries: Arc::downgrade(&self.entries),
                    });
                    entries.insert(settings.clone(), Entry::Built(Arc::downgrade(&shared)));
                    drop(entries);
                    flight.send_replace(Some(Ok(Arc::downgrade(&shared))));
                    Ok(shared)
                }
                Err(error) => {
                    // Not kept: the next slot asking builds again.
                    entries.remove(settings);
                    drop(entries);
                    let error = Arc::new(error);
                    flight.send_replace(Some(Err(error.clone())));
                    Err(error.duplicate())
                }
            };
        }
    }

    /// Owned clients the cache knows of (built or being built).
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    /// Waits for a build begun, ever.
    #[cfg(test)]
    fn waits(&self) -> usize {
        self.waits.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    /// Waits (bounded) until `condition` holds.
    fn until(condition: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !condition() {
            assert!(Instant::now() < deadline, "condition not met within 5 s");
            std::thread::yield_now();
        }
    }

    /// A leader whose build waits for `release`, and `waiters` slots
    /// asking while it builds, each on its own thread; every outcome.
    fn concurrent(
        cache: &ClientCache,
        settings: &HttpClientBuilder,
        waiters: usize,
        succeed: bool,
    ) -> (Vec<Result<Arc<SharedClient>>>, usize) {
        let builds = Arc::new(AtomicUsize::new(0));
        let build = {
            let builds = builds.clone();
            move |settings: &HttpClientBuilder| {
                builds.fetch_add(1, Ordering::SeqCst);
                if succeed {
                    settings.build()
                } else {
                    Err(Error::builder("invalid root certificate"))
                }
            }
        };
        let waits = cache.waits();
        let (started, is_started) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let finished = AtomicUsize::new(0);
        let outcomes = std::thread::scope(|scope| {
            // Dropped if this panics: the leader then ends too.
            let release = release;
            let leader = {
                let build = build.clone();
                scope.spawn(move || {
                    runtime().block_on(cache.get_with(settings, move |settings| {
                        started.send(()).unwrap();
                        released.recv().unwrap();
                        build(settings)
                    }))
                })
            };
            is_started.recv().unwrap();
            let others: Vec<_> = (0..waiters)
                .map(|_| {
                    let build = build.clone();
                    let finished = &finished;
                    scope.spawn(move || {
                        let outcome = runtime().block_on(cache.get_with(settings, build));
                        finished.fetch_add(1, Ordering::SeqCst);
                        outcome
                    })
                })
                .collect();
            // Each is waiting for the build, or (were there no single
            // flight) done without it.
            until(|| cache.waits() + finished.load(Ordering::SeqCst) == waits + waiters);
            release.send(()).unwrap();
            std::iter::once(leader)
                .chain(others)
                .map(|thread| thread.join().unwrap())
                .collect()
        });
        (outcomes, builds.load(Ordering::SeqCst))
    }

    #[test]
    fn slots_asking_while_a_client_is_built_get_that_client_built_once() {
        let cache = ClientCache::default();
        let settings = HttpClientBuilder::new().pool_max_idle_per_host(3);
        let (outcomes, builds) = concurrent(&cache, &settings, 3, true);
        assert_eq!(builds, 1);
        let clients: Vec<Arc<SharedClient>> = outcomes.into_iter().map(Result::unwrap).collect();
        assert!(
            clients
                .iter()
                .all(|c| c.client.same_client(&clients[0].client))
        );
        // Equal settings, another builder value: the same client.
        let again = runtime()
            .block_on(cache.get(&HttpClientBuilder::new().pool_max_idle_per_host(3)))
            .unwrap();
        assert!(again.client.same_client(&clients[0].client));
        // Other settings: another client.
        let other = runtime()
            .block_on(cache.get(&HttpClientBuilder::new()))
            .unwrap();
        assert!(!other.client.same_client(&clients[0].client));
        assert_eq!(cache.len(), 2);
        // The last holder goes: so does the entry, and the client.
        drop(other);
        assert_eq!(cache.len(), 1);
        let held = clients[0].client.clone();
        drop((clients, again));
        assert_eq!(cache.len(), 0);
        let anew = runtime().block_on(cache.get(&settings)).unwrap();
        assert!(!anew.client.same_client(&held));
    }

    #[test]
    fn a_failed_build_is_told_to_every_slot_waiting_and_not_kept() {
        let cache = ClientCache::default();
        let settings = HttpClientBuilder::new().pool_max_idle_per_host(4);
        let (outcomes, builds) = concurrent(&cache, &settings, 3, false);
        assert_eq!(builds, 1, "one build for the four slots");
        assert_eq!(outcomes.len(), 4);
        for outcome in outcomes {
            let error = outcome.err().expect("the build's error");
            assert!(error.is_builder(), "{error}");
            assert!(error.to_string().contains("root certificate"), "{error}");
        }
        assert_eq!(cache.len(), 0, "a failure is not kept");
        // The next slot asking builds again.
        let (outcomes, builds) = concurrent(&cache, &settings, 0, true);
        assert_eq!(builds, 1);
        assert!(outcomes[0].is_ok());
    }
}
