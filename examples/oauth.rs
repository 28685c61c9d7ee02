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
use mcp_scoped_http::{Connector, Result};
use mcp_scoped_http_testkit::{AuthConfig, AuthServer, ServerConfig, TestServer};
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
        let json = serde_json::to_vec_pretty(contents).expect("serializable");
        // Written whole to a new file, then renamed over the old one: the
        // file never holds half a write, and it is created readable by this
        // user only (on Unix) from the start, never briefly readable by
        // others, even where an older file had a wider mode.
        let temporary = self.path.with_extension("tmp");
        let written =
            write_private(&temporary, &json).and_then(|()| std::fs::rename(&temporary, &self.path));
        if let Err(error) = written {
            let _ = std::fs::remove_file(&temporary);
            eprintln!("could not save {}: {error}", self.path.display());
        }
    }
}

/// Creates `path` anew (never through a file or link already there), mode
/// 0600 on Unix, and writes `bytes` to it.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    // A leftover of an interrupted save.
    let _ = std::fs::remove_file(path);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
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
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir.join("credentials.json"))
            .map(|metadata| metadata.permissions().mode() & 0o777)
            .ok();
        assert_eq!(
            mode,
            Some(0o600),
            "the credentials file is this user's only"
        );
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
