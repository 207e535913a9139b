//! NVRTC's PTX kept on disk, so that a machine compiles each kernel family once rather than in
//! every process: `norm.cu` alone, every row kernel in every shape and dtype, takes seconds. The
//! driver already keeps the machine code it makes of loaded PTX across processes (its JIT
//! cache), so a later process starts its kernels at once.
//!
//! The folder is `$HEADROOM_KERNEL_CACHE`, else `$XDG_CACHE_HOME/headroom/kernels`, else
//! `$HOME/.cache/headroom/kernels`; `HEADROOM_KERNEL_CACHE=off` turns the cache off. An entry is
//! named by its family's file and a hash of all that shapes the PTX (the source, NVRTC's options
//! and version). It is written whole or not at all (a temporary file, renamed), and one that
//! does not end as the cache writes it is ignored; failing to read or write an entry only means
//! compiling again. A new Rust release may hash differently and so leave old entries unused.

use std::ffi::OsString;
use std::fs;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

/// What the cache appends to an entry's PTX (a PTX comment), to tell a whole entry.
const COMPLETE: &str = "\n// headroom: complete entry\n";

/// The cache's folder, from the environment `var` reads: `None` when it is off or no folder can
/// be named.
pub(crate) fn folder(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|value| !value.is_empty());
    if let Some(folder) = set("HEADROOM_KERNEL_CACHE") {
        return (folder != "off").then(|| PathBuf::from(folder));
    }
    let base = set("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| set("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(base.join("headroom").join("kernels"))
}

/// The entry in `folder` for the PTX NVRTC makes of `source` with `options`, for family file
/// `file` (`norm.cu`), by NVRTC `version`.
pub(crate) fn entry(
    folder: &Path,
    file: &str,
    source: &str,
    options: &[String],
    version: (i32, i32),
) -> PathBuf {
    let mut hasher = DefaultHasher::new();
    (source, options, version).hash(&mut hasher);
    folder.join(format!("{file}-{:016x}.ptx", hasher.finish()))
}

/// The PTX of a whole entry at `path`, if there is one.
pub(crate) fn load(path: &Path) -> Option<String> {
    let mut ptx = fs::read_to_string(path).ok()?;
    let whole = ptx.len().checked_sub(COMPLETE.len())?;
    if !ptx.ends_with(COMPLETE) {
        return None;
    }
    ptx.truncate(whole);
    Some(ptx)
}

/// Writes `ptx` as the entry at `path`, whole or not at all; a failure leaves no entry.
pub(crate) fn store(path: &Path, ptx: &str) {
    let (Some(folder), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let mut temporary = OsString::from(".");
    temporary.push(name);
    temporary.push(format!(".{}", std::process::id()));
    let temporary = folder.join(temporary);
    let written = fs::create_dir_all(folder)
        .and_then(|()| fs::write(&temporary, [ptx, COMPLETE].concat()))
        .and_then(|()| fs::rename(&temporary, path));
    if written.is_err() {
        // Whatever was written stays unused; nothing else depends on it.
        let _ = fs::remove_file(&temporary);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let pairs: Vec<(String, OsString)> = pairs
            .iter()
            .map(|&(name, value)| (name.to_owned(), value.into()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn the_folder_follows_the_environment_and_can_be_turned_off() {
        let home = vars(&[("HOME", "/h")]);
        assert_eq!(
            folder(home),
            Some(PathBuf::from("/h/.cache/headroom/kernels"))
        );
        let xdg = vars(&[("HOME", "/h"), ("XDG_CACHE_HOME", "/x")]);
        assert_eq!(folder(xdg), Some(PathBuf::from("/x/headroom/kernels")));
        let own = vars(&[("HOME", "/h"), ("HEADROOM_KERNEL_CACHE", "/k")]);
        assert_eq!(folder(own), Some(PathBuf::from("/k")));
        assert_eq!(
            folder(vars(&[("HOME", "/h"), ("HEADROOM_KERNEL_CACHE", "off")])),
            None
        );
        assert_eq!(folder(vars(&[("HOME", "")])), None);
        assert_eq!(folder(vars(&[])), None);
    }

    #[test]
    fn an_entry_is_named_by_everything_that_shapes_the_ptx() {
        let options = ["--gpu-architecture=compute_90".to_owned()];
        let named = |source: &str, options: &[String], version| {
            entry(Path::new("/c"), "norm.cu", source, options, version)
        };
        let first = named("a", &options, (13, 0));
        assert!(first.starts_with("/c"));
        assert!(first.to_string_lossy().contains("norm.cu-"));
        assert_eq!(first, named("a", &options, (13, 0)));
        assert_ne!(first, named("b", &options, (13, 0)));
        assert_ne!(
            first,
            named("a", &["--gpu-architecture=compute_75".to_owned()], (13, 0))
        );
        assert_ne!(first, named("a", &options, (13, 1)));
    }

    #[test]
    fn entries_are_read_back_whole_and_anything_else_is_ignored() {
        let folder =
            std::env::temp_dir().join(format!("headroom-ptx-cache-{}", std::process::id()));
        let path = folder.join("norm.cu-0.ptx");
        assert_eq!(load(&path), None);
        store(&path, ".version 9.0\n.entry k()\n{\n}\n");
        assert_eq!(
            load(&path).as_deref(),
            Some(".version 9.0\n.entry k()\n{\n}\n")
        );
        // Cut short, as a crash in the middle of a copy would leave it.
        let whole = fs::read_to_string(&path).unwrap();
        fs::write(&path, &whole[..whole.len() - 3]).unwrap();
        assert_eq!(load(&path), None);
        fs::write(&path, "").unwrap();
        assert_eq!(load(&path), None);
        // No temporary file is left behind.
        assert_eq!(fs::read_dir(&folder).unwrap().count(), 1);
        fs::remove_dir_all(&folder).unwrap();
    }

    #[test]
    fn a_folder_that_cannot_be_made_stores_nothing_and_does_not_fail() {
        let file = std::env::temp_dir().join(format!("headroom-ptx-file-{}", std::process::id()));
        fs::write(&file, "not a folder").unwrap();
        let path = file.join("norm.cu-0.ptx");
        store(&path, "ptx");
        assert_eq!(load(&path), None);
        fs::remove_file(&file).unwrap();
    }
}
