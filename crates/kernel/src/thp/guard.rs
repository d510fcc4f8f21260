//! [`KnobGuard`]: holds the lock, recovers what a killed run left, sets the
//! knobs a folio spec needs and restores every knob it changed.

use std::collections::BTreeMap;
use std::fs::File;
use std::time::Duration;

use anyhow::{bail, Context};

use super::knobs::{check_offered_at, knob_write_lock, pmd_size_at, read_knobs_at, write_knob};
use super::lock::{holders, release_holder, take_flock};
use super::plan::plan_for;
use super::recovery::{recover, restore_recorded, write_recovery, Recovery};
use super::KnobPaths;
use crate::signals;
use crate::workload::folio::FolioSpec;

/// Holds the system-wide knob lock; restores every knob it changed on drop.
#[derive(Debug)]
pub struct KnobGuard {
    paths: KnobPaths,
    /// The flock is held while this file is open.
    lock_file: Option<File>,
    /// All knobs as found at acquire (after recovery).
    original: BTreeMap<String, String>,
    /// What is recorded in the recovery file: knobs changed and their originals.
    recovery: Recovery,
}

impl KnobGuard {
    /// Take the lock (calling `on_wait` with who holds it while waiting),
    /// recover knobs left changed by a killed ptelab, snapshot the knobs.
    pub fn acquire(on_wait: &mut dyn FnMut(&str)) -> anyhow::Result<KnobGuard> {
        KnobGuard::acquire_at(KnobPaths::system(), on_wait)
    }

    /// [`KnobGuard::acquire`] with other paths (tests).
    pub fn acquire_at(
        paths: KnobPaths,
        on_wait: &mut dyn FnMut(&str),
    ) -> anyhow::Result<KnobGuard> {
        let flag = signals::interrupted();
        // 1. In-process queue.
        {
            let (m, cv) = holders();
            let me = std::thread::current().id();
            let mut held = m.lock().unwrap_or_else(|e| e.into_inner());
            let mut told = false;
            loop {
                match held.get(&paths.lock) {
                    None => break,
                    Some(&t) if t == me => bail!(
                        "this thread already holds the THP knob lock {} (a KnobGuard is alive): \
                         reuse it instead of acquiring a second one",
                        paths.lock.display()
                    ),
                    Some(_) => {
                        if !told {
                            on_wait("waiting for the THP knob lock held by another thread of this process");
                            told = true;
                        }
                        held = cv
                            .wait_timeout(held, Duration::from_millis(100))
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                        if flag.load(std::sync::atomic::Ordering::Relaxed) {
                            bail!("interrupted while waiting for the THP knob lock");
                        }
                    }
                }
            }
            held.insert(paths.lock.clone(), me);
        }
        let mut guard = KnobGuard {
            recovery: Recovery::new(&paths),
            paths,
            lock_file: None,
            original: BTreeMap::new(),
        };
        // From here on, Drop releases the in-process slot (and the flock).
        guard.lock_file = Some(take_flock(&guard.paths.lock, on_wait, flag)?);
        if let Some(msg) = recover(&guard.paths)? {
            eprintln!("{msg}");
        }
        guard.original = read_knobs_at(&guard.paths.sysfs)?;
        Ok(guard)
    }

    /// Set exactly the knobs `spec` needs (others unchanged).
    pub fn configure_for(&mut self, spec: FolioSpec) -> anyhow::Result<()> {
        check_offered_at(&self.paths.sysfs, spec)?;
        let _w = knob_write_lock();
        let now = read_knobs_at(&self.paths.sysfs)?;
        let plan = plan_for(spec, &now, pmd_size_at(&self.paths.sysfs))?;
        for (name, value) in plan {
            if !self.recovery.original.contains_key(&name) {
                let before = now.get(&name).cloned().unwrap_or_default();
                self.recovery.original.insert(name.clone(), before);
                if self.recovery.original.len() == 1 {
                    signals::register_active(&self.paths.recovery);
                }
                // Record first, then change: a kill between the two is harmless.
                write_recovery(&self.paths.recovery, &self.recovery)?;
            }
            write_knob(&self.paths.sysfs, &name, &value)
                .with_context(|| format!("configuring THP knobs for folio spec {spec}"))?;
        }
        Ok(())
    }

    /// Knobs as found before this guard changed anything.
    pub fn original(&self) -> &BTreeMap<String, String> {
        &self.original
    }

    /// Knobs this guard changed so far, with their original values.
    #[allow(dead_code)] // API for callers that record what a run changed
    pub fn changed(&self) -> &BTreeMap<String, String> {
        &self.recovery.original
    }

