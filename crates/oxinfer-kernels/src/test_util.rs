//! Helpers shared by the unit tests.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The message of a panic payload (`panic!` with a literal or a format string), else empty.
pub(crate) fn payload_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// The panic message of `f`, which must panic.
pub(crate) fn panic_message(f: impl FnOnce()) -> String {
    let payload = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
    payload_message(payload.as_ref())
}
