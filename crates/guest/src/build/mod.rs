//! Kernel builds from git trees: the image of one commit (with a patch
//! series applied, for a tree source), built out of tree or taken from the
//! image cache when that commit was built before with the same config,
//! arch and compiler. Tree kernel specs (`source::tree`) and bisect's
//! steps build here.
//!
//! The build: `make O=BUILD defconfig` and `savedefconfig`, then ptelab's
//! config fragment (`kconfig`) on that minimal config, or the user's config
//! copied in, `olddefconfig`, a check that the config can boot a ptelab
//! guest (refused before the long part otherwise), then the arch's image target (`bzImage`; `Image` for arm64,
//! since guests boot an uncompressed arm64 Image), `-j` all cores, ccache
//! when installed, the cross compiler's prefix when the arch is not this
//! machine's, and a line of progress every [`PROGRESS_EVERY`]. One build
//! directory per tree, arch and config, so that the next commit builds
//! incrementally. `--build-cmd` replaces all of it (run with `sh -c` in the
//! tree, `OUT` naming the image to write).

pub mod git;
pub mod kconfig;

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use sha2::{Digest, Sha256};

use crate::arch::facts;
use crate::error::bail_usage;
use crate::workload::Arch;

/// How often a long build says how far it is.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// Where a build's config comes from.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Config {
    /// The arch's defconfig with ptelab's fragment (`kconfig`): the default.
    Ptelab,
    /// The arch's defconfig alone (`--defconfig`): x86-64's has no THP.
    Defconfig,
    /// The user's `--config`, completed by `olddefconfig`.
    File(PathBuf),
}

impl Config {
    /// `--config FILE` when given, `--defconfig`, else ptelab's.
    pub fn from_flags(file: Option<&Path>, defconfig: bool) -> Config {
        match file {
            Some(f) => Config::File(std::path::absolute(f).unwrap_or_else(|_| f.to_path_buf())),
            None if defconfig => Config::Defconfig,
            None => Config::Ptelab,
        }
    }

    /// How a kernel's description names it.
    pub fn describe(&self) -> String {
        match self {
            Config::Ptelab => "ptelab's config".into(),
            Config::Defconfig => "defconfig".into(),
            Config::File(f) => format!("config {}", f.display()),
        }
    }
}

/// How a tree's commits are built: data, so that a cluster's task builds as
/// a local one does (the fleet's `builds`).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Builder {
    pub repo: PathBuf,
    pub arch: Arch,
    pub config: Config,
    /// `--build-cmd`: replaces make.
    pub command: Option<String>,
    /// `builds/` under the kernel cache: images, build directories, logs.
    pub root: PathBuf,
    /// The compiler's `--version` line (`compiler`), taken where the build
    /// is planned: part of what names an image.
    pub compiler: String,
    /// What the cells asked for need of the config: a config (or a cached
    /// image's) without it is refused. Not part of what names an image.
    #[serde(default)]
    pub needs: BTreeSet<kconfig::Need>,
}

/// The cross compiler prefix for `arch` on this machine, and its Debian package.
fn cross(arch: Arch) -> Option<(&'static str, &'static str)> {
    if Arch::host() == Some(arch) {
        return None;
    }
    Some((facts(arch).cross_prefix, facts(arch).cross_package))
}

fn in_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            let f = d.join(program);
            f.is_file()
                && std::fs::metadata(&f).is_ok_and(|m| {
                    use std::os::unix::fs::PermissionsExt;
                    m.permissions().mode() & 0o111 != 0
                })
        })
    })
}

/// A commit checked out in its builder's tree, ready to build here or on a
/// cluster's node; its image is kept under `id` (the commit, or a tree
/// kernel's `COMMIT+SERIES`). Holds the tree's lock, when it took one,
/// until dropped.
#[derive(Debug)]
pub struct Checkout {
    /// The commit checked out (a series' last, when one was applied).
    pub head: String,
    pub id: String,
    pub builder: Builder,
    lock: Option<std::fs::File>,
}

impl Checkout {
    pub fn new(head: String, id: String, builder: Builder) -> Checkout {
        Checkout {
            head,
            id,
            builder,
            lock: None,
        }
    }

