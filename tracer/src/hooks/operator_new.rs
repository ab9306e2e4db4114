//! C++ `operator new` and `operator delete`, all twenty of them.
//!
//! libstdc++'s operators call malloc and free, where the tracer records
//! them; an allocator preloaded after the tracer (jemalloc, tcmalloc)
//! defines operators of its own that call it directly, and every C++
//! object went unrecorded. So the tracer defines them too: each is an
//! exported stub that jumps to its operator's target. At first that is the
//! operator's body, which looks every operator's next definition up, passes
//! the call on and records it. Where the next definition is not the other
//! allocator's own (libstdc++'s, reaching malloc and free), the stub then
//! jumps straight to it: the call runs as it would untraced, with no frame
//! of the tracer's in the stack that malloc records.
//!
//! `dlsym(RTLD_NEXT)` often does not find that definition: Python loads
//! extension modules with RTLD_LOCAL, and the libstdc++ that torch or
//! numpy loads then lies in their own scope, not in the global one. It is
//! then looked up in the scope of the object that made the first call, as
//! the loader bound that object's references.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use super::entry;
use super::next_allocator as next;
use super::NextSymbol;
use crate::session;

/// An operator's jump target, its exported stub and next definition.
#[repr(C)]
pub struct Operator {
    /// Where the stub jumps; first, for the stub reads it at offset 0.
    target: AtomicPtr<()>,
    /// The operator's exported stub, as the program's references reach it.
    stub: AtomicPtr<()>,
    /// The next definition, set by [`resolve`].
    next: NextSymbol,
}

impl Operator {
    const fn new(body: *mut (), stub: *mut (), name: &'static CStr) -> Operator {
        Operator { target: AtomicPtr::new(body), stub: AtomicPtr::new(stub), next: NextSymbol::new(name) }
    }

    /// The address of the operator's exported stub.
    pub fn stub(&self) -> usize {
        self.stub.load(Ordering::Relaxed) as usize
    }

    /// The definition the operator passes its calls on to.
    pub fn next(&self) -> &NextSymbol {
        &self.next
    }
}

/// An `operator new`: `$size` is the bytes it is asked for; `$otherwise`
/// allocates them when no definition is found after the tracer's.
macro_rules! operator_new {
    ($symbol:ident($($arg:ident: $ty:ty),*), $sp:literal, $bp:literal, size: $size:expr, otherwise: $otherwise:expr) => {
        #[allow(non_snake_case)]
        pub mod $symbol {
            use super::*;

            pub static OPERATOR: Operator = Operator::new(body as *mut (), $symbol as *mut (), c_name!($symbol));

            entry_stub!($symbol($($arg: $ty),*) -> *mut c_void => through OPERATOR, $sp, $bp);

            /// Unwinds as the next definition does: a throwing `new` throws
            /// `std::bad_alloc` through this frame to the program.
            unsafe extern "C-unwind" fn body($($arg: $ty,)* sp: u64, bp: u64) -> *mut c_void {
                resolve_once(sp);
                let ptr = match OPERATOR.next.get::<unsafe extern "C-unwind" fn($($ty),*) -> *mut c_void>() {
                    // SAFETY: the program's call, unchanged, to the definition it reaches untraced.
                    Some(next) => next::forwarded(|| unsafe { next($($arg),*) }),
                    None => $otherwise,
                };
                session::allocated(ptr, $size, entry(sp, bp));
                ptr
            }
        }
    };
}

/// An `operator delete`, whose first argument is the block.
macro_rules! operator_delete {
    ($symbol:ident(ptr: *mut c_void $(, $arg:ident: $ty:ty)*), $sp:literal, $bp:literal) => {
        #[allow(non_snake_case)]
        pub mod $symbol {
            use super::*;

            pub static OPERATOR: Operator = Operator::new(body as *mut (), $symbol as *mut (), c_name!($symbol));

            entry_stub!($symbol(ptr: *mut c_void $(, $arg: $ty)*) -> () => through OPERATOR, $sp, $bp);

            unsafe extern "C" fn body(ptr: *mut c_void, $($arg: $ty,)* sp: u64, _bp: u64) {
                resolve_once(sp);
                // The record goes first: once the allocator has the block
                // back, another thread may be handed the same address.
                session::freed(ptr);
                match OPERATOR.next.get::<unsafe extern "C" fn(*mut c_void $(, $ty)*)>() {
                    // SAFETY: the program's call, unchanged, to the definition it reaches untraced.
                    Some(next) => next::forwarded(|| unsafe { next(ptr $(, $arg)*) }),
                    // SAFETY: a block of the program's allocator, as `delete` requires.
                    None => unsafe { next::free(ptr) },
                }
            }
        }
    };
}

