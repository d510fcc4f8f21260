//! Sourcing guest kernels. A kernel source turns a spec a user typed
//! (`debian:6.17.13`, the path of an image) into a [`Kernel`]: an image on
//! disk, cached and verified, with its arch, sha256 and provenance. Each
//! source implements [`KernelSource`] and is listed once in [`SOURCES`];
//! nothing above this module knows which sources exist (docs/architecture.md,
//! "Kernel sources").
//!
//! The sources: Debian's prebuilt kernels (`fetch`: the archive read from the
//! system's apt sources, `sources`, fetched through a private apt state,
//! `debian`, into the cache, `cache`; specs in `spec`), kernels built from
//! the user's git tree (`tree`, built by `crate::build`) and images of the
//! user's own builds (`image`).

pub mod cache;
pub mod debian;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub mod fetch;
pub mod identity;
pub mod image;
pub mod sources;
pub mod spec;
pub mod tree;

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use serde_json::Value;

use crate::error::bail_usage;
use crate::record::Guest;
use crate::workload::Arch;
use cache::Cache;
pub use identity::{KernelId, KernelPattern};
/// The sha256 a cached or given image is checked by, for any file.
pub use image::sha256_file;
pub use spec::Version;

/// Every kernel source. A spec goes to the source whose prefix it starts
/// with; a spec with no known prefix is a path, for the source without one.
pub static SOURCES: &[&dyn KernelSource] = &[&fetch::Debian, &tree::Tree, &image::ImagePath];

/// Where kernels come from: one implementation per source.
pub trait KernelSource: Sync {
    /// The source's name, in its specs' prefix and in JSON (`debian`, `image`).
    fn name(&self) -> &'static str;
    /// The prefix of its specs (`debian:`); None for the source of paths.
    fn prefix(&self) -> Option<&'static str>;
    /// What its specs look like, for every message about a bad spec.
    fn accepted(&self) -> &'static str;
    /// A spec of this source from the text a user typed (prefix included);
    /// a usage error says what is accepted.
    fn parse(&self, text: &str) -> anyhow::Result<KernelSpec>;
    /// Check the options before anything is fetched (bad ones: usage errors).
    fn check(&self, _opts: &Options) -> anyhow::Result<()> {
        Ok(())
    }
    /// The kernel `spec` names, fetched into `cache` first when needed, verified.
    fn resolve(&self, cache: &Cache, spec: &KernelSpec, opts: &Options) -> anyhow::Result<Kernel>;
    /// Whether its kernels are built here (with `Options::config`).
    fn builds(&self) -> bool {
        false
    }
    /// The build `spec` needs before it resolves, checked out (and its
    /// series applied) for a build elsewhere, on a cluster's node; None
    /// when it needs none (built before, or a source that builds nothing).
    /// Several pending builds of one tree each get a tree of their own.
    fn pending(
        &self,
        _cache: &Cache,
        _spec: &KernelSpec,
        _opts: &Options,
    ) -> anyhow::Result<Option<crate::build::Checkout>> {
        Ok(None)
    }
    /// The git tree and revision `spec` names, for a source of tree kernels
    /// (a bisect over the tree's commits); a spec with a series is a usage
    /// error there.
    fn revision(&self, _spec: &KernelSpec) -> anyhow::Result<Option<(PathBuf, String)>> {
        Ok(None)
    }
    /// The paths of a kernel tree that differ between `base` and `head`
    /// (both this source's), when the source can tell: a patch's files.
    fn changed_files(
        &self,
        _base: &KernelSpec,
        _head: &KernelSpec,
    ) -> anyhow::Result<Option<Vec<String>>> {
        Ok(None)
    }
    /// `spec` with the patch series `series` applied (`--series`), for a
    /// source that builds and a spec without a series of its own.
    fn with_series(&self, _spec: &KernelSpec, _series: &std::path::Path) -> Option<KernelSpec> {
        None
    }
    /// Whether a stored run of its kernels is tagged with the spec (a name
    /// that says which kernel it was; a path does not).
    fn tags_runs(&self) -> bool {
        false
    }
    /// The identity of the kernel a stored guest run booted (`arch`: the
    /// run's), when this source booted it (identity.rs).
    fn stored(&self, guest: &Guest, arch: Option<Arch>) -> Option<KernelId>;
    /// What `spec` names among stored kernels, on `arch` when the spec names
    /// none (None: any).
    fn pattern(&self, spec: &KernelSpec, arch: Option<Arch>) -> anyhow::Result<KernelPattern>;
    /// The versions it offers, for `kernel list --available`, `reproduce
    /// --kernels auto` and bisect; None for a source without a list.
    fn versions(&self) -> Option<&dyn Versions> {
        None
    }
}

