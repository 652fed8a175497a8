//! The daemon's queues between threads: bounded, many producers and consumers, and a consumer
//! that finds the queue empty sleeps at once on a futex (a condition variable).
//!
//! Why not `crossbeam_channel`: its blocking `recv` spins and then calls `sched_yield` before it
//! parks. On a machine with few cores, busy with the daemon's other threads and the clients,
//! each yield is a context switch: profiled on the 2-vCPU VM (`perf record` of the daemon under
//! `offload serve bench`), the workers' and executors' `sched_yield` alone took ~18% of the
//! daemon's samples. Here a pop either finds an item under the lock or waits; a push wakes a
//! consumer only when one is waiting (no syscall otherwise).
//!
//! The queue closes when its last [`Producer`] is dropped (or on [`HandOff::close`]); consumers
//! then take what is left and see `None`.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// A bounded queue handed between threads.
pub struct HandOff<T> {
    state: Mutex<State<T>>,
    not_empty: Condvar,
    not_full: Condvar,
    capacity: usize,
}

struct State<T> {
    items: VecDeque<T>,
    producers: usize,
    closed: bool,
    /// Consumers asleep in `pop`/`pop_until`, and producers asleep in `push`: a push or pop
    /// signals only when someone waits.
    waiting_consumers: usize,
    waiting_producers: usize,
}

/// Why [`Producer::try_push`] did not take an item (given back).
#[derive(Debug)]
pub enum Refused<T> {
    Full(T),
    Closed(T),
}

impl<T> Refused<T> {
    /// The same refusal, of what `f` makes of the item.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Refused<U> {
        match self {
            Refused::Full(t) => Refused::Full(f(t)),
            Refused::Closed(t) => Refused::Closed(f(t)),
        }
    }
}

/// What a timed pop found.
#[derive(Debug, PartialEq, Eq)]
pub enum Popped<T> {
    Item(T),
    TimedOut,
    Closed,
}

/// A handle that may push; the queue closes when the last one is dropped.
pub struct Producer<T> {
    queue: Arc<HandOff<T>>,
}

