//! One thread per communicator that runs its collectives in the order they
//! were called (PyTorch's process-group work queue): a non-blocking
//! all-reduce is a job queued here while backward goes on, and a blocking
//! collective is a job waited for, so both kinds stay in one order on
//! every rank. MPI's state lives on this thread (it initialises and
//! finalises MPI there), so no other thread calls into MPI.

use autograd_core::{DistError, Result};
use std::sync::mpsc;
use std::thread::JoinHandle;

type Job<S> = Box<dyn FnOnce(&mut S) + Send>;

/// The queue and its thread; `S` is the transport's state, made and
/// dropped on the thread.
pub(crate) struct Worker<S> {
    tx: Option<mpsc::Sender<Job<S>>>,
    thread: Option<JoinHandle<()>>,
}

impl<S: 'static> Worker<S> {
    /// Starts the thread, which makes its state with `init`; `describe`
    /// reads what the caller needs to know of it (rank, world size).
    pub(crate) fn spawn<I: Send + 'static>(
        name: String,
        init: impl FnOnce() -> Result<S> + Send + 'static,
        describe: impl FnOnce(&S) -> I + Send + 'static,
    ) -> Result<(Self, I)> {
        let (tx, rx) = mpsc::channel::<Job<S>>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<I>>();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                let mut state = match init() {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(describe(&state)));
                while let Ok(job) = rx.recv() {
                    job(&mut state);
                }
            })
            .map_err(|e| DistError::Transport { what: "communicator".into(), detail: format!("cannot start its thread: {e}") })?;
        let info = ready_rx
            .recv()
            .map_err(|_| DistError::Transport { what: "communicator".into(), detail: "its thread ended while starting".into() })??;
        Ok((Worker { tx: Some(tx), thread: Some(thread) }, info))
    }

    /// Queues `job`; `Err` once the thread has gone.
    pub(crate) fn submit(&self, job: impl FnOnce(&mut S) + Send + 'static) -> Result<()> {
        self.tx
            .as_ref()
            .and_then(|tx| tx.send(Box::new(job)).ok())
            .ok_or_else(|| DistError::Transport { what: "communicator".into(), detail: "its thread has stopped".into() }.into())
    }
}

impl<S> Drop for Worker<S> {
    fn drop(&mut self) {
        drop(self.tx.take()); // the thread ends when its queue is empty and closed
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
