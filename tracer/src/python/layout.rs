//! Where the fields the frame walk reads lie, per CPython version (x86_64,
//! release builds with the GIL).
//!
//! 3.11 and 3.12 have no description of their own layout, so the offsets
//! come from a table (computed with `offsetof` against each version's
//! headers) and are sanity-checked against the sizes the interpreter's type
//! objects report. 3.13 and later describe themselves in `_Py_DebugOffsets`
//! at the start of `_PyRuntime`; the walk uses those and refuses to run when
//! they disagree with the table.

use super::codes::Types;
use super::memory;

/// Frame owners (`enum _frameowner`).
pub const OWNED_BY_GENERATOR: u8 = 1;
pub const OWNED_BY_CSTACK: u8 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub minor: u32,
    /// Thread state → `cframe` (3.11, 3.12); `None` where the thread state
    /// holds the current frame itself.
    pub tstate_cframe: Option<u64>,
    /// `cframe->current_frame`, or `tstate->current_frame` when there is no cframe.
    pub current_frame: u64,
    pub frame_code: u64,
    pub frame_previous: u64,
    pub frame_instr: u64,
    pub frame_owner: u64,
    /// `localsplus`, the frame's local variables: a method's first is `self`.
    pub frame_localsplus: u64,
    /// 3.11 marks entry frames with a byte; later versions push a shim frame.
    pub frame_is_entry: Option<u64>,
    pub code_firstlineno: u64,
    pub code_filename: u64,
    pub code_qualname: u64,
    pub code_linetable: u64,
    /// `co_consts`, the tuple that holds the code objects of nested functions
    /// and classes. It follows the object header in 3.11 to 3.13 alike
    /// (`_PyCode_DEF`); 3.13's debug offsets do not list it.
    pub code_consts: u64,
    pub code_firsttraceable: u64,
    pub code_adaptive: u64,
    /// `PyVarObject.ob_size`: code units of a code object, bytes of a bytes
    /// object, items of a tuple.
    pub var_size: u64,
    /// `PyTupleObject.ob_item`.
    pub tuple_items: u64,
    pub ob_type: u64,
    pub unicode_length: u64,
    pub unicode_state: u64,
    /// Where the characters of a compact ASCII string start (`sizeof(PyASCIIObject)`).
    pub ascii_data: u64,
    /// Where the characters of a compact non-ASCII string start (`sizeof(PyCompactUnicodeObject)`).
    pub compact_data: u64,
    pub bytes_data: u64,
}

const fn common(minor: u32) -> Layout {
    Layout {
        minor,
        tstate_cframe: None,
        current_frame: 0,
        frame_code: 0,
        frame_previous: 8,
        frame_instr: 56,
        frame_owner: 70,
        frame_localsplus: 72,
        frame_is_entry: None,
        code_firstlineno: 68,
        code_filename: 112,
        code_qualname: 128,
        code_linetable: 136,
        code_consts: 24,
        code_firsttraceable: 0,
        code_adaptive: 0,
        var_size: 16,
        tuple_items: 24,
        ob_type: 8,
        unicode_length: 16,
        unicode_state: 32,
        ascii_data: 40,
        compact_data: 56,
        bytes_data: 32,
    }
}

const PY311: Layout = Layout {
    tstate_cframe: Some(56),
    current_frame: 8,
    frame_code: 32,
    frame_previous: 48,
    frame_owner: 69,
    frame_is_entry: Some(68),
    code_firstlineno: 72,
    code_firsttraceable: 168,
    code_adaptive: 184,
    ascii_data: 48,
    compact_data: 72,
    ..common(11)
};

const PY312: Layout =
    Layout { tstate_cframe: Some(56), current_frame: 0, code_firsttraceable: 176, code_adaptive: 192, ..common(12) };

const PY313: Layout = Layout { current_frame: 72, code_firsttraceable: 184, code_adaptive: 200, ..common(13) };

/// The checked table entry for `3.minor`, if the walk knows that version.
pub fn table(minor: u32) -> Option<Layout> {
    match minor {
        11 => Some(PY311),
        12 => Some(PY312),
        13 => Some(PY313),
        _ => None,
    }
}

