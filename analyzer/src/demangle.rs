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

/// How many bytes of `rest` are the symbol of an `operator` keyword just
/// before it (see [`after_operator_keyword`]): the longest operator token
/// it starts with, so that `operator+<char>` is `+` and a template argument
/// list, `operator<<` is one token and `operator< <int>` another (the
/// demangler writes a space between an operator ending in `<` and its
/// template arguments); `operator()` and `operator[]` are no parameter or
/// subscript list. 0 for `operator new`, `operator delete`, a conversion
/// (`operator bool`) or a literal operator (`operator""_km`).
pub(crate) fn operator_symbol_len(rest: &str) -> usize {
    const TOKENS: &[&str] = &[
        "<=>", "->*", "<<=", ">>=", "()", "[]", "->", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "++", "--", "+=",
        "-=", "*=", "/=", "%=", "^=", "&=", "|=", "+", "-", "*", "/", "%", "^", "&", "|", "~", "!", "=", "<", ">", ",",
    ];
    TOKENS.iter().find(|token| rest.starts_with(*token)).map_or(0, |token| token.len())
}

/// Whether `text[..at]` ends with the keyword `operator`.
pub(crate) fn after_operator_keyword(text: &str, at: usize) -> bool {
    text[..at]
        .strip_suffix("operator")
        .is_some_and(|before| !before.chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_'))
}

/// The qualified name of the function a demangled C++ name is of, with its
/// template arguments and without its return type, parameter list,
/// qualifiers or clone suffixes: `std::_Rb_tree<...>::_M_insert_<...>` of
/// `std::_Rb_tree_iterator<...> std::_Rb_tree<...>::_M_insert_<...>(...)
/// [clone .isra.0]`, `operator new` of `operator new(unsigned long)`,
/// `run(int)::{lambda()#1}::operator()` of a lambda's. A name without a
/// parameter list (a C function's) comes back as it is.
pub(crate) fn function_name(demangled: &str) -> &str {
    let mut depth = 0usize;
    let mut start = 0;
    let mut at = 0;
    // Past `operator new`, `operator delete[]` or a conversion to a type
    // (`operator std::string`), whose spaces are the name's.
    let mut words_of_operator = false;
    while let Some(c) = demangled[at..].chars().next() {
        if depth == 0 && after_operator_keyword(demangled, at) {
            let len = operator_symbol_len(&demangled[at..]);
            if len > 0 {
                at += len;
                if demangled[at..].starts_with(" <") {
                    at += 1;
                }
                continue;
            }
            words_of_operator = c == ' ';
        }
        match c {
            // The parameter list, unless it is `(anonymous namespace)`,
            // `decltype (...)` starting a name, or the parameters of the
            // function a local name is in (`run(int)::{lambda()#1}`).
            '(' if depth == 0 && at > start && !demangled[..at].ends_with("::") => {
                match group_end(demangled, at).filter(|&end| demangled[end..].starts_with("::")) {
                    Some(end) => {
                        at = end;
                        words_of_operator = false;
                        continue;
                    }
                    None => return &demangled[start..at],
                }
            }
            '<' | '(' | '[' | '{' => depth += 1,
            '>' | ')' | ']' | '}' => depth = depth.saturating_sub(1),
            // What comes before the name: its return type, `non-virtual thunk to`.
            ' ' if depth == 0 && !words_of_operator => start = at + 1,
            _ => {}
        }
        at += c.len_utf8();
    }
    &demangled[start..]
}

/// Where the bracket group opening at `open` ends (just past its closing
/// bracket), counting every kind of bracket; `None` when it does not.
fn group_end(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text[open..].char_indices() {
        match c {
            '<' | '(' | '[' | '{' => depth += 1,
            '>' | ')' | ']' | '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(open + i + 1);
                }
            }
            _ => {}
        }
    }
    None
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

    #[test]
    fn operator_symbols_end_where_their_template_arguments_begin() {
        for (rest, symbol) in [
            ("+<char, std::char_traits<char> >(", "+"),
            ("<< <std::char_traits<char> >(", "<<"),
            ("< <int>(", "<"),
            ("<<(", "<<"),
            ("<(", "<"),
            ("()<int>(", "()"),
            ("-><int>(", "->"),
            ("->*(", "->*"),
            ("><int>(", ">"),
            (">><int>(", ">>"),
            (">>=(", ">>="),
            ("<=><int>(", "<=>"),
            ("[](unsigned long)", "[]"),
            ("==(", "=="),
            (",(", ","),
            (" new(unsigned long)", ""),
            ("\"\"_km(", ""),
        ] {
            assert_eq!(&rest[..operator_symbol_len(rest)], symbol, "{rest}");
        }
    }

    #[test]
    fn function_names_without_return_type_and_parameters() {
        for (name, function) in [
            ("register_user()", "register_user"),
            ("main", "main"),
            ("step.isra.0", "step.isra.0"),
            (
                "std::_Rb_tree_iterator<std::pair<int const, int> > std::_Rb_tree<int, std::pair<int const, int> >::_M_emplace_hint_unique<std::piecewise_construct_t const&>(std::_Rb_tree_const_iterator<std::pair<int const, int> >, std::piecewise_construct_t const&) [clone .isra.0]",
                "std::_Rb_tree<int, std::pair<int const, int> >::_M_emplace_hint_unique<std::piecewise_construct_t const&>",
            ),
            (
                "std::__cxx11::basic_string<char> std::operator+<char, std::char_traits<char> >(std::__cxx11::basic_string<char>&&, char const*)",
                "std::operator+<char, std::char_traits<char> >",
            ),
            (
                "std::basic_ostream<char>& std::operator<< <std::char_traits<char> >(std::basic_ostream<char>&, char const*)",
                "std::operator<< <std::char_traits<char> >",
            ),
            ("operator new(unsigned long)", "operator new"),
            ("operator delete[](void*, unsigned long)", "operator delete[]"),
            ("app::Name::operator std::__cxx11::basic_string<char>() const", "app::Name::operator std::__cxx11::basic_string<char>"),
            ("app::Grid::operator()(int, int) const", "app::Grid::operator()"),
            ("std::__cxx11::basic_string<char> make_name<int>(int)", "make_name<int>"),
            ("(anonymous namespace)::fill(int)", "(anonymous namespace)::fill"),
            ("app::(anonymous namespace)::fill(int)", "app::(anonymous namespace)::fill"),
            ("lambdas(int)::{lambda(int)#1}::operator()(int) const", "lambdas(int)::{lambda(int)#1}::operator()"),
            ("app::Grid::operator()(int)::{lambda()#1}::operator()() const", "app::Grid::operator()(int)::{lambda()#1}::operator()"),
            (
                "std::_Function_handler<void (int), main::{lambda(int)#1}>::_M_invoke(std::_Any_data const&, int&&)",
                "std::_Function_handler<void (int), main::{lambda(int)#1}>::_M_invoke",
            ),
            ("unsigned long app::count<int>(int)", "app::count<int>"),
            (
                "non-virtual thunk to tensorpipe::transport::shm::ConnectionImpl::handleEventsFromLoop(int)",
                "tensorpipe::transport::shm::ConnectionImpl::handleEventsFromLoop",
            ),
        ] {
            assert_eq!(function_name(name), function, "{name}");
        }
    }
}
