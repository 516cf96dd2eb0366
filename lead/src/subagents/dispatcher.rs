//! `SubagentDispatcher`: the lead's one choke point for subagent capacity. It owns worker
//! membership (the supervisor's worker links, re-read every half second, each worker's
//! slots from its handshake) and the slots it has placed tasks in, and it enforces every
//! limit in one place: tasks of one run at once (`max_concurrent`, the per-response
//! limit), tasks per run (`max_total_per_run`), and each worker's advertised slots.
//! Placement is on the least-loaded connected worker with a free slot. A task over a
//! run's limit is refused at once; one that finds every slot busy waits in a bounded
//! queue for at most its deadline, then is refused: never an unbounded queue. A worker
//! that is draining (being removed) takes no new task.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use antler_protocol::{link::CurrentConnection, Connection, Role};
use serde::Serialize;
use tokio::sync::oneshot;

use crate::links::HostLinks;

/// Tasks waiting for a slot, at most (later ones are refused at once).
pub const MAX_WAITING: usize = 1024;

/// A slot taken on a worker for one task.
#[derive(Clone)]
pub struct Placement {
    pub index: u32,
    pub node: String,
    pub connection: Connection,
}

/// One worker as the dispatcher sees it (`antler status`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WorkerSlots {
    pub index: u32,
    pub node: String,
    pub connected: bool,
    pub draining: bool,
    pub slots: u32,
    pub in_use: u32,
}

struct Worker {
    node: String,
    connection: Option<Connection>,
    slots: u32,
    in_use: u32,
    draining: bool,
}

impl Worker {
    fn free(&self) -> bool {
        !self.draining
            && self.in_use < self.slots
            && self.connection.as_ref().is_some_and(|c| !c.is_closed())
    }
}

#[derive(Default)]
struct RunCount {
    running: usize,
    total: usize,
}

struct Waiter {
    run_id: String,
    reply: oneshot::Sender<Result<Placement, String>>,
    until: Instant,
}

/// The dispatcher actor.
pub struct SubagentDispatcher {
    /// The links the workers are found among (the supervisor's).
    links: Option<Arc<dyn HostLinks>>,
    workers: BTreeMap<u32, Worker>,
    runs: HashMap<String, RunCount>,
    waiting: VecDeque<Waiter>,
}

impl SubagentDispatcher {
    /// A dispatcher over the supervisor's workers.
    pub fn new(links: impl HostLinks) -> SubagentDispatcher {
        SubagentDispatcher {
            links: Some(Arc::new(links)),
            workers: BTreeMap::new(),
            runs: HashMap::new(),
            waiting: VecDeque::new(),
        }
    }

    /// The least-loaded worker with a free slot: lowest share of its slots in use, then
    /// fewest tasks, then lowest index.
    fn pick(&self) -> Option<u32> {
        self.workers
            .iter()
            .filter(|(_, w)| w.free())
            .min_by(|(ia, a), (ib, b)| {
                let share_a = u64::from(a.in_use) * u64::from(b.slots.max(1));
                let share_b = u64::from(b.in_use) * u64::from(a.slots.max(1));
                share_a
                    .cmp(&share_b)
                    .then(a.in_use.cmp(&b.in_use))
                    .then(ia.cmp(ib))
            })
            .map(|(i, _)| *i)
    }

    fn take(&mut self, index: u32, run_id: &str) -> Option<Placement> {
        let worker = self.workers.get_mut(&index)?;
        let connection = worker.connection.clone()?;
        worker.in_use += 1;
        let count = self.runs.entry(run_id.to_owned()).or_default();
        count.running += 1;
        Some(Placement {
            index,
            node: worker.node.clone(),
            connection,
        })
    }

    fn totals(&self) -> (u32, u32, usize) {
        let live = self.workers.values().filter(|w| w.connection.is_some());
        let (slots, busy, n) =
            live.fold((0, 0, 0), |(s, b, n), w| (s + w.slots, b + w.in_use, n + 1));
        (slots, busy, n)
    }

