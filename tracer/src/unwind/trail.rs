//! What the last capture on a thread saw, so that the next one can stop
//! unwinding where the two stacks meet.
//!
//! Between two allocations a thread mostly returns a few frames and calls a
//! few others: the outer frames are the same ones, and unwinding them again
//! costs a rule lookup per frame (a miss, and a CFI evaluation, for code the
//! rule cache has evicted). The unwinder's next step is a function of the
//! frame's address, the stack and frame pointers, the unwind rules of the
//! loaded objects and the stack words it reads; nothing else. So when a
//! capture reaches a frame with the address, stack pointer and frame pointer
//! that the last capture had at some frame, under the same set of objects,
//! and every stack word the last capture read from that frame outwards still
//! holds the value read then, the rest of the stack is the last capture's
//! rest, frame for frame.

use super::MAX_FRAMES;

/// The stack a capture reads, where the words the last capture read are
/// checked again.
pub trait StackWords {
    /// Whether every word at `addresses` may be read now and holds the value
    /// at the same place in `values`.
    fn all_hold(&self, addresses: &[u64], values: &[u64]) -> bool;
}

/// Stack words read per frame: a return address and at most a saved frame
/// pointer, so twice the frames covers every stack the tracer keeps.
const MAX_READS: usize = 2 * MAX_FRAMES;

pub struct Trail {
    /// The capture's number among this thread's fast captures.
    pub serial: u64,
    /// The object set's load-event count the unwind rules came from.
    events: u64,
    len: usize,
    /// The stack ended by running out of room, not by reaching its end.
    truncated: bool,
    frames: [u64; MAX_FRAMES],
    stack_pointers: [u64; MAX_FRAMES],
    frame_pointers: [u64; MAX_FRAMES],
    /// The reads that unwound frame `i` and the ones outside it start at
    /// `first_read[i]`.
    first_read: [u16; MAX_FRAMES],
    reads: usize,
    read_addresses: [u64; MAX_READS],
    read_values: [u64; MAX_READS],
    /// More reads than fit: this trail cannot be reused.
    overflowed: bool,
}

impl Trail {
    pub const EMPTY: Trail = Trail {
        serial: 0,
        events: 0,
        len: 0,
        truncated: false,
        frames: [0; MAX_FRAMES],
        stack_pointers: [0; MAX_FRAMES],
        frame_pointers: [0; MAX_FRAMES],
        first_read: [0; MAX_FRAMES],
        reads: 0,
        read_addresses: [0; MAX_READS],
        read_values: [0; MAX_READS],
        overflowed: false,
    };

    /// Starts the trail of a new capture under the object set `events`.
    pub fn start(&mut self, events: u64) {
        (self.events, self.len, self.reads, self.truncated, self.overflowed) = (events, 0, 0, false, false);
    }

    /// Records the frame at `address` and the registers it is unwound from,
    /// before its unwinding reads anything.
    pub fn push_frame(&mut self, address: u64, stack_pointer: u64, frame_pointer: u64) {
        let i = self.len;
        self.frames[i] = address;
        self.stack_pointers[i] = stack_pointer;
        self.frame_pointers[i] = frame_pointer;
        self.first_read[i] = self.reads as u16;
        self.len += 1;
    }

    pub fn is_full(&self) -> bool {
        self.len == MAX_FRAMES
    }

    pub fn note_truncated(&mut self) {
        self.truncated = true;
    }

    pub fn log_read(&mut self, address: u64, value: u64) {
        if self.reads == MAX_READS {
            self.overflowed = true;
            return;
        }
        self.read_addresses[self.reads] = address;
        self.read_values[self.reads] = value;
        self.reads += 1;
    }

    pub fn frames(&self) -> &[u64] {
        &self.frames[..self.len]
    }

    /// The index in `previous` of a frame where this trail's last frame
    /// meets it, if the rest of `previous` is certain to be this stack's rest.
    /// `cursor` keeps the search's place across the frames of one capture
    /// (the stack pointers grow outwards in both trails); `read` gives a
    /// stack word if it may be read now.
    pub fn meeting_point(&self, previous: &Trail, cursor: &mut usize, stack: &impl StackWords) -> Option<usize> {
        let i = self.len.checked_sub(1)?;
        if previous.events != self.events || previous.overflowed {
            return None;
        }
        let stack_pointer = self.stack_pointers[i];
        while *cursor < previous.len && previous.stack_pointers[*cursor] < stack_pointer {
            *cursor += 1;
        }
        let p = *cursor;
        let same_frame = p < previous.len
            && previous.stack_pointers[p] == stack_pointer
            && previous.frames[p] == self.frames[i]
            && previous.frame_pointers[p] == self.frame_pointers[i];
        // A truncated stack's rest is cut at the old depth; deeper here, the
        // cut would come later.
        if !same_frame || (previous.truncated && i < p) {
            return None;
        }
        let reads = usize::from(previous.first_read[p])..previous.reads;
        stack.all_hold(&previous.read_addresses[reads.clone()], &previous.read_values[reads]).then_some(p)
    }

