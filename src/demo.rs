//! Placeholder while the demo moves to an in-process API server.
