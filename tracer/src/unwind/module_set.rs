//! The loaded objects' unwind tables as the fast unwinder sees them, and how
//! that view is kept in step with `dlopen`/`dlclose`.
//!
//! A `ModuleSet` is immutable once published; captures read the current one
//! with a few atomic operations and no lock. A set records the value of the
//! load-event counter it was collected at, and a capture only uses a set
//! whose counter is current, so any `dlopen`/`dlclose` makes the next capture
//! collect a fresh one (under try-locks only: a capture never waits).
//!
//! `dlclose` unmaps memory the set points into. Its hook therefore marks a
//! close in progress (captures then take the libgcc path), and waits for a
//! grace period — every capture that might still hold an older set has
//! finished — before the library is really closed; after the close the
//! counter moves again, so no set collected while the library was listed is
//! ever used afterwards. Old sets are freed only after a grace period, too.

use std::cell::{Cell, UnsafeCell};
use std::ops::{Deref, Range};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize};
use std::sync::Mutex;

use framehop::x86_64::{CacheX86_64, UnwinderX86_64};
use framehop::{AllocationPolicy, ExplicitModuleSectionInfo, Module, Unwinder};

use crate::sys;

/// Bytes of a loaded object, read in place.
pub struct Mapped {
    start: *const u8,
    len: usize,
}

// SAFETY: the bytes are read-only mapped memory of a loaded object; sharing
// the pointer between threads only ever reads it.
unsafe impl Send for Mapped {}
// SAFETY: as above: nothing writes through the pointer.
unsafe impl Sync for Mapped {}

impl Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `start..start + len` lies inside a loaded segment of an
        // object that was listed (`loaded_objects`) when this set was
        // collected; the set is only used while that object stays loaded
        // (see the module comment: dlclose waits for every capture that
        // could hold this set, and later captures reject it).
        unsafe { std::slice::from_raw_parts(self.start, self.len) }
    }
}

/// framehop's policy that lets gimli allocate as it evaluates a frame's
/// CFI program, with rows of at most [`RULES_PER_ROW`] register rules where
/// gimli's own hold 192: the rows are copied by value on the stack, and at
/// 192 rules a rule cache miss took 17 KiB of the program's stack, more
/// than a coroutine's or an alternate signal stack's whole size.
pub struct FewRules;

/// x86_64 code saves at most its 16 general registers and the return
/// address; a CFI program that sets more rules is refused by gimli, and the
/// stack ends there.
const RULES_PER_ROW: usize = 20;

impl<O: gimli::ReaderOffset> gimli::UnwindContextStorage<O> for FewRules {
    type Rules = [(gimli::Register, gimli::RegisterRule<O>); RULES_PER_ROW];
    type Stack = Box<[gimli::UnwindTableRow<O, Self>; 4]>;
}

impl<R: gimli::Reader> gimli::EvaluationStorage<R> for FewRules {
    type Stack = Vec<gimli::Value>;
    type ExpressionStack = Vec<(R, R)>;
    type Result = Vec<gimli::Piece<R>>;
}

impl AllocationPolicy for FewRules {
    type GimliUnwindContextStorage<O: gimli::ReaderOffset> = FewRules;
    type GimliEvaluationStorage<R: gimli::Reader> = FewRules;
}

pub type RuleCache = CacheX86_64<FewRules>;

pub struct ModuleSet {
    /// `LOAD_EVENTS` when the objects were listed.
    events: u64,
    pub unwinder: UnwinderX86_64<Mapped, FewRules>,
    /// Every loaded object: address range and whether it has unwind tables; sorted.
    objects: Vec<(u64, u64, bool)>,
    /// A capture met code of an object this set does not list.
    noted_unlisted: AtomicBool,
}

/// Where an address lies, as far as a set knows.
pub enum Place {
    /// In an object whose unwind tables the unwinder has.
    Unwindable,
    /// In an object without usable unwind tables: the stack ends there.
    NoTables,
    /// In no object the set lists.
    Unknown,
}