    /// The same, holding `lock` until dropped.
    pub fn locked(self, lock: std::fs::File) -> Checkout {
        Checkout {
            lock: Some(lock),
            ..self
        }
    }

    /// Whether it holds a lock (for tests).
    pub fn is_locked(&self) -> bool {
        self.lock.is_some()
    }
}

/// What names the compiler a build of `arch` uses: its `--version` line;
/// `--build-cmd` chooses its own.
pub fn compiler(arch: Arch, command: Option<&str>) -> String {
    if let Some(c) = command {
        return format!("build command: {c}");
    }
    let gcc = format!("{}gcc", cross(arch).map_or("", |c| c.0));
    Command::new(&gcc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(String::from)
        })
        .unwrap_or_else(|| format!("{gcc} (not found)"))
}

/// The builds' root under a kernel cache directory.
pub fn root(cache: &Path) -> PathBuf {
    cache.join("builds")
}

impl Builder {
    /// Refuse, before anything is checked out, what cannot build: a config
    /// file that is not there, a missing make or cross compiler.
    pub fn check(&self) -> anyhow::Result<()> {
        if let Config::File(f) = &self.config {
            if !f.is_file() {
                bail_usage!(
                    "--config {} is not a file: pass a kernel .config",
                    f.display()
                );
            }
        }
        if self.command.is_some() {
            return Ok(());
        }
        if self.repo.join(".config").exists() {
            bail_usage!(
                "{} has an in-tree build (.config), which out-of-tree builds refuse: \
                 run `make mrproper` there, or bisect a clean clone",
                self.repo.display()
            );
        }
        if let Some((prefix, package)) = cross(self.arch) {
            if !in_path(&format!("{prefix}gcc")) {
                bail_usage!(
                    "building an {} kernel here needs the cross compiler {prefix}gcc: apt-get install {package}",
                    self.arch
                );
            }
        }
        let missing: Vec<&str> = ["make", "flex", "bison", "bc"]
            .into_iter()
            .filter(|p| !in_path(p))
            .collect();
        if !missing.is_empty() {
            bail_usage!(
                "a kernel build needs {} (not installed): apt-get install build-essential flex \
                 bison bc libelf-dev libssl-dev, or run ./setup (or pass --build-cmd)",
                missing.join(", ")
            );
        }
        Ok(())
    }

    /// A short hash of what makes two builds of one commit differ: arch,
    /// config, compiler and build command.
    pub fn key(&self) -> anyhow::Result<String> {
        let mut h = Sha256::new();
        h.update(self.arch.name());
        h.update(b"\0");
        h.update(&self.compiler);
        match &self.config {
            Config::Ptelab => {
                // The recipe's version: v2 applies the fragment to
                // savedefconfig's minimal config (see `Builder::make`).
                h.update(b"\0ptelab v2\0");
                h.update(kconfig::identity(self.arch));
            }
            Config::Defconfig => h.update(b"\0defconfig"),
            Config::File(f) => {
                h.update(b"file\0");
                h.update(std::fs::read(f).with_context(|| format!("reading {}", f.display()))?);
            }
        }
        if let Some(c) = &self.command {
            h.update(b"\0cmd\0");
            h.update(c);
        }
        Ok(format!("{:x}", h.finalize())[..16].to_string())
    }

    /// The cached image of `commit` (it exists once built); `commit` may
    /// carry a suffix naming a series applied on it.
    pub fn image(&self, commit: &str) -> anyhow::Result<PathBuf> {
        Ok(self
            .root
            .join("images")
            .join(format!("{}-{}", self.arch.name(), self.key()?))
            .join(commit)
            .join(facts(self.arch).image_target))
    }

    /// The cached image of `commit`, if it was built before (said on stderr).
    pub fn cached(&self, commit: &str) -> anyhow::Result<Option<PathBuf>> {
        let image = self.image(commit)?;
        if !image.is_file() {
            return Ok(None);
        }
        // An image built before for other cells may lack what these need.
        let config = image.with_file_name(".config");
        if let (Ok(text), false) = (std::fs::read_to_string(&config), self.needs.is_empty()) {
            kconfig::check(&text, self.arch, &self.config, &self.needs)?;
        }
        eprintln!(
            "ptelab: {} is built already: {}",
            label(commit),
            image.display()
        );
        Ok(Some(image))
    }

