//! OAuth 2.1 with a store of your own: tokens and client registrations kept
//! in a JSON file, so the next run (or the next session) does not ask
//! again.
//!
//! ```text
//! cargo run --example oauth --features testkit,oauth              # the embedded servers
//! cargo run --example oauth --features testkit,oauth -- URL       # a real server, in a browser
//! ```
//!
//! With a URL, the loopback agent prints the authorization URL (and opens a
//! browser), and takes the redirect on 127.0.0.1. Without one, it starts the
//! test kit's MCP server behind its auto-approving authorization server and
//! uses the headless agent, which follows the redirect itself.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_scoped_http::oauth::{
    ClientCredentials, CredentialStore, HeadlessAgent, LoopbackAgent, OAuth, TokenSet,
};
use mcp_scoped_http::testkit::{AuthConfig, AuthServer, ServerConfig, TestServer};
use mcp_scoped_http::{Connector, Result};
use serde::{Deserialize, Serialize};

/// Clients per issuer and tokens per endpoint, written to a file after each
/// change. (A real application would rather use the system keychain.)
struct FileStore {
    path: PathBuf,
    contents: Mutex<Contents>,
}

#[derive(Default, Serialize, Deserialize)]
struct Contents {
    clients: HashMap<String, ClientCredentials>,
    tokens: HashMap<String, TokenSet>,
}

impl FileStore {
    fn open(path: PathBuf) -> FileStore {
        let contents = std::fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        FileStore {
            path,
            contents: Mutex::new(contents),
        }
    }

    fn save(&self, contents: &Contents) {
        // Secrets: readable by this user only (on Unix).
        let json = serde_json::to_vec_pretty(contents).expect("serializable");
        let written = std::fs::write(&self.path, json);
        #[cfg(unix)]
        let written = written.and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o600))
        });
        if let Err(error) = written {
            eprintln!("could not save {}: {error}", self.path.display());
        }
    }
}

impl CredentialStore for FileStore {
    fn client(&self, issuer: &str) -> Option<ClientCredentials> {
        self.contents.lock().unwrap().clients.get(issuer).cloned()
    }

    fn save_client(&self, issuer: &str, client: ClientCredentials) {
        let mut contents = self.contents.lock().unwrap();
        contents.clients.insert(issuer.to_owned(), client);
        self.save(&contents);
    }

    fn token(&self, endpoint: &str) -> Option<TokenSet> {
        self.contents.lock().unwrap().tokens.get(endpoint).cloned()
    }

    fn save_token(&self, endpoint: &str, token: TokenSet) {
        let mut contents = self.contents.lock().unwrap();
        contents.tokens.insert(endpoint.to_owned(), token);
        self.save(&contents);
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let url = std::env::args().nth(1);
    // The embedded servers, when no URL is given.
    let embedded = url.is_none().then(|| {
        let auth = AuthServer::start(AuthConfig::default());
        let server = TestServer::start(ServerConfig::default().with_authorization(auth.resource()));
        (auth, server)
    });
    let (url, agent_oauth) = match (&url, &embedded) {
        (Some(url), _) => (
            url.clone(),
            OAuth::new(LoopbackAgent::new().open_browser(true)),
        ),
        (None, Some((_, server))) => (
            server.url(),
            OAuth::new(HeadlessAgent::new("http://127.0.0.1:8976/callback")),
        ),
        (None, None) => unreachable!("the embedded servers start without a URL"),
    };
    let dir = std::env::temp_dir().join(format!("mcp-scoped-http-oauth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let store = Arc::new(FileStore::open(dir.join("credentials.json")));
    let oauth = agent_oauth.store(store.clone());
    // A person at a browser takes longer than the default request timeout.
    let connector = Connector::new(url.as_str())
        .oauth(oauth)
        .request_timeout(Duration::from_secs(360));

    for run in 1..=2 {
        let session = connector.connect().await?;
        let tools: Vec<_> = session.catalog().tool_names().map(str::to_owned).collect();
        println!("session {run}: {} tools: {tools:?}", tools.len());
        session.close().await;
    }
    if let Some((auth, _)) = &embedded {
        // The second session used the stored token: one authorization.
        let stats = auth.stats();
        println!(
            "authorization requests: {}, tokens issued: {}",
            stats.authorize_requests, stats.tokens_issued
        );
        assert_eq!(stats.authorize_requests, 1);
    }
    let saved = std::fs::read_to_string(dir.join("credentials.json")).unwrap_or_default();
    println!(
        "credentials kept in {} ({} bytes)",
        dir.join("credentials.json").display(),
        saved.len()
    );
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
