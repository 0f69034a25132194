//! Iterative destruction of long graphs.
//!
//! Dropping the last handle to the output of a chain of a million ops would
//! otherwise recurse a million frames deep (tensor -> node -> input tensor ->
//! node ...). Whatever would recurse is pushed on a thread-local list and
//! dropped by one loop at the outermost level.

use std::any::Any;
use std::cell::{Cell, RefCell};

thread_local! {
    static DRAINING: Cell<bool> = const { Cell::new(false) };
    static PENDING: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

/// Drops `v` now, or queues it if a drop is already running on this thread.
pub(crate) fn defer_drop<T: 'static>(v: T) {
    let draining = DRAINING.try_with(|d| d.get());
    match draining {
        Ok(true) => {
            let boxed: Box<dyn Any> = Box::new(v);
            // If the list is already gone (thread exit), the closure is dropped with the box.
            let _ = PENDING.try_with(|p| p.borrow_mut().push(boxed));
        }
        Ok(false) => {
            DRAINING.with(|d| d.set(true));
            drop(v);
            while let Some(next) = PENDING.with(|p| p.borrow_mut().pop()) {
                drop(next);
            }
            DRAINING.with(|d| d.set(false));
        }
        // Thread-local storage is being torn down: drop directly.
        Err(_) => drop(v),
    }
}
