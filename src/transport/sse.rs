//! SSE decoder (to be written).
