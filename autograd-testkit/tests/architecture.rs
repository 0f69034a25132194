//! ARCHITECTURE.md stays true: its file list names every Rust file of the
//! workspace's crates (and no file that is gone), with line counts within
//! 20% (or 30 lines) of the real ones. After a change, regenerate the list:
//!
//! ```sh
//! UPDATE_ARCHITECTURE=1 cargo test -p autograd-testkit --test architecture
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The workspace's members, read from the root manifest, so that a new
/// crate cannot be left out of the list.
fn crates() -> Vec<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let start = manifest.find("members = [").expect("workspace members") + "members = [".len();
    let end = start + manifest[start..].find(']').expect("end of members");
    manifest[start..end].split(',').map(|m| m.trim().trim_matches('"').to_string()).filter(|m| !m.is_empty()).collect()
}
const BEGIN: &str = "<!-- files:begin (generated: UPDATE_ARCHITECTURE=1 cargo test -p autograd-testkit --test architecture) -->";
const END: &str = "<!-- files:end -->";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries {
        let p = e.unwrap().path();
        if p.is_dir() && p.file_name().is_some_and(|n| n != "target") {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The Rust files git would commit (tracked, or untracked and not ignored),
/// so that a local scratch file excluded through `.git/info/exclude` is
/// neither listed by the generator nor demanded by the check: a clean clone
/// does not have it. `None` outside a git checkout (a source tarball).
fn committable_files(root: &Path) -> Option<Vec<PathBuf>> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.rs"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let listed = String::from_utf8(out.stdout).ok()?;
    // A tracked file deleted in the working tree is gone, not listed.
    Some(listed.split('\0').filter(|p| !p.is_empty()).map(|p| root.join(p)).filter(|p| p.is_file()).collect())
}

/// Every Rust file of the listed crates with its line count, by relative path.
fn tree() -> BTreeMap<String, usize> {
    let root = root();
    let crates = crates();
    let files: Vec<PathBuf> = match committable_files(&root) {
        Some(all) => all.into_iter().filter(|p| crates.iter().any(|c| p.starts_with(root.join(c)))).collect(),
        None => {
            let mut walked = Vec::new();
            for c in &crates {
                rust_files(&root.join(c), &mut walked);
            }
            walked
        }
    };
    files
        .into_iter()
        .map(|p| {
            let lines = std::fs::read_to_string(&p).unwrap().lines().count();
            (p.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/"), lines)
        })
        .collect()
}

fn render(tree: &BTreeMap<String, usize>) -> String {
    let mut s = String::new();
    for c in crates() {
        let in_crate: Vec<(&String, &usize)> = tree.iter().filter(|(p, _)| p.starts_with(&format!("{c}/"))).collect();
        let src: usize = in_crate.iter().filter(|(p, _)| p.contains("/src/")).map(|(_, n)| **n).sum();
        let rest: usize = in_crate.iter().filter(|(p, _)| !p.contains("/src/")).map(|(_, n)| **n).sum();
        s += &format!(
            "\n**{c}**: {src} lines in `src/`, {rest} elsewhere (tests, benches, example programs)\n\n| lines | file |\n|---:|---|\n"
        );
        for (p, n) in in_crate {
            s += &format!("| {n} | `{p}` |\n");
        }
    }
    s
}

fn listed(doc: &str) -> BTreeMap<String, usize> {
    doc.lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            if cells.len() != 4 {
                return None;
            }
            let n = cells[1].parse().ok()?;
            Some((cells[2].trim_matches('`').to_string(), n))
        })
        .collect()
}

#[test]
fn architecture_file_list_is_true() {
    let path = root().join("ARCHITECTURE.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (a, b) = (doc.find(BEGIN).expect("the begin marker"), doc.find(END).expect("the end marker"));
    let real = tree();
    if std::env::var_os("UPDATE_ARCHITECTURE").is_some() {
        let new = format!("{}{BEGIN}\n{}\n{}", &doc[..a], render(&real), &doc[b..]);
        std::fs::write(&path, new).unwrap();
        return;
    }
    let list = listed(&doc[a..b]);
    let missing: Vec<&String> = real.keys().filter(|p| !list.contains_key(*p)).collect();
    let stale: Vec<&String> = list.keys().filter(|p| !real.contains_key(*p)).collect();
    assert!(missing.is_empty() && stale.is_empty(), "ARCHITECTURE.md: unlisted files {missing:?}, listed files that are gone {stale:?}");
    for (p, &n) in &real {
        let m = list[p];
        assert!(n.abs_diff(m) <= 30.max(n / 5), "ARCHITECTURE.md lists {p} at {m} lines, it has {n}");
    }
}

/// Every check a suite file writes (`pub fn name<B: Backend>()`) is in its
/// suite macro's list, so that a new check cannot be forgotten by the
/// macro that runs it on every backend.
#[test]
fn every_suite_check_is_instantiated() {
    for suite in ["conformance", "golden", "autograd_features", "modules", "optim", "checkpointing"] {
        let src = std::fs::read_to_string(root().join(format!("autograd-testkit/src/{suite}.rs"))).unwrap();
        let listed = {
            let at = src.find("instantiate!(").unwrap_or_else(|| panic!("{suite}.rs: no instantiate! list"));
            let open = at + src[at..].find('[').expect("the list");
            let close = open + src[open..].find(']').expect("the list's end");
            src[open + 1..close].split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect::<Vec<_>>()
        };
        let written: Vec<String> =
            src.lines().filter_map(|l| l.strip_prefix("pub fn ")?.split_once("<B: Backend>()").map(|(name, _)| name.to_string())).collect();
        assert!(!written.is_empty(), "{suite}.rs: no checks found");
        let missing: Vec<&String> = written.iter().filter(|f| !listed.contains(f)).collect();
        assert!(missing.is_empty(), "{suite}.rs: checks not in the suite macro: {missing:?}");
    }
}
