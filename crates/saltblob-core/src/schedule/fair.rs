//! Start-time fair queuing over request bytes: which queued request goes next. Pure bookkeeping, no clock and no
//! I/O, so that admission order and share accounting are tested exactly.
//!
//! Each class has a FIFO queue and shares. A request of `cost` bytes queued in class `c` gets the start tag
//! `max(virtual time, c's last finish tag)` and the finish tag `start + cost / shares(c)`. The next request is
//! the head with the smallest start tag among the classes allowed to run, and the virtual time becomes its
//! start tag. A class that was idle starts at the virtual time, so it cannot hoard credit, and a request
//! arriving in a light class is served ahead of the backlog of a heavy one: the backlog's start tags lie
//! ahead of the virtual time by the bytes already queued, divided by its shares.

use std::collections::VecDeque;

/// Queued requests of every class, with their tags.
#[derive(Debug)]
pub(crate) struct FairQueue<T> {
    virtual_time: f64,
    classes: Vec<ClassQueue<T>>,
}

#[derive(Debug)]
struct ClassQueue<T> {
    shares: f64,
    last_finish: f64,
    queue: VecDeque<Tagged<T>>,
}

#[derive(Debug)]
struct Tagged<T> {
    start: f64,
    finish: f64,
    item: T,
}

impl<T> FairQueue<T> {
    /// An empty queue for classes with these shares (indexes are class ids).
    pub(crate) fn new(shares: &[u32]) -> Self {
        Self {
            virtual_time: 0.0,
            classes: shares
                .iter()
                .map(|&s| ClassQueue {
                    shares: f64::from(s.max(1)),
                    last_finish: 0.0,
                    queue: VecDeque::new(),
                })
                .collect(),
        }
    }

    /// Queues `item`, a request of `cost` bytes in `class`.
    pub(crate) fn push(&mut self, class: usize, cost: u64, item: T) {
        let vt = self.virtual_time;
        let Some(c) = self.classes.get_mut(class) else {
            return;
        };
        let start = vt.max(c.last_finish);
        let finish = start + cost as f64 / c.shares;
        c.last_finish = finish;
        c.queue.push_back(Tagged {
            start,
            finish,
            item,
        });
    }

    /// Takes the next request among the classes `may_run` allows: the smallest start tag (then finish tag, then
    /// class id); advances the virtual time to its start tag.
    pub(crate) fn pop(&mut self, may_run: impl Fn(usize) -> bool) -> Option<(usize, T)> {
        let (class, _) = self
            .classes
            .iter()
            .enumerate()
            .filter(|(id, _)| may_run(*id))
            .filter_map(|(id, c)| c.queue.front().map(|t| (id, (t.start, t.finish))))
            .min_by(|(ia, a), (ib, b)| {
                a.partial_cmp(b)
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then(ia.cmp(ib))
            })?;
        let tagged = self.classes[class].queue.pop_front()?;
        self.virtual_time = self.virtual_time.max(tagged.start);
        Some((class, tagged.item))
    }

    /// Corrects a class's account once a request's real cost is known: `delta` bytes more (or fewer) than it
    /// was queued with. Later requests of the class start that much later (or earlier, never before the
    /// virtual time).
    pub(crate) fn charge(&mut self, class: usize, delta: i64) {
        let vt = self.virtual_time;
        if let Some(c) = self.classes.get_mut(class) {
            c.last_finish = (c.last_finish + delta as f64 / c.shares).max(vt);
        }
    }

    /// Removes the queued requests of `class` that `pred` selects (a waiter that gave up).
    pub(crate) fn remove(&mut self, class: usize, pred: impl Fn(&T) -> bool) {
        if let Some(c) = self.classes.get_mut(class) {
            c.queue.retain(|t| !pred(&t.item));
        }
    }

