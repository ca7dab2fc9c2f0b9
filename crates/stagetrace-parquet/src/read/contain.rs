//! The last line of defence around the third-party Parquet decoders: a
//! panic inside them (an assert, an index out of bounds on a damaged page)
//! becomes an error that says where it happened, not an abort of
//! `stagetrace report`, and its message does not spill to stderr.
//!
//! Everything that can be checked before decoding is checked first
//! (`super::check_metadata`); this only catches what the decoders assert
//! deep inside.

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// Inside [`contain`] on this thread: the hook stays silent.
    static CONTAINING: Cell<bool> = const { Cell::new(false) };
    /// Where the last contained panic happened (`file:line:col`).
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// Installs, once per process, a panic hook that is silent for panics
/// inside [`contain`] (it notes their location) and hands every other panic
/// to the hook that was there before. A program that sets a hook of its own
/// afterwards still has every decoder panic contained, but its hook sees
/// (and may print) them.
fn install_hook() {
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if CONTAINING.with(Cell::get) {
                let at = info.location().map(|l| l.to_string());
                LOCATION.with(|l| *l.borrow_mut() = at);
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `f`; a panic inside it comes back as `Err` with its message and
/// location, printed by nobody.
pub(crate) fn contain<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    install_hook();
    let outer = CONTAINING.with(|c| c.replace(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    CONTAINING.with(|c| c.set(outer));
    result.map_err(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        match LOCATION.with(|l| l.borrow_mut().take()) {
            Some(at) => format!("the Parquet decoder panicked at {at}: {msg}"),
            None => format!("the Parquet decoder panicked: {msg}"),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_inside_comes_back_as_an_error_with_its_place() {
        let r: Result<(), String> = contain(|| panic!("index out of bounds: the len is 3"));
        let e = r.expect_err("contained");
        assert!(e.contains("index out of bounds: the len is 3"), "{e}");
        assert!(e.contains("contain.rs"), "the location is named: {e}");
        // And the flag is down again afterwards.
        assert!(!CONTAINING.with(Cell::get));
        assert_eq!(contain(|| 7), Ok(7));
    }
}
