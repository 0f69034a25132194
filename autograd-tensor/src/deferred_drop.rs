//! Iterative destruction of long graphs.
//!
//! Dropping the last handle to the output of a chain of a million ops would
//! otherwise recurse a million frames deep (tensor -> node -> input tensor ->
//! node ...). Whatever would recurse is pushed on a thread-local list and
//! dropped by one loop at the outermost level.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

/// A queued value: boxed, or a shared handle queued as it is (an `Arc`
/// coerces to `Arc<dyn Any>` without a new allocation: one per dropped
/// graph node saved).
enum Pending {
    Boxed(#[allow(dead_code)] Box<dyn Any>),
    Shared(#[allow(dead_code)] Arc<dyn Any + Send + Sync>),
}

thread_local! {
    static DRAINING: Cell<bool> = const { Cell::new(false) };
    static PENDING: RefCell<Vec<Pending>> = const { RefCell::new(Vec::new()) };
}

/// Drops `v` now, or queues it if a drop is already running on this thread.
pub(crate) fn defer_drop<T: 'static>(v: T) {
    defer(v, |v| Pending::Boxed(Box::new(v)));
}

/// [`defer_drop`] for a shared handle, queued without boxing.
pub(crate) fn defer_drop_arc<T: Any + Send + Sync>(v: Arc<T>) {
    defer(v, |v| Pending::Shared(v));
}

fn defer<T>(v: T, queue: impl FnOnce(T) -> Pending) {
    let draining = DRAINING.try_with(|d| d.get());
    match draining {
        Ok(true) => {
            let item = queue(v);
            // If the list is already gone (thread exit), the item is dropped here.
            let _ = PENDING.try_with(|p| p.borrow_mut().push(item));
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
