//! Server requests the host answers over standard input (`fleet --handle`):
//! each becomes a line `{"server", "request": {"id", "method", "params"}}`
//! on stdout, and waits for `{"respond": {"server", "id", "result"}}` (or
//! `"error"`) on stdin, until its deadline.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use mcp_scoped_http::jsonrpc::{ErrorObject, codes};
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// The most server requests waiting for the host at once: one more is
/// refused at once (a server cannot make the CLI hold without bound).
const MAX_PENDING: usize = 256;

type Answer = Result<Value, ErrorObject>;

/// Each waiting request's server, and where its answer goes, by id.
type Pending = HashMap<u64, (Arc<str>, oneshot::Sender<Answer>)>;

/// The requests waiting for the host's answer, by the id the host sees.
pub(crate) struct Asks {
    pending: Mutex<Pending>,
    next: AtomicU64,
    /// How long the host has to answer.
    within: Duration,
}

fn internal(message: String) -> ErrorObject {
    ErrorObject {
        code: codes::INTERNAL_ERROR,
        message,
        data: None,
    }
}

impl Asks {
    pub(crate) fn new(within: Duration) -> Arc<Asks> {
        Arc::new(Asks {
            pending: Mutex::default(),
            next: AtomicU64::new(1),
            within,
        })
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        // Every change under the lock is one insert or remove.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks the host `method` with `params` for `server`, and waits for its
    /// answer (or the deadline: an error to the server).
    pub(crate) async fn ask(&self, server: Arc<str>, method: &str, params: Value) -> Answer {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        {
            let mut pending = self.pending();
            if pending.len() >= MAX_PENDING {
                return Err(internal(format!(
                    "{MAX_PENDING} server requests already wait for the host"
                )));
            }
            pending.insert(id, (server.clone(), answer));
        }
        // However this ends (answered, timed out, the session gone and
        // the future dropped), the id is no longer waited for.
        let _forget = scopeguard::guard((), |()| {
            self.pending().remove(&id);
        });
        crate::out_json(&json!({
            "server": &*server,
            "request": {"id": id, "method": method, "params": params},
        }));
        match tokio::time::timeout(self.within, answered).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(internal("the host is gone".to_owned())),
            Err(_) => Err(internal(format!(
                "the host did not answer within {:?}",
                self.within
            ))),
        }
    }

    /// The answer line to a `{"respond": ...}` command.
    pub(crate) fn respond(&self, respond: &Value) -> Value {
        let Some(id) = respond.get("id").and_then(Value::as_u64) else {
            return json!({"error": "\"respond\" needs the request's \"id\" (a number)"});
        };
        // The server is named: an id alone (they count from 1) cannot
        // answer another server's request.
        let Some(server) = respond.get("server").and_then(Value::as_str) else {
            return json!({"respond": id, "error": "\"respond\" needs the asking \"server\""});
        };
        let answer = match (respond.get("result"), respond.get("error")) {
            (Some(result), None) => Ok(result.clone()),
            (None, Some(error)) => match serde_json::from_value::<ErrorObject>(error.clone()) {
                Ok(error) => Err(error),
                Err(_) => {
                    return json!({"respond": id, "error": "\"error\" is not {\"code\": INTEGER, \"message\": STRING}"});
                }
            },
            _ => {
                return json!({"respond": id, "error": "\"respond\" needs one of \"result\" and \"error\""});
            }
        };
        let waiting = {
            let mut pending = self.pending();
            match pending.get(&id) {
                Some((asker, _)) if server != &**asker => {
                    return json!({"respond": id, "error": format!("request {id} is `{asker}`'s")});
                }
                Some(_) => pending.remove(&id),
                None => None,
            }
        };
        let sent = waiting.is_some_and(|(_, sender)| sender.send(answer).is_ok());
        match sent {
            true => json!({"respond": id, "ok": true}),
            false => {
                json!({"respond": id, "error": format!("no request {id} waits for an answer (answered, timed out, or its session ended)")})
            }
        }
    }
}
