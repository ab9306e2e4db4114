//! The fast path on x86_64: framehop's DWARF CFI unwinder over the loaded
//! objects' `.eh_frame_hdr`/`.eh_frame` in memory, with the unwind rule of
//! each return address cached per thread, so a stack seen before costs a
//! hash lookup and a stack read per frame; where a stack meets the thread's
//! previous one, the rest is taken from that one (see `trail`).

use std::cell::RefCell;

use framehop::x86_64::UnwindRegsX86_64;
use framehop::{FrameAddress, Unwinder};

use super::module_set::{self, Access, CacheClaim, ModuleSet, Place, RuleCaches};
use super::trail::{StackWords, Trail};
use super::{CapturedStack, Entry, USER_SPACE_END};
use crate::own_stack;

/// Fills `stack` with the caller's return addresses (frames inside
/// `own_code` skipped, or all of them at once when the hook's `entry` is
/// known); `Err` if libgcc's unwinder must do it instead
/// (a module change in progress, a stack this path does not know).
#[inline(never)]
pub fn capture(own_code: (u64, u64), entry: Entry, stack: &mut CapturedStack) -> Result<(), ()> {
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads the instruction pointer, stack pointer and frame pointer
    // into registers; touches no memory and leaves the flags alone.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    // Off the thread's stack (a signal stack, a coroutine): libgcc copes.
    let top = own_stack::top_if_on(sp).ok_or(())?;
    let mut claim = CacheClaim::claim();
    let (caches, readers) = claim.parts();
    let guard = match module_set::read(readers) {
        Access::Ready(guard) => guard,
        Access::Stale => {
            if !module_set::refresh() {
                return Err(());
            }
            match module_set::read(readers) {
                Access::Ready(guard) => guard,
                _ => return Err(()),
            }
        }
        Access::Unavailable => return Err(()),
    };
    let set = guard.set();
    let stack_words = LiveStack { sp, top };
    // The program's frame where it called the hook: the return address the
    // call pushed, the stack pointer as it was before the call, and the
    // frame pointer, which the hook's first instruction had not touched yet.
    let program_frame = stack_words
        .word(entry.stack_pointer)
        .filter(|&return_address| !(own_code.0 <= return_address && return_address < own_code.1))
        .and_then(|return_address| {
            let registers = Registers { ip: return_address, sp: entry.stack_pointer + 8, bp: entry.frame_pointer };
            Some((FrameAddress::from_return_address(return_address)?, registers))
        });
    let start = program_frame.unwrap_or((FrameAddress::InstructionPointer(ip), Registers { ip, sp, bp }));
    let walked = TRAILS.try_with(|trails| {
        let mut trails = trails.try_borrow_mut().map_err(|_| ())?;
        trails.captures += 1;
        let serial = trails.captures;
        let (previous, trail) = trails.split();
        // A trail left unfinished is never read: the next capture starts it over.
        let walked = walk(set, caches, own_code, start, &stack_words, previous, trail)?;
        stack.serial = serial;
        match walked {
            // The same frames as the previous capture's, inside the meeting
            // point too, where they may differ in registers only (code built
            // without frame pointers uses that one as a scratch register):
            // the previous trail, its inside updated, stands for this capture.
            Walked::Met(p) if previous.repeated_inside(trail, p) => {
                stack.set(previous.frames());
                stack.repeats = previous.serial;
                let (current, previous) = trails.split_for_update();
                previous.take_inner(current);
                previous.serial = serial;
            }
            walked => {
                if let Walked::Met(p) = walked {
                    trail.adopt_rest(previous, p);
                }
                stack.set(trail.frames());
                stack.repeats = 0;
                trail.serial = serial;
                trails.flip();
            }
        }
        Ok(())
    });
    walked.unwrap_or(Err(()))
}

/// This thread's last trail and the one being made; const-initialized
/// without a destructor, in static TLS.
struct Trails {
    pair: [Trail; 2],
    last: usize,
    /// Fast captures made on this thread, the serial of the latest.
    captures: u64,
}

