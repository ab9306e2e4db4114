//! Reads of the interpreter's memory from inside an allocation hook.
//!
//! Nothing here takes a lock, calls into Python or allocates. Every address is
//! checked before it is read: non-null, aligned for the value read, and within
//! the user half of the x86_64 address space. That does not prove the memory
//! is mapped, so callers only follow pointers taken from structures they have
//! already validated (a thread state handed out by CPython, frames reached
//! from it, objects whose type pointer matched a known type).

/// Lowest address the walk will read (the first page is never mapped).
const LOWEST: u64 = 0x1_0000;
/// One past the highest user-space address on x86_64 (47-bit canonical).
const HIGHEST: u64 = 0x0000_7fff_ffff_f000;

/// Whether `address` may be read as a `size`-byte value aligned to `align`.
#[inline]
pub fn plausible(address: u64, size: u64, align: u64) -> bool {
    address >= LOWEST && address.is_multiple_of(align) && address.checked_add(size).is_some_and(|end| end <= HIGHEST)
}

/// Reads a pointer-sized word at `base + offset`, `None` when the address is implausible.
#[inline]
pub fn word(base: u64, offset: u64) -> Option<u64> {
    let address = base.checked_add(offset)?;
    if !plausible(address, 8, 8) {
        return None;
    }
    // SAFETY: the address is aligned and in user space; the callers only pass
    // addresses inside structures CPython keeps alive while this thread runs.
    Some(unsafe { std::ptr::read_volatile(address as *const u64) })
}

#[inline]
pub fn u32_at(base: u64, offset: u64) -> Option<u32> {
    let address = base.checked_add(offset)?;
    if !plausible(address, 4, 4) {
        return None;
    }
    // SAFETY: as in `word`.
    Some(unsafe { std::ptr::read_volatile(address as *const u32) })
}

#[inline]
pub fn u8_at(base: u64, offset: u64) -> Option<u8> {
    let address = base.checked_add(offset)?;
    if !plausible(address, 1, 1) {
        return None;
    }
    // SAFETY: as in `word`.
    Some(unsafe { std::ptr::read_volatile(address as *const u8) })
}

/// A pointer field that must itself point to a plausible, 8-aligned object.
#[inline]
pub fn object_pointer(base: u64, offset: u64) -> Option<u64> {
    word(base, offset).filter(|&p| plausible(p, 16, 8))
}

/// Copies `len` bytes starting at `address` (already validated by the caller
/// as the data of a live object of at least that size).
pub fn copy_bytes(address: u64, len: usize) -> Option<Vec<u8>> {
    if !plausible(address, len as u64, 1) {
        return None;
    }
    // SAFETY: the range was checked above and lies inside a live object.
    Some(unsafe { std::slice::from_raw_parts(address as *const u8, len) }.to_vec())
}

/// A range checked once, read many times: every read stays inside it.
#[derive(Clone, Copy)]
pub struct Block {
    base: u64,
    len: u64,
}

/// `len` bytes at `base`, 8-aligned and plausible; the caller knows them to
/// lie inside one live object (or in memory that object's allocation spans).
#[inline]
pub fn block(base: u64, len: u64) -> Option<Block> {
    plausible(base, len, 8).then_some(Block { base, len })
}

impl Block {
    /// The aligned word at `offset`; 0 for an offset outside the block.
    #[inline]
    pub fn word(&self, offset: u64) -> u64 {
        if !offset.is_multiple_of(8) || offset + 8 > self.len {
            return 0;
        }
        // SAFETY: inside the block, which was checked to be aligned and plausible.
        unsafe { std::ptr::read_volatile((self.base + offset) as *const u64) }
    }

    #[inline]
    pub fn u32(&self, offset: u64) -> u32 {
        if !offset.is_multiple_of(4) || offset + 4 > self.len {
            return 0;
        }
        // SAFETY: as in `word`.
        unsafe { std::ptr::read_volatile((self.base + offset) as *const u32) }
    }
}