impl ModuleSet {
    /// The load events seen when the objects were listed: a set with the
    /// same count has the same unwind rules.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// `recent` holds the objects found last (under this set or another).
    pub fn place(&self, address: u64, recent: &mut RecentObjects) -> Place {
        if recent.events != self.events {
            *recent = RecentObjects { events: self.events, ..RecentObjects::EMPTY };
        }
        let object = match recent.find(address) {
            Some(object) => object,
            None => {
                let index = self.objects.partition_point(|&(start, _, _)| start <= address);
                match index.checked_sub(1).map(|i| self.objects[i]) {
                    Some(object) if address < object.1 => recent.put_first(object, recent.objects.len() - 1),
                    _ => return Place::Unknown,
                }
            }
        };
        if object.2 {
            Place::Unwindable
        } else {
            Place::NoTables
        }
    }
}

/// The objects (start, end, has tables) the captures of a cache slot found
/// last, the latest first, under the set of load events `events`. A stack's
/// frames mostly alternate among a handful of objects (the interpreter, an
/// extension module, libtorch, libc), and the next capture meets the same
/// ones, where a binary search over the hundreds a torch process loads is a
/// chain of dependent loads: a fifth of a capture's time when only the last
/// object of the capture was kept.
pub struct RecentObjects {
    events: u64,
    objects: [(u64, u64, bool); 4],
}

impl RecentObjects {
    /// Matches no set (their events start above 0) and holds no object.
    pub const EMPTY: RecentObjects = RecentObjects { events: 0, objects: [(0, 0, false); 4] };

    fn find(&mut self, address: u64) -> Option<(u64, u64, bool)> {
        let at = self.objects.iter().position(|&(start, end, _)| start <= address && address < end)?;
        Some(self.put_first(self.objects[at], at))
    }

    /// Makes `object` the latest in place of the one at `replaced` (itself,
    /// or the oldest for an object not held).
    fn put_first(&mut self, object: (u64, u64, bool), replaced: usize) -> (u64, u64, bool) {
        self.objects.copy_within(0..replaced, 1);
        self.objects[0] = object;
        object
    }
}

/// Moves on every dlopen/dlclose (before and after); starts above 0 so that
/// no real set matches a zeroed one.
static LOAD_EVENTS: AtomicU64 = AtomicU64::new(1);
/// dlclose calls in progress.
static CLOSING: AtomicUsize = AtomicUsize::new(0);
/// Set for good when a grace period could not complete.
static DISABLED: AtomicBool = AtomicBool::new(false);
static CURRENT: AtomicPtr<ModuleSet> = AtomicPtr::new(std::ptr::null_mut());
static COLLECTING: AtomicBool = AtomicBool::new(false);

/// Captures in progress, counted by the parity of the generation they
/// started in; a grace period flips the generation and waits for the old
/// parity to drain. Each cache slot has its own counters (only its holder
/// writes them, so captures on different threads share no written line);
/// `SHARED_READERS` counts the captures that found every slot busy.
#[repr(align(128))]
pub struct Readers([AtomicUsize; 2]);
static SHARED_READERS: Readers = Readers([AtomicUsize::new(0), AtomicUsize::new(0)]);
static GENERATION: AtomicUsize = AtomicUsize::new(0);
/// Serializes grace periods.
static GRACE: Mutex<()> = Mutex::new(());
/// Sets replaced by a newer one, freed after the next grace period.
static RETIRED: Mutex<Vec<SetPtr>> = Mutex::new(Vec::new());

struct SetPtr(*mut ModuleSet);
// SAFETY: a retired set is owned by the retired list alone; it moves
// between threads only to be freed.
unsafe impl Send for SetPtr {}

/// How long a grace period may take before the fast path is given up.
const GRACE_TIMEOUT_NS: u64 = 2_000_000_000;

/// The current set, held for one capture.
pub struct ReadGuard<'r> {
    readers: &'r Readers,
    parity: usize,
    set: *const ModuleSet,
}

impl ReadGuard<'_> {
    pub fn set(&self) -> &ModuleSet {
        // SAFETY: the set was current after this reader registered, so it is
        // freed only after a grace period that waits for this guard's drop.
        unsafe { &*self.set }
    }
}

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        self.readers.0[self.parity].fetch_sub(1, SeqCst);
    }
}

pub enum Access<'r> {
    Ready(ReadGuard<'r>),
    /// No set, or an outdated one: collect a new one first.
    Stale,
    /// A dlclose is in progress, or the fast path is off: use libgcc.
    Unavailable,
}

