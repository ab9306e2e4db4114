//! Where Python's `multiprocessing` forks its children (the `fork` start
//! method: a `Process`, a `Pool`'s workers): a process forked with a frame
//! of that code object on its stack is one of them.

/// The module of the `fork` start method, as a code object's filename ends.
const POPEN_FORK_FILE: &str = "multiprocessing/popen_fork.py";
/// The method that calls `os.fork()`.
const LAUNCH: &str = "Popen._launch";

/// Whether a code object is the `fork` start method's `Popen._launch`.
pub fn is_fork_launch(filename: &str, qualname: &str) -> bool {
    qualname == LAUNCH && filename.ends_with(POPEN_FORK_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launch_is_known_by_its_module_and_qualified_name() {
        assert!(is_fork_launch("/usr/lib/python3.11/multiprocessing/popen_fork.py", "Popen._launch"));
        assert!(!is_fork_launch("/usr/lib/python3.11/multiprocessing/popen_spawn_posix.py", "Popen._launch"));
        assert!(!is_fork_launch("/usr/lib/python3.11/multiprocessing/popen_fork.py", "Popen.poll"));
        assert!(!is_fork_launch("/job/popen_fork.py", "Popen._launch"));
    }
}
