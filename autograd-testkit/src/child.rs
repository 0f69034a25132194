//! Running a test in a child process, so that an abort, a segfault or a
//! hang fails the calling test instead of killing the harness.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `cmd` (a test binary running one ignored test) with its output on
/// pipes, kills it after `limit` (a hang), and asserts that it exited
/// normally with its one test passed: a signal (abort, segfault) or a
/// failure fails the calling test, with the child's output.
///
/// ```no_run
/// let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
/// cmd.args(["--exact", "--ignored", "child_test"]);
/// autograd_testkit::child::assert_child_passes(cmd, std::time::Duration::from_secs(60));
/// ```
pub fn assert_child_passes(mut cmd: Command, limit: Duration) {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            panic!("the child did not finish in {limit:?}: some call hangs");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child ended with {} (a signal means an abort or a segfault)\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains("1 passed"), "{stdout}");
}
