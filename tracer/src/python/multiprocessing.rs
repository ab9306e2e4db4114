//! How Python's `multiprocessing` starts its children. The `fork` start
//! method (a `Process`, a `Pool`'s workers) forks them where a frame of one
//! code object is on the stack; `spawn` runs a fresh interpreter with a
//! command line of its own, and `forkserver` runs one such interpreter, the
//! server, which then forks every child.

/// The module of the `fork` start method, as a code object's filename ends.
const POPEN_FORK_FILE: &str = "multiprocessing/popen_fork.py";
/// The method that calls `os.fork()`.
const LAUNCH: &str = "Popen._launch";

/// Whether a code object is the `fork` start method's `Popen._launch`.
pub fn is_fork_launch(filename: &str, qualname: &str) -> bool {
    qualname == LAUNCH && filename.ends_with(POPEN_FORK_FILE)
}

/// A process that `multiprocessing` started as a fresh interpreter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Started {
    /// A child of the `spawn` start method.
    Spawned,
    /// The server of the `forkserver` start method, whose forks are the
    /// children of whoever started it.
    ForkServer,
}

/// The argument of `spawn`'s children (3.11 to 3.13).
const SPAWNED_ARGUMENT: &str = "--multiprocessing-fork";
/// How the forkserver's `-c` program starts (3.11 to 3.13).
const FORK_SERVER_PROGRAM: &str = "from multiprocessing.forkserver import main;";

/// What `multiprocessing` started with this command line, if anything.
pub fn started_as(command_line: &[String]) -> Option<Started> {
    if command_line.iter().any(|argument| argument == SPAWNED_ARGUMENT) {
        Some(Started::Spawned)
    } else if command_line.iter().any(|argument| argument.starts_with(FORK_SERVER_PROGRAM)) {
        Some(Started::ForkServer)
    } else {
        None
    }
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

    fn command(arguments: &[&str]) -> Vec<String> {
        arguments.iter().map(|argument| argument.to_string()).collect()
    }

    #[test]
    fn spawned_children_and_the_forkserver_are_known_by_their_command_lines() {
        let spawned = [
            "python",
            "-B",
            "-c",
            "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=7, pipe_handle=9)",
            "--multiprocessing-fork",
        ];
        assert_eq!(started_as(&command(&spawned)), Some(Started::Spawned));
        let server =
            ["python", "-B", "-c", "from multiprocessing.forkserver import main; main(11, 12, ['__main__'], **{})"];
        assert_eq!(started_as(&command(&server)), Some(Started::ForkServer));
        let tracker = ["python", "-B", "-c", "from multiprocessing.resource_tracker import main;main(7)"];
        assert_eq!(started_as(&command(&tracker)), None);
        assert_eq!(started_as(&command(&["python", "train.py", "--forkserver"])), None);
    }
}