/// Registers a capture counted in `readers` and returns the current set.
pub fn read(readers: &Readers) -> Access<'_> {
    let parity = loop {
        let generation = GENERATION.load(SeqCst);
        let parity = generation & 1;
        readers.0[parity].fetch_add(1, SeqCst);
        if GENERATION.load(SeqCst) == generation {
            break parity;
        }
        readers.0[parity].fetch_sub(1, SeqCst);
    };
    let guard = ReadGuard { readers, parity, set: CURRENT.load(SeqCst) };
    if CLOSING.load(SeqCst) != 0 || DISABLED.load(SeqCst) {
        return Access::Unavailable;
    }
    // SAFETY: a non-null current set stays allocated while `guard` is held.
    if guard.set.is_null() || unsafe { (*guard.set).events } != LOAD_EVENTS.load(SeqCst) {
        return Access::Stale;
    }
    Access::Ready(guard)
}

/// Collects and publishes a fresh set; false if that cannot be done now
/// (another thread is at it, a dlclose is in progress).
pub fn refresh() -> bool {
    if COLLECTING.swap(true, SeqCst) {
        return false;
    }
    let published = collect_and_publish();
    COLLECTING.store(false, SeqCst);
    if published && RETIRED.try_lock().is_ok_and(|r| !r.is_empty()) {
        grace_period(false);
    }
    published
}

fn collect_and_publish() -> bool {
    let events = LOAD_EVENTS.load(SeqCst);
    if CLOSING.load(SeqCst) != 0 {
        return false;
    }
    let Some(set) = collect(events) else { return false };
    let set = Box::new(set);
    if LOAD_EVENTS.load(SeqCst) != events || CLOSING.load(SeqCst) != 0 {
        return false; // never published: nobody else saw it
    }
    let Ok(mut retired) = RETIRED.try_lock() else { return false };
    let old = CURRENT.swap(Box::into_raw(set), SeqCst);
    if !old.is_null() {
        retired.push(SetPtr(old));
    }
    true
}

/// Whether glibc knows an object containing `address` (`_dl_find_object`,
/// glibc 2.35 and later: lock-free).
pub fn object_is_loaded(address: u64) -> bool {
    #[repr(C)]
    struct DlFindObject {
        flags: u64,
        map_start: *mut libc::c_void,
        map_end: *mut libc::c_void,
        link_map: *mut libc::c_void,
        eh_frame: *mut libc::c_void,
        reserved: [u64; 7],
    }
    type FindObject = unsafe extern "C" fn(*mut libc::c_void, *mut DlFindObject) -> libc::c_int;
    static FIND: AtomicUsize = AtomicUsize::new(0);
    let mut find = FIND.load(SeqCst);
    if find == 0 {
        // dlsym's allocations reach glibc directly while this thread is in the tracer.
        find = crate::sys::global_symbol(c"_dl_find_object").unwrap_or(0);
        FIND.store(if find == 0 { 1 } else { find }, SeqCst);
    }
    if find <= 1 {
        return false;
    }
    // SAFETY: `find` is glibc's _dl_find_object, whose C signature FindObject
    // spells; it fills the result structure and reads nothing else of ours.
    unsafe {
        let find: FindObject = std::mem::transmute::<usize, FindObject>(find);
        let mut result: DlFindObject = std::mem::zeroed();
        find(address as *mut libc::c_void, &mut result) == 0
    }
}

/// An object's code was found that the current set does not list.
pub fn note_unlisted_object(set: &ModuleSet) {
    static NOTED: AtomicUsize = AtomicUsize::new(0);
    // Once per set, and bounded overall, so that an object dl_iterate_phdr
    // never lists cannot make every capture collect again.
    if !set.noted_unlisted.swap(true, SeqCst) && NOTED.fetch_add(1, SeqCst) < 100_000 {
        LOAD_EVENTS.fetch_add(1, SeqCst);
    }
}

/// The count of load events so far, which moves whenever the loaded objects
/// may have changed: `None` once the fast path is disabled, when objects
/// loaded behind the hooks' back are no longer noticed.
pub fn load_events() -> Option<u64> {
    let events = LOAD_EVENTS.load(SeqCst);
    (!DISABLED.load(SeqCst)).then_some(events)
}

