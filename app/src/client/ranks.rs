//! The pool of workers that profile a run's files for the ranks overview.

use std::rc::Rc;

use engine::protocol::{Response, ToWorker};
use engine::ranks::{RankProfile, SMALL};
use futures_channel::oneshot;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::conn::Conn;
use super::Client;
use crate::js_error::js_error;

/// Workers reused across a run's files, at most [`rank_workers`]. A worker reads one large
/// file at a time, or up to [`RANK_DEPTH`] batches of small ones (profiles, tiny snapshots:
/// `engine::ranks::batches`), so that the next batch is there when one ends; batches wait
/// their turn in `waiting` (first come, first served).
#[derive(Default)]
pub(super) struct RankPool {
    pub(super) workers: Vec<Rc<Conn>>,
    pub(super) waiting: std::collections::VecDeque<(u64, oneshot::Sender<Rc<Conn>>)>,
    /// How many times the pool was started ahead of a run ([`Client::warm_rank_workers`]).
    pub(super) warmed: u32,
}

/// Workers started ahead of a run that no run used end after this long (ms).
const WARM_MS: i32 = 60_000;

/// Batches of small files a worker holds at once: one read, one waiting.
const RANK_DEPTH: u32 = 2;

/// How many workers profile a run: one per core the browser reports, at least 1, and at most
/// 8 (each may take a snapshot's whole model while it reads it).
pub fn rank_workers() -> usize {
    let cores = web_sys::window().map_or(1.0, |w| w.navigator().hardware_concurrency());
    (cores as usize).clamp(1, 8)
}

impl Client {
    /// Profiles a batch of a run's files (`files`, named `names`, of `size` bytes together) in
    /// the pool, waiting for room in a worker: per file, in order, its profile or why it could
    /// not be read (naming it). Each `File` goes to the worker that reads it, once: posting one
    /// costs the page a look at the disk.
    pub async fn rank(&self, files: &js_sys::Array, names: Vec<String>, size: u64) -> Vec<Result<RankProfile, String>> {
        let fail = |why: &str| names.iter().map(|n| Err(format!("{n}: {why}"))).collect();
        let conn = match self.pooled(size) {
            Ok(Some(c)) => c,
            Ok(None) => {
                let (tx, rx) = oneshot::channel();
                self.0.ranks.borrow_mut().waiting.push_back((size, tx));
                match rx.await {
                    Ok(c) => c,
                    Err(_) => return fail("no worker to read it"),
                }
            }
            Err(e) => return fail(&format!("the browser could not start a worker: {}", js_error(&e))),
        };
        conn.ranked.set(true);
        let id = self.0.id();
        let (tx, rx) = oneshot::channel();
        conn.pending.borrow_mut().insert(id, tx);
        conn.send_with(&ToWorker::Ranks { id, names: names.clone() }, files);
        let r = rx.await.unwrap_or_else(|_| Response::Error("the worker stopped".into()));
        let dead = conn.dead.borrow().clone();
        let out = match (dead, r) {
            // The worker may have held other files: each answer names its own.
            (Some(why), _) => fail(&format!(
                "the worker reading it stopped ({why}); the command-line `memscape ranks` reads files of any size"
            )),
            (None, Response::Ranks(v)) if v.len() == names.len() => v,
            (None, Response::Error(e)) => fail(&e),
            (None, _) => fail("the worker answered something else"),
        };
        self.release(&conn, size);
        out
    }

    /// Room for a batch of `size` bytes in the pool: an idle worker, else a new one while fewer
    /// than [`rank_workers`] live, else (a small batch) the least busy worker holding only
    /// small ones; `None`: no room now. The worker counts the batch as in hand.
    fn pooled(&self, size: u64) -> Result<Option<Rc<Conn>>, JsValue> {
        let mut pool = self.0.ranks.borrow_mut();
        pool.workers.retain(|c| c.dead.borrow().is_none());
        let small = size <= SMALL;
        let idle = pool.workers.iter().find(|c| c.in_flight.get() == 0).cloned();
        let conn = match idle {
            Some(c) => c,
            None if pool.workers.len() < rank_workers() => {
                let blob = web_sys::Blob::new()?;
                let c = Conn::spawn(&self.0.boot, "a rank's file", &blob, &self.0.analysed)?;
                pool.workers.push(c.clone());
                c
            }
            None if small => {
                let shared = pool
                    .workers
                    .iter()
                    .filter(|c| !c.large.get() && c.in_flight.get() < RANK_DEPTH)
                    .min_by_key(|c| c.in_flight.get())
                    .cloned();
                let Some(c) = shared else { return Ok(None) };
                c
            }
            None => return Ok(None),
        };
        conn.in_flight.set(conn.in_flight.get() + 1);
        conn.large.set(conn.large.get() || !small);
        Ok(Some(conn))
    }

    /// A batch is done: its room goes to the batches waiting, in their order.
    fn release(&self, conn: &Conn, size: u64) {
        conn.in_flight.set(conn.in_flight.get().saturating_sub(1));
        if size > SMALL {
            conn.large.set(false);
        }
        loop {
            let Some(size) = self.0.ranks.borrow().waiting.front().map(|w| w.0) else { return };
            let Ok(Some(c)) = self.pooled(size) else { return };
            let Some((_, next)) = self.0.ranks.borrow_mut().waiting.pop_front() else { return };
            if let Err(c) = next.send(c) {
                // That batch was given up: its room goes back.
                c.in_flight.set(c.in_flight.get().saturating_sub(1));
                if size > SMALL {
                    c.large.set(false);
                }
            }
        }
    }

    /// Starts the pool's workers before a run's files are chosen (the user is picking a
    /// folder, or dragging something over the page), so that no file waits for a worker to
    /// start and compile its wasm. Unused, they end after [`WARM_MS`].
    pub fn warm_rank_workers(&self) {
        {
            let mut pool = self.0.ranks.borrow_mut();
            pool.workers.retain(|c| c.dead.borrow().is_none());
            while pool.workers.len() < rank_workers() {
                let Ok(blob) = web_sys::Blob::new() else { return };
                let Ok(c) = Conn::spawn(&self.0.boot, "a rank's file", &blob, &self.0.analysed) else { return };
                pool.workers.push(c);
            }
            pool.warmed += 1;
        }
        let (me, warmed) = (self.clone(), self.0.ranks.borrow().warmed);
        let end = Closure::once_into_js(move || {
            let pool = me.0.ranks.borrow();
            // Ended only if no run has been given to the pool and nothing warmed it since.
            let unused =
                pool.warmed == warmed && pool.workers.iter().all(|c| c.in_flight.get() == 0 && !c.ranked.get());
            drop(pool);
            if unused {
                me.end_idle_rank_workers();
            }
        });
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(end.unchecked_ref(), WARM_MS);
        }
    }

    /// Ends the pool's idle workers (a run is read: their memory goes back).
    pub fn end_idle_rank_workers(&self) {
        let mut pool = self.0.ranks.borrow_mut();
        let (idle, busy): (Vec<Rc<Conn>>, Vec<Rc<Conn>>) =
            std::mem::take(&mut pool.workers).into_iter().partition(|c| c.in_flight.get() == 0);
        pool.workers = busy;
        for c in idle {
            c.worker.terminate();
        }
    }
}
