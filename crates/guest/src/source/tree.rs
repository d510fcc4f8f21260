//! Kernels built from the user's git tree: `tree:PATH@REV`, with a patch
//! series applied on REV when the spec ends `+SERIES` (an mbox as `b4 am`
//! writes it, applied with `git am`). The tree is left as found: its
//! commits are checked out in a repository of ptelab's own under the cache
//! that borrows the tree's objects (`git clone --shared`), one per tree,
//! and built out of tree there (`crate::build`), one build directory per
//! arch and config, so that the next revision builds incrementally. Images
//! are cached by commit, series, config, arch and compiler.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::json;

use super::cache::Cache;
use super::image::sha256_file;
use super::{Kernel, KernelId, KernelPattern, KernelSource, KernelSpec, Options};
use crate::build::git::Repo;
use crate::build::{self, path_hash, short, Builder, Checkout, Config};
use crate::error::bail_usage;
use crate::record::Guest;
use crate::workload::Arch;

const PREFIX: &str = "tree:";

/// What a tree spec names: the tree, a revision, and a series to apply.
#[derive(Clone, Debug, PartialEq)]
pub struct TreeSpec {
    pub path: PathBuf,
    pub rev: String,
    pub series: Option<PathBuf>,
}

/// `~/x` as `$HOME/x`, then absolute (the shell leaves a `~` after
/// `tree:` alone).
fn expand(p: &str) -> PathBuf {
    let p = match (p.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest),
        _ => PathBuf::from(p),
    };
    std::path::absolute(&p).unwrap_or(p)
}

impl TreeSpec {
    /// `tree:PATH[@REV][+SERIES]`. REV is after the first `@` that ends a
    /// directory (a path may hold `@`, and so may a revision:
    /// `main@{u}`); it defaults to HEAD, as for a directory named whole.
    pub fn parse(text: &str) -> anyhow::Result<TreeSpec> {
        let Some(rest) = text.strip_prefix(PREFIX).filter(|r| !r.is_empty()) else {
            bail_usage!("'{text}' names no tree: {}", Tree.accepted());
        };
        let ats: Vec<usize> = rest.match_indices('@').map(|(i, _)| i).collect();
        let at = ats
            .iter()
            .copied()
            .find(|&i| expand(&rest[..i]).is_dir())
            .or(ats.first().copied());
        let (path, after) = match at {
            Some(_) if expand(rest).is_dir() => (rest, "HEAD"),
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, "HEAD"),
        };
        let (rev, series) = match after.split_once('+') {
            Some((rev, series)) => (rev, Some(series)),
            None => (after, None),
        };
        if path.is_empty() || rev.is_empty() || series.is_some_and(str::is_empty) {
            bail_usage!("'{text}' is not a tree spec: {}", Tree.accepted());
        }
        Ok(TreeSpec {
            path: expand(path),
            rev: rev.to_string(),
            series: series.map(expand),
        })
    }

    /// The canonical text: absolute paths.
    pub fn text(&self) -> String {
        let mut t = format!("{PREFIX}{}@{}", self.path.display(), self.rev);
        if let Some(s) = &self.series {
            t.push('+');
            t.push_str(&s.display().to_string());
        }
        t
    }
}

/// The tree and the commit a spec names now, and the id its image is kept
/// under: the commit, `+` the series' sha256 (12 digits) when one applies.
struct Named {
    repo: Repo,
    commit: String,
    id: String,
}

fn name(spec: &TreeSpec) -> anyhow::Result<Named> {
    let repo = Repo::open(&spec.path, PREFIX)?;
    repo.check_kernel()?;
    let commit = repo.commit("the revision", &spec.rev)?;
    let id = match &spec.series {
        None => commit.clone(),
        Some(s) => {
            if !s.is_file() {
                bail_usage!(
                    "the series {} is not a file: pass an mbox (as `b4 am` writes it) after the revision's +",
                    s.display()
                );
            }
            format!("{commit}+{}", &sha256_file(s)?[..12])
        }
    };
    Ok(Named { repo, commit, id })
}

/// The arch a tree builds for: `--arch`, else this machine's.
fn arch(opts: &Options) -> anyhow::Result<Arch> {
    match opts.arch.or_else(Arch::host) {
        Some(a) => Ok(a),
        None => bail_usage!("this host is neither x86_64 nor arm64: pass --arch x86_64|arm64"),
    }
}

