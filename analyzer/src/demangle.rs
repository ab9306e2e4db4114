//! Demangling of the symbol names of Rust and C++ code.
//!
//! C++ names go to the C++ runtime's own demangler, `__cxa_demangle` of
//! libstdc++, which runs the same code as `c++filt`: on the 48,000 C++
//! names that libtorch_cpu.so and libc10.so export it gives `c++filt`'s
//! text for every one but the 220 that take `std::ostream` for its long
//! form. The `cpp_demangle` crate (0.5.1, the newest; `symbolic-demangle`
//! wraps it) gave it for 42,000: it left names with an expression among
//! their template arguments mangled, printed an empty parameter pack as
//! `(&&)`, dropped the parameters of some constructors and wrote thunks in
//! a notation of its own. libstdc++ is found at run time (every system
//! that runs C++ programs has it), so building the analyzer needs no C++
//! toolchain; where it is missing, `cpp_demangle` stands in.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

/// Demangles a Rust or C++ symbol name; other names come back unchanged.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}");
    }
    if name.starts_with("_Z") {
        if let Some(text) = runtime_demangle(name).or_else(|| crate_demangle(name)) {
            return text;
        }
    }
    name.to_string()
}

fn crate_demangle(name: &str) -> Option<String> {
    cpp_demangle::Symbol::new(name.as_bytes()).ok()?.demangle().ok()
}

/// `__cxa_demangle(mangled, buffer, length, status)`, as the Itanium C++
/// ABI defines it.
type CxaDemangle = unsafe extern "C" fn(*const c_char, *mut c_char, *mut usize, *mut c_int) -> *mut c_char;

unsafe extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn free(pointer: *mut c_void);
}

const RTLD_NOW: c_int = 2;

/// libstdc++'s `__cxa_demangle`, loaded once; `None` where the library is missing.
fn runtime_demangler() -> Option<CxaDemangle> {
    static FOUND: OnceLock<Option<CxaDemangle>> = OnceLock::new();
    *FOUND.get_or_init(|| {
        // SAFETY: both names are NUL-terminated literals. The library stays
        // loaded for the process's life (its handle is never closed), so the
        // function found in it stays valid, and its type is the one the
        // Itanium C++ ABI gives `__cxa_demangle`.
        unsafe {
            let library = dlopen(c"libstdc++.so.6".as_ptr(), RTLD_NOW);
            if library.is_null() {
                return None;
            }
            let function = dlsym(library, c"__cxa_demangle".as_ptr());
            (!function.is_null()).then(|| std::mem::transmute::<*mut c_void, CxaDemangle>(function))
        }
    })
}

fn runtime_demangle(name: &str) -> Option<String> {
    let demangler = runtime_demangler()?;
    let mangled = CString::new(name).ok()?;
    let mut status: c_int = 0;
    // SAFETY: `mangled` is NUL-terminated and outlives the call; with a null
    // buffer and length, `__cxa_demangle` returns a string it allocated with
    // malloc (null on failure, with a non-zero status), which is read once
    // and freed here. It keeps no state between calls.
    unsafe {
        let text = demangler(mangled.as_ptr(), std::ptr::null_mut(), std::ptr::null_mut(), &mut status);
        if text.is_null() {
            return None;
        }
        let demangled = (status == 0).then(|| CStr::from_ptr(text).to_string_lossy().into_owned());
        free(text.cast());
        demangled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_rust_and_cpp() {
        assert_eq!(demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"), "core::ptr::drop_in_place");
        assert_eq!(demangle("_Znwm"), "operator new(unsigned long)");
        assert_eq!(demangle("plain_c"), "plain_c");
        assert_eq!(demangle("_Z"), "_Z", "not a whole mangled name");
    }

    /// Names libtorch exports that the `cpp_demangle` crate leaves mangled
    /// or demangles other than `c++filt` does, with `c++filt`'s text.
    #[test]
    fn libtorch_names_read_as_cxxfilt_reads_them() {
        for (mangled, demangled) in [
            // An expression among the template arguments.
            (
                "_ZSt14__copy_move_a1ILb0EPffEN9__gnu_cxx11__enable_ifIXsrSt23__is_random_access_iterIT0_NSt15iterator_traitsIS4_E17iterator_categoryEE7__valueESt15_Deque_iteratorIT1_RSA_PSA_EE6__typeES4_S4_SD_",
                "__gnu_cxx::__enable_if<std::__is_random_access_iter<float*, std::iterator_traits<float*>::iterator_category>::__value, std::_Deque_iterator<float, float&, float*> >::__type std::__copy_move_a1<false, float*, float>(float*, float*, std::_Deque_iterator<float, float&, float*>)",
            ),
            // An empty parameter pack.
            (
                "_ZNSt5dequeIN10tensorpipe13ReadOperationESaIS1_EE16_M_push_back_auxIJEEEvDpOT_",
                "void std::deque<tensorpipe::ReadOperation, std::allocator<tensorpipe::ReadOperation> >::_M_push_back_aux<>()",
            ),
            // A constructor whose parameters the crate dropped.
            (
                "_ZN3c106IValueC2IN4c10d12ProcessGroupELi0EEENS_13intrusive_ptrIT_NS_6detail34intrusive_target_default_null_typeIS5_EEEE",
                "c10::IValue::IValue<c10d::ProcessGroup, 0>(c10::intrusive_ptr<c10d::ProcessGroup, c10::detail::intrusive_target_default_null_type<c10d::ProcessGroup> >)",
            ),
            (
                "_ZThn144_N10tensorpipe9transport3shm14ConnectionImpl20handleEventsFromLoopEi",
                "non-virtual thunk to tensorpipe::transport::shm::ConnectionImpl::handleEventsFromLoop(int)",
            ),
        ] {
            assert_eq!(demangle(mangled), demangled);
        }
    }
}