/// The `dlopen` hook, before and after the real call.
pub fn objects_changing() {
    LOAD_EVENTS.fetch_add(1, SeqCst);
}

/// Before the real dlclose: from now on, and until `closed`, no capture
/// uses a set, and none that started earlier is still running.
/// `may_wait` is false when this thread may itself be inside a capture (or
/// is forking); then the fast path is given up, as nothing can be waited for.
pub fn closing(may_wait: bool) {
    CLOSING.fetch_add(1, SeqCst);
    LOAD_EVENTS.fetch_add(1, SeqCst);
    if !may_wait || !grace_period(true) {
        disable("a dlclose could not wait for stack captures in progress");
    }
}

/// After the real dlclose.
pub fn closed() {
    LOAD_EVENTS.fetch_add(1, SeqCst);
    CLOSING.fetch_sub(1, SeqCst);
}

pub fn disable(why: &str) {
    if !DISABLED.swap(true, SeqCst) {
        sys::print_stderr(&format!("tracer: {why}; stacks are captured with libgcc's unwinder from now on\n"));
    }
}

/// Waits until every capture that started before now has finished, then
/// frees the sets retired before now. False if that took too long.
fn grace_period(blocking: bool) -> bool {
    let _grace = if blocking {
        crate::lock(&GRACE)
    } else {
        match GRACE.try_lock() {
            Ok(guard) => guard,
            Err(_) => return true,
        }
    };
    let retired = std::mem::take(&mut *crate::lock(&RETIRED));
    let old = GENERATION.fetch_add(1, SeqCst) & 1;
    let started = sys::monotonic_ns();
    let mut spins = 0u32;
    let busy = || {
        SHARED_READERS.0[old].load(SeqCst) != 0 || POOL.slots.iter().any(|slot| slot.readers.0[old].load(SeqCst) != 0)
    };
    while busy() {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(64) {
            std::thread::yield_now();
            if sys::monotonic_ns().saturating_sub(started) > GRACE_TIMEOUT_NS {
                // A capture that never finishes: its set must stay.
                std::mem::forget(retired);
                return false;
            }
        } else {
            std::hint::spin_loop();
        }
    }
    for SetPtr(set) in retired {
        // SAFETY: the set was replaced before the generation flipped, so
        // only captures of the old parity could hold it, and they are done.
        drop(unsafe { Box::from_raw(set) });
    }
    true
}

fn collect(events: u64) -> Option<ModuleSet> {
    let mut set = ModuleSet {
        events,
        unwinder: UnwinderX86_64::new(),
        objects: Vec::with_capacity(64),
        noted_unlisted: AtomicBool::new(false),
    };
    // SAFETY: the callback only reads the program headers and mapped segments
    // of the objects it is passed, and `data` is `set`.
    let listed = unsafe { crate::loaded_objects::for_each(add_object, (&mut set as *mut ModuleSet).cast()) };
    set.objects.sort_unstable_by_key(|o| o.0);
    listed.then_some(set)
}

unsafe extern "C" fn add_object(info: *mut libc::dl_phdr_info, _size: usize, data: *mut libc::c_void) -> i32 {
    // SAFETY: the listing passes a valid dl_phdr_info for the duration of
    // the callback, and `data` is the set passed to it.
    let (info, set) = unsafe { (&*info, &mut *data.cast::<ModuleSet>()) };
    if info.dlpi_phdr.is_null() {
        return 0;
    }
    // SAFETY: the listing guarantees `dlpi_phnum` headers at `dlpi_phdr`.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let bias = info.dlpi_addr;
    let loads: Vec<Range<u64>> = phdrs
        .iter()
        .filter(|ph| ph.p_type == libc::PT_LOAD && ph.p_memsz > 0)
        .map(|ph| bias.wrapping_add(ph.p_vaddr)..bias.wrapping_add(ph.p_vaddr).wrapping_add(ph.p_memsz))
        .collect();
    let (Some(start), Some(end)) = (loads.iter().map(|r| r.start).min(), loads.iter().map(|r| r.end).max()) else {
        return 0;
    };
    let module = phdrs
        .iter()
        .find(|ph| ph.p_type == libc::PT_GNU_EH_FRAME)
        .and_then(|ph| unwind_module(bias, start..end, bias.wrapping_add(ph.p_vaddr), ph.p_memsz, &loads));
    let tables = module.is_some();
    if let Some(module) = module {
        set.unwinder.add_module(module);
    }
    set.objects.push((start, end, tables));
    0
}

