//! Test kit (to be written).
