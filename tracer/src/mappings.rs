//! The anonymous memory mappings alive, by address range, and their
//! per-(stack, birth epoch) counters.
//!
//! A mapping is recorded whole when it is made; `munmap`, `mremap` and
//! `MAP_FIXED` may later take away any page range of it, or of several at
//! once. Each recorded range keeps the stack and birth epoch of the call that
//! made it, however it is cut or moved. A mapping counts as one live object
//! until its last page is gone. When sampling, a recorded mapping stands
//! for more than itself ([`crate::sampling::Sampling::scale`]): each page
//! taken away takes its share of the bytes it stands for. The pages a
//! `mremap` grows a mapping by are a mapping of their own, made by that
//! call and drawn by their own bytes, whether or not the old pages were.
//!
//! Mapping calls are rare next to malloc, so one ordered map under a mutex
//! does. The session holds the lock across the real system call, so that a
//! range unmapped and mapped again by another thread at once is never
//! recorded out of order.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use trace_format::SiteCounters;

use crate::room::OutOfMemory;
use crate::sampling::scaled;
use crate::sites::{Scope, Sites, Totals, ANY_THREAD};
use crate::stacks::{StackId, StackKind};
use crate::sys::MapsLine;

/// The table's lock orders every mapping change: one stripe of counters.
const MAPPING_STRIPE: u8 = 0;

/// Whose memory a range is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owner {
    stack: StackId,
    birth_epoch: u32,
    /// The mapping call the range comes from (its pieces share this).
    mapping: u64,
}

#[derive(Debug, Clone, Copy)]
struct Range {
    end: usize,
    owner: Owner,
}

/// A part of a recorded range, cut out of the table.
struct Piece {
    start: usize,
    end: usize,
    owner: Owner,
}

pub struct Mappings {
    table: Mutex<Table>,
    sites: Sites,
}

/// The recorded ranges; they never overlap.
pub struct Table {
    by_start: BTreeMap<usize, Range>,
    /// What is left of each mapping call with ranges in the table.
    calls: BTreeMap<u64, Call>,
    next_mapping: u64,
    page_size: usize,
}

/// What is left of one recorded mapping call.
struct Call {
    /// Its ranges in the table.
    pieces: u32,
    /// Their bytes.
    bytes: u64,
    /// The bytes they stand for: their own unless the call was sampled.
    counted_bytes: u64,
    /// The mappings the call stands for: one unless it was sampled.
    counted: u64,
}

/// The table, locked, with the counters it keeps up to date.
pub struct Locked<'a> {
    table: MutexGuard<'a, Table>,
    sites: &'a Sites,
}

impl Mappings {
    pub fn new(page_size: usize) -> Mappings {
        let table = Table { by_start: BTreeMap::new(), calls: BTreeMap::new(), next_mapping: 0, page_size };
        Mappings { table: Mutex::new(table), sites: Sites::default() }
    }

    pub fn lock(&self) -> Locked<'_> {
        Locked { table: crate::lock(&self.table), sites: &self.sites }
    }

    /// The mappings' counters for a snapshot (see [`Sites::collect`]).
    pub fn collect(&self, scope: Scope, report: &mut impl FnMut(SiteCounters)) -> Result<Totals, OutOfMemory> {
        // Under the lock, so that the totals never see half of a change.
        let _table = crate::lock(&self.table);
        self.sites.collect(scope, report)
    }
}