/// The framehop module for an object, from its `.eh_frame_hdr` in memory.
fn unwind_module(bias: u64, range: Range<u64>, hdr: u64, hdr_len: u64, loads: &[Range<u64>]) -> Option<Module<Mapped>> {
    let segment_end = |address: u64| loads.iter().find(|r| r.start <= address && address < r.end).map(|r| r.end);
    let hdr_end = segment_end(hdr)?;
    if hdr_len < 8 || hdr.checked_add(hdr_len)? > hdr_end || (range.end - range.start) > u32::MAX as u64 {
        return None;
    }
    // SAFETY: the header lies inside a loaded segment of this object, which
    // stays mapped while the listing runs (see `loaded_objects`).
    let header = unsafe { std::slice::from_raw_parts(hdr as *const u8, hdr_len as usize) };
    if header[0] != 1 {
        return None; // unknown .eh_frame_hdr version
    }
    let eh_frame = decode_pointer(header[1], &header[4..], hdr + 4)?;
    let eh_frame_end = segment_end(eh_frame)?;
    let mapped = |start: u64, end: u64| Mapped { start: start as *const u8, len: (end - start) as usize };
    let info = ExplicitModuleSectionInfo {
        base_svma: 0,
        eh_frame_hdr_svma: Some(hdr - bias..hdr + hdr_len - bias),
        eh_frame_hdr: Some(mapped(hdr, hdr + hdr_len)),
        eh_frame_svma: Some(eh_frame - bias..eh_frame_end - bias),
        eh_frame: Some(mapped(eh_frame, eh_frame_end)),
        text_svma: None,
        text: None,
        stubs_svma: None,
        stub_helper_svma: None,
        got_svma: None,
        unwind_info: None,
        debug_frame: None,
        text_segment_svma: None,
        text_segment: None,
    };
    Some(Module::new(String::new(), range, bias, info))
}

/// Decodes the DW_EH_PE-encoded `eh_frame_ptr` of an `.eh_frame_hdr`.
fn decode_pointer(encoding: u8, bytes: &[u8], address: u64) -> Option<u64> {
    let value = match encoding & 0x0f {
        0x00 | 0x04 => u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?),
        0x03 => u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as u64,
        0x0b => i32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as i64 as u64,
        0x0c => i64::from_le_bytes(bytes.get(..8)?.try_into().ok()?) as u64,
        _ => return None,
    };
    match encoding & 0x70 {
        0x00 => Some(value),
        0x10 => Some(address.wrapping_add(value)),
        _ => None,
    }
}

/// framehop's rule cache is direct-mapped by address modulo this many
/// entries; only the spread of addresses over [`RuleCaches`] depends on it.
const FRAMEHOP_CACHE_ENTRIES: u64 = 509;

/// framehop caches per slot. One holds 509 rules: too few for a process
/// running libtorch, where the misses (each a search of the object's CFI
/// and an evaluation of its FDE) took 3-5% of the traced run. Thirty-two
/// make a direct-mapped cache of 16,288 rules at about 400 KiB per slot: in
/// the steady state of a PyTorch training loop loading its own batches,
/// sixteen missed 1.5% of lookups (on conflicts), thirty-two 0.2%.
const CACHES_PER_SLOT: usize = 32;
const _: () = assert!(CACHES_PER_SLOT.is_power_of_two());

/// Several framehop caches used as one larger cache: the cache an address
/// goes to is picked by the address bits that framehop's own slot choice
/// leaves out. Beside them, the objects their captures found last.
pub struct RuleCaches {
    rules: Vec<RuleCache>,
    pub recent_objects: RecentObjects,
}

impl RuleCaches {
    /// `count`: a power of two, so that picking a cache is a mask, not a
    /// division (one per frame unwound, where a `div` was a tenth of a
    /// capture's own time).
    fn new(count: usize) -> RuleCaches {
        debug_assert!(count.is_power_of_two());
        RuleCaches { rules: (0..count).map(|_| RuleCache::new_in()).collect(), recent_objects: RecentObjects::EMPTY }
    }

