//! The separate debug file of a module whose DWARF was split off (a
//! distribution's `-dbg` package, a release build's `objcopy
//! --only-keep-debug`), looked for where gdb looks: by the module's build
//! id under `/usr/lib/debug/.build-id`, else by the name its
//! `.gnu_debuglink` section gives, beside the module, in `.debug/` beside
//! it and under `/usr/lib/debug` followed by the module's directory.

use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use object::Object;

/// gdb's global debug directory (its `debug-file-directory`).
const DEBUG_DIRECTORY: &str = "/usr/lib/debug";

/// The debug file of the module at `path`, parsed as `object` with build
/// id `build_id`, when there is one. A file the debuglink names whose
/// CRC-32 is not the one the link records is another build's, whose lines
/// would be wrong: it is skipped, and why is pushed to `skipped`.
pub fn find(path: &Path, object: &object::File<'_>, build_id: &[u8], skipped: &mut Vec<String>) -> Option<PathBuf> {
    by_build_id(build_id).or_else(|| by_debuglink(path, object, skipped))
}

fn by_build_id(build_id: &[u8]) -> Option<PathBuf> {
    if build_id.len() < 2 {
        return None;
    }
    let id = crate::symbolize::hex(build_id);
    let path = PathBuf::from(format!("{DEBUG_DIRECTORY}/.build-id/{}/{}.debug", &id[..2], &id[2..]));
    path.exists().then_some(path)
}

fn by_debuglink(path: &Path, object: &object::File<'_>, skipped: &mut Vec<String>) -> Option<PathBuf> {
    let (name, recorded_crc) = object.gnu_debuglink().ok().flatten()?;
    // The link holds a file name; a path in it is not followed elsewhere.
    let name = Path::new(OsStr::from_bytes(name)).file_name()?;
    // gdb looks beside the file itself, its links resolved.
    let module = std::fs::canonicalize(path).ok()?;
    for candidate in debuglink_candidates(module.parent()?, name) {
        if candidate == module || !candidate.is_file() {
            continue;
        }
        match crc32_of(&candidate) {
            Ok(crc) if crc == recorded_crc => return Some(candidate),
            Ok(crc) => skipped.push(format!(
                "the debug file {} is not the one {} links to (its CRC-32 is {crc:08x}, the link records \
                 {recorded_crc:08x}: another build's); its lines are not used",
                candidate.display(),
                module.display()
            )),
            Err(err) => skipped.push(format!("cannot read the debug file {} ({err})", candidate.display())),
        }
    }
    None
}

/// Where gdb looks for the debug file `name` of a module in `directory`,
/// in its order.
fn debuglink_candidates(directory: &Path, name: &OsStr) -> [PathBuf; 3] {
    let under_debug_directory = Path::new(DEBUG_DIRECTORY).join(directory.strip_prefix("/").unwrap_or(directory));
    [directory.join(name), directory.join(".debug").join(name), under_debug_directory.join(name)]
}

/// The CRC-32 of a file's contents, as `.gnu_debuglink` records it (that of
/// zlib and gzip).
fn crc32_of(path: &Path) -> std::io::Result<u32> {
    let mut file = File::open(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0; 1 << 16];
    loop {
        match file.read(&mut buffer)? {
            0 => return Ok(hasher.finalize()),
            n => hasher.update(&buffer[..n]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_debuglink_is_looked_for_beside_the_module_in_its_debug_directory_and_under_usr_lib_debug() {
        assert_eq!(
            debuglink_candidates(Path::new("/opt/app/lib"), OsStr::new("libfeat.so.debug")),
            [
                PathBuf::from("/opt/app/lib/libfeat.so.debug"),
                PathBuf::from("/opt/app/lib/.debug/libfeat.so.debug"),
                PathBuf::from("/usr/lib/debug/opt/app/lib/libfeat.so.debug"),
            ]
        );
    }

    #[test]
    fn the_crc_is_zlibs() {
        let file = crate::synth::write_temp("check", b"123456789");
        assert_eq!(crc32_of(file.as_ref()).unwrap(), 0xcbf4_3926);
    }
}