    /// Whether `current`, whose last frame met this trail's frame `p`, has
    /// the same frames inside it and made as many reads: then adopting this
    /// trail's rest would give this trail with only `current`'s registers and
    /// reads inside `p` put in, which [`Trail::take_inner`] does in place.
    pub fn repeated_inside(&self, current: &Trail, p: usize) -> bool {
        current.len == p + 1
            && current.frames[..p] == self.frames[..p]
            && current.reads == usize::from(self.first_read[p])
    }

    /// Takes `current`'s frames and reads (see [`Trail::repeated_inside`]).
    pub fn take_inner(&mut self, current: &Trail) {
        let (n, reads) = (current.len, current.reads);
        self.frames[..n].copy_from_slice(&current.frames[..n]);
        self.stack_pointers[..n].copy_from_slice(&current.stack_pointers[..n]);
        self.frame_pointers[..n].copy_from_slice(&current.frame_pointers[..n]);
        self.first_read[..n].copy_from_slice(&current.first_read[..n]);
        self.read_addresses[..reads].copy_from_slice(&current.read_addresses[..reads]);
        self.read_values[..reads].copy_from_slice(&current.read_values[..reads]);
        self.overflowed |= current.overflowed;
    }

    /// Appends the frames of `previous` outside its frame `p` (where this
    /// trail's last frame met it), with what the next capture needs of them.
    /// Frames beyond the room left are dropped, as the unwinder would.
    pub fn adopt_rest(&mut self, previous: &Trail, p: usize) {
        // Whole-slice copies: this runs on almost every allocation, and a
        // frame or read at a time was a fifth of a capture's cost.
        let base_read = usize::from(previous.first_read[p]);
        let own_reads = self.reads;
        let wanted = previous.reads - base_read;
        let reads = wanted.min(MAX_READS - own_reads);
        let (from, to) = (base_read..base_read + reads, own_reads..own_reads + reads);
        self.read_addresses[to.clone()].copy_from_slice(&previous.read_addresses[from.clone()]);
        self.read_values[to].copy_from_slice(&previous.read_values[from]);
        self.reads += reads;
        self.overflowed |= reads < wanted;

        let room = MAX_FRAMES - self.len;
        let rest = previous.len - (p + 1);
        let count = rest.min(room);
        self.truncated = previous.truncated || rest > room;
        let (from, to) = (p + 1..p + 1 + count, self.len..self.len + count);
        self.frames[to.clone()].copy_from_slice(&previous.frames[from.clone()]);
        self.stack_pointers[to.clone()].copy_from_slice(&previous.stack_pointers[from.clone()]);
        self.frame_pointers[to.clone()].copy_from_slice(&previous.frame_pointers[from.clone()]);
        for (mine, theirs) in self.first_read[to].iter_mut().zip(&previous.first_read[from]) {
            *mine = (own_reads + usize::from(*theirs) - base_read) as u16;
        }
        self.len += count;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trail of frames `(address, stack pointer)` whose unwinding read the
    /// return-address slot just below each next frame's stack pointer.
    fn trail(frames: &[(u64, u64)]) -> Trail {
        let mut trail = Trail::EMPTY;
        trail.start(1);
        for (k, &(address, sp)) in frames.iter().enumerate() {
            trail.push_frame(address, sp, 0);
            if let Some(&(next, next_sp)) = frames.get(k + 1) {
                trail.log_read(next_sp - 8, next);
            }
        }
        trail
    }

    /// A stack given as a function from an address to the word there, if readable.
    struct Words<F>(F);

    impl<F: Fn(u64) -> Option<u64>> StackWords for Words<F> {
        fn all_hold(&self, addresses: &[u64], values: &[u64]) -> bool {
            addresses.iter().zip(values).all(|(&address, &value)| (self.0)(address) == Some(value))
        }
    }

    /// The stack `trail` read.
    fn stack_of(trail: &Trail) -> Words<impl Fn(u64) -> Option<u64> + '_> {
        Words(move |address| {
            (0..trail.reads).find(|&r| trail.read_addresses[r] == address).map(|r| trail.read_values[r])
        })
    }

    #[test]
    fn meets_at_the_same_frame_and_takes_the_rest() {
        let previous = trail(&[(0x10, 0x100), (0x20, 0x180), (0x30, 0x200), (0x40, 0x280)]);
        let mut current = trail(&[(0x11, 0x0f0), (0x21, 0x140)]);
        current.push_frame(0x30, 0x200, 0);
        let mut cursor = 0;
        let p = current.meeting_point(&previous, &mut cursor, &stack_of(&previous)).expect("meets");
        assert_eq!(p, 2);
        current.adopt_rest(&previous, p);
        assert_eq!(current.frames(), [0x11, 0x21, 0x30, 0x40]);
        // The adopted reads lead the next capture to the same place.
        let mut next = Trail::EMPTY;
        next.start(1);
        next.push_frame(0x30, 0x200, 0);
        assert_eq!(next.meeting_point(&current, &mut 0, &stack_of(&previous)), Some(2));
    }