    /// The cache that holds the rule for `address`, if any does.
    pub fn for_address(&mut self, address: u64) -> &mut RuleCache {
        let index = (address / FRAMEHOP_CACHE_ENTRIES) as usize & (self.rules.len() - 1);
        &mut self.rules[index]
    }
}

/// Unwind-rule caches, claimed one per capture, each with the reader
/// counters of the capture holding it; a thread goes back to the slot it
/// used last, so each slot keeps the rules of its own thread's stacks.
const SLOTS: usize = 64;

#[repr(align(128))]
pub struct Slot {
    busy: AtomicBool,
    readers: Readers,
    caches: UnsafeCell<Option<RuleCaches>>,
}

// SAFETY: `caches` is only touched by the thread that set `busy`; the rest
// is atomics.
unsafe impl Sync for Slot {}

/// The slots, and how many of them were ever claimed: a slot's caches are
/// made at its first claim (about 400 KiB), and the rules any thread
/// cached serve every other, so a thread new to the pool takes a slot that
/// was claimed before when one is free. The slots in use then number the
/// captures that ran at once, not the threads that ever allocated (a
/// program starting a thread an epoch made a slot an epoch).
struct SlotPool {
    slots: [Slot; SLOTS],
    claimed: AtomicUsize,
}

impl SlotPool {
    const fn new() -> SlotPool {
        SlotPool {
            slots: [const {
                Slot {
                    busy: AtomicBool::new(false),
                    readers: Readers([AtomicUsize::new(0), AtomicUsize::new(0)]),
                    caches: UnsafeCell::new(None),
                }
            }; SLOTS],
            claimed: AtomicUsize::new(0),
        }
    }

    /// Sets a free slot busy and returns its index: `preferred` first (the
    /// caller's last), else one claimed before, from a place spread by
    /// `spread` among them, else one never claimed; `None` when all are busy.
    fn claim(&self, preferred: usize, spread: usize) -> Option<usize> {
        let claimed = self.claimed.load(Relaxed).min(SLOTS);
        let start = if preferred < claimed { preferred } else { spread % claimed.max(1) };
        let earlier = (0..claimed).map(|i| (start + i) % claimed);
        let index = earlier.chain(claimed..SLOTS).find(|&index| {
            let slot = &self.slots[index];
            !slot.busy.load(Relaxed) && !slot.busy.swap(true, Acquire)
        })?;
        if index >= claimed {
            self.claimed.fetch_max(index + 1, Relaxed);
        }
        Some(index)
    }
}

static POOL: SlotPool = SlotPool::new();