/// A source that offers a list of versions.
pub trait Versions: Sync {
    /// The source's name in sentences (`Debian`).
    fn title(&self) -> &'static str;
    /// The version a spec names (no patch level: the newest of that minor).
    fn version(&self, spec: &KernelSpec) -> Version;
    /// What stays the same across a spec's versions (Debian: the flavour),
    /// and its arch (`flag` is `--arch`; a conflict is a usage error).
    fn line(&self, spec: &KernelSpec, flag: Option<Arch>) -> anyhow::Result<(String, Arch)>;
    /// `spec` at version `v`, on the same line.
    fn at(&self, spec: &KernelSpec, v: Version) -> KernelSpec;
    /// The default line at `v` (what `reproduce --kernels` takes), on `arch`
    /// when given.
    fn default_at(&self, v: Version, arch: Option<Arch>) -> KernelSpec;
    /// `spec` is on the default line and names no arch.
    fn is_default(&self, spec: &KernelSpec) -> bool;
    /// What it offers for `arch`. `recent`: a list fetched recently will do;
    /// else it is fetched again (an older one serves, with a warning, when
    /// that fails).
    fn offered(
        &self,
        cache: &Cache,
        arch: Arch,
        opts: &Options,
        recent: bool,
    ) -> anyhow::Result<Offered>;
    /// The usage error for version `v` of `line`, which `offered` lacks:
    /// it names the nearest offered.
    fn not_offered(&self, offered: &Offered, v: Version, line: &str) -> anyhow::Error;
}

/// The versions a source offers for one arch.
#[derive(Clone, Debug)]
pub struct Offered {
    pub arch: Arch,
    /// Where the list came from (Debian: the mirror).
    pub from: String,
    /// Versions per line (Debian: per flavour), each oldest first.
    pub lines: Vec<(String, Vec<Version>)>,
    /// The line `reproduce --kernels auto` takes.
    pub default_line: String,
    /// `kernel list --available`: its heading and last line.
    pub heading: String,
    pub hint: String,
    /// Fields of its JSON beside arch, mirror and flavours (Debian: suites).
    pub json: serde_json::Map<String, Value>,
}

impl Offered {
    /// The versions of `line`, oldest first.
    pub fn line(&self, line: &str) -> &[Version] {
        self.lines
            .iter()
            .find(|(l, _)| l == line)
            .map_or(&[], |(_, v)| v.as_slice())
    }
}

/// The first source that offers a list of versions: the one `reproduce
/// --kernels auto` takes its kernels from.
pub fn listing() -> &'static dyn Versions {
    SOURCES
        .iter()
        .find_map(|s| s.versions())
        .expect("a source offers versions")
}

/// Which kernels `reproduce --kernels` runs, typed by the CLI.
#[derive(Clone, Debug)]
pub enum KernelChoice {
    /// The kernels each seed's roles pick among those [`listing`] offers.
    Auto,
    /// These versions of the listing's default line, for every seed.
    Given(Vec<Version>),
}

/// How specs are resolved.
pub struct Options<'a> {
    /// `--arch`.
    pub arch: Option<Arch>,
    /// `--mirror`; else the Debian archive of the system's apt sources.
    pub mirror: Option<String>,
    /// Set on SIGINT/SIGTERM: stop between steps (the staging is removed).
    pub interrupted: &'a AtomicBool,
    /// `--config`, `--defconfig`: the kernel config a tree builds with.
    pub config: crate::build::Config,
    /// What the cells asked for need of a built kernel's config (none: no
    /// cell is known, only what booting needs is checked).
    pub needs: std::collections::BTreeSet<crate::build::kconfig::Need>,
}