impl<T> HandOff<T> {
    /// A queue of `capacity` items (at least 1) and its first producer.
    pub fn new(capacity: usize) -> (Arc<HandOff<T>>, Producer<T>) {
        let queue = Arc::new(HandOff {
            state: Mutex::new(State {
                items: VecDeque::with_capacity(capacity.max(1)),
                producers: 1,
                closed: false,
                waiting_consumers: 0,
                waiting_producers: 0,
            }),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
            capacity: capacity.max(1),
        });
        (queue.clone(), Producer { queue })
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A thread that panicked while holding the lock left the queue consistent (every
        // critical section is a push, a pop or a counter change), so go on with it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes one item, taken from a non-empty queue; wakes a producer waiting for room.
    fn took(&self, mut s: MutexGuard<'_, State<T>>) -> Option<T> {
        let item = s.items.pop_front();
        if item.is_some() && s.waiting_producers > 0 {
            drop(s);
            self.not_full.notify_one();
        }
        item
    }

    /// Takes the next item, waiting while the queue is empty; `None` once closed and empty.
    pub fn pop(&self) -> Option<T> {
        let mut s = self.lock();
        while s.items.is_empty() {
            if s.closed {
                return None;
            }
            s.waiting_consumers += 1;
            s = self.not_empty.wait(s).unwrap_or_else(|p| p.into_inner());
            s.waiting_consumers -= 1;
        }
        self.took(s)
    }

    /// Takes the next item if there is one, without waiting.
    pub fn try_pop(&self) -> Option<T> {
        let s = self.lock();
        if s.items.is_empty() {
            return None;
        }
        self.took(s)
    }

    /// Takes the next item, waiting at most until `deadline`.
    pub fn pop_until(&self, deadline: Instant) -> Popped<T> {
        let mut s = self.lock();
        while s.items.is_empty() {
            if s.closed {
                return Popped::Closed;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else {
                return Popped::TimedOut;
            };
            s.waiting_consumers += 1;
            s = self.not_empty.wait_timeout(s, left).unwrap_or_else(|p| p.into_inner()).0;
            s.waiting_consumers -= 1;
        }
        self.took(s).map_or(Popped::Closed, Popped::Item)
    }

    /// Closes the queue: pushes are refused, consumers take what is left, then see it closed.
    pub fn close(&self) {
        self.lock().closed = true;
        self.not_empty.notify_all();
        self.not_full.notify_all();
    }
}

impl<T> Producer<T> {
    fn pushed(&self, mut s: MutexGuard<'_, State<T>>, item: T) {
        s.items.push_back(item);
        let wake = s.waiting_consumers > 0;
        drop(s);
        if wake {
            self.queue.not_empty.notify_one();
        }
    }

    /// Adds an item unless the queue is full or closed (then gives it back).
    pub fn try_push(&self, item: T) -> Result<(), Refused<T>> {
        let s = self.queue.lock();
        if s.closed {
            return Err(Refused::Closed(item));
        }
        if s.items.len() >= self.queue.capacity {
            return Err(Refused::Full(item));
        }
        self.pushed(s, item);
        Ok(())
    }

    /// Adds an item, waiting while the queue is full; gives it back if the queue closes.
    pub fn push(&self, item: T) -> Result<(), T> {
        let mut s = self.queue.lock();
        while s.items.len() >= self.queue.capacity && !s.closed {
            s.waiting_producers += 1;
            s = self.queue.not_full.wait(s).unwrap_or_else(|p| p.into_inner());
            s.waiting_producers -= 1;
        }
        if s.closed {
            return Err(item);
        }
        self.pushed(s, item);
        Ok(())
    }
}

impl<T> Clone for Producer<T> {
    fn clone(&self) -> Self {
        self.queue.lock().producers += 1;
        Producer { queue: self.queue.clone() }
    }
}

impl<T> Drop for Producer<T> {
    fn drop(&mut self) {
        let mut s = self.queue.lock();
        s.producers -= 1;
        if s.producers == 0 {
            drop(s);
            self.queue.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn items_come_out_in_order_and_the_bound_refuses() {
        let (q, p) = HandOff::new(2);
        p.try_push(1).unwrap();
        p.try_push(2).unwrap();
        assert!(matches!(p.try_push(3), Err(Refused::Full(3))));
        assert_eq!((q.pop(), q.try_pop(), q.try_pop()), (Some(1), Some(2), None));
    }

    #[test]
    fn dropping_the_last_producer_closes_after_the_rest_is_taken() {
        let (q, p) = HandOff::new(4);
        let p2 = p.clone();
        p.try_push(1).unwrap();
        drop(p);
        p2.try_push(2).unwrap();
        drop(p2);
        assert_eq!((q.pop(), q.pop(), q.pop()), (Some(1), Some(2), None));
        assert_eq!(q.pop_until(Instant::now() + Duration::from_secs(1)), Popped::Closed);
    }

    #[test]
    fn a_timed_pop_times_out_and_a_blocked_push_resumes_when_room_is_made() {
        let (q, p) = HandOff::new(1);
        assert_eq!(q.pop_until(Instant::now() + Duration::from_millis(5)), Popped::TimedOut);
        p.try_push(1).unwrap();
        let q2 = q.clone();
        let taker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            q2.pop()
        });
        p.push(2).unwrap(); // waits until the taker makes room
        assert_eq!(taker.join().unwrap(), Some(1));
        assert_eq!(q.pop(), Some(2));
        q.close();
        assert!(matches!(p.try_push(3), Err(Refused::Closed(3))));
        assert_eq!(p.push(4), Err(4));
    }

    #[test]
    fn many_producers_and_consumers_lose_nothing() {
        let (q, p) = HandOff::new(8);
        let consumers: Vec<_> = (0..3)
            .map(|_| {
                let q = q.clone();
                std::thread::spawn(move || std::iter::from_fn(|| q.pop()).collect::<Vec<u64>>())
            })
            .collect();
        let producers: Vec<_> = (0..3u64)
            .map(|t| {
                let p = p.clone();
                std::thread::spawn(move || (0..2000).for_each(|i| p.push(t * 10_000 + i).unwrap()))
            })
            .collect();
        drop(p);
        producers.into_iter().for_each(|h| h.join().unwrap());
        let mut all: Vec<u64> = consumers.into_iter().flat_map(|h| h.join().unwrap()).collect();
        all.sort_unstable();
        let want: Vec<u64> = (0..3u64).flat_map(|t| (0..2000).map(move |i| t * 10_000 + i)).collect();
        assert_eq!(all, want);
    }
}