impl Trails {
    /// The last trail, and the one being made.
    fn split(&mut self) -> (&Trail, &mut Trail) {
        self.read_and_write(self.last)
    }

    /// The trail being made, and the last one to change.
    fn split_for_update(&mut self) -> (&Trail, &mut Trail) {
        self.read_and_write(1 - self.last)
    }

    fn read_and_write(&mut self, read: usize) -> (&Trail, &mut Trail) {
        let [first, second] = &mut self.pair;
        if read == 0 {
            (first, second)
        } else {
            (second, first)
        }
    }

    fn flip(&mut self) {
        self.last = 1 - self.last;
    }
}

thread_local! {
    static TRAILS: RefCell<Trails> = const { RefCell::new(Trails { pair: [Trail::EMPTY, Trail::EMPTY], last: 0, captures: 0 }) };
}

/// Where a walk starts. framehop's register set is 136 bytes, moved by a
/// `memcpy` call each time it changes hands: it is made once, in `walk`.
#[derive(Clone, Copy)]
struct Registers {
    ip: u64,
    sp: u64,
    bp: u64,
}

/// How a walk ended.
enum Walked {
    /// The trail's last frame met the previous trail's frame at this index.
    Met(usize),
    /// The trail holds a stack that did not meet the previous one.
    End,
}

/// Unwinds from `start` (a frame and its registers) into `trail`, frames
/// inside `own_code` left out, stopping early where the stack meets the
/// `previous` trail.
fn walk(
    set: &ModuleSet,
    caches: &mut RuleCaches,
    own_code: (u64, u64),
    start: (FrameAddress, Registers),
    stack: &LiveStack,
    previous: &Trail,
    trail: &mut Trail,
) -> Result<Walked, ()> {
    trail.start(set.events());
    let (mut frame, Registers { ip, sp, bp }) = start;
    let mut regs = UnwindRegsX86_64::new(ip, sp, bp);
    let mut in_tracer = true;
    let mut cursor = 0;
    loop {
        let address = frame.address();
        if !(in_tracer && own_code.0 <= address && address < own_code.1) {
            in_tracer = false;
            let FrameAddress::ReturnAddress(_) = frame else {
                return Err(()); // the first frame is this function's
            };
            trail.push_frame(address, regs.sp(), regs.bp());
            if let Some(p) = trail.meeting_point(previous, &mut cursor, stack) {
                return Ok(Walked::Met(p));
            }
            if trail.is_full() {
                trail.note_truncated();
                return Ok(Walked::End);
            }
            match set.place(address - 1, &mut caches.recent_objects) {
                Place::Unwindable => {}
                Place::NoTables => return Ok(Walked::End),
                Place::Unknown => {
                    if module_set::object_is_loaded(address - 1) {
                        // Loaded behind the hooks' back (glibc's own dlopen,
                        // dlmopen): the next capture lists it.
                        module_set::note_unlisted_object(set);
                        return Err(());
                    }
                    return Ok(Walked::End); // code outside every object (JIT): the stack ends here
                }
            }
        }
        let mut read_stack = |address: u64| -> Result<u64, ()> {
            let value = stack.word(address).ok_or(())?;
            trail.log_read(address, value);
            Ok(value)
        };
        match set.unwinder.unwind_frame(frame, &mut regs, caches.for_address(address), &mut read_stack) {
            // No code lies above user space or on the stack: this frame was
            // unwound wrongly (framehop reads -1 or a stack address out of a
            // few frames of libtorch's MKL code, whose callers libgcc finds).
            // libgcc unwinds the whole stack instead.
            Ok(Some(return_address)) if return_address >= USER_SPACE_END || stack.holds(return_address) => {
                return Err(())
            }
            Ok(Some(return_address)) => match FrameAddress::from_return_address(return_address) {
                Some(next) => frame = next,
                None => return Ok(Walked::End),
            },
            Ok(None) | Err(_) => return Ok(Walked::End),
        }
    }
}