    #[test]
    fn a_changed_stack_word_outside_stops_the_reuse() {
        let previous = trail(&[(0x10, 0x100), (0x20, 0x180), (0x30, 0x200)]);
        let mut current = Trail::EMPTY;
        current.start(1);
        current.push_frame(0x20, 0x180, 0);
        let read = stack_of(&previous);
        let changed = Words(|address| if address == 0x1f8 { Some(0x31) } else { (read.0)(address) });
        assert_eq!(current.meeting_point(&previous, &mut 0, &changed), None);
        assert_eq!(current.meeting_point(&previous, &mut 0, &read), Some(1));
    }

    #[test]
    fn another_frame_pointer_address_or_object_set_does_not_meet() {
        let previous = trail(&[(0x10, 0x100), (0x20, 0x180)]);
        let read = stack_of(&previous);
        let mut current = Trail::EMPTY;
        current.start(1);
        current.push_frame(0x20, 0x180, 0x5000);
        assert_eq!(current.meeting_point(&previous, &mut 0, &read), None, "frame pointer");
        current.start(1);
        current.push_frame(0x21, 0x180, 0);
        assert_eq!(current.meeting_point(&previous, &mut 0, &read), None, "address");
        current.start(2);
        current.push_frame(0x20, 0x180, 0);
        assert_eq!(current.meeting_point(&previous, &mut 0, &read), None, "objects changed");
    }

    #[test]
    fn a_truncated_rest_is_reused_only_as_deep_or_deeper() {
        let mut previous = trail(&[(0x10, 0x100), (0x20, 0x180), (0x30, 0x200)]);
        previous.note_truncated();
        let read = stack_of(&previous);
        let mut shallower = Trail::EMPTY;
        shallower.start(1);
        shallower.push_frame(0x20, 0x180, 0);
        assert_eq!(shallower.meeting_point(&previous, &mut 0, &read), None);
        let mut deeper = trail(&[(0x01, 0x080), (0x02, 0x0c0)]);
        deeper.push_frame(0x20, 0x180, 0);
        assert_eq!(deeper.meeting_point(&previous, &mut 0, &read), Some(1));
    }

    #[test]
    fn taking_a_repeat_inside_equals_adopting_the_rest() {
        let outer = [(0x10, 0x100), (0x20, 0x180), (0x30, 0x200), (0x40, 0x280)];
        let previous = trail(&outer);
        // The same two frames, the innermost with another frame pointer.
        let inner = || {
            let mut current = Trail::EMPTY;
            current.start(1);
            current.push_frame(0x10, 0x100, 0x77);
            current.log_read(0xf8, 0x20);
            current.push_frame(0x20, 0x180, 0);
            current
        };
        let current = inner();
        let p = current.meeting_point(&previous, &mut 0, &stack_of(&previous)).expect("meets");
        assert!(previous.repeated_inside(&current, p));
        let mut adopted = inner();
        adopted.adopt_rest(&previous, p);
        let mut patched = trail(&outer);
        patched.take_inner(&current);
        assert_eq!(patched.frames(), adopted.frames());
        assert_eq!(patched.frame_pointers, adopted.frame_pointers);
        assert_eq!(patched.stack_pointers, adopted.stack_pointers);
        assert_eq!(patched.first_read, adopted.first_read);
        assert_eq!(patched.reads, adopted.reads);
        assert_eq!(patched.read_addresses[..patched.reads], adopted.read_addresses[..adopted.reads]);
        assert_eq!(patched.read_values[..patched.reads], adopted.read_values[..adopted.reads]);

        let mut other = Trail::EMPTY;
        other.start(1);
        other.push_frame(0x11, 0x100, 0);
        other.log_read(0xf8, 0x20);
        other.push_frame(0x20, 0x180, 0);
        assert!(!previous.repeated_inside(&other, 1), "another frame inside");
    }

    #[test]
    fn adopting_keeps_to_the_frame_limit() {
        let outer: Vec<(u64, u64)> = (0..MAX_FRAMES as u64).map(|k| (0x1000 + k, 0x10_000 + 0x100 * k)).collect();
        let previous = trail(&outer);
        let mut current = trail(&[(0x1, 0x100), (0x2, 0x200)]);
        current.push_frame(outer[1].0, outer[1].1, 0);
        let p = current.meeting_point(&previous, &mut 0, &stack_of(&previous)).expect("meets");
        current.adopt_rest(&previous, p);
        assert_eq!(current.frames().len(), MAX_FRAMES);
        assert!(current.truncated);
    }
}