    /// The log of `commit`'s build.
    pub fn log(&self, commit: &str) -> PathBuf {
        self.root
            .join("logs")
            .join(format!("build-{}-{}.log", label(commit), self.arch.name()))
    }

    /// The same builder on another work tree of the repository (its own
    /// build directory, since that is kept per tree).
    pub fn in_tree(&self, tree: &Path) -> Builder {
        Builder {
            repo: tree.to_path_buf(),
            ..self.clone()
        }
    }

    /// The image of the commit checked out in the tree: cached, or built
    /// now. `Ok(Err(why))` is a failed build (the log named in `why`); a
    /// config that cannot boot a guest, or run the cells asked for, is a
    /// usage error, before the image builds. `interrupted` (SIGINT,
    /// SIGTERM) stops the build.
    pub fn build(
        &self,
        commit: &str,
        interrupted: &AtomicBool,
    ) -> anyhow::Result<Result<PathBuf, String>> {
        if let Some(image) = self.cached(commit)? {
            return Ok(Ok(image));
        }
        let image = self.image(commit)?;
        let dir = image.parent().expect("image in a directory");
        let staging = dir.with_extension(format!("partial-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging)
            .with_context(|| format!("creating {}", staging.display()))?;
        let log = self.log(commit);
        std::fs::create_dir_all(log.parent().expect("logs/"))?;
        // The log of this build only, not of earlier attempts.
        let _ = std::fs::remove_file(&log);
        let out = staging.join(image.file_name().expect("a name"));
        eprintln!(
            "ptelab: building {} ({}) -- log {}",
            label(commit),
            self.arch,
            log.display()
        );
        let started = Instant::now();
        let made = match &self.command {
            Some(cmd) => self.run(
                &log,
                Command::new("sh").args(["-c", cmd]).env("OUT", &out),
                interrupted,
                None,
            ),
            None => self.make(&log, &out, commit, interrupted),
        };
        let ok = match made {
            Ok(ok) => ok,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staging);
                return Err(e);
            }
        };
        if interrupted.load(Ordering::SeqCst) {
            let _ = std::fs::remove_dir_all(&staging);
            anyhow::bail!("interrupted while building {}", label(commit));
        }
        if !ok || !out.is_file() {
            let _ = std::fs::remove_dir_all(&staging);
            return Ok(Err(format!(
                "the build failed{}; log {}",
                if ok { " (no image written)" } else { "" },
                log.display()
            )));
        }
        let _ = std::fs::remove_dir_all(dir);
        std::fs::rename(&staging, dir)
            .with_context(|| format!("moving the build into {}", dir.display()))?;
        eprintln!(
            "ptelab: built {} in {:.0} s",
            label(commit),
            started.elapsed().as_secs_f64()
        );
        Ok(Ok(image))
    }

    /// The out-of-tree build directory kept per tree, arch and config.
    pub fn build_dir(&self) -> anyhow::Result<PathBuf> {
        Ok(self
            .root
            .join("build")
            .join(format!("{}-{}", path_hash(&self.repo), self.key()?)))
    }

