//! Records the git revision the binary was built from (PTELAB_GIT_REV), so
//! every stored run says which ptelab produced it.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn main() {
    if let Some(rev) = git(&["describe", "--always", "--dirty", "--abbrev=12"]) {
        println!("cargo:rustc-env=PTELAB_GIT_REV={rev}");
    }
    // Ask git where HEAD and the index are: in a worktree `.git` is a file,
    // and a missing path would make cargo re-run this script on every build.
    for what in ["HEAD", "index"] {
        match git(&["rev-parse", "--path-format=absolute", "--git-path", what]) {
            Some(path) if std::path::Path::new(&path).exists() => {
                println!("cargo:rerun-if-changed={path}")
            }
            _ => println!("cargo:rerun-if-changed=build.rs"),
        }
    }
}