/// What every kernel spec accepts, for every message about a bad one.
pub fn accepted() -> String {
    let each: Vec<&str> = SOURCES.iter().map(|s| s.accepted()).collect();
    format!("accepted: {}", each.join(" or "))
}

/// A kernel spec: which source, and its text (canonical, as the source
/// prints it).
#[derive(Clone)]
pub struct KernelSpec {
    source: &'static dyn KernelSource,
    text: String,
}

impl KernelSpec {
    /// A spec of `source` (sources build their specs with this).
    pub fn new(source: &'static dyn KernelSource, text: String) -> KernelSpec {
        KernelSpec { source, text }
    }

    /// Parse a spec: the source whose prefix it starts with parses it;
    /// anything else is a path (whether the file is a kernel is checked
    /// when it is resolved).
    pub fn parse(s: &str) -> anyhow::Result<KernelSpec> {
        let s = s.trim();
        if s.is_empty() {
            bail_usage!("empty kernel spec: {}", accepted());
        }
        if let Some(source) = SOURCES
            .iter()
            .find(|src| src.prefix().is_some_and(|p| s.starts_with(p)))
        {
            return source.parse(s);
        }
        if s.contains(':') && !s.contains('/') {
            bail_usage!("unknown kernel source in '{s}': {}", accepted());
        }
        match SOURCES.iter().find(|src| src.prefix().is_none()) {
            Some(paths) => paths.parse(s),
            None => bail_usage!("unknown kernel source in '{s}': {}", accepted()),
        }
    }

    pub fn source(&self) -> &'static dyn KernelSource {
        self.source
    }

    /// The text, as the source parses it back.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The kernel it names, fetched first when needed, verified.
    pub fn resolve(&self, cache: &Cache, opts: &Options) -> anyhow::Result<Kernel> {
        self.source.resolve(cache, self, opts)
    }

    /// The build it needs before it resolves, checked out for a build on a
    /// cluster's node (`KernelSource::pending`).
    pub fn pending(
        &self,
        cache: &Cache,
        opts: &Options,
    ) -> anyhow::Result<Option<crate::build::Checkout>> {
        self.source.pending(cache, self, opts)
    }

    /// The git tree and revision it names, when it is a tree kernel.
    pub fn revision(&self) -> anyhow::Result<Option<(PathBuf, String)>> {
        self.source.revision(self)
    }

    /// The paths of a kernel tree that differ from this kernel to `head`,
    /// when their source can tell (a tree's revisions and series).
    pub fn changed_files(&self, head: &KernelSpec) -> anyhow::Result<Option<Vec<String>>> {
        if self.source.name() != head.source.name() {
            return Ok(None);
        }
        self.source.changed_files(self, head)
    }

    /// This spec with the patch series `series` applied, when its source
    /// builds kernels and it names no series yet.
    pub fn with_series(&self, series: &std::path::Path) -> Option<KernelSpec> {
        self.source.with_series(self, series)
    }

    /// Its source's versions, when the source offers a list.
    pub fn versions(&self) -> Option<&'static dyn Versions> {
        self.source.versions()
    }
}

impl PartialEq for KernelSpec {
    fn eq(&self, other: &KernelSpec) -> bool {
        self.source.name() == other.source.name() && self.text == other.text
    }
}

impl Eq for KernelSpec {}

impl fmt::Debug for KernelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KernelSpec({}: {})", self.source.name(), self.text)
    }
}

impl fmt::Display for KernelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// One kernel, resolved: cached (fetched when it was not) and verified.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub spec: KernelSpec,
    pub arch: Arch,
    pub image: PathBuf,
    /// `debian:6.17.13 linux-image-… 6.17.13-1`, or the image's path.
    pub source: String,
    pub sha256: String,
    /// The upstream version, when known before booting (Debian's).
    pub version: Option<Version>,
    /// How it was resolved, as `kernel fetch` prints it: one line of text,
    /// and a JSON document.
    pub line: String,
    pub json: Value,
}

impl Kernel {
    /// The tag a stored run of this kernel gets (`debian:6.17.13`), when
    /// the kernel has a name worth tagging by.
    pub fn tag(&self) -> Option<String> {
        self.spec
            .source()
            .tags_runs()
            .then(|| self.spec.to_string())
    }
}