/// Reads `_Py_DebugOffsets` (3.13+) at the start of `_PyRuntime` and checks
/// it against the table. `py_version` is `Py_Version`.
pub fn from_debug_offsets(runtime: u64, py_version: u64, table: Layout) -> Result<Layout, String> {
    let at = |index: u64| memory::word(runtime, index * 8).ok_or_else(|| "_PyRuntime is unreadable".to_string());
    let cookie = at(0)?.to_le_bytes();
    if &cookie != b"xdebugpy" {
        return Err("_PyRuntime does not start with the _Py_DebugOffsets cookie".into());
    }
    let version = at(1)?;
    if version != py_version {
        return Err(format!("_Py_DebugOffsets describes version {version:#x}, the interpreter is {py_version:#x}"));
    }
    if at(2)? != 0 {
        return Err("free-threaded build".into());
    }
    // Field indexes of the 3.13 `_Py_DebugOffsets`, in 8-byte words.
    let layout = Layout {
        current_frame: at(23)?,
        frame_previous: at(29)?,
        frame_code: at(30)?,
        frame_instr: at(31)?,
        frame_localsplus: at(32)?,
        frame_owner: at(33)?,
        code_filename: at(35)?,
        code_qualname: at(37)?,
        code_linetable: at(38)?,
        code_firstlineno: at(39)?,
        code_adaptive: at(43)?,
        ob_type: at(45)?,
        tuple_items: at(51)?,
        unicode_state: at(68)?,
        unicode_length: at(69)?,
        ascii_data: at(70)?,
        var_size: at(65)?,
        bytes_data: at(66)?,
        ..table
    };
    // A tuple's length is its `ob_size`, like a bytes object's.
    if layout != table || at(52)? != table.var_size {
        return Err(format!("_Py_DebugOffsets disagrees with the known layout ({layout:?})"));
    }
    Ok(layout)
}

/// Checks the layout against what the interpreter's own type objects say:
/// the instance sizes of `code`, `str`, `bytes` and `tuple` and the names of the types.
pub fn check_types(layout: &Layout, types: &Types) -> Result<(), String> {
    let Types { code: code_type, unicode: unicode_type, bytes: bytes_type, tuple: tuple_type } = *types;
    // PyTypeObject: tp_name at 24, tp_basicsize at 32, tp_itemsize at 40.
    let basic = |ty: u64| memory::word(ty, 32).ok_or_else(|| "a type object is unreadable".to_string());
    let name = |ty: u64| -> Result<Vec<u8>, String> {
        let p = memory::word(ty, 24).filter(|&p| memory::plausible(p, 8, 1)).ok_or("a type name is unreadable")?;
        let mut out = Vec::new();
        for i in 0..16 {
            let b = memory::u8_at(p, i).ok_or("a type name is unreadable")?;
            if b == 0 {
                break;
            }
            out.push(b);
        }
        Ok(out)
    };
    if name(code_type)? != b"code"
        || name(unicode_type)? != b"str"
        || name(bytes_type)? != b"bytes"
        || name(tuple_type)? != b"tuple"
    {
        return Err("PyCode_Type, PyUnicode_Type, PyBytes_Type or PyTuple_Type is not the type expected".into());
    }
    // The code object ends with its bytecode: basicsize = sizeof(PyCodeObject) - 2.
    let code_size = basic(code_type)?;
    if !(layout.code_adaptive..layout.code_adaptive + 8).contains(&code_size) {
        return Err(format!(
            "code objects are {code_size} bytes, the layout expects bytecode at {}",
            layout.code_adaptive
        ));
    }
    // PyUnicodeObject = PyCompactUnicodeObject + one data pointer.
    let unicode_size = basic(unicode_type)?;
    if unicode_size != layout.compact_data + 8 {
        return Err(format!("str objects are {unicode_size} bytes, the layout expects {}", layout.compact_data + 8));
    }
    // PyBytesObject_SIZE = offsetof(ob_sval) + 1.
    let bytes_size = basic(bytes_type)?;
    if bytes_size != layout.bytes_data + 1 {
        return Err(format!("bytes objects are {bytes_size} bytes, the layout expects {}", layout.bytes_data + 1));
    }
    // The items follow the header: tp_basicsize = sizeof(PyTupleObject) - one item.
    let tuple_size = basic(tuple_type)?;
    if tuple_size != layout.tuple_items {
        return Err(format!("tuples are {tuple_size} bytes, the layout expects items at {}", layout.tuple_items));
    }
    Ok(())
}
