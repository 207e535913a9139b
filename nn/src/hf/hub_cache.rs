//! Models a user downloaded with Hugging Face's tools, found by their Hub id (`org/name`) in the
//! local cache the way transformers looks for them: `HF_HUB_CACHE`, else `HF_HOME/hub`, else
//! `XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`.

use std::path::{Path, PathBuf};

/// The Hugging Face cache folders to look in, the first that transformers would use first.
fn cache_roots() -> Vec<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let mut roots = Vec::new();
    roots.extend(var("HF_HUB_CACHE"));
    roots.extend(var("HF_HOME").map(|home| home.join("hub")));
    roots.extend(var("XDG_CACHE_HOME").map(|cache| cache.join("huggingface").join("hub")));
    roots.extend(var("HOME").map(|home| home.join(".cache").join("huggingface").join("hub")));
    roots
}

/// True when `spec` reads as a Hub id: `org/name` (or a bare `name`), relative, of plain names.
fn is_hub_id(spec: &str) -> bool {
    let parts: Vec<&str> = spec.split('/').collect();
    !spec.starts_with('.')
        && parts.len() <= 2
        && parts.iter().all(|part| {
            !part.is_empty()
                && !part.starts_with('.')
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        })
}

/// The cache entry (`models--{org}--{name}`) of the Hub id `spec`, where `spec` is not an
/// existing path but a Hub id that one of the cache folders holds.
pub fn cached_model(spec: &Path) -> Option<PathBuf> {
    let text = spec.to_str()?;
    if spec.exists() || !is_hub_id(text) {
        return None;
    }
    let entry = format!("models--{}", text.replace('/', "--"));
    cache_roots()
        .into_iter()
        .map(|root| root.join(&entry))
        .find(|dir| dir.join("snapshots").is_dir())
}

#[cfg(test)]
mod tests {
    use super::is_hub_id;

    #[test]
    fn hub_ids_are_told_from_paths() {
        for id in [
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            "gpt2",
            "Qwen/Qwen2.5-0.5B",
        ] {
            assert!(is_hub_id(id), "{id}");
        }
        for path in [
            "./smol",
            "../models/smol",
            "/models/smol",
            "a/b/c",
            "org/",
            "a/../b",
        ] {
            assert!(!is_hub_id(path), "{path}");
        }
    }
}
