//! Answers to the server's requests: `ping` always, `roots/list`,
//! `elicitation/create` and `sampling/createMessage` through handlers the
//! caller supplies.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::jsonrpc::{ErrorObject, codes};

type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, ErrorObject>> + Send>>;
type Handler = Arc<dyn Fn(Value) -> HandlerFuture + Send + Sync>;

fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ErrorObject>> + Send + 'static,
{
    Arc::new(move |params| Box::pin(f(params)) as HandlerFuture)
}

/// What the client answers to server requests; the capabilities sent in
/// `initialize` follow from which are set.
#[derive(Clone, Default)]
pub(crate) struct Handlers {
    roots: Option<Handler>,
    /// Whether the caller tells servers when its roots change.
    roots_change: bool,
    elicitation: Option<Handler>,
    sampling: Option<Handler>,
}

impl Handlers {
    pub(crate) fn set_roots<F, Fut>(&mut self, f: F)
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ErrorObject>> + Send + 'static,
    {
        self.roots = Some(handler(f));
        self.roots_change = false;
    }

    /// [`set_roots`](Self::set_roots), declaring `listChanged`.
    pub(crate) fn set_roots_changing<F, Fut>(&mut self, f: F)
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ErrorObject>> + Send + 'static,
    {
        self.roots = Some(handler(f));
        self.roots_change = true;
    }

    /// Whether `method` is answered (`ping` always is).
    pub(crate) fn handles(&self, method: &str) -> bool {
        match method {
            "ping" => true,
            "roots/list" => self.roots.is_some(),
            "elicitation/create" => self.elicitation.is_some(),
            "sampling/createMessage" => self.sampling.is_some(),
            _ => false,
        }
    }

    pub(crate) fn set_elicitation<F, Fut>(&mut self, f: F)
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ErrorObject>> + Send + 'static,
    {
        self.elicitation = Some(handler(f));
    }

    pub(crate) fn set_sampling<F, Fut>(&mut self, f: F)
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ErrorObject>> + Send + 'static,
    {
        self.sampling = Some(handler(f));
    }

    /// The `capabilities` of `initialize`: only what is handled.
    pub(crate) fn capabilities(&self) -> Value {
        let mut capabilities = Map::new();
        if self.roots.is_some() {
            let roots = if self.roots_change {
                json!({ "listChanged": true })
            } else {
                json!({})
            };
            capabilities.insert("roots".into(), roots);
        }
        if self.elicitation.is_some() {
            capabilities.insert("elicitation".into(), json!({}));
        }
        if self.sampling.is_some() {
            capabilities.insert("sampling".into(), json!({}));
        }
        Value::Object(capabilities)
    }

    /// The answer to one server request.
    pub(crate) async fn answer(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, ErrorObject> {
        let handler = match method {
            "ping" => return Ok(json!({})),
            "roots/list" => &self.roots,
            "elicitation/create" => &self.elicitation,
            "sampling/createMessage" => &self.sampling,
            _ => &None,
        };
        match handler {
            Some(handler) => handler(params.unwrap_or(Value::Null)).await,
            None => Err(ErrorObject {
                code: codes::METHOD_NOT_FOUND,
                message: format!("this client does not handle {method}"),
                data: None,
            }),
        }
    }
}

impl fmt::Debug for Handlers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handlers")
            .field("roots", &self.roots.is_some())
            .field("elicitation", &self.elicitation.is_some())
            .field("sampling", &self.sampling.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn capabilities_follow_the_handlers_and_unhandled_methods_are_refused() {
        let mut handlers = Handlers::default();
        assert_eq!(handlers.capabilities(), json!({}));
        assert_eq!(handlers.answer("ping", None).await.unwrap(), json!({}));
        let refused = handlers.answer("roots/list", None).await.unwrap_err();
        assert_eq!(refused.code, codes::METHOD_NOT_FOUND);
        assert!(refused.message.contains("roots/list"));

        handlers.set_roots(|_| async { Ok(json!({"roots": [{"uri": "file:///w"}]})) });
        handlers.set_elicitation(|params| async move {
            Ok(json!({"action": "accept", "content": params}))
        });
        assert_eq!(
            handlers.capabilities(),
            json!({"roots": {}, "elicitation": {}})
        );
        assert_eq!(
            handlers.answer("roots/list", None).await.unwrap()["roots"][0]["uri"],
            "file:///w"
        );
        assert_eq!(
            handlers
                .answer("elicitation/create", Some(json!({"x": 1})))
                .await
                .unwrap()["content"]["x"],
            1
        );
        assert!(
            handlers
                .answer("sampling/createMessage", None)
                .await
                .is_err()
        );
    }
}