/// ptelab's repository for the tree at `repo` under the builds' root.
fn own_repo(root: &Path, repo: &Path) -> PathBuf {
    root.join("src").join(path_hash(repo))
}

/// Apply `series` with `git am` on the commit checked out in `tree`.
fn apply(tree: &Repo, series: &Path, spec: &TreeSpec, commit: &str) -> anyhow::Result<()> {
    let file = series
        .to_str()
        .with_context(|| format!("{} is not a UTF-8 path", series.display()))?;
    let applied = tree.git(&[
        "-c",
        "user.name=ptelab",
        "-c",
        "user.email=ptelab@localhost",
        "am",
        "--3way",
        "--quiet",
        file,
    ]);
    if let Err(e) = applied {
        let _ = tree.git(&["am", "--abort"]);
        bail_usage!(
            "the series {} does not apply to {} ({}): {e:#}",
            series.display(),
            spec.rev,
            short(commit)
        );
    }
    Ok(())
}

/// How `named` builds for `opts`: in ptelab's repository for its tree,
/// with the config asked for; refused when that config file is missing.
fn builder(cache: &Cache, named: &Named, opts: &Options) -> anyhow::Result<Builder> {
    let arch = arch(opts)?;
    let root = build::root(&cache.root);
    if let Config::File(f) = &opts.config {
        if !f.is_file() {
            bail_usage!(
                "--config {} is not a file: pass a kernel .config",
                f.display()
            );
        }
    }
    let changes = named.repo.changes()?;
    if !changes.is_empty() && named.repo.commit("HEAD", "HEAD")? == named.commit {
        eprintln!(
            "ptelab: warning: {} has uncommitted changes, which a tree kernel does not build \
             (it builds commits): commit them to measure them",
            named.repo.dir.display()
        );
    }
    Ok(Builder {
        repo: own_repo(&root, &named.repo.dir),
        arch,
        config: opts.config.clone(),
        command: None,
        compiler: build::compiler(arch, None),
        root,
        needs: opts.needs.clone(),
    })
}

/// Check `named`'s commit out in ptelab's repository for its tree, with the
/// series applied, holding that repository's lock (waiting for another
/// ptelab that holds it). `side`: a build of another commit of the tree
/// may be pending in this process (a cluster's builds go together), so a
/// repository held already is passed over for the next, `HASH-1`, `HASH-2`…
fn checkout(
    ts: &TreeSpec,
    named: &Named,
    mut builder: Builder,
    side: bool,
) -> anyhow::Result<Checkout> {
    builder.check()?;
    let first = builder.repo.clone();
    std::fs::create_dir_all(first.parent().expect("under src/"))?;
    let mut n = 0;
    let lock = loop {
        let path = builder.repo.with_extension("lock");
        let lock =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        if lock.try_lock().is_ok() {
            break lock;
        }
        if side {
            n += 1;
            builder.repo = first.with_file_name(format!(
                "{}-{n}",
                first.file_name().expect("a name").to_string_lossy()
            ));
            continue;
        }
        eprintln!(
            "ptelab: waiting for another ptelab building {}",
            named.repo.dir.display()
        );
        lock.lock()?;
        break lock;
    };
    let tree = named.repo.borrowed(&builder.repo, &named.commit)?;
    if let Some(series) = &ts.series {
        apply(&tree, series, ts, &named.commit)?;
    }
    let head = tree.git(&["rev-parse", "HEAD"])?.trim().to_string();
    Ok(Checkout::new(head, named.id.clone(), builder).locked(lock))
}

/// The paths an mbox's patches change (`diff --git a/X b/Y`: both).
fn series_files(mbox: &str) -> Vec<String> {
    mbox.lines()
        .filter_map(|l| l.strip_prefix("diff --git a/"))
        .filter_map(|rest| rest.split_once(" b/"))
        .flat_map(|(a, b)| [a.to_string(), b.to_string()])
        .collect()
}

/// Kernels built from the user's git tree.
pub struct Tree;

