//! What the daemon counts: hooks at their call sites record into the process-wide
//! [`record::Metrics`], and the service levels' window of samples outlives restarts
//! ([`window`]). Gathering them into an answer, the service levels and the endpoint
//! belong to the server (`server/metrics/`), which reads every part of the daemon.

pub mod record;
pub mod window;

pub use record::{
    agent_adopted, agent_lost, agent_running, checkpoint_saved, collected, connection_refused_tree,
    connection_silent, connection_turned_away, daemon_ready, daemon_started, left_queue, prune_due,
    prune_ran, restored, schema_refusal, tree_db_refused,
};
