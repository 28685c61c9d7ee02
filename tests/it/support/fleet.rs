//! What the fleet's test files share: a quick fleet, a spec with short
//! bounds, and the ending every fleet test has (shutdown, the reaper,
//! every session DELETEd once, the baseline check).

use std::time::Duration;

use mcp_scoped_http::Backoff;

use mcp_scoped_http::fleet::{Fleet, FleetBuilder, ServerSpec};
use mcp_scoped_http_testkit::TestServer;

use super::baseline::World;
use super::{assert_each_session_deleted_once, deletes_owed};

pub const MS: Duration = Duration::from_millis(1);
pub const SETTLE: Duration = Duration::from_secs(5);

/// Short backoff (5 ms doubling to 50 ms), no health pings unless a test
/// asks for them.
pub fn fleet() -> Fleet {
    builder().build()
}

/// The settings of [`fleet`], for a test to add to.
pub fn builder() -> FleetBuilder {
    Fleet::builder()
        .backoff(Backoff::new(5 * MS, 50 * MS))
        .health_interval(None)
        .shutdown_timeout(SETTLE)
}

pub fn spec(server: &TestServer) -> ServerSpec {
    ServerSpec::new(server.url())
        .bearer("fleet-token")
        .connect_timeout(SETTLE)
        .request_timeout(SETTLE)
        .delete_timeout(500 * MS)
}

/// Whether `server`'s slot is in the state named `name`.
pub fn is(fleet: &Fleet, server: &str, name: &str) -> bool {
    fleet
        .state(server)
        .is_some_and(|state| state.name() == name)
}

/// Shuts the fleet down, lets the reaper finish, and checks the baseline
/// against the world's server (and that every session of the `others` was
/// DELETEd once).
pub async fn finish(fleet: Fleet, world: &World, others: &[&TestServer], context: &str) {
    fleet.shutdown().await;
    drop(fleet);
    mcp_scoped_http::shutdown().await;
    for other in others {
        assert_each_session_deleted_once(other, context).await;
    }
    let log = assert_each_session_deleted_once(&world.server, context).await;
    world
        .baseline
        .check(&world.server, deletes_owed(&log))
        .await;
}
