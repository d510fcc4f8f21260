//! A fake THP sysfs tree and small helpers for the unit tests.

use std::fs;
use std::path::Path;
use std::process::Command;

use super::knobs::selected_value;
use super::KnobPaths;

pub const MTHP_KB: [u64; 8] = [8, 16, 32, 64, 128, 256, 512, 1024];

/// A fake THP tree shaped like this machine's (6.18, x86-64).
pub fn fake_sysfs(dir: &Path) -> KnobPaths {
    let paths = KnobPaths::under(dir);
    let t = &paths.sysfs;
    let put = |rel: &str, text: &str| {
        let p = t.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    };
    put("enabled", "always [madvise] never\n");
    put("defrag", "always defer defer+madvise [madvise] never\n");
    put(
        "shmem_enabled",
        "always within_size advise [never] deny force\n",
    );
    put("use_zero_page", "1\n");
    put("hpage_pmd_size", "2097152\n");
    put("khugepaged/defrag", "1\n");
    put("khugepaged/max_ptes_none", "511\n");
    put("khugepaged/pages_collapsed", "0\n");
    for kb in MTHP_KB {
        if kb != 8 {
            put(
                &format!("hugepages-{kb}kB/enabled"),
                "always inherit madvise [never]\n",
            );
        }
        put(
            &format!("hugepages-{kb}kB/shmem_enabled"),
            "always inherit within_size advise [never]\n",
        );
    }
    put(
        "hugepages-2048kB/enabled",
        "always [inherit] madvise never\n",
    );
    put(
        "hugepages-2048kB/shmem_enabled",
        "always [inherit] within_size advise never\n",
    );
    paths
}

pub fn knob(paths: &KnobPaths, name: &str) -> String {
    selected_value(&fs::read_to_string(paths.sysfs.join(name)).unwrap())
}

pub fn no_wait() -> impl FnMut(&str) {
    |m: &str| panic!("unexpected wait: {m}")
}

pub fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}