    /// Write back every knob this guard changed (the guard stays usable).
    pub fn restore(&mut self) -> anyhow::Result<()> {
        if self.recovery.original.is_empty() {
            return Ok(());
        }
        let _w = knob_write_lock();
        restore_recorded(
            &self.paths.sysfs,
            &self.paths.recovery,
            &self.recovery.original,
        )?;
        self.recovery.original.clear();
        signals::unregister_active(&self.paths.recovery);
        Ok(())
    }
}

impl Drop for KnobGuard {
    fn drop(&mut self) {
        if self.lock_file.is_some() {
            if let Err(e) = self.restore() {
                eprintln!("ptelab: error: {e:#}");
            }
        }
        // The holder's line goes with the hold: the file outlives the run.
        if let Some(f) = &self.lock_file {
            let _ = f.set_len(0);
        }
        // Closing the file drops the flock.
        self.lock_file = None;
        release_holder(&self.paths.lock);
    }
}

#[cfg(test)]
mod tests {
    use std::fs::{self, OpenOptions};
    use std::io::{BufRead, Write};
    use std::os::unix::io::AsRawFd;
    use std::path::Path;
    use std::process::{Command, Stdio};

    use super::super::recovery::read_recovery;
    use super::super::testing::{dead_pid, fake_sysfs, knob, no_wait};
    use super::super::{interrupted, offered_mthp_sizes, read_knobs, RECOVERY_PATH};
    use super::*;
    use crate::procfs::is_root;