/// The part of this thread's stack a capture reads: above the stack pointer
/// the capture started at, up to the top. Mapped, and never written while
/// the capture runs (the frames below `sp` are the unwinder's own).
struct LiveStack {
    sp: u64,
    top: u64,
}

impl LiveStack {
    /// The highest offset from `sp` that a whole word can start at; `None`
    /// when not even one word fits.
    fn last_offset(&self) -> Option<u64> {
        self.top.checked_sub(8)?.checked_sub(self.sp)
    }

    /// Whether `[address, address + 8)` lies inside `[sp, top)`, given
    /// `last_offset` (below `sp`, the offset wraps to far above it).
    fn holds_at(&self, address: u64, last_offset: u64) -> bool {
        address.wrapping_sub(self.sp) <= last_offset
    }

    fn holds(&self, address: u64) -> bool {
        self.last_offset().is_some_and(|last_offset| self.holds_at(address, last_offset))
    }

    fn word(&self, address: u64) -> Option<u64> {
        // SAFETY: `[address, address + 8)` lies inside `[sp, top)`, this
        // thread's mapped stack above the current frame.
        self.holds(address).then(|| unsafe { (address as *const u64).read_unaligned() })
    }
}

impl StackWords for LiveStack {
    /// Without a branch per word: this runs at almost every allocation,
    /// over every word the last capture read outside the meeting point
    /// (fifty at a depth of 24), and a check, a read and an exit per word
    /// was a sixth of the tracer's time. Every address is checked first, in
    /// a pass that only subtracts and ors, and then every word is read.
    fn all_hold(&self, addresses: &[u64], values: &[u64]) -> bool {
        // A stack is far smaller than 2^63 bytes; the check below needs it.
        let Some(last_offset) = self.last_offset().filter(|last_offset| last_offset >> 63 == 0) else {
            return addresses.is_empty();
        };
        // An offset past `last_offset`, or below `sp` (wrapped to 2^63 or
        // more), sets the top bit of the offset or of `last_offset` less it.
        let outside = addresses.iter().fold(0, |outside, &address| {
            let offset = address.wrapping_sub(self.sp);
            outside | offset | last_offset.wrapping_sub(offset)
        });
        if outside >> 63 != 0 {
            return false;
        }
        let mut differences = 0;
        for (&address, &value) in addresses.iter().zip(values) {
            // SAFETY: every address is at most `last_offset` above `sp`:
            // `[address, address + 8)` lies inside `[sp, top)`.
            differences |= unsafe { (address as *const u64).read_unaligned() } ^ value;
        }
        differences == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_words_hold_only_inside_the_live_stack_and_unchanged() {
        let words = [11u64, 22, 33, 44];
        let base = words.as_ptr() as u64;
        let at = |i: u64| base + 8 * i;
        // The live part is words 1 to 3.
        let stack = LiveStack { sp: at(1), top: at(4) };
        assert!(stack.all_hold(&[at(3), at(1), at(2)], &[44, 22, 33]));
        assert!(stack.all_hold(&[], &[]));
        assert!(!stack.all_hold(&[at(1), at(2)], &[22, 34]), "a changed word");
        assert!(!stack.all_hold(&[at(0), at(2)], &[11, 33]), "a word below the stack pointer");
        assert!(!stack.all_hold(&[at(2), at(4)], &[33, 0]), "a word past the top");
        assert!(!stack.all_hold(&[at(3) + 1], &[0]), "a word that crosses the top");
        for far in [0, 8, at(1).wrapping_sub(1 << 62), at(1) + (1 << 62), u64::MAX - 7, 1 << 63] {
            assert!(!stack.all_hold(&[at(2), far], &[33, 0]), "a word far outside: {far:#x}");
        }
        assert_eq!(stack.word(at(2)), Some(33));
        assert_eq!(stack.word(at(0)), None);
        assert_eq!(stack.word(u64::MAX - 3), None);
    }
}
