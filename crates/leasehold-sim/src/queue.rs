//! The event queue: steps ordered by true time, ties broken by insertion order (so a run is
//! deterministic).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::time::TrueTime;

struct Entry<T> {
    at: TrueTime,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: the heap pops the earliest first.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// A priority queue of timed items, earliest first, first-in first-out among equal times.
pub(crate) struct Queue<T> {
    heap: BinaryHeap<Entry<T>>,
    seq: u64,
}

impl<T> Queue<T> {
    pub(crate) fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }

    pub(crate) fn push(&mut self, at: TrueTime, item: T) {
        self.seq += 1;
        self.heap.push(Entry {
            at,
            seq: self.seq,
            item,
        });
    }

    pub(crate) fn pop(&mut self) -> Option<(TrueTime, T)> {
        self.heap.pop().map(|e| (e.at, e.item))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_fifo() {
        let mut q = Queue::new();
        q.push(TrueTime(5), 'a');
        q.push(TrueTime(1), 'b');
        q.push(TrueTime(5), 'c');
        q.push(TrueTime(1), 'd');
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, c)| c)).collect();
        assert_eq!(order, vec!['b', 'd', 'a', 'c']);
    }
}