    /// Gives free slots to waiting tasks, oldest first; drops those past their deadline
    /// or given up.
    fn serve_waiting(&mut self) {
        let now = Instant::now();
        let mut kept = VecDeque::new();
        while let Some(waiter) = self.waiting.pop_front() {
            if waiter.reply.is_closed() {
                self.unreserve(&waiter.run_id);
                continue;
            }
            if waiter.until <= now {
                let (slots, busy, n) = self.totals();
                let _ = waiter.reply.send(Err(no_slot_text(slots, busy, n)));
                self.unreserve(&waiter.run_id);
                continue;
            }
            match self.pick() {
                Some(index) => {
                    // The waiter's run already counted this task; take only the slot.
                    if let Some(worker) = self.workers.get_mut(&index) {
                        if let Some(connection) = worker.connection.clone() {
                            worker.in_use += 1;
                            let placement = Placement {
                                index,
                                node: worker.node.clone(),
                                connection,
                            };
                            if let Err(Ok(placement)) = waiter.reply.send(Ok(placement)) {
                                self.release_slot(placement.index);
                                self.unreserve(&waiter.run_id);
                            }
                        }
                    }
                }
                None => kept.push_back(waiter),
            }
        }
        self.waiting = kept;
    }

    fn release_slot(&mut self, index: u32) {
        if let Some(worker) = self.workers.get_mut(&index) {
            worker.in_use = worker.in_use.saturating_sub(1);
        }
    }

    /// A task of `run_id` that will not run after all: its run's counts go back.
    fn unreserve(&mut self, run_id: &str) {
        if let Some(count) = self.runs.get_mut(run_id) {
            count.running = count.running.saturating_sub(1);
            count.total = count.total.saturating_sub(1);
        }
    }
}

/// The capacity result of a task no slot was free for.
pub fn no_slot_text(slots: u32, busy: u32, workers: usize) -> String {
    if workers == 0 {
        return "No subagent worker is available in this cluster now, so the task did not run. Do this work directly with your own tools.".to_owned();
    }
    format!("No subagent worker had a free slot in time ({busy} of {slots} slots busy on {workers} worker(s)), so the task did not run. Do this work directly, or delegate it again later with fewer tasks at once.")
}

impl Actor for SubagentDispatcher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if crate::teardown::tearing_down() {
            return;
        }
        ctx.notify(Refresh);
        ctx.run_interval(Duration::from_millis(500), |_, ctx| ctx.notify(Refresh));
    }
}

/// Re-reads the workers from the supervisor.
#[derive(Message)]
#[rtype(result = "()")]
struct Refresh;

impl Handler<Refresh> for SubagentDispatcher {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: Refresh, _: &mut Context<Self>) -> Self::Result {
        let Some(links) = self.links.clone() else {
            return Box::pin(actix::fut::ready(()));
        };
        Box::pin(
            async move {
                let links = links.links().await.unwrap_or_default();
                let mut seen = Vec::new();
                for (role, index, _, link) in links {
                    if role != Role::Subagent {
                        continue;
                    }
                    let connection = link.send(CurrentConnection).await.ok().flatten();
                    seen.push((index, connection));
                }
                seen
            }
            .into_actor(self)
            .map(|seen, dispatcher, _| {
                let present: Vec<u32> = seen.iter().map(|(i, _)| *i).collect();
                for (index, connection) in seen {
                    let worker = dispatcher.workers.entry(index).or_insert_with(|| Worker {
                        node: format!("subagent-{index}"),
                        connection: None,
                        slots: 0,
                        in_use: 0,
                        draining: false,
                    });
                    if let Some(c) = &connection {
                        worker.node = c.peer().node_id.clone();
                        worker.slots = c.peer().capacity.max(1);
                    }
                    worker.connection = connection;
                }
                // A worker the supervisor no longer has is gone (tasks placed there
                // end with its lost connection).
                dispatcher
                    .workers
                    .retain(|i, w| present.contains(i) || w.in_use > 0);
                dispatcher.serve_waiting();
            }),
        )
    }
}

/// Asks for a slot for the task `tool_call_id` of `run_id`.
#[derive(Message)]
#[rtype(result = "Reserved")]
pub struct Reserve {
    pub run_id: String,
    pub max_concurrent: usize,
    pub max_total: usize,
    /// How long the task may wait for a slot.
    pub wait: Duration,
}

/// What [`Reserve`] got.
pub enum Reserved {
    Placed(Placement),
    /// Every slot is busy: the slot comes through the receiver, or the capacity text
    /// once the deadline passed.
    Queued(oneshot::Receiver<Result<Placement, String>>),
    /// Over one of the run's limits: the text the model gets.
    Refused(String),
}

impl Handler<Reserve> for SubagentDispatcher {
    type Result = MessageResult<Reserve>;

