//! Interning of call stacks: each distinct stack is stored once and named by a
//! small id that the live table and the trace refer to.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use crate::fast_hash::BuildWordHasher;
use crate::lock;

pub type StackId = u32;
/// A stack's key: the number of native frames, the native return addresses,
/// then the Python frames packed one per word (`python::unpack`), so a stack
/// with Python frames never equals the native-only stack with the same natives.
pub type Frames = Arc<[u64]>;

/// The native and Python parts of a stack key.
pub fn split(key: &[u64]) -> (&[u64], &[u64]) {
    let natives = key.first().map_or(0, |&n| n as usize).min(key.len().saturating_sub(1));
    key[1..].split_at(natives)
}

const MAX_KEY: usize = 1 + crate::unwind::MAX_FRAMES + crate::python::MAX_PY_FRAMES;

#[derive(Default)]
pub struct StackTable {
    ids: DashMap<Frames, StackId, BuildWordHasher>,
    next_id: AtomicU32,
    /// Stacks interned since the trace last wrote them out.
    unwritten: Mutex<Vec<(StackId, Frames)>>,
}

impl StackTable {
    /// The id of `frames`, interning them on first sight. A new stack is queued
    /// for writing before its id is returned, so any counter that refers to it
    /// is written after the stack itself.
    pub fn intern(&self, native: &[u64], python: &[u64]) -> StackId {
        let native = &native[..native.len().min(crate::unwind::MAX_FRAMES)];
        let python = &python[..python.len().min(crate::python::MAX_PY_FRAMES)];
        let mut key = [0u64; MAX_KEY];
        key[0] = native.len() as u64;
        key[1..=native.len()].copy_from_slice(native);
        key[1 + native.len()..][..python.len()].copy_from_slice(python);
        let frames = &key[..1 + native.len() + python.len()];
        if let Some(id) = self.ids.get(frames) {
            return *id;
        }
        match self.ids.entry(Frames::from(frames)) {
            Entry::Occupied(existing) => *existing.get(),
            Entry::Vacant(vacant) => {
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                lock(&self.unwritten).push((id, vacant.key().clone()));
                vacant.insert(id);
                id
            }
        }
    }

    pub fn take_unwritten(&self) -> Vec<(StackId, Frames)> {
        std::mem::take(&mut *lock(&self.unwritten))
    }

    /// Every stack known, for a new trace file that starts from scratch.
    pub fn all(&self) -> Vec<(StackId, Frames)> {
        let mut all: Vec<_> = self.ids.iter().map(|entry| (*entry.value(), entry.key().clone())).collect();
        all.sort_unstable_by_key(|(id, _)| *id);
        all
    }
}