impl Locked<'_> {
    /// Pages `[start, start + len)` were mapped from `stack` by a call that
    /// stands for `scale` of its kind (1 unless it was sampled).
    pub fn mapped(
        &mut self,
        start: usize,
        len: usize,
        stack: StackId,
        birth_epoch: u32,
        scale: f64,
    ) -> Result<(), OutOfMemory> {
        let end = start.saturating_add(self.table.page_rounded(len));
        // Whatever the table still holds there was unmapped by a path the
        // hooks never saw; it is gone now.
        self.unmapped(start, end - start);
        if start == end {
            return Ok(());
        }
        let table = &mut *self.table;
        let mapping = table.next_mapping;
        table.next_mapping += 1;
        let bytes = (end - start) as u64;
        let (counted, counted_bytes) = scaled(bytes, scale);
        table.calls.insert(mapping, Call { pieces: 0, bytes, counted_bytes, counted });
        table.insert(start, end, Owner { stack, birth_epoch, mapping });
        // Mapping calls are rare: the shared slot of the live totals serves.
        self.sites.born(MAPPING_STRIPE, ANY_THREAD, stack, birth_epoch, counted, counted_bytes)
    }

    /// Pages `[start, start + len)` were unmapped, or replaced by a mapping
    /// that is not recorded.
    pub fn unmapped(&mut self, start: usize, len: usize) {
        let end = start.saturating_add(self.table.page_rounded(len));
        if start == end {
            return;
        }
        for piece in self.table.cut(start, end) {
            let (count, bytes) = self.table.release(piece.owner.mapping, (piece.end - piece.start) as u64);
            self.sites.released(MAPPING_STRIPE, ANY_THREAD, piece.owner.stack, piece.owner.birth_epoch, count, bytes);
        }
    }

    /// The stack of the recorded mapping the page at `address` belongs to.
    pub fn owner_at(&self, address: usize) -> Option<StackId> {
        self.table.range_at(address).map(|(_, range)| range.owner.stack)
    }

    /// `mremap` moved `[old, old + len)` to `new`: the recorded pieces move
    /// with their owners, the counters do not change.
    pub fn moved(&mut self, old: usize, len: usize, new: usize) {
        let len = self.table.page_rounded(len);
        if old == new || len == 0 {
            return;
        }
        for piece in self.table.cut(old, old.saturating_add(len)) {
            let start = new + (piece.start - old);
            self.table.insert(start, start + (piece.end - piece.start), piece.owner);
        }
    }
}

/// What a mapping the table does not hold would have been recorded as,
/// read from its line of /proc/self/maps ("start-end perms offset dev inode
/// path"), by the rules of the `mmap` hook: anonymous memory that can be
/// accessed (private, or shared, which shows as "/dev/zero (deleted)"), or
/// shared memory mapped shared and writable (a file of tmpfs or hugetlbfs,
/// which the path tells: see [`crate::sys::is_shared_memory_path`]). Other
/// file mappings, `PROT_NONE` reservations and the kernel's own areas
/// ("[stack]", "[vdso]") are not recorded. The protection is the mapping's
/// now, not its first.
pub fn kind_in_maps_line(line: &[u8]) -> Option<StackKind> {
    let MapsLine { perms, inode, path, .. } = MapsLine::parse(line)?;
    let &[read, write, execute, sharing] = perms else { return None };
    if [read, write, execute] == *b"---" {
        return None;
    }
    let anonymous = match sharing {
        b's' => path.starts_with(b"/dev/zero"),
        _ => inode == b"0" && (path.is_empty() || path.starts_with(b"[anon:")),
    };
    if anonymous {
        Some(StackKind::Mapping)
    } else if sharing == b's' && write == b'w' && crate::sys::is_shared_memory_path(path) {
        Some(StackKind::SharedMapping)
    } else {
        None
    }
}

impl Table {
    fn page_rounded(&self, len: usize) -> usize {
        len.div_ceil(self.page_size).saturating_mul(self.page_size)
    }

    fn range_at(&self, address: usize) -> Option<(&usize, &Range)> {
        self.by_start.range(..=address).next_back().filter(|(_, range)| address < range.end)
    }

    fn insert(&mut self, start: usize, end: usize, owner: Owner) {
        if start < end {
            self.by_start.insert(start, Range { end, owner });
            if let Some(call) = self.calls.get_mut(&owner.mapping) {
                call.pieces += 1;
            }
        }
    }

    /// The (mappings, bytes) that `bytes` cut out of `mapping`'s ranges
    /// stand for: their share of what the call stands for, and all that is
    /// left of it, its count included, with its last piece.
    fn release(&mut self, mapping: u64, bytes: u64) -> (u64, u64) {
        let Some(call) = self.calls.get_mut(&mapping) else { return (0, 0) };
        if call.pieces == 0 {
            let all = (call.counted, call.counted_bytes);
            self.calls.remove(&mapping);
            return all;
        }
        let share = (u128::from(bytes) * u128::from(call.counted_bytes) / u128::from(call.bytes.max(1))) as u64;
        let share = share.min(call.counted_bytes);
        call.bytes = call.bytes.saturating_sub(bytes);
        call.counted_bytes -= share;
        (0, share)
    }