    /// `make` in the build directory: the config, its check, the image.
    fn make(
        &self,
        log: &Path,
        out: &Path,
        commit: &str,
        interrupted: &AtomicBool,
    ) -> anyhow::Result<bool> {
        let build = self.build_dir()?;
        std::fs::create_dir_all(&build)?;
        let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut vars = vec![
            format!("O={}", build.display()),
            format!("ARCH={}", facts(self.arch).kernel_arch),
        ];
        let prefix = cross(self.arch).map_or("", |c| c.0);
        if !prefix.is_empty() {
            vars.push(format!("CROSS_COMPILE={prefix}"));
        }
        if in_path("ccache") {
            vars.push(format!("CC=ccache {prefix}gcc"));
        }
        let make = |targets: &[&str]| {
            let mut c = Command::new("make");
            c.args(&vars).arg(format!("-j{jobs}")).args(targets);
            c
        };
        let config = build.join(".config");
        match &self.config {
            Config::Ptelab | Config::Defconfig => {
                if !self.run(log, &mut make(&["defconfig"]), interrupted, None)? {
                    return Ok(false);
                }
                if self.config == Config::Ptelab {
                    // The fragment goes on defconfig's minimal form, not on
                    // the full .config: there, what defconfig's options
                    // only select (Kerberos crypto for NFS, say) would stay
                    // on once the fragment turns those options off.
                    if !self.run(log, &mut make(&["savedefconfig"]), interrupted, None)? {
                        return Ok(false);
                    }
                    let minimal = build.join("defconfig");
                    let mut text = std::fs::read_to_string(&minimal)
                        .with_context(|| format!("reading {}", minimal.display()))?;
                    text.push_str(&kconfig::fragment(self.arch));
                    std::fs::write(&config, text)
                        .with_context(|| format!("writing {}", config.display()))?;
                }
            }
            Config::File(f) => {
                std::fs::copy(f, &config)
                    .with_context(|| format!("copying {} into {}", f.display(), build.display()))?;
            }
        }
        if !self.run(log, &mut make(&["olddefconfig"]), interrupted, None)? {
            return Ok(false);
        }
        let text = std::fs::read_to_string(&config)
            .with_context(|| format!("reading {}", config.display()))?;
        kconfig::check(&text, self.arch, &self.config, &self.needs)?;
        let target = facts(self.arch).image_target;
        let progress = Progress {
            what: format!("{} ({})", label(commit), self.arch),
            count: build.join(".ptelab-files"),
        };
        if !self.run(log, &mut make(&[target]), interrupted, Some(&progress))? {
            return Ok(false);
        }
        let built = build.join(facts(self.arch).image_path);
        std::fs::copy(&built, out).with_context(|| format!("copying {}", built.display()))?;
        // The build's config beside the image (`source::image` finds it there).
        let _ = std::fs::copy(&config, out.with_file_name(".config"));
        Ok(true)
    }

