//! Long C++ function names made readable in the text report.
//!
//! libtorch's dispatcher frames demangle to names of 500 to 2,000
//! characters (`c10::impl::wrap_kernel_functor_unboxed_<...>::call(...)`),
//! which bury the frames around them. The text report shows such a name
//! with its template arguments and its parameter list elided, and so does
//! the verdict where it names one (in the JSON's message and a
//! descendant's finding too); the JSON's frames and the flamegraphs keep
//! the full names.

use std::borrow::Cow;

use crate::demangle::{after_operator_keyword, operator_symbol_len};

/// Names up to this long are shown whole.
const READABLE_LEN: usize = 100;
const ELIDED: &str = "…";

/// `name` with, when it is longer than [`READABLE_LEN`], each outermost
/// template argument list shown as `<…>` and then, if still too long, the
/// parameter list as `(…)`. A name whose brackets do not pair up is shown
/// whole.
pub fn shortened(name: &str) -> Cow<'_, str> {
    if name.chars().count() <= READABLE_LEN {
        return Cow::Borrowed(name);
    }
    let Some(without_templates) = elide_templates(name) else { return Cow::Borrowed(name) };
    if without_templates.chars().count() <= READABLE_LEN {
        return Cow::Owned(without_templates);
    }
    Cow::Owned(elide_parameters(&without_templates).unwrap_or(without_templates))
}

/// Each template argument list outside every other one as `<…>`; `None`
/// when the brackets do not pair up.
fn elide_templates(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len());
    let mut open: Vec<char> = Vec::new();
    let mut templates = 0usize;
    let mut at = 0;
    while let Some(c) = name[at..].chars().next() {
        if after_operator_keyword(name, at) {
            let len = operator_symbol_len(&name[at..]);
            if len > 0 {
                if templates == 0 {
                    out.push_str(&name[at..at + len]);
                }
                at += len;
                continue;
            }
        }
        match c {
            '<' => {
                if templates == 0 {
                    out.push('<');
                    out.push_str(ELIDED);
                }
                templates += 1;
                open.push(c);
            }
            '(' | '{' | '[' => {
                if templates == 0 {
                    out.push(c);
                }
                open.push(c);
            }
            '>' | ')' | '}' | ']' => {
                if closing(open.pop()?) != c {
                    return None;
                }
                if c == '>' {
                    templates -= 1;
                }
                if templates == 0 {
                    out.push(c);
                }
            }
            _ if templates == 0 => out.push(c),
            _ => {}
        }
        at += c.len_utf8();
    }
    open.is_empty().then_some(out)
}

fn closing(open: char) -> char {
    match open {
        '<' => '>',
        '(' => ')',
        '{' => '}',
        _ => ']',
    }
}

/// The last parameter list, the one the name ends with (before qualifiers
/// such as ` const`), as `(…)`; `None` when there is none.
fn elide_parameters(name: &str) -> Option<String> {
    let close = name.rfind(')')?;
    let mut depth = 0usize;
    for (i, c) in name[..=close].char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    return Some(format!("{}({ELIDED}){}", &name[..i], &name[close + 1..]));
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::shortened;

    const DISPATCHER: &str = "c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<c10::CompileTimeFunctionPointer<at::Tensor(at::Tensor const&, std::optional<c10::MemoryFormat>), &at::(anonymous namespace)::(anonymous namespace)::wrapper_CompositeExplicitAutograd__clone(at::Tensor const&, std::optional<c10::MemoryFormat>)>, at::Tensor, c10::guts::typelist::typelist<at::Tensor const&, std::optional<c10::MemoryFormat> > >, at::Tensor(at::Tensor const&, std::optional<c10::MemoryFormat>)>::call(c10::OperatorKernel*, c10::DispatchKeySet, at::Tensor const&, std::optional<c10::MemoryFormat>)";

    #[test]
    fn short_names_are_whole() {
        for name in [
            "c10::alloc_cpu(unsigned long)",
            "Module._call_impl",
            "std::vector<int, std::allocator<int> >::push_back(int const&)",
        ] {
            assert_eq!(shortened(name), name);
        }
    }

    #[test]
    fn template_arguments_go_first() {
        assert_eq!(shortened(DISPATCHER), "c10::impl::wrap_kernel_functor_unboxed_<…>::call(…)");
        let name = format!("{}<{}>::run(int)", "a".repeat(30), "b".repeat(100));
        assert_eq!(shortened(&name), format!("{}<…>::run(int)", "a".repeat(30)));
    }

    #[test]
    fn then_the_parameter_list() {
        let name = "at::_ops::empty_strided::redispatch(c10::DispatchKeySet, c10::ArrayRef<c10::SymInt>, c10::ArrayRef<c10::SymInt>, std::optional<c10::ScalarType>, std::optional<c10::Layout>) const";
        assert_eq!(shortened(name), "at::_ops::empty_strided::redispatch(…) const");
        let name = "torch::autograd::VariableType::(anonymous namespace)::clone(c10::DispatchKeySet, at::Tensor const&, std::optional<c10::MemoryFormat>, bool, bool)";
        assert_eq!(shortened(name), "torch::autograd::VariableType::(anonymous namespace)::clone(…)");
    }

    #[test]
    fn operators_are_not_brackets() {
        let name = "std::basic_ostream<char, std::char_traits<char> >& std::operator<< <std::char_traits<char> >(std::basic_ostream<char, std::char_traits<char> >&, char const*)";
        assert_eq!(shortened(name), "std::basic_ostream<…>& std::operator<< <…>(std::basic_ostream<…>&, char const*)");
        let name = format!(
            "{}::operator()(int, long, std::vector<float, std::allocator<float> > const&, std::string const&)",
            "a".repeat(30)
        );
        assert_eq!(
            shortened(&name),
            format!("{}::operator()(int, long, std::vector<…> const&, std::string const&)", "a".repeat(30))
        );
        let name = format!(
            "{}::operator()(int, long, std::vector<float, std::allocator<float> > const&, std::string const&)",
            "a".repeat(60)
        );
        assert_eq!(shortened(&name), format!("{}::operator()(…)", "a".repeat(60)));
    }

    #[test]
    fn operators_followed_by_template_arguments() {
        let string = "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >";
        let name = format!(
            "{string} std::operator+<char, std::char_traits<char>, std::allocator<char> >({string}&&, {string}&&)"
        );
        assert_eq!(shortened(&name), "std::__cxx11::basic_string<…> std::operator+<…>(…)");
        let long = "std::vector<std::pair<int, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > > >";
        for (operator, shown) in [
            ("operator< <", "operator< <…>"),
            ("operator()<", "operator()<…>"),
            ("operator-><", "operator-><…>"),
            ("operator><", "operator><…>"),
            ("operator>><", "operator>><…>"),
            ("operator<=><", "operator<=><…>"),
        ] {
            let name = format!("bool app::Table::{operator}{long} >({long} const&) const");
            assert_eq!(
                shortened(&name),
                format!("bool app::Table::{shown}(std::vector<…> const&) const"),
                "{operator}"
            );
        }
    }

    #[test]
    fn unpaired_brackets_leave_the_name_whole() {
        let name = format!("f<{}(int)", "x".repeat(120));
        assert_eq!(shortened(&name), name);
        let name = format!("g(decltype(a->b)) {}", "y".repeat(120));
        assert_eq!(shortened(&name), name);
    }
}
