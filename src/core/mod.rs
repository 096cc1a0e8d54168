//! Pure core (stub; replaced by the real modules).
pub mod classify;
pub mod jobname;
pub mod kind;
pub mod lockinfo;
pub mod suffix;
pub mod timeouts;