    /// Requests queued in `class`.
    pub(crate) fn queued(&self, class: usize) -> usize {
        self.classes.get(class).map_or(0, |c| c.queue.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERACTIVE: usize = 0;
    const BULK: usize = 1;

    /// A small request arriving behind a backlog of bulk units goes next, ahead of every queued unit.
    #[test]
    fn a_light_class_is_served_ahead_of_a_heavy_backlog() {
        let mut q = FairQueue::new(&[1000, 200]);
        for unit in 0..10 {
            q.push(BULK, 256 << 10, format!("bulk {unit}"));
        }
        assert_eq!(q.pop(|_| true), Some((BULK, "bulk 0".into())));
        q.push(INTERACTIVE, 64 << 10, "small".into());
        assert_eq!(q.pop(|_| true), Some((INTERACTIVE, "small".into())));
        assert_eq!(q.pop(|_| true), Some((BULK, "bulk 1".into())));
        assert_eq!(q.queued(BULK), 8);
    }

    /// With both classes backlogged, each gets bytes in proportion to its shares; neither starves.
    #[test]
    fn backlogged_classes_share_bytes_by_shares() {
        let mut q = FairQueue::new(&[1000, 200]);
        let cost = 64 << 10;
        for i in 0..600 {
            q.push(INTERACTIVE, cost, i);
            q.push(BULK, cost, i);
        }
        let mut served = [0u32; 2];
        for _ in 0..360 {
            let (class, _) = q.pop(|_| true).expect("backlogged");
            served[class] += 1;
        }
        assert_eq!(served, [300, 60], "1000:200 shares = 5:1");
    }

    /// Shares count bytes, not requests: a class of large units gets fewer of them.
    #[test]
    fn shares_are_over_bytes() {
        let mut q = FairQueue::new(&[100, 100]);
        for i in 0..100 {
            q.push(0, 4 << 10, i);
            q.push(1, 16 << 10, i);
        }
        let mut served = [0u32; 2];
        for _ in 0..50 {
            served[q.pop(|_| true).expect("backlogged").0] += 1;
        }
        assert_eq!(served, [40, 10]);
    }

    /// A class that may not run (it holds its share of slots) is skipped without losing its place.
    #[test]
    fn a_class_held_back_keeps_its_place() {
        let mut q = FairQueue::new(&[1000, 200]);
        q.push(BULK, 1, "b");
        q.push(INTERACTIVE, 1 << 20, "i");
        assert_eq!(q.pop(|c| c != BULK), Some((INTERACTIVE, "i")));
        assert_eq!(q.pop(|c| c != BULK), None);
        assert_eq!(q.pop(|_| true), Some((BULK, "b")));
    }

    /// An idle class earns no credit: after the other class ran alone, it starts at the virtual time.
    #[test]
    fn an_idle_class_does_not_hoard_credit() {
        let mut q = FairQueue::new(&[100, 100]);
        for i in 0..100 {
            q.push(BULK, 1000, i);
        }
        for _ in 0..50 {
            q.pop(|_| true);
        }
        for i in 0..10 {
            q.push(INTERACTIVE, 1000, i);
        }
        let mut order = Vec::new();
        for _ in 0..10 {
            order.push(q.pop(|_| true).expect("queued").0);
        }
        // Interleaved from the first request on: no burst of ten for the class that was idle.
        assert_eq!(order, [0, 0, 1, 0, 1, 0, 1, 0, 1, 0]);
    }

    /// A cost corrected after the fact moves the class's later requests.
    #[test]
    fn corrections_move_later_requests() {
        let mut q = FairQueue::new(&[100, 100]);
        q.push(BULK, 100, "b0");
        assert_eq!(q.pop(|_| true), Some((BULK, "b0")));
        q.charge(BULK, 100_000); // it read far more than estimated
        q.push(BULK, 100, "b1");
        q.push(INTERACTIVE, 100, "i0");
        q.push(INTERACTIVE, 100, "i1");
        assert_eq!(q.pop(|_| true), Some((INTERACTIVE, "i0")));
        assert_eq!(q.pop(|_| true), Some((INTERACTIVE, "i1")));
        q.remove(BULK, |b| *b == "b1");
        assert_eq!(q.pop(|_| true), None);
    }
}
