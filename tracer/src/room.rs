//! Growth of the tracer's tables that may fail. Rust aborts the process
//! when an allocation it needs fails, so every table that grows while the
//! program runs asks for its room first: under an address-space limit
//! (`ulimit -v`), or when the program has filled the memory it may have,
//! the tracer then stops recording and the program goes on, where a table
//! growing as usual would have killed it.

use std::hash::{BuildHasher, Hash};

use dashmap::{DashMap, SharedValue};

/// A table could not grow: the memory it needed was not to be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfMemory;

impl OutOfMemory {
    /// Why recording stops, in the tracer's one line on stderr.
    pub const WHY: &'static str = trace_format::TRACER_OUT_OF_MEMORY;
}

/// `result`'s value; a failure is noted for the session to stop recording
/// (see [`crate::real_alloc::out_of_memory`]).
pub fn noted<T>(result: Result<T, OutOfMemory>) -> Option<T> {
    result.map_err(|OutOfMemory| crate::real_alloc::note_out_of_memory()).ok()
}

/// Looks `key` up under its shard's lock and hands `place` its value,
/// or `None` when there is none: `place` returns the value to put at `key`
/// in that case (if any), and its result. A new key's room is taken before
/// `place` runs: nothing changes when the shard cannot grow for it.
pub fn upsert<K, V, S, R>(
    map: &DashMap<K, V, S>,
    key: K,
    place: impl FnOnce(Option<&mut V>) -> (Option<V>, R),
) -> Result<R, OutOfMemory>
where
    K: Hash + Eq + Copy,
    S: BuildHasher + Clone,
{
    let hasher = map.hasher();
    let hash = hasher.hash_one(key);
    let mut shard = map.shards()[map.determine_shard(hash as usize)].write();
    if let Some((_, value)) = shard.get_mut(hash, |(k, _)| *k == key) {
        return Ok(place(Some(value.get_mut())).1);
    }
    let rehash = |(k, _): &(K, SharedValue<V>)| hasher.hash_one(k);
    shard.try_reserve(1, rehash).map_err(|_| OutOfMemory)?;
    let (value, result) = place(None);
    if let Some(value) = value {
        shard.insert(hash, (key, SharedValue::new(value)), rehash);
    }
    Ok(result)
}

/// Hands `work` the value at `key`, made by `make` when there is none.
pub fn with_entry<K, V, S, R>(
    map: &DashMap<K, V, S>,
    key: K,
    make: impl FnOnce() -> V,
    work: impl FnOnce(&mut V) -> R,
) -> Result<R, OutOfMemory>
where
    K: Hash + Eq + Copy,
    S: BuildHasher + Clone,
{
    upsert(map, key, |slot| match slot {
        Some(value) => (None, work(value)),
        None => {
            let mut value = make();
            let result = work(&mut value);
            (Some(value), result)
        }
    })
}

/// Puts `value` at `key`; the value it replaced, if any.
pub fn insert<K, V, S>(map: &DashMap<K, V, S>, key: K, value: V) -> Result<Option<V>, OutOfMemory>
where
    K: Hash + Eq + Copy,
    S: BuildHasher + Clone,
{
    upsert(map, key, |slot| match slot {
        Some(old) => (None, Some(std::mem::replace(old, value))),
        None => (Some(value), None),
    })
}

/// Appends `item` to `list`.
pub fn push<T>(list: &mut Vec<T>, item: T) -> Result<(), OutOfMemory> {
    list.try_reserve(1).map_err(|_| OutOfMemory)?;
    list.push(item);
    Ok(())
}

/// Gives back the room of `map`'s shards beyond what their entries need,
/// shard by shard: each moves to a table of its size. A shard for whose
/// smaller table there is no memory keeps its room.
pub fn shrink<K, V, S>(map: &DashMap<K, V, S>)
where
    K: Hash + Eq,
    S: BuildHasher + Clone,
{
    let hasher = map.hasher();
    let rehash = |(k, _): &(K, SharedValue<V>)| hasher.hash_one(k);
    for shard in map.shards() {
        let mut shard = shard.write();
        let mut old = Default::default();
        std::mem::swap(&mut *shard, &mut old);
        if shard.try_reserve(old.len(), rehash).is_err() {
            std::mem::swap(&mut *shard, &mut old);
            continue;
        }
        for entry in old.drain() {
            shard.insert(rehash(&entry), entry, rehash);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_insert_replaces_and_an_entry_is_made_once() {
        let map: DashMap<u64, u32> = DashMap::default();
        assert_eq!(insert(&map, 7, 1), Ok(None));
        assert_eq!(insert(&map, 7, 2), Ok(Some(1)));
        let made = with_entry(&map, 9, || 5, |value| std::mem::replace(value, 6));
        assert_eq!(made, Ok(5));
        assert_eq!(with_entry(&map, 9, || unreachable!("it exists"), |value| *value), Ok(6));
        assert_eq!((*map.get(&7).unwrap(), map.len()), (2, 2));
        assert_eq!(upsert(&map, 11, |_| (None, ())), Ok(()));
        assert!(!map.contains_key(&11), "nothing to put");
    }

    #[test]
    fn a_shrunk_table_keeps_its_entries_in_less_room() {
        let map: DashMap<u64, u64> = DashMap::default();
        (0..10_000).for_each(|key| assert_eq!(insert(&map, key, key * 2), Ok(None)));
        map.retain(|&key, _| key % 100 == 0);
        let before = map.capacity();
        shrink(&map);
        assert!(map.capacity() < before / 10, "{before} -> {}", map.capacity());
        assert_eq!(map.len(), 100);
        assert!((0..10_000).step_by(100).all(|key| map.get(&key).is_some_and(|value| *value == key * 2)));
    }
}
