//! Ctrl-C while a chat reply is generated cancels that reply instead of ending the process.
//!
//! [`catch`] routes SIGINT to a flag that the generation callback polls ([`take`]). At the
//! prompt the line editor reads Ctrl-C as a key itself (the terminal is in raw mode then), so
//! the flag matters only while a reply streams. Elsewhere than on Unix, Ctrl-C keeps its
//! default meaning.

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

#[cfg(unix)]
extern "C" fn on_sigint(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    REQUESTED.store(true, Ordering::SeqCst);
}

/// From now on, SIGINT sets the flag instead of ending the process.
pub fn catch() {
    #[cfg(unix)]
    // SAFETY: installs a handler that only stores to an atomic, which is async-signal-safe;
    // `signal` is called with a valid signal number and a function of the required ABI.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
}

/// Whether Ctrl-C was pressed since the last call (and clears it).
pub fn take() -> bool {
    REQUESTED.swap(false, Ordering::SeqCst)
}

/// Whether Ctrl-C was pressed since the last [`take`], without clearing it.
pub fn pending() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}
