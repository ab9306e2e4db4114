//! `malloc_trim`: glibc hands the pages of its free chunks back to the
//! system (`MADV_DONTNEED`) but goes on counting the chunks as its free
//! space, the `malloc free` of each snapshot. What it counts right after
//! the program's trim is noted, so that a snapshot counts only the freed
//! memory malloc kept since (see [`real_alloc::allocator_free_bytes`]).

use std::ffi::c_int;

use super::NextSymbol;
use crate::real_alloc;

pub static NEXT_MALLOC_TRIM: NextSymbol = NextSymbol::new(c"malloc_trim");

#[no_mangle]
pub extern "C" fn malloc_trim(pad: usize) -> c_int {
    let Some(next) = NEXT_MALLOC_TRIM.get::<unsafe extern "C" fn(usize) -> c_int>() else { return 0 };
    // SAFETY: glibc's malloc_trim (the next definition), with the caller's argument.
    let released = unsafe { next(pad) };
    real_alloc::note_trim();
    released
}