    /// Run `cmd` in the tree with its output appended to `log`, in a
    /// process group of its own that is killed when `interrupted` is set
    /// (SIGINT, SIGTERM, SIGHUP), so no make outlives ptelab. With
    /// `progress`, the files compiled are counted and said every
    /// [`PROGRESS_EVERY`].
    fn run(
        &self,
        log: &Path,
        cmd: &mut Command,
        interrupted: &AtomicBool,
        progress: Option<&Progress>,
    ) -> anyhow::Result<bool> {
        use std::os::unix::process::CommandExt;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        writeln!(f, "$ {cmd:?}")?;
        let mut child = cmd
            .current_dir(&self.repo)
            .env("ARCH", facts(self.arch).kernel_arch)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(f.try_clone()?)
            .process_group(0)
            .spawn()
            .with_context(|| format!("running {cmd:?}"))?;
        // make's stdout goes to the log through a counter of compiled files.
        let compiled = Arc::new(AtomicUsize::new(0));
        let stdout = child.stdout.take().expect("piped");
        let counter = {
            let compiled = compiled.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                {
                    if compiles(&line) {
                        compiled.fetch_add(1, Ordering::Relaxed);
                    }
                    let _ = writeln!(f, "{line}");
                }
            })
        };
        let started = Instant::now();
        let expected =
            progress.and_then(|p| std::fs::read_to_string(&p.count).ok()?.trim().parse().ok());
        let mut said = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break Some(status);
            }
            if interrupted.load(Ordering::SeqCst) {
                // SAFETY: killpg(2) on the group of our own child.
                unsafe { libc::killpg(child.id() as libc::pid_t, libc::SIGTERM) };
                let _ = child.wait();
                break None;
            }
            if let Some(p) = progress {
                if said.elapsed() >= PROGRESS_EVERY {
                    said = Instant::now();
                    eprintln!(
                        "ptelab: building {}: {}, {:.0} s",
                        p.what,
                        progress_line(compiled.load(Ordering::Relaxed), expected),
                        started.elapsed().as_secs_f64()
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let _ = counter.join();
        let ok = status.is_some_and(|s| s.success());
        // A build that compiled more than the last one did is the best
        // guess of what a clean build of this directory compiles.
        if let (true, Some(p)) = (ok, progress) {
            let n = compiled.load(Ordering::Relaxed);
            if expected.is_none_or(|e| n > e) {
                let _ = std::fs::write(&p.count, n.to_string());
            }
        }
        Ok(ok)
    }
}

/// A long build's progress: what it builds, and where the count of files a
/// clean build compiled is kept (`.ptelab-files` in its build directory).
struct Progress {
    what: String,
    count: PathBuf,
}

/// A line of kbuild's output that compiles or assembles one file
/// (`  CC      mm/mprotect.o`).
fn compiles(line: &str) -> bool {
    let mut words = line.split_whitespace();
    line.starts_with("  ")
        && matches!(words.next(), Some("CC" | "AS" | "RUSTC"))
        && words.next().is_some()
}

/// `1234 files compiled` or, when a clean build's count is known,
/// `1234 of about 2345 files compiled`.
fn progress_line(compiled: usize, expected: Option<usize>) -> String {
    match expected {
        Some(e) if e >= compiled => format!("{compiled} of about {e} files compiled"),
        _ => format!("{compiled} files compiled"),
    }
}

/// A short hash of a path: what names the directories kept per tree.
pub fn path_hash(path: &Path) -> String {
    format!("{:x}", Sha256::digest(path.as_os_str().as_encoded_bytes()))[..12].to_string()
}

/// An image's id as messages and logs name it: the commit's short id, and
/// a series' hash after `+` (`9439877d6f08+d31bb4cce2d6`).
pub fn label(id: &str) -> String {
    match id.split_once('+') {
        Some((commit, series)) => format!("{}+{series}", short(commit)),
        None => short(id).to_string(),
    }
}

/// A commit's id as tables print it.
pub fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

#[cfg(test)]
mod tests {
    use super::*;

    static NEVER: AtomicBool = AtomicBool::new(false);

    fn builder(root: &Path, repo: &Path, arch: Arch, cmd: Option<&str>) -> Builder {
        Builder {
            repo: repo.to_path_buf(),
            arch,
            config: Config::Defconfig,
            command: cmd.map(String::from),
            root: root.to_path_buf(),
            compiler: compiler(arch, cmd),
            needs: BTreeSet::new(),
        }
    }

    #[test]
    fn a_build_command_writes_the_image_once_per_commit() {
        let root = tempfile::tempdir().unwrap();
        let repo = tempfile::tempdir().unwrap();
        std::fs::write(repo.path().join("counter"), "").unwrap();
        let b = builder(
            root.path(),
            repo.path(),
            Arch::X86_64,
            Some("echo built >> counter && echo image > \"$OUT\""),
        );
        let img = b.build("0123456789abcdef", &NEVER).unwrap().unwrap();
        assert_eq!(std::fs::read_to_string(&img).unwrap(), "image\n");
        assert_eq!(b.build("0123456789abcdef", &NEVER).unwrap().unwrap(), img);
        assert_eq!(
            std::fs::read_to_string(repo.path().join("counter")).unwrap(),
            "built\n"
        );
        // Another config is another image.
        let other = Builder {
            config: Config::File(repo.path().join("counter")),
            ..b.clone()
        };
        assert_ne!(other.image("0123456789abcdef").unwrap(), img);
        // A failing build is a skip with its log, and leaves nothing cached.
        let bad = builder(root.path(), repo.path(), Arch::X86_64, Some("exit 3"));
        let why = bad.build("fedcba9876543210", &NEVER).unwrap().unwrap_err();
        assert!(
            why.contains("the build failed") && why.contains(".log"),
            "{why}"
        );
        assert!(!bad.image("fedcba9876543210").unwrap().exists());
    }

    /// The make path on a stand-in tree whose Makefile writes what the
    /// kernel's would: the config target's `.config` in `O`, then the image.
    #[test]
    fn make_builds_out_of_tree_with_the_config_and_the_image_target() {
        if !in_path("make") {
            return; // make is checked for (and named) by Builder::check
        }
        let root = tempfile::tempdir().unwrap();
        let repo = tempfile::tempdir().unwrap();
        std::fs::write(
            repo.path().join("Makefile"),
            "defconfig olddefconfig:\n\techo \"$@ $(ARCH)\" >> $(O)/.config\n\
             savedefconfig:\n\tcp $(O)/.config $(O)/defconfig\n\
             bzImage:\n\tmkdir -p $(O)/arch/x86/boot && echo \"kernel of $(ARCH)\" > $(O)/arch/x86/boot/bzImage\n",
        )
        .unwrap();
        let config = repo.path().join("my.config");
        let bootable: String = kconfig::missing("", Arch::X86_64, kconfig::Section::Boot)
            .iter()
            .map(|s| format!("{}=y\n", s.option))
            .collect();
        std::fs::write(&config, format!("{bootable}CONFIG_X=y\n")).unwrap();
        let mut b = builder(root.path(), repo.path(), Arch::X86_64, None);
        b.config = Config::File(config);
        if Arch::host() != Some(Arch::X86_64) {
            return; // the stand-in has no cross compiler to name
        }
        let img = b.build("00000000000000000001", &NEVER).unwrap().unwrap();
        assert_eq!(std::fs::read_to_string(&img).unwrap(), "kernel of x86_64\n");
        let cfg = std::fs::read_to_string(img.with_file_name(".config")).unwrap();
        assert_eq!(cfg, format!("{bootable}CONFIG_X=y\nolddefconfig x86_64\n"));
        // Nothing was written into the tree itself.
        let mut files: Vec<_> = std::fs::read_dir(repo.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        assert_eq!(files, ["Makefile", "my.config"]);
        // The stand-in's defconfig cannot boot a guest: refused before
        // the image builds, and nothing is cached.
        b.config = Config::Defconfig;
        let e = b.build("00000000000000000002", &NEVER).unwrap_err();
        assert!(crate::error::is_usage(&e));
        assert!(e.to_string().contains("leave --defconfig out"), "{e}");
        assert!(!b.image("00000000000000000002").unwrap().exists());
        // ptelab's config: the stand-in's defconfig, then the fragment.
        b.config = Config::Ptelab;
        let img = b.build("00000000000000000003", &NEVER).unwrap().unwrap();
        let cfg = std::fs::read_to_string(img.with_file_name(".config")).unwrap();
        assert!(cfg.starts_with("defconfig x86_64\n"), "{cfg}");
        assert!(cfg.contains("# CONFIG_NET is not set\n"), "{cfg}");
        assert!(cfg.ends_with("olddefconfig x86_64\n"), "{cfg}");
    }

    #[test]
    fn progress_counts_the_files_kbuild_compiles() {
        assert!(compiles("  CC      mm/mprotect.o"));
        assert!(compiles("  AS      arch/x86/entry/entry_64.o"));
        assert!(!compiles("  LD      vmlinux.o"));
        assert!(!compiles("CC mm/x.o"));
        assert!(!compiles("make[1]: Entering directory"));
        assert_eq!(progress_line(12, None), "12 files compiled");
        assert_eq!(
            progress_line(12, Some(300)),
            "12 of about 300 files compiled"
        );
        assert_eq!(progress_line(301, Some(300)), "301 files compiled");
    }

    #[test]
    fn a_missing_cross_compiler_names_its_package() {
        let other = if Arch::host() == Some(Arch::Arm64) {
            Arch::X86_64
        } else {
            Arch::Arm64
        };
        let (prefix, package) = cross(other).unwrap();
        if in_path(&format!("{prefix}gcc")) {
            return; // installed here: nothing to refuse
        }
        let d = tempfile::tempdir().unwrap();
        let e = builder(d.path(), d.path(), other, None)
            .check()
            .unwrap_err();
        assert!(crate::error::is_usage(&e));
        assert!(e.to_string().contains(package), "{e}");
    }

    #[test]
    fn an_in_tree_build_is_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(".config"), "").unwrap();
        let arch = Arch::host().unwrap_or(Arch::X86_64);
        let e = builder(d.path(), d.path(), arch, None).check().unwrap_err();
        assert!(crate::error::is_usage(&e));
        assert!(e.to_string().contains("make mrproper"), "{e}");
        // A build command decides for itself.
        assert!(builder(d.path(), d.path(), arch, Some("true"))
            .check()
            .is_ok());
    }
}
