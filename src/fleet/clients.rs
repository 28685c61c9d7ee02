//! The fleet's owned HTTP client, shared by every slot that lends none.

use std::sync::{Arc, Mutex, Weak};

use crate::HttpClient;
use crate::error::Result;
use crate::sync::lock;

/// One owned client for the slots that need one, made once (under a lock:
/// two slots starting together get the same one) and dropped when the last
/// slot holding it goes; the next slot then makes a new one. A client the
/// caller lent is never here: it is only ever used.
#[derive(Default)]
pub(crate) struct ClientCache {
    shared: Mutex<Weak<SharedClient>>,
}

/// A slot's hold on the shared owned client.
pub(crate) struct SharedClient {
    pub(crate) client: HttpClient,
}

impl ClientCache {
    /// The shared client, made if no slot holds it.
    pub(crate) fn get(&self) -> Result<Arc<SharedClient>> {
        let mut shared = lock(&self.shared);
        if let Some(client) = shared.upgrade() {
            return Ok(client);
        }
        let client = Arc::new(SharedClient {
            client: HttpClient::owned()?,
        });
        *shared = Arc::downgrade(&client);
        Ok(client)
    }
}
