//! The engine's clock types on every target: `std::time`'s, except in the browser
//! (`wasm32-unknown-unknown`), where std has no clock (`Instant::now()` panics there) and
//! [`web_time`]'s (over `performance.now()` and `Date.now()`, same API) stand in.

#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
pub use std::time::{Instant, SystemTime, UNIX_EPOCH};
#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
pub use web_time::{Instant, SystemTime, UNIX_EPOCH};