thread_local! {
    /// The slot this thread used last. Const-initialized, no destructor.
    static LAST_SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

pub enum CacheClaim {
    Slot(&'static Slot),
    /// Every slot was busy: a cache for this capture only.
    Own(RuleCaches),
}

impl CacheClaim {
    pub fn claim() -> CacheClaim {
        let preferred = LAST_SLOT.try_with(Cell::get).unwrap_or(usize::MAX);
        // SAFETY: pthread_self has no preconditions.
        let spread = (unsafe { libc::pthread_self() } as usize) >> 12;
        match POOL.claim(preferred, spread) {
            Some(index) => {
                let _ = LAST_SLOT.try_with(|s| s.set(index));
                CacheClaim::Slot(&POOL.slots[index])
            }
            None => CacheClaim::Own(RuleCaches::new(1)),
        }
    }

    /// The rule caches and the reader counters of this capture.
    pub fn parts(&mut self) -> (&mut RuleCaches, &Readers) {
        match self {
            CacheClaim::Slot(slot) => {
                // SAFETY: this claim set `busy`, so no other thread touches
                // the caches until the claim is dropped.
                let caches = unsafe { &mut *slot.caches.get() }.get_or_insert_with(|| RuleCaches::new(CACHES_PER_SLOT));
                (caches, &slot.readers)
            }
            CacheClaim::Own(caches) => (caches, &SHARED_READERS),
        }
    }
}

impl Drop for CacheClaim {
    fn drop(&mut self) {
        if let CacheClaim::Slot(slot) = self {
            slot.busy.store(false, Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_new_to_the_pool_take_slots_claimed_before() {
        let pool = SlotPool::new();
        let release = |index: usize| pool.slots[index].busy.store(false, Release);
        // Threads that capture in turn, each new to the pool: one slot.
        for spread in [7, 1000, 12_345] {
            let index = pool.claim(usize::MAX, spread);
            assert_eq!(index, Some(0));
            release(0);
        }
        // Three at once: three slots; a fourth thread later takes one of them.
        let held: Vec<usize> = (0..3).map(|spread| pool.claim(usize::MAX, spread).unwrap()).collect();
        assert_eq!(held, [0, 1, 2]);
        held.iter().for_each(|&index| release(index));
        for spread in 0..6 {
            let index = pool.claim(usize::MAX, spread).unwrap();
            assert_eq!(index, spread % 3, "spread over the slots claimed before");
            release(index);
        }
        // A thread goes back to its own slot, even while others are free.
        assert_eq!(pool.claim(2, 0), Some(2));
        // With every slot busy there is none.
        let rest: Vec<usize> = (0..SLOTS - 1).map(|_| pool.claim(usize::MAX, 0).unwrap()).collect();
        assert_eq!(rest.len() + 1, SLOTS);
        assert_eq!(pool.claim(usize::MAX, 0), None);
        assert_eq!(pool.claimed.load(Relaxed), SLOTS);
    }

    #[test]
    fn an_address_is_placed_in_its_object_whether_or_not_it_was_found_recently() {
        let set_of = |events, objects| ModuleSet {
            events,
            unwinder: UnwinderX86_64::new(),
            objects,
            noted_unlisted: AtomicBool::new(false),
        };
        let objects: Vec<(u64, u64, bool)> = (0..300).map(|k| (0x1000 * k, 0x1000 * k + 0x800, k % 3 != 0)).collect();
        let set = set_of(1, objects.clone());
        let mut recent = RecentObjects::EMPTY;
        // Frames alternating among six objects, and addresses in no object.
        for round in 0..50u64 {
            for k in [7u64, 8, 7, 120, 299, 3, 7, 42] {
                let address = 0x1000 * k + (round * 16) % 0x800;
                let expected = if objects[k as usize].2 { "tables" } else { "none" };
                let got = match set.place(address, &mut recent) {
                    Place::Unwindable => "tables",
                    Place::NoTables => "none",
                    Place::Unknown => "unknown",
                };
                assert_eq!(got, expected, "address {address:#x}");
                assert_eq!(recent.objects[0], objects[k as usize], "the object found is the latest");
                assert!(matches!(set.place(0x1000 * k + 0x900, &mut recent), Place::Unknown), "between objects");
            }
        }
        assert!(matches!(set.place(0x1000 * 300, &mut recent), Place::Unknown), "past the last object");

        // Another set (after a dlclose, say): what the last one found is forgotten.
        let unloaded = set_of(2, vec![objects[8]]);
        assert!(matches!(set.place(0x1000 * 7, &mut recent), Place::Unwindable));
        assert!(matches!(unloaded.place(0x1000 * 7, &mut recent), Place::Unknown), "object 7 is gone");
        assert!(matches!(unloaded.place(0x1000 * 8, &mut recent), Place::Unwindable));
    }

    #[test]
    fn addresses_sharing_a_framehop_slot_get_caches_of_their_own() {
        let mut caches = RuleCaches::new(CACHES_PER_SLOT);
        let cache_of = |caches: &mut RuleCaches, address| caches.for_address(address) as *const RuleCache;
        let first = cache_of(&mut caches, 0x7f00_1234);
        assert_eq!(cache_of(&mut caches, 0x7f00_1234), first);
        let neighbours: std::collections::HashSet<_> = (0..CACHES_PER_SLOT as u64)
            .map(|i| cache_of(&mut caches, 0x7f00_1234 + i * FRAMEHOP_CACHE_ENTRIES))
            .collect();
        assert_eq!(neighbours.len(), CACHES_PER_SLOT, "each one in a cache of its own");
        let mut single = RuleCaches::new(1);
        assert_eq!(cache_of(&mut single, 1), cache_of(&mut single, 1 + FRAMEHOP_CACHE_ENTRIES));
    }
}