type Nothrow = *const c_void;

operator_new!(_Znwm(size: usize), "rsi", "rdx", size: size, otherwise: must(next::malloc(size.max(1))));
operator_new!(_Znam(size: usize), "rsi", "rdx", size: size, otherwise: must(next::malloc(size.max(1))));
operator_new!(_ZnwmRKSt9nothrow_t(size: usize, nothrow: Nothrow), "rdx", "rcx",
    size: size, otherwise: next::malloc(size.max(1)));
operator_new!(_ZnamRKSt9nothrow_t(size: usize, nothrow: Nothrow), "rdx", "rcx",
    size: size, otherwise: next::malloc(size.max(1)));
operator_new!(_ZnwmSt11align_val_t(size: usize, alignment: usize), "rdx", "rcx",
    size: size, otherwise: must(next::memalign(alignment, size.max(1))));
operator_new!(_ZnamSt11align_val_t(size: usize, alignment: usize), "rdx", "rcx",
    size: size, otherwise: must(next::memalign(alignment, size.max(1))));
operator_new!(_ZnwmSt11align_val_tRKSt9nothrow_t(size: usize, alignment: usize, nothrow: Nothrow), "rcx", "r8",
    size: size, otherwise: next::memalign(alignment, size.max(1)));
operator_new!(_ZnamSt11align_val_tRKSt9nothrow_t(size: usize, alignment: usize, nothrow: Nothrow), "rcx", "r8",
    size: size, otherwise: next::memalign(alignment, size.max(1)));

operator_delete!(_ZdlPv(ptr: *mut c_void), "rsi", "rdx");
operator_delete!(_ZdaPv(ptr: *mut c_void), "rsi", "rdx");
operator_delete!(_ZdlPvm(ptr: *mut c_void, size: usize), "rdx", "rcx");
operator_delete!(_ZdaPvm(ptr: *mut c_void, size: usize), "rdx", "rcx");
operator_delete!(_ZdlPvSt11align_val_t(ptr: *mut c_void, alignment: usize), "rdx", "rcx");
operator_delete!(_ZdaPvSt11align_val_t(ptr: *mut c_void, alignment: usize), "rdx", "rcx");
operator_delete!(_ZdlPvmSt11align_val_t(ptr: *mut c_void, size: usize, alignment: usize), "rcx", "r8");
operator_delete!(_ZdaPvmSt11align_val_t(ptr: *mut c_void, size: usize, alignment: usize), "rcx", "r8");
operator_delete!(_ZdlPvRKSt9nothrow_t(ptr: *mut c_void, nothrow: Nothrow), "rdx", "rcx");
operator_delete!(_ZdaPvRKSt9nothrow_t(ptr: *mut c_void, nothrow: Nothrow), "rdx", "rcx");
operator_delete!(_ZdlPvSt11align_val_tRKSt9nothrow_t(ptr: *mut c_void, alignment: usize, nothrow: Nothrow), "rcx", "r8");
operator_delete!(_ZdaPvSt11align_val_tRKSt9nothrow_t(ptr: *mut c_void, alignment: usize, nothrow: Nothrow), "rcx", "r8");

