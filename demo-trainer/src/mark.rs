//! Epoch marks for the leak tracer.
//!
//! The tracer exports `void tracer_mark(const char *label)`; each call closes
//! the current epoch. It is looked up at run time, so the trainer runs the
//! same with and without the tracer preloaded.

use std::ffi::{c_char, CString};
use std::sync::OnceLock;

type MarkFn = unsafe extern "C" fn(*const c_char);

fn lookup() -> Option<MarkFn> {
    static MARK: OnceLock<Option<MarkFn>> = OnceLock::new();
    *MARK.get_or_init(|| {
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name.
        let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"tracer_mark".as_ptr()) };
        if sym.is_null() {
            None
        } else {
            // SAFETY: the tracer exports tracer_mark with this signature.
            Some(unsafe { std::mem::transmute::<*mut libc::c_void, MarkFn>(sym) })
        }
    })
}

/// Whether the tracer is loaded in this process.
pub fn tracer_loaded() -> bool {
    lookup().is_some()
}

/// Closes the tracer's current epoch under `label`; does nothing without the tracer.
pub fn tracer_mark(label: &str) {
    if let Some(mark) = lookup() {
        let label = CString::new(label.replace('\0', " ")).expect("no NUL left");
        // SAFETY: `label` is a valid C string that outlives the call.
        unsafe { mark(label.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn marking_without_the_tracer_is_a_no_op() {
        assert!(!super::tracer_loaded());
        super::tracer_mark("epoch 1");
    }
}