    /// Takes `[start, end)` out of every range it overlaps, and returns the
    /// parts taken out; the parts left keep their owners.
    fn cut(&mut self, start: usize, end: usize) -> Vec<Piece> {
        let first = self.range_at(start).map_or(start, |(&first, _)| first);
        let overlapping: Vec<usize> = self.by_start.range(first..end).map(|(&s, _)| s).collect();
        let mut taken = Vec::with_capacity(overlapping.len());
        for range_start in overlapping {
            let Some(range) = self.by_start.remove(&range_start) else { continue };
            if let Some(call) = self.calls.get_mut(&range.owner.mapping) {
                call.pieces -= 1;
            }
            self.insert(range_start, start.max(range_start).min(range.end), range.owner);
            self.insert(end.max(range_start).min(range.end), range.end, range.owner);
            let (cut_start, cut_end) = (start.max(range_start), end.min(range.end));
            if cut_start < cut_end {
                taken.push(Piece { start: cut_start, end: cut_end, owner: range.owner });
            }
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    fn live(mappings: &Mappings) -> (Totals, Vec<SiteCounters>) {
        let mut counters = Vec::new();
        let scope = Scope { current_epoch: 1, everything: true, first_birth_epoch: 0 };
        let totals = mappings.collect(scope, &mut |c| counters.push(c)).unwrap();
        counters.sort_unstable_by_key(|c| (c.stack, c.birth_epoch));
        (totals, counters)
    }

    fn ranges(mappings: &Mappings) -> Vec<(usize, usize, StackId)> {
        let table = crate::lock(&mappings.table);
        table.by_start.iter().map(|(&s, r)| (s, r.end, r.owner.stack)).collect()
    }

    #[test]
    fn lengths_are_whole_pages() {
        let mappings = Mappings::new(PAGE);
        mappings.lock().mapped(0x10000, 100, 7, 0, 1.0).unwrap();
        assert_eq!(live(&mappings).0, Totals { live_bytes: PAGE as u64, live_count: 1 });
        mappings.lock().unmapped(0x10000, 1);
        assert_eq!(live(&mappings).0, Totals::default());
    }

    #[test]
    fn unmapping_the_middle_splits_and_keeps_the_owner() {
        let mappings = Mappings::new(PAGE);
        mappings.lock().mapped(0x10000, 8 * PAGE, 7, 2, 1.0).unwrap();
        mappings.lock().unmapped(0x10000 + 2 * PAGE, 3 * PAGE);
        assert_eq!(ranges(&mappings), [(0x10000, 0x12000, 7), (0x15000, 0x18000, 7)]);
        let (totals, counters) = live(&mappings);
        assert_eq!(totals, Totals { live_bytes: 5 * PAGE as u64, live_count: 1 });
        assert_eq!((counters[0].birth_epoch, counters[0].allocated_bytes), (2, 8 * PAGE as u64));
        // The last piece going takes the mapping's count with it.
        mappings.lock().unmapped(0x10000, 2 * PAGE);
        assert_eq!(live(&mappings).0.live_count, 1);
        mappings.lock().unmapped(0x15000, 3 * PAGE);
        assert_eq!(live(&mappings).0, Totals::default());
    }

    #[test]
    fn one_unmap_may_cover_several_mappings_and_gaps() {
        let mappings = Mappings::new(PAGE);
        mappings.lock().mapped(0x10000, 2 * PAGE, 1, 0, 1.0).unwrap();
        mappings.lock().mapped(0x14000, 2 * PAGE, 2, 0, 1.0).unwrap();
        mappings.lock().mapped(0x20000, PAGE, 3, 0, 1.0).unwrap();
        // From the second page of the first to the first page of the second.
        mappings.lock().unmapped(0x11000, 0x4000);
        assert_eq!(ranges(&mappings), [(0x10000, 0x11000, 1), (0x15000, 0x16000, 2), (0x20000, 0x21000, 3)]);
        assert_eq!(live(&mappings).0, Totals { live_bytes: 3 * PAGE as u64, live_count: 3 });
        mappings.lock().unmapped(0, 0x100000);
        assert_eq!(live(&mappings).0, Totals::default());
        assert!(ranges(&mappings).is_empty());
    }

    #[test]
    fn a_mapping_over_recorded_pages_replaces_them() {
        let mappings = Mappings::new(PAGE);
        mappings.lock().mapped(0x10000, 4 * PAGE, 1, 0, 1.0).unwrap();
        mappings.lock().mapped(0x11000, PAGE, 2, 1, 1.0).unwrap();
        assert_eq!(ranges(&mappings), [(0x10000, 0x11000, 1), (0x11000, 0x12000, 2), (0x12000, 0x14000, 1)]);
        let (totals, counters) = live(&mappings);
        assert_eq!(totals, Totals { live_bytes: 4 * PAGE as u64, live_count: 2 });
        assert_eq!(counters[0].live_bytes, 3 * PAGE as u64);
    }

    #[test]
    fn moved_pieces_keep_owner_and_counts() {
        let mappings = Mappings::new(PAGE);
        mappings.lock().mapped(0x10000, 4 * PAGE, 1, 3, 1.0).unwrap();
        assert!(mappings.lock().owner_at(0x13fff) == Some(1) && mappings.lock().owner_at(0x14000).is_none());
        mappings.lock().moved(0x10000, 4 * PAGE, 0x80000);
        assert_eq!(ranges(&mappings), [(0x80000, 0x84000, 1)]);
        assert_eq!(live(&mappings).0, Totals { live_bytes: 4 * PAGE as u64, live_count: 1 });
        mappings.lock().unmapped(0x80000, 4 * PAGE);
        assert_eq!(live(&mappings).0, Totals::default());
    }

    #[test]
    fn a_sampled_mapping_counts_for_what_it_stands_for_however_it_is_cut() {
        let mappings = Mappings::new(PAGE);
        // Three pages standing for 2.5 times as much: 30 KiB, counted as 3 mappings (2.5 rounded).
        mappings.lock().mapped(0x10000, 3 * PAGE, 4, 1, 2.5).unwrap();
        let (totals, counters) = live(&mappings);
        assert_eq!(totals, Totals { live_bytes: 30 * 1024, live_count: 3 });
        assert_eq!((counters[0].allocated_count, counters[0].allocated_bytes), (3, 30 * 1024));
        // A page out of the middle takes its third, and the pieces left keep the rest.
        mappings.lock().unmapped(0x11000, PAGE);
        assert_eq!(live(&mappings).0, Totals { live_bytes: 20 * 1024, live_count: 3 });
        // Moved, its pieces keep their owner and what they stand for.
        mappings.lock().moved(0x12000, PAGE, 0x40000);
        assert_eq!(mappings.lock().owner_at(0x40000), Some(4));
        assert_eq!(live(&mappings).0, Totals { live_bytes: 20 * 1024, live_count: 3 });
        // The last page takes all that is left, whatever was rounded on the way.
        mappings.lock().unmapped(0x10000, PAGE);
        mappings.lock().unmapped(0x40000, PAGE);
        assert_eq!(live(&mappings).0, Totals::default());
        assert!(crate::lock(&mappings.table).calls.is_empty());
    }

    #[test]
    fn shares_of_an_odd_scale_add_up_to_the_whole() {
        let mappings = Mappings::new(PAGE);
        let scale = 1.0 / 3.0 + 1.0;
        mappings.lock().mapped(0x10000, 7 * PAGE, 1, 0, scale).unwrap();
        let whole = live(&mappings).0.live_bytes;
        assert_eq!(whole, (7.0 * PAGE as f64 * scale).round() as u64);
        let mut released = 0;
        for page in [3, 0, 6, 1, 5, 2, 4] {
            let before = live(&mappings).0.live_bytes;
            mappings.lock().unmapped(0x10000 + page * PAGE, PAGE);
            released += before - live(&mappings).0.live_bytes;
        }
        assert_eq!(released, whole);
        assert_eq!(live(&mappings).0, Totals::default());
    }

    #[test]
    fn an_empty_range_unmapped_leaves_the_table_alone() {
        let mappings = Mappings::new(PAGE);
        mappings.lock().mapped(0x10000, 4 * PAGE, 1, 0, 1.0).unwrap();
        mappings.lock().unmapped(0x12000, 0);
        assert_eq!(ranges(&mappings), [(0x10000, 0x14000, 1)]);
    }

    #[test]
    fn the_kind_of_an_unrecorded_mapping_is_read_from_its_maps_line() {
        let kind = |line: &str| kind_in_maps_line(line.as_bytes());
        assert_eq!(kind("7f3c00000000-7f3c00010000 rw-p 00000000 00:00 0 "), Some(StackKind::Mapping));
        assert_eq!(kind("7f3c00000000-7f3c00010000 rw-p 00000000 00:00 0"), Some(StackKind::Mapping));
        assert_eq!(kind("7f3c0000-7f3d0000 r--p 00000000 00:00 0      [anon:pool]"), Some(StackKind::Mapping));
        assert_eq!(kind("7f3c0000-7f3d0000 rw-s 00000000 00:01 2051   /dev/zero (deleted)"), Some(StackKind::Mapping));
        let shm = "7f3c0000-7f3d0000 rw-s 00000000 00:1a 77     /dev/shm/torch_1_2 (deleted)";
        assert_eq!(kind(shm), Some(StackKind::SharedMapping));
        assert_eq!(
            kind("7f3c0000-7f3d0000 rw-s 00000000 00:01 5 /memfd:batch (deleted)"),
            Some(StackKind::SharedMapping)
        );
        // Not recorded: reservations, private or read-only files, the kernel's areas.
        assert_eq!(kind("7f3c0000-7f3d0000 ---p 00000000 00:00 0 "), None);
        assert_eq!(kind("7f3c0000-7f3d0000 r--s 00000000 08:01 1234 /data/x.bin"), None);
        assert_eq!(kind("7f3c0000-7f3d0000 rw-p 00001000 08:01 1234 /usr/lib/libc.so.6"), None);
        assert_eq!(kind("7ffd0000-7ffd1000 rw-p 00000000 00:00 0      [stack]"), None);
        assert_eq!(kind("55550000-55560000 rw-p 00000000 00:00 0      [heap]"), None);
        assert_eq!(kind("garbage"), None);
        assert_eq!(kind(""), None);
    }

    /// Maps `fd` shared and writable, one page, and reads the kind of the
    /// mapping from its maps line. Left mapped: the test process ends soon.
    fn kind_of_shared_mapping(fd: i32) -> Option<StackKind> {
        let (protection, sharing) = (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED);
        // SAFETY: a new mapping chosen by the kernel, touching no existing memory.
        let address = unsafe { libc::mmap(std::ptr::null_mut(), PAGE, protection, sharing, fd, 0) };
        assert_ne!(address, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        crate::sys::maps_line_containing(address as u64, kind_in_maps_line).flatten()
    }

    /// Whether `path` lies on tmpfs, asked of statfs.
    fn is_on_tmpfs(path: &std::path::Path) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: an all-zero statfs is a valid value for statfs to overwrite.
        let mut status: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: the path is NUL-terminated; statfs writes only into `status`.
        let found = unsafe { libc::statfs(path.as_ptr(), &mut status) } == 0;
        assert!(found, "statfs {path:?}");
        status.f_type == libc::TMPFS_MAGIC
    }

    #[test]
    fn a_shared_file_mapping_is_shared_memory_only_on_tmpfs() {
        use std::os::fd::AsRawFd;
        let file = |path: &std::path::Path| {
            let file = std::fs::File::options().read(true).write(true).create(true).truncate(true).open(path).unwrap();
            file.set_len(PAGE as u64).unwrap();
            file
        };
        // A memfd, as a DataLoader worker's batch.
        // SAFETY: the name is NUL-terminated; the descriptor is owned below.
        let memfd = unsafe { libc::memfd_create(c"batch".as_ptr(), 0) };
        assert!(memfd >= 0);
        assert!(crate::sys::is_shared_memory_file(memfd));
        // SAFETY: `memfd` is open and this test's own.
        assert_eq!(unsafe { libc::ftruncate(memfd, PAGE as i64) }, 0);
        assert_eq!(kind_of_shared_mapping(memfd), Some(StackKind::SharedMapping));
        // A /dev/shm file, as shm_open makes, read again once removed.
        let shm_path = std::path::PathBuf::from(format!("/dev/shm/tracer-test-{}", std::process::id()));
        let shm = file(&shm_path);
        assert!(crate::sys::is_shared_memory_file(shm.as_raw_fd()));
        assert_eq!(kind_of_shared_mapping(shm.as_raw_fd()), Some(StackKind::SharedMapping));
        std::fs::remove_file(&shm_path).unwrap();
        assert_eq!(kind_of_shared_mapping(shm.as_raw_fd()), Some(StackKind::SharedMapping), "removed");
        // A file on disk beside the test binary (the target directory).
        let disk_path = std::env::current_exe().unwrap().with_extension(format!("mapped-{}", std::process::id()));
        let disk = file(&disk_path);
        let fd = disk.as_raw_fd();
        assert!(!is_on_tmpfs(&disk_path), "the test needs the target directory on a disk's filesystem");
        assert!(!crate::sys::is_shared_memory_file(fd));
        assert_eq!(kind_of_shared_mapping(fd), None);
        std::fs::remove_file(&disk_path).unwrap();
        assert_eq!(kind_of_shared_mapping(fd), None, "removed");
    }

    #[test]
    fn fresh_anonymous_mappings_read_as_such() {
        // Four pages each, left mapped: the test process ends soon.
        for sharing in [libc::MAP_PRIVATE, libc::MAP_SHARED] {
            let address = crate::sys::map_anonymous(4 * PAGE, sharing).expect("a mapping").as_ptr() as u64;
            let kind = crate::sys::maps_line_containing(address + PAGE as u64, kind_in_maps_line);
            assert_eq!(kind, Some(Some(StackKind::Mapping)), "sharing {sharing}");
        }
    }
}
