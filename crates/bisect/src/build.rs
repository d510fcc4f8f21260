//! One step's kernel: built out of tree from the commit checked out, or
//! taken from the image cache when that commit (with that config and
//! arch) was built before, so an interrupted bisect resumes cheaply.
//!
//! The build: `make O=BUILD CONFIG-TARGET` (`defconfig`, or the user's
//! config copied in and `olddefconfig`), then the arch's image target
//! (`bzImage`; `Image` for arm64, since guests boot an uncompressed arm64
//! Image), `-j` all cores, ccache when installed, and the cross compiler's
//! prefix when the arch is not this machine's. `--build-cmd` replaces all
//! of it (run with `sh -c` in the tree, `OUT` naming the image to write).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;
use sha2::{Digest, Sha256};

use crate::error::bail_usage;
use crate::guest::arch::facts;
use crate::workload::Arch;

/// Where the config of every step comes from.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum Config {
    Defconfig,
    File(PathBuf),
}

/// How every step is built: data, so that a cluster's task builds as a
/// local step does (`build_on_slurm`).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Builder {
    pub repo: PathBuf,
    pub arch: Arch,
    pub config: Config,
    /// `--build-cmd`: replaces make.
    pub command: Option<String>,
    /// `bisect/` under the kernel cache.
    pub root: PathBuf,
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
        if !in_path("make") {
            bail_usage!(
                "make is not installed: apt-get install build-essential (or pass --build-cmd)"
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
        Ok(())
    }

    /// A short hash of what makes two builds of one commit differ: arch,
    /// config and build command.
    pub fn key(&self) -> anyhow::Result<String> {
        let mut h = Sha256::new();
        h.update(self.arch.name());
        match &self.config {
            Config::Defconfig => h.update(b"defconfig"),
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

    /// The cached image of `commit` (it exists once built).
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
        eprintln!(
            "ptelab: {} is built already: {}",
            short(commit),
            image.display()
        );
        Ok(Some(image))
    }

    /// The log of `commit`'s build.
    pub fn log(&self, commit: &str) -> PathBuf {
        self.root
            .join("logs")
            .join(format!("build-{}-{}.log", short(commit), self.arch.name()))
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
    /// now. `Ok(Err(why))` is a failed build (the log named in `why`).
    pub fn build(&self, commit: &str) -> anyhow::Result<Result<PathBuf, String>> {
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
        let out = staging.join(image.file_name().expect("a name"));
        eprintln!(
            "ptelab: building {} ({}) -- log {}",
            short(commit),
            self.arch,
            log.display()
        );
        let started = std::time::Instant::now();
        let ok = match &self.command {
            Some(cmd) => self.run(&log, Command::new("sh").args(["-c", cmd]).env("OUT", &out))?,
            None => self.make(&log, &out)?,
        };
        if crate::kernel::signals::interrupted().load(std::sync::atomic::Ordering::SeqCst) {
            let _ = std::fs::remove_dir_all(&staging);
            anyhow::bail!("interrupted while building {}", short(commit));
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
            short(commit),
            started.elapsed().as_secs_f64()
        );
        Ok(Ok(image))
    }

    /// `make` in an out-of-tree build directory kept per tree, arch and
    /// config, so steps build incrementally.
    fn make(&self, log: &Path, out: &Path) -> anyhow::Result<bool> {
        let key = self.key()?;
        let build = self
            .root
            .join("build")
            .join(format!("{}-{key}", path_hash(&self.repo)));
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
        let config_target = match &self.config {
            Config::Defconfig => "defconfig",
            Config::File(f) => {
                std::fs::copy(f, build.join(".config"))
                    .with_context(|| format!("copying {} into {}", f.display(), build.display()))?;
                "olddefconfig"
            }
        };
        let target = facts(self.arch).image_target;
        if !self.run(log, &mut make(&[config_target]))? || !self.run(log, &mut make(&[target]))? {
            return Ok(false);
        }
        let built = build.join(facts(self.arch).image_path);
        std::fs::copy(&built, out).with_context(|| format!("copying {}", built.display()))?;
        // The build's config beside the image (`guest::source::image` finds it there).
        let _ = std::fs::copy(build.join(".config"), out.with_file_name(".config"));
        Ok(true)
    }

    /// Run `cmd` in the tree with its output appended to `log`, in a
    /// process group of its own that is killed when ptelab is interrupted
    /// (SIGINT, SIGTERM, SIGHUP), so no make outlives it.
    fn run(&self, log: &Path, cmd: &mut Command) -> anyhow::Result<bool> {
        use std::io::Write;
        use std::os::unix::process::CommandExt;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        writeln!(f, "$ {cmd:?}")?;
        let interrupted = crate::kernel::signals::interrupted();
        let mut child = cmd
            .current_dir(&self.repo)
            .env("ARCH", facts(self.arch).kernel_arch)
            .stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f)
            .process_group(0)
            .spawn()
            .with_context(|| format!("running {cmd:?}"))?;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status.success());
            }
            if interrupted.load(std::sync::atomic::Ordering::SeqCst) {
                // SAFETY: killpg(2) on the group of our own child.
                unsafe { libc::killpg(child.id() as libc::pid_t, libc::SIGTERM) };
                let _ = child.wait();
                return Ok(false);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// A short hash of a path: what names the directories kept per tree.
pub fn path_hash(path: &Path) -> String {
    format!("{:x}", Sha256::digest(path.as_os_str().as_encoded_bytes()))[..12].to_string()
}

/// A commit's id as tables print it.
pub fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder(root: &Path, repo: &Path, arch: Arch, cmd: Option<&str>) -> Builder {
        Builder {
            repo: repo.to_path_buf(),
            arch,
            config: Config::Defconfig,
            command: cmd.map(String::from),
            root: root.to_path_buf(),
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
        let img = b.build("0123456789abcdef").unwrap().unwrap();
        assert_eq!(std::fs::read_to_string(&img).unwrap(), "image\n");
        assert_eq!(b.build("0123456789abcdef").unwrap().unwrap(), img);
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
        let why = bad.build("fedcba9876543210").unwrap().unwrap_err();
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
             bzImage:\n\tmkdir -p $(O)/arch/x86/boot && echo \"kernel of $(ARCH)\" > $(O)/arch/x86/boot/bzImage\n",
        )
        .unwrap();
        let config = repo.path().join("my.config");
        std::fs::write(&config, "CONFIG_X=y\n").unwrap();
        let mut b = builder(root.path(), repo.path(), Arch::X86_64, None);
        b.config = Config::File(config);
        if Arch::host() != Some(Arch::X86_64) {
            return; // the stand-in has no cross compiler to name
        }
        let img = b.build("00000000000000000001").unwrap().unwrap();
        assert_eq!(std::fs::read_to_string(&img).unwrap(), "kernel of x86_64\n");
        let cfg = std::fs::read_to_string(img.with_file_name(".config")).unwrap();
        assert_eq!(cfg, "CONFIG_X=y\nolddefconfig x86_64\n");
        // Nothing was written into the tree itself.
        let mut files: Vec<_> = std::fs::read_dir(repo.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        assert_eq!(files, ["Makefile", "my.config"]);
        b.config = Config::Defconfig;
        let img = b.build("00000000000000000002").unwrap().unwrap();
        let cfg = std::fs::read_to_string(img.with_file_name(".config")).unwrap();
        assert!(cfg.ends_with("defconfig x86_64\n"), "{cfg}");
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
