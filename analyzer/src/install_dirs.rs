//! Directories that packages were installed into without being named
//! `site-packages`: `pip install --target DIR`, a vendored tree put on
//! `PYTHONPATH`. pip writes a `NAME-VERSION.dist-info` directory beside
//! every package it installs, wherever it installs it, so a directory that
//! holds one is an installation, and the modules under it are a library's,
//! not the program's. A project's own tree holds none (an editable install
//! leaves its `.dist-info` in the environment's `site-packages`).
//!
//! Read where the trace is analysed: a trace read on another machine, whose
//! files are not there, falls back to the names alone.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Whether `file` lies under a directory that holds a `.dist-info`
/// directory; each file is looked at and each directory listed once per
/// run (a report asks for every frame of every stack).
pub fn is_under_an_installation(file: &str) -> bool {
    #[derive(Default)]
    struct Seen {
        files: HashMap<String, bool>,
        directories: HashMap<PathBuf, bool>,
    }
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    let mut seen = SEEN.get_or_init(Default::default).lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(&known) = seen.files.get(file) {
        return known;
    }
    let Seen { files, directories } = &mut *seen;
    let installed = Path::new(file)
        .ancestors()
        .skip(1)
        .filter(|dir| !dir.as_os_str().is_empty())
        .any(|dir| *directories.entry(dir.to_path_buf()).or_insert_with(|| holds_installed_packages(dir)));
    files.insert(file.to_owned(), installed);
    installed
}

fn holds_installed_packages(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    entries.flatten().any(|entry| {
        entry.file_name().to_str().is_some_and(|name| name.ends_with(".dist-info"))
            && entry.file_type().is_ok_and(|kind| kind.is_dir())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_under_a_directory_pip_installed_into_are_a_librarys() {
        let root = std::env::temp_dir().join(format!("install-dirs-{}", std::process::id()));
        let target = root.join("vendor");
        std::fs::create_dir_all(target.join("lightning/pytorch")).unwrap();
        std::fs::create_dir_all(target.join("lightning-2.6.6.dist-info")).unwrap();
        std::fs::create_dir_all(root.join("job")).unwrap();
        // A file named like one is no installation's record.
        std::fs::write(root.join("job/notes.dist-info"), "").unwrap();
        let path = |p: &Path| p.to_str().unwrap().to_owned();
        assert!(is_under_an_installation(&path(&target.join("lightning/pytorch/trainer.py"))));
        assert!(is_under_an_installation(&path(&target.join("six.py"))));
        assert!(!is_under_an_installation(&path(&root.join("job/train.py"))));
        assert!(!is_under_an_installation("/nowhere/that/exists/train.py"));
        assert!(!is_under_an_installation("train.py"));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
