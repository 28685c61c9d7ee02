//! Shared pieces of the fuzz targets: how an input is cut into chunks, and
//! an independent reference decoder for `text/event-stream` that the
//! targets compare the crate's decoder against.

pub mod chunks;
pub mod sse_model;