pub static OPERATORS: [&Operator; 20] = [
    &_Znwm::OPERATOR,
    &_Znam::OPERATOR,
    &_ZnwmRKSt9nothrow_t::OPERATOR,
    &_ZnamRKSt9nothrow_t::OPERATOR,
    &_ZnwmSt11align_val_t::OPERATOR,
    &_ZnamSt11align_val_t::OPERATOR,
    &_ZnwmSt11align_val_tRKSt9nothrow_t::OPERATOR,
    &_ZnamSt11align_val_tRKSt9nothrow_t::OPERATOR,
    &_ZdlPv::OPERATOR,
    &_ZdaPv::OPERATOR,
    &_ZdlPvm::OPERATOR,
    &_ZdaPvm::OPERATOR,
    &_ZdlPvSt11align_val_t::OPERATOR,
    &_ZdaPvSt11align_val_t::OPERATOR,
    &_ZdlPvmSt11align_val_t::OPERATOR,
    &_ZdaPvmSt11align_val_t::OPERATOR,
    &_ZdlPvRKSt9nothrow_t::OPERATOR,
    &_ZdaPvRKSt9nothrow_t::OPERATOR,
    &_ZdlPvSt11align_val_tRKSt9nothrow_t::OPERATOR,
    &_ZdaPvSt11align_val_tRKSt9nothrow_t::OPERATOR,
];

/// The block a throwing `new` returns, when no C++ runtime follows the
/// tracer to throw `std::bad_alloc` (a case the loader's binding rules
/// out: whatever called the operator was linked against one).
fn must(ptr: *mut c_void) -> *mut c_void {
    if ptr.is_null() {
        crate::sys::print_stderr("tracer: operator new is out of memory and no C++ runtime follows the tracer to throw std::bad_alloc; aborting\n");
        std::process::abort();
    }
    ptr
}

static RESOLVED: AtomicBool = AtomicBool::new(false);

/// `stack_pointer`: the caller's at its call, where its return address lies.
#[inline]
fn resolve_once(stack_pointer: u64) {
    if !RESOLVED.load(Ordering::Acquire) {
        // SAFETY: the stub passed the stack pointer at the program's call,
        // which points at the return address the call pushed.
        let return_address = unsafe { *(stack_pointer as *const u64) } as usize;
        // The loader's work in the lookups (`dlopen` of the caller's object
        // allocates) is the tracer's: quiet, so that none of it is recorded
        // as the program's, with the tracer's frames in its stack. The
        // caller's reference is given back after it: a `dlclose` made inside
        // the tracer could not wait for the stack captures in progress.
        let caller = crate::thread_state::quietly(|| resolve(return_address));
        drop(caller);
    }
}

/// Looks up every operator's next definition and points its stub at it,
/// unless it is the other allocator's (see the module comment). Threads
/// racing here find the same definitions. Returns the reference to the
/// caller's object taken for the lookups, to be given back.
#[cold]
fn resolve(return_address: usize) -> CallerScope {
    let allocator = next::other_allocator_object();
    let own = next::object_of(resolve as *const () as usize);
    let caller = CallerScope(reference_to(crate::sys::loaded_object(return_address)));
    for operator in OPERATORS {
        let found = match operator.next.address() {
            0 => caller.lookup(operator.next.name()),
            address => address,
        };
        let holder = crate::sys::loaded_object(found);
        let object = holder.map_or(0, |info| info.dli_fbase as usize);
        let address = if object == own { 0 } else { found };
        operator.next.set(address);
        if address == 0 {
            continue;
        }
        // The stubs jump into that object from now on: it stays loaded
        // whatever the program unloads (libstdc++ does anyway).
        reference_to(holder);
        if allocator != Some(object) {
            operator.target.store(address as *mut (), Ordering::Release);
        }
    }
    RESOLVED.store(true, Ordering::Release);
    caller
}

/// A reference to the loaded object dladdr described, null when there is
/// none: RTLD_NOLOAD only finds an object already loaded, and runs no
/// constructor.
fn reference_to(object: Option<libc::Dl_info>) -> *mut c_void {
    match object {
        // SAFETY: a file name dladdr gave for an object loaded now.
        Some(info) if !info.dli_fname.is_null() => unsafe {
            libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD)
        },
        _ => std::ptr::null_mut(),
    }
}

/// The object a call came from, referenced for lookups in its own scope.
struct CallerScope(*mut c_void);

impl CallerScope {
    /// The definition of `name` the caller's own references bind to, when
    /// the global scope has none after the tracer; 0 if none.
    fn lookup(&self, name: &CStr) -> usize {
        if self.0.is_null() {
            return 0;
        }
        // glibc's answer: the tracer's `dlsym` would give this stub back.
        super::symbol_in_scope(self.0, name)
    }
}

impl Drop for CallerScope {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the reference `reference_to` added, given back once.
            unsafe { libc::dlclose(self.0) };
        }
    }
}