impl KernelSource for Tree {
    fn name(&self) -> &'static str {
        "tree"
    }

    fn prefix(&self) -> Option<&'static str> {
        Some(PREFIX)
    }

    fn accepted(&self) -> &'static str {
        "tree:PATH@REV (a kernel git tree at a revision, built with ptelab's config; \
         tree:PATH@REV+SERIES.mbox applies a patch series on REV)"
    }

    fn parse(&self, text: &str) -> anyhow::Result<KernelSpec> {
        Ok(KernelSpec::new(&Tree, TreeSpec::parse(text)?.text()))
    }

    fn builds(&self) -> bool {
        true
    }

    fn revision(&self, spec: &KernelSpec) -> anyhow::Result<Option<(PathBuf, String)>> {
        let ts = TreeSpec::parse(spec.text())?;
        if let Some(series) = &ts.series {
            bail_usage!(
                "{spec}: a bisect runs over a tree's commits, not a series ({}): apply it on a \
                 branch (git am) and name the branch",
                series.display()
            );
        }
        Ok(Some((ts.path, ts.rev)))
    }

    fn changed_files(
        &self,
        base: &KernelSpec,
        head: &KernelSpec,
    ) -> anyhow::Result<Option<Vec<String>>> {
        let (b, h) = (TreeSpec::parse(base.text())?, TreeSpec::parse(head.text())?);
        let (nb, nh) = (name(&b)?, name(&h)?);
        if nb.repo.dir != nh.repo.dir {
            return Ok(None);
        }
        let mut files: Vec<String> = nb
            .repo
            .git(&["diff", "--name-only", &nb.commit, &nh.commit])?
            .lines()
            .map(String::from)
            .collect();
        for series in [&b.series, &h.series].into_iter().flatten() {
            files.extend(series_files(&std::fs::read_to_string(series)?));
        }
        files.sort();
        files.dedup();
        Ok(Some(files))
    }

    fn with_series(&self, spec: &KernelSpec, series: &Path) -> Option<KernelSpec> {
        let ts = TreeSpec::parse(spec.text()).ok()?;
        ts.series.is_none().then(|| {
            let with = TreeSpec {
                series: Some(expand(&series.display().to_string())),
                ..ts
            };
            KernelSpec::new(&Tree, with.text())
        })
    }

    fn resolve(&self, cache: &Cache, spec: &KernelSpec, opts: &Options) -> anyhow::Result<Kernel> {
        let ts = TreeSpec::parse(spec.text())?;
        let named = name(&ts)?;
        let builder = builder(cache, &named, opts)?;
        let (image, built) = match builder.cached(&named.id)? {
            Some(image) => (image, false),
            None => {
                let checkout = checkout(&ts, &named, builder.clone(), false)?;
                match checkout.builder.build(&named.id, opts.interrupted)? {
                    Ok(image) => (image, true),
                    Err(why) => anyhow::bail!("{spec}: {why}"),
                }
            }
        };
        let (arch, sha256, key) = (builder.arch, sha256_file(&image)?, builder.key()?);
        let subject = named.repo.subject(&named.commit).unwrap_or_default();
        let series = ts.series.as_ref().map(|s| s.display().to_string());
        let canonical = TreeSpec {
            rev: named.commit.clone(),
            ..ts.clone()
        };
        Ok(Kernel {
            line: format!(
                "{spec}: {} ({arch}, {} \"{subject}\"{}, {}, sha256 {sha256}, {})\n",
                image.display(),
                short(&named.commit),
                series
                    .as_ref()
                    .map_or(String::new(), |s| format!(" + series {s}")),
                builder.config.describe(),
                if built { "built" } else { "cached" }
            ),
            json: json!({
                "spec": spec.to_string(),
                "source": "tree",
                "tree": named.repo.dir,
                "rev": ts.rev,
                "commit": named.commit,
                "subject": subject,
                "series": series,
                "config": image.with_file_name(".config"),
                "build_key": key,
                "built": built,
                "image": image,
                "arch": arch,
                "sha256": sha256,
            }),
            spec: spec.clone(),
            arch,
            source: format!("{} {} {key}", canonical.text(), named.id),
            image,
            sha256,
            version: None,
        })
    }

    fn pending(
        &self,
        cache: &Cache,
        spec: &KernelSpec,
        opts: &Options,
    ) -> anyhow::Result<Option<Checkout>> {
        let ts = TreeSpec::parse(spec.text())?;
        let named = name(&ts)?;
        let builder = builder(cache, &named, opts)?;
        if builder.image(&named.id)?.is_file() {
            return Ok(None);
        }
        checkout(&ts, &named, builder, true).map(Some)
    }

    fn stored(&self, guest: &Guest, arch: Option<Arch>) -> Option<KernelId> {
        let mut words = guest.kernel_source.split_whitespace();
        let spec = TreeSpec::parse(words.next()?).ok()?;
        let (id, key) = (words.next()?, words.next()?);
        let line = format!("{}@{id}", spec.path.display());
        let label = match id.split_once('+') {
            Some((c, s)) => format!("{PREFIX}{}@{}+{s}", spec.path.display(), short(c)),
            None => format!("{PREFIX}{}@{}", spec.path.display(), short(id)),
        };
        Some(KernelId {
            source: self.name(),
            key: format!("{PREFIX}{line}#{key}-{}", arch.map_or("any", |a| a.name())),
            line,
            version: None,
            arch,
            sha256: guest.kernel_sha256.clone(),
            label,
        })
    }

    fn pattern(&self, spec: &KernelSpec, arch: Option<Arch>) -> anyhow::Result<KernelPattern> {
        let ts = TreeSpec::parse(spec.text())?;
        let named = name(&ts)?;
        Ok(KernelPattern {
            source: self.name(),
            line: Some(format!("{}@{}", named.repo.dir.display(), named.id)),
            version: None,
            arch,
            sha256: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_name_a_tree_a_revision_and_a_series() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("li@nux");
        std::fs::create_dir(&tree).unwrap();
        let t = tree.display();
        let s = TreeSpec::parse(&format!("tree:{t}")).unwrap();
        assert_eq!((s.path.as_path(), s.rev.as_str()), (tree.as_path(), "HEAD"));
        // The `@` of the path is not the revision's.
        let s = TreeSpec::parse(&format!("tree:{t}@main@{{u}}+/x/s.mbox")).unwrap();
        assert_eq!(s.path, tree);
        assert_eq!(s.rev, "main@{u}");
        assert_eq!(s.series.as_deref(), Some(Path::new("/x/s.mbox")));
        assert_eq!(TreeSpec::parse(&s.text()).unwrap(), s);
        let home = std::env::var("HOME").unwrap();
        let s = TreeSpec::parse("tree:~/linux@v7.3").unwrap();
        assert_eq!(s.path, Path::new(&home).join("linux"));
        for bad in ["tree:", "tree:/x@", "tree:@v7.3", "tree:/x@v7.3+"] {
            let e = TreeSpec::parse(bad).unwrap_err();
            assert!(crate::error::is_usage(&e), "{bad}");
            assert!(e.to_string().contains("tree:PATH@REV"), "{e}");
        }
        // Through the list of sources.
        let spec = KernelSpec::parse(&format!("tree:{t}@v7.3")).unwrap();
        assert_eq!(spec.source().name(), "tree");
        assert_eq!(spec.text(), format!("tree:{t}@v7.3"));
        assert_eq!(
            spec.revision().unwrap(),
            Some((tree.clone(), "v7.3".to_string()))
        );
        // --series: the same tree and revision with the series applied; a
        // spec with a series of its own takes no other.
        let patched = spec.with_series(Path::new("/l/v2.mbox")).unwrap();
        assert_eq!(patched.text(), format!("tree:{t}@v7.3+/l/v2.mbox"));
        assert!(patched.with_series(Path::new("/l/v3.mbox")).is_none());
        assert!(crate::error::is_usage(&patched.revision().unwrap_err()));
        assert!(KernelSpec::parse("debian:6.17.13")
            .unwrap()
            .with_series(Path::new("/l/v2.mbox"))
            .is_none());
        let mbox = "Subject: [PATCH] x\n---\ndiff --git a/mm/mprotect.c b/mm/mprotect.c\n\
                    index 1..2\ndiff --git a/arch/x86/a.h b/arch/x86/b.h\n";
        assert_eq!(
            series_files(mbox),
            [
                "mm/mprotect.c",
                "mm/mprotect.c",
                "arch/x86/a.h",
                "arch/x86/b.h"
            ]
        );
    }
}

/// A tree source's whole path on a stand-in kernel tree whose Makefile
/// does what the kernel's does for a build (the config targets write
/// `.config` in `O`, `bzImage` writes an image of the checked-out source):
/// built once per commit and series, cached, and the tree left as found.
#[cfg(test)]
mod built {
    use std::process::Command;

    use super::*;
    use crate::build::git::fixture::sh;
    use crate::build::kconfig;
    use crate::record::Accel;

    /// A kernel-looking tree with two commits of `mm/mm.c`; its defconfig
    /// holds every option the fragment needs.
    fn stand_in() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let mut head = vec![0u8; 0x206];
        head[0x202..].copy_from_slice(b"HdrS");
        std::fs::write(d.path().join("head.bin"), head).unwrap();
        let defconfig = kconfig::config_lines(Arch::X86_64, kconfig::Section::ALL);
        std::fs::write(d.path().join("defconfig.txt"), defconfig).unwrap();
        std::fs::write(
            d.path().join("Makefile"),
            "VERSION = 7\nPATCHLEVEL = 3\n\
             defconfig:\n\tcp defconfig.txt $(O)/.config\n\
             olddefconfig:\n\t@true\n\
             savedefconfig:\n\tcp $(O)/.config $(O)/defconfig\n\
             bzImage:\n\tmkdir -p $(O)/arch/x86/boot\n\t@echo '  CC      mm/mm.o'\n\
             \tcat head.bin mm/mm.c > $(O)/arch/x86/boot/bzImage\n",
        )
        .unwrap();
        sh(
            d.path(),
            "git init -q -b main . && touch Kconfig && mkdir arch mm && touch arch/.keep",
        );
        sh(
            d.path(),
            "echo 'int v = 0;' > mm/mm.c && git add -A && git commit -qm base",
        );
        sh(
            d.path(),
            "echo 'int v = 1;' > mm/mm.c && git commit -qam 'mm: one'",
        );
        d
    }

    fn opts(interrupted: &std::sync::atomic::AtomicBool, config: Config) -> Options<'_> {
        Options {
            arch: Some(Arch::X86_64),
            mirror: None,
            interrupted,
            config,
            needs: Default::default(),
        }
    }

    #[test]
    fn a_tree_builds_each_revision_and_series_once_and_is_left_as_found() {
        let host_tools = ["git", "make", "flex", "bison", "bc"].iter().all(|t| {
            Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .output()
                .is_ok_and(|o| o.status.success())
        });
        if Arch::host() != Some(Arch::X86_64) || !host_tools {
            eprintln!("skipped: needs an x86-64 host with git, make, flex, bison and bc (./setup)");
            assert!(std::env::var_os("CI").is_none(), "CI runs ./setup");
            return;
        }
        let tree = stand_in();
        let t = tree.path();
        let refs = sh(
            t,
            "git for-each-ref; git worktree list --porcelain; git rev-parse HEAD",
        );
        let cache = tempfile::tempdir().unwrap();
        let cache = Cache {
            root: cache.path().to_path_buf(),
        };
        let never = std::sync::atomic::AtomicBool::new(false);
        let o = opts(&never, Config::Ptelab);
        let resolve = |text: &str, o: &Options| KernelSpec::parse(text).unwrap().resolve(&cache, o);
        let image_text = |k: &Kernel| {
            String::from_utf8_lossy(&std::fs::read(&k.image).unwrap()[0x206..]).to_string()
        };

        let base = resolve(&format!("tree:{}@HEAD~1", t.display()), &o).unwrap();
        assert_eq!(image_text(&base), "int v = 0;\n");
        assert_eq!(base.arch, Arch::X86_64);
        assert_eq!(base.json["built"], true);
        let head = resolve(&format!("tree:{}", t.display()), &o).unwrap();
        assert_eq!(image_text(&head), "int v = 1;\n");
        // Built once: the second time it is the cache's.
        let again = resolve(&format!("tree:{}@main~1", t.display()), &o).unwrap();
        assert_eq!(
            (again.image.clone(), again.json["built"].clone()),
            (base.image.clone(), false.into())
        );
        // The image's config is the fragment on the defconfig.
        let config = std::fs::read_to_string(base.image.with_file_name(".config")).unwrap();
        assert!(config.contains("# CONFIG_NET is not set"), "{config}");

        // A series from the list, applied on the base.
        let lists = tempfile::tempdir().unwrap();
        let mbox = lists.path().join("v1-mm-two.mbox");
        sh(t, &format!(
            "git checkout -q -b side main~1 && echo 'int v = 2;' > mm/mm.c && git commit -qam 'mm: two' \
             && git format-patch -q -1 --stdout > {} && git checkout -q main && git branch -q -D side",
            mbox.display()
        ));
        let patched = resolve(
            &format!("tree:{}@HEAD~1+{}", t.display(), mbox.display()),
            &o,
        )
        .unwrap();
        assert_eq!(image_text(&patched), "int v = 2;\n");
        assert_ne!(patched.image, base.image);
        assert!(patched.line.contains("+ series"), "{}", patched.line);
        // On HEAD it does not apply: refused, naming the series.
        let e = resolve(&format!("tree:{}@HEAD+{}", t.display(), mbox.display()), &o).unwrap_err();
        assert!(crate::error::is_usage(&e));
        assert!(e.to_string().contains("does not apply"), "{e}");

        // The patch's files: between two revisions, and a series' too.
        let at = |rev: &str| KernelSpec::parse(&format!("tree:{}@{rev}", t.display())).unwrap();
        assert_eq!(
            at("HEAD~1").changed_files(&at("HEAD")).unwrap(),
            Some(vec!["mm/mm.c".to_string()])
        );
        let with = at("HEAD~1").with_series(&mbox).unwrap();
        assert_eq!(
            at("HEAD~1").changed_files(&with).unwrap(),
            Some(vec!["mm/mm.c".to_string()])
        );
        let debian = KernelSpec::parse("debian:6.17.13").unwrap();
        assert_eq!(at("HEAD").changed_files(&debian).unwrap(), None);

        // A config that cannot boot a guest is refused before the image builds.
        let mine = cache.root.join("my.config");
        std::fs::write(&mine, "CONFIG_SMP=y\n").unwrap();
        let e = resolve(
            &format!("tree:{}", t.display()),
            &opts(&never, Config::File(mine.clone())),
        )
        .unwrap_err();
        assert!(crate::error::is_usage(&e));
        assert!(e.to_string().contains("CONFIG_BLK_DEV_INITRD"), "{e}");

        // One that boots but lacks THP builds, with a warning, for cells
        // that need no large folio; asked again for cells that do, its
        // cached image is refused, naming what they need.
        let boots = kconfig::config_lines(Arch::X86_64, &[kconfig::Section::Boot]);
        std::fs::write(&mine, boots).unwrap();
        let spec = format!("tree:{}", t.display());
        resolve(&spec, &opts(&never, Config::File(mine.clone()))).unwrap();
        let mut large = opts(&never, Config::File(mine));
        large.needs = [kconfig::Need::LargeFolios].into();
        let e = resolve(&spec, &large).unwrap_err();
        assert!(crate::error::is_usage(&e));
        assert!(
            e.to_string()
                .contains("folios above 4K need CONFIG_TRANSPARENT_HUGEPAGE"),
            "{e}"
        );

        // A stored run of it is known again by the spec.
        let guest = Guest::new(Accel::Tcg, "QEMU 7.2", &head.source, &head.sha256);
        let id = Tree.stored(&guest, Some(Arch::X86_64)).unwrap();
        assert_eq!(id.source, "tree");
        let spec = KernelSpec::parse(&format!("tree:{}@main", t.display())).unwrap();
        assert!(Tree
            .pattern(&spec, Some(Arch::X86_64))
            .unwrap()
            .matches(&id));
        let other = KernelSpec::parse(&format!("tree:{}@main~1", t.display())).unwrap();
        assert!(!Tree.pattern(&other, None).unwrap().matches(&id));
        assert!(
            id.label.starts_with("tree:") && id.label.len() < t.display().to_string().len() + 20,
            "{}",
            id.label
        );

        // The user's tree: same refs, work trees and HEAD, nothing changed.
        assert_eq!(
            sh(
                t,
                "git for-each-ref; git worktree list --porcelain; git rev-parse HEAD"
            ),
            refs
        );
        assert_eq!(sh(t, "git status --porcelain"), "");
        assert!(!t.join(".config").exists());
    }
}