    fn handle(&mut self, msg: Reserve, ctx: &mut Context<Self>) -> Self::Result {
        let count = self.runs.entry(msg.run_id.clone()).or_default();
        let max_concurrent = msg.max_concurrent.clamp(1, 4);
        if count.total >= msg.max_total {
            return MessageResult(Reserved::Refused(format!("This run has used all {} of its subagent delegations, so the task did not run. Continue with the results already collected and do the remaining work directly.", msg.max_total)));
        }
        if count.running >= max_concurrent {
            return MessageResult(Reserved::Refused(format!("This run already has {max_concurrent} subagent tasks running, its limit at once, so the task did not run. Wait for their results, then delegate again or do the work directly.")));
        }
        count.total += 1;
        if let Some(placement) = self.pick().and_then(|i| self.take(i, &msg.run_id)) {
            return MessageResult(Reserved::Placed(placement));
        }
        if self.waiting.len() >= MAX_WAITING {
            self.unreserve_total(&msg.run_id);
            let (slots, busy, n) = self.totals();
            return MessageResult(Reserved::Refused(no_slot_text(slots, busy, n)));
        }
        if let Some(count) = self.runs.get_mut(&msg.run_id) {
            count.running += 1;
        }
        // A worker that connected since the last refresh may have the slot.
        ctx.notify(Refresh);
        let (tx, rx) = oneshot::channel();
        self.waiting.push_back(Waiter {
            run_id: msg.run_id,
            reply: tx,
            until: Instant::now() + msg.wait,
        });
        MessageResult(Reserved::Queued(rx))
    }
}

impl SubagentDispatcher {
    fn unreserve_total(&mut self, run_id: &str) {
        if let Some(count) = self.runs.get_mut(run_id) {
            count.total = count.total.saturating_sub(1);
        }
    }
}

/// A placed task ended: its slot and its run's running count go back.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Release {
    pub index: u32,
    pub run_id: String,
}

impl Handler<Release> for SubagentDispatcher {
    type Result = ();

    fn handle(&mut self, msg: Release, _: &mut Context<Self>) {
        self.release_slot(msg.index);
        if let Some(count) = self.runs.get_mut(&msg.run_id) {
            count.running = count.running.saturating_sub(1);
        }
        self.serve_waiting();
    }
}

/// A task that was placed but could not start there (the worker refused it): its slot
/// goes back, and its run's counts as if it had never been asked for.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Unplace {
    pub index: u32,
    pub run_id: String,
}

impl Handler<Unplace> for SubagentDispatcher {
    type Result = ();

    fn handle(&mut self, msg: Unplace, _: &mut Context<Self>) {
        self.release_slot(msg.index);
        self.unreserve(&msg.run_id);
        self.serve_waiting();
    }
}

/// A run ended: its counts go.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ForgetRun(pub String);

impl Handler<ForgetRun> for SubagentDispatcher {
    type Result = ();

    fn handle(&mut self, msg: ForgetRun, _: &mut Context<Self>) {
        if self.runs.get(&msg.0).is_some_and(|c| c.running == 0) {
            self.runs.remove(&msg.0);
        }
    }
}

/// Every worker's slots (`antler status`).
#[derive(Message)]
#[rtype(result = "Vec<WorkerSlots>")]
pub struct Workers;

impl Handler<Workers> for SubagentDispatcher {
    type Result = MessageResult<Workers>;

    fn handle(&mut self, _: Workers, _: &mut Context<Self>) -> Self::Result {
        MessageResult(
            self.workers
                .iter()
                .map(|(index, w)| WorkerSlots {
                    index: *index,
                    node: w.node.clone(),
                    connected: w.connection.as_ref().is_some_and(|c| !c.is_closed()),
                    draining: w.draining,
                    slots: w.slots,
                    in_use: w.in_use,
                })
                .collect(),
        )
    }
}

/// The connections of every live worker (to cancel a run's tasks, or find one).
#[derive(Message)]
#[rtype(result = "Vec<(u32, String, Connection)>")]
pub struct Connections;

impl Handler<Connections> for SubagentDispatcher {
    type Result = MessageResult<Connections>;

    fn handle(&mut self, _: Connections, _: &mut Context<Self>) -> Self::Result {
        MessageResult(
            self.workers
                .iter()
                .filter_map(|(i, w)| {
                    let c = w.connection.clone().filter(|c| !c.is_closed())?;
                    Some((*i, w.node.clone(), c))
                })
                .collect(),
        )
    }
}

/// Marks a worker as draining: it takes no new task (it is being removed).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetDraining {
    pub index: u32,
    pub draining: bool,
}

impl Handler<SetDraining> for SubagentDispatcher {
    type Result = ();

    fn handle(&mut self, msg: SetDraining, _: &mut Context<Self>) {
        if let Some(worker) = self.workers.get_mut(&msg.index) {
            worker.draining = msg.draining;
        }
    }
}