    #[test]
    fn guard_on_fake_tree_configures_records_and_restores() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let before = read_knobs_at(&paths.sysfs).unwrap();
        {
            let mut g = KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap();
            assert_eq!(g.original(), &before);
            let holder = fs::read_to_string(&paths.lock).unwrap();
            assert!(
                holder.starts_with(&format!("{} ", std::process::id())),
                "{holder}"
            );

            g.configure_for(FolioSpec::Mthp(64 << 10)).unwrap();
            assert_eq!(knob(&paths, "hugepages-64kB/enabled"), "madvise");
            assert_eq!(knob(&paths, "hugepages-2048kB/enabled"), "never");
            assert_eq!(knob(&paths, "enabled"), "madvise");
            let changed: Vec<&str> = g.changed().keys().map(String::as_str).collect();
            assert_eq!(
                changed,
                ["hugepages-2048kB/enabled", "hugepages-64kB/enabled"]
            );
            let rec = read_recovery(&paths.recovery).unwrap().unwrap();
            assert_eq!(rec.pid, std::process::id());
            assert_eq!(rec.original["hugepages-2048kB/enabled"], "inherit");
            assert_eq!(rec.original["hugepages-64kB/enabled"], "never");

            // A second spec: originals stay the first-seen values.
            g.configure_for(FolioSpec::Mthp(16 << 10)).unwrap();
            assert_eq!(knob(&paths, "hugepages-64kB/enabled"), "never");
            assert_eq!(knob(&paths, "hugepages-16kB/enabled"), "madvise");
            let rec = read_recovery(&paths.recovery).unwrap().unwrap();
            assert_eq!(rec.original.len(), 3);
            assert_eq!(rec.original["hugepages-64kB/enabled"], "never");

            g.restore().unwrap();
            assert_eq!(read_knobs_at(&paths.sysfs).unwrap(), before);
            assert!(!paths.recovery.exists());
            g.configure_for(FolioSpec::Base).unwrap();
            assert_eq!(knob(&paths, "hugepages-2048kB/enabled"), "never");
        }
        assert_eq!(read_knobs_at(&paths.sysfs).unwrap(), before);
        assert!(!paths.recovery.exists());
    }

    /// See: #30. The lock and recovery files hold the command line: only
    /// their owner reads them, and the lock's holder line leaves with the hold.
    #[test]
    fn lock_and_recovery_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        // Left world-readable by an older ptelab.
        fs::write(&paths.lock, "1 ptelab --db postgres://u:s3cret@h/d\n").unwrap();
        fs::set_permissions(&paths.lock, fs::Permissions::from_mode(0o644)).unwrap();
        {
            let mut g = KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap();
            assert_eq!(mode(&paths.lock), 0o600);
            let holder = fs::read_to_string(&paths.lock).unwrap();
            assert!(!holder.contains("s3cret"), "{holder}");
            g.configure_for(FolioSpec::Mthp(64 << 10)).unwrap();
            assert_eq!(mode(&paths.recovery), 0o600);
        }
        assert_eq!(fs::read_to_string(&paths.lock).unwrap(), "");
    }

    #[test]
    fn guard_restores_on_error_and_panic() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let before = read_knobs_at(&paths.sysfs).unwrap();
        let r = std::panic::catch_unwind(|| {
            let mut g = KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap();
            g.configure_for(FolioSpec::Pmd).unwrap();
            g.configure_for(FolioSpec::Mthp(256 << 10)).unwrap();
            panic!("boom in the middle of a cell");
        });
        assert!(r.is_err());
        assert_eq!(read_knobs_at(&paths.sysfs).unwrap(), before);
        assert!(!paths.recovery.exists());

        let run = || -> anyhow::Result<()> {
            let mut g = KnobGuard::acquire_at(paths.clone(), &mut no_wait())?;
            g.configure_for(FolioSpec::Base)?;
            bail!("a cell failed");
        };
        assert!(run().is_err());
        assert_eq!(read_knobs_at(&paths.sysfs).unwrap(), before);
        // The lock is free again.
        drop(KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap());
    }

    #[test]
    fn nested_acquire_on_one_thread_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let _g = KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap();
        let err = KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap_err();
        assert!(err.to_string().contains("already holds"), "{err}");
    }

    #[test]
    fn threads_queue_for_the_guard() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let g = KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap();
        let p2 = paths.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let mut waits = Vec::new();
            let g2 = KnobGuard::acquire_at(p2, &mut |m: &str| {
                waits.push(m.to_owned());
                tx.send(()).unwrap();
            });
            (g2.is_ok(), waits)
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("second thread waits");
        drop(g);
        let (ok, waits) = t.join().unwrap();
        assert!(ok);
        assert_eq!(waits.len(), 1, "{waits:?}");
    }

    #[test]
    fn waiting_for_another_process_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        // Another open file description stands in for another process.
        let other = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&paths.lock)
            .unwrap();
        fs::write(
            &paths.lock,
            "4242 ptelab sweep mprotect-toggle --folios 64K\n",
        )
        .unwrap();
        // SAFETY: flock on a valid descriptor.
        assert_eq!(unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let p2 = paths.clone();
        let lock = paths.lock.clone();
        let t = std::thread::spawn(move || {
            // The holder's line, read while the guard holds the lock (its
            // drop clears it).
            KnobGuard::acquire_at(p2, &mut |m: &str| tx.send(m.to_owned()).unwrap())
                .map(|_g| fs::read_to_string(&lock).unwrap())
        });
        let msg = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(msg, "waiting for the THP knob lock held by pid 4242 (ptelab sweep mprotect-toggle --folios 64K)");
        drop(other);
        let holder = t.join().unwrap().unwrap();
        assert!(
            holder.starts_with(&format!("{} ", std::process::id())),
            "{holder}"
        );
    }

    #[test]
    fn acquire_recovers_knobs_left_by_a_killed_run() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let before = read_knobs_at(&paths.sysfs).unwrap();
        // What a ptelab killed after configuring 64K leaves behind.
        let mut rec = Recovery::new(&paths);
        rec.pid = dead_pid();
        rec.cmdline = "ptelab bench mprotect-toggle --folio 64K".into();
        rec.original
            .insert("hugepages-64kB/enabled".into(), "never".into());
        rec.original
            .insert("hugepages-2048kB/enabled".into(), "inherit".into());
        write_recovery(&paths.recovery, &rec).unwrap();
        fs::write(paths.sysfs.join("hugepages-64kB/enabled"), "madvise\n").unwrap();
        fs::write(paths.sysfs.join("hugepages-2048kB/enabled"), "never\n").unwrap();
        assert!(!rec.writer_alive());

        let g = KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap();
        assert_eq!(g.original(), &before);
        assert_eq!(read_knobs_at(&paths.sysfs).unwrap(), before);
        assert!(!paths.recovery.exists());
        drop(g);

        // recover() reports who left them.
        write_recovery(&paths.recovery, &rec).unwrap();
        fs::write(paths.sysfs.join("hugepages-64kB/enabled"), "always\n").unwrap();
        let msg = recover(&paths).unwrap().unwrap();
        assert!(
            msg.contains(&format!(
                "pid {} (ptelab bench mprotect-toggle --folio 64K), no longer running",
                rec.pid
            )),
            "{msg}"
        );
        assert!(msg.contains("hugepages-64kB/enabled=never"), "{msg}");
        assert!(recover(&paths).unwrap().is_none());
    }

    #[test]
    fn stale_temporaries_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let stale = dir.path().join(format!("ptelab.knobs.tmp.{}", dead_pid()));
        let unrelated = dir.path().join("ptelab.knobs.tmp.x1");
        fs::write(&stale, "{}").unwrap();
        fs::write(&unrelated, "{}").unwrap();
        drop(KnobGuard::acquire_at(paths, &mut no_wait()).unwrap());
        assert!(!stale.exists());
        assert!(unrelated.exists());
    }

    #[test]
    fn tampered_recovery_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let mut rec = Recovery::new(&paths);
        rec.pid = dead_pid();
        rec.original
            .insert("../../../../etc/motd".into(), "never".into());
        write_recovery(&paths.recovery, &rec).unwrap();
        let err = KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap_err();
        assert!(format!("{err:#}").contains("not a THP knob"), "{err:#}");
        fs::write(&paths.recovery, "{not json").unwrap();
        assert!(read_recovery(&paths.recovery).is_err());
        // The failed acquire released the lock.
        fs::remove_file(&paths.recovery).unwrap();
        drop(KnobGuard::acquire_at(paths, &mut no_wait()).unwrap());
    }

    #[test]
    fn failed_restore_keeps_the_recovery_file() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let mut g = KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap();
        g.configure_for(FolioSpec::Mthp(32 << 10)).unwrap();
        // The knob vanished (e.g. sysfs changed under us): restore must say so.
        fs::remove_dir_all(paths.sysfs.join("hugepages-32kB")).unwrap();
        let err = g.restore().unwrap_err();
        assert!(err.to_string().contains("next ptelab run retries"), "{err}");
        assert!(paths.recovery.exists());
        // Put it back: the next attempt (here: drop) succeeds and removes the file.
        fs::create_dir_all(paths.sysfs.join("hugepages-32kB")).unwrap();
        fs::write(paths.sysfs.join("hugepages-32kB/enabled"), "madvise\n").unwrap();
        drop(g);
        assert_eq!(knob(&paths, "hugepages-32kB/enabled"), "never");
        assert!(!paths.recovery.exists());
    }

    // -----------------------------------------------------------------------
    // The real machine (root, mTHP 64K offered). Every change goes through a
    // KnobGuard, so these serialize with any other ptelab on the machine.

    fn real_ready(test: &str) -> bool {
        if !is_root() {
            eprintln!("skipping {test}: needs root to change THP knobs");
            return false;
        }
        if !offered_mthp_sizes().contains(&(64 << 10)) {
            eprintln!("skipping {test}: this kernel offers no 64K mTHP");
            return false;
        }
        true
    }

    /// All knobs as they are when nobody holds the lock.
    fn real_snapshot() -> BTreeMap<String, String> {
        KnobGuard::acquire(&mut |_| {}).unwrap().original().clone()
    }

    fn assert_64k_configured() {
        let k = read_knobs().unwrap();
        assert_eq!(k["hugepages-64kB/enabled"], "madvise");
        for (name, v) in &k {
            if name.ends_with("/enabled") && name != "hugepages-64kB/enabled" {
                assert_eq!(v, "never", "{name}");
            }
        }
    }

    #[test]
    fn real_guard_configures_and_restores() {
        if !real_ready("real_guard_configures_and_restores") {
            return;
        }
        let before;
        {
            let mut g = KnobGuard::acquire(&mut |m| eprintln!("{m}")).unwrap();
            before = g.original().clone();
            for spec in FolioSpec::all() {
                g.configure_for(spec).unwrap();
            }
            g.configure_for(FolioSpec::Mthp(64 << 10)).unwrap();
            assert_64k_configured();
            assert!(Path::new(RECOVERY_PATH).exists());
        }
        assert_eq!(real_snapshot(), before);
    }

    #[test]
    fn real_guard_restores_on_panic() {
        if !real_ready("real_guard_restores_on_panic") {
            return;
        }
        let before = real_snapshot();
        let r = std::panic::catch_unwind(|| {
            let mut g = KnobGuard::acquire(&mut |m| eprintln!("{m}")).unwrap();
            g.configure_for(FolioSpec::Mthp(64 << 10)).unwrap();
            assert_64k_configured();
            panic!("boom with 64K configured");
        });
        assert!(r.is_err());
        assert_eq!(real_snapshot(), before);
    }

    /// Entry point of the child processes of the tests below (does nothing
    /// unless PTELAB_THP_CHILD is set): acquire, configure 64K, say READY,
    /// then poll the interrupt flag (`poll`) or hang (`stuck`).
    #[test]
    fn child_entry() {
        let Ok(mode) = std::env::var("PTELAB_THP_CHILD") else {
            return;
        };
        let flag = interrupted();
        let mut g = KnobGuard::acquire(&mut |m| eprintln!("{m}")).unwrap();
        g.configure_for(FolioSpec::Mthp(64 << 10)).unwrap();
        println!("READY");
        std::io::stdout().flush().unwrap();
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            if mode == "poll" && flag.load(std::sync::atomic::Ordering::Relaxed) {
                println!("INTERRUPTED");
                return; // the guard restores on drop
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("child was not stopped within 60 s");
    }

    struct Child(std::process::Child);

    impl Child {
        fn spawn(mode: &str) -> Child {
            let exe = std::env::current_exe().unwrap();
            let mut child = Command::new(exe)
                .args([
                    "--exact",
                    // libtest names a test by its path below the crate.
                    &format!(
                        "{}::child_entry",
                        module_path!().split_once("::").unwrap().1
                    ),
                    "--nocapture",
                    "--test-threads=1",
                    "-q",
                ])
                .env("PTELAB_THP_CHILD", mode)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let out = child.stdout.take().unwrap();
            let mut lines = std::io::BufReader::new(out).lines();
            loop {
                match lines.next() {
                    Some(Ok(l)) if l.trim() == "READY" => break,
                    Some(Ok(_)) => {}
                    other => panic!("child ended before READY: {other:?} {:?}", child.wait()),
                }
            }
            std::thread::spawn(move || for _ in lines {});
            Child(child)
        }

        fn signal(&self, sig: i32) {
            // SAFETY: kill on our own child's pid.
            assert_eq!(unsafe { libc::kill(self.0.id() as libc::pid_t, sig) }, 0);
        }

        fn wait(mut self, within: Duration) -> std::process::ExitStatus {
            let start = std::time::Instant::now();
            loop {
                if let Some(st) = self.0.try_wait().unwrap() {
                    return st;
                }
                if start.elapsed() > within {
                    self.0.kill().ok();
                    panic!("child did not exit within {within:?}");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    #[test]
    fn real_sigint_in_a_polling_loop_restores() {
        if !real_ready("real_sigint_in_a_polling_loop_restores") {
            return;
        }
        let before = real_snapshot();
        let child = Child::spawn("poll");
        let pid = child.0.id();
        assert_64k_configured();
        child.signal(libc::SIGINT);
        let st = child.wait(Duration::from_secs(20));
        assert!(st.success(), "{st:?}");
        assert_eq!(real_snapshot(), before);
        let left = read_recovery(Path::new(RECOVERY_PATH)).unwrap();
        assert!(!matches!(left, Some(r) if r.pid == pid));
    }

    #[test]
    fn real_second_sigint_restores_a_stuck_run() {
        if !real_ready("real_second_sigint_restores_a_stuck_run") {
            return;
        }
        let before = real_snapshot();
        let child = Child::spawn("stuck");
        child.signal(libc::SIGINT);
        std::thread::sleep(Duration::from_millis(300));
        assert_64k_configured();
        child.signal(libc::SIGINT);
        let st = child.wait(Duration::from_secs(20));
        assert_eq!(st.code(), Some(130), "{st:?}");
        assert_eq!(real_snapshot(), before);
    }

    #[test]
    fn real_stuck_run_is_restored_after_the_grace_period() {
        if !real_ready("real_stuck_run_is_restored_after_the_grace_period") {
            return;
        }
        let before = real_snapshot();
        let child = Child::spawn("stuck");
        child.signal(libc::SIGTERM);
        let st = child.wait(signals::GRACE + Duration::from_secs(20));
        assert_eq!(st.code(), Some(128 + libc::SIGTERM), "{st:?}");
        assert_eq!(real_snapshot(), before);
    }

    #[test]
    fn real_sigkill_is_repaired_by_the_next_guard() {
        if !real_ready("real_sigkill_is_repaired_by_the_next_guard") {
            return;
        }
        let before = real_snapshot();
        let child = Child::spawn("stuck");
        child.signal(libc::SIGKILL);
        let st = child.wait(Duration::from_secs(20));
        assert_eq!(st.code(), None, "{st:?}");
        // Left as the killed run had them, with the originals on record
        // (unless a concurrent guard already recovered them).
        if let Some(rec) = read_recovery(Path::new(RECOVERY_PATH)).unwrap() {
            assert!(!rec.writer_alive());
            assert_eq!(
                rec.original.get("hugepages-64kB/enabled"),
                before.get("hugepages-64kB/enabled")
            );
        }
        let g = KnobGuard::acquire(&mut |m| eprintln!("{m}")).unwrap();
        assert_eq!(g.original(), &before);
        assert!(!Path::new(RECOVERY_PATH).exists());
        drop(g);
        assert_eq!(real_snapshot(), before);
    }
}
